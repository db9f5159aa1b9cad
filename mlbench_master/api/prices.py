"""The price table's endpoints: GET /api/prices/ for readers, and POST, PUT, PATCH,
DELETE for staff (docs/api.rst, "Prices").

Why its own module: the table is the operator's, not a run's; a run only keeps a copy of
it (results/prices.py) and what a run cost is computed in results/cost.py. Here a line
is parsed (every field named in a 400: a negative price, a missing currency or source)
and stored, nothing else.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlbench_master.api import bodies
from mlbench_master.api.errors import error_responses
from mlbench_master.api.models import NodePrice
from mlbench_master.api.permissions import PriceWriters
from mlbench_master.runs import price_table

CURRENCY = re.compile(r"^[A-Z]{3}$")
_TEXT = {
    400: "invalid input (the message names the field); nothing is stored",
    403: "only a staff user may change the price table",
    404: "no such price",
}


def _errors(*codes: int) -> dict:
    return error_responses(*codes, text=_TEXT)


class NodePriceSerializer(serializers.ModelSerializer):
    """One line of the price table: what an hour of one node of `node_kind` costs."""

    price_per_hour = serializers.DecimalField(
        max_digits=14,
        decimal_places=6,
        coerce_to_string=False,
        help_text="what one node of this kind costs per hour, 0 or more",
    )
    pricing = serializers.CharField(
        required=False,
        help_text="on-demand (default) or preemptible (spot): which price of the kind this is",
    )
    currency = serializers.CharField(
        max_length=100, help_text="the ISO 4217 code of the price's currency, e.g. USD"
    )
    source = serializers.CharField(
        max_length=500,
        allow_blank=True,  # refused by validate_source, with what to give instead
        help_text="where the price comes from: a price list's address or name",
    )
    node_kind = serializers.CharField(
        max_length=253,
        allow_blank=True,  # refused by validate_node_kind, with what to give instead
        help_text="a node's name, a machine type (n1-standard-4), a Slurm partition, or a "
        "cluster kind (local, slurm, kubernetes): docs/results.rst, 'Which price a node gets'",
    )
    as_of = serializers.DateField(help_text="the date the source gave this price (YYYY-MM-DD)")

    class Meta:
        model = NodePrice
        fields = ["id", "node_kind", "pricing", "price_per_hour", "currency", "source", "as_of",
                  "updated_at"]  # fmt: skip
        read_only_fields = ["id", "updated_at"]
        validators: list = []  # the (kind, pricing) pair is checked in validate(), by name

    # The writes themselves are runs/price_table.py's (the one writer of NodePrice).
    def create(self, validated_data: dict[str, Any]) -> NodePrice:
        return price_table.add(validated_data)

    def update(self, instance: NodePrice, validated_data: dict[str, Any]) -> NodePrice:
        return price_table.change(instance, validated_data)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields) - set(self.Meta.read_only_fields))
            if unknown:
                allowed = ", ".join(f for f in self.fields if f not in self.Meta.read_only_fields)
                raise serializers.ValidationError(
                    {k: [f"unknown field; allowed: {allowed}"] for k in unknown}
                )
        return super().to_internal_value(data)

    def validate_node_kind(self, value: str) -> str:
        value = value.strip()
        if not value:
            raise serializers.ValidationError(
                "name the kind of node: a node's name, a machine type (n1-standard-4), a Slurm "
                "partition or a cluster kind (local, slurm, kubernetes)"
            )
        return value

    def validate_pricing(self, value: str) -> str:
        choices = [c for c, _ in NodePrice.PRICINGS]
        if value not in choices:
            raise serializers.ValidationError(f"{value!r} is not one of {', '.join(choices)}")
        return value

    def validate_price_per_hour(self, value: Decimal) -> Decimal:
        if value < 0:
            raise serializers.ValidationError(f"a price per hour is 0 or more; {value} is negative")
        return value

    def validate_currency(self, value: str) -> str:
        code = value.strip().upper()
        if not CURRENCY.match(code):
            raise serializers.ValidationError(
                f"{value!r} is not a three-letter ISO 4217 currency code, e.g. USD or EUR"
            )
        return code

    def validate_source(self, value: str) -> str:
        value = value.strip()
        if not value:
            raise serializers.ValidationError(
                "say where the price comes from (a price list's address or name), so a reader "
                "can check it"
            )
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        kind = attrs.get("node_kind", getattr(self.instance, "node_kind", None))
        pricing = attrs.get("pricing", getattr(self.instance, "pricing", NodePrice.ON_DEMAND))
        if self.context.get("replacing"):  # the whole table is replaced: its caller checks
            return attrs
        twin = NodePrice.objects.filter(node_kind=kind, pricing=pricing)
        if self.instance is not None:
            twin = twin.exclude(pk=self.instance.pk)
        if twin.exists():
            raise serializers.ValidationError(
                {
                    "node_kind": [
                        f"{kind!r} already has a {pricing} price (id {twin.first().pk}); change "
                        "that one instead"
                    ]
                }
            )
        return attrs


class PriceList(APIView):
    """GET /api/prices/ (the table) and POST /api/prices/ (a new line; staff)."""

    permission_classes = [PriceWriters]

    @extend_schema(
        operation_id="prices_list",
        summary="The price table (empty by default: runs are then not priced)",
        responses={200: NodePriceSerializer(many=True), **_errors(401, 403)},
    )
    def get(self, request: Request) -> Response:
        return Response(NodePriceSerializer(NodePrice.objects.all(), many=True).data)

    @extend_schema(
        operation_id="prices_create",
        summary="Add a price (staff); runs created from now on copy it",
        request=NodePriceSerializer,
        responses={201: NodePriceSerializer, **_errors(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        parsed = NodePriceSerializer(data=bodies.body(request))
        parsed.is_valid(raise_exception=True)
        parsed.save()
        return Response(parsed.data, status=status.HTTP_201_CREATED)


class PriceDetail(APIView):
    """GET, PUT, PATCH, DELETE /api/prices/<id>/ (changes: staff). A change reaches the
    runs created after it only."""

    permission_classes = [PriceWriters]

    @extend_schema(
        operation_id="prices_retrieve",
        summary="One price",
        responses={200: NodePriceSerializer, **_errors(401, 403, 404)},
    )
    def get(self, request: Request, pk: int) -> Response:
        return Response(NodePriceSerializer(get_object_or_404(NodePrice, pk=pk)).data)

    def _change(self, request: Request, pk: int, partial: bool) -> Response:
        parsed = NodePriceSerializer(
            get_object_or_404(NodePrice, pk=pk), data=bodies.body(request), partial=partial
        )
        parsed.is_valid(raise_exception=True)
        parsed.save()
        return Response(parsed.data)

    @extend_schema(
        operation_id="prices_update",
        summary="Replace a price (staff); runs made before keep the price they copied",
        request=NodePriceSerializer,
        responses={200: NodePriceSerializer, **_errors(400, 401, 403, 404)},
    )
    def put(self, request: Request, pk: int) -> Response:
        return self._change(request, pk, partial=False)

    @extend_schema(
        operation_id="prices_partial_update",
        summary="Change fields of a price (staff); runs made before keep the price they copied",
        request=NodePriceSerializer,
        responses={200: NodePriceSerializer, **_errors(400, 401, 403, 404)},
    )
    def patch(self, request: Request, pk: int) -> Response:
        return self._change(request, pk, partial=True)

    @extend_schema(
        operation_id="prices_destroy",
        summary="Remove a price (staff); runs made before keep the price they copied",
        responses={204: None, **_errors(401, 403, 404)},
    )
    def delete(self, request: Request, pk: int) -> Response:
        price_table.remove(get_object_or_404(NodePrice, pk=pk))
        return Response(status=status.HTTP_204_NO_CONTENT)
