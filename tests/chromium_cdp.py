"""Headless Chromium (Debian's `chromium` package) driven over the Chrome DevTools Protocol with
aiohttp: open a page, type keys, read xterm.js's screen buffer, take a screenshot
(tests/test_serve.py)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp

APT_PACKAGE = "chromium"
START_S = 60.0

# textual-serve's bundle keeps its terminal objects in a closure: find the class that owns
# `websocket_url` among the scopes of window.onload, then its live instances
# (Runtime.queryObjects), then xterm's buffer.
SCREEN_JS = """function () {
  const term = this[0] && this[0].terminal;
  if (!term) { return null; }
  const buffer = term.buffer.active, lines = [];
  for (let row = 0; row < term.rows; row++) {
    const line = buffer.getLine(buffer.viewportY + row);
    lines.push(line ? line.translateToString(true) : "");
  }
  return lines.join("\\n");
}"""


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium with a fresh profile; `page` is its first tab."""

    def __init__(self, exe: str, profile: Path, size: tuple[int, int] = (1280, 800)) -> None:
        args = [
            exe,
            "--headless=new",
            "--no-sandbox",  # CI containers run as root, where Chromium's sandbox cannot start
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--remote-debugging-port=0",
            f"--user-data-dir={profile}",
            f"--window-size={size[0]},{size[1]}",
            "about:blank",
        ]
        self.profile = profile
        self.log = open(profile.parent / "chromium.log", "wb")  # noqa: SIM115 (closed in close())
        quiet = {"stdout": self.log, "stderr": self.log, "stdin": subprocess.DEVNULL}
        self.proc = subprocess.Popen(args, **quiet)
        self.ids = itertools.count(1)
        self.http: aiohttp.ClientSession | None = None
        self.socket: aiohttp.ClientWebSocketResponse | None = None
        self.events: list[dict[str, Any]] = []

    async def connect(self) -> None:
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_S
        while not (port_file.is_file() and port_file.read_text().strip()):
            assert self.proc.poll() is None, f"chromium exited: {self.log_text()}"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port"
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        self.http = aiohttp.ClientSession()
        async with self.http.get(f"http://127.0.0.1:{port}/json/list") as response:
            targets = await response.json()
        page = next(target for target in targets if target["type"] == "page")
        self.socket = await self.http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        assert self.socket is not None
        number = next(self.ids)
        await self.socket.send_json({"id": number, "method": method, "params": params})
        while True:
            message = json.loads((await self.socket.receive(timeout=START_S)).data)
            if message.get("id") == number:
                assert "error" not in message, f"{method}: {message['error']}"
                return dict(message.get("result", {}))
            self.events.append(message)

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    async def screen(self) -> str:
        """The terminal's visible lines, read from xterm.js's own buffer."""
        onload = (await self.send("Runtime.evaluate", expression="window.onload"))["result"]
        if onload.get("type") != "function":
            return ""  # the page is still loading
        scopes = await self._internal(onload["objectId"], "[[Scopes]]")
        for scope in (await self.send("Runtime.getProperties", objectId=scopes))["result"]:
            scope_id = scope["value"]["objectId"]
            variables = await self.send("Runtime.getProperties", objectId=scope_id)
            for var in variables["result"]:
                value = var.get("value", {})
                source = value.get("description", "")
                if value.get("type") == "function" and "websocket_url" in source:
                    return await self._instances_screen(value["objectId"])
        raise AssertionError("no terminal class found in the page's script")

    async def _internal(self, object_id: str, name: str) -> str:
        props = await self.send("Runtime.getProperties", objectId=object_id, ownProperties=True)
        found = [p["value"]["objectId"] for p in props["internalProperties"] if p["name"] == name]
        return str(found[0])

    async def _instances_screen(self, class_id: str) -> str:
        proto = await self.send(
            "Runtime.callFunctionOn",
            objectId=class_id,
            functionDeclaration="function(){return this.prototype}",
        )
        proto_id = proto["result"]["objectId"]
        found = await self.send("Runtime.queryObjects", prototypeObjectId=proto_id)
        text = await self.send(
            "Runtime.callFunctionOn",
            objectId=found["objects"]["objectId"],
            functionDeclaration=SCREEN_JS,
            returnByValue=True,
        )
        return str(text["result"].get("value") or "")

    async def wait_screen(self, wanted: str, timeout: float = START_S) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = await self.screen()
            if wanted in text:
                return text
            assert time.monotonic() < deadline, f"{wanted!r} never on screen; it shows:\n{text}"
            await asyncio.sleep(0.25)

    async def press(self, key: str, code: str, text: str, key_code: int) -> None:
        """One key through the page's keyboard path (xterm.js's hidden textarea has the focus)."""
        common = {"key": key, "code": code, "windowsVirtualKeyCode": key_code}
        await self.send("Input.dispatchKeyEvent", type="keyDown", text=text, **common)
        await self.send("Input.dispatchKeyEvent", type="keyUp", **common)

    async def screenshot(self, path: Path) -> bytes:
        shot = await self.send("Page.captureScreenshot", format="png")
        data = base64.b64decode(shot["data"])
        path.write_bytes(data)
        return data

    def log_text(self) -> str:
        self.log.flush()
        return (self.profile.parent / "chromium.log").read_text(errors="replace")[-3000:]

    async def close(self) -> None:
        if self.socket is not None:
            await self.socket.close()
        if self.http is not None:
            await self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def missing_reason() -> str:
    return f"needs Chromium: apt-get install {APT_PACKAGE} (Debian's package; .ci/run installs it)"


def in_ci() -> bool:
    return bool(os.environ.get("CI"))
