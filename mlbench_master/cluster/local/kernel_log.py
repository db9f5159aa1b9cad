"""The kernel's own record of the processes its OOM killer ended, read from /dev/kmsg.

A rank killed by SIGKILL may have run out of memory, or been killed by a person; only the
kernel knows, and it says so in its log ("Killed process 4121 (python) total-vm:...", and
"oom-kill:...,pid=4121,..."). The local driver's ranks run on this machine's kernel, so a
FAILED reason can say which it was instead of "out of memory?". /dev/kmsg gives one record
a read and is readable where `dmesg` is (root, or kernel.dmesg_restrict off); where it is
not, nothing is claimed.
"""

from __future__ import annotations

import errno
import os
import re

KMSG = "/dev/kmsg"
RECORD_BYTES = 8192  # more than the longest record the kernel writes
_KILLED = re.compile(r"(?:Killed process (?P<pid>\d+) \(|oom-kill:.*[,:]pid=(?P<pid2>\d+)[, ])")


def oom_killed_pids(records: list[str]) -> set[int]:
    """The pids the OOM killer ended, from kernel log records."""
    found = set()
    for record in records:
        match = _KILLED.search(record)
        if match:
            found.add(int(match["pid"] or match["pid2"]))
    return found


def kernel_records(path: str = KMSG) -> list[str]:
    """Every record the kernel's ring buffer still holds; [] where it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return []
    records = []
    try:
        while True:
            try:
                data = os.read(fd, RECORD_BYTES)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten while reading: go on
                    continue
                break  # EAGAIN: the end of the buffer; anything else: stop there
            if not data:
                break
            records.append(data.decode("utf-8", "replace"))
    finally:
        os.close(fd)
    return records


def oom_killed(pids: set[int]) -> set[int]:
    """Which of `pids` the kernel's OOM killer ended (as far as its log still says)."""
    if not pids:
        return set()
    return pids & oom_killed_pids(kernel_records())
