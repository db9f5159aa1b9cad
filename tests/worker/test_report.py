"""The metric reporter against a real local HTTP server that is down, fails, then recovers."""

import http.server
import json
import subprocess
import sys
import threading
import time

from mlbench_worker.shared.localhost import free_port
from mlbench_worker.training.metric_sink import FileReporter, HttpReporter, make_reporter


class FlakyMaster(http.server.ThreadingHTTPServer):
    """Stores posted points by uid, like the master; fails the first requests on purpose."""

    def __init__(self, port):
        self.requests = []  # (path, auth header, payload) of every request that arrived
        self.stored = {}  # uid -> point (unique, as Metric.uid is)
        self.summaries = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", port), Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with server.lock:
            server.requests.append((self.path, self.headers.get("Authorization"), body))
            n = len(server.requests)
        if n <= 2:  # the master is overloaded
            return self._reply(503, {"detail": "busy"})
        if self.path.endswith("/summary/"):
            server.summaries.append(body)
            return self._reply(200, {})
        with server.lock:
            for point in body:
                server.stored.setdefault(point["uid"], point)
        if n == 3:  # stored, but the answer is lost: the client must retry the same uids
            return self._reply(500, {"detail": "oops"})
        return self._reply(201, {"created": len(body)})

    def _reply(self, code, payload):
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_nothing_lost_nothing_doubled_through_outage_and_errors(capsys):
    port = free_port()
    reporter = HttpReporter(
        f"http://127.0.0.1:{port}",
        "17",
        "tok-abc",
        batch_size=100,
        interval=0.05,
        backoff_start=0.05,
        backoff_max=0.2,
        timeout=5,
    )
    sent = [
        reporter.metric("train_loss", i / 10, epoch=0.1, step=i, elapsed=float(i))
        for i in range(450)
    ]
    time.sleep(0.3)  # the master is not even listening yet: connection refused, retried
    server = FlakyMaster(port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        reporter.summary({"task": "resnet20-cifar10", "reached": False})
        reporter.close(deadline=30)
    finally:
        server.shutdown()
        server.server_close()

    uids = [p["uid"] for p in sent]
    assert len(set(uids)) == 450
    assert set(server.stored) == set(uids)  # nothing lost
    assert len(server.stored) == 450  # stored once each
    metric_posts = [body for path, _, body in server.requests if path == "/api/metrics/"]
    posted = [p["uid"] for body in metric_posts for p in body]
    # Only a batch whose answer was lost went twice, with the very same uids.
    assert len(posted) - len(set(posted)) <= 100
    assert all(isinstance(body, list) and len(body) <= 100 for body in metric_posts)
    assert {auth for _, auth, _ in server.requests} == {"Token tok-abc"}
    point = server.stored[uids[0]]
    assert (
        point["run_id"] == "17" and point["name"] == "train_loss" and point["cumulative"] is False
    )
    assert point["metadata"] == {"epoch": 0.1, "step": 0, "elapsed": 0.0}
    assert isinstance(point["value"], float) and "T" in point["date"]
    assert server.summaries == [{"task": "resnet20-cifar10", "reached": False}]
    assert reporter.sent == 450 and not reporter.queue
    # The outage is said when it begins and when it ends, not at every attempt.
    err = capsys.readouterr().err
    assert "failed (ConnectionError); retrying" in err and "works again (after" in err
    assert err.count("works again") <= err.count("failed (")


def test_close_gives_up_after_its_deadline_when_the_master_never_comes(capsys):
    reporter = HttpReporter(
        f"http://127.0.0.1:{free_port()}", "1", None, interval=0.05, backoff_start=0.05
    )
    reporter.metric("epoch", 1.0, epoch=1.0, step=1, elapsed=1.0)
    start = time.monotonic()
    reporter.close(deadline=0.5)
    assert time.monotonic() - start < 10
    assert "1 metric points could not be delivered" in capsys.readouterr().err


def test_file_reporter_writes_json_lines(tmp_path):
    path = tmp_path / "out.jsonl"
    reporter = make_reporter(None, "5", None, str(path))
    assert isinstance(reporter, FileReporter)
    reporter.metric("val_accuracy", 0.5, epoch=1.0, step=10, elapsed=3.0)
    reporter.summary({"task": "t", "reached": True})
    reporter.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["type"] == "metric" and lines[0]["name"] == "val_accuracy" and lines[0]["uid"]
    assert lines[1] == {"type": "summary", "task": "t", "reached": True}


def test_a_rank_killed_keeps_every_point_it_measured_in_its_file(tmp_path):
    """The file is the worker's record of what it posted: a rank SIGKILLed right after
    measuring (no close, no flush) must not take its last points with it (the chaos series
    found an empty file behind 19 stored points)."""
    path = tmp_path / "points.jsonl"
    code = (
        "import os, signal\n"
        "from mlbench_worker.training.metric_sink import make_reporter\n"
        f"reporter = make_reporter(None, '5', None, {str(path)!r})\n"
        "for step in range(3):\n"
        "    reporter.metric('train_loss', 1.0 / (step + 1), step=step)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert done.returncode == -9, done.stderr
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(p["name"], p["metadata"]["step"]) for p in lines] == [
        ("train_loss", s) for s in range(3)
    ]


def test_close_does_not_wait_out_a_back_off_of_the_background_thread(capsys):
    """A long outage grows the back-off to minutes; the run's end must not wait for it."""
    reporter = HttpReporter(
        f"http://127.0.0.1:{free_port()}", "1", None, interval=0.05, backoff_start=120
    )
    reporter.metric("epoch", 1.0, epoch=1.0, step=1, elapsed=1.0)
    deadline = time.monotonic() + 30
    while reporter.failures == 0:  # the background thread failed once: now it waits 120 s
        assert time.monotonic() < deadline, "the reporter never tried to post"
        time.sleep(0.05)
    start = time.monotonic()
    reporter.close(deadline=0.5)
    assert time.monotonic() - start < 60, "close() waited for the background back-off"
    assert "1 metric points could not be delivered" in capsys.readouterr().err


def test_close_tries_once_more_at_its_deadline():
    """Back-off 0.5, 1, 2, 4 s: tries at 0, 0.5, 1.5 and 3.5 s; the next (7.5 s) would fall
    after the 6 s deadline, so the last try comes at the deadline itself, and reaches a
    master that came back at 4.75 s."""
    port = free_port()
    reporter = HttpReporter(
        f"http://127.0.0.1:{port}", "3", None, interval=3600, backoff_start=0.5, backoff_max=8
    )
    point = reporter.metric("epoch", 1.0, epoch=1.0, step=1, elapsed=1.0)
    servers = []

    def come_back():
        server = FlakyMaster(port)
        server.requests += [("", None, None)] * 3  # answer normally from the first request
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()

    timer = threading.Timer(4.75, come_back)
    timer.start()
    try:
        reporter.close(deadline=6)
    finally:
        timer.cancel()
        for server in servers:
            server.shutdown()
            server.server_close()
    assert servers and set(servers[0].stored) == {point["uid"]}
    assert reporter.sent == 1 and not reporter.queue
