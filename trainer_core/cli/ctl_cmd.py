"""`trainer-core ctl RUN_DIR COMMAND`: send pause/resume/save/evaluate/stop to a live trainer.

Exits 0 when the trainer accepts the command, 2 when it refuses it or cannot be reached.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainer_core.cli.common import print_json
from trainer_core.control_client import DEFAULT_TIMEOUT_S, send_command
from trainer_core.protocol import COMMAND_NAMES


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "ctl",
        help="send a command (pause, resume, save, evaluate, stop) to a running trainer",
        description="Send one command to the trainer serving RUN_DIR over its control socket and print the reply.",
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run folder of a live trainer")
    parser.add_argument("action", choices=COMMAND_NAMES, metavar="COMMAND", help=", ".join(COMMAND_NAMES))
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"seconds to wait for the reply (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument("--json", action="store_true", help="print the reply as JSON")
    parser.set_defaults(handler=run_ctl)


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--timeout must be a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"--timeout must be more than 0 seconds, got {text!r}")
    return value


def run_ctl(args: argparse.Namespace) -> int:
    reply = send_command(args.run_dir, args.action, timeout=args.timeout)
    if args.json:
        print_json(reply.model_dump(mode="json"))
    elif reply.ok:
        print(f"{reply.cmd}: ok")
    if not reply.ok:
        print(f"error: the trainer refused {args.action!r}: {reply.error}", file=sys.stderr)
        return 2
    return 0
