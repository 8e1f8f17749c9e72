"""Stopping and resuming real trainer processes: exact resume, SIGKILL mid-checkpoint, SIGINT."""

from __future__ import annotations

import signal
from pathlib import Path

from conftest import FAULTS_ON, TrainerLauncher, finished, of_type, step_rows
from trainer_core.contract.event_lines import parse_event
from trainer_core.contract.protocol import ProtocolError

# A short sleep in every forward pass keeps the tiny model's run alive long enough to signal it mid-run.
SLOW = {**FAULTS_ON, "VEGA_FAULT_STEP_SLEEP_S": "0.05"}


def checkpoint_steps(run_dir: Path) -> list[int]:
    return sorted(int(p.stem.split("-")[1]) for p in (run_dir / "checkpoints").glob("step-*.pt"))


def log_messages(events) -> list[str]:
    return [e.message for e in of_type(events, "log")]


def test_sigterm_then_resume_gives_the_same_losses_as_an_uninterrupted_run(trainers: TrainerLauncher) -> None:
    # Dropout is on (0.1) and evaluation runs between steps: both must leave the random streams exact.
    settings = {"train.eval_every_steps": 10}
    whole = trainers.run_here("whole", settings)  # the reference: what a run does, in this process
    split = trainers.start("split", settings, env=SLOW)
    split.wait_for_step(20)
    split.send(signal.SIGTERM)
    assert split.wait() == 0, split.stderr
    first = finished(split.events())
    assert first.status == "stopped"
    assert 20 <= first.step < 40
    assert first.step in checkpoint_steps(split.run_dir)
    # logged by the loop when it stops, not by the signal handler (tests/test_stop_signal.py)
    assert "received SIGTERM: saving a checkpoint and stopping" in log_messages(split.events())

    resumed = trainers.run_here("split", settings, "--resume", "auto", run_dir=split.run_dir)
    assert resumed.proc.returncode == 0, resumed.stderr
    events = split.events()
    assert finished(events).status == "completed" and finished(events).step == 40
    assert any(f"step {first.step}," in m and m.startswith("resumed from") for m in log_messages(events))

    assert whole.wait() == 0, whole.stderr
    expected = step_rows(whole.events())
    assert sorted(expected) == list(range(1, 41))
    got = step_rows(events)
    # Every step exactly once across both segments, with bit-identical loss and learning rate.
    assert got == expected


def test_sigkill_during_a_checkpoint_write_resumes_from_the_previous_complete_one(trainers: TrainerLauncher) -> None:
    settings = {"train.checkpoint_every_steps": 10, "debug.hold_checkpoint_write_s": 30}
    # Only the second save holds: the first (step 10) completes, the second (step 20) hangs half-written.
    killed = trainers.start("kill", settings, env={**FAULTS_ON, "VEGA_FAULT_HOLD_CHECKPOINT_SAVES": "2"})
    folder = killed.run_dir / "checkpoints"
    killed.wait_for(lambda _: any(folder.glob(".step-00000020.pt.*.tmp")), timeout=60)
    assert checkpoint_steps(killed.run_dir) == [10]
    killed.proc.kill()
    killed.wait()

    resumed = trainers.run_here(
        "kill", {**settings, "debug.hold_checkpoint_write_s": 0}, "--resume", "auto", run_dir=killed.run_dir
    )
    assert resumed.proc.returncode == 0, resumed.stderr
    events = killed.events()
    messages = log_messages(events)
    assert any(m.startswith("resumed from") and "step-00000010.pt: step 10," in m for m in messages)
    assert any("debug.hold_checkpoint_write_s: 30.0 -> 0.0" in m for m in messages)
    assert finished(events).status == "completed" and finished(events).step == 40
    assert not list(folder.glob("*.tmp"))
    # The log of the killed segment and the resumed one together: every line parses, seq never repeats.
    lines = (killed.run_dir / "events.jsonl").read_bytes().splitlines()
    parsed, broken = [], 0
    for line in lines:
        try:
            parsed.append(parse_event(line))
        except ProtocolError:
            broken += 1
    assert broken <= 1
    seqs = [e.seq for e in parsed]
    assert seqs == sorted(set(seqs))
    # The resumed segment redoes steps 11..20 (the held save was lost) and goes on to 40.
    assert sorted(step_rows(events)) == list(range(1, 41))


def test_sigint_stops_like_sigterm_with_a_checkpoint(trainers: TrainerLauncher) -> None:
    run = trainers.start("int", {"train.max_steps": 1000}, env=SLOW)
    run.wait_for_step(5)
    run.send(signal.SIGINT)
    assert run.wait() == 0, run.stderr
    events = run.events()
    end = finished(events)
    assert end.status == "stopped"
    assert end.step in checkpoint_steps(run.run_dir)
    assert any("SIGINT" in m for m in log_messages(events))
    assert "Traceback" not in run.stderr
