"""GET/POST /api/trust/ and DELETE /api/trust/<fingerprint>/: the keys whose imported results
rank here. Each test tries what a client should not get away with: a key that is not one, a
fingerprint of its own making, a change by a user who is not staff, a session without its
CSRF token, removing this installation's own key, a key nobody trusts."""

from __future__ import annotations

import base64

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from mlbench_master.api.models import TrustedKey
from mlbench_master.bundles import signing

pytestmark = pytest.mark.django_db


def new_key() -> str:
    raw = (
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    return base64.b64encode(raw).decode()


def _detail(response) -> str:
    return response.json()["detail"]


def test_own_key_is_listed_first_and_an_added_key_with_its_fingerprint(staff_api, api):
    me = signing.this_installation()
    listed = api.get("/api/trust/").json()
    assert [(k["fingerprint"], k["own"], k["name"]) for k in listed] == [
        (me.fingerprint, True, "this installation")
    ]
    key = new_key()
    # Surrounding white space (a key pasted from a page) is dropped; the fingerprint is
    # the master's, whatever the client thinks it is.
    added = staff_api.post("/api/trust/", {"key": f"  {key}\n", "name": "Lab B"}, format="json")
    assert added.status_code == 201, added.json()
    body = added.json()
    assert body["public_key"] == key and body["fingerprint"] == signing.fingerprint(key)
    assert (body["name"], body["added_by"], body["own"], body["runs"]) == (
        "Lab B",
        "root",
        False,
        0,
    )
    assert body["added_at"]
    listed = api.get("/api/trust/").json()
    assert [k["name"] for k in listed] == ["this installation", "Lab B"]
    assert TrustedKey.objects.get().fingerprint == signing.fingerprint(key)


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"name": "x"}, "key", "public key"),
        ({"key": "not base64!", "name": "x"}, "key", "not base64"),
        ({"key": base64.b64encode(b"x" * 31).decode(), "name": "x"}, "key", "32 bytes"),
        ({"key": 12345, "name": "x"}, "key", "public key"),
        ({"key": "KEY"}, "name", "whose key"),
        ({"key": "KEY", "name": "   "}, "name", "whose key"),
        ({"key": "KEY", "name": "n" * 201}, "name", "200"),
        ({"key": "KEY", "name": "x", "fingerprint": "0000:0000:0000:0000"}, "fingerprint",
         "computed by this master"),
        ({"key": "KEY", "name": "x", "trusted": True}, "trusted", "unknown field"),
    ],
)  # fmt: skip
def test_bad_input_is_a_400_naming_the_field(staff_api, body, field, words):
    key = new_key()
    body = {k: (key if v == "KEY" else v) for k, v in body.items()}
    answer = staff_api.post("/api/trust/", body, format="json")
    assert answer.status_code == 400, answer.json()
    assert _detail(answer).startswith(f"{field}: ") and words in _detail(answer), answer.json()
    assert answer.json()["errors"][field]
    assert not TrustedKey.objects.exists()


def test_own_key_and_a_key_twice_are_conflicts(staff_api):
    me = signing.this_installation()
    own = staff_api.post("/api/trust/", {"key": me.public_key, "name": "me"}, format="json")
    assert own.status_code == 409 and _detail(own).startswith("key: ")
    assert "always trusted" in _detail(own)
    assert staff_api.delete(f"/api/trust/{me.fingerprint}/").status_code == 409
    key = new_key()
    assert (
        staff_api.post("/api/trust/", {"key": key, "name": "A"}, format="json").status_code == 201
    )
    again = staff_api.post("/api/trust/", {"key": key, "name": "B"}, format="json")
    assert again.status_code == 409 and "trusted already as 'A'" in _detail(again)
    assert TrustedKey.objects.get().name == "A"


def test_remove_by_fingerprint_in_any_form_and_unknown_or_malformed_ones(staff_api):
    key = new_key()
    staff_api.post("/api/trust/", {"key": key, "name": "A"}, format="json")
    fingerprint = signing.fingerprint(key)
    unknown = staff_api.delete("/api/trust/0123:4567:89ab:cdef/")
    assert unknown.status_code == 404 and _detail(unknown).startswith("fingerprint: ")
    malformed = staff_api.delete("/api/trust/nope/")
    assert malformed.status_code == 400 and _detail(malformed).startswith("fingerprint: ")
    # Without its colons and in capitals, as a person may type it.
    gone = staff_api.delete(f"/api/trust/{fingerprint.replace(':', '').upper()}/")
    assert gone.status_code == 200 and gone.json()["fingerprint"] == fingerprint
    assert not TrustedKey.objects.exists()
    assert staff_api.delete(f"/api/trust/{fingerprint}/").status_code == 404


def test_only_staff_change_it_and_reads_follow_the_read_rule(api, anon, staff_api, settings):
    key = new_key()
    refused = api.post("/api/trust/", {"key": key, "name": "mine"}, format="json")
    assert refused.status_code == 403 and "staff" in _detail(refused)
    staff_api.post("/api/trust/", {"key": key, "name": "A"}, format="json")
    fingerprint = signing.fingerprint(key)
    assert api.delete(f"/api/trust/{fingerprint}/").status_code == 403
    # Without a token: 401 (not authenticated), never 403 (which is for a user without the right).
    assert anon.post("/api/trust/", {"key": key, "name": "x"}, format="json").status_code == 401
    assert anon.delete(f"/api/trust/{fingerprint}/").status_code == 401
    settings.MLBENCH_PUBLIC_READ = False
    assert anon.get("/api/trust/").status_code == 401
    settings.MLBENCH_PUBLIC_READ = True
    assert len(anon.get("/api/trust/").json()) == 2
    assert TrustedKey.objects.get().name == "A"


def test_a_staff_session_needs_its_csrf_token(staff_token):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(get_user_model().objects.get(username="root"))
    key = new_key()
    refused = client.post("/api/trust/", {"key": key, "name": "A"}, format="json")
    assert refused.status_code == 403 and "CSRF" in _detail(refused)
    assert not TrustedKey.objects.exists()
    client = APIClient()  # the test client skips the CSRF check: a session that sent it
    client.force_login(get_user_model().objects.get(username="root"))
    assert client.post("/api/trust/", {"key": key, "name": "A"}, format="json").status_code == 201
