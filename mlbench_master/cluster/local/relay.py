"""The master's address inside the worker slots' namespaces: a TCP relay.

Why: a master on this machine usually listens on loopback (http://127.0.0.1:8000), and a
rank inside a slot's namespace has a loopback of its own. Rather than rewriting the URL the
ranks post to (and the Host header Django checks), this process opens a listening socket
on the same loopback address and port *inside* every slot's namespace (a socket belongs to
the namespace it was created in: the thread enters the namespace with setns(2) just for the
bind) and connects each accepted connection to the real master from the machine's own
namespace. The metrics then never cross the shaped links, as on Kubernetes, where the
master's addresses are spared by the bandwidth limit.

The slots have no route to the outside world (the machine's firewall and routes are never
changed), so the same process is also a small HTTP proxy on the slots' loopback
(`--proxy-port`: CONNECT for https, absolute URLs for http), which the ranks get as
http(s)_proxy: downloading a data set from inside a slot works as it does outside.

For a latency on a kernel without netem the same process also runs the slots' userspace
delay line (delay_line.py, `--delay-ms` with each slot's `--addresses`): it opens each
slot's TUN device from inside the slot's namespace, as the sockets are opened.

Run as `python -m mlbench_master.cluster.local.relay [--target HOST:PORT] --proxy-port P
[--delay-ms MS --addresses A,B,...] --ready-fd FD NS...`;
the driver starts it detached (it outlives a master restart with the ranks) and stops it
with the slots' network. It says "ready" (or why it could not start) on a pipe the driver
passes, not in a file: on a full disk a file, and the log that would name the error, stay
empty, and the run would fail with no reason (the chaos series' disk-full fault found it). Python 3.11 has no os.setns, hence the one libc call.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import socket
import sys
from collections.abc import Iterator
from urllib.parse import urlsplit

from mlbench_master.cluster.local import delay_line

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def inside(namespace: str) -> Iterator[None]:
    """The calling thread in network namespace `namespace` for the block (what it opens
    there stays there), then back in its own."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)


def listen_in(namespace: str, host: str, port: int) -> socket.socket:
    """A listening socket on host:port inside network namespace `namespace`."""
    with inside(namespace):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    return sock


def open_delay_line(
    namespaces: list[str], addresses: list[str], delay_ms: float
) -> delay_line.DelayLine:
    """The delay line between the slots' TUN devices (each opened inside its slot)."""
    devices = {}
    for namespace, address in zip(namespaces, addresses, strict=True):
        with inside(namespace):
            devices[address] = delay_line.open_device()
    return delay_line.DelayLine(devices, delay_ms / 1000.0)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except OSError:
            pass


def _relay_to(host: str, port: int):  # noqa: ANN202 - an asyncio connection handler
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()  # the master is down: the rank's reporter retries
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    return handle


async def _proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One proxied connection: `CONNECT host:port` (https) or an absolute http:// URL."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        method, target, _version = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
        if method.upper() == "CONNECT":
            host, _, port = target.rpartition(":")
            up_reader, up_writer = await asyncio.open_connection(host.strip("[]"), int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            url = urlsplit(target)
            if url.scheme != "http" or not url.hostname:
                raise ValueError(f"not a proxy request: {target}")
            up_reader, up_writer = await asyncio.open_connection(url.hostname, url.port or 80)
            up_writer.write(head)
    except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError) as exc:
        writer.write(f"HTTP/1.1 502 Bad Gateway\r\n\r\n{exc}\n".encode())
        writer.close()
        return
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _serve(
    relays: list[socket.socket], proxies: list[socket.socket], target: tuple[str, int] | None,
    ready_fd: int,
) -> None:  # fmt: skip
    servers = [await asyncio.start_server(_proxy, sock=sock) for sock in proxies]
    if target is not None:
        handle = _relay_to(*target)
        servers += [await asyncio.start_server(handle, sock=sock) for sock in relays]
    _say(ready_fd, f"ready {os.getpid()}")
    await asyncio.gather(*(server.serve_forever() for server in servers))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mlbench_master.cluster.local.relay")
    parser.add_argument("--target", help="HOST:PORT of a master on loopback, to relay to")
    parser.add_argument("--proxy-port", type=int, required=True, help="the proxy's port")
    parser.add_argument(
        "--ready-fd", type=int, required=True,
        help="a pipe told 'ready PID' once every socket listens, or why the relay did not start",
    )  # fmt: skip
    parser.add_argument("--delay-ms", type=float, help="run the slots' delay line with this delay")
    parser.add_argument("--addresses", help="each slot's address, in the namespaces' order")
    parser.add_argument("namespaces", nargs="+")
    args = parser.parse_args(argv)
    try:
        if args.delay_ms:
            addresses = (args.addresses or "").split(",")
            open_delay_line(args.namespaces, addresses, args.delay_ms).start()
        target = None
        relays = []
        if args.target:
            host, _, port = args.target.rpartition(":")
            target = (host, int(port))
            relays = [listen_in(ns, host, int(port)) for ns in args.namespaces]
        proxies = [listen_in(ns, "127.0.0.1", args.proxy_port) for ns in args.namespaces]
    except Exception as exc:
        _say(args.ready_fd, f"{type(exc).__name__}: {exc}")
        raise
    try:
        asyncio.run(_serve(relays, proxies, target, args.ready_fd))
    except KeyboardInterrupt:
        pass
    return 0


def _say(fd: int, line: str) -> None:
    """One line to the driver on the readiness pipe, which is then closed."""
    with contextlib.suppress(OSError), os.fdopen(fd, "w") as pipe:
        pipe.write(line + "\n")


if __name__ == "__main__":
    sys.exit(main())
