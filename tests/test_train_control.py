"""Every control command through the real socket of a running trainer, sent by `trainer-core ctl`."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from conftest import FAULTS_ON, TrainerLauncher, TrainerProcess, finished, of_type
from trainer_core.contract.control_client import control_socket_path
from trainer_core.contract.protocol import Event


def ctl(run_dir: Path, command: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainer_core", "ctl", str(run_dir), command, *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )


def raw_request(run_dir: Path, payload: bytes) -> dict:
    """Send bytes as they are (no client-side checks) and return the trainer's reply object."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(control_socket_path(run_dir)))
        sock.sendall(payload)
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = sock.recv(4096)
            assert chunk, "the trainer closed the connection without replying"
            reply += chunk
    return json.loads(reply)


def after(events: list[Event], kind: str, seq: int) -> list[Event]:
    return [e for e in events if e.type == kind and e.seq > seq]


def acked(trainer: TrainerProcess, command: str) -> Event:
    """Send `command` with the CLI, check its reply, and return its `command_ack` event. `save` and
    `evaluate` return only when done: the checkpoint / validation is in the run folder as ctl exits."""
    before = len(trainer.events())
    result = ctl(trainer.run_dir, command)
    assert result.returncode == 0, result.stderr
    done_now = trainer.events()[before:]
    if command == "save":
        path = Path(result.stdout.split("checkpoint written: ")[1].split(" (step ")[0])
        assert result.stdout.startswith("save: checkpoint written: ") and path.is_file(), result.stdout
        assert any(e.type == "checkpoint_saved" and e.path == str(path) for e in done_now)
    elif command == "evaluate":
        assert result.stdout.startswith("evaluate: validation loss "), result.stdout
        assert of_type(done_now, "validation"), "the validation was written before ctl returned"
    else:
        assert result.stdout.strip() == f"{command}: ok"
    events = trainer.wait_for(lambda evs: any(e.type == "command_ack" and e.cmd == command for e in evs))
    return [e for e in events if e.type == "command_ack" and e.cmd == command][-1]


def test_every_command_through_the_socket(trainers: TrainerLauncher) -> None:
    run = trainers.start("ctl", {"train.max_steps": 100000}, env={**FAULTS_ON, "VEGA_FAULT_STEP_SLEEP_S": "0.02"})
    run.wait_for_step(3)
    assert control_socket_path(run.run_dir).exists()

    ack = acked(run, "pause")
    events = run.wait_for(lambda evs: bool(after(evs, "paused", ack.seq)))
    paused = after(events, "paused", ack.seq)[0]
    time.sleep(0.5)
    assert not after(run.events(), "step", paused.seq), "steps went on while paused"

    # A second trainer for the same run folder is refused before it touches anything.
    second = trainers.run("ctl-second", {}, run_dir=run.run_dir)
    assert second.proc.returncode == 2
    assert "a trainer is already running in" in second.stderr and "Traceback" not in second.stderr

    ack = acked(run, "save")  # commands still work while paused
    events = run.wait_for(lambda evs: bool(after(evs, "checkpoint_saved", ack.seq)))
    assert after(events, "checkpoint_saved", ack.seq)[0].step == paused.step
    assert not after(events, "step", paused.seq)

    ack = acked(run, "resume")
    events = run.wait_for(lambda evs: bool(after(evs, "resumed", ack.seq)))
    assert after(events, "resumed", ack.seq)[0].step == paused.step
    run.wait_for(lambda evs: any(e.step > paused.step for e in after(evs, "step", ack.seq)))

    ack = acked(run, "evaluate")
    events = run.wait_for(lambda evs: bool(after(evs, "validation", ack.seq)))
    assert after(events, "sample", ack.seq)
    assert Path(after(events, "sample", ack.seq)[0].path).is_file()

    # Bad requests get an error reply; the trainer goes on.
    unknown = raw_request(run.run_dir, b'{"cmd": "explode", "id": "x1"}\n')
    assert unknown["ok"] is False and unknown["id"] == "x1" and unknown["error"]
    malformed = raw_request(run.run_dir, b"{not json\n")
    assert malformed["ok"] is False and "malformed JSON" in malformed["error"]
    latest = of_type(run.events(), "step")[-1]
    run.wait_for(lambda evs: any(e.step > latest.step for e in of_type(evs, "step")))

    ack = acked(run, "stop")
    assert run.wait() == 0, run.stderr
    events = run.events()
    end = finished(events)
    assert end.status == "stopped"
    saved = after(events, "checkpoint_saved", ack.seq)
    assert saved and saved[-1].step == end.step
    assert (run.run_dir / "checkpoints" / f"step-{end.step:08d}.pt").is_file()
    assert not control_socket_path(run.run_dir).exists()
    acks = [e.cmd for e in of_type(events, "command_ack")]
    assert acks == ["pause", "save", "resume", "evaluate", "stop"]


def test_ctl_without_a_trainer_says_so(tmp_path: Path) -> None:
    result = ctl(tmp_path, "pause")
    assert result.returncode == 2
    assert "no trainer is listening" in result.stderr and "Traceback" not in result.stderr


def test_save_waits_queues_or_says_why_it_cannot_finish(trainers: TrainerLauncher, tmp_path: Path) -> None:
    """--no-wait only queues; a slow evaluation outlasts --wait; a trainer killed mid-save is an error, not a hang."""
    held = tmp_path / "held"
    # Faults, not timing, make each outcome certain however loaded the machine: the evaluation sleeps 2 s, and
    # the third checkpoint write (the queued save's, the evaluation's new best, the waited save's) blocks.
    slow = {"VEGA_FAULT_STEP_SLEEP_S": "0.5", "VEGA_FAULT_EVAL_SLEEP_S": "2"}
    hold = {"VEGA_FAULT_HOLD_AT": "write:3", "VEGA_FAULT_HOLD_MARKER": str(held)}
    run = trainers.start("ctl-wait", {"train.max_steps": 100000}, env={**FAULTS_ON, **slow, **hold})
    run.wait_for_step(1)
    queued = ctl(run.run_dir, "save", "--no-wait")
    assert queued.returncode == 0 and queued.stdout.strip() == "save: ok (queued; not waiting)"
    run.wait_for(lambda evs: bool(of_type(evs, "checkpoint_saved")))

    short = ctl(run.run_dir, "evaluate", "--wait", "0.3")
    assert short.returncode == 2 and "not done after 0.3 s" in short.stderr and "stays queued" in short.stderr
    run.wait_for(lambda evs: len(of_type(evs, "checkpoint_saved")) == 2)  # the evaluation's new best

    waiting = subprocess.Popen(
        [sys.executable, "-m", "trainer_core", "ctl", str(run.run_dir), "save"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run.wait_for(lambda evs: held.exists())
    assert len(of_type(run.events(), "checkpoint_saved")) == 2, "the waited save is held in its write"
    run.proc.kill()
    run.proc.wait(timeout=30)
    _, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 2 and "exited before it was done" in err and "Traceback" not in err
