"""The helm install's admin account follows the Secret's token and password
(`django-admin mlbench_admin`, the master pod's init step after the migrations)."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.authtoken.models import Token

from mlbench_master.api.management.commands.mlbench_admin import ensure_admin

TOKEN = "a" * 40


@pytest.mark.django_db
def test_admin_is_created_then_follows_a_changed_secret(client, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast
    ensure_admin(TOKEN, "first-password")
    user = get_user_model().objects.get(username="admin")
    assert user.is_superuser and user.check_password("first-password")
    assert Token.objects.get(user=user).key == TOKEN
    ensure_admin(TOKEN, "first-password")  # every pod start: nothing changes
    assert Token.objects.filter(user=user).count() == 1
    ensure_admin("b" * 40, "second-password")
    user.refresh_from_db()
    assert [t.key for t in Token.objects.filter(user=user)] == ["b" * 40]
    assert user.check_password("second-password")
    response = client.get(
        "/api/runs/", HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Token {'b' * 40}"
    )
    assert response.status_code == 200


def test_a_short_token_is_refused():
    with pytest.raises(ValueError, match="MLBENCH_ADMIN_TOKEN"):
        ensure_admin("short", "pw")


@pytest.mark.django_db
def test_the_command_reads_the_secret_from_the_environment(monkeypatch, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    monkeypatch.delenv("MLBENCH_ADMIN_TOKEN", raising=False)
    out, err = io.StringIO(), io.StringIO()
    call_command("mlbench_admin", stdout=out, stderr=err)
    assert "not set" in err.getvalue() and not get_user_model().objects.exists()
    monkeypatch.setenv("MLBENCH_ADMIN_TOKEN", TOKEN)
    monkeypatch.setenv("MLBENCH_ADMIN_PASSWORD", "pw")
    call_command("mlbench_admin", stdout=out, stderr=err)
    assert "matches the release's Secret" in out.getvalue()
    user = get_user_model().objects.get(username="admin")
    assert user.is_staff and user.check_password("pw")
    assert Token.objects.get(user=user).key == TOKEN
