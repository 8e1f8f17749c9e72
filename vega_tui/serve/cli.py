"""`vega-tui serve`: its options, the start-up message, and the server's life until Ctrl+C.

aiohttp and textual-serve (the `web` extra) are imported only here, when the command runs.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import signal
import socket
import sys
from pathlib import Path
from typing import TextIO

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8421
EXTRA_HINT = "vega-tui serve needs the web extra: pip install -e '.[web]'"
WARNING = """
WARNING: listening on {bound}, not a loopback address: anyone who reaches port {port} can try
WARNING: the token, and plain HTTP carries the token and every screen unencrypted.
WARNING: Prefer the default 127.0.0.1 and an SSH tunnel (README, "Serving the dashboard").
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    host_help = f"address to listen on (default {DEFAULT_HOST}; others print a warning)"
    parser.add_argument("--host", default=DEFAULT_HOST, help=host_help)
    port_help = f"port (default {DEFAULT_PORT}; 0: any free one)"
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=port_help)
    control_help = "let the browser pause, save, stop, start and resume runs (default: watch only)"
    parser.add_argument("--allow-control", action="store_true", help=control_help)
    attach_help = "open this run's dashboard instead of the launch screen"
    parser.add_argument("--attach", type=Path, metavar="RUN_DIR", help=attach_help)
    # Also after `serve`; SUPPRESS keeps one given before it (vega-tui --runs-root D serve).
    keep = argparse.SUPPRESS
    parser.add_argument("--runs-root", type=Path, metavar="DIR", default=keep, help="runs folder")


def url_host(bound: str) -> str:
    """The host to print in the URL: the machine's name for a wildcard bind, IPv6 in brackets."""
    from vega_tui.serve.auth import WILDCARDS

    host = socket.gethostname() if bound in WILDCARDS else bound.strip("[]")
    return f"[{host}]" if ":" in host else host


def announce(bound: str, port: int, token: str, control: bool, out: TextIO, err: TextIO) -> None:
    """The URL (printed once, the token in it) and, for a bind beyond this machine, a warning."""
    from vega_tui.serve.auth import is_loopback

    url = f"http://{url_host(bound)}:{port}/?token={token}"
    tunnel = f"ssh -L 8080:127.0.0.1:{port} HOST"
    mode = "control allowed" if control else "read-only: watching, samples and views"
    print(f"Vega dashboard ({mode}). Open:\n\n    {url}\n", file=out)
    print(f"Through an SSH tunnel: {tunnel}, then open", file=out)
    print(f"    http://127.0.0.1:8080/?token={token}", file=out)
    print("Ctrl+C stops the server.", file=out, flush=True)
    if not is_loopback(bound):
        print(WARNING.format(bound=bound, port=port), file=err, flush=True)


async def serve_forever(command: str, host: str, port: int, control: bool) -> None:
    from aiohttp import web

    from vega_tui.serve.auth import Guard
    from vega_tui.serve.server import DashboardServer

    guard = Guard(host)
    app = DashboardServer(command, guard).app()
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await web.TCPSite(runner, host, port).start()
        bound_port = runner.addresses[0][1]
        announce(host, bound_port, guard.token, control, sys.stdout, sys.stderr)
        await stop.wait()
    finally:
        await runner.cleanup()


def serve(args: argparse.Namespace, dashboard_argv: list[str]) -> int:
    """Run the server until Ctrl+C; each browser session runs `vega-tui DASHBOARD_ARGV`."""
    try:
        import aiohttp  # noqa: F401
        import textual_serve  # noqa: F401
    except ImportError:
        print(f"error: {EXTRA_HINT}", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"error: --port {args.port} is not a port number (0 to 65535)", file=sys.stderr)
        return 2
    command = shlex.join([sys.executable, "-m", "vega_tui", *dashboard_argv])
    try:
        asyncio.run(serve_forever(command, args.host, args.port, args.allow_control))
    except OSError as exc:
        where = f"{args.host}:{args.port}"
        print(f"error: cannot listen on {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0
