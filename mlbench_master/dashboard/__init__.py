"""The dashboard: Django templates plus small JavaScript modules that read the REST API."""
