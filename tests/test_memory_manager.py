"""The memory manager acts: releases caches, shrinks the micro-batch ahead of an OOM, checkpoints and pauses.

Real trainers on a tiny byte model over a small corpus, in process. The memory reading is the manager's
`source`, a plain callable that the tests replace with one of their own (tied to the trainer's step), so
each level is reached exactly when a test wants it. The events they write are replayed into the dashboard's
store. Last, an out-of-memory error inside an fp16/bf16 optimizer step (after the loss scaler unscaled) is
survived like one in the forward pass.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from pathlib import Path

import pytest
import torch

from conftest import FAULTS_ON, TINY_PROFILE, TrainerLauncher, finished, new_vocoder_trainer, of_type, write_corpus
from trainer_core.contract import rundir
from trainer_core.contract.errors import ProfileError
from trainer_core.contract.eventlog import EventWriter, read_all
from trainer_core.contract.profile import MemorySection
from trainer_core.engine.checkpoint_manager import load_checkpoint
from trainer_core.engine.control_state import ControlState
from trainer_core.engine.events import EventHub
from trainer_core.engine.faults import OOM_IN_OPTIMIZER_ENV
from trainer_core.engine.memory_manager import GIB, MemoryManager
from trainer_core.engine.setup import build_trainer
from trainer_core.engine.trainer import Trainer
from trainer_core.plan import make_plan
from vega_tui.store import RunStore
from vega_tui.widgets.charts import memory_chart
from vega_tui.widgets.status import status_first_line

pytestmark = pytest.mark.usefixtures("one_torch_thread", "keep_torch_threads")
STEADY = ("train.batch_size=8", "train.max_steps=6", "train.warmup_steps=2", "model.dropout=0", "memory.budget_gb=1")


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus", documents=2, lines=20)


def new_trainer(tmp_path: Path, corpus: Path, name: str, *settings: str, control: ControlState | None = None):
    profile = tmp_path / "tiny.toml"
    profile.write_text(TINY_PROFILE, encoding="utf-8")
    run_dir = tmp_path / name
    plan = make_plan(str(profile), [f"data.path={corpus}", *settings], run_dir=run_dir, use_machine_file=False)
    rundir.create_run_dir(run_dir)
    writer = EventWriter(run_dir / rundir.EVENTS)
    trainer = build_trainer(plan, EventHub(writer), control or ControlState(), run_dir)
    # Quiet until a test says otherwise (from_step): late in a whole suite this process's RSS passes 1 GB itself.
    trainer.memory.source = lambda: 0
    return trainer, writer


def from_step(trainer: Trainer, step: int, fraction: float) -> None:
    """From `step` on, the trainer's memory reads `fraction` of its budget (nothing before)."""
    budget = trainer.memory.budget_bytes
    trainer.memory.source = lambda: int(budget * fraction) if trainer.state.step >= step else 0


def fit(trainer: Trainer, writer: EventWriter) -> list:
    try:
        assert trainer.fit() == "completed"
    finally:
        writer.close()
    return read_all(trainer.run_dir / rundir.EVENTS)


def step_losses(events: list) -> dict[int, float]:
    steps = [e for e in events if e.type == "step"]
    return {s: loss for e in steps for s, loss in zip(e.step_series, e.loss_series, strict=True)}


def step_lrs(events: list) -> dict[int, float]:
    return {s: lr for e in events if e.type == "step" for s, lr in zip(e.step_series, e.lr_series, strict=True)}


def replay(trainer: Trainer, events: list) -> RunStore:
    store = RunStore(run_dir=trainer.run_dir)
    store.apply(events)
    return store


# ---------------------------------------------------------------------------------------------------------------
# Levels


def test_levels_are_fractions_of_the_budget_read_from_the_source() -> None:
    settings = MemorySection(budget_gb=2.0, release_at=0.5, shrink_at=0.7, pause_at=0.9)
    used = [0]
    manager = MemoryManager(torch.device("cpu"), settings, source=lambda: used[0])
    assert manager.budget_bytes == 2 * GIB
    for fraction, level in ((0.1, "low"), (0.5, "moderate"), (0.75, "high"), (0.95, "critical"), (0.25, "low")):
        used[0] = int(2 * GIB * fraction)
        reading = manager.read()
        assert (reading.level, reading.used_bytes, reading.budget_bytes) == (level, used[0], 2 * GIB)
        assert reading.used_frac == pytest.approx(fraction)


def test_the_default_budget_on_cpu_is_a_share_of_the_host_ram_and_the_source_is_this_process() -> None:
    import psutil

    manager = MemoryManager(torch.device("cpu"), MemorySection())
    assert manager.budget_bytes == int(psutil.virtual_memory().total * 0.75)
    assert manager.source() == pytest.approx(psutil.Process().memory_info().rss, rel=0.5)


def test_levels_that_do_not_rise_are_refused_naming_the_fields(tmp_path: Path, corpus: Path) -> None:
    profile = tmp_path / "tiny.toml"
    profile.write_text(TINY_PROFILE, encoding="utf-8")
    with pytest.raises(ProfileError, match=r"release_at \(0\.95\) < shrink_at \(0\.9\)"):
        make_plan(str(profile), [f"data.path={corpus}", "memory.release_at=0.95"], use_machine_file=False)
    with pytest.raises(ProfileError, match="budget_gb"):
        make_plan(str(profile), [f"data.path={corpus}", "memory.budget_gb=0"], use_machine_file=False)


# ---------------------------------------------------------------------------------------------------------------
# Acts


class Held:
    """An object in a reference cycle: only the garbage collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_the_release_level_frees_garbage_and_says_so(tmp_path: Path, corpus: Path) -> None:
    trainer, writer = new_trainer(tmp_path, corpus, "release", *STEADY)
    from_step(trainer, 2, 0.8)
    cycle = Held()
    freed = weakref.ref(cycle)
    del cycle
    gc.disable()  # the cycle outlives the steps unless the manager collects it
    try:
        for _ in range(2):
            trainer.after_step(trainer.runner.run())
            if trainer.state.step == 1:
                assert freed() is not None
    finally:
        gc.enable()
        writer.close()
    assert freed() is None
    (memory,) = of_type(read_all(trainer.run_dir / rundir.EVENTS), "memory")
    assert (memory.level, memory.decision, memory.step, memory.action) == (
        "moderate",
        "release",
        2,
        "released caches (gc)",
    )
    assert memory.budget_bytes == GIB and memory.used_bytes == int(GIB * 0.8)
    assert trainer.state.micro_batch == 8  # releasing changes nothing else


def test_the_high_level_halves_the_micro_batch_and_keeps_the_run_as_planned(tmp_path: Path, corpus: Path) -> None:
    reference, w1 = new_trainer(tmp_path, corpus, "reference", *STEADY)
    shrunk, w2 = new_trainer(tmp_path, corpus, "shrunk", *STEADY)
    from_step(shrunk, 2, 0.95)
    expected, events = fit(reference, w1), fit(shrunk, w2)

    (memory,) = of_type(events, "memory")
    assert (memory.level, memory.decision, memory.step) == ("high", "shrink", 2)
    assert (memory.micro_batch, memory.grad_accum) == (4, 2)
    assert "micro-batch 8 -> 4 x accumulation 2 (effective batch 8 kept)" in memory.action
    steps = of_type(events, "step")
    assert all(e.micro_batch * e.grad_accum == 8 for e in steps) and steps[-1].micro_batch == 4
    # The same items, learning rates and losses as the run that never shrank: only the pieces are smaller.
    want, got = step_losses(expected), step_losses(events)
    assert sorted(got) == list(range(1, 7))
    assert got == pytest.approx(want, rel=1e-4)
    assert step_lrs(events) == step_lrs(expected)
    for p, q in zip(reference.module.parameters(), shrunk.module.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)

    store = replay(shrunk, events)
    assert ("memory", 2) in {(m.kind, m.step) for m in store.state.markers}
    assert (store.state.micro_batch, store.state.grad_accum) == (4, 2)
    assert memory_chart(store.state).markers == {"memory": [2]}


def test_a_shrink_at_micro_batch_one_only_releases(tmp_path: Path, corpus: Path) -> None:
    trainer, writer = new_trainer(tmp_path, corpus, "one", *STEADY, "train.batch_size=1", "train.max_steps=3")
    from_step(trainer, 1, 0.95)
    (memory,) = of_type(fit(trainer, writer), "memory")
    assert (memory.decision, memory.micro_batch) == ("release", None)
    assert memory.action.endswith("the micro-batch is 1 already")


def test_memory_act_false_only_reports(tmp_path: Path, corpus: Path) -> None:
    trainer, writer = new_trainer(tmp_path, corpus, "report", *STEADY, "memory.act=false")
    from_step(trainer, 2, 0.99)
    (memory,) = of_type(fit(trainer, writer), "memory")
    assert (memory.level, memory.decision, memory.action) == ("critical", "none", "reported only (memory.act = false)")
    assert trainer.state.micro_batch == 8 and not trainer.checkpointer.saved_at(2)


def wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_critical_level_saves_a_checkpoint_and_pauses_until_resumed(tmp_path: Path, corpus: Path) -> None:
    control = ControlState()
    trainer, writer = new_trainer(tmp_path, corpus, "pause", *STEADY, control=control)
    from_step(trainer, 3, 0.99)
    result: list[str] = []
    loop = threading.Thread(target=lambda: result.append(trainer.fit()))
    loop.start()
    try:
        wait_for(lambda: control.paused)
        time.sleep(0.2)  # paused means paused: no step while it waits
        assert trainer.state.step == 3
        saved = trainer.checkpointer.manager.list_complete()
        assert saved and load_checkpoint(saved[0])["step"] == 3
        events = read_all(trainer.run_dir / rundir.EVENTS)
        paused_store = replay(trainer, events)
        control.request("resume")  # what the control socket's handler does with a client's resume
        loop.join(timeout=60)
    finally:
        control.request("stop")
        loop.join(timeout=60)
        writer.close()
    assert result == ["completed"] and trainer.state.step == 6

    (memory,) = of_type(events, "memory")
    assert (memory.level, memory.decision, memory.step) == ("critical", "pause", 3)
    assert "memory at 99% of its 1.0 GiB budget: saving a checkpoint and pausing" in memory.action
    (paused,) = of_type(events, "paused")
    assert (paused.step, paused.reason) == (3, "memory at 99% of its 1.0 GiB budget")
    assert [e.step for e in of_type(events, "checkpoint_saved")] == [3]
    state = paused_store.state
    assert state.status == "paused" and ("memory", 3) in {(m.kind, m.step) for m in state.markers}
    assert "PAUSED (memory at 99% of its 1.0 GiB budget)" in status_first_line(state, now=None).plain
    assert any(line.level == "warning" and "paused itself at step 3" in line.message for line in state.logs)

    resumed = replay(trainer, read_all(trainer.run_dir / rundir.EVENTS)).state
    assert resumed.pause_reason is None and [
        e.step for e in of_type(read_all(trainer.run_dir / rundir.EVENTS), "resumed")
    ] == [3]


# ---------------------------------------------------------------------------------------------------------------
# Out of memory inside a mixed-precision optimizer step


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.usefixtures("faults_on")
def test_oom_after_the_scaler_unscaled_is_retried_cleanly(tmp_path: Path, corpus: Path, precision: str) -> None:
    mixed = (*STEADY, f'train.precision="{precision}"')
    reference, w1 = new_trainer(tmp_path, corpus, "reference", *mixed)
    faulted, w2 = new_trainer(tmp_path, corpus, "faulted", *mixed, "debug.oom_in_optimizer_at_steps=[3]")
    expected, events = fit(reference, w1), fit(faulted, w2)

    scaler = faulted.runner.precision.scaler
    assert scaler.is_enabled() == (precision == "fp16")
    (recovered,) = of_type(events, "oom_recovered")
    assert (recovered.step, recovered.micro_batch, recovered.grad_accum) == (3, 4, 2)
    assert "injected out-of-memory in the optimizer step 3" in recovered.message
    # Unscaled once per step: the same gradient norms, losses and loss scale as the run without the fault.
    want, got = step_losses(expected), step_losses(events)
    assert sorted(got) == list(range(1, 7))
    assert got == pytest.approx(want, rel=2e-2)
    norms = {e.step: e.grad_norm for e in of_type(events, "step")}
    want_norms = {e.step: e.grad_norm for e in of_type(expected, "step")}
    assert {s: norms[s] for s in norms if s in want_norms} == pytest.approx(
        {s: want_norms[s] for s in norms if s in want_norms}, rel=5e-2
    )
    assert scaler.get_scale() == reference.runner.precision.scaler.get_scale()
    assert not of_type(events, "nonfinite")


def test_a_trainer_process_survives_an_fp16_optimizer_step_oom(tmp_path: Path, corpus: Path) -> None:
    launcher = TrainerLauncher(tmp_path, corpus)
    try:  # the drills' switch: an environment variable
        run = launcher.start(
            "fp16", {"train.max_steps": 8, "train.precision": "fp16"}, env={**FAULTS_ON, OOM_IN_OPTIMIZER_ENV: "2"}
        )
        run.wait()
    finally:
        launcher.close()
    assert run.proc.returncode == 0, run.stderr
    events = run.events()
    (recovered,) = of_type(events, "oom_recovered")
    assert recovered.step == 2
    done = finished(events)
    assert done.status == "completed" and done.step == 8


@pytest.mark.parametrize("group", ["discriminator", "generator"])
@pytest.mark.usefixtures("faults_on")
def test_oom_in_either_optimizer_step_of_an_fp16_two_optimizer_run_retries_from_the_same_state(
    tmp_path: Path, group: str
) -> None:
    """The vocoder: one scaler for two optimizers; an OOM after either group was unscaled (the generator's comes
    after the discriminator stepped) ends like a clean step 3 at the halved micro-batch, scale included."""
    fp16 = ('train.precision="fp16"',)
    faulty = new_vocoder_trainer(
        tmp_path, f"oom-{group}", *fp16, "debug.oom_in_optimizer_at_steps=[3]", f'debug.fault_group="{group}"'
    )
    clean = new_vocoder_trainer(tmp_path, f"clean-{group}", *fp16)
    while clean.state.step < 2:  # fp16's first scales overflow: skipped steps keep their number
        a, b = faulty.runner.run(), clean.runner.run()
        assert a.applied == b.applied
    clean.state.micro_batch, clean.state.grad_accum = 2, 2
    for _ in range(10):  # the first attempt at step 3 meets the OOM, then both runs go on alike
        a, b = faulty.runner.run(), clean.runner.run()
        assert (a.applied, a.losses) == (b.applied, b.losses)
        if a.applied:
            break
    assert (faulty.state.micro_batch, faulty.state.grad_accum, faulty.state.step) == (2, 2, 3)
    for key, tensor in clean.module.state_dict().items():
        assert torch.equal(faulty.module.state_dict()[key], tensor), key
    scalers = [t.runner.precision.scaler for t in (faulty, clean)]
    assert scalers[0].is_enabled() and scalers[0].state_dict() == scalers[1].state_dict()
