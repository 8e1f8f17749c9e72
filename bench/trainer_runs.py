"""Where a benchmark's `trainer-core` commands run: in their own processes, or, for smoke runs
(--tiny), in the benchmark's process one after another.

A real figure keeps the process: a whole job's wall time includes its start. A smoke run checks
the benchmark's plumbing, and there a trainer process spends about 4 s of CPU importing torch and
torch._dynamo before steps that take a second; in this process both are imported once.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import traceback
from collections.abc import Sequence
from pathlib import Path

from paths import TRAINER_CORE

_HERE = {"on": False}


def run_here(on: bool) -> None:
    """Commands from now on run in this process (on) or in their own (off)."""
    _HERE["on"] = on


def trainer_core(
    args: Sequence[str], env: dict[str, str], err: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`trainer-core ARGS` with `env` as its whole environment; stdout captured, stderr written to
    `err` (captured when None)."""
    if not _HERE["on"]:
        with open(err, "wb") if err else contextlib.nullcontext(subprocess.PIPE) as sink:
            done = subprocess.run(
                [*TRAINER_CORE, *args], env=env, stdout=subprocess.PIPE, stderr=sink, check=False
            )
        out = done.stdout.decode("utf-8", "replace")
        text = "" if err else done.stderr.decode("utf-8", "replace")
        return subprocess.CompletedProcess(done.args, done.returncode, out, text)
    code, out, text = in_this_process(list(args), env)
    if err:
        err.write_text(text, encoding="utf-8")
        text = ""
    return subprocess.CompletedProcess([*TRAINER_CORE, *args], code, out, text)


def in_this_process(
    args: list[str], env: dict[str, str], cwd: Path | None = None
) -> tuple[int, str, str]:
    """`trainer-core ARGS` through its entry point in this process, with `env` as the whole
    environment, from `cwd`: (exit status, stdout, stderr). Main thread only (signal handlers).
    tests/conftest.py runs commands the same way."""
    from trainer_core.cli import main

    out, err, saved = io.StringIO(), io.StringIO(), dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        with (
            contextlib.chdir(cwd or os.getcwd()),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            try:
                code = main(args)
            except SystemExit as exc:  # argparse's errors and --help
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
            except Exception:  # what the process would print before exiting 1
                traceback.print_exc()
                code = 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return code, out.getvalue(), err.getvalue()
