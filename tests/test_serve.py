"""`vega-tui serve` as a real server: the token and the cookie on the page and the websocket,
Host and Origin checks, a session through a forwarder on another port (an SSH tunnel),
read-only controls, a sample delivered to the browser, and a real headless Chromium.

The Chromium test needs Debian's `chromium` package: it skips without it, except under CI (env
CI set), where it fails."""

from __future__ import annotations

import asyncio
import io
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from PIL import Image

from chromium_cdp import Browser, chromium_path, in_ci, missing_reason
from serve_helpers import Forwarder, Served, Terminal, write_wav
from vega_tui.__main__ import build_parser, served_argv
from vega_tui.__main__ import main as vega_main
from vega_tui.serve.cli import announce

FIXTURE = Path(__file__).parent / "fixtures" / "events" / "vits_completed"
WAV = "samples/step-00000000/01.wav"  # the first sample the recorded run lists
LAST_STEP = 16  # the recorded run's finished event


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The server over a runs folder with one finished voice run, its first sample a real WAV."""
    tmp = tmp_path_factory.mktemp("serve")
    shutil.copytree(FIXTURE, tmp / "runs" / "vits_completed")
    write_wav(tmp / "runs" / "vits_completed" / WAV)
    server = Served(tmp, "--runs-root", str(tmp / "runs"))
    yield server
    server.stop()


async def get(url: str, **headers: str) -> aiohttp.ClientResponse:
    async with aiohttp.ClientSession() as http:
        response = await http.get(url, allow_redirects=False, headers=headers)
        await response.read()
        return response


async def sign_in(served: Served) -> str:
    """Trade the token for the session cookie; returns the Cookie header that carries it."""
    response = await get(f"{served.base}/?token={served.token}&fontsize=14")
    assert response.status == 303
    assert response.headers["Location"] == "/?fontsize=14"  # the token leaves the address bar
    ((name, morsel),) = response.cookies.items()
    assert morsel["httponly"] is True and morsel["samesite"] == "Strict" and morsel["path"] == "/"
    assert morsel.value != served.token
    return f"{name}={morsel.value}"


def test_page_needs_the_token_then_the_cookie(served: Served) -> None:
    async def check() -> None:
        assert (await get(f"{served.base}/")).status == 401
        assert (await get(f"{served.base}/static/js/textual.js")).status == 401
        wrong = await get(f"{served.base}/?token={served.token[:-2]}xx")
        assert wrong.status == 403 and "Set-Cookie" not in wrong.headers
        cookie = await sign_in(served)
        assert (await get(f"{served.base}/", Cookie=cookie + "x")).status == 401
        page = await get(f"{served.base}/", Cookie=cookie)
        assert page.status == 200 and page.headers["Cache-Control"] == "no-store"
        body = await page.text()
        # The page names no address: the browser derives the websocket's from window.location.
        assert "textual.js" in body and "window.location.host" in body
        assert str(served.port) not in body and "127.0.0.1" not in body
        assert served.token not in body
        assert (await get(f"{served.base}/static/js/textual.js", Cookie=cookie)).status == 200
        # A DNS-rebinding page reaches us under its own name: refused even with the token.
        evil = f"evil.example:{served.port}"
        rebound = await get(f"{served.base}/?token={served.token}", Host=evil)
        assert rebound.status == 421
        # Another local port (an SSH tunnel's) is fine: only the name is checked.
        for name in ("localhost:8080", "[::1]:8080", "127.0.0.1"):
            assert (await get(f"{served.base}/", Cookie=cookie, Host=name)).status == 200, name

    asyncio.run(check())


def test_websocket_refused_without_session_or_with_a_foreign_origin(served: Served) -> None:
    async def refused(status: int, **headers: str) -> None:
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
                await http.ws_connect(f"{served.base}/ws", headers=headers)
            assert caught.value.status == status, headers

    async def check() -> None:
        cookie = await sign_in(served)
        await refused(401, Origin=served.base)
        await refused(401, Origin=served.base, Cookie=cookie[:-3] + "abc")
        await refused(403, Origin="http://evil.example", Cookie=cookie)
        await refused(403, Origin=f"http://127.0.0.1:{served.port + 1}", Cookie=cookie)
        await refused(403, Cookie=cookie)  # no Origin at all
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
                origin = {"Origin": served.base}
                await http.ws_connect(f"{served.base}/ws?token=nope", headers=origin)
            assert caught.value.status == 401

    asyncio.run(check())


def test_a_session_through_a_tunnel_watches_but_cannot_control(served: Served) -> None:
    """Through a forwarder on another port: the launch screen, the run's latest step, a refused
    stop, and a sample delivered to the browser (the download endpoint needs the cookie too)."""
    tunnel = Forwarder(served.port)
    local = f"http://127.0.0.1:{tunnel.port}"

    async def check() -> None:
        cookie = await sign_in(served)
        async with aiohttp.ClientSession() as http:
            socket = await http.ws_connect(
                f"{local}/ws?width=120&height=40", headers={"Origin": local, "Cookie": cookie}
            )
            term = Terminal(socket)
            await term.read_until("new training run")
            await term.press("s")  # Start: refused before any plan is looked at
            await term.read_until("cannot start a run: this dashboard is read-only")
            await term.press("r")
            await term.read_until("vits_completed")
            term.mark()
            await term.press("\r")
            await term.read_until("FINISHED")
            await term.press("x")
            await term.read_until("cannot stop the run: this dashboard is read-only")
            await term.press("4")
            await term.read_until("w In browser")
            await term.press("w")
            while not any(text[0] == "deliver_file_start" for text in term.texts):
                message = await socket.receive(timeout=30)
                if message.type == aiohttp.WSMsgType.TEXT:
                    term.texts.append(json.loads(message.data))
            key = next(text[1] for text in term.texts if text[0] == "deliver_file_start")
            assert (await get(f"{local}/download/{key}")).status == 401
            download = await http.get(f"{local}/download/{key}", headers={"Cookie": cookie})
            assert download.status == 200 and download.headers["Content-Type"].startswith("audio/")
            assert download.headers["Content-Disposition"].startswith("inline")
            wav = Path(served.out).parent / "runs" / "vits_completed" / WAV
            assert await download.read() == wav.read_bytes()
            await socket.close()

    try:
        asyncio.run(check())
    finally:
        tunnel.close()


def test_a_bind_beyond_loopback_warns_loudly() -> None:
    out, err = io.StringIO(), io.StringIO()
    announce("127.0.0.1", 8421, "abc", False, out, err)
    assert "http://127.0.0.1:8421/?token=abc" in out.getvalue() and err.getvalue() == ""
    announce("0.0.0.0", 8421, "abc", True, out, err)
    assert "WARNING: listening on 0.0.0.0, not a loopback address" in err.getvalue()


def test_each_session_runs_a_read_only_dashboard_unless_control_is_allowed(tmp_path: Path) -> None:
    run = shutil.copytree(FIXTURE, tmp_path / "runs" / "vits_completed")
    root = str(tmp_path / "runs")
    args = build_parser().parse_args(["serve", "--runs-root", root])
    assert served_argv(args) == ["--read-only", "--runs-root", root, "launch"]
    given_before = ["--runs-root", root, "serve", "--allow-control", "--attach", str(run)]
    args = build_parser().parse_args(given_before)
    assert served_argv(args) == ["--runs-root", root, "attach", str(run)]


def test_bad_arguments_are_refused_before_serving(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert vega_main(["serve", "--attach", str(tmp_path)]) == 2
    assert f"error: {tmp_path} is not a run folder" in capsys.readouterr().err
    assert vega_main(["serve", "--port", "70000"]) == 2
    assert "is not a port number" in capsys.readouterr().err


@pytest.fixture
def chromium() -> str:
    exe = chromium_path()
    if exe is None:
        if in_ci():
            pytest.fail(missing_reason())
        pytest.skip(missing_reason())
    return exe


def not_blank(png: bytes) -> tuple[int, float]:
    """Distinct colours, and the share of pixels unlike the most common one (the background)."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20) or []
    background = max(count for count, _ in colours)
    return len(colours), 1 - background / (image.width * image.height)


def test_chromium_shows_the_launch_screen_and_a_runs_latest_step(
    chromium: str,
    served: Served,
    tmp_path: Path,
) -> None:
    """Chromium through a forwarder on another port: the tokened URL becomes a cookie, the
    launch screen shows, then the runs list and the run's dashboard show its latest step; the
    text is read from xterm.js's buffer, and the screenshot is checked for content."""
    tunnel = Forwarder(served.port)
    local = f"http://127.0.0.1:{tunnel.port}/"
    (tmp_path / "profile").mkdir()
    browser = Browser(chromium, tmp_path / "profile")

    async def check() -> None:
        await browser.connect()
        await browser.send("Page.enable")
        await browser.send("Page.navigate", url=f"{local}?token={served.token}")
        await browser.wait_screen("new training run")
        # The token left the address bar; the cookie is out of the page's reach (HttpOnly).
        assert await browser.evaluate("location.href") == local
        assert await browser.evaluate("document.cookie") == ""
        await browser.evaluate("document.querySelector('.xterm-helper-textarea').focus()")
        await browser.press("r", "KeyR", "r", 82)
        runs = await browser.wait_screen("vits_completed")
        rows = [line for line in runs.splitlines() if "vits_completed" in line]
        row = next(line for line in rows if "│" not in line)  # the table's, not the chart legend
        assert re.search(rf"\b{LAST_STEP}\b", row), row
        await browser.press("Enter", "Enter", "\r", 13)
        run = await browser.wait_screen("FINISHED")
        assert re.search(rf"\bstep {LAST_STEP}\b", run), run
        png = await browser.screenshot(tmp_path / "dashboard.png")
        colours, drawn = not_blank(png)
        shown = f"{colours} colours, {drawn:.1%} drawn"
        assert colours > 8 and drawn > 0.02, f"blank screenshot? {shown}"

    try:
        asyncio.run(check())
    finally:
        asyncio.run(browser.close())
        tunnel.close()
