"""GPU-only paths, run for real on a CUDA machine: mixed precision with the loss
scaler, TF32, NVML, OOM, NCCL.

    bench/gpu_check [--steps 200] [--out DIR] [--doc docs/gpu.md]

Each training check trains the shipped profiles through `trainer-core train` (a real subprocess,
real events) and reads the figures from the run's events.jsonl: lm-small in fp32 (TF32 on and
off), bf16 and fp16 against the same profile on this machine's CPU cores, with the GPU's
utilisation sampled through NVML meanwhile; tts-small and vocoder-small in bf16 and fp16;
bench/gpu_vits.py's vits runs (vits-small in bf16 and fp16, vits-medium's memory against the
plan's estimate, a Piper checkpoint fine-tuned); lm-small with a batch far too big for the GPU,
which must end with `oom_recovered` events and a completed run; lm-small as a one-GPU NCCL
torchrun (`--nproc-per-node 1`); and bench/pipeline_efficiency.py (Vega against a raw loop) for
lm-small and vocoder-small. NVML's memory figures are compared with `nvidia-smi`, and
bench/gpu_torch_checks.py adds fused AdamW, pinned non-blocking copies overlapping compute, a real
OOM in the forward pass and in the optimizer step retried in place, and torch.compile. A check
that fails is recorded as a missed figure; the others still run.

The result JSON goes to --out (gpu.json) and is rendered into --doc. Without CUDA it says so on
stderr, writes a skipped result and a doc that says "not measured", and exits 0.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common
import gpu_torch_checks
import gpu_vits
import run_all
from gpu_train_runs import WARMUP_STEPS, UtilSampler, add_run, read_events, train

GPU_BATCH = 256
# lm-small on the CPU cores at the GPU batch: steps in all, and the first ones left out of its rate.
CPU_STEPS = 10
CPU_WARMUP_STEPS = 3
DOC = common.REPO / "docs" / "gpu.md"


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps per training run")
    parser.add_argument(
        "--doc", type=Path, default=DOC, help="the document rendered from the result (docs/gpu.md)"
    )
    parser.add_argument(
        "--skip-pipeline", action="store_true", help="leave out the raw-loop comparison (minutes)"
    )
    parser.add_argument(
        "--render-only", action="store_true", help="only rewrite --doc from the result in --out"
    )
    args = parser.parse_args()
    if args.render_only:
        write_gpu_doc(args.doc, args.out / "gpu.json")
        return 0
    steps = 30 if args.tiny else args.steps
    started = time.monotonic()
    result = common.start_result(
        "gpu", "10. GPU check", {"steps": steps, "warmup_steps_left_out": WARMUP_STEPS}
    )
    if not cuda_available():
        result.skipped = f"not measured: no CUDA device on {platform.node() or 'this machine'}"
        print(
            f"gpu_check: {result.skipped}; run bench/gpu_check on a machine with an NVIDIA GPU",
            file=sys.stderr,
        )
    else:
        scratch = common.scratch_dir("gpu-check-")
        try:
            run_checks(result, scratch, steps, pipeline=not args.skip_pipeline)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    path = common.finish_result(result, started, args.out)
    write_gpu_doc(args.doc, path)
    return 0


def write_gpu_doc(doc: Path, result_path: Path) -> None:
    """docs/gpu.md from the result JSON, in the layout of docs/benchmarks.md's sections."""
    result = common.load_result(result_path)
    machine = dict(result.machine)
    # a result from before machine facts named the GPU: its first note does
    if not machine.get("gpu"):
        machine["gpu"] = next(
            (n.removeprefix("GPU: ") for n in result.notes if n.startswith("GPU: ")), None
        )
    lines = [
        "# GPU check",
        "",
        (
            "Rendered by `bench/gpu_check` from its result JSON; do not edit by hand. It runs every"
            " code path that"
        ),
        "needs a CUDA GPU (see the docstring of bench/gpu_check.py for the list).",
        "",
        f"Machine: {run_all.machine_text(machine)}.",
        "",
    ]
    if result.skipped:
        lines += [f"**{result.skipped}.** Nothing here has run on a GPU yet.", ""]
    lines += run_all.render_section(result)
    lines += known_bench_bugs(result)
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")


def run_checks(result: common.Result, scratch: Path, steps: int, pipeline: bool = True) -> None:
    result.notes.append(gpu_name())
    gpu_torch_checks.guarded(result, "NVML against nvidia-smi", check_nvml)
    gpu_torch_checks.guarded(result, "training runs", lambda r: check_training(r, scratch, steps))
    gpu_torch_checks.guarded(
        result, "vits", lambda r: gpu_vits.check_vits(r, scratch, steps, train, add_run)
    )
    gpu_torch_checks.guarded(result, "real CUDA OOM in a run", lambda r: check_oom(r, scratch))
    gpu_torch_checks.guarded(
        result, "one-GPU NCCL torchrun", lambda r: check_nccl(r, scratch, steps)
    )
    gpu_torch_checks.run_torch_checks(result)
    if pipeline:  # last: the longest check, generating a 300-clip voice corpus first
        gpu_torch_checks.guarded(
            result, "pipeline efficiency", lambda r: check_pipeline(r, scratch)
        )
    else:
        result.notes.append("pipeline efficiency against a raw loop: left out (--skip-pipeline)")


def check_training(result: common.Result, scratch: Path, steps: int) -> None:
    # A batch big enough that the GPU, not Python, sets the pace (lm-small ships
    # with 16 for small machines).
    big = [f"train.batch_size={GPU_BATCH}"]
    lm = {
        p: train(
            scratch,
            f"lm-{p}",
            "lm-small",
            steps,
            [*big, f"train.precision={json.dumps(p)}"],
            sample_util=True,
        )
        for p in PRECISIONS
    }
    lm["fp32-no-tf32"] = train(
        scratch,
        "lm-fp32-no-tf32",
        "lm-small",
        steps,
        [*big, 'train.precision="fp32"', "train.tf32=false"],
    )
    # The CPU has no autotuning to wait out, and at this batch a step takes seconds: a short window.
    cpu = train(
        scratch, "lm-cpu", "lm-small", CPU_STEPS, big, compute="cpu", warmup=CPU_WARMUP_STEPS
    )
    report_lm(result, lm, cpu)
    for profile in ("tts-small", "vocoder-small"):
        for precision in ("bf16", "fp16"):
            sets = [
                f"train.precision={json.dumps(precision)}",
                *common.voice_overrides(common.SMALL_VOICE),
            ]
            name = f"{profile}-{precision}"
            add_run(
                result,
                f"{profile} {precision}",
                train(scratch, name, profile, steps, sets, sample_util=True),
            )


PRECISIONS = ("fp32", "bf16", "fp16")


def cuda_available() -> bool:
    code = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def gpu_name() -> str:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    import torch

    return f"GPU: {out.stdout.strip()}; torch {torch.__version__} (CUDA {torch.version.cuda})"


def check_nvml(result: common.Result) -> None:
    """NVML through Vega's own probe against nvidia-smi's reading of the same GPU."""
    from trainer_core.contract.resources import probe

    gpu = probe().gpus[0]
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    )
    used_mib, total_mib = (float(x) for x in out.stdout.splitlines()[0].split(","))
    total_diff = abs(gpu.memory_total_bytes / 2**20 - total_mib)
    used_diff = abs(gpu.memory_used_bytes / 2**20 - used_mib)
    result.add(
        "NVML total memory minus nvidia-smi's", total_diff, "MiB", "<= 1 MiB", total_diff <= 1.0
    )
    result.add(
        "NVML used memory minus nvidia-smi's", used_diff, "MiB", "<= 64 MiB", used_diff <= 64.0
    )


def report_lm(result: common.Result, lm: dict[str, dict[str, Any]], cpu: dict[str, Any]) -> None:
    for key, run in lm.items():
        add_run(result, f"lm-small {key}", run)
    add_run(result, "lm-small on this machine's CPU cores", cpu)
    base = cpu["samples_per_s"]
    for key in PRECISIONS:
        rate = lm[key]["samples_per_s"]
        if rate and base:
            result.add(
                f"lm-small {key} on the GPU / on the CPU",
                rate / base,
                "x",
                "",
                None,
                "measured in this run",
            )
    tf32, plain = lm["fp32"]["samples_per_s"], lm["fp32-no-tf32"]["samples_per_s"]
    if tf32 and plain:
        result.add("fp32 with TF32 / without", tf32 / plain, "x", "", None, "train.tf32 on vs off")


OOM_FIGURE = "real CUDA OOM: recoveries before the step fit"


def known_bench_bugs(result: common.Result) -> list[str]:
    """Misses that are the check's own fault, said as such until a GPU reruns the fixed check."""
    oom = next((f for f in result.figures if f.name == OOM_FIGURE), None)
    if oom is None or oom.met or not any("fewer than one batch" in n for n in result.notes):
        return []
    return [  # render_section ended with the notes and a blank line
        (
            "**Known bench bug, not a trainer result:** the trainer-level OOM row above never"
            " reached the GPU. The check"
        ),
        (
            "asks for a batch of 16384 items on a training split of 634, so the trainer refuses the"
            " plan before its"
        ),
        (
            "first step and no OOM happens; the row says nothing about OOM recovery until"
            " `bench/gpu_check` is rerun"
        ),
        (
            "on a GPU with a split larger than the batch. The in-place retries (forward pass,"
            " optimizer step) did run."
        ),
    ]


def check_oom(result: common.Result, scratch: Path) -> None:
    """A batch far beyond the GPU's memory: a real CUDA OOM, recovered by
    halving the micro-batch."""
    sets = [
        "data.context_bytes=1024",
        "train.batch_size=16384",
        "train.grad_accum=1",
        'train.precision="fp32"',
    ]
    run = train(scratch, "lm-oom", "lm-small", 6, sets)
    halvings = run["oom_recovered"]
    last = halvings[-1] if halvings else {}
    ok = run["exit"] == 0 and run["status"] == "completed" and bool(halvings)
    detail = (
        f"micro-batch 16384 -> {last.get('micro_batch')} x accumulation {last.get('grad_accum')}"
        f" after {len(halvings)} OOM(s); first:"
        f" {halvings[0]['message'][:120] if halvings else 'none'}"
    )
    result.add(OOM_FIGURE, len(halvings), "", ">= 1, run completes", ok, detail)
    if not ok:
        result.notes.append(f"OOM check failed (exit {run['exit']}): {run['stderr']}")


def check_nccl(result: common.Result, scratch: Path, steps: int) -> None:
    """lm-small as a one-process torchrun on the GPU: the process group must come
    up on NCCL and the run complete."""
    run = train(scratch, "lm-nccl", "lm-small", min(steps, 60), [], extra=("--nproc-per-node", "1"))
    hello = next(
        (e for e in read_events(scratch / "lm-nccl" / "events.jsonl") if e["type"] == "hello"), {}
    )
    # the hello event names the process group's backend
    backend = str(hello.get("backend") or "none")
    ok = run["exit"] == 0 and run["status"] == "completed" and "nccl" in backend
    detail = (
        f"{run['device']}; backend {backend}; world size {hello.get('world_size')}; exit"
        f" {run['exit']}"
    )
    result.add(
        "one-GPU NCCL torchrun: samples/s",
        run["samples_per_s"],
        "/s",
        "completes on NCCL",
        ok,
        detail,
    )
    if not ok:
        result.notes.append(f"NCCL torchrun failed (exit {run['exit']}): {run['stderr']}")


def check_pipeline(result: common.Result, scratch: Path) -> None:
    """bench/pipeline_efficiency.py on this GPU (Vega against a raw loop), its figures copied in."""
    out = scratch / "pipeline-results"
    argv = [
        sys.executable,
        str(common.BENCH / "pipeline_efficiency.py"),
        "--models",
        "lm-small,vocoder-small",
    ]
    argv += ["--out", str(out)]
    sampler = UtilSampler()
    try:
        proc = subprocess.run(
            argv, cwd=common.REPO, capture_output=True, text=True, check=False, timeout=240
        )
    finally:
        util = sampler.stop()
    if proc.returncode != 0 or not (out / "pipeline.json").is_file():
        result.add(
            "pipeline efficiency on the GPU: ran", None, "", "runs", False, proc.stderr[-300:]
        )
        return
    for figure in common.load_result(out / "pipeline.json").figures:
        busy = (
            f"; GPU utilisation {util:.0f} % (NVML, median while busy)" if util is not None else ""
        )
        figure.name, figure.detail = f"GPU: {figure.name}", figure.detail + busy
        result.figures.append(figure)


if __name__ == "__main__":
    raise SystemExit(main())
