"""One `trainer-core train` run for bench/gpu_check.py and its summary: the subprocess with its
timeout, NVML's GPU utilisation sampled on a thread meanwhile, the run's events.jsonl read back into
a summary, and that summary added to the result as a samples/s figure.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import common

from trainer_core.contract.units import format_bytes

# Steps before the throughput window opens: CUDA context, cuDNN autotuning and allocator warm-up.
WARMUP_STEPS = 20
# One run past this is killed and recorded as failed, so a hung run cannot
# eat the device's whole lease.
RUN_TIMEOUT_S = 150
# How often NVML's utilisation is read while a training run goes on.
UTIL_SAMPLE_S = 0.2


def train(
    scratch: Path,
    name: str,
    profile: str,
    steps: int,
    sets: list[str],
    compute: str = "gpu",
    sample_util: bool = False,
    extra: tuple[str, ...] = (),
    warmup: int = WARMUP_STEPS,
) -> dict[str, Any]:
    """One `trainer-core train` run; its events summarised (with NVML's GPU
    utilisation when `sample_util`)."""
    run_dir = scratch / name
    argv = [
        sys.executable,
        "-m",
        "trainer_core",
        "train",
        "--profile",
        profile,
        "--run-dir",
        str(run_dir),
    ]
    argv += ["--compute-mode", compute, *extra]
    # A short warmup: the shipped profiles warm up over more steps than these runs take.
    settings = [
        f"train.max_steps={steps}",
        # must stay below max_steps (the OOM run takes 6)
        f"train.warmup_steps={min(10, steps // 2)}",
        "logging.report=false",
        "logging.step_interval_s=0.2",
    ]
    settings += sets
    for item in settings:
        argv += ["--set", item]
    sampler = UtilSampler() if sample_util else None
    try:
        proc = subprocess.run(
            argv,
            cwd=common.REPO,
            capture_output=True,
            text=True,
            check=False,
            timeout=RUN_TIMEOUT_S,
        )
        status, stderr = proc.returncode, proc.stderr[-2000:]
    except subprocess.TimeoutExpired:
        status, stderr = 124, f"killed after {RUN_TIMEOUT_S} s"
    finally:
        util = sampler.stop() if sampler is not None else None
    summary = summarise(read_events(run_dir / "events.jsonl"), status, stderr, warmup)
    summary["gpu_util_pct"] = util
    return summary


class UtilSampler:
    """NVML's GPU utilisation read every UTIL_SAMPLE_S on a thread while a run goes on;
    `stop()` gives the median of the readings taken while the GPU was busy at all (start-up and
    shut-down read 0 and are left out)."""

    def __init__(self) -> None:
        from trainer_core.contract.nvml import NvmlSource

        self.source = NvmlSource()
        self.readings: list[float] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, name="gpu-util", daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.done.wait(UTIL_SAMPLE_S):
            gpus = self.source.read()
            if gpus and gpus[0].utilization_pct is not None:
                self.readings.append(gpus[0].utilization_pct)

    def stop(self) -> float | None:
        self.done.set()
        self.thread.join()
        self.source.close()
        busy = [r for r in self.readings if r > 0]
        return statistics.median(busy) if busy else None


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def summarise(
    events: list[dict[str, Any]], status: int, stderr: str, warmup: int
) -> dict[str, Any]:
    steps = [e for e in events if e["type"] == "step"]
    rates = [e["samples_per_s"] for e in steps if e["step"] > warmup]
    finished = next((e for e in events if e["type"] == "finished"), {})
    device = next((e for e in events if e["type"] == "device_selected"), {})
    return {
        "exit": status,
        "status": finished.get("status"),
        "device": device.get("device"),
        "precision": device.get("precision"),
        "samples_per_s": statistics.median(rates) if rates else None,
        "first_loss": steps[0]["loss"] if steps else None,
        "last_loss": steps[-1]["loss"] if steps else None,
        "nonfinite": sum(e["type"] == "nonfinite" for e in events),
        "oom_recovered": [e for e in events if e["type"] == "oom_recovered"],
        "loss_scale": steps[-1].get("loss_scale") if steps else None,
        "mem_device_bytes": max((e.get("mem_device_bytes") or 0 for e in steps), default=None),
        "stderr": stderr if status else "",
    }


def add_run(result: common.Result, label: str, run: dict[str, Any]) -> None:
    ok = run["exit"] == 0 and run["status"] == "completed"
    learned = (
        run["first_loss"] is not None
        and run["last_loss"] is not None
        and run["last_loss"] < run["first_loss"]
    )
    detail = (
        f"{run['device']}, {run['precision']}; loss {fmt(run['first_loss'])} ->"
        f" {fmt(run['last_loss'])}; {run['nonfinite']} non-finite step(s); loss scale"
        f" {run['loss_scale']}; peak allocated {format_bytes(run['mem_device_bytes'])}"
    )
    if run.get("gpu_util_pct") is not None:
        detail += f"; GPU utilisation (NVML, median while busy) {run['gpu_util_pct']:.0f} %"
    result.add(
        f"{label}: samples/s",
        run["samples_per_s"],
        "/s",
        "completes, loss falls",
        ok and learned,
        detail,
    )
    if not ok:
        result.notes.append(f"{label} failed (exit {run['exit']}): {run['stderr']}")


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
