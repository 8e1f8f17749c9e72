"""vega_tui.store: bounded series, run state from real recorded event logs, bounded memory on huge logs."""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
import tracemalloc
from itertools import pairwise
from pathlib import Path

import pytest

from trainer_core.contract.event_lines import parse_event
from trainer_core.contract.eventlog import EventReader, read_all
from trainer_core.contract.protocol import Event, StepEvent
from vega_tui.run_state import Series
from vega_tui.store import RunStore

FIXTURES = Path(__file__).parent / "fixtures" / "events"


def replay(name: str, **options: int) -> RunStore:
    store = RunStore(run_dir=FIXTURES / name, **options)
    store.apply(read_all(FIXTURES / name / "events.jsonl"))
    return store


def event(kind: str, seq: int = 0, t: float = 1000.0, **fields: object) -> Event:
    return parse_event({"v": 1, "seq": seq, "t": t, "type": kind, **fields})


def step_event(step: int, loss: float | None, seq: int = 0, **fields: object) -> Event:
    base = {
        "step": step,
        "epoch": 0,
        "loss": loss,
        "lr": 1e-3,
        "samples_per_s": 100.0,
        "data_wait_frac": 0.0,
        "micro_batch": 8,
        "step_series": [step],
        "loss_series": [loss],
        "lr_series": [1e-3],
    }
    return event("step", seq=seq, t=1000.0 + step, **{**base, **fields})


# ---------------------------------------------------------------------------------------------------------------
# Series


def test_series_keeps_every_point_until_full() -> None:
    series = Series(max_points=10)
    for x in range(8):
        series.append(x, float(x * x))
    assert series.xs == list(range(8))
    assert series.ys == [float(x * x) for x in range(8)]
    assert (series.last, series.last_x, series.min, series.max, len(series)) == (49.0, 7, 0.0, 49.0, 8)


def test_series_is_bounded_and_keeps_spikes_after_100x_more_points() -> None:
    rng = random.Random(3)
    series = Series(max_points=200)
    for x in range(200):
        series.append(x, 1.0 + rng.random())
    series.append(200, 50.0)  # one spike up
    series.append(201, -7.0)  # one spike down
    for x in range(202, 202 + 100 * 200):
        series.append(x, 1.0 + rng.random())
        assert len(series) <= 200
    assert max(series.ys) == 50.0 and series.xs[series.ys.index(50.0)] == 200
    assert min(series.ys) == -7.0 and series.xs[series.ys.index(-7.0)] == 201
    assert (series.max, series.min) == (50.0, -7.0)
    assert series.xs == sorted(series.xs)  # still in step order
    assert series.xs[-1] >= 202 + 100 * 200 - 200  # the recent end is there


def test_series_skips_non_finite_values_and_reports_empty() -> None:
    series = Series(max_points=8)
    assert (series.last, series.min, series.max, len(series)) == (None, None, None, 0)
    assert not series.append(1, None)
    assert not series.append(2, math.nan)
    assert not series.append(3, math.inf)
    assert series.append(4, 2.5)
    assert (series.xs, series.ys) == ([4], [2.5])
    with pytest.raises(ValueError, match="at least 4"):
        Series(max_points=2)


# ---------------------------------------------------------------------------------------------------------------
# Replaying recorded runs


def test_completed_run_replays_to_its_final_state() -> None:
    state = replay("lm_completed").state
    session = json.loads((FIXTURES / "lm_completed" / "session.json").read_text())
    assert state.status == "finished"
    assert state.name == "lm_completed"
    assert (state.step, state.total_steps) == (60, 60)
    assert state.finished is not None and state.finished["status"] == "completed"
    assert state.device == "cpu" and state.precision == "fp32" and state.data_mode == "text"
    assert state.pid is not None and state.profile_path and state.profile_path.endswith("lm-small.toml")
    # Every training step is on the loss chart (the step events carry per-step series).
    assert state.series["loss"].xs == list(range(1, 61))
    assert state.series["loss"].last == pytest.approx(session["summary"]["final_loss"])
    assert len(state.series["loss_smooth"]) == 60
    assert state.series["val_loss"].xs == [20, 40, 60]
    assert state.series["lr"].max == pytest.approx(6e-4)
    assert "part:ce" in state.series
    assert state.best_val_loss == pytest.approx(session["summary"]["best_val_loss"])
    assert state.breakdown is not None and set(state.breakdown) == {
        "data",
        "transfer",
        "forward",
        "backward",
        "optimizer",
    }
    assert state.elapsed_s == pytest.approx(state.finished["seconds"])
    assert state.eta_s is None


def test_checkpoints_table_marks_only_the_best() -> None:
    state = replay("lm_completed").state
    assert sorted(state.checkpoints) == [20, 40, 60]
    assert [row.step for row in state.checkpoints.values() if row.best] == [60]
    row = state.checkpoints[60]
    assert row.path.endswith("step-00000060.pt") and row.bytes and row.bytes > 0 and row.val_loss is not None
    # A checkpoint saved twice at one step (periodic + best) is one row and one marker.
    kinds = [(m.kind, m.step) for m in state.markers]
    assert kinds.count(("checkpoint", 20)) == 1
    assert ("best", 60) in kinds


def test_samples_and_notable_log_lines() -> None:
    state = replay("lm_completed").state
    assert [(s.step, s.kind) for s in state.samples] == [(20, "text"), (40, "text"), (60, "text")]
    assert state.samples[0].text and "prompt" in state.samples[0].text
    kinds = {line.kind for line in state.logs}
    assert {"hello", "device_selected", "data_scan", "checkpoint_saved", "validation", "finished", "log"} <= kinds
    assert state.logs[-1].kind == "finished" and "completed" in state.logs[-1].message


def test_faults_run_has_oom_and_nonfinite_markers() -> None:
    state = replay("lm_faults").state
    markers = {(m.kind, m.step) for m in state.markers}
    assert {("oom", 10), ("nonfinite", 15), ("checkpoint", 15), ("best", 30)} <= markers
    assert state.micro_batch == 8  # halved by the OOM recovery
    warnings = [line for line in state.logs if line.level == "warning"]
    assert any(line.kind == "oom_recovered" for line in warnings)
    assert any(line.kind == "nonfinite" for line in warnings)
    # The skipped step is retried under the same number: one finite loss per step number on the chart.
    assert state.series["loss"].xs == list(range(1, 31))
    assert all(math.isfinite(y) for y in state.series["loss"].ys)
    assert state.status == "finished"


def test_stopped_run_walks_through_pause_evaluate_resume_stop() -> None:
    store = RunStore()
    statuses = []
    for item in read_all(FIXTURES / "lm_stopped" / "events.jsonl"):
        store.apply([item])
        if not statuses or statuses[-1] != store.state.status:
            statuses.append(store.state.status)
    assert statuses == ["starting", "training", "paused", "evaluating", "paused", "training", "stopped"]
    state = store.state
    assert state.last_ack is not None and state.last_ack["cmd"] == "save"
    assert state.finished is not None and state.finished["status"] == "stopped"
    assert state.paused_s > 0
    assert {line.kind for line in state.logs} >= {"paused", "resumed", "command_ack"}


def test_failed_run_keeps_the_error() -> None:
    state = replay("lm_failed").state
    assert state.status == "failed"
    assert state.last_error is not None and "injected failure at step 10" in state.last_error
    assert any(line.level == "error" and line.kind == "error" for line in state.logs)
    assert state.step == 9


def test_killed_run_stays_training_until_marked_crashed() -> None:
    store = replay("lm_killed")
    state = store.state
    assert state.status == "training" and state.finished is None and state.eta_s is not None
    assert state.total_steps is not None and state.total_steps > 1000  # estimated from the ETA
    version = state.version
    store.mark_crashed(["line one", "Killed"])
    assert state.status == "crashed" and state.crash_log == ["line one", "Killed"]
    assert [line.message for line in list(state.logs)[-2:]] == ["line one", "Killed"]
    assert state.version > version
    store.mark_crashed(["line one", "Killed"])  # repeated: no duplicate lines
    assert sum(1 for line in state.logs if line.message == "Killed") == 1


def test_mark_crashed_does_not_override_a_finished_run() -> None:
    store = replay("lm_completed")
    store.mark_crashed(["ignored"])
    assert store.state.status == "finished" and store.state.crash_log == []


def test_resume_in_the_same_folder_starts_a_new_life() -> None:
    store = replay("lm_stopped")
    store.apply(
        [
            event(
                "hello",
                seq=100,
                t=2e9,
                trainer_version="0",
                pid=4242,
                host="h",
                profile_hash="x",
                run_dir="/tmp/x",
                python="3.11",
                resumed=True,
            )
        ]
    )
    assert store.state.status == "starting" and store.state.finished is None and store.state.resumed
    store.apply([step_event(23, 4.0, seq=101)])
    assert store.state.status == "training" and store.state.pid == 4242


def test_preloading_then_training() -> None:
    store = RunStore()
    store.apply([event("preload_progress", done=3, total=10, stage="decode")])
    assert store.state.status == "preloading" and store.state.preload == (3, 10)
    store.apply([event("preload_done", items=10, seconds=1.5, where="ram", bytes=2048)])
    assert store.state.preload == (10, 10)
    store.apply([step_event(1, 3.0)])
    assert store.state.status == "training"


def test_ema_is_smoother_than_the_raw_loss() -> None:
    rng = random.Random(0)
    store = RunStore()
    store.apply([step_event(i, 2.0 + rng.uniform(-0.5, 0.5), seq=i) for i in range(1, 301)])
    raw, smooth = store.state.series["loss"].ys, store.state.series["loss_smooth"].ys
    assert smooth[0] == raw[0]  # bias-corrected: no pull towards zero at the start

    def roughness(ys: list[float]) -> float:
        return sum(abs(b - a) for a, b in pairwise(ys))

    assert roughness(smooth) < roughness(raw) / 5
    assert smooth[-1] == pytest.approx(2.0, abs=0.2)


def test_unknown_types_and_fields_are_counted_not_fatal() -> None:
    store = RunStore()
    assert store.apply([event("hologram", seq=0, shimmer=1)])  # a newer trainer's event type
    assert store.state.unknown_events == 1
    store.apply([step_event(1, 2.0, seq=1, quantum_flux=0.5)])
    assert store.state.unknown_fields == 1 and store.state.step == 1


def test_malformed_lines_and_gaps_are_counted(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    lines = (FIXTURES / "lm_completed" / "events.jsonl").read_text().splitlines()
    del lines[10]  # a lost line: a seq gap
    lines[20:20] = ["{not json", '{"v": 1, "seq": "x"}']
    log.write_text("\n".join(lines) + '\n{"v":1,"seq":99,"t":1', encoding="utf-8")  # cut last line
    reader = EventReader(log)
    store = RunStore()
    store.apply(reader.read_to_end())
    store.note_reader(reader.malformed, reader.gaps)
    assert store.state.malformed_lines == 3 and store.state.seq_gaps >= 1
    assert any("malformed" in line.message for line in store.state.logs)
    assert store.state.status == "finished"


def test_apply_reports_change_and_bumps_version() -> None:
    store = RunStore()
    assert store.apply([]) is False and store.state.version == 0
    assert store.apply([step_event(1, 2.0)]) is True and store.state.version == 1


def test_logs_are_a_bounded_ring() -> None:
    store = RunStore(max_logs=50)
    store.apply([event("log", seq=i, message=f"line {i}") for i in range(1000)])
    assert len(store.state.logs) == 50
    assert store.state.logs[-1].message == "line 999" and store.state.logs[0].message == "line 950"


# ---------------------------------------------------------------------------------------------------------------
# Bounded memory on huge logs


def deep_size(obj: object, seen: set[int] | None = None) -> int:
    """Bytes held by an object graph (containers, dataclasses, slots), each object counted once."""
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, type):
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        return size + sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    if isinstance(obj, (list, tuple, set, frozenset)) or type(obj).__name__ == "deque":
        return size + sum(deep_size(item, seen) for item in obj)
    if hasattr(obj, "__dict__"):
        size += deep_size(vars(obj), seen)
    for slot in getattr(type(obj), "__slots__", ()):
        size += deep_size(getattr(obj, slot, None), seen)
    return size


def step_line(i: int, rng: random.Random, loss: float | None = None) -> str:
    loss = 3.0 - i * 1e-6 + rng.random() * 0.1 if loss is None else loss
    return json.dumps(
        {
            "v": 1,
            "seq": i,
            "t": 1.7e9 + i * 0.01,
            "type": "step",
            "step": i,
            "epoch": i // 10000,
            "loss": loss,
            "losses": {"total": loss, "ce": loss},
            "lr": 1e-3,
            "samples_per_s": 100.0 + rng.random(),
            "data_wait_frac": 0.01,
            "micro_batch": 16,
            "mem_device_bytes": 2**30 + i,
            "eta_s": 10.0,
            "step_series": [i],
            "loss_series": [loss],
            "lr_series": [1e-3],
        },
        separators=(",", ":"),
    )


# Lines in the file-based test; VEGA_STORE_LINES=1000000 runs the full million through the parser (slow).
FILE_TEST_LINES = int(os.environ.get("VEGA_STORE_LINES", "50000"))


def test_huge_log_file_is_followed_in_bounded_memory(tmp_path: Path) -> None:
    """Real JSON lines (about 370 bytes each) read in 256 KB slices through EventReader and applied."""
    lines = FILE_TEST_LINES
    rng = random.Random(1)
    log = tmp_path / "events.jsonl"
    with open(log, "w", encoding="utf-8") as handle:
        for i in range(lines):
            if i == lines // 3:
                handle.write(step_line(i, rng, loss=1e3) + "\n")  # one spike
            elif i % 10_000 == 7:
                handle.write(json.dumps({"v": 1, "seq": i, "t": 1.7e9, "type": "log", "message": "hi"}) + "\n")
            else:
                handle.write(step_line(i, rng) + "\n")
    reader = EventReader(log, max_bytes_per_poll=256 * 1024)
    store = RunStore(max_points=500, max_logs=100)
    started = time.perf_counter()
    tracemalloc.start()
    try:
        while True:
            batch = reader.poll()
            store.apply(batch)
            if reader.pending_bytes == 0:
                break
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    elapsed = time.perf_counter() - started
    state = store.state
    print(
        f"\n{lines} lines ({log.stat().st_size / 1e6:.0f} MB) followed and applied in {elapsed:.1f} s; "
        f"tracemalloc peak {peak / 1e6:.1f} MB"
    )
    assert state.events_seen == lines and state.step == lines - 1
    assert all(len(series) <= 500 for series in state.series.values())
    assert len(state.logs) <= 100
    assert state.series["loss"].max == 1e3 and 1e3 in state.series["loss"].ys  # the spike survived
    # Memory follows the slice size and the store's bounds, not the size of the log.
    assert peak < min(12e6, log.stat().st_size / 2)
    assert deep_size(state) < 2e6


def test_one_million_events_keep_the_store_bounded() -> None:
    """1,000,000 step events (parsed once into a reusable pool, then renumbered) applied in batches of 5000."""
    pool = [parse_event(step_line(i, random.Random(i))) for i in range(5000)]
    assert all(isinstance(item, StepEvent) for item in pool)
    store = RunStore(max_points=2000, max_logs=5000)
    sizes = {}
    started = time.perf_counter()
    for first in range(0, 1_000_000, len(pool)):
        for offset, item in enumerate(pool):
            i = first + offset
            loss = 1e4 if i == 654_321 else 3.0 - i * 1e-6 + (offset % 7) * 0.01
            # Renumber in place (plain field storage: the values are already valid, skip re-validation).
            vars(item).update(seq=i, step=i, t=1.7e9 + i, loss=loss, step_series=[i], loss_series=[loss])
        store.apply(pool)
        if first + len(pool) in (100_000, 1_000_000):
            sizes[first + len(pool)] = deep_size(store.state)
    elapsed = time.perf_counter() - started
    state = store.state
    print(
        f"\n1,000,000 events applied in {elapsed:.1f} s ({elapsed:.1f} us per event); store "
        f"{sizes[100_000] / 1e3:.0f} KB after 100k, {sizes[1_000_000] / 1e3:.0f} KB after 1M"
    )
    assert state.events_seen == 1_000_000 and state.step == 999_999
    assert all(len(series) <= 2000 for series in state.series.values())
    assert state.series["loss"].max == 1e4 and 1e4 in state.series["loss"].ys
    # No growth with the number of events (buckets fill and merge, so the size wobbles within 2x).
    assert sizes[1_000_000] < 2 * sizes[100_000]
    assert sizes[1_000_000] < 3e6
