"""What the runs screen does to run folders, without the screen: notes and tags, disk use, the
trash (a live run refused), validation and free-running curves, and the frozen-profile diff.

Run folders are copies of runs recorded from the real trainer (tests/fixtures/events).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from trainer_core.contract.errors import VegaError
from vega_tui import run_trash
from vega_tui.run_compare import MISSING, compare_runs, profile_diff, read_curves
from vega_tui.run_notes import RunNotes, parse_tags, read_notes, read_tags, write_notes

FIXTURES = Path(__file__).parent / "fixtures" / "events"


def copy_run(name: str, root: Path, as_name: str | None = None) -> Path:
    target = root / (as_name or name)
    shutil.copytree(FIXTURES / name, target)
    return target


def test_notes_and_tags_round_trip_and_bad_files_are_reported(tmp_path: Path) -> None:
    run = copy_run("lm_completed", tmp_path)
    assert read_notes(run) == RunNotes("", [], None)
    write_notes(run, "first try\n\n", ["a", "b", "a"])
    assert (run / "notes.md").read_text() == "first try\n"
    assert read_notes(run).tags == ["a", "b"]
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]  # renamed, none left
    write_notes(run, "  ", [])  # nothing left to keep: both files removed
    assert not (run / "notes.md").exists() and not (run / "tags.json").exists()
    (run / "tags.json").write_text('{"tags": "not a list"}')
    assert read_tags(run) == ([], 'tags.json: expected {"tags": ["name", ...]}')
    (run / "tags.json").write_text("{cut")
    assert read_tags(run)[1] is not None and read_tags(run)[1].startswith("tags.json: ")
    assert parse_tags(" x,y  z,,x ") == ["x", "y", "z"]
    with pytest.raises(VegaError, match="is not a run folder"):
        write_notes(tmp_path / "nowhere", "n", [])


def test_folder_bytes_counts_checkpoints_and_not_what_links_point_to(tmp_path: Path) -> None:
    run = copy_run("lm_completed", tmp_path)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "step-00000060.pt").write_bytes(b"\0" * 50_000)
    expected = sum(p.stat().st_size for p in run.rglob("*") if p.is_file())
    (run / "elsewhere").symlink_to(FIXTURES / "vits_completed")
    assert run_trash.folder_bytes(run) == expected + (run / "elsewhere").lstat().st_size


def test_trash_moves_finished_runs_refuses_live_ones_and_empties(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    done = copy_run("lm_completed", root)
    size = run_trash.folder_bytes(done)
    first = run_trash.move_to_trash(done, root, now=1.8e9)
    same_name = copy_run("lm_completed", root)
    again = run_trash.move_to_trash(same_name, root, now=1.8e9)  # in the same second
    assert first.parent == again.parent == root / ".trash" and again.name == first.name + "-2"
    assert run_trash.trash_contents(root) == (2, 2 * size)
    # Killed, yet its log was written a moment ago: a trainer may be starting; never moved.
    fresh = copy_run("lm_killed", root)
    log = fresh / "events.jsonl"
    here = f'"host":"{os.uname().nodename}"'  # recorded on "vm": made this machine's
    log.write_text(log.read_text().replace('"host":"vm"', here))
    assert run_trash.runner.run_status(fresh) == "crashed"
    old = time.time() - 3600
    os.utime(fresh, (old, old))
    with pytest.raises(run_trash.RunIsLive, match=r"lm_killed is live: it was written \d+ s ago"):
        run_trash.move_to_trash(fresh, root)
    os.utime(log, (old, old))
    assert run_trash.live_reason(fresh) is None
    (fresh / "notes.md").write_text("dead")  # the folder changes, its log does not: still movable
    assert run_trash.live_reason(fresh) is None
    log.unlink()  # a folder just made, no log yet (a trainer before its first event): not moved
    assert re.fullmatch(
        r"it was written \d+ s ago \(a trainer may be starting, or run elsewhere\)",
        run_trash.live_reason(fresh) or "",
    )
    with pytest.raises(VegaError, match="not a run folder directly under"):
        run_trash.move_to_trash(FIXTURES / "lm_stopped", root)
    with pytest.raises(VegaError, match="not a run folder directly under"):
        run_trash.move_to_trash(root / ".trash", root)
    assert run_trash.empty_trash(root) == (2 * size, [])
    assert run_trash.trash_contents(root) == (0, 0) and fresh.is_dir()
    assert run_trash.empty_trash(tmp_path / "no-root") == (0, [])


def test_curves_skip_bad_lines_and_read_a_last_line_without_newline(tmp_path: Path) -> None:
    run = copy_run("vits_completed", tmp_path)
    events = [json.loads(line) for line in (run / "events.jsonl").open()]
    validation = [(e["step"], e["loss"]) for e in events if e["type"] == "validation"]
    free = [(e["step"], e["distance"]) for e in events if e["type"] == "free_running"]
    text = (run / "events.jsonl").read_text().rstrip("\n")
    bad = '{"type":"validation","step":1,"loss":NaN}\n{"type":"validation", cut\n'
    (run / "events.jsonl").write_text(bad + text)
    curves = read_curves(run)
    assert list(zip(*curves.validation, strict=True)) == validation and len(validation) == 3
    assert list(zip(*curves.free_running, strict=True)) == free and len(free) == 2


def test_profile_diff_shows_only_differing_keys_and_missing_ones(tmp_path: Path) -> None:
    diff = profile_diff(
        [
            {"train": {"lr": 1, "steps": 5}, "run": {"name": "a"}},
            {
                "train": {"lr": 1.0, "steps": 5},
                "run": {"name": "a"},
                "vits": {"flow": {"layers": 4}},
            },
            None,
        ]
    )
    assert diff == {"train.lr": ["1", "1.0", MISSING], "vits.flow.layers": [MISSING, "4", MISSING]}
    two = [copy_run("lm_completed", tmp_path), copy_run("lm_stopped", tmp_path)]
    comparison = compare_runs(two)
    assert comparison.diff == {
        "train.checkpoint_every_steps": ["20", "100000"],
        "train.eval_every_steps": ["20", "100000"],
        "train.max_steps": ["60", "100000"],
    }
    assert comparison.problems == [] and comparison.names == ["lm_completed", "lm_stopped"]
    assert comparison.profiles_read == 2
