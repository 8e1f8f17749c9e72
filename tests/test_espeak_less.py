"""The TTS front-end tests once more with no espeak-ng program reachable: what a bare machine sees.

CI's machine may have apt's espeak-ng (a developer installed it, or a later session did). This run rebuilds
PATH without every folder that holds an `espeak-ng` executable and sets VEGA_TEST_NO_ESPEAK_BINARY=1, so
tests/test_text_frontend.py asserts the program really is gone, its binary-only tests skip, and everything
else (phonemes for `auto` units, the voice task's samples) must pass on the wheel's library alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FRONT_END_TESTS = ["tests/test_text_frontend.py", "tests/test_voice_task.py"]


def path_without_espeak(path: str) -> str:
    """PATH minus each folder holding an espeak-ng executable."""
    kept = [d for d in path.split(os.pathsep) if d and not os.access(os.path.join(d, "espeak-ng"), os.X_OK)]
    return os.pathsep.join(kept)


def test_front_end_tests_pass_with_no_espeak_program() -> None:
    env = {**os.environ, "PATH": path_without_espeak(os.environ.get("PATH", "")), "VEGA_TEST_NO_ESPEAK_BINARY": "1"}
    assert shutil.which("espeak-ng", path=env["PATH"]) is None
    # One process: the workers of the outer run already share the cores.
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-rs", *FRONT_END_TESTS]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=280)
    report = done.stdout[-3000:] + done.stderr[-2000:]
    assert done.returncode == 0, report
    assert " passed" in done.stdout and " failed" not in done.stdout, report
    # Only the tests that need the program itself may skip, and they say how to install it.
    skips = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips and all("apt install espeak-ng" in line for line in skips), report
