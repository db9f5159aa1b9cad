"""Plain helpers every room may use: they import nothing of the project (a test holds it)."""
