"""A serializer's output loop that passes plain column values through as they are.

Why: DRF looks up and converts every field of every object one call at a time; a list of
10,000 runs (GET /api/runs/) spent about a third of its time there (issue 49). A value that
already has the exact type its field would make of it (a str for a CharField, an int, a
float, a bool) comes out unchanged, so copying it gives DRF's answer; any other value,
None and every other kind of field go through DRF's own steps.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.fields import SkipField
from rest_framework.relations import PKOnlyObject

# The fields whose to_representation returns a value of this exact type unchanged.
UNCHANGED = {
    serializers.CharField: str,
    serializers.ChoiceField: str,
    serializers.IntegerField: int,
    serializers.FloatField: float,
    serializers.BooleanField: bool,
}


class PlainFieldsMixin:
    """Mix into a Serializer (before it) to use the faster loop."""

    _plan: list[tuple[str, serializers.Field, type | None]] | None = None

    def to_representation(self, instance: Any) -> dict[str, Any]:
        ret: dict[str, Any] = {}
        for name, field, kind in self._fields_plan():
            if kind is not None:
                value = getattr(instance, name, None)
                if type(value) is kind:
                    ret[name] = value
                    continue
            try:  # DRF's Serializer.to_representation, field by field
                attribute = field.get_attribute(instance)
            except SkipField:
                continue
            none = attribute.pk if isinstance(attribute, PKOnlyObject) else attribute
            ret[name] = None if none is None else field.to_representation(attribute)
        return ret

    def _fields_plan(self) -> list[tuple[str, serializers.Field, type | None]]:
        """Each readable field, with the type a plain attribute of its name passes through
        as (None: always DRF's steps); made once per serializer."""
        if self._plan is None:
            self._plan = [
                (
                    f.field_name,
                    f,
                    UNCHANGED.get(type(f)) if f.source_attrs == [f.field_name] else None,
                )
                for f in self._readable_fields  # type: ignore[attr-defined]
            ]
        return self._plan
