"""bench/gpu_check: without a CUDA device it says so, records a skipped result and a doc that says "not measured";
with figures, the doc is rendered from the result JSON; a check that raises is recorded, not fatal.

The GPU paths themselves only run where a GPU is lent (see docs/gpu.md); here CUDA is hidden from the script
(CUDA_VISIBLE_DEVICES="") so the no-GPU path runs on every machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"


@pytest.fixture
def bench_modules(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCH))  # the scripts import `common` from beside them
    import common
    import gpu_check
    import gpu_torch_checks

    return common, gpu_check, gpu_torch_checks


def test_without_cuda_it_says_so_and_the_doc_says_not_measured(tmp_path: Path) -> None:
    doc, out = tmp_path / "gpu.md", tmp_path / "results"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "VEGA_BENCH_DATA": str(tmp_path / "data")}
    if not os.access(REPO / ".venv" / "bin" / "python", os.X_OK):
        env["VEGA_PYTHON"] = sys.executable
    done = subprocess.run(
        [str(BENCH / "gpu_check"), "--tiny", "--out", str(out), "--doc", str(doc)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "gpu_check: not measured: no CUDA device on " in done.stderr
    assert "run bench/gpu_check on a machine with an NVIDIA GPU" in done.stderr
    result = json.loads((out / "gpu.json").read_text(encoding="utf-8"))
    assert result["skipped"].startswith("not measured: no CUDA device on ") and result["figures"] == []
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# GPU check\n")
    assert "**not measured: no CUDA device on " in text and "Nothing here has run on a GPU yet." in text
    assert "| figure |" not in text


def test_doc_is_rendered_from_the_figures(tmp_path: Path, bench_modules) -> None:
    common, gpu_check, _ = bench_modules
    result = common.start_result("gpu", "10. GPU check", {"steps": 5})
    result.add("fused AdamW step speed / for-each", 1.8, "x", "", None, "16.8M parameters")
    result.add("real CUDA OOM in the optimizer step, retried in place", 1.0, "", "1 (raised, then ran)", True)
    result.seconds = 3.0
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(result.to_dict()), encoding="utf-8")
    gpu_check.write_gpu_doc(tmp_path / "docs" / "gpu.md", path)
    text = (tmp_path / "docs" / "gpu.md").read_text(encoding="utf-8")
    assert "| fused AdamW step speed / for-each | 1.8 x |" in text
    assert "| real CUDA OOM in the optimizer step, retried in place | 1 |" in text
    assert "not measured" not in text


def test_the_machine_line_names_the_gpu_from_the_facts_or_else_from_the_checks_note(
    tmp_path: Path, bench_modules
) -> None:
    common, gpu_check, _ = bench_modules
    result = common.start_result("gpu", "10. GPU check", {"steps": 5})
    result.machine.pop("gpu", None)  # as in a result recorded before the machine facts named the GPU
    result.notes.append("GPU: NVIDIA H200, 580.159.04, 143771 MiB; torch 2.11.0+cu130 (CUDA 13.0)")
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(result.to_dict()), encoding="utf-8")
    gpu_check.write_gpu_doc(tmp_path / "gpu.md", path)
    machine = next(
        line for line in (tmp_path / "gpu.md").read_text(encoding="utf-8").splitlines() if line.startswith("Machine:")
    )
    assert machine.endswith("; GPU NVIDIA H200, 580.159.04, 143771 MiB; torch 2.11.0+cu130 (CUDA 13.0).")
    result.machine["gpu"] = "NVIDIA A100-SXM4-80GB, 81920 MiB"
    path.write_text(json.dumps(result.to_dict()), encoding="utf-8")
    gpu_check.write_gpu_doc(tmp_path / "gpu.md", path)
    assert "; GPU NVIDIA A100-SXM4-80GB, 81920 MiB." in (tmp_path / "gpu.md").read_text(encoding="utf-8")
    cpu_only = {**result.machine, "gpu": None}
    import run_all

    assert run_all.machine_text(cpu_only).endswith("; no GPU")


def test_a_check_that_raises_is_recorded_as_missed_and_the_next_runs(bench_modules) -> None:
    common, _, gpu_torch_checks = bench_modules
    result = common.start_result("gpu", "10. GPU check", {})
    ran: list[str] = []

    def broken(_: object) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    gpu_torch_checks.guarded(result, "fused AdamW", broken)
    gpu_torch_checks.guarded(result, "torch.compile", lambda r: ran.append("compile"))
    [figure] = result.figures
    assert figure.name == "fused AdamW: ran" and figure.met is False and figure.value is None
    assert figure.detail == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert any(note.startswith("fused AdamW failed:") for note in result.notes) and ran == ["compile"]


def test_vits_medium_peak_is_checked_against_the_plans_real_estimate(
    bench_modules, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The estimate comes from one real dry run; the runs are stand-in summaries (no GPU here) whose peak sits
    under it (met) or over it (the negative control: missed)."""
    common, _, _ = bench_modules
    import gpu_train_runs
    import gpu_vits

    voice = common.voice_overrides(common.SMALL_VOICE)
    estimate = gpu_vits.plan_estimate("vits-medium", voice, "cpu")
    assert estimate is not None and estimate > 1 << 30
    monkeypatch.setattr(gpu_vits, "plan_estimate", lambda *_: estimate)  # one dry run serves both cases
    for peak_share, met in ((0.5, True), (1.5, False)):
        run = {"exit": 0, "status": "completed", "first_loss": 2.0, "last_loss": 1.0, "samples_per_s": 1.0}
        run |= {"device": "cuda:0", "precision": "fp16", "nonfinite": 0, "loss_scale": 512.0}
        run |= {"mem_device_bytes": int(estimate * peak_share)}
        result = common.start_result("gpu", "10. GPU check", {})
        summary = lambda *a, run=run, **k: run  # noqa: E731 - the stand-in for a training run
        gpu_vits.check_medium_memory(result, tmp_path, 4, summary, gpu_train_runs.add_run, voice, "cpu")
        figure = next(f for f in result.figures if f.name == "vits-medium peak allocated / plan estimate")
        assert figure.met is met and figure.value == pytest.approx(peak_share, rel=1e-3)
