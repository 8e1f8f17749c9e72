"""Free-running evaluation in the product: a real voice run scores held-out sentences, picks its best checkpoint
by them when asked, and `trainer-core evaluate` gives the same figures for the same weights."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from conftest import run_here, tiny_voice_profile
from trainer_core.contract.event_lines import parse_event
from trainer_core.contract.profile import TrainSection
from vega_tui.store import RunStore
from vega_tui.widgets.charts import speech_chart
from vega_tui.widgets.status import status_first_line

REPO = Path(__file__).resolve().parents[1]
TEST_VOICE = REPO / "tests" / "fixtures" / "voice"
STEPS = 12


@pytest.fixture(scope="module")
def voice_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("free-running")
    (root / "config").mkdir()
    profile = root / "voice.toml"
    profile.write_text(tiny_voice_profile("free", STEPS, 4, ["Hello."]), encoding="utf-8")
    env = {**os.environ, "VEGA_CONFIG_DIR": str(root / "config"), "OMP_NUM_THREADS": "1"}
    settings = ["train.free_running_every=1", "train.free_running_items=3", 'train.select_best_by="free_running"']
    argv = ["train", "--profile", str(profile), "--run-dir", str(root / "run")]
    done = run_here(env, *argv, *[a for s in settings for a in ("--set", s)])
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "run", env


def events(run_dir: Path, kind: str) -> list:
    lines = (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    return [e for e in (parse_event(line) for line in lines) if e.type == kind]


def test_every_validation_after_the_start_scores_the_held_out_sentences(voice_run) -> None:
    run_dir, _ = voice_run
    scored = events(run_dir, "free_running")
    assert [e.step for e in scored] == [4, 8, 12]
    for e in scored:
        assert e.items == 3 and len(e.per_item) == 3 and e.vocoder == "griffin-lim"
        assert 0 < e.floor_distance < e.distance and 0 <= e.vuv_agreement <= 1 and e.duration_ratio > 0
        assert e.acoustic_distance is not None
    assert len({e.floor_distance for e in scored}) == 1, "the floor is computed once"
    assert len({tuple(i.item_id for i in e.per_item) for e in scored}) == 1, "the same sentences every time"


def test_the_best_checkpoint_is_the_lowest_free_running_distance(voice_run) -> None:
    run_dir, _ = voice_run
    scored = events(run_dir, "free_running")
    lowest = min(scored, key=lambda e: e.distance)
    best = events(run_dir, "best_model")
    assert best and all(e.selected_by == "free_running" for e in best)
    assert best[-1].step == lowest.step and best[-1].score == pytest.approx(lowest.distance)
    assert json.loads((run_dir / "checkpoints" / "best.json").read_text())["step"] == lowest.step


def evaluate(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return run_here(env, "evaluate", *args)


def test_evaluate_an_export_and_the_last_checkpoint_as_the_run_scored_them(voice_run) -> None:
    run_dir, env = voice_run
    last = events(run_dir, "free_running")[-1]
    checkpoint = run_dir / "checkpoints" / f"step-{STEPS:08d}.pt"
    for source in (run_dir / "export", checkpoint):
        done = evaluate(env, str(source), "--data", str(TEST_VOICE), "--items", "3", "--json")
        assert done.returncode == 0, done.stderr[-2000:]
        out = json.loads(done.stdout)
        assert [i["item_id"] for i in out["scores"]["items"]] == [i.item_id for i in last.per_item]
        assert out["scores"]["distance"] == pytest.approx(last.distance, rel=1e-6)
        assert out["floor"]["distance"] == pytest.approx(last.floor_distance, rel=1e-6)


def test_evaluate_a_run_folder_uses_its_best_checkpoint_and_prints_a_table(voice_run) -> None:
    run_dir, env = voice_run
    done = evaluate(env, str(run_dir), "--data", str(TEST_VOICE), "--all")
    assert done.returncode == 0, done.stderr[-2000:]
    best = json.loads((run_dir / "checkpoints" / "best.json").read_text())["path"]
    assert best in done.stdout.splitlines()[0]
    assert done.stdout.splitlines()[-1].startswith("mean")
    assert len(done.stdout.splitlines()) == 3 + 40, "every demo clip, one row each"


def test_evaluate_names_a_source_it_cannot_use(voice_run, tmp_path: Path) -> None:
    _, env = voice_run
    done = evaluate(env, str(tmp_path), "--data", str(TEST_VOICE))
    assert done.returncode == 2
    assert str(tmp_path) in done.stderr and "not a checkpoint file, an export folder or a run folder" in done.stderr


def test_selecting_by_free_running_needs_it_on() -> None:
    with pytest.raises(ValidationError, match="free_running_every >= 1"):
        TrainSection(select_best_by="free_running", free_running_every=0)


def test_the_dashboard_charts_the_distance_against_the_floor(voice_run) -> None:
    run_dir, _ = voice_run
    store = RunStore()
    store.apply(parse_event(line) for line in (run_dir / "events.jsonl").read_text().splitlines())
    chart = speech_chart(store.state)
    lines = {line.label: line for line in chart.lines}
    assert lines["free-running"].xs == [4, 8, 12]
    floor = events(run_dir, "free_running")[0].floor_distance
    assert set(lines["floor (vocoder)"].ys) == {floor}
    assert chart.markers["best"] == [e.step for e in events(run_dir, "best_model")]
    assert any("free-running at step 12" in line.message for line in store.state.logs)


def test_the_status_line_says_what_the_trainer_does_between_steps(voice_run) -> None:
    run_dir, _ = voice_run
    phases = [(e.step, e.phase, e.done, e.total) for e in events(run_dir, "phase")]
    assert (8, "free_running", 2, 3) in phases and (8, "sampling", None, None) in phases
    assert phases[-1] == (12, "finishing", None, None) and (4, "training", None, None) in phases
    store, seen = RunStore(), []
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        store.apply([event := parse_event(line)])
        if event.type in ("phase", "step") and store.state.status == "training":
            seen.append(status_first_line(store.state, None).plain.split(" · ")[-1])
    assert "free-running 2/3" in seen and "validating" in seen and "sampling" in seen
    assert seen[-1].startswith("ETA") or seen[-1] == "finishing"
    # Steps after a pass: the ETA is back.
    after = seen.index("free-running 3/3")
    assert any(text.startswith("ETA") for text in seen[after:])
