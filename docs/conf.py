"""Sphinx configuration for the mlbench manual."""

project = "mlbench"
author = "the mlbench developers"
copyright = "2026, the mlbench developers"
extensions: list[str] = []
exclude_patterns = ["_build"]
html_theme = "alabaster"
