"""Talking to the master: the `Master` the commands call, the errors they raise, exit codes.

Why a module of its own: every command goes through the REST API (`ApiClient`), and every
way that can fail (not reachable, token refused, no such run, another run active, the master
failing, input refused) must turn into one message that says what to do and one exit code.
That mapping lives here and nowhere else.

Exit codes (also in docs/cli.rst):
  0 success · 1 the run ended FAILED or CANCELLED · 2 bad command line or input refused by
  the master (400) · 3 master not reachable / not running · 4 token missing or refused ·
  5 no such run · 6 another run is active (409) · 7 the master failed (5xx) · 8 a cloud
  provider refused or failed (`mlbench cluster`)
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlparse

import requests

from mlbench_worker.client.api import ApiClient, default_token, default_url
from mlbench_worker.shared.home import mlbench_home

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_AUTH = 4
EXIT_NOT_FOUND = 5
EXIT_CONFLICT = 6
EXIT_SERVER = 7
EXIT_CLUSTER = 8

# The states in which a run has ended (the API's `state` field).
FINAL_STATES = ("FINISHED", "FAILED", "CANCELLED")


class CliError(Exception):
    """An error for the user: the message says what happened and what to do."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class Master:
    """The master as the CLI sees it: URL, token, and calls that fail with a useful message."""

    def __init__(self, url: str | None, token: str | None) -> None:
        url = url or default_url()
        if not url:
            raise CliError(
                "no master configured: start one on this machine with `mlbench up`, "
                "or point at a running one with MLBENCH_URL=http://HOST:PORT",
                EXIT_UNREACHABLE,
            )
        self.client = ApiClient(url=url, in_cluster=False, token=token or default_token(url))
        self.url = self.client.endpoint

    def call(
        self, method: str, *args: Any, allow: tuple[int, ...] = (), **kwargs: Any
    ) -> requests.Response:
        """The master's answer; CliError for an error status not in `allow`."""
        try:
            response = getattr(self.client, method)(*args, **kwargs).result()
        except requests.ConnectionError as exc:
            raise CliError(
                f"cannot reach the master at {self.url}: start it with `mlbench up` "
                "(or set MLBENCH_URL to where it runs)",
                EXIT_UNREACHABLE,
            ) from exc
        except requests.Timeout as exc:
            raise CliError(
                f"the master at {self.url} did not answer in time: check `mlbench status`",
                EXIT_UNREACHABLE,
            ) from exc
        if response.status_code >= 400 and response.status_code not in allow:
            raise self._error(response)
        return response

    def json(self, method: str, *args: Any, **kwargs: Any) -> Any:
        response = self.call(method, *args, **kwargs)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise CliError(
                f"the master at {self.url} answered with something that is not JSON "
                f"(HTTP {response.status_code}): is MLBENCH_URL pointing at mlbench?",
                EXIT_SERVER,
            ) from exc

    def _error(self, response: requests.Response) -> CliError:
        detail = _error_detail(response)
        status = response.status_code
        if status in (401, 403):
            has_token = bool(self.client.token)
            fix = (
                "the token was refused: set MLBENCH_TOKEN to a valid API token"
                if has_token
                else "no API token: set MLBENCH_TOKEN (the embedded master writes its "
                "token to MLBENCH_HOME/token)"
            )
            return CliError(f"{fix} ({status}: {detail})", EXIT_AUTH)
        if status == 404:
            return CliError(not_found(response.url or "", detail), EXIT_NOT_FOUND)
        if status == 409:
            return CliError(
                f"{detail}; wait for it to end or stop it with `mlbench delete RUN`",
                EXIT_CONFLICT,
            )
        if status >= 500:
            return CliError(
                f"the master failed (HTTP {status}): {detail}; see its log "
                f"({mlbench_home() / 'logs'} for the embedded master)",
                EXIT_SERVER,
            )
        return CliError(f"the master refused the request (HTTP {status}): {detail}", EXIT_USAGE)


# What a 404 is about, from the path asked for: /api/runs/<id>/..., /api/series/<id>/...
_ASKED = re.compile(r"/api/(?P<kind>runs|series)/(?P<id>\d+)(/|$)")
# The master's words for "the object the path names does not exist": Django's
# get_object_or_404 ("No Run matches the given query."), DRF's "Not found.", or its own
# "run 99 does not exist" (which names the object itself: a bundle of several runs).
_GENERIC = re.compile(r"^(No \w+ matches the given query|Not found|No .* found)\.?$", re.I)
_NAMED = re.compile(r"^(?P<kind>run|series) (?P<id>\d+) does not exist\.?$")
# The singular of each kind, and the command that lists them.
_KINDS = {"runs": ("run", "mlbench runs"), "series": ("series", "mlbench series")}


def not_found(url: str, detail: str) -> str:
    """A 404 said as what was asked for, with the command that lists what exists: "run 99
    does not exist (`mlbench runs` lists them)". The master's own words where they say more
    than that (a part of a run that is missing), with where to look."""
    asked = _ASKED.search(urlparse(url).path)
    named = _NAMED.match(detail.strip())
    if named:
        kind = "series" if named["kind"] == "series" else "runs"
        return f"{named['kind']} {named['id']} does not exist (`{_KINDS[kind][1]}` lists them)"
    kind = asked["kind"] if asked else "runs"
    noun, listing = _KINDS[kind]
    if asked and (not detail or _GENERIC.match(detail.strip())):
        return f"{noun} {asked['id']} does not exist (`{listing}` lists them)"
    return f"not found: {detail}; `{listing}` lists the {kind}"


def _error_detail(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:300] or response.reason
    return _flatten(body)


def _flatten(body: Any, prefix: str = "") -> str:
    """A DRF-style error body ({"field": ["problem"]}, {"detail": ...}) as one line."""
    if isinstance(body, dict):
        if "detail" in body and len(body) <= 2:
            return _flatten(body["detail"], prefix)
        if "message" in body and isinstance(body["message"], str):
            return body["message"]
        parts = []
        for key, value in body.items():
            name = f"{prefix}{key}"
            parts.append(
                _flatten(value, name + ".")
                if isinstance(value, dict)
                else f"{name}: {_flatten(value)}"
            )
        return "; ".join(parts)
    if isinstance(body, list):
        return " ".join(_flatten(v, prefix) for v in body)
    return str(body)
