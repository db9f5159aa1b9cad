"""A local stand-in for Google Kubernetes Engine's v1 REST API and Google's OAuth2 token
endpoint, so the GKE provider is tested through the real client libraries
(google-cloud-container over REST, google-auth) without a Google account.

Why a server rather than mocks: what must be right is what goes over the wire (paths,
JSON bodies, the signed credentials) and how the libraries turn Google's answers,
errors included, into objects and exceptions. So this answers HTTP as Google documents
it and records every request for the tests to read.

What it follows (the JSON shapes of projects.locations.clusters create/get/delete and
projects.locations.operations get, from cloud.google.com/kubernetes-engine/docs/reference/
rest/v1; the error texts from what users have pasted of GKE's answers):
- POST .../clusters answers an Operation (status RUNNING, operationType CREATE_CLUSTER);
  the operation turns DONE after `polls` reads of it or of its cluster, and the cluster
  goes PROVISIONING -> RUNNING (or ERROR with `fail_operation`).
- A name already taken: 409 ALREADY_EXISTS "Already exists: projects/P/zones/Z/clusters/N."
- Quota: GKE answers 403 with status PERMISSION_DENIED and "Insufficient regional quota
  to satisfy request: resource \"CPUS\": ..." (not 429 RESOURCE_EXHAUSTED, which is what
  Compute Engine's per-minute rate limits use); `quota` = 403 does that, `quota` = 429
  the RESOURCE_EXHAUSTED form.
- An unknown machine type: 400 INVALID_ARGUMENT 'Invalid machine type "X" in zone "Z":
  GCE_NOT_FOUND.'
- A missing permission: 403 PERMISSION_DENIED 'Required "container.clusters.create"
  permission(s) for "projects/P".'
- Unknown cluster or operation: 404 NOT_FOUND "Not found: projects/P/zones/Z/clusters/N."
- Credentials: /token takes a service account's signed JWT (RFC 7523 grant) and answers
  {"access_token", "expires_in", "token_type"}; API calls must carry either a token it
  issued or a self-signed JWT (which google-cloud-python sends for service accounts,
  AIP-4111), the signature checked with the key's public half. Otherwise 401.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIFAKEGKECA\n-----END CERTIFICATE-----\n"
GOOGLE_TOKEN_URI = "https://oauth2.googleapis.com/token"
KNOWN_MACHINE_TYPES = {"e2-standard-4", "e2-standard-8", "n1-standard-4", "n1-standard-8"}
# The numbers of the enums in the answers, for clients that ask for `enum-encoding=int`
# (the REST transport of google-cloud-container does): from GKE's v1 protos.
ENUMS = {
    "status": {"PROVISIONING": 1, "RUNNING": 2, "DONE": 3, "STOPPING": 4, "ERROR": 5},
    "operationType": {"CREATE_CLUSTER": 1, "DELETE_CLUSTER": 2},
}
PATH = re.compile(
    r"^/v1/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/"
    r"(?P<kind>clusters|operations)(?:/(?P<name>[^/]+))?$"
)


@dataclass
class Request:
    method: str
    path: str
    query: str
    body: Any
    authorization: str


@dataclass
class Operation:
    json: dict[str, Any]
    polls_left: int
    cluster_key: tuple[str, str, str]
    error: str = ""


@dataclass
class FakeGke:
    """The fake's state; tests set the knobs (`polls`, `quota`, `denied`,
    `fail_operation`) and read `requests` and `issued`."""

    public_key: rsa.RSAPublicKey
    client_email: str
    polls: int = 2  # reads before an operation is DONE
    quota: int = 0  # 403 or 429: the next create fails for quota
    denied: bool = False  # creates fail for want of container.clusters.create
    fail_operation: str = ""  # the next create's operation ends with this error
    requests: list[Request] = field(default_factory=list)
    issued: dict[str, float] = field(default_factory=dict)  # access token -> expiry
    clusters: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    operations: dict[tuple[str, str, str], Operation] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def api_requests(self) -> list[Request]:
        return [r for r in self.requests if r.path.startswith("/v1/")]

    # -- credentials -------------------------------------------------------------------

    def verify_jwt(self, token: str) -> dict[str, Any] | None:
        """The JWT's claims if the service account's key signed it, else None."""
        try:
            head, body, sig = token.split(".")
            self.public_key.verify(
                _unb64(sig), f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256()
            )
            claims = json.loads(_unb64(body))
        except Exception:
            return None
        if claims.get("iss") != self.client_email or claims.get("exp", 0) < time.time():
            return None
        return claims

    def authorized(self, header: str) -> bool:
        if not header.startswith("Bearer "):
            return False
        token = header[len("Bearer ") :]
        if self.issued.get(token, 0) > time.time():
            return True
        claims = self.verify_jwt(token)
        return bool(claims) and "cloud-platform" in str(claims.get("scope", ""))

    def issue(self, form: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        grant = form.get("grant_type", [""])[0]
        claims = self.verify_jwt(form.get("assertion", [""])[0])
        if grant != "urn:ietf:params:oauth:grant-type:jwt-bearer" or claims is None:
            return 400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
        # google-auth names Google's token endpoint as the audience whatever token_uri says
        if claims.get("aud") not in (GOOGLE_TOKEN_URI, self.url + "/token"):
            return 400, {"error": "invalid_grant", "error_description": "Invalid audience."}
        token = f"ya29.fake-{next(self._ids)}"
        self.issued[token] = time.time() + 3599
        return 200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"}

    # -- the API -----------------------------------------------------------------------

    def handle(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        match = PATH.match(path)
        if not match:
            return _error(404, "NOT_FOUND", f"Not found: {path}")
        project, location, kind, name = match.group("project", "location", "kind", "name")
        if kind == "operations" and method == "GET" and name:
            return self._get_operation((project, location, name))
        if kind == "clusters" and method == "POST" and not name:
            return self._create(project, location, (body or {}).get("cluster") or {})
        if kind == "clusters" and name and method in ("GET", "DELETE"):
            key = (project, location, name)
            if key not in self.clusters:
                return _error(404, "NOT_FOUND", f"Not found: {_cluster_path(*key)}.")
            if method == "GET":
                self._advance(key)
                return 200, self.clusters[key]
            return self._delete(key)
        return _error(404, "NOT_FOUND", f"Method not found: {method} {path}")

    def _create(self, project: str, location: str, cluster: dict[str, Any]) -> tuple[int, dict]:
        name = cluster.get("name", "")
        key = (project, location, name)
        if self.denied:
            msg = f'Required "container.clusters.create" permission(s) for "projects/{project}".'
            return _error(403, "PERMISSION_DENIED", msg)
        if key in self.clusters:
            return _error(409, "ALREADY_EXISTS", f"Already exists: {_cluster_path(*key)}.")
        pools = cluster.get("nodePools") or [{}]
        machine = (pools[0].get("config") or {}).get("machineType", "e2-medium")
        if machine not in KNOWN_MACHINE_TYPES:
            msg = f'Invalid machine type "{machine}" in zone "{location}": GCE_NOT_FOUND.'
            return _error(400, "INVALID_ARGUMENT", msg)
        if self.quota:
            code, self.quota = self.quota, 0
            if code == 429:
                return _error(429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'CPUS'.")
            msg = (
                'Insufficient regional quota to satisfy request: resource "CPUS": request '
                "requires '16.0' and is short '8.0'. project has a quota of '8.0' with '8.0' "
                "available. View and manage quotas at https://console.cloud.google.com/"
                f"iam-admin/quotas?usage=USED&project={project}."
            )
            return _error(403, "PERMISSION_DENIED", msg)
        self.clusters[key] = {
            **cluster,
            "location": location,
            "zone": location,
            "status": "PROVISIONING",
            "endpoint": "34.118.10.7",
            "masterAuth": {"clusterCaCertificate": base64.b64encode(CA_PEM).decode()},
            "selfLink": "https://container.googleapis.com/v1/" + _cluster_path(*key),
        }
        error, self.fail_operation = self.fail_operation, ""
        return 200, self._operation(key, "CREATE_CLUSTER", error)

    def _delete(self, key: tuple[str, str, str]) -> tuple[int, dict[str, Any]]:
        self.clusters[key]["status"] = "STOPPING"
        return 200, self._operation(key, "DELETE_CLUSTER", "")

    def _operation(self, key: tuple[str, str, str], kind: str, error: str) -> dict[str, Any]:
        op_name = f"operation-{int(time.time() * 1000)}-{next(self._ids):08x}"
        project, location, name = key
        base = f"https://container.googleapis.com/v1/projects/{project}/zones/{location}"
        op = {
            "name": op_name,
            "zone": location,
            "location": location,
            "operationType": kind,
            "status": "RUNNING",
            "selfLink": f"{base}/operations/{op_name}",
            "targetLink": f"{base}/clusters/{name}",
            "startTime": _now(),
        }
        self.operations[(project, location, op_name)] = Operation(op, self.polls, key, error)
        return op

    def _get_operation(self, key: tuple[str, str, str]) -> tuple[int, dict[str, Any]]:
        op = self.operations.get(key)
        if op is None:
            return _error(404, "NOT_FOUND", f"Not found: operation {key[2]}.")
        self._advance(op.cluster_key, op)
        return 200, op.json

    def _advance(self, cluster_key: tuple[str, str, str], only: Operation | None = None) -> None:
        """One more look at a cluster or its operation: GKE's work goes on meanwhile."""
        for op in [only] if only else list(self.operations.values()):
            if op.cluster_key != cluster_key or op.json["status"] == "DONE":
                continue
            op.polls_left -= 1
            if op.polls_left > 0:
                continue
            op.json.update(status="DONE", endTime=_now())
            cluster = self.clusters.get(cluster_key)
            if op.error:
                op.json["error"] = {"code": 13, "message": op.error}
                op.json["statusMessage"] = op.error
                if cluster:
                    cluster.update(status="ERROR", statusMessage=op.error)
            elif op.json["operationType"] == "DELETE_CLUSTER":
                self.clusters.pop(cluster_key, None)
            elif cluster:
                cluster["status"] = "RUNNING"


class _Handler(BaseHTTPRequestHandler):
    fake: FakeGke

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _serve(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        auth = self.headers.get("Authorization", "")
        fake = self.fake
        with fake.lock:
            if url.path == "/token" and self.command == "POST":
                form = urllib.parse.parse_qs(raw.decode())
                fake.requests.append(Request("POST", url.path, url.query, form, auth))
                status, answer = fake.issue(form)
            else:
                body = json.loads(raw) if raw else None
                fake.requests.append(Request(self.command, url.path, url.query, body, auth))
                if not fake.authorized(auth):
                    status, answer = _error(
                        401, "UNAUTHENTICATED", "Request had invalid authentication credentials."
                    )
                else:
                    status, answer = fake.handle(self.command, url.path, body)
                    if "enum-encoding=int" in urllib.parse.unquote(url.query):
                        answer = _int_enums(answer)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _serve


class Server:
    """The fake on 127.0.0.1, a free port, in a thread; `close` stops it."""

    def __init__(self, public_key: rsa.RSAPublicKey, client_email: str) -> None:
        self.fake = FakeGke(public_key, client_email)
        handler = type("Handler", (_Handler,), {"fake": self.fake})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.fake.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return self.fake.url

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


def _int_enums(answer: dict[str, Any]) -> dict[str, Any]:
    """Operation.status (RUNNING 2, DONE 3) and Cluster.status (RUNNING 2) share numbers
    for the names used here, so one table serves both."""
    if "error" in answer and "status" not in answer:  # Google's error JSON stays as is
        return answer
    out = dict(answer)
    for key, numbers in ENUMS.items():
        if out.get(key) in numbers:
            out[key] = numbers[out[key]]
    return out


def _cluster_path(project: str, location: str, name: str) -> str:
    # GKE's messages name a zonal cluster by zones/, a regional one by locations/.
    where = "zones" if re.match(r"^[a-z]+-[a-z]+\d+-[a-z]$", location) else "locations"
    return f"projects/{project}/{where}/{location}/clusters/{name}"


def _error(code: int, status: str, message: str) -> tuple[int, dict[str, Any]]:
    return code, {"error": {"code": code, "message": message, "status": status}}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
