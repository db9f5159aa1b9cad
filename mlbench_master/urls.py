"""URL routes of the master."""

urlpatterns: list = []
