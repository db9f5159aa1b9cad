"""A client that keeps asking the master while faults happen: the health check and the list
of runs, every POLL_SECONDS, each answer (or the lack of one) recorded with its time.

What counts against the master is an answer of 500 or above other than 503 (a 503 says
"unavailable, try again", which the health check is documented to answer while the
database is down); no answer at all (refused, timed out) is what a dead or paused process
gives and is judged by how soon the health check answers 200 again.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import requests

from tests.e2e.live import LiveMaster

POLL_SECONDS = 0.5
TIMEOUT = 5.0
PATHS = ("/api/health/", "/api/runs/")


@dataclass(frozen=True)
class Poll:
    at: float  # wall clock
    path: str
    status: int | None  # None: no answer
    error: str = ""  # the exception, or the start of a 5xx body


class Poller:
    def __init__(self, master: LiveMaster) -> None:
        self.master = master
        self.polls: list[Poll] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-poller", daemon=True)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=TIMEOUT * 3)

    def _loop(self) -> None:
        session = requests.Session()
        while not self._stop.is_set():
            for path in PATHS:
                self.polls.append(self._ask(session, path))
            self._stop.wait(POLL_SECONDS)

    def _ask(self, session: requests.Session, path: str) -> Poll:
        at = time.time()
        try:
            # The token is read each time: `mlbench up` after a restart may issue a new one.
            headers = {"Authorization": f"Token {self.master.token}"}
            response = session.get(self.master.url + path, headers=headers, timeout=TIMEOUT)
        except requests.RequestException as exc:
            return Poll(at, path, None, type(exc).__name__)
        body = response.text[:300] if response.status_code >= 500 else ""
        return Poll(at, path, response.status_code, body)
