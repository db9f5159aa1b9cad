"""A userspace delay line between the worker slots, for kernels without netem.

Why: a run's `latency` is a netem delay on each slot's link where the kernel has the netem
qdisc (cluster/shaping.py). Some kernels are built without it (this project's CI machines
among them), and no other qdisc holds a packet back for a time; a latency asked for would
then be recorded as not applied, and the latency half of the network dimension could not be
measured at all. Here the slots' traffic to each other is routed through a TUN device in
each slot (`DEVICE`, made by network.py, with the run's rate shaped on it by the same HTB
rule), and this loop is the wire between them: it reads every packet a slot sends, holds it
for the delay, then writes it into the destination slot's TUN device, where the kernel
receives it as if it came off a link. Traffic to the gateway (the master, mpirun's daemons)
keeps the slot's veth and is not delayed, as the master is spared on Kubernetes.

The delay is constant, so a FIFO queue keeps the packets in order. A packet is written
only once its time has come (`due <= now`); it can be late by the scheduler's wake-up time
(well under a millisecond on an idle machine). Throughput: the
devices carry 64 KB packets (`MTU`), so even a 1 Gbit/s link is ~2,000 packets a second
for this loop. It runs as a thread of the slots' relay process, which opens the devices
(each inside its slot's namespace) and outlives a master restart with the ranks.

No library does this: netem is the kernel's, and the userspace network emulators found
(e.g. in Mininet) need netem as well.
"""

from __future__ import annotations

import collections
import fcntl
import ipaddress
import logging
import os
import select
import struct
import threading
import time

DEVICE = "mlbd0"  # in each slot: the TUN device the other slots are routed through
MTU = 65000  # large packets: fewer for this loop to move (tun allows up to 65535)
QUEUE_BYTES = 256 << 20  # held at once at most; beyond it packets are dropped, as a full
# router queue drops them (TCP slows down), never the machine's memory
TUNSETIFF = 0x400454CA
log = logging.getLogger(__name__)
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def open_device(name: str = DEVICE) -> int:
    """A non-blocking fd on the TUN device `name` of the calling thread's namespace."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd


def destination(packet: bytes) -> str | None:
    """The IPv4 destination of a raw IP packet (None for anything else)."""
    if len(packet) < 20 or packet[0] >> 4 != 4:
        return None
    return str(ipaddress.IPv4Address(packet[16:20]))


class DelayLine:
    """Moves packets between the slots' TUN devices after `delay_s` seconds."""

    def __init__(self, devices: dict[str, int], delay_s: float) -> None:
        self.devices = devices  # a slot's address -> the fd of its TUN device
        self.delay_s = delay_s
        self.queue: collections.deque[tuple[float, int, bytes]] = collections.deque()
        self.held = 0  # bytes in the queue
        self.dropped = 0
        self._stop = threading.Event()

    def start(self) -> threading.Thread:
        """Move packets in a thread of this process until `stop` (a daemon: it ends with it)."""
        thread = threading.Thread(target=self.run, name="delay-line", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """The loop. An unexpected error is logged and the loop goes on: a dead wire would
        leave the ranks waiting for packets until the run's time limit."""
        poller = select.epoll()
        for fd in self.devices.values():
            poller.register(fd, select.EPOLLIN)
        try:
            while not self._stop.is_set():
                try:
                    self._round(poller)
                except Exception:  # noqa: BLE001 - keep the link alive, say what happened
                    log.exception("delay line: a round failed; going on")
                    time.sleep(0.001)
        finally:
            poller.close()

    def _round(self, poller: select.epoll) -> None:
        timeout = self.queue[0][0] - time.monotonic() if self.queue else 0.5
        for fd, _ in poller.poll(max(0.0, timeout)):
            if not self._take(fd):
                poller.unregister(fd)  # the device went away with its namespace
        self._release()

    def _take(self, fd: int) -> bool:
        """Queue what device `fd` has sent, each due `delay_s` from now; False once the
        device is gone."""
        due = time.monotonic() + self.delay_s
        while True:
            try:
                packet = os.read(fd, MTU + 64)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            out = self.devices.get(destination(packet) or "")
            if out is None or self.held + len(packet) > QUEUE_BYTES:
                self.dropped += 1
                continue
            self.queue.append((due, out, packet))
            self.held += len(packet)

    def _release(self) -> None:
        """Write every packet that is due: none before its time (`due <= now`)."""
        now = time.monotonic()
        while self.queue and self.queue[0][0] <= now:
            _, out, packet = self.queue.popleft()
            self.held -= len(packet)
            try:
                os.write(out, packet)
            except OSError:  # a full or vanished receiver: the packet is lost, as on a link
                self.dropped += 1
