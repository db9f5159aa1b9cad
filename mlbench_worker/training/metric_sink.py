"""Where metrics go: the master's REST API (batched, retried, de-duplicated) or a JSON-lines file.
Each evaluation's predictions file (prediction_sink.py) goes the same way to the master.

Points are queued by the training loop and sent by a background thread, so a slow or
restarting master never stalls training. Each point gets a uid when it is created; a batch
that fails is retried with exponential back-off carrying the same uids, so the master
(which stores uids uniquely) keeps every point exactly once even when a response was lost
after the master had stored the batch. `close()` flushes what is left, within a deadline;
it interrupts a back-off wait of the background thread, so a long outage does not delay
the end of the run by a whole back-off period, and it tries once more at the deadline.
Each outage is reported on stderr once when it begins and once when it ends.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import sys
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from urllib.parse import urlencode

from mlbench_worker.shared import metric_points

BATCH_SIZE = 200
SEND_INTERVAL = 2.0  # seconds between background sends
BACKOFF_START = 0.5
BACKOFF_MAX = 30.0
RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}
BINARY = {"Content-Type": "application/octet-stream"}


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def make_point(run_id: str | None, name: str, value: float, metadata: dict) -> dict:
    """One metric point in the shape of the metrics contract (see docs/metrics.rst)."""
    return {
        "run_id": run_id,
        "name": name,
        "value": float(value),
        "date": now_iso(),
        "cumulative": False,
        "metadata": metadata,
        "uid": uuid.uuid4().hex,
    }


class Reporter:
    """Collects points and the summary; subclasses decide where they go. Silent by default."""

    def __init__(self, run_id: str | None = None) -> None:
        self.run_id = run_id
        self._skipped: set[str] = set()

    def metric(self, name: str, value: float, **metadata: object) -> dict | None:
        """Queue one point; a NaN or infinite value (JSON cannot carry it) is skipped, said once.

        Only declared points are posted (shared/metric_points.py): an undeclared name raises
        UnknownMetric, so a misspelling fails in a test instead of leaving a chart empty."""
        metric_points.declared(name)
        if not math.isfinite(value):
            if name not in self._skipped:
                self._skipped.add(name)
                _warn(f"{name} is {value}; such values are not reported")
            return None
        point = make_point(self.run_id, name, value, dict(metadata))
        self.emit(point)
        return point

    def emit(self, point: dict) -> None:
        pass

    def summary(self, record: dict) -> None:
        pass

    def predictions(self, path: Path, dataset: str, features: int | None = None) -> None:
        """Hand over one evaluation's predictions file (shared/evaluation/predictions.py)
        for the master's evaluator; the file may be removed once this returns."""

    def model(
        self, path: Path, dataset: str, features: int | None, step: int, precision: str
    ) -> None:
        """Hand over the run's final model (ONNX) for the master's audit, after the
        predictions of the evaluation it made (`step`, evaluated in `precision`: fp32,
        tf32, fp16, bf16); the file may be removed once this returns."""

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class FileReporter(Reporter):
    """JSON lines: {"type": "metric", ...point} per point and one {"type": "summary", ...}.

    Line-buffered: each point is in the file before it is queued for the master (the file
    comes first among a TeeReporter's reporters), so a rank killed at any moment leaves a
    record of at least every point the master may have stored.
    """

    def __init__(self, path: str | Path, run_id: str | None = None) -> None:
        super().__init__(run_id)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # buffering=1: a line at a time; the file is closed in close()
        self.fh = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115

    def emit(self, point: dict) -> None:
        self.fh.write(json.dumps({"type": "metric", **point}) + "\n")

    def summary(self, record: dict) -> None:
        self.fh.write(json.dumps({"type": "summary", **record}) + "\n")
        self.fh.flush()

    def flush(self) -> None:
        self.fh.flush()

    def close(self) -> None:
        if not self.fh.closed:
            self.fh.close()


class HttpReporter(Reporter):
    """Posts JSON lists of points to <master>/api/metrics/ from a background thread, and
    each predictions file, as it is, to <master>/api/runs/<id>/predictions/ after them."""

    def __init__(
        self,
        master_url: str,
        run_id: str,
        token: str | None,
        *,
        batch_size: int = BATCH_SIZE,
        interval: float = SEND_INTERVAL,
        backoff_start: float = BACKOFF_START,
        backoff_max: float = BACKOFF_MAX,
        timeout: float = 10.0,
    ) -> None:
        import requests

        super().__init__(run_id)
        self.base = master_url.rstrip("/")
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Token {token}"
        self.batch_size = batch_size
        self.interval = interval
        self.backoff_start = backoff_start
        self.backoff_max = backoff_max
        self.timeout = timeout
        self.queue: deque[dict] = deque()
        self.files: deque[tuple[str, bytes, str]] = deque()  # (url, body, what it is)
        self.sent = 0
        self.dropped = 0
        self.files_sent = 0
        self.files_refused = 0
        self.takes_predictions = True  # False once the master has no such endpoint (404)
        self.failures = 0  # failed attempts in all
        self._failing = 0  # failed attempts since the last delivery (the current outage)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="mlbench-reporter", daemon=True)
        self._thread.start()

    def emit(self, point: dict) -> None:
        with self._lock:
            self.queue.append(point)
            if len(self.queue) >= self.batch_size:
                self._wake.set()

    def flush(self) -> None:
        self._wake.set()

    def predictions(self, path: Path, dataset: str, features: int | None = None) -> None:
        """Queue the file's bytes (read now: the file may go) for the background thread."""
        if not self.takes_predictions:
            return
        query = {"dataset": dataset} | ({"features": str(features)} if features else {})
        url = f"{self.base}/api/runs/{self.run_id}/predictions/?{urlencode(query)}"
        with self._lock:
            self.files.append((url, Path(path).read_bytes(), f"the predictions {Path(path).name}"))
        self._wake.set()

    def model(
        self, path: Path, dataset: str, features: int | None, step: int, precision: str
    ) -> None:
        """Queue the model's bytes behind the predictions, to <master>/api/runs/<id>/model/."""
        if not self.takes_predictions:
            return
        query = {"dataset": dataset} | ({"features": str(features)} if features else {})
        query |= {"step": str(step), "precision": precision}
        url = f"{self.base}/api/runs/{self.run_id}/model/?{urlencode(query)}"
        with self._lock:
            self.files.append((url, Path(path).read_bytes(), f"the model {Path(path).name}"))
        self._wake.set()

    def summary(self, record: dict) -> None:
        """POST the run summary (retried like metrics; the master stores the last one)."""
        url = f"{self.base}/api/runs/{self.run_id}/summary/"
        if not self._post(url, record, deadline=time.monotonic() + 60):  # 0: undelivered
            _warn(f"could not deliver the run summary to {url}")

    def close(self, deadline: float = 60.0) -> None:
        """Send everything still queued, giving up after `deadline` seconds."""
        self._stop.set()
        self._wake.set()
        self._thread.join()
        end = time.monotonic() + deadline
        while self.queue and time.monotonic() < end:
            if not self._send_one_batch(end):
                break
        while self.files and not self.queue and time.monotonic() < end:
            if not self._send_one_file(end):
                break
        if self.queue:
            _warn(f"{len(self.queue)} metric points could not be delivered to {self.base}")
        if self.files:
            _warn(f"{len(self.files)} predictions files could not be delivered to {self.base}")
        self.session.close()

    # --- internals ----------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            while self.queue and not self._stop.is_set():
                if not self._send_one_batch(None):
                    break
            # Files after the points: after an outage the master gets the metrics first.
            while self.files and not self._stop.is_set():
                if not self._send_one_file(None):
                    break

    def _send_one_batch(self, deadline: float | None) -> bool:
        """Send the oldest batch, retrying; False when it is still undelivered."""
        with self._lock:
            batch = [self.queue[i] for i in range(min(self.batch_size, len(self.queue)))]
        ok = bool(self._post(f"{self.base}/api/metrics/", batch, deadline))
        if ok:
            with self._lock:
                for _ in batch:
                    self.queue.popleft()
            self.sent += len(batch)
        return ok

    def _send_one_file(self, deadline: float | None) -> bool:
        """Send the oldest predictions file, retrying; False when it is still undelivered."""
        with self._lock:
            url, body, what = self.files[0]
        answer = self._post(url, None, deadline, body=body, what=what)
        if not answer:
            return False
        with self._lock:
            self.files.popleft()
        if answer < 300:
            self.files_sent += 1
        else:
            self.files_refused += 1
        if answer == 404:  # a master without the endpoint: stop asking
            self.takes_predictions = False
            with self._lock:
                self.files.clear()
            _warn(f"{self.base} takes no predictions files; the run posts no more of them")
        return True

    def _post(
        self,
        url: str,
        payload: object,
        deadline: float | None,
        *,
        body: bytes | None = None,
        what: str = "",
    ) -> int:
        """POST `payload` as JSON, or `body` as bytes (application/octet-stream), with
        exponential back-off until success, a final refusal, stop or deadline. The status of
        the master's final answer (2xx delivered, 4xx refused for good), 0 when undelivered."""
        import requests

        delay = self.backoff_start
        while True:
            try:
                if body is None:
                    resp = self.session.post(url, json=payload, timeout=self.timeout)
                else:
                    resp = self.session.post(url, data=body, headers=BINARY, timeout=self.timeout)
                if resp.status_code < 300:
                    self._delivered(url)
                    return resp.status_code
                if resp.status_code not in RETRY_STATUS:
                    # The master refused the data itself: retrying cannot help; keep going.
                    _warn(
                        f"{url} refused {what or _size(payload)}: HTTP {resp.status_code} "
                        f"{_said(resp.text)}"
                    )
                    if isinstance(payload, list):
                        self.dropped += len(payload)
                    self._delivered(url)
                    return resp.status_code
                problem = f"HTTP {resp.status_code}"
            except requests.RequestException as exc:
                problem = type(exc).__name__
            self.failures += 1
            self._failing += 1
            if deadline is None:
                if self._stop.is_set():
                    return 0
            else:
                # The last try comes at the deadline, not a whole back-off before it.
                delay = min(delay, deadline - time.monotonic())
                if delay <= 0:
                    return 0
            if self._failing == 1 or delay >= self.backoff_max:
                _warn(f"posting to {url} failed ({problem}); retrying in {delay:.1f}s")
            if deadline is None:
                self._stop.wait(delay)  # close() ends the wait: it sends what is left itself
            else:
                time.sleep(delay)
            delay = min(delay * 2, self.backoff_max)

    def _delivered(self, url: str) -> None:
        """The master answered: say so when that ends an outage."""
        if self._failing:
            _warn(f"posting to {url} works again (after {self._failing} failed attempts)")
            self._failing = 0


class TeeReporter(Reporter):
    """Sends every record to several reporters (a file and the master)."""

    def __init__(self, reporters: list[Reporter], run_id: str | None = None) -> None:
        super().__init__(run_id)
        self.reporters = reporters

    def emit(self, point: dict) -> None:
        for r in self.reporters:
            r.emit(point)

    def summary(self, record: dict) -> None:
        for r in self.reporters:
            r.summary(record)

    def predictions(self, path: Path, dataset: str, features: int | None = None) -> None:
        for r in self.reporters:
            r.predictions(path, dataset, features)

    def model(
        self, path: Path, dataset: str, features: int | None, step: int, precision: str
    ) -> None:
        for r in self.reporters:
            r.model(path, dataset, features, step, precision)

    def flush(self) -> None:
        for r in self.reporters:
            r.flush()

    def close(self) -> None:
        for r in self.reporters:
            r.close()


def make_reporter(
    master_url: str | None, run_id: str | None, token: str | None, metrics_file: str | None
) -> Reporter:
    """The reporter the options ask for (both, one, or a silent one)."""
    reporters: list[Reporter] = []
    if metrics_file:
        reporters.append(FileReporter(metrics_file, run_id))
    if master_url:
        reporters.append(HttpReporter(master_url, run_id or "", token))
    if not reporters:
        return Reporter(run_id)
    return reporters[0] if len(reporters) == 1 else TeeReporter(reporters, run_id)


def _size(payload: object) -> str:
    return f"{len(payload)} points" if isinstance(payload, list) else "the summary"


def _said(text: str) -> str:
    """What the master said in a refusal: its JSON messages joined, or the text, cut short."""
    try:
        found = json.loads(text)
    except ValueError:
        found = None
    if isinstance(found, dict) and found:
        text = "; ".join(f"{key}: {value}" for key, value in found.items())
    return text[:1000]


def _warn(message: str) -> None:
    print(f"mlbench-worker: warning: {message}", file=sys.stderr, flush=True)
