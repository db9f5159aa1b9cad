"""Request bodies in any form the API accepts, as the plain object a view validates.

JSON is what our client and the dashboard send. The original platform's client sends
`application/x-www-form-urlencoded` bodies (and `requests` sends multipart when files are
involved), where every value is a string and a key could repeat. A form body becomes a dict
of strings here, so the same validation and the same error shapes apply to both: the
serializers and the metric ingest already accept numeric and boolean strings.
"""

from __future__ import annotations

from typing import Any

from django.http import QueryDict
from rest_framework.request import Request

from mlbench_master.api.errors import invalid


def body(request: Request) -> Any:
    """The request's body: JSON as parsed, a form as {field: string} without empty fields.

    A field given twice or a file upload is refused with a 400 naming it, rather than
    silently keeping one value.
    """
    data = request.data
    if not isinstance(data, QueryDict):
        return data
    files = getattr(request, "FILES", None) or {}
    for name in files:
        raise invalid(name, "file uploads are not accepted; send the value as a form field")
    plain: dict[str, str] = {}
    for name, values in data.lists():
        if len(values) != 1:
            raise invalid(name, f"given {len(values)} times; give it once")
        if values[0] != "":  # a form cannot send null: an empty field means "not given"
            plain[name] = values[0]
    return plain
