"""The userspace delay line's loop, on datagram socket pairs standing in for TUN devices
(the real devices, in real slots, are exercised by test_slots.py)."""

import ipaddress
import select
import socket
import time

import pytest

from mlbench_master.cluster.local.delay_line import DelayLine, destination

A, B = "198.18.7.10", "198.18.7.11"


def packet(dst: str, payload: bytes) -> bytes:
    """A minimal IPv4 packet to `dst` (only the version and the destination are read)."""
    header = bytearray(20)
    header[0] = 0x45
    header[16:20] = ipaddress.IPv4Address(dst).packed
    return bytes(header) + payload


@pytest.fixture
def wire():
    """(line, ends): the line holds one end of each pair, the test the other (a "slot")."""
    pairs = {addr: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for addr in (A, B)}
    for inner, _ in pairs.values():
        inner.setblocking(False)
    line = DelayLine({addr: inner.fileno() for addr, (inner, _) in pairs.items()}, 0.03)
    thread = line.start()
    yield line, {addr: outer for addr, (_, outer) in pairs.items()}
    line.stop()
    thread.join(timeout=5)
    for inner, outer in pairs.values():
        inner.close()
        outer.close()


def test_a_packet_reaches_its_destination_no_sooner_than_the_delay(wire):
    line, ends = wire
    sent = time.monotonic()
    ends[A].send(packet(B, b"hello"))
    assert select.select([ends[B]], [], [], 2)[0], "the packet never arrived"
    waited = time.monotonic() - sent
    assert ends[B].recv(100) == packet(B, b"hello")
    assert waited >= 0.03
    assert not select.select([ends[A]], [], [], 0.1)[0]  # nothing goes back to the sender


def test_packets_keep_their_order_and_strangers_are_dropped(wire):
    line, ends = wire
    ends[A].send(packet("198.18.7.99", b"nobody"))  # no such slot
    ends[A].send(b"\x60" + bytes(39))  # IPv6: never routed through the line
    for i in range(50):
        ends[B].send(packet(A, str(i).encode()))
    got = []
    deadline = time.monotonic() + 5
    while len(got) < 50 and time.monotonic() < deadline:
        if select.select([ends[A]], [], [], 0.5)[0]:
            got.append(ends[A].recv(100)[20:].decode())
    assert got == [str(i) for i in range(50)]
    assert line.dropped == 2


def test_destination_reads_ipv4_only():
    assert destination(packet(A, b"")) == A
    assert destination(b"\x60" + bytes(39)) is None
    assert destination(b"\x45") is None
