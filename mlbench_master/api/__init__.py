"""The master's data model and REST API (Django app label `api`)."""
