"""The `trainer-core` command line: sub-commands load lazily, and each mode flag has one meaning."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainer_core.cli import build_parser, command_in
from trainer_core.cli.commands import MODULES
from trainer_core.cli.train_cmd import flag_overrides

LOADED = (
    "import runpy, sys\n"
    "sys.argv = ['trainer-core', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('trainer_core', run_name='__main__')\n"
    "except SystemExit:\n"
    "    pass\n"
    "print(sorted(m for m in sys.modules if m.startswith('trainer_core.cli.') or m == 'torch'), file=sys.stderr)\n"
)


def loaded_modules(*argv: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", LOADED, *argv], capture_output=True, text=True, timeout=60)
    return eval(out.stderr.strip().splitlines()[-1])  # the list printed last


def test_help_lists_every_command_and_imports_none_of_them() -> None:
    out = subprocess.run([sys.executable, "-m", "trainer_core", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and all(name in out.stdout for name in MODULES)
    assert loaded_modules("--help") == ["trainer_core.cli.commands"]


def test_a_command_imports_only_its_own_module() -> None:
    assert loaded_modules("schema") == [
        "trainer_core.cli.commands",
        "trainer_core.cli.common",
        "trainer_core.cli.schema_cmd",
    ]
    assert "trainer_core.cli.train_cmd" in loaded_modules("--debug", "train", "--help")


def test_command_in_skips_options_and_ignores_unknown_words() -> None:
    assert command_in(["--debug", "train", "--profile", "demo"]) == "train"
    assert command_in(["--version"]) is None and command_in(["nonsense"]) is None


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--data-mode", "text"], 'data.mode="text"'),
        (["--voice-mode", "text"], 'data.mode="text"'),  # the older spelling, kept as an alias
        (["--compute-mode", "cpu"], 'compute.mode="cpu"'),
        (["--mode", "cpu"], 'compute.mode="cpu"'),  # the older spelling, kept as an alias
    ],
)
def test_mode_flags_and_their_aliases(flags: list[str], expected: str) -> None:
    args = build_parser("train").parse_args(["train", *flags])
    assert flag_overrides(args) == [expected]


def test_check_data_takes_data_mode() -> None:
    for flag in ("--data-mode", "--mode"):
        args = build_parser("check-data").parse_args(["check-data", "somewhere", flag, "voice"])
        assert args.data_mode == "voice"
