"""The aiohttp server: the page, static files, one dashboard process per websocket, downloads.

The dashboard runs as `command` (a `vega-tui` command line) under Textual's web driver, through
textual-serve's AppService, which speaks that driver's packet protocol; auth.Guard decides who may
connect and page.py what the page holds. A download is a file the app delivered
(`App.deliver_binary`), fetched once by the browser under its one-use key.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from urllib.parse import quote

import textual_serve
from aiohttp import WSMsgType, web
from textual_serve.app_service import AppService
from textual_serve.download_manager import DownloadManager

from vega_tui.serve import page
from vega_tui.serve.auth import WS_PATH, Guard

log = logging.getLogger("vega.serve")
MAX_SESSIONS = 8  # each session is a dashboard process: a leaked tab must not start dozens
QUIT_S = 10.0
STATIC = Path(textual_serve.__file__).parent / "static"


def cells(value: object, default: int) -> int:
    """A terminal size or font size from the browser, as a sane int."""
    try:
        return max(10, min(1000, int(str(value))))
    except ValueError:
        return default


class DashboardServer:
    """Serves `command` (a shell command line that runs the dashboard) to signed-in browsers."""

    def __init__(self, command: str, guard: Guard, title: str = "Vega") -> None:
        self.command, self.guard, self.title = command, guard, title
        self.downloads = DownloadManager()
        self.sessions: set[AppService] = set()

    def app(self) -> web.Application:
        app = web.Application()
        self.guard.install(app)
        app.add_routes(
            [
                web.get("/", self.index),
                web.get(WS_PATH, self.websocket),
                web.get("/download/{key}", self.download),
                web.static("/static", STATIC),
            ]
        )
        app.on_shutdown.append(self.stop_all)
        return app

    async def index(self, request: web.Request) -> web.Response:
        font_size = cells(request.query.get("fontsize", 16), 16)
        body = page.render(self.title, font_size, WS_PATH)
        return web.Response(text=body, content_type="text/html")

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        if len(self.sessions) >= MAX_SESSIONS:
            text = f"at most {MAX_SESSIONS} dashboards at once\n"
            return web.Response(status=503, text=text)
        socket = web.WebSocketResponse(heartbeat=15, max_msg_size=1 << 20)
        await socket.prepare(request)

        async def close() -> None:
            await socket.close()

        service = AppService(
            self.command,
            write_bytes=socket.send_bytes,
            write_str=socket.send_str,
            close=close,
            download_manager=self.downloads,
        )
        self.sessions.add(service)
        width = cells(request.query.get("width", 80), 80)
        height = cells(request.query.get("height", 24), 24)
        try:
            await service.start(width, height)
            await self._relay(socket, service)
        except Exception:  # one broken session must not take the server down
            log.exception("dashboard session failed")
        finally:
            self.sessions.discard(service)
            await stop_service(service)
            await socket.close()
        return socket

    async def _relay(self, socket: web.WebSocketResponse, service: AppService) -> None:
        """Browser -> dashboard: keystrokes, resizes, focus; pings answered here."""
        async for message in socket:
            if message.type != WSMsgType.TEXT:
                continue
            try:
                kind, *rest = json.loads(message.data)
            except (ValueError, TypeError):
                continue  # not an envelope: textual-serve's own client never sends one
            data = rest[0] if rest else None
            if kind == "stdin" and isinstance(data, str):
                await service.send_bytes(data.encode("utf-8"))
            elif kind == "resize" and isinstance(data, dict):
                width = cells(data.get("width"), 80)
                await service.set_terminal_size(width, cells(data.get("height"), 24))
            elif kind == "ping":
                await socket.send_json(["pong", data])
            elif kind == "blur":
                await service.blur()
            elif kind == "focus":
                await service.focus()

    async def download(self, request: web.Request) -> web.StreamResponse:
        key = request.match_info["key"]
        try:
            meta = await self.downloads.get_download_metadata(key)
        except KeyError:
            text = f"no download {key!r} (each one can be fetched once)\n"
            raise web.HTTPNotFound(text=text) from None
        response = web.StreamResponse()
        charset = f"; charset={meta.encoding}" if meta.encoding else ""
        response.headers["Content-Type"] = meta.mime_type + charset
        disposition = "inline" if meta.open_method == "browser" else "attachment"
        name = quote(meta.file_name)
        header = f"{disposition}; filename*=UTF-8''{name}"
        response.headers["Content-Disposition"] = header
        await response.prepare(request)
        async for chunk in self.downloads.download(key):
            await response.write(chunk)
        await response.write_eof()
        return response

    async def stop_all(self, _app: web.Application) -> None:
        await asyncio.gather(*(stop_service(s) for s in list(self.sessions)))


async def stop_service(service: AppService) -> None:
    """Ask the dashboard to quit; kill it if it has not within QUIT_S (no hung app outlives us)."""
    try:
        await asyncio.wait_for(service.stop(), QUIT_S)
    except TimeoutError:
        process = service._process  # AppService has no kill of its own
        if process is not None and process.returncode is None:
            process.kill()
