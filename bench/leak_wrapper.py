"""Negative control for the soak: run a Python module (the trainer or the dashboard) with a
thread that keeps memory it never frees, at a steady rate, so a soak that measures resident
memory must see the process grow.

    python bench/leak_wrapper.py MIB_PER_MIN MODULE [ARGS...]
"""

from __future__ import annotations

import runpy
import sys
import threading
import time


def leak(mib_per_min: float) -> None:
    kept = []
    while True:
        # Multiplying writes every byte: the pages are resident, not only reserved.
        kept.append(bytearray(b"\x01") * int(mib_per_min * 2**20 / 60))
        time.sleep(1.0)


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rate, module, *rest = sys.argv[1:]
    threading.Thread(target=leak, args=(float(rate),), daemon=True, name="leak").start()
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
