"""`trainer-core` command line: one argparse tree, one module per sub-command.

Each sub-command module exposes `register(subparsers)`, which adds its parser and sets
`handler` to a function taking the parsed namespace and returning an exit status.
Only the module of the command being run is imported (`cli.commands` lists them all), so that
`trainer-core --help` and `trainer-core schema` never load torch or the other commands.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from trainer_core import __version__
from trainer_core.cli.commands import MODULES, SUMMARIES
from trainer_core.contract.errors import VegaError


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser, with `command`'s own parser registered (its module
    imported) and the others listed by name and summary only, so that neither `--help`
    nor one command imports the rest."""
    parser = argparse.ArgumentParser(
        prog="trainer-core",
        description="Vega's headless trainer: profiles, data checks, resources and training.",
    )
    parser.add_argument("--version", action="version", version=f"trainer-core {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module_name in MODULES.items():
        if name == command:
            importlib.import_module(f"trainer_core.cli.{module_name}").register(sub)
        else:
            sub.add_parser(name, help=SUMMARIES[name], add_help=False)
    return parser


def command_in(argv: list[str]) -> str | None:
    """The sub-command named in `argv` (the first word that is not an option), if it is one."""
    word = next((arg for arg in argv if not arg.startswith("-")), None)
    return word if word in MODULES else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(command_in(argv))
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
