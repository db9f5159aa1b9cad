"""The Kubernetes API as the master container sees it: the objects come from the emulator
(tests/kubernetes/emulator.py), and pod exec, which the emulator cannot serve, is done for
real in the worker container of that name through the engine (`docker exec`), spoken back
in the API server's exec protocol (v4.channel.k8s.io: 1 stdout, 2 stderr, 3 the final
metav1.Status; 0 stdin from the client). So the master's own WebSocketChannel, unchanged,
drives mpirun in the worker containers."""

from __future__ import annotations

import asyncio
import json
import threading

import aiohttp
from aiohttp import web

HOP = {"host", "content-length", "transfer-encoding", "connection", "upgrade"}


def _status(code: int) -> dict:
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


class ApiFront:
    """Listens on 127.0.0.1 of the namespace it is started in; `url` once started."""

    def __init__(self, emulator_url: str, docker_host: str) -> None:
        self.emulator_url = emulator_url
        self.docker_host = docker_host
        self.execs: list[tuple[str, list[str]]] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.url = ""

    def __enter__(self) -> ApiFront:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the API front did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        pod = request.match_info["pod"]
        command = request.query.getall("command", [])
        self.execs.append((pod, command))
        ws = web.WebSocketResponse(protocols=("v4.channel.k8s.io",))
        await ws.prepare(request)
        proc = await asyncio.create_subprocess_exec(
            "docker", "-H", self.docker_host, "exec", "-i", pod, *command,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip

        async def pump(stream: asyncio.StreamReader, channel: int) -> None:
            while data := await stream.read(65536):
                await ws.send_bytes(bytes([channel]) + data)

        async def feed() -> None:
            async for message in ws:
                if message.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                    data = message.data
                    data = data.encode() if isinstance(data, str) else data
                    if data[:1] == b"\x00" and proc.stdin is not None:
                        proc.stdin.write(data[1:])
                        await proc.stdin.drain()
            if proc.returncode is None:  # the client went away: so does its session
                proc.kill()

        feeder = asyncio.ensure_future(feed())
        await asyncio.gather(pump(proc.stdout, 1), pump(proc.stderr, 2))
        code = await proc.wait()
        if not ws.closed:
            await ws.send_bytes(b"\x03" + json.dumps(_status(code)).encode())
            await ws.close()
        feeder.cancel()
        return ws

    async def _proxy(self, request: web.Request) -> web.Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        async with self._session.request(
            request.method,
            self.emulator_url + request.rel_url.raw_path_qs,
            headers=headers,
            data=await request.read(),
        ) as upstream:
            body = await upstream.read()
            out = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP}
            return web.Response(status=upstream.status, body=body, headers=out)

    def _serve(self) -> None:
        async def main() -> None:
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_route("*", "/api/v1/namespaces/{ns}/pods/{pod}/exec", self._exec)
            app.router.add_route("*", "/{tail:.*}", self._proxy)
            self._session = aiohttp.ClientSession()
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            await self._stop.wait()
            await self._session.close()
            await runner.cleanup()

        asyncio.run(main())
