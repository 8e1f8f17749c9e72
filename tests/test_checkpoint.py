"""Checkpoints: exact resume, pruning, crash safety (ENOSPC, SIGKILL mid-write), corrupt and unsafe files."""

from __future__ import annotations

import json
import os
import pickle
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from trainer_core.contract.errors import VegaError
from trainer_core.engine.checkpoint_compat import check_model_compatible
from trainer_core.engine.checkpoint_manager import (
    CheckpointError,
    CheckpointManager,
    find_resume,
    load_checkpoint,
    new_checkpoint_state,
)
from trainer_core.engine.checkpoint_write import FAULT_ENOSPC_ENV
from trainer_core.engine.rng import capture_rng_state, restore_rng_state

REPO_ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- a small real training setup


def make_training(seed: int, hidden: int = 16) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Dropout(0.2), nn.Linear(hidden, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 4))
    return model, optimizer, scheduler


def train_steps(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, count: int) -> list[float]:
    """Each step draws its batch from torch, numpy and random, so all three RNGs matter for exactness."""
    losses = []
    for _ in range(count):
        x = torch.randn(8, 4) + float(np.random.rand()) * random.random()
        y = x.sum(dim=1, keepdim=True)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses


def snapshot(model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, step: int) -> dict[str, Any]:
    return new_checkpoint_state(
        model=model.state_dict(),
        optimizer=optimizer.state_dict(),
        scheduler=scheduler.state_dict(),
        rng=capture_rng_state(),
        step=step,
        epoch=0,
        data_position={"epoch": 0, "item": step * 8},
        profile_toml='[run]\nname = "test"\n',
        val_loss=0.5,
    )


def tiny_state(step: int) -> dict[str, Any]:
    return new_checkpoint_state(model={"w": torch.full((4,), float(step))}, step=step, epoch=0, rng={})


def temp_files(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.endswith(".tmp"))


def names(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


# ---------------------------------------------------------------- exact resume


def test_resume_continues_bitwise_identically(tmp_path: Path) -> None:
    np.random.seed(5)
    random.seed(6)
    model, optimizer, scheduler = make_training(seed=0)
    train_steps(model, optimizer, scheduler, 2)
    manager = CheckpointManager(tmp_path)
    saved = manager.save(snapshot(model, optimizer, scheduler, step=2), step=2)
    assert saved.path == tmp_path / "checkpoints" / "step-00000002.pt" and saved.bytes == saved.path.stat().st_size
    losses_a = train_steps(model, optimizer, scheduler, 3)

    path, state, warnings = find_resume(tmp_path)
    assert path == saved.path and warnings == [] and state["step"] == 2
    fresh_model, fresh_opt, fresh_sched = make_training(seed=123)  # different init: loading must overwrite it all
    check_model_compatible(fresh_model, state["model"])
    fresh_model.load_state_dict(state["model"])
    fresh_opt.load_state_dict(state["optimizer"])
    fresh_sched.load_state_dict(state["scheduler"])
    assert restore_rng_state(state["rng"]) == []
    losses_b = train_steps(fresh_model, fresh_opt, fresh_sched, 3)

    assert losses_a == losses_b
    for (name, a), b in zip(model.state_dict().items(), fresh_model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert fresh_sched.get_last_lr() == scheduler.get_last_lr()
    assert state["data_position"] == {"epoch": 0, "item": 16}


# ---------------------------------------------------------------- pruning and best


def test_pruning_keeps_last_k_plus_an_older_best(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=2)
    for step in (10, 20, 30, 40, 50):
        manager.save(tiny_state(step), step=step, val_loss=0.1 if step == 20 else 1.0, is_best=step == 20)
    assert names(manager.list_complete()) == ["step-00000050.pt", "step-00000040.pt", "step-00000020.pt"]
    assert manager.best() == tmp_path / "checkpoints" / "step-00000020.pt"
    record = json.loads((tmp_path / "checkpoints" / "best.json").read_text())
    assert record == {"step": 20, "path": "step-00000020.pt", "val_loss": 0.1}

    # A newer best replaces the pointer, and the old best falls out once it is older than the last K.
    saved = manager.save(tiny_state(60), step=60, val_loss=0.05, is_best=True)
    assert names(manager.list_complete()) == ["step-00000060.pt", "step-00000050.pt"]
    assert {p.name for p in saved.pruned} == {"step-00000040.pt", "step-00000020.pt"}
    assert manager.best().name == "step-00000060.pt"
    assert temp_files(tmp_path) == []


def test_temp_leftovers_removed_on_start_and_on_save(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    (folder / ".step-00000030.pt.4242.tmp").write_bytes(b"half a checkpoint")
    (folder / ".best.json.4242.tmp").write_text("{")
    (folder / "notes.txt").write_text("mine")
    manager = CheckpointManager(tmp_path)
    assert temp_files(tmp_path) == []
    (folder / ".step-00000040.pt.999.tmp").write_bytes(b"killed writer")
    manager.save(tiny_state(50), step=50)
    assert temp_files(tmp_path) == []
    assert (folder / "notes.txt").read_text() == "mine"
    assert names(manager.list_complete()) == ["step-00000050.pt"]


# ---------------------------------------------------------------- corrupt, missing, unsafe


def test_corrupt_newest_is_skipped_with_a_warning(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=5)
    for step in (20, 40):
        manager.save(tiny_state(step), step=step)
    newest = tmp_path / "checkpoints" / "step-00000040.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # truncated
    (tmp_path / "checkpoints" / "step-00000060.pt").write_bytes(os.urandom(4096))  # garbage

    path, state, warnings = find_resume(tmp_path)
    assert path.name == "step-00000020.pt" and state["step"] == 20
    assert len(warnings) == 2
    assert warnings[0].startswith("checkpoints/step-00000060.pt is unreadable (")
    assert warnings[1].startswith("checkpoints/step-00000040.pt is unreadable (truncated")
    assert all(w.endswith("): skipped, using step-00000020.pt") for w in warnings)
    assert manager.latest_loadable()[0] == path


def test_no_checkpoints_gives_none_and_all_corrupt_is_an_error(tmp_path: Path) -> None:
    assert find_resume(tmp_path) is None
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    assert find_resume(tmp_path) is None
    (folder / "step-00000010.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"no checkpoint .* can be loaded.*step-00000010\.pt"):
        find_resume(tmp_path)


def test_load_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "step-00000001.pt")
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.ones(2)}, foreign)
    with pytest.raises(CheckpointError, match="not a Vega checkpoint"):
        load_checkpoint(foreign)
    newer = tmp_path / "newer.pt"
    torch.save({**tiny_state(1), "version": 7}, newer)
    with pytest.raises(CheckpointError, match="version 7 is not supported"):
        load_checkpoint(newer)
    text = tmp_path / "text.pt"
    text.write_text("hello\n")
    with pytest.raises(CheckpointError, match="text.pt: not a readable checkpoint"):
        load_checkpoint(text)
    assert issubclass(CheckpointError, VegaError)


class MarkerPayload:
    """Unpickling this calls os.system to create a marker file: what a malicious checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def test_malicious_pickle_is_refused_and_never_runs(tmp_path: Path) -> None:
    control_marker = tmp_path / "control-ran"
    control = tmp_path / "control.pt"
    torch.save({"payload": MarkerPayload(control_marker)}, control)
    torch.load(control, weights_only=False)  # proves the payload is live when loaded unsafely
    assert control_marker.exists()

    marker = tmp_path / "payload-ran"
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    evil = folder / "step-00000009.pt"
    torch.save({**tiny_state(9), "extra": {"x": MarkerPayload(marker)}}, evil)
    legacy = tmp_path / "legacy.pt"
    legacy.write_bytes(pickle.dumps({"payload": MarkerPayload(marker)}, protocol=2))
    for path in (evil, legacy):
        with pytest.raises(CheckpointError, match="not plain tensors/containers and was refused for safety"):
            load_checkpoint(path)
    with pytest.raises(CheckpointError, match="refused for safety"):
        find_resume(tmp_path / "run")
    assert not marker.exists()


def test_shape_mismatch_is_refused_naming_the_parameter(tmp_path: Path) -> None:
    small, _, _ = make_training(seed=0, hidden=16)
    large, _, _ = make_training(seed=0, hidden=32)
    check_model_compatible(small, small.state_dict())
    with pytest.raises(CheckpointError) as info:
        check_model_compatible(large, small.state_dict())
    message = str(info.value)
    assert "0.weight: checkpoint [16, 4] vs model [32, 4]" in message
    assert "3.weight: checkpoint [1, 16] vs model [1, 32]" in message
    assert "start a fresh run" in message and "profile" in message

    renamed = {("renamed." + k if k == "0.bias" else k): v for k, v in small.state_dict().items()}
    with pytest.raises(
        CheckpointError, match=r"missing from checkpoint: 0\.bias \[16\].*unexpected in checkpoint: renamed\.0\.bias"
    ):
        check_model_compatible(small, renamed)


def test_many_mismatches_are_capped_in_the_message() -> None:
    model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(6)])
    with pytest.raises(CheckpointError, match=r"12 parameter mismatch\(es\).*and 7 more"):
        check_model_compatible(model, {})


# ---------------------------------------------------------------- write failures


def test_enospc_hook_keeps_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAULT_ENOSPC_ENV, "2")
    monkeypatch.setenv("VEGA_FAULTS", "1")  # the switch acts only with the gate open
    manager = CheckpointManager(tmp_path)
    manager.save(tiny_state(10), step=10, val_loss=0.3, is_best=True)
    before = (tmp_path / "checkpoints" / "step-00000010.pt").read_bytes()
    with pytest.raises(CheckpointError) as info:
        manager.save(tiny_state(20), step=20, is_best=True)
    message = str(info.value)
    assert "step-00000020.pt" in message and "disk is full" in message
    assert "previous checkpoint step-00000010.pt is intact" in message
    assert temp_files(tmp_path) == []
    assert names(manager.list_complete()) == ["step-00000010.pt"]
    assert (tmp_path / "checkpoints" / "step-00000010.pt").read_bytes() == before
    assert load_checkpoint(manager.best())["step"] == 10
    manager.save(tiny_state(30), step=30)  # the third save is not faulted
    assert names(manager.list_complete())[0] == "step-00000030.pt"


def test_unpicklable_state_fails_cleanly(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path)
    manager.save(tiny_state(1), step=1)
    with pytest.raises(
        CheckpointError, match=r"could not write checkpoint .*step-00000002\.pt.*step-00000001\.pt is intact"
    ):
        manager.save({**tiny_state(2), "extra": {"f": lambda: None}}, step=2)
    assert temp_files(tmp_path) == [] and names(manager.list_complete()) == ["step-00000001.pt"]


CHILD_WRITER = """
import sys, torch
from trainer_core.engine.checkpoint_manager import CheckpointManager, new_checkpoint_state
manager = CheckpointManager(sys.argv[1])
def state(step):
    weights = {"w": torch.arange(200_000, dtype=torch.float32) + step}
    return new_checkpoint_state(model=weights, step=step, epoch=0, rng={})
manager.save(state(10), step=10)
manager.save(state(20), step=20, hold_s=float(sys.argv[2]))
print("finished-without-kill", flush=True)
"""


def wait_for(condition: Any, process: subprocess.Popen, deadline_s: float = 60.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the writer never reached the expected point"
        time.sleep(0.02)


def test_sigkill_mid_write_leaves_previous_checkpoint_resumable(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD_WRITER, str(tmp_path), "5"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def partial():
            return [p for p in folder.glob(".step-00000020.pt.*.tmp") if p.stat().st_size > 0]

        wait_for(lambda: folder.is_dir() and bool(partial()), child)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    out, _ = child.communicate()
    assert child.returncode == -signal.SIGKILL and "finished-without-kill" not in out
    assert not (folder / "step-00000020.pt").exists()
    path, state, warnings = find_resume(tmp_path)
    assert path.name == "step-00000010.pt" and state["step"] == 10 and warnings == []
    assert torch.equal(state["model"]["w"], torch.arange(200_000, dtype=torch.float32) + 10)
    CheckpointManager(tmp_path)  # the next trainer start sweeps the killed writer's temp file
    assert temp_files(tmp_path) == []


def test_a_held_write_pauses_past_the_header_with_about_half_the_payload_on_disk(tmp_path: Path) -> None:
    """The kill drill's `write` hold point: never inside the first write() (the zip header), and only once
    about half the tensor bytes are on disk, so a kill there leaves a temp file with real payload in it."""
    from trainer_core.engine.checkpoint_write import _PartialWriteHook, _tensor_bytes

    state = new_checkpoint_state(model={"a": torch.ones(4096), "b": torch.zeros(4096)}, step=1, epoch=0, rng={})
    half = _tensor_bytes(state) // 2
    seen: list[tuple[int, int]] = []
    with open(tmp_path / "partial", "wb") as file:
        hook = _PartialWriteHook(file, half, lambda: seen.append((hook.written, (tmp_path / "partial").stat().st_size)))
        torch.save(state, hook)  # type: ignore[arg-type]
    assert len(seen) == 1, "the fault fires exactly once"
    written, on_disk = seen[0]
    assert on_disk == written, "the partial bytes are flushed before the hold"
    assert half // 2 < written < hook.written, (written, half, hook.written)
    assert load_checkpoint(tmp_path / "partial")["step"] == 1, "the write completes after the hold"
