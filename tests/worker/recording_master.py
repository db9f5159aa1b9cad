"""A real HTTP server on loopback that answers a worker as the master would and records what
it was sent: metric batches, summaries and predictions files (the tests of the reporter's
posts and of a worker run that reports to a master)."""

from __future__ import annotations

import http.server
import json
import threading
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from mlbench_worker.shared.localhost import free_port


@dataclass
class Received:
    """One request as it arrived."""

    path: str  # without the query
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


class RecordingMaster(http.server.ThreadingHTTPServer):
    """Answers 201 to every POST, unless `answers` (a list of (status, JSON) taken one per
    predictions post, in order) says otherwise for the predictions; records every request."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.answers: list[tuple[int, dict]] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", free_port()), _Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def posted(self, kind: str) -> list[Received]:
        """The requests to paths ending in `/<kind>/` (metrics, summary, predictions)."""
        with self.lock:
            return [r for r in self.received if r.path.rstrip("/").endswith(kind)]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: RecordingMaster

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        server = self.server
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        where = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(where.query).items()}
        with server.lock:
            server.received.append(Received(where.path, query, dict(self.headers), body))
            status, answer = 201, {}
            if where.path.endswith("/predictions/") and server.answers:
                status, answer = server.answers.pop(0)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
