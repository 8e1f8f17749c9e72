"""`trainer-core ctl RUN_DIR COMMAND`: send pause/resume/save/evaluate/stop to a live trainer.

`save` and `evaluate` wait until the work is done and print the checkpoint's path / the validation
loss (the trainer acknowledges on queueing and works at the end of its step); `--no-wait` only
queues them. Exits 0 when the trainer accepted (and, when waiting, finished) the command, 2 when it
refuses it, cannot be reached, or the run ends or the time runs out before the work is done.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainer_core.cli.commands import SUMMARIES
from trainer_core.cli.common import print_json
from trainer_core.cli.control_wait import DONE_EVENT, log_end, wait_until_done
from trainer_core.contract.control_client import DEFAULT_TIMEOUT_S, ControlConnection
from trainer_core.contract.control_protocol import COMMAND_NAMES
from trainer_core.contract.protocol import Event

# A save of a big model or a validation of a capped set takes seconds to
# minutes; an hour means stuck.
DEFAULT_WAIT_S = 3600.0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "ctl",
        help=SUMMARIES["ctl"],
        description=(
            "Send one command to the trainer serving RUN_DIR over its control socket and print the"
            " reply."
        ),
    )
    parser.add_argument(
        "run_dir", type=Path, metavar="RUN_DIR", help="the run folder of a live trainer"
    )
    parser.add_argument(
        "action", choices=COMMAND_NAMES, metavar="COMMAND", help=", ".join(COMMAND_NAMES)
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"seconds to wait for the reply (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--wait",
        type=positive_seconds,
        default=DEFAULT_WAIT_S,
        metavar="S",
        dest="wait",
        help=(
            "save/evaluate: seconds to wait for the checkpoint / validation (default"
            f" {DEFAULT_WAIT_S:g})"
        ),
    )
    parser.add_argument(
        "--no-wait", action="store_true", help="save/evaluate: return once the command is queued"
    )
    parser.add_argument("--json", action="store_true", help="print the reply as JSON")
    parser.set_defaults(handler=run_ctl)


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--timeout must be a number of seconds, got {text!r}"
        ) from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"--timeout must be more than 0 seconds, got {text!r}")
    return value


def run_ctl(args: argparse.Namespace) -> int:
    waits = args.action in DONE_EVENT and not args.no_wait
    offset = log_end(args.run_dir)
    with ControlConnection(args.run_dir, args.timeout) as connection:
        trainer_pid = connection.peer_pid() if waits else None
        reply = connection.send(args.action)
    if not reply.ok:
        if args.json:
            print_json(reply.model_dump(mode="json"))
        print(f"error: the trainer refused {args.action!r}: {reply.error}", file=sys.stderr)
        return 2
    done = (
        wait_until_done(args.run_dir, args.action, offset, args.wait, trainer_pid)
        if waits
        else None
    )
    if args.json:
        print_json(
            {
                **reply.model_dump(mode="json"),
                "done": done.model_dump(mode="json") if done else None,
            }
        )
    elif done is None:
        print(f"{reply.cmd}: ok" + (" (queued; not waiting)" if args.action in DONE_EVENT else ""))
    else:
        print(done_text(args.action, done))
    return 0


def done_text(cmd: str, event: Event) -> str:
    """`save: checkpoint written: PATH (step N, 1.2 MiB)` or `evaluate:
    validation loss X at step N`."""
    data = event.model_dump()
    if cmd == "save":
        return (
            f"save: checkpoint written: {data['path']} (step {data['step']},"
            f" {data['bytes'] / 2**20:.1f} MiB)"
        )
    loss = data.get("loss")
    return (
        f"evaluate: validation loss {'—' if loss is None else f'{loss:.4g}'} at step {data['step']}"
    )
