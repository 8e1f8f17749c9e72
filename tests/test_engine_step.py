"""One optimizer step of the engine, in process: what it logs, what it clips, which batches it reads.

The step reads all loss parts back in one sync, divides the loss only when it accumulates, keeps its batch
iterator from step to step, clips a parameter list taken once and times phases with reusable objects; these
tests pin the behaviour those shortcuts must keep. Real trainers on a tiny byte model over a small corpus.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from conftest import TINY_PROFILE, write_corpus
from trainer_core.contract import rundir
from trainer_core.contract.eventlog import EventWriter, read_all
from trainer_core.engine.checkpoint_manager import load_checkpoint
from trainer_core.engine.control_state import ControlState
from trainer_core.engine.events import EventHub
from trainer_core.engine.profiler import StepProfiler
from trainer_core.engine.setup import build_trainer
from trainer_core.engine.trainer import Trainer
from trainer_core.plan import make_plan

pytestmark = pytest.mark.usefixtures("keep_torch_threads", "faults_on")  # [debug] faults act


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus", documents=2, lines=20)


def new_trainer(tmp_path: Path, corpus: Path, name: str, *settings: str) -> tuple[Trainer, EventWriter]:
    """A real trainer on the CPU writing events to `tmp_path/name/events.jsonl`."""
    profile = tmp_path / "tiny.toml"
    profile.write_text(TINY_PROFILE, encoding="utf-8")
    run_dir = tmp_path / name
    plan = make_plan(str(profile), [f"data.path={corpus}", *settings], run_dir=run_dir, use_machine_file=False)
    rundir.create_run_dir(run_dir)
    writer = EventWriter(run_dir / rundir.EVENTS)
    return build_trainer(plan, EventHub(writer), ControlState(), run_dir), writer


def record_losses(trainer: Trainer) -> list[dict[str, float]]:
    """Every micro-batch's losses as the task computed them, read out on the side (the task still runs)."""
    seen: list[dict[str, float]] = []
    compute = trainer.task.compute_losses

    def observed(model, batch):
        losses = compute(model, batch)
        if model.training:  # not validation
            seen.append({name: float(value.detach()) for name, value in losses.items()})
        return losses

    trainer.task.compute_losses = observed  # type: ignore[method-assign]
    return seen


def record_inputs(trainer: Trainer) -> list[torch.Tensor]:
    seen: list[torch.Tensor] = []
    compute = trainer.task.compute_losses

    def observed(model, batch):
        if model.training:  # not validation
            seen.append(batch["input"].clone())
        return compute(model, batch)

    trainer.task.compute_losses = observed  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("grad_accum", [1, 3])
def test_logged_losses_are_the_mean_of_the_micro_batches_losses(tmp_path: Path, corpus: Path, grad_accum: int) -> None:
    trainer, writer = new_trainer(
        tmp_path,
        corpus,
        "run",
        f"train.grad_accum={grad_accum}",
        "train.batch_size=4",
        "train.max_steps=4",
        "train.warmup_steps=2",
    )
    seen = record_losses(trainer)
    try:
        trainer.fit()
    finally:
        writer.close()

    def expected(step: int, name: str) -> float:
        micro = seen[(step - 1) * grad_accum : step * grad_accum]
        return sum(m[name] for m in micro) / grad_accum

    events = [e for e in read_all(tmp_path / "run" / rundir.EVENTS) if e.type == "step"]
    logged = {step: loss for e in events for step, loss in zip(e.step_series, e.loss_series, strict=True)}
    assert sorted(logged) == [1, 2, 3, 4]
    for step, loss in logged.items():
        assert loss == pytest.approx(expected(step, "total"), rel=1e-6, abs=0)
        if grad_accum == 1:  # nothing to average: the very float the task computed
            assert loss == expected(step, "total")
    for event in events:  # the parts are logged for the last step of each window
        for name in ("total", "ce"):
            assert event.losses[name] == pytest.approx(expected(event.step, name), rel=1e-6, abs=0)


def test_accumulating_two_half_batches_gives_the_gradients_of_the_whole_batch(tmp_path: Path, corpus: Path) -> None:
    whole, w1 = new_trainer(tmp_path, corpus, "whole", "train.batch_size=8", "model.dropout=0")
    halves, w2 = new_trainer(tmp_path, corpus, "halves", "train.batch_size=4", "train.grad_accum=2", "model.dropout=0")
    try:
        a, b = whole.runner.run(), halves.runner.run()
    finally:
        w1.close()
        w2.close()
    assert a.items == b.items == 8
    assert b.loss == pytest.approx(a.loss, rel=1e-5)
    assert b.grad_norm == pytest.approx(a.grad_norm, rel=1e-4)
    for p, q in zip(whole.module.parameters(), halves.module.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6)


def grad_norm_of(model: torch.nn.Module) -> float:
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))


def test_clipping_acts_on_the_live_parameters_after_a_restore(tmp_path: Path, corpus: Path) -> None:
    first, w1 = new_trainer(tmp_path, corpus, "first", "train.grad_clip=0.01")
    try:
        for _ in range(3):
            first.runner.run()
        saved = first.checkpointer.save()
    finally:
        w1.close()
    resumed, w2 = new_trainer(tmp_path, corpus, "resumed", "train.grad_clip=0.01")
    try:
        resumed.restore(load_checkpoint(saved))
        with torch.no_grad():  # weights changed in place after the trainer was built
            for p in resumed.module.parameters():
                p.mul_(1.5)
        outcome = resumed.runner.run()
    finally:
        w2.close()
    assert outcome.applied and outcome.grad_norm > 0.01  # reported before clipping
    assert grad_norm_of(resumed.module) == pytest.approx(0.01, rel=1e-3)  # what the optimizer stepped with


def test_batches_follow_the_epoch_order_through_an_oom_retry_and_an_epoch_end(tmp_path: Path, corpus: Path) -> None:
    trainer, writer = new_trainer(tmp_path, corpus, "run", "train.batch_size=8", "debug.oom_at_steps=[3]")
    seen = record_inputs(trainer)
    per_epoch = trainer.task.train_items()
    steps = trainer.steps_per_epoch() + 2
    try:
        for _ in range(steps):  # the loop of Trainer.fit, without its stop and end
            trainer.after_step(trainer.runner.run())
            if trainer.task.train_items() - trainer.state.item < trainer.global_batch():
                trainer.end_epoch()
    finally:
        writer.close()
    assert trainer.state.micro_batch == 4 and trainer.state.grad_accum == 2  # the OOM at step 3 halved it
    assert trainer.state.epoch == 1
    rows = torch.cat(seen)
    expected = torch.cat([batch["input"] for epoch in (0, 1) for batch, _ in trainer.task.train_batches(epoch, 1)])
    used_in_epoch_0 = per_epoch - per_epoch % 8  # the short tail of an epoch is dropped
    epoch_0, epoch_1 = rows[:used_in_epoch_0], rows[used_in_epoch_0:]
    torch.testing.assert_close(epoch_0, expected[:used_in_epoch_0], rtol=0, atol=0)
    torch.testing.assert_close(epoch_1, expected[per_epoch : per_epoch + len(epoch_1)], rtol=0, atol=0)


def test_a_resumed_trainer_reads_on_from_the_checkpoints_position(tmp_path: Path, corpus: Path) -> None:
    first, w1 = new_trainer(tmp_path, corpus, "first")
    later = record_inputs(first)
    try:
        first.runner.run(), first.runner.run()
        saved = first.checkpointer.save()
        first.runner.run()
    finally:
        w1.close()
    resumed, w2 = new_trainer(tmp_path, corpus, "resumed")
    try:
        resumed.runner.run()  # its own iterator moves ahead first; the restore must move it back
        resumed.restore(load_checkpoint(saved))
        again = record_inputs(resumed)
        resumed.runner.run()
    finally:
        w2.close()
    torch.testing.assert_close(again[0], later[2], rtol=0, atol=0)


def test_a_nonfinite_step_is_skipped_and_reported_with_its_finite_parts(tmp_path: Path, corpus: Path) -> None:
    trainer, writer = new_trainer(tmp_path, corpus, "run", "debug.nonfinite_at_steps=[2]")
    try:
        trainer.runner.run()
        outcome = trainer.runner.run()
    finally:
        writer.close()
    assert not outcome.applied and math.isnan(outcome.loss) and trainer.state.step == 1
    assert math.isfinite(outcome.losses["ce"])  # the task's own parts, before the injected NaN


def test_profiler_phases_are_reused_and_time_only_completed_phases() -> None:
    profiler = StepProfiler(torch.device("cpu"), interval_s=0.0)
    assert profiler.phase("forward") is profiler.phase("forward")
    for _ in range(2):
        with profiler.phase("forward"):
            sum(range(1000))
    with pytest.raises(RuntimeError), profiler.phase("backward"):
        raise RuntimeError("failed half-way")
    profiler.step_done(), profiler.step_done()
    breakdown = profiler.flush()
    assert breakdown["steps"] == 2 and breakdown["forward_s"] > 0 and breakdown["backward_s"] == 0


def test_control_requests_drain_in_order_and_an_empty_queue_drains_to_nothing() -> None:
    control = ControlState()
    assert control.drain() == []
    for cmd in ("pause", "save", "resume"):
        control.request(cmd)
    assert control.drain() == ["pause", "save", "resume"]
    assert control.drain() == []
