"""Fault switches are inert in real runs: they act only with VEGA_FAULTS=1, and a run they touch says so.

Each switch (VEGA_FAULT_* and the profile's [debug] faults) is set with the gate closed and must do nothing, then
with it open (the negative control: the same switches, the same checks) and must act. Two real trainer runs, in
process through the trainer's main: with the gate closed a planted failure is ignored and a warning says
which switches were; with it open the failure fires, after a `fault_injection_on` warning and its trainer.log
line, and the dashboard following that run shows the "fault injection on" banner.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch

from conftest import of_type, write_corpus
from dash_pilot import DashApp, plain, run_screen, wait_until
from trainer_core import fault_points
from trainer_core.contract.eventlog import read_all
from trainer_core.contract.fault_gate import GATE_ENV, IGNORED_CODE, ON_CODE
from trainer_core.contract.profile import DebugSection
from trainer_core.engine import faults
from trainer_core.engine.checkpoint_manager import CheckpointError, CheckpointManager, new_checkpoint_state
from trainer_core.engine.run import run_training
from trainer_core.plan import make_plan
from trainer_core.tiny_profiles import tiny_profile
from vega_tui.store import RunStore
from vega_tui.widgets.status import ProblemBanner, problem_text

pytestmark = pytest.mark.usefixtures("one_torch_thread", "keep_torch_threads")

SWITCHES = {
    "VEGA_FAULT_FAIL_AT_STEP": "1",
    "VEGA_FAULT_OOM_AT_STEPS": "1",
    "VEGA_FAULT_STEP_SLEEP_S": "0.01",
    "VEGA_FAULT_HOLD_AT": "validation",
    "VEGA_FAULT_CHECKPOINT_IN_PLACE": "1",
    "VEGA_FAULT_CHECKPOINT_ENOSPC": "1",
    "VEGA_FAULT_SAMPLE_IN_PLACE": "1",
    "VEGA_FAULT_BEST_IN_PLACE": "1",
    "VEGA_FAULT_CACHE_IN_PLACE": "1",
    "VEGA_FAULT_EVAL_UNBUDGETED": "1",
    "VEGA_FAULT_EVAL_SLEEP_S": "2.5",
}
DEBUG = DebugSection(nonfinite_at_steps=[1], hold_checkpoint_write_s=5.0)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for key in [key for key in os.environ if key.startswith("VEGA_")]:
        monkeypatch.delenv(key)
    return monkeypatch


def effects(tmp_path: Path) -> dict[str, object]:
    """What each switch does here and now."""
    injector = faults.FaultInjector(DEBUG)
    try:
        injector.before_forward(1)
        raised = None
    except (RuntimeError, torch.OutOfMemoryError) as exc:
        raised = type(exc).__name__
    loss = injector.poison_loss(1, torch.tensor(1.0))
    state = new_checkpoint_state(model={"w": torch.ones(2)}, step=1, epoch=0, rng={})
    try:
        CheckpointManager(tmp_path).save(state, step=1)
        saved = "saved"
    except CheckpointError as exc:
        saved = "disk is full" if "disk is full" in str(exc) else str(exc)
    return {
        "raised": raised,
        "loss_finite": bool(torch.isfinite(loss)),
        "sleep_s": injector.step_sleep_s,
        "hold_s": injector.checkpoint_hold_s(1),
        "hold_at": faults.hold_target(),
        "in_place": faults.writes_in_place(),
        "files_in_place": [fault_points.in_place(phase) for phase in faults.IN_PLACE_SWITCHES],
        "save": saved,
        "eval_unbudgeted": faults.eval_unbudgeted(),
        "eval_sleep_s": faults.eval_sleep_s(),
    }


def test_each_switch_acts_only_with_the_gate_open(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    for name, value in SWITCHES.items():
        clean_env.setenv(name, value)
    assert effects(tmp_path / "closed") == {
        "raised": None,
        "loss_finite": True,
        "sleep_s": 0.0,
        "hold_s": 0.0,
        "hold_at": None,
        "in_place": False,
        "files_in_place": [False] * 3,
        "save": "saved",
        "eval_unbudgeted": False,
        "eval_sleep_s": 0.0,
    }
    code, message = faults.fault_warning(DEBUG) or ("", "")
    assert code == IGNORED_CODE and f"they act only with {GATE_ENV}=1" in message
    assert all(f"{name}={value}" in message for name, value in SWITCHES.items())
    assert "debug.nonfinite_at_steps=[1]" in message and "debug.hold_checkpoint_write_s=5.0" in message
    assert faults.fault_warning(DebugSection()) is not None  # the environment's switches alone
    # The negative control: the gate open, every switch acts.
    clean_env.setenv(GATE_ENV, "1")
    assert effects(tmp_path / "open") == {
        "raised": "RuntimeError",
        "loss_finite": False,
        "sleep_s": 0.01,
        "hold_s": 5.0,
        "hold_at": ("validation", 1),
        "in_place": True,
        "files_in_place": [True] * 3,
        "save": "disk is full",
        "eval_unbudgeted": True,
        "eval_sleep_s": 2.5,
    }
    code, message = faults.fault_warning(DEBUG) or ("", "")
    assert code == ON_CODE and message.startswith(f"fault injection on ({GATE_ENV}=1): VEGA_FAULT_")
    for key in SWITCHES:
        clean_env.delenv(key)
    assert faults.fault_warning(DebugSection()) is None  # nothing set: nothing said


def train_here(root: Path, name: str) -> tuple[int, Path]:
    """The trainer's main in this process: a tiny LM for 2 steps with a NaN loss planted at step 1."""
    corpus = root / "corpus"
    if not corpus.exists():
        write_corpus(corpus, documents=2, lines=20)
    profile = root / "tiny.toml"
    profile.write_text(tiny_profile("lm", debug={"nonfinite_at_steps": [1]}), encoding="utf-8")
    settings = [f"data.path={corpus}", "train.max_steps=2", "train.warmup_steps=1", "train.eval_every_steps=100"]
    plan = make_plan(str(profile), settings, run_dir=root / name, use_machine_file=False)
    try:
        return run_training(plan), root / name
    finally:
        for handler in logging.getLogger("trainer_core").handlers:  # trainer.log stays open otherwise
            handler.close()


def test_a_real_run_ignores_the_switches_and_says_which(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("VEGA_FAULT_FAIL_AT_STEP", "1")
    code, run_dir = train_here(tmp_path, "closed")
    assert code == 0
    events = read_all(run_dir / "events.jsonl")
    (warning,) = [w for w in of_type(events, "warning") if w.code == IGNORED_CODE]
    assert "VEGA_FAULT_FAIL_AT_STEP=1, debug.nonfinite_at_steps=[1]" in warning.message
    assert [e.status for e in of_type(events, "finished")] == ["completed"]
    assert not of_type(events, "nonfinite") and not of_type(events, "error")
    assert "fault switches ignored: VEGA_FAULT_FAIL_AT_STEP=1" in (run_dir / "trainer.log").read_text()
    store = RunStore(run_dir=run_dir)
    store.apply(events)
    assert store.state.fault_injection is None and problem_text(store.state) is None  # no banner


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_with_the_gate_open_they_fire_and_the_dashboard_says_so(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("VEGA_FAULT_FAIL_AT_STEP", "1")
    clean_env.setenv(GATE_ENV, "1")
    code, run_dir = train_here(tmp_path, "open")
    assert code == 1
    events = read_all(run_dir / "events.jsonl")
    warnings = of_type(events, "warning")
    on = [w for w in warnings if w.code == ON_CODE]
    assert len(on) == 1 and warnings[0] is on[0]  # the run's first warning
    assert "VEGA_FAULT_FAIL_AT_STEP=1, debug.nonfinite_at_steps=[1]" in on[0].message
    assert not of_type(events, "step")
    (error,) = of_type(events, "error")
    assert error.message == "injected failure at step 1 (fault injection)"
    assert f"fault injection on ({GATE_ENV}=1): VEGA_FAULT_FAIL_AT_STEP=1" in (run_dir / "trainer.log").read_text()
    async with DashApp(run_dir).run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: bool(pilot.app.screen.query(ProblemBanner)), "the run screen")
        screen = run_screen(pilot)
        banner = screen.query_one(ProblemBanner)
        await wait_until(pilot, lambda: screen.state.status == "failed" and banner.display, "the banner")
        text = plain(banner)
        assert text.startswith("FAULT INJECTION ON (VEGA_FAULTS=1): VEGA_FAULT_FAIL_AT_STEP=1")
        assert "The run failed: injected failure at step 1" in text
