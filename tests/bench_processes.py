"""Runs bench scripts for the smoke tests in processes forked from one interpreter that has already
imported torch: each run is still its own process (its environment, argv, folder, output and exit
status), but does not import torch and torch._dynamo afresh (test_bench.py alone, one process:
259.6 s with a fresh interpreter per script, 225.6 s forked)."""

from __future__ import annotations

import functools
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path

# Imported once by the fork server; nothing here reads Vega's or the benchmarks' environment.
PRELOAD = ["numpy", "torch", "torch._dynamo"]


def run_bench_script(
    script: Path, args: list[str], env: dict[str, str], cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    """`python SCRIPT ARGS` with `env` as its whole environment, as subprocess.run would give it."""
    with tempfile.TemporaryDirectory(prefix="bench-run-") as scratch:
        out, err = Path(scratch) / "stdout", Path(scratch) / "stderr"
        process = _fork_server().Process(target=_run, args=(str(script), args, env, str(cwd), str(out), str(err)))
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired([str(script), *args], timeout)
        argv = [sys.executable, str(script), *args]
        return subprocess.CompletedProcess(argv, process.exitcode, _text(out), _text(err))


@functools.cache
def _fork_server() -> multiprocessing.context.ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _run(script: str, args: list[str], env: dict[str, str], cwd: str, out: str, err: str) -> None:
    """In the forked child: become `python SCRIPT ARGS` (the script's folder first on sys.path)."""
    for fd, path in ((1, out), (2, err)):  # file descriptors, so the script's own children inherit them
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).parent))
    runpy.run_path(script, run_name="__main__")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
