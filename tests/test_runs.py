"""vega_tui.run_summary: summaries of several run folders (copies of the recorded fixtures), newest run, loss curves."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from trainer_core.contract.eventlog import read_all
from vega_tui import run_summary

FIXTURES = Path(__file__).parent / "fixtures" / "events"
NAMES = ("lm_completed", "lm_stopped", "lm_faults", "lm_failed", "lm_killed")


@pytest.fixture
def runs_root(tmp_path: Path) -> Path:
    """A runs folder holding a copy of every fixture, plus clutter that is not a run."""
    root = tmp_path / "runs"
    root.mkdir()
    for name in NAMES:
        shutil.copytree(FIXTURES / name, root / name)
    (root / "notes.txt").write_text("not a run")
    (root / "empty-folder").mkdir()
    return root


def test_list_runs_gives_every_run_with_its_status_newest_first(runs_root: Path) -> None:
    listed = run_summary.list_runs(runs_root)
    by_name = {summary.name: summary for summary in listed}
    assert set(by_name) == set(NAMES)
    assert {name: s.status for name, s in by_name.items()} == {
        "lm_completed": "finished",
        "lm_stopped": "stopped",
        "lm_faults": "finished",
        "lm_failed": "failed",
        "lm_killed": "crashed",
    }
    started = [s.started for s in listed]
    assert all(t is not None for t in started) and started == sorted(started, reverse=True)
    assert all(s.profile == "lm-small" for s in listed)


def test_summary_numbers_match_the_session_and_the_log(runs_root: Path) -> None:
    by_name = {s.name: s for s in run_summary.list_runs(runs_root)}
    done = by_name["lm_completed"]
    session = json.loads((runs_root / "lm_completed" / "session.json").read_text())
    assert done.step == 60
    assert done.best_val_loss == pytest.approx(session["summary"]["best_val_loss"])
    assert done.final_loss == pytest.approx(session["summary"]["final_loss"])
    assert done.duration_s == pytest.approx(session["seconds"])
    assert done.path == runs_root / "lm_completed"
    # The killed run has no session.json: its numbers come from the head and tail of its log.
    killed = by_name["lm_killed"]
    steps = [e for e in read_all(runs_root / "lm_killed" / "events.jsonl") if e.type == "step"]
    assert killed.step == steps[-1].step and killed.final_loss == pytest.approx(steps[-1].loss)
    assert killed.best_val_loss is None and killed.duration_s is not None and killed.duration_s > 0


def test_summary_without_session_reads_only_head_and_tail(runs_root: Path) -> None:
    run = runs_root / "lm_completed"
    (run / "session.json").unlink()
    events = (run / "events.jsonl").read_bytes()
    head, rest = events.split(b"\n", 1)
    # 2 MB of garbage in the middle would break a summary that parsed the whole log (it is never read).
    (run / "events.jsonl").write_bytes(head + b"\n" + b"x" * (2 * 1024 * 1024) + b"\n" + rest)
    summary = run_summary.summarize_run(run)
    assert summary.status == "finished" and summary.step == 60
    assert summary.best_val_loss is not None and summary.started is not None


def test_newest_run(runs_root: Path, tmp_path: Path) -> None:
    newest = max(NAMES, key=lambda n: json.loads((FIXTURES / n / "events.jsonl").open().readline())["t"])
    assert run_summary.newest_run(runs_root) == runs_root / newest
    assert run_summary.newest_run(tmp_path / "missing") is None
    assert run_summary.list_runs(tmp_path / "missing") == []


def test_loss_curve_is_downsampled_but_keeps_extremes() -> None:
    run = FIXTURES / "lm_completed"
    xs, ys = run_summary.loss_curve(run)
    assert xs == list(range(1, 61)) and len(ys) == 60
    small_xs, small_ys = run_summary.loss_curve(run, max_points=10)
    assert len(small_xs) <= 10
    assert max(small_ys) == max(ys) and min(small_ys) == min(ys)
    assert run_summary.loss_curve(FIXTURES / "nowhere") == ([], [])


def test_default_runs_root_prefers_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    repo_runs = Path(run_summary.__file__).resolve().parent.parent / "runs"
    assert run_summary.default_runs_root() == repo_runs
    (tmp_path / "runs").mkdir()
    assert run_summary.default_runs_root() == tmp_path / "runs"
    assert os.getcwd() == str(tmp_path)


def test_loss_curve_reads_only_what_was_appended(tmp_path: Path) -> None:
    run = tmp_path / "grow"
    shutil.copytree(FIXTURES / "lm_completed", run)
    log = run / "events.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    steps = [line for line in lines if b'"type":"step"' in line]
    log.write_bytes(b"".join(lines[: len(lines) // 2]))
    first_xs, _ = run_summary.loss_curve(run)
    read_before = run_summary._curve_cache[(log.absolute(), 500)][2]
    assert read_before == log.stat().st_size and first_xs
    with open(log, "ab") as handle:
        handle.write(b"".join(lines[len(lines) // 2 :]))
    xs, ys = run_summary.loss_curve(run)
    assert (xs, ys) == run_summary.loss_curve(FIXTURES / "lm_completed")  # the same curve as one full read
    assert xs[: len(first_xs)] == first_xs and len(xs) > len(first_xs)
    log.write_bytes(b"".join(steps[:3]))  # rewritten in place, shorter: read again from the start
    (tmp_path / "fresh").mkdir()
    (tmp_path / "fresh" / "events.jsonl").write_bytes(b"".join(steps[:3]))
    assert run_summary.loss_curve(run) == run_summary.loss_curve(tmp_path / "fresh") != ([], [])
