"""Negative controls for the bad-input drill: run a Python module (the trainer's CLI) with a fault
of our own, which the drill must count.

    python bench/bad_input_wrapper.py crash MODULE [ARGS...]
        the audio decoder raises an exception the product does not expect (ZeroDivisionError)
    python bench/bad_input_wrapper.py lost MODULE [ARGS...]
        after the command, the first file of the first folder named in ARGS is cut to half
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

INJECTED = "injected by bench/bad_input_wrapper.py: the decoder failed unexpectedly"


def break_decoder() -> None:
    import soundfile

    def broken(*_args: object, **_kwargs: object) -> None:
        raise ZeroDivisionError(INJECTED)

    soundfile.info = broken
    soundfile.read = broken
    soundfile.blocks = broken


def damage_first_file(args: list[str]) -> None:
    folder = next((Path(a) for a in args if Path(a).is_dir()), None)
    if folder is None:
        return
    files = sorted(Path(d) / f for d, _, names in os.walk(folder) for f in names)
    whole = [f for f in files if f.is_file() and not f.is_symlink() and f.stat().st_size > 0]
    if whole:
        os.truncate(whole[0], whole[0].stat().st_size // 2)


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] not in ("crash", "lost"):
        sys.exit(__doc__)
    mode, module, *rest = sys.argv[1:]
    if mode == "crash":
        break_decoder()
    sys.argv = [module, *rest]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        if mode == "lost":
            damage_first_file(rest)


if __name__ == "__main__":
    main()
