"""Machine facts a benchmark result records: CPU, versions, GPU, load, the
command and the commit measured.

Imported by `common` (which re-exports these names); sits beside the scripts like it.
"""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """CPU model, cores, RAM and the versions that decide the figures (torch
    read from metadata: no import)."""
    import psutil

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "torch": package_version("torch"),
        "lightning": package_version("lightning"),
        "textual": package_version("textual"),
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "gpu": gpu_model(),
    }


def gpu_model() -> str | None:
    """The NVIDIA GPUs nvidia-smi lists ("name, memory" each), or None where
    there is none (no torch import)."""
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return "; ".join(names) if out.returncode == 0 and names else None


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def this_command() -> str:
    """The command that ran this script, relative to the repository (what
    docs/benchmarks.md prints)."""
    python = Path(sys.executable)
    shown_python = os.path.relpath(python, REPO) if python.is_relative_to(REPO) else python.name
    script = Path(sys.argv[0]).resolve()
    shown_script = os.path.relpath(script, REPO) if script.is_relative_to(REPO) else str(script)
    return shlex.join([shown_python, shown_script, *sys.argv[1:]])


def git_commit() -> str:
    """The commit the benchmark measures: HEAD's hash, with " dirty" when the
    tree has changes ("" outside git)."""
    head, changed = _git("rev-parse", "HEAD"), _git("status", "--porcelain")
    if not head:
        return ""
    return head + (" dirty" if changed else "")


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""
