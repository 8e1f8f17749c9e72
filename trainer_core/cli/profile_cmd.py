"""`trainer-core profile`: validate, show and list training profiles.

- `profile validate FILE...` prints `ok  FILE` per valid profile and the error per invalid one
  (exit 2 if any is invalid).
- `profile show FILE [--set k=v ...] [--no-machine-file] [--describe]` prints the fully
  resolved profile as TOML, headed by comments naming the sources it was built from.
- `profile list` prints the profiles available by name.

FILE is a path, or a profile name looked up in the profile folders (`demo`, `tts-small.toml`).
Torch-free, like the loader it calls.
"""

from __future__ import annotations

import argparse
import sys

from trainer_core.cli.commands import SUMMARIES
from trainer_core.cli.common import add_set_option
from trainer_core.contract.errors import ProfileError
from trainer_core.contract.profile_loader import (
    LoadedProfile,
    display_path,
    find_profile,
    list_profiles,
    profile_dirs,
    profile_to_toml,
    resolve_profile,
)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("profile", help=SUMMARIES["profile"])
    actions = parser.add_subparsers(dest="profile_command", metavar="ACTION")
    actions.required = True
    _register_validate(actions)
    _register_show(actions)
    _register_list(actions)


def _register_validate(actions: argparse._SubParsersAction) -> None:
    parser = actions.add_parser("validate", help="check profiles; exit 2 if any is invalid")
    parser.add_argument("files", nargs="+", metavar="FILE", help="profile file or name")
    add_set_option(parser)
    parser.set_defaults(handler=run_validate)


def _register_show(actions: argparse._SubParsersAction) -> None:
    parser = actions.add_parser("show", help="print the fully resolved profile as TOML")
    parser.add_argument("file", metavar="FILE", help="profile file or name")
    add_set_option(parser)
    parser.add_argument(
        "--describe", action="store_true", help="write each field's description above it"
    )
    parser.set_defaults(handler=run_show)


def _register_list(actions: argparse._SubParsersAction) -> None:
    parser = actions.add_parser("list", help="list the profiles available by name")
    parser.set_defaults(handler=run_list)


def _load(name_or_path: str, args: argparse.Namespace) -> LoadedProfile:
    machine_file = None if args.no_machine_file else "default"
    return resolve_profile(find_profile(name_or_path), args.overrides, machine_file)


def run_validate(args: argparse.Namespace) -> int:
    failures = 0
    for name in args.files:
        try:
            _load(name, args)
        except ProfileError as exc:
            failures += 1
            print(f"error: {exc}", file=sys.stderr, flush=True)
        else:
            print(f"ok  {name}", flush=True)
    return 2 if failures else 0


def run_show(args: argparse.Namespace) -> int:
    loaded = _load(args.file, args)
    print(
        f"# Resolved profile: {display_path(loaded.path)}" if loaded.path else "# Resolved profile"
    )
    print("# Built from, in order applied:")
    for source in loaded.sources:
        print(f"#   {source}".replace("\n", "\\n"))  # a --set value may hold a newline
    print()
    sys.stdout.write(profile_to_toml(loaded.profile, describe=args.describe))
    return 0


def run_list(args: argparse.Namespace) -> int:
    profiles = list_profiles()
    if not profiles:
        folders = ", ".join(str(folder) for folder in profile_dirs())
        print(f"no profiles found (looked in: {folders})", file=sys.stderr)
        return 0
    for path in profiles:
        print(f"{path.stem:<20} {display_path(path)}")
    return 0
