"""The vits model kind on a CUDA GPU (used by bench/gpu_check.py).

vits-small from scratch in bf16 and fp16 (two optimizer groups under one loss scaler); vits-medium,
Piper's most published shape, at its profile's batch in fp16 with its peak memory set against the
plan's estimate; and a random-weight Piper medium checkpoint, built by Piper's own training code
(piper-tts, a bench dependency), fine-tuned through `--init-from` in fp16. Each is a real
`trainer-core train` subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common

from trainer_core.contract.units import format_bytes

Train = Callable[..., dict[str, Any]]
AddRun = Callable[[common.Result, str, dict[str, Any]], None]


def check_vits(
    result: common.Result, scratch: Path, steps: int, train: Train, add_run: AddRun
) -> None:
    voice = common.voice_overrides(common.SMALL_VOICE)
    for precision in ("bf16", "fp16"):
        sets = [f"train.precision={json.dumps(precision)}", *voice]
        run = train(scratch, f"vits-small-{precision}", "vits-small", steps, sets, sample_util=True)
        add_run(result, f"vits-small {precision}", run)
    check_medium_memory(result, scratch, steps, train, add_run, voice)
    check_piper_finetune(result, scratch, steps, train, add_run, voice)


def check_medium_memory(
    result: common.Result,
    scratch: Path,
    steps: int,
    train: Train,
    add_run: AddRun,
    voice: list[str],
    compute: str = "gpu",
) -> None:
    """vits-medium at its profile's batch: the peak the GPU allocated against the plan's estimate,
    which sizes batches on the launch screen and must not undercount."""
    sets = ['train.precision="fp16"', *voice]
    run = train(scratch, "vits-medium-fp16", "vits-medium", steps, sets, sample_util=True)
    add_run(result, "vits-medium fp16 (profile batch)", run)
    estimate = plan_estimate("vits-medium", sets, compute)
    peak = run["mem_device_bytes"]
    if not estimate or not peak:
        result.add(
            "vits-medium peak allocated / plan estimate",
            None,
            "x",
            "<= 1",
            False,
            "no peak or estimate",
        )
        return
    detail = (
        f"peak {format_bytes(peak)}, plan estimate {format_bytes(estimate)} (fp32-calibrated on a"
        " CPU)"
    )
    result.add(
        "vits-medium peak allocated / plan estimate",
        peak / estimate,
        "x",
        "<= 1",
        peak <= estimate,
        detail,
    )


def plan_estimate(profile: str, sets: list[str], compute: str) -> int | None:
    """The dry run's vits memory estimate for `profile` with `sets` in compute mode `compute`."""
    argv = [
        sys.executable,
        "-m",
        "trainer_core",
        "train",
        "--profile",
        profile,
        "--dry-run",
        "--json",
    ]
    argv += ["--compute-mode", compute]
    for item in sets:
        argv += ["--set", item]
    proc = subprocess.run(
        argv, cwd=common.REPO, capture_output=True, text=True, check=False, timeout=120
    )
    if proc.returncode != 0:
        return None
    return int(json.loads(proc.stdout)["model"]["vits"]["memory_estimate_bytes"])


def check_piper_finetune(
    result: common.Result,
    scratch: Path,
    steps: int,
    train: Train,
    add_run: AddRun,
    voice: list[str],
) -> None:
    """A Piper medium checkpoint made by Piper's code, fine-tuned in fp16 on
    the GPU from `--init-from`."""
    sys.path.insert(0, str(common.REPO / "tests"))
    import piper_reference  # the tests' builder of Piper-made voices; needs piper-tts

    reference = piper_reference.make_reference(scratch / "piper-medium", "medium")
    sets = ['train.precision="fp16"', *voice]
    extra = ("--init-from", str(reference.checkpoint))
    run = train(
        scratch, "piper-medium-fp16", "vits-medium", steps, sets, sample_util=True, extra=extra
    )
    events = common.read_events(scratch / "piper-medium-fp16")
    init = next((e for e in events if e.type == "init_from"), None)
    add_run(result, "Piper medium checkpoint fine-tuned, fp16", run)
    ok = init is not None and init.form == "piper"
    detail = (
        "no init_from event" if init is None else f"{init.loaded} tensors loaded, {init.new} new"
    )
    result.add(
        "Piper checkpoint loaded on the GPU",
        1.0 if ok else 0.0,
        "",
        "1 (init_from form piper)",
        ok,
        detail,
    )
