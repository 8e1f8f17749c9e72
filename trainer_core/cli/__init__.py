"""`trainer-core` command line: one argparse tree, one module per sub-command.

Each sub-command module exposes `register(subparsers)`, which adds its parser and sets
`handler` to a function taking the parsed namespace and returning an exit status.
Modules are imported lazily per command so that `trainer-core schema` never loads torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from trainer_core import __version__
from trainer_core.contract.errors import VegaError

# Sub-command name -> module under trainer_core.cli that registers it.
COMMANDS: dict[str, str] = {
    "train": "train_cmd",
    "profile": "profile_cmd",
    "schema": "schema_cmd",
    "resources": "resources_cmd",
    "check-data": "check_data_cmd",
    "ctl": "ctl_cmd",
    "synth": "synth_cmd",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainer-core",
        description="Vega's headless trainer: profiles, data checks, resources and training.",
    )
    parser.add_argument("--version", action="version", version=f"trainer-core {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module_name in COMMANDS.values():
        importlib.import_module(f"trainer_core.cli.{module_name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except VegaError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `trainer-core schema | head` closes the pipe early; that is not an error.
        sys.stderr.close()
        return 0
