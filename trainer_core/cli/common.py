"""Helpers shared by sub-commands: JSON output and the profile options every command takes."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def print_json(data: Any) -> None:
    """Print machine-readable output: one JSON document on stdout."""
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def add_set_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one profile field (TOML value syntax; repeatable); validated like the file",
    )
    parser.add_argument(
        "--no-machine-file",
        action="store_true",
        help="ignore the per-machine overrides file in the user config folder",
    )
