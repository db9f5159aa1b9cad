"""Running commands in worker pods: the seam around `kubernetes.stream`.

`ExecChannel` is the small interface the driver needs from an exec session (chunks of
stdout/stderr, stdin, the exit status). `WebSocketChannel` implements it with the official
client's websocket exec; tests put other channels behind the same seam, since the API
emulator cannot serve exec. `PodExecution` turns a channel into the cluster protocol's
Execution (lines attributed to ranks, exit code, kill).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from mlbench_master.cluster.base import ClusterError, Execution, OutputLine
from mlbench_master.cluster.mpirun import parse_line

log = logging.getLogger(__name__)

# Exit code reported when the exec session ended without a status (connection lost) or the
# API server refused to run the command; the reason is added to the output.
LOST = 255


class ExecChannel(Protocol):
    """One command running in a pod, as the driver sees it."""

    def read(self, timeout: float) -> list[tuple[str, str]]:
        """(stream, text) chunks that arrived, waiting at most `timeout` seconds."""

    def write(self, text: str) -> None:
        """Send `text` to the command's stdin."""

    def done(self) -> bool:
        """True once the command has ended and nothing is left to read."""

    def status(self) -> tuple[int, str]:
        """(exit code, reason) once done: (0, "") on success."""

    def close(self) -> None:
        """Drop the session (the command may go on running in the pod)."""


ChannelFactory = Callable[[str, list[str]], ExecChannel]


class WebSocketChannel:
    """An exec session over the API server's websocket (channels 0-3 of *.channel.k8s.io)."""

    def __init__(self, core_api: Any, namespace: str, pod: str, container: str, command: list[str]):
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import stream

        try:
            self._ws = stream(
                core_api.connect_get_namespaced_pod_exec,
                pod,
                namespace,
                container=container,
                command=command,
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                _preload_content=False,
            )
        except ApiException as error:
            reason = str(error.reason or error).split(" -+-+- ")[0][:300]
            raise ClusterError(f"cannot exec in pod {pod}: {reason}") from error
        self._status: tuple[int, str] | None = None

    def read(self, timeout: float) -> list[tuple[str, str]]:
        from kubernetes.stream.ws_client import STDERR_CHANNEL, STDOUT_CHANNEL

        if self._ws.is_open():
            self._ws.update(timeout=timeout)
        chunks = []
        for channel, name in ((STDOUT_CHANNEL, "stdout"), (STDERR_CHANNEL, "stderr")):
            text = self._ws.read_channel(channel)
            if text:
                chunks.append((name, text))
        return chunks

    def write(self, text: str) -> None:
        self._ws.write_stdin(text)

    def done(self) -> bool:
        from kubernetes.stream.ws_client import STDERR_CHANNEL, STDOUT_CHANNEL

        if self._ws.is_open():
            return False
        return not (self._ws.peek_channel(STDOUT_CHANNEL) or self._ws.peek_channel(STDERR_CHANNEL))

    def status(self) -> tuple[int, str]:
        from kubernetes.stream.ws_client import ERROR_CHANNEL

        if self._status is None:
            self._status = exit_status(self._ws.read_channel(ERROR_CHANNEL))
        return self._status

    def close(self) -> None:
        self._ws.close()


def exit_status(payload: str) -> tuple[int, str]:
    """Read the exec status channel: a metav1.Status object, sent once the command ended.

    Success -> 0; NonZeroExitCode carries the code in details.causes[reason=ExitCode];
    anything else (or nothing: the connection dropped) is a failure to run at all.
    """
    if not payload:
        return LOST, "the exec session ended without an exit status (connection lost?)"
    try:
        status = json.loads(payload)
    except ValueError:
        return LOST, f"unreadable exec status: {payload[:200]}"
    if status.get("status") == "Success":
        return 0, ""
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message", "")), ""
            except ValueError:
                break
    return LOST, status.get("message") or status.get("reason") or "exec failed"


def run_to_completion(channel: ExecChannel, timeout: float) -> tuple[int, str]:
    """Wait for a short command; (exit code, its output and reason). Closes the channel."""
    deadline = time.monotonic() + timeout
    output: list[str] = []
    try:
        while not channel.done():
            left = deadline - time.monotonic()
            if left <= 0:
                return LOST, "".join(output) + f"(no answer within {timeout:g} s)"
            output += [text for _, text in channel.read(min(left, 1.0))]
        output += [text for _, text in channel.read(0)]
        code, reason = channel.status()
        return code, "".join(output) + reason
    finally:
        channel.close()


class PodExecution(Execution):
    """mpirun running in the rank-0 pod, seen through an exec channel."""

    def __init__(
        self,
        channel: ExecChannel,
        *,
        on_kill: Callable[[], None],
        on_exit: Callable[[], None] = lambda: None,
        record: dict[str, Any] | None = None,
    ) -> None:
        self._record = dict(record or {})
        self._channel = channel
        self._on_kill = on_kill
        self._on_exit = on_exit
        self._partial = {"stdout": "", "stderr": ""}
        self._code: int | None = None
        self._reason = ""

    def read(self, timeout: float) -> list[OutputLine]:
        if self._code is not None:
            return []
        lines: list[OutputLine] = []
        for stream, text in self._channel.read(timeout):
            pieces = (self._partial[stream] + text).split("\n")
            self._partial[stream] = pieces.pop()
            lines += [parse_line(piece, stream) for piece in pieces]
        if self._channel.done():
            for stream, rest in self._partial.items():
                if rest:
                    lines.append(parse_line(rest, stream))
            self._partial = {"stdout": "", "stderr": ""}
            code, reason = self._channel.status()
            if reason:
                lines.append(OutputLine(None, "stderr", f"kubernetes exec: {reason}"))
            self._finish(code)
        return lines

    def poll(self) -> int | None:
        return self._code

    @property
    def record(self) -> dict[str, Any]:
        return self._record

    @property
    def exit_known(self) -> bool:
        # The exec status channel always answers: a lost session is reported as code 255.
        return True

    def checkpoint(self) -> None:
        """Nothing to record: the exec stream cannot be re-read from an offset."""

    def kill(self) -> None:
        # Also called after a normal exit, to stop ranks a failed mpirun left behind: it must
        # not raise, or the run's end would not be recorded.
        try:
            self._on_kill()
        except ClusterError as error:
            log.warning("stopping the run's processes: %s", error)
        finally:
            self._channel.close()
            if self._code is None:
                self._finish(128 + 9)  # as a shell reports SIGKILL, like the local driver

    def _finish(self, code: int) -> None:
        self._code = code
        self._channel.close()
        self._on_exit()
