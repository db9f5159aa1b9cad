"""Users and their API tokens: the one place that creates or changes them."""
