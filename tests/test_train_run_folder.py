"""What a finished run leaves behind (docs/architecture.md, "The run folder"), the event log's shape, early
stopping, odd text files.

The runs are independent: one module fixture starts them together and each test checks its own.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from safetensors.torch import load_file

from conftest import TRAINER_CORE, TrainerLauncher, TrainerProcess, finished, of_type
from trainer_core.contract.event_lines import parse_event
from trainer_core.engine.checkpoint_manager import load_checkpoint, read_best

FULL = {
    "train.max_steps": 60,
    "train.eval_every_steps": 20,
    "train.checkpoint_every_steps": 5,
    "train.keep_last": 2,
    "logging.step_interval_s": 0.2,
    "logging.report": True,
}
# A learning rate this high diverges at once, so validation never improves after the first evaluation.
DIVERGING = {
    "train.max_steps": 200,
    "train.lr": 1.0,
    "train.schedule": "constant",
    "train.warmup_steps": 0,
    "train.grad_clip": 0,
    "train.eval_every_steps": 4,
    "train.early_stopping_patience": 2,
}
# A disk budget smaller than one checkpoint: only the newest and the best may stay.
TINY_DISK = {
    "train.max_steps": 20,
    "train.eval_every_steps": 5,
    "train.checkpoint_every_steps": 5,
    "train.keep_last": 10,
    "train.keep_disk_gb": 1e-6,
}
LATIN1_NAME = "latin1-notes.txt"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Iterator[dict[str, TrainerProcess]]:
    root = tmp_path_factory.mktemp("folder")
    mixed = shutil.copytree(corpus, root / "mixed-corpus")
    (mixed / LATIN1_NAME).write_bytes("Caf\u00e9 cr\u00e8me and na\u00efve r\u00e9sum\u00e9s.\n".encode("latin-1") * 20)
    launcher = TrainerLauncher(root, corpus)
    # A person at a terminal, with a non-UTF-8 file in the data and TensorBoard asked for: a real process.
    board = {"train.max_steps": 30, "logging.tensorboard": True}
    terminal = launcher.start("terminal", board, data=mixed, terminal=True)
    started = {  # meanwhile, runs whose files are the subject, in this process
        "full": launcher.run_here("full", FULL, "--events", "-"),
        "early": launcher.run_here("early", DIVERGING),
        "tiny_disk": launcher.run_here("tiny_disk", TINY_DISK),
        "terminal": terminal,
    }
    terminal.wait()
    yield started
    launcher.close()


def test_the_run_folder_has_every_artifact(runs) -> None:
    run = runs["full"]
    assert run.proc.returncode == 0, run.stderr
    folder = run.run_dir
    validated = subprocess.run(
        [*TRAINER_CORE, "profile", "validate", "--no-machine-file", str(folder / "profile.toml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert validated.returncode == 0, validated.stderr
    session = json.loads((folder / "session.json").read_text())
    assert session["status"] == "completed" and session["summary"]["steps"] == 60
    assert "model: ByteLM" in (folder / "trainer.log").read_text()
    assert (folder / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    config = json.loads((folder / "export" / "config.json").read_text())
    assert config["model"]["kind"] == "lm" and config["model"]["hidden"] == 32
    weights = load_file(folder / "export" / "model.safetensors")
    assert weights["byte_emb.weight"].shape == (256, 32)
    samples = sorted((folder / "samples").glob("*.txt"))
    assert samples and all(p.read_text(encoding="utf-8").startswith("--- prompt") for p in samples)


def test_checkpoints_are_pruned_to_keep_last_plus_best(runs) -> None:
    folder = runs["full"].run_dir / "checkpoints"
    best = read_best(folder)
    assert best is not None
    kept = {p.name for p in folder.glob("step-*.pt")}
    assert kept == {"step-00000055.pt", "step-00000060.pt", best["path"]}
    state = load_checkpoint(folder / "step-00000060.pt")
    assert state["step"] == 60 and state["data_position"]["item"] > 0


def test_a_disk_budget_keeps_the_newest_and_the_best_and_warns_once(runs) -> None:
    run = runs["tiny_disk"]
    assert run.proc.returncode == 0, run.stderr
    folder = run.run_dir / "checkpoints"
    best = read_best(folder)
    assert best is not None
    assert {p.name for p in folder.glob("step-*.pt")} == {"step-00000020.pt", best["path"]}
    warned = [e for e in of_type(run.events(), "warning") if e.code == "checkpoint_budget"]
    assert len(warned) == 1 and "train.keep_disk_gb = 1e-06 GB" in warned[0].message


def test_the_event_log_is_complete_and_mirrored_on_stdout(runs) -> None:
    run = runs["full"]
    lines = (run.run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    events = [parse_event(line) for line in lines]
    assert [e.seq for e in events] == list(range(len(events)))
    assert events[0].type == "hello" and events[0].torch and events[0].torch.split("+")[0].count(".") >= 1
    assert events[-1].type == "finished" and events[-1].status == "completed"
    assert run.stdout.splitlines() == lines


def test_step_events_are_coalesced_to_a_bounded_rate(runs) -> None:
    events = runs["full"].events()
    steps = of_type(events, "step")
    assert sorted(s for e in steps for s in e.step_series) == list(range(1, 61))
    assert len(steps) < 60, "no coalescing happened"
    # One event per 0.2 s window, plus the flushes that evaluations and the end force.
    training_s = events[-1].t - of_type(events, "epoch_start")[0].t
    forced = len(of_type(events, "validation")) + len(of_type(events, "epoch_end")) + 2
    assert len(steps) <= training_s / 0.2 + forced


def test_early_stopping_ends_the_run_as_completed(runs) -> None:
    run = runs["early"]
    assert run.proc.returncode == 0, run.stderr
    events = run.events()
    end = finished(events)
    assert end.status == "completed" and end.step < 200
    validations = of_type(events, "validation")
    best = min(v.loss for v in validations)
    assert all(v.loss > best for v in validations[-2:])
    assert any(e.message.startswith("early stopping") for e in of_type(events, "log"))
    assert "early stopping" in (run.run_dir / "trainer.log").read_text()


def test_non_utf8_text_is_decoded_with_a_warning_not_an_error(runs) -> None:
    run = runs["terminal"]
    assert run.proc.returncode == 0, run.stderr
    events = run.events()
    warnings = [e.message for e in of_type(events, "warning") if "UTF-8" in e.message]
    assert len(warnings) == 1 and LATIN1_NAME in warnings[0] and "1 file(s)" in warnings[0]
    assert finished(events).status == "completed"


def test_a_terminal_gets_a_progress_display(runs) -> None:
    run = runs["terminal"]
    assert run.proc.returncode == 0, run.stderr
    shown = run.stderr
    assert "step 30/30" in shown and "samples/s" in shown
    assert "Traceback" not in shown
    assert finished(run.events()).status == "completed"


def test_tensorboard_scalars_or_a_warning_saying_how_to_get_them(runs) -> None:
    run = runs["terminal"]
    assert run.proc.returncode == 0, run.stderr
    board = run.run_dir / "tensorboard"
    if importlib.util.find_spec("tensorboard") is None:
        (warning,) = [e for e in of_type(run.events(), "warning") if e.code == "tensorboard_unavailable"]
        assert "pip install tensorboard" in warning.message
        assert not board.exists()
    else:
        assert list(board.glob("events.out.tfevents.*"))
