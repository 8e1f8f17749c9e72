"""`vega-tui`: until the dashboard lands, it shows the headless plan for the bundled demo profile.

The plan comes from `trainer-core train --dry-run`, the same code path users run, in a child
process so that this package never imports torch.
"""

from __future__ import annotations

import subprocess
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    profile = argv[0] if argv else "demo"
    print(f"vega-tui: showing the training plan for profile '{profile}' (dashboard coming soon)\n", flush=True)
    cmd = [sys.executable, "-m", "trainer_core", "train", "--profile", profile, "--dry-run"]
    return subprocess.run(cmd, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
