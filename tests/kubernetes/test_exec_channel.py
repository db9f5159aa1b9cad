"""WebSocketChannel (the driver's real exec path, `kubernetes.stream`) against a websocket
server that speaks the API server's exec protocol (v4.channel.k8s.io) on 127.0.0.1.

Channel bytes: 0 stdin, 1 stdout, 2 stderr, 3 the final metav1.Status. The server plays a
pod whose command reads the environment block from stdin, writes tagged mpirun-style lines
(one split across two frames, and a character split across two frames) and ends with a
chosen exit code. What no test here can show is a real kubelet's behaviour.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import aiohttp
import pytest
from aiohttp import web

from mlbench_master.cluster.base import ClusterError
from mlbench_master.cluster.kubernetes.podexec import WebSocketChannel, run_to_completion

STATUS_OK = {"metadata": {}, "status": "Success"}
GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")  # what strconv.ParseBool reads as true


def _status_exit(code: int) -> dict:
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


class ExecServer:
    """Serves GET .../pods/<name>/exec as a websocket; records each request's query."""

    def __init__(self, exit_code: int | None, abort: bool = False, refuse: bool = False) -> None:
        self.exit_code = exit_code
        self.abort = abort  # drop the TCP connection after the first frame, no close frame
        self.refuse = refuse  # answer 403 as an API server whose RBAC forbids pods/exec
        self.queries: list[list[tuple[str, str]]] = []
        self.stdin = ""
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> ExecServer:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        self.queries.append(list(request.query.items()))
        if self.refuse:
            status = {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                      "message": 'pods "p-0" is forbidden: cannot create resource "pods/exec"'}  # fmt: skip
            return web.json_response(status, status=403)
        ws = web.WebSocketResponse(protocols=("v4.channel.k8s.io",))
        await ws.prepare(request)
        # Read stdin until the empty line that ends the environment block.
        while not (self.stdin == "\n" or self.stdin.endswith("\n\n")):
            message = await ws.receive()
            if message.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                break
            data = message.data if isinstance(message.data, str) else message.data.decode()
            assert data[0] == "\x00"
            self.stdin += data[1:]
        await ws.send_bytes(b"\x01[1,0]<stdout>: epoch 1\n[1,0]<std")
        await asyncio.sleep(0.05)
        if self.abort:
            request.transport.abort()
            return ws
        await ws.send_bytes(b"\x01out>: epoch 2\n")
        await ws.send_bytes(b"\x02[1,1]<stderr>: rank 1 says hello\n")
        await ws.send_bytes(b"\x01caf\xc3")  # "café": its last character split in two
        await ws.send_bytes(b"\x01\xa9\n")
        await ws.send_bytes(b"\x01no newline at the end")
        if self.exit_code is not None:
            status = STATUS_OK if self.exit_code == 0 else _status_exit(self.exit_code)
            await ws.send_bytes(b"\x03" + json.dumps(status).encode())
        await ws.close()
        return ws

    def _serve(self) -> None:
        async def main() -> None:
            app = web.Application()
            app.router.add_get("/api/v1/namespaces/{ns}/pods/{pod}/exec", self._exec)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            await self._stop.wait()
            await runner.cleanup()

        asyncio.run(main())


def _core_api(url: str):
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = url
    return client.CoreV1Api(client.ApiClient(configuration))


def _collect(channel, limit=10.0):
    chunks = []
    deadline = time.monotonic() + limit
    while not channel.done():
        assert time.monotonic() < deadline, "the session never ended"
        chunks += channel.read(0.2)
    chunks += channel.read(0)
    return chunks


def _joined(chunks, stream):
    pieces = [data for name, data in chunks if name == stream]
    return pieces[0][:0].join(pieces) if pieces else ""


@pytest.mark.parametrize("code", [0, 3])
def test_output_stdin_and_exit_code_through_a_real_exec_websocket(code):
    from mlbench_master.cluster.kubernetes import shell

    with ExecServer(exit_code=code) as server:
        channel = WebSocketChannel(
            _core_api(server.url), "bench", "rel-mlbench-worker-0", "worker", ["mpirun", "-n", "2"]
        )
        channel.write(shell.environment_block({"MLBENCH_RUN_TOKEN": "s3cret"}))
        chunks = _collect(channel)
        assert channel.status() == (code, "")
        channel.close()
    assert _joined(chunks, "stdout").startswith("[1,0]<stdout>: epoch 1\n[1,0]<stdout>: epoch 2\n")
    assert _joined(chunks, "stdout").endswith("no newline at the end")
    assert _joined(chunks, "stderr") == "[1,1]<stderr>: rank 1 says hello\n"
    query = dict(server.queries[0])
    # The API server reads it with Go's strconv.ParseBool; the kubernetes client 36 sends
    # Python's "True", 37 "true" (pinned to 36 beside boto3: constraints.txt).
    assert query["container"] == "worker" and query["stdin"] in GO_TRUE
    assert "s3cret" not in json.dumps(server.queries)  # the token went over stdin only
    assert server.stdin == "MLBENCH_RUN_TOKEN=s3cret\n\n"


def test_a_binary_channel_hands_out_the_bytes_exactly():
    """The launch's output is counted in bytes (its offsets); text decoded frame by frame
    would turn a character split across frames into two replacement characters."""
    with ExecServer(exit_code=0) as server:
        channel = WebSocketChannel(
            _core_api(server.url), "bench", "p-0", "worker", ["true"], binary=True
        )
        channel.write("\n")
        chunks = _collect(channel)
        assert channel.status() == (0, "")
        channel.close()
    stdout = _joined(chunks, "stdout")
    assert isinstance(stdout, bytes)
    assert stdout == (
        b"[1,0]<stdout>: epoch 1\n[1,0]<stdout>: epoch 2\ncaf\xc3\xa9\nno newline at the end"
    )
    assert _joined(chunks, "stderr") == b"[1,1]<stderr>: rank 1 says hello\n"


def test_a_refused_exec_is_a_cluster_error_naming_the_pod():
    """RBAC forbidding pods/exec: the handshake is refused, and the driver gets its own
    error with the reason, whichever kubernetes client wraps the refusal (36 trips over the
    absent body while wrapping it: podexec.py)."""
    with ExecServer(exit_code=0, refuse=True) as server:
        with pytest.raises(ClusterError, match="cannot exec in pod p-0: .*403"):
            WebSocketChannel(_core_api(server.url), "bench", "p-0", "worker", ["true"])
    assert len(server.queries) == 1


def test_a_dropped_exec_session_is_a_failure_with_a_reason():
    with ExecServer(exit_code=None) as server:
        channel = WebSocketChannel(_core_api(server.url), "bench", "p-0", "worker", ["true"])
        channel.write("\n")
        code, output = run_to_completion(channel, 10)
    assert code == 255
    assert output.endswith("the exec session ended without an exit status (connection lost?)")


def test_a_connection_broken_under_the_session_ends_it_as_lost():
    """A reset or broken pipe under the websocket (a master's stream to a restarted pod, a
    proxy dropping it) ends the session as LOST with the reason, never raises from read:
    the launch's reader then re-attaches from its offsets instead of failing the run."""
    with ExecServer(exit_code=0, abort=True) as server:
        channel = WebSocketChannel(_core_api(server.url), "bench", "p-0", "worker", ["true"])
        channel.write("\n")
        chunks = _collect(channel)
        code, reason = channel.status()
        channel.close()
    assert _joined(chunks, "stdout") == "[1,0]<stdout>: epoch 1\n[1,0]<std"
    assert code == 255 and reason, reason
