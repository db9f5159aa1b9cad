"""Running commands in worker pods: the seam around `kubernetes.stream`.

`ExecChannel` is the small interface the driver needs from an exec session (chunks of
stdout/stderr, stdin, the exit status). `WebSocketChannel` implements it with the official
client's websocket exec; tests put other channels behind the same seam, since the API
emulator cannot serve exec. A channel hands out text, or bytes when opened `binary`: the
output of a launch is counted in bytes (execution.py), and text decoded frame by frame
would mangle a character split across two frames.
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import (  # the client's own websocket errors
    ERROR_CHANNEL,
    STDERR_CHANNEL,
    STDOUT_CHANNEL,
    WebSocketConnectionClosedException,
)

from mlbench_master.cluster.base import ClusterError

# Exit code reported when the exec session ended without a status (connection lost), the
# API server refused to run the command, or a launch's pod 0 was lost; the reason is added
# to the output.
LOST = 255


class ExecChannel(Protocol):
    """One command running in a pod, as the driver sees it."""

    def read(self, timeout: float) -> list[tuple[str, Any]]:
        """(stream, text) chunks that arrived, waiting at most `timeout` seconds; bytes
        rather than text when the channel was opened binary."""

    def write(self, text: str) -> None:
        """Send `text` to the command's stdin."""

    def done(self) -> bool:
        """True once the command has ended and nothing is left to read."""

    def status(self) -> tuple[int, str]:
        """(exit code, reason) once done: (0, "") on success."""

    def close(self) -> None:
        """Drop the session (the command may go on running in the pod)."""


class ChannelFactory(Protocol):
    """Opens a channel: `factory(pod, command, binary=False)`."""

    def __call__(self, pod: str, command: list[str], *, binary: bool = False) -> ExecChannel: ...


def _cannot_exec(pod: str, error: ApiException) -> ClusterError:
    reason = str(error.reason or error).split(" -+-+- ")[0][:300]
    return ClusterError(f"cannot exec in pod {pod}: {reason}")


class WebSocketChannel:
    """An exec session over the API server's websocket (channels 0-3 of *.channel.k8s.io)."""

    def __init__(
        self,
        core_api: Any,
        namespace: str,
        pod: str,
        container: str,
        command: list[str],
        *,
        binary: bool = False,
    ) -> None:
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
                binary=binary,
                _preload_content=False,
            )
        except ApiException as error:
            raise _cannot_exec(pod, error) from error
        except AttributeError as error:
            # The kubernetes client 36 (pinned beside boto3: constraints.txt) fails while
            # wrapping a refused websocket handshake (it decodes an absent body); the
            # refusal is the exception it was handling.
            if not isinstance(error.__context__, ApiException):
                raise
            raise _cannot_exec(pod, error.__context__) from error
        self._status: tuple[int, str] | None = None
        # Why the connection broke under the session (reset, broken pipe), if it did: the
        # session is then over, as one that ended without a status (LOST), so the reader
        # re-attaches from its offsets instead of the error ending the run's job.
        self._broken: str | None = None

    def read(self, timeout: float) -> list[tuple[str, Any]]:
        try:
            if self._ws.is_open():
                self._ws.update(timeout=timeout)
        except (OSError, WebSocketConnectionClosedException) as error:
            self._broken = f"the exec session's connection broke: {type(error).__name__}: {error}"
            self.close()
        chunks = []
        for channel, name in ((STDOUT_CHANNEL, "stdout"), (STDERR_CHANNEL, "stderr")):
            text = self._ws.read_channel(channel)
            if text:
                chunks.append((name, text))
        return chunks

    def write(self, text: str) -> None:
        self._ws.write_stdin(text)

    def done(self) -> bool:
        if self._ws.is_open() and self._broken is None:
            return False
        return not (self._ws.peek_channel(STDOUT_CHANNEL) or self._ws.peek_channel(STDERR_CHANNEL))

    def status(self) -> tuple[int, str]:
        if self._status is None and self._broken is not None:
            self._status = (LOST, self._broken)
        if self._status is None:
            payload = self._ws.read_channel(ERROR_CHANNEL)
            if isinstance(payload, bytes):
                payload = payload.decode("utf-8", "replace")
            self._status = exit_status(payload)
        return self._status

    def close(self) -> None:
        try:
            self._ws.close()
        except Exception:  # noqa: BLE001 - closing a broken connection may fail too
            pass


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
