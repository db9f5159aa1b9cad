"""An Execution whose output is followed in files by offset: the local driver's launch and
the Slurm driver's job both write mpirun's stdout and stderr to files in a folder, and
the master reads on from the offsets it checkpointed after storing the lines, so a
re-attached reader (a new job, a restarted master) loses no line. Each line carries where
it ends in its file (`OutputLine.end`) and the launch's folder names the files (`source`):
the log's store leaves out a line it holds already, so a stretch read again (a checkpoint
that never came, two readers of one launch) is not stored twice.

What differs between drivers is only how the end is known (`_exited`, which sets `_code`)
and how a line is attributed to its rank (`parse`); the reading is here, once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from mlbench_master.cluster.base import Execution, OutputLine
from mlbench_master.cluster.mpirun import RANK_ENDS_DIR, parse_line

STREAMS = ("stdout", "stderr")
CHUNK = 4 * 1024 * 1024  # the most read from a stream at a time


def rank_ends_folder(launch_dir: Path) -> str:
    """The folder in `launch_dir` where the ranks' watchers write their ends (made now; the
    value of mpirun.RANK_ENDS_VARIABLE for the launch), read back by `recorded_rank_ends`."""
    folder = launch_dir / RANK_ENDS_DIR
    folder.mkdir(exist_ok=True)
    return str(folder)


class FollowedExecution(Execution):
    """The file-following half of an Execution; subclasses say when mpirun has ended."""

    def __init__(self, folder: Path, parse: Callable[[str, str], OutputLine] = parse_line) -> None:
        self.dir = folder
        self._parse = parse
        self._offsets = self._load_offsets()
        self._handed = dict(self._offsets)  # bytes up to the last complete line handed out
        self._partial = {stream: b"" for stream in STREAMS}
        self._code: int | None = None  # set by _exited once mpirun's end is known

    def _exited(self) -> bool:
        """Whether mpirun has ended (and `_code` is set)."""
        raise NotImplementedError

    def _load_offsets(self) -> dict[str, int]:
        try:
            data = json.loads((self.dir / "offsets.json").read_text())
            return {stream: int(data[stream]) for stream in STREAMS}
        except (OSError, ValueError, KeyError):
            return dict.fromkeys(STREAMS, 0)

    @property
    def source(self) -> str | None:
        """The launch's folder by its name (run id and launch id): one per launch."""
        return self.dir.name

    def checkpoint(self) -> None:
        """Record that every line handed out so far is stored (the job calls it after a
        successful write), so a re-attached reader starts after them and misses none."""
        tmp = self.dir / "offsets.json.tmp"
        tmp.write_text(json.dumps(self._handed))
        tmp.replace(self.dir / "offsets.json")

    def _pending_output(self) -> bool:
        for stream in STREAMS:
            try:
                size = (self.dir / f"{stream}.log").stat().st_size
            except OSError:
                size = 0
            if size > self._offsets[stream] or self._partial[stream]:
                return True
        return False

    def _read_new(self, final: bool) -> list[OutputLine]:
        """The complete lines written since the last read (with `final`, the unterminated
        last one too)."""
        lines: list[OutputLine] = []
        for stream in STREAMS:
            try:
                with open(self.dir / f"{stream}.log", "rb") as fh:
                    fh.seek(self._offsets[stream])
                    data = fh.read(CHUNK)
            except OSError:
                data = b""
            self._offsets[stream] += len(data)
            *complete, rest = (self._partial[stream] + data).split(b"\n")
            if final and rest:
                complete.append(rest)
                rest = b""
            self._partial[stream] = rest
            end = self._handed[stream]  # where the first of them begins
            for raw in complete:
                end = min(end + len(raw) + 1, self._offsets[stream])  # the last may lack "\n"
                line = self._parse(raw.decode("utf-8", "replace"), stream)
                lines.append(replace(line, end=end))
            self._handed[stream] = self._offsets[stream] - len(rest)
        return lines

    def read(self, timeout: float) -> list[OutputLine]:
        deadline = time.monotonic() + timeout
        while True:
            exited = self._exited()
            lines = self._read_new(final=exited)
            if lines or time.monotonic() >= deadline or (exited and not self._pending_output()):
                return lines
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def recorded_rank_ends(self) -> str:
        """The watchers' files, each whole (a file cut short by a full disk is left out)."""
        try:
            files = sorted((self.dir / RANK_ENDS_DIR).iterdir())
        except OSError:
            return ""
        texts = []
        for path in files:
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if text.endswith("\n"):
                texts.append(text)
        return "".join(texts)

    def poll(self) -> int | None:
        if not self._exited() or self._pending_output():
            return None
        return self._code
