"""Weights & Biases for real, offline: a short voice run with `[logging] wandb = true`, killed
(SIGKILL) after a checkpoint and resumed; W&B's own run files are read back (tests/wandb_files.py)
and compared with events.jsonl.

One killed run serves every test, through copies of its folder. W&B's file of the resumed copy
is cut after row 2, as a kill within W&B's write interval leaves it (wandb.json still says 4):
the resume continues the same W&B run, replays step 3 (the checkpoint's, with its evaluation)
from events.jsonl and logs each step once. The negative controls run the W&B sink in this
process, resumed and fed the killed trainer's own events: with the skip off
(VEGA_FAULT_WANDB_RELOG) it logs a step twice; with the replay off (VEGA_FAULT_WANDB_NO_REPLAY)
on a cut copy, step 3 is missing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from conftest import FAULTS_ON, finished, of_type, step_rows, tiny_voice_profile
from trainer_core.contract import rundir
from trainer_core.contract.errors import ProfileError
from trainer_core.contract.eventlog import EventWriter, read_all
from trainer_core.contract.profile import LoggingSection
from trainer_core.contract.profile_loader import load_profile_dict
from trainer_core.contract.protocol import Event, SampleEvent, StepEvent, ValidationEvent
from trainer_core.engine.events import EventHub
from trainer_core.engine.wandb_files import history_step, records_with_ends
from trainer_core.engine.wandb_log import (
    NO_REPLAY_ENV,
    RELOG_ENV,
    relog_on,
    replay_off,
    wandb_logging,
)
from trainer_core.engine.wandb_rows import replay_rows
from trainer_core.engine.wandb_state import read_state
from wandb_files import WandbFile, logged_steps, repeated, wandb_files

REPO = Path(__file__).resolve().parent.parent
TRAIN = [sys.executable, "-m", "trainer_core", "train"]
STEPS = 6  # evaluations (validation, samples, views, free-running scores) at 3 and 6
CHECKPOINT = 3  # the checkpoint the kill resumes from, and an evaluation
HOLD_AT = 6  # killed, held in step 6's forward pass: W&B has row 4 (and 5, open) after step 3
KEPT = 2  # the cut W&B file keeps rows up to this one: 3 and 4 are lost, as in a kill
EVALS = "free_running_every = 1\nfree_running_items = 2\n"  # free-running scores at 3 and 6
SETTINGS = "checkpoint_every_epochs = 100\ncheckpoint_every_steps = 3\n" + EVALS
PROFILE = tiny_voice_profile(
    "wb", STEPS, CHECKPOINT, ["Hello."], seed=4, logging={"wandb": True, "step_interval_s": 0.05}
).replace("[train]\n", "[train]\n" + SETTINGS)
# Each step outlasts the 0.05 s step window: every step's event is out before the next step begins.
SLOW = {**FAULTS_ON, "VEGA_FAULT_STEP_SLEEP_S": "0.06"}


def trainer(root: Path, run_dir: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("VEGA_", "WANDB_"))}
    # Offline: no network; W&B's files go to RUN/wandb/ (the default when WANDB_DIR is unset).
    clean.update(VEGA_CONFIG_DIR=str(root / "config"), OMP_NUM_THREADS="1", WANDB_MODE="offline")
    clean.update(PYTHONFAULTHANDLER="1")  # a trainer stuck past its wait shows its stacks
    argv = [*TRAIN, "--profile", str(root / "wb.toml"), "--run-dir", str(run_dir), *args]
    with open(run_dir.with_suffix(".err"), "ab") as err:
        out = subprocess.DEVNULL
        return subprocess.Popen(argv, stdout=out, stderr=err, env={**clean, **env}, cwd=REPO)


def wait_until(done, what: str, proc: subprocess.Popen[bytes], timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{what} did not happen (trainer exit {proc.poll()})")
        time.sleep(0.1)


def rows_on_disk(run_dir: Path, step: int) -> int:
    """How many rows for `step` W&B's transaction logs hold on disk (written every second)."""
    try:
        return logged_steps(wandb_files(run_dir / "wandb")).count(step)
    except (OSError, ValueError):
        return 0


def last_step(run_dir: Path) -> int | None:
    state, _ = read_state(run_dir)
    return state.last_step if state is not None else None


def finish(proc: subprocess.Popen[bytes], run_dir: Path) -> None:
    try:
        code = proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # the fault handler writes every thread's stack to .err
        time.sleep(5)
        proc.kill()
        code = proc.wait()
    assert code == 0, run_dir.with_suffix(".err").read_text(errors="replace")[-3000:]


class Runs(NamedTuple):
    """Copies of the killed run folder, each resumed."""

    run: Path  # W&B's file cut after row KEPT; resumed for real (`--resume auto`)
    relogged: Path  # resumed in this process with the skip off
    unreplayed: Path  # cut like `run`; resumed in this process with the replay off


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    root = tmp_path_factory.mktemp("wandb")
    (root / "config").mkdir()
    (root / "wb.toml").write_text(PROFILE, encoding="utf-8")
    run_dir, marker = root / "killed", root / "held"
    killed = trainer(root, run_dir, {**SLOW, **hold(HOLD_AT, marker)})
    import wandb.proto.wandb_internal_pb2  # noqa: F401 - the reader's slow import, while it starts

    wait_until(marker.exists, f"the hold in step {HOLD_AT}", killed)
    # Row 5 is open (W&B commits a row when a later step comes): W&B holds up to 4. Kill then.
    has_4 = lambda: last_step(run_dir) == 4 and rows_on_disk(run_dir, 4) == 1  # noqa: E731
    wait_until(has_4, "W&B's row 4", killed)
    killed.kill()
    killed.wait()
    found = Runs(root / "run", root / "relogged", root / "unreplayed")
    for copy in found:  # copies: W&B's service may still write to the killed folder's file
        ignore = shutil.ignore_patterns(rundir.SOCKET)
        shutil.copytree(run_dir, copy, symlinks=True, ignore=ignore)
    for cut in (found.run, found.unreplayed):
        lose_rows_after(cut, KEPT)
    resumed = trainer(root, found.run, SLOW, "--resume", "auto")
    resume_in_this_process(found.relogged, RELOG_ENV, replay=False)
    resume_in_this_process(found.unreplayed, NO_REPLAY_ENV, replay=True)
    finish(resumed, found.run)
    return found


def lose_rows_after(run_dir: Path, step: int) -> None:
    """Cut W&B's file after row `step`, as a kill within W&B's write interval leaves it."""
    (log,) = (run_dir / "wandb").glob("*run-*/run-*.wandb")
    ends = [end for end, record in records_with_ends(log) if history_step(record) == step]
    with open(log, "r+b") as handle:
        handle.truncate(ends[0])
    assert logged_steps(wandb_files(run_dir / "wandb")) == list(range(1, step + 1))
    assert last_step(run_dir) == 4, "wandb.json is ahead of W&B's file, as after a kill"


def resume_in_this_process(folder: Path, switch: str, replay: bool) -> None:
    """A negative control, while the real resume runs: a resumed sink with `switch` on, fed what
    the killed trainer announced after the checkpoint (what a resume trains again, identically)."""
    events = read_all(folder / "events.jsonl")
    writer = EventWriter.resume(folder / "events.jsonl")
    hub = EventHub(writer)
    with pytest.MonkeyPatch.context() as env:
        offline(env)
        env.setenv("VEGA_FAULTS", "1")
        env.setenv(switch, "1")
        with wandb_logging(LoggingSection(wandb=True), hub, folder, resume=True) as sink:
            assert sink is not None
            if replay:
                sink.starts_after(CHECKPOINT)
            for event in retrained(events):
                hub.emit(event)
    writer.close()


def retrained(events: list[Event]) -> list[Event]:
    """The killed trainer's events after its checkpoint: what a resume from it trains again."""
    return [event for event in events if getattr(event, "step", 0) > CHECKPOINT]


def offline(env: pytest.MonkeyPatch) -> None:
    """W&B in this process: offline, and no W&B setting of the machine running the tests."""
    for name in [name for name in os.environ if name.startswith("WANDB_")]:
        env.delenv(name)
    env.setenv("WANDB_MODE", "offline")


def hold(nth_step: int, marker: Path) -> dict[str, str]:
    """Hold the trainer in the forward pass of its n-th step in this process, writing `marker`."""
    return {"VEGA_FAULT_HOLD_AT": f"step:{nth_step}", "VEGA_FAULT_HOLD_MARKER": str(marker)}


def segments(run_dir: Path) -> list[WandbFile]:
    found = wandb_files(run_dir / "wandb")
    assert len(found) == 2, [f.path for f in found]
    return found


def test_the_frozen_profile_is_the_config(runs: Runs) -> None:
    run_dir = runs.run
    frozen = tomllib.loads((run_dir / rundir.PROFILE).read_text(encoding="utf-8"))
    first, _ = segments(run_dir)
    config = {key: value for key, value in first.config.items() if key != "_wandb"}
    assert config == frozen
    assert config["logging"]["wandb"] is True and config["train"]["max_steps"] == STEPS


def test_step_validation_and_free_running_scalars_at_their_steps(runs: Runs) -> None:
    run_dir = runs.run
    events = read_all(run_dir / "events.jsonl")
    trained = {}  # each step as last trained (the resume trains 4 and 5 again, identically)
    for step_event in of_type(events, "step"):
        trained.update(zip(step_event.step_series, step_event.loss_series, strict=True))
    files = segments(run_dir)
    losses = merged(files, "train/loss")
    assert sorted(losses) == list(range(1, STEPS + 1))
    assert losses == pytest.approx(trained, rel=1e-6)
    assert sorted(merged(files, "train/lr")) == list(range(1, STEPS + 1))

    validations = {e.step: e.loss for e in of_type(events, "validation")}
    assert sorted(validations) == [CHECKPOINT, STEPS]
    assert merged(files, "val/loss") == pytest.approx(validations, rel=1e-6)
    scores = {e.step: e.distance for e in of_type(events, "free_running")}
    assert sorted(scores) == [CHECKPOINT, STEPS]
    assert merged(files, "free_running/distance") == pytest.approx(scores, rel=1e-6)


def merged(files: list[WandbFile], key: str) -> dict[int, Any]:
    """Step -> value of `key` over all segments."""
    return {step: value for found in files for step, value in found.steps(key).items()}


def test_audio_samples_and_view_images_are_media_files(runs: Runs) -> None:
    run_dir = runs.run
    files = segments(run_dir)
    media = files[-1].path.parent / "files"  # step 3's replayed, 6's logged: both resumed
    samples = of_type(read_all(run_dir / "events.jsonl"), "sample")
    made = {(e.step, Path(e.path).stem): e for e in samples}
    for key, kind in [("samples/01", "audio-file"), ("views/mel", "image-file")]:
        logged = merged(files, key)
        assert sorted(logged) == [CHECKPOINT, STEPS]
        for step, entry in logged.items():
            assert entry["_type"] == kind
            recorded = Path(made[step, key.split("/")[1]].path)
            own = run_dir / rundir.SAMPLES / recorded.parent.name / recorded.name
            assert (media / entry["path"]).read_bytes() == own.read_bytes()  # this folder's file
    assert sorted(merged(files, "views/alignment")) == [CHECKPOINT, STEPS]
    wav = (media / merged(files, "samples/01")[STEPS]["path"]).read_bytes()
    assert wav[:4] == b"RIFF" and len(wav) > 1000
    png = (media / merged(files, "views/mel")[STEPS]["path"]).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000


def test_the_resume_continues_the_w_and_b_run_and_logs_each_step_once(
    runs: Runs,
) -> None:
    run_dir = runs.run
    killed, resumed = segments(run_dir)
    state, _ = read_state(run_dir)
    assert state is not None and killed.run_id == resumed.run_id == state.run_id
    assert killed.exit_code is None and resumed.exit_code == 0  # the killed segment never finished
    assert sorted(killed.steps("train/loss")) == list(range(1, KEPT + 1))  # the rest was lost
    assert sorted(resumed.steps("train/loss")) == list(range(KEPT + 1, STEPS + 1))
    steps = logged_steps([killed, resumed])
    assert repeated(steps) == [] and steps == list(range(1, STEPS + 1))
    assert state.last_step == STEPS
    events = read_all(run_dir / "events.jsonl")
    assert finished(events).status == "completed"
    logs = [e.message for e in of_type(events, "log")]
    resumed_from = [message for message in logs if message.startswith("resumed from")]
    assert len(resumed_from) == 1 and f"step-{CHECKPOINT:08d}.pt" in resumed_from[0]
    assert len(step_rows(events)[CHECKPOINT + 1]) == 2, "step 4 trained twice, logged to W&B once"
    codes = [e.code for e in of_type(events, "warning")]
    assert not [code for code in codes if code and code.startswith("wandb")]


def test_the_rows_w_and_b_lost_are_replayed_from_the_event_log(runs: Runs) -> None:
    events = read_all(runs.run / "events.jsonl")
    (trained,) = [e for e in of_type(events, "step") if e.step == CHECKPOINT]
    (validation,) = [e for e in of_type(events, "validation") if e.step == CHECKPOINT]
    (scores,) = [e for e in of_type(events, "free_running") if e.step == CHECKPOINT]
    _, resumed = segments(runs.run)
    (row,) = [row for row in resumed.rows if row["_step"] == CHECKPOINT]
    expected = {
        "train/loss": trained.loss,
        "train/lr": trained.lr,
        "train/samples_per_s": trained.samples_per_s,
        "train/epoch": trained.epoch,
        "val/loss": validation.loss,
        "free_running/distance": scores.distance,
        "free_running/vuv_agreement": scores.vuv_agreement,
        "free_running/floor_distance": scores.floor_distance,
    }
    assert {key: row[key] for key in expected} == pytest.approx(expected, rel=1e-6)
    assert {"samples/01", "views/mel", "views/alignment"} <= set(row)
    assert [r["_step"] for r in resumed.rows][:2] == [CHECKPOINT, CHECKPOINT + 1]


def test_negative_control_without_the_skip_a_retrained_step_is_logged_twice(
    runs: Runs,
) -> None:
    steps = logged_steps(segments(runs.relogged))
    assert repeated(steps) == [4], "the duplicate check must catch a sink that logs steps again"


def test_negative_control_without_the_replay_the_lost_step_is_missing(runs: Runs) -> None:
    steps = logged_steps(segments(runs.unreplayed))  # the control trained up to step 5
    assert missing(steps, 5) == [CHECKPOINT], "the check must catch the rows a kill lost"
    assert missing(logged_steps(segments(runs.run)), STEPS) == []


def missing(steps: list[int], last: int) -> list[int]:
    return sorted(set(range(1, last + 1)) - set(steps))


def test_a_replay_takes_each_step_as_last_trained() -> None:
    """Two resumes in one log: the rows replayed are the newest training's, whole windows too."""
    first = [step_event(1), step_event(2), step_event(3, 9.0)]
    evaluated = ValidationEvent(step=3, epoch=0, loss=5.0)
    window = {"step_series": [2, 3], "loss_series": [6.0, 7.0], "lr_series": [1e-3, 1e-3]}
    again = step_event(3, 7.0).model_copy(update=window)  # a resume from step 1's checkpoint
    rows = replay_rows([*first, evaluated, step_event(4), again], after=1, upto=3)
    assert sorted(rows) == [2, 3]
    assert rows[2].scalars["train/loss"] == 6.0 and rows[3].scalars["train/loss"] == 7.0
    assert "val/loss" not in rows[3].scalars  # step 3's evaluation was not run again


def hub_to(path: Path) -> tuple[EventHub, EventWriter]:
    writer = EventWriter(path)
    return EventHub(writer), writer


def test_without_the_package_a_warning_names_the_extra(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed: importing it fails
    hub, writer = hub_to(tmp_path / "events.jsonl")
    with wandb_logging(LoggingSection(wandb=True), hub, tmp_path, resume=False):
        pass
    writer.close()
    (warning,) = of_type(read_all(tmp_path / "events.jsonl"), "warning")
    assert warning.code == "wandb_unavailable" and 'pip install "vega[wandb]"' in warning.message
    assert "logging.wandb = false" in warning.message and not (tmp_path / "wandb").exists()


def test_a_failing_w_and_b_log_is_one_warning_and_the_sink_turns_off(tmp_path: Path) -> None:
    bad = tmp_path / "mel.png"
    bad.write_text("not a picture", encoding="utf-8")
    hub, writer = hub_to(tmp_path / "events.jsonl")
    with pytest.MonkeyPatch.context() as env:
        offline(env)
        with wandb_logging(LoggingSection(wandb=True), hub, tmp_path, resume=False):
            hub.emit(step_event(1))
            hub.emit(SampleEvent(step=1, kind="image", path=str(bad)))  # not readable as an image
            hub.emit(step_event(2))
    writer.close()
    warnings = of_type(read_all(tmp_path / "events.jsonl"), "warning")
    assert [w.code for w in warnings] == ["wandb_failed"], warnings
    assert "mel.png" in warnings[0].message and "goes on without it" in warnings[0].message
    # The W&B run is marked failed (the end of training waits only briefly for that: poll).
    deadline = time.monotonic() + 60
    while (found := wandb_files(tmp_path / "wandb")[0]).exit_code is None:
        assert time.monotonic() < deadline, "the failed W&B run was never finished"
        time.sleep(0.1)
    assert found.exit_code == 1 and logged_steps([found]) == [1]  # nothing after the failure


def step_event(step: int, loss: float | None = None) -> StepEvent:
    loss = 1.0 / step if loss is None else loss
    return StepEvent(
        step=step, epoch=0, loss=loss, lr=1e-3, samples_per_s=10.0, data_wait_frac=0.0,
        micro_batch=8, step_series=[step], loss_series=[loss], lr_series=[1e-3],
    )  # fmt: skip


def test_a_project_name_w_and_b_refuses_is_a_profile_error() -> None:
    with pytest.raises(ProfileError, match=r'logging.wandb_project = "team/voices".*contains /'):
        load_profile_dict({"logging": {"wandb_project": "team/voices"}})


def test_the_relog_switch_acts_only_with_the_fault_gate_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VEGA_FAULTS", raising=False)
    monkeypatch.setenv(RELOG_ENV, "1")
    monkeypatch.setenv(NO_REPLAY_ENV, "1")
    assert not relog_on(), "a real run always skips the steps W&B has"
    assert not replay_off(), "a real run always replays what W&B lost"
    monkeypatch.setenv("VEGA_FAULTS", "1")
    assert relog_on() and replay_off()
