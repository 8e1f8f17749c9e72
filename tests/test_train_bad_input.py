"""Bad input to a real trainer: an unwritable run folder, a full disk, damaged or foreign checkpoints,
a compute mode this machine cannot serve. Each gets a clear message, never a traceback or a lost checkpoint.

One module fixture runs them through the trainer's entry point in this process (what a user sees is the
exit status and the message), the resumes after the finished run they resume from; each test checks its own.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import FAULTS_ON, TrainerLauncher, TrainerProcess, finished, of_type
from trainer_core.engine.checkpoint_manager import load_checkpoint

# The second save fails as on a full disk; the run keeps the checkpoints of steps 10 and 30.
ENOSPC = {"train.max_steps": 30, "train.checkpoint_every_steps": 10}


def resume_from_copy(
    launcher: TrainerLauncher, source: Path, name: str, settings: dict, tear_newest: bool = False
) -> TrainerProcess:
    copy = shutil.copytree(source, launcher.root / name)
    if tear_newest:
        # A torn file, as a copy tool or a dying disk might leave.
        newest = max((copy / "checkpoints").glob("step-*.pt"))
        newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 3])
    return launcher.run_here(name, settings, "--resume", "auto", run_dir=copy)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Iterator[dict[str, TrainerProcess]]:
    root = tmp_path_factory.mktemp("bad")
    (root / "a-file").write_text("in the way\n")
    launcher = TrainerLauncher(root, corpus)
    first = {
        # Also longer than a unix socket path may be: the run trains without a control socket.
        "enospc": launcher.run_here(
            "enospc",
            ENOSPC,
            env={**FAULTS_ON, "VEGA_FAULT_CHECKPOINT_ENOSPC": "2"},
            run_dir=root / ("deep-" * 20) / "run",
        ),
        "unwritable": launcher.run_here("unwritable", {}, run_dir=root / "a-file" / "run"),
        "gpu": launcher.run_here("gpu", {}, "--mode", "gpu"),
    }
    finished_run = first["enospc"].run_dir
    assert first["enospc"].proc.returncode == 0, first["enospc"].stderr
    second = {
        "corrupt": resume_from_copy(launcher, finished_run, "corrupt", {"train.max_steps": 40}, tear_newest=True),
        "mismatch": resume_from_copy(launcher, finished_run, "mismatch", {**ENOSPC, "model.hidden": 64}),
    }
    yield {**first, **second}
    launcher.close()


def assert_clean_refusal(run: TrainerProcess, *fragments: str) -> None:
    assert run.proc.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    error_lines = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert len(error_lines) == 1, run.stderr
    for fragment in fragments:
        assert fragment in error_lines[0]


def test_an_unwritable_run_folder_is_refused_before_any_work(runs) -> None:
    run = runs["unwritable"]
    assert_clean_refusal(run, "cannot create run folder", str(run.run_dir), "--run-dir")


def test_gpu_mode_without_a_gpu_is_refused(runs) -> None:
    assert_clean_refusal(runs["gpu"], "--mode gpu", "use --mode mixed or --mode cpu")


def test_a_full_disk_during_a_checkpoint_keeps_the_previous_one_and_the_run(runs) -> None:
    run = runs["enospc"]
    assert run.proc.returncode == 0, run.stderr
    events = run.events()
    (error,) = of_type(events, "error")
    assert "disk is full" in error.message and "step-00000010.pt is intact" in error.message
    folder = run.run_dir / "checkpoints"
    assert not (folder / "step-00000020.pt").exists()
    assert not list(folder.glob("*.tmp"))
    assert load_checkpoint(folder / "step-00000010.pt")["step"] == 10
    end = finished(events)
    assert end.status == "completed" and end.step == 30
    assert load_checkpoint(folder / "step-00000030.pt")["step"] == 30


def test_resume_auto_skips_a_corrupt_newest_checkpoint(runs) -> None:
    run = runs["corrupt"]
    assert run.proc.returncode == 0, run.stderr
    events = run.events()
    skipped = [e for e in of_type(events, "warning") if e.code == "checkpoint_skipped"]
    assert len(skipped) == 1
    assert "step-00000030.pt is unreadable" in skipped[0].message and "using step-00000010.pt" in skipped[0].message
    logs = [e.message for e in of_type(events, "log")]
    assert any(m.startswith("resumed from") and "step-00000010.pt: step 10," in m for m in logs)
    end = finished(events)
    assert end.status == "completed" and end.step == 40


def test_a_checkpoint_of_a_different_model_is_refused(runs) -> None:
    run = runs["mismatch"]
    assert_clean_refusal(
        run,
        "the checkpoint was written by a different model",
        "byte_emb.weight: checkpoint [256, 32] vs model [256, 64]",
    )
    assert finished(run.events()).status == "failed"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--resume", "auto"], "--resume auto continues a run folder: pass it with --run-dir"),
        (["--resume", "missing/step-00000010.pt"], "no such checkpoint file"),
    ],
)
def test_an_impossible_resume_is_refused_before_any_work(
    tmp_path: Path, corpus: Path, args: list[str], message: str
) -> None:
    launcher = TrainerLauncher(tmp_path, corpus)
    command = launcher.command(tmp_path / "run", {}, None, tuple(args))
    # Drop --run-dir so that the plan has to work out the run folder from the resume request.
    at = command.index("--run-dir")
    del command[at : at + 2]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=launcher.env)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert message in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_run_folder_too_deep_for_a_socket_trains_without_one(runs) -> None:
    run = runs["enospc"]
    assert run.proc.returncode == 0, run.stderr
    events = run.events()
    (warning,) = [e for e in of_type(events, "warning") if e.code == "no_control_socket"]
    assert "longer than" in warning.message
    assert finished(events).status == "completed"
