"""train.keep_disk_gb: checkpoints kept within a disk budget, never the best or the newest complete one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trainer_core.engine.checkpoint_manager import CheckpointManager, new_checkpoint_state
from trainer_core.engine.checkpoint_retention import GB, Retention


def state(step: int) -> dict[str, Any]:
    # Same-sized files: 4,096 floats each.
    return new_checkpoint_state(model={"w": torch.full((4096,), float(step))}, step=step, epoch=0, rng={})


def steps(manager: CheckpointManager) -> list[int]:
    return [int(p.stem.split("-")[1]) for p in manager.list_complete()]


def file_size(tmp_path: Path) -> int:
    probe = CheckpointManager(tmp_path / "probe")
    return probe.save(state(1), step=1).bytes


def test_the_oldest_go_first_and_the_best_stays(tmp_path: Path) -> None:
    size = file_size(tmp_path)
    manager = CheckpointManager(tmp_path / "run", keep_last=10, keep_disk_gb=3.5 * size / GB)
    for step in (10, 20, 30, 40, 50):
        saved = manager.save(state(step), step=step, val_loss=0.1 if step == 20 else 1.0, is_best=step == 20)
        assert saved.over_budget is None
    # Three files fit: the newest two and the older best; 10 and 30 went, oldest first.
    assert steps(manager) == [50, 40, 20]
    assert sum(p.stat().st_size for p in manager.list_complete()) <= 3.5 * size


def test_without_a_budget_keep_last_alone_decides(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=10)
    for step in (10, 20, 30, 40, 50):
        manager.save(state(step), step=step)
    assert steps(manager) == [50, 40, 30, 20, 10]


def test_a_budget_too_small_keeps_the_newest_and_the_best_and_says_so_once(tmp_path: Path) -> None:
    manager = CheckpointManager(tmp_path, keep_last=10, keep_disk_gb=1e-6)
    first = manager.save(state(10), step=10, val_loss=0.1, is_best=True)
    assert first.over_budget is not None
    assert "train.keep_disk_gb = 1e-06 GB" in first.over_budget and "step-00000010.pt" in first.over_budget
    later = [manager.save(state(s), step=s, val_loss=1.0).over_budget for s in (20, 30, 40)]
    assert later == [None, None, None], "the warning repeats at every save"
    assert steps(manager) == [40, 10]


def test_the_warning_comes_back_after_the_budget_held_again() -> None:
    newest, best, old = Path("step-00000030.pt"), Path("step-00000010.pt"), Path("step-00000020.pt")
    sizes = {newest: 600, best: 600, old: 600}
    retention = Retention(keep_last=10, keep_disk_gb=1000 / GB)
    choice = retention.choose([newest, old, best], best, sizes.__getitem__)
    assert choice.remove == (old,)
    assert choice.over_budget is not None and "newest (step-00000030.pt" in choice.over_budget
    fits = Retention(keep_last=10, keep_disk_gb=1300 / GB).choose([newest, old, best], best, sizes.__getitem__)
    assert fits.remove == (old,) and fits.over_budget is None


def test_negative_control_a_retention_that_ignored_protection_would_lose_the_best() -> None:
    # What the guard prevents: by size alone, the best (oldest) file is the first to go.
    newest, best = Path("step-00000020.pt"), Path("step-00000010.pt")
    choice = Retention(keep_last=10, keep_disk_gb=700 / GB).choose(
        [newest, best], best, {newest: 600, best: 600}.__getitem__
    )
    assert best not in choice.remove and newest not in choice.remove
    unprotected = Retention(keep_last=10, keep_disk_gb=700 / GB).choose(
        [newest, best], None, {newest: 600, best: 600}.__getitem__
    )
    assert unprotected.remove == (best,)
