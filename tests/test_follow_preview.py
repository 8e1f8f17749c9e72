"""Opening a big event log in two stages: a preview (head, sampled middle, tail), then the exact history,
read by a child process (vega_tui/history_worker.py) or, when that fails, in the follower thread.

The logs are written by the real `EventWriter`; the preview plan is shrunk so that a ~2 MB log counts as big.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainer_core.contract.eventlog import EventWriter, follow_from, parse_lines, read_all
from trainer_core.contract.protocol import Event
from vega_tui.follow import EventFollower
from vega_tui.history_worker import EXIT_PARENT_GONE, PROGRESS, HistoryChild, HistoryFailed, HistoryRequest
from vega_tui.preview import PreviewPlan, read_preview, wants_preview
from vega_tui.run_state import RunState
from vega_tui.store import RunStore

STEPS = 4000
PLAN = PreviewPlan(min_bytes=256 * 1024, head_bytes=16 * 1024, tail_bytes=64 * 1024, samples=60)
MIDDLE_MARKER = "halfway through the run"
# What the first frame shows: the preview must agree with the exact history on every one of these.
LATEST_FIELDS = (
    "status",
    "step",
    "epoch",
    "total_steps",
    "planned_epochs",
    "loss",
    "lr",
    "grad_norm",
    "samples_per_s",
    "micro_batch",
    "device",
    "precision",
    "data_mode",
    "pid",
    "host",
    "world_size",
    "finished",
    "started_t",
    "elapsed_s",
    "val_loss",
    "best_val_loss",
    "best_step",
    "name",
)


def loss_at(step: int) -> float:
    return 2.0 + 3.0 / (1.0 + step * 0.01) + (0.5 if step == 1234 else 0.0)  # one spike mid-run


def step_event(step: int) -> dict[str, Any]:
    loss = loss_at(step)
    return {
        "type": "step",
        "step": step,
        "epoch": step // 1000,
        "loss": loss,
        "losses": {"total": loss, "ce": loss},
        "lr": 3e-4,
        "grad_norm": 0.8,
        "samples_per_s": 500.0 + step % 7,
        "data_wait_frac": 0.01,
        "micro_batch": 16,
        "eta_s": float(STEPS - step),
        "step_series": [step],
        "loss_series": [loss],
        "lr_series": [3e-4],
    }


def write_run(path: Path, steps: int = STEPS) -> None:
    """A finished run as the trainer writes it: start-up events, steps with periodic evaluation, the end."""
    run_dir = path.parent
    with EventWriter(path) as writer:
        writer.emit(
            {
                "type": "hello",
                "trainer_version": "test",
                "pid": 4_000_000,
                "host": os.uname().nodename,
                "profile_hash": "h",
                "run_dir": str(run_dir),
                "python": "3.11",
            }
        )
        writer.emit({"type": "resources", "cpu_cores": 2, "ram_total_bytes": 2**34, "ram_available_bytes": 2**33})
        writer.emit({"type": "device_selected", "mode": "cpu", "device": "cpu", "reason": "test", "precision": "fp32"})
        writer.emit({"type": "data_scan", "data_mode": "text", "reason": "test", "usable": 10, "skipped": 0})
        writer.emit(
            {"type": "calibration", "samples_per_s": 500.0, "planned_epochs": steps // 1000, "planned_steps": steps}
        )
        for step in range(1, steps + 1):
            if step % 1000 == 1:
                writer.emit({"type": "epoch_start", "epoch": step // 1000})
            writer.emit(step_event(step))
            if step == steps // 2:
                writer.emit({"type": "log", "level": "info", "message": MIDDLE_MARKER})
            if step % 500 == 0:
                val = loss_at(step) - 0.1
                ckpt = f"checkpoints/step_{step:08d}.pt"
                writer.emit({"type": "validation", "step": step, "epoch": step // 1000, "loss": val})
                writer.emit(
                    {
                        "type": "checkpoint_saved",
                        "step": step,
                        "epoch": step // 1000,
                        "path": ckpt,
                        "bytes": 1000,
                        "val_loss": val,
                        "seconds": 0.1,
                    }
                )
                writer.emit({"type": "best_model", "step": step, "path": ckpt, "val_loss": val})
        writer.emit(
            {
                "type": "finished",
                "status": "completed",
                "step": steps,
                "epoch": steps // 1000,
                "seconds": 123.0,
                "summary": {"best_val_loss": loss_at(steps) - 0.1},
            }
        )


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("preview") / "run" / "events.jsonl"
    path.parent.mkdir()
    write_run(path)
    assert path.stat().st_size > 4 * PLAN.min_bytes
    return path


def write_long_run(path: Path, steps: int) -> None:
    """A finished run with many step lines, written fast (plain json.dumps): the child takes ~1 s to read it."""
    write_run(path, steps=1)
    seq, t = len(path.read_bytes().splitlines()), time.time()
    with open(path, "a", encoding="utf-8") as handle:
        for step in range(2, steps + 1):
            handle.write(json.dumps({"v": 1, "seq": seq, "t": t + step, **step_event(step)}) + "\n")
            seq += 1


@pytest.fixture(scope="module")
def long_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("long") / "run" / "events.jsonl"
    path.parent.mkdir()
    write_long_run(path, 40_000)
    return path


def gone(pid: int) -> bool:
    """True when no process (zombies aside) has `pid`."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (FileNotFoundError, IndexError):
        return True


def exact_store(path: Path) -> RunStore:
    store = RunStore(run_dir=path.parent)
    store.apply(read_all(path))
    return store


def latest(state: RunState) -> dict[str, Any]:
    facts = {name: getattr(state, name) for name in LATEST_FIELDS}
    facts["last_checkpoint"] = max(state.checkpoints) if state.checkpoints else None
    facts["last_loss_point"] = state.series["loss"].points()[-1]
    facts["first_loss_point"] = state.series["loss"].points()[0]
    return facts


# ------------------------------------------------------------------------------------------------ the preview


def test_preview_reads_head_sample_and_tail_in_order(big_log: Path) -> None:
    preview = read_preview(big_log, PLAN)
    assert preview is not None
    assert preview.size == preview.end == big_log.stat().st_size and preview.malformed == 0
    kinds = [event.type for event in preview.events]
    assert kinds[0] == "hello" and kinds[-1] == "finished" and "calibration" in kinds
    seqs = [event.seq for event in preview.events]
    assert seqs == sorted(set(seqs))  # file order, no line twice
    total = len(read_all(big_log))
    assert len(seqs) < total / 10  # a preview, not the whole log
    middle = [event for event in preview.events if 100 < event.seq < total - 300]
    assert len(middle) >= PLAN.samples // 2 and {event.type for event in middle} <= {"step", "validation"}


def test_preview_store_shows_the_same_latest_state_as_the_exact_history(big_log: Path) -> None:
    preview = read_preview(big_log, PLAN)
    assert preview is not None
    store = RunStore(run_dir=big_log.parent)
    store.apply(preview.events)
    exact = exact_store(big_log)
    assert latest(store.state) == latest(exact.state)
    assert exact.state.status == "finished" and exact.state.step == STEPS
    # The sampled middle gives the loss chart its shape across the whole run.
    xs = store.state.series["loss"].xs
    assert xs == sorted(xs) and any(STEPS / 4 < x < 3 * STEPS / 4 for x in xs)


def test_small_logs_and_missing_files_are_not_previewed(tmp_path: Path, big_log: Path) -> None:
    assert wants_preview(big_log, PLAN) and not wants_preview(big_log, None)
    assert not wants_preview(tmp_path / "missing.jsonl", PLAN)
    assert read_preview(tmp_path / "missing.jsonl", PLAN) is None
    small = tmp_path / "events.jsonl"
    write_run(small, steps=20)
    assert not wants_preview(small, PLAN)


def test_follow_from_and_parse_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    write_run(path, steps=30)
    lines = path.read_bytes().splitlines(keepends=True)
    offset = sum(len(line) for line in lines[:10])
    reader = follow_from(path, offset)
    assert [event.seq for event in reader.read_to_end()] == list(range(10, len(lines)))
    events, bad = parse_lines([lines[3], b"not json", b"", lines[20]])
    assert [event.seq for event in events] == [3, 20] and bad == 1  # non-consecutive: no gap counted


# ------------------------------------------------------------------------------------------------ the follower


class Screen:
    """What a screen does with the follower's callbacks, applied in their order on one thread."""

    def __init__(
        self,
        path: Path,
        on_preview: Callable[[], None] = lambda: None,
        *,
        in_child: bool = True,
        on_progress: Callable[[EventFollower], None] = lambda follower: None,
    ) -> None:
        self.on_preview = on_preview
        self.inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.store: RunStore | None = None
        self.stores: list[tuple[bool, RunStore]] = []
        self.progress: list[float] = []
        self.follower = EventFollower(
            path,
            lambda events, bad, gaps: self.inbox.put(("batch", events)),
            poll_interval=0.02,
            preview=PLAN,
            on_store=self._on_store,
            on_progress=lambda fraction: (self.inbox.put(("progress", fraction)), on_progress(self.follower)),
            make_store=lambda: RunStore(run_dir=path.parent),
            max_bytes_per_poll=64 * 1024,
            **({} if in_child else {"history_worker": None}),
        )

    def _on_store(self, store: RunStore, exact: bool) -> None:
        self.inbox.put(("store", (store, exact)))
        if not exact:
            self.on_preview()  # on the follower thread, before it reads the history

    def drain(self) -> None:
        while not self.inbox.empty():
            kind, payload = self.inbox.get()
            if kind == "store":
                self.store = payload[0]
                self.stores.append((payload[1], payload[0]))
            elif kind == "progress":
                self.progress.append(payload)
            else:
                assert self.store is not None, "a batch before the preview"
                self.store.apply(payload)


def test_follower_hands_over_a_preview_then_the_exact_history(big_log: Path) -> None:
    switch = sys.getswitchinterval()
    screen = Screen(big_log)
    try:
        assert screen.follower.wait_history(30)
        screen.drain()
    finally:
        screen.follower.close()
    assert screen.follower.error is None
    assert sys.getswitchinterval() == switch  # the short GIL slices last only while the history is read
    (first_exact, preview), (last_exact, exact) = screen.stores[0], screen.stores[-1]
    assert (first_exact, last_exact, len(screen.stores)) == (False, True, 2)
    assert preview.state.history_progress == 0.0 and exact.state.history_progress is None
    assert latest(preview.state) == latest(exact.state)
    reference = exact_store(big_log).state
    assert exact.state.events_seen == reference.events_seen
    assert exact.state.series["loss"].points() == reference.series["loss"].points()
    assert [line.message for line in exact.state.logs] == [line.message for line in reference.logs]
    assert MIDDLE_MARKER in {line.message for line in exact.state.logs}
    assert MIDDLE_MARKER not in {line.message for line in preview.state.logs}
    assert sorted(exact.state.checkpoints) == list(range(500, STEPS + 1, 500))
    assert all(0.0 <= p <= 1.0 for p in screen.progress) and screen.progress == sorted(screen.progress)
    assert screen.follower.history_seconds is not None


def test_lines_appended_during_the_history_reach_the_exact_store_once(tmp_path: Path) -> None:
    path = tmp_path / "run" / "events.jsonl"
    path.parent.mkdir()
    write_run(path)
    finished = path.read_bytes().splitlines(keepends=True)[-1]
    # Drop the finished event: a live run that keeps writing while the dashboard reads its history.
    path.write_bytes(path.read_bytes()[: -len(finished)])
    writer = EventWriter.resume(path)

    def append_during_history() -> None:  # after the preview's end, before the history reads to the end
        for step in range(STEPS + 1, STEPS + 41):
            writer.emit(step_event(step))

    screen = Screen(path, append_during_history)
    try:
        assert screen.follower.wait_history(30)
        for step in range(STEPS + 41, STEPS + 61):  # after the swap: followed from where the history ended
            writer.emit(step_event(step))
        reference = exact_store(path)
        for _ in range(300):
            screen.drain()
            if screen.store is not None and screen.store.state.events_seen == reference.state.events_seen:
                break
            screen.follower.join(0.02)
    finally:
        writer.close()
        screen.follower.close()
    assert screen.stores[-1][0] is True and screen.store is screen.stores[-1][1]
    state = screen.store.state
    assert state.step == STEPS + 60 and state.seq_gaps == 0
    assert state.events_seen == reference.state.events_seen  # every line once, none twice
    assert state.series["loss"].points() == reference.state.series["loss"].points()


def test_no_preview_without_a_store_factory(big_log: Path) -> None:
    batches: list[list[Event]] = []
    follower = EventFollower(big_log, lambda events, bad, gaps: batches.append(events), preview=PLAN)
    try:
        assert follower.wait_caught_up(30) and follower.wait_history(0)
    finally:
        follower.close()
    assert sum(len(batch) for batch in batches) == len(read_all(big_log))


# ------------------------------------------------------------------------------------------------ the child process


def read_with(path: Path, in_child: bool, **options: Any) -> Screen:
    screen = Screen(path, in_child=in_child, **options)
    try:
        assert screen.follower.wait_history(60)
        screen.drain()
    finally:
        screen.follower.close()
    assert screen.follower.error is None
    return screen


def test_the_child_gives_the_same_exact_store_as_the_thread(big_log: Path) -> None:
    child, thread = read_with(big_log, True), read_with(big_log, False)
    assert child.follower.history_pid is not None and child.follower.history_error is None
    assert thread.follower.history_pid is None
    assert gone(child.follower.history_pid)  # reaped once it delivered
    (_, from_child), (_, from_thread) = child.stores[-1], thread.stores[-1]
    assert from_child is child.store and child.stores[-1][0] is True
    a, b = from_child.state, from_thread.state
    assert latest(a) == latest(b)
    assert (a.events_seen, a.malformed_lines, a.seq_gaps) == (b.events_seen, b.malformed_lines, b.seq_gaps)
    assert {name: s.points() for name, s in a.series.items()} == {name: s.points() for name, s in b.series.items()}
    assert list(a.logs) == list(b.logs) and a.checkpoints == b.checkpoints and a.markers == b.markers
    assert child.progress and all(0.0 <= p <= 1.0 for p in child.progress)


def test_a_killed_child_falls_back_to_reading_in_the_thread(long_log: Path) -> None:
    """A real crash (SIGKILL, as from the OOM killer) mid-read: the thread reads the history, the preview stays."""
    killed: list[int] = []

    def kill_child(follower: EventFollower) -> None:  # on the first progress, from the follower thread
        if not killed and follower.history_pid is not None:
            killed.append(follower.history_pid)
            os.kill(follower.history_pid, signal.SIGKILL)

    screen = read_with(long_log, True, on_progress=kill_child)
    assert killed and gone(killed[0])
    error = screen.follower.history_error
    assert error is not None and "killed by signal 9" in error and f"pid {killed[0]}" in error
    assert [exact for exact, _ in screen.stores] == [False, True]
    state = screen.store.state
    assert state.events_seen == len(read_all(long_log)) and state.step == 40_000 and state.status == "finished"
    warnings = [line.message for line in state.logs if line.kind == "dashboard"]
    assert warnings == [f"{error}; the history was read in the dashboard"]


def test_a_log_replaced_after_its_preview_fails_the_child_and_the_thread_reads_the_new_one(tmp_path: Path) -> None:
    path = tmp_path / "run" / "events.jsonl"
    path.parent.mkdir()
    write_run(path)
    replacement = tmp_path / "run" / "new.jsonl"
    write_run(replacement, steps=STEPS // 2)
    screen = read_with(path, True, on_preview=lambda: os.replace(replacement, path))
    error = screen.follower.history_error
    assert error is not None and "exit status 2" in error and "was replaced after its preview" in error
    exact = screen.stores[-1][1].state
    assert exact.step == STEPS // 2 and exact.events_seen == len(read_all(path))


def test_the_child_exits_when_its_parent_goes(long_log: Path) -> None:
    """The kernel closes the pipe of a dashboard that is killed; the child notices the EOF and exits at once."""
    preview = read_preview(long_log, PLAN)
    assert preview is not None
    request = HistoryRequest(str(long_log), preview.end, preview.identity, RunStore(), 64 * 1024, 0.02)
    child = HistoryChild(request)
    try:
        deadline = time.monotonic() + 30
        while not any(kind == PROGRESS for kind, _ in child.poll(0.1)):
            assert time.monotonic() < deadline, "no progress from the history worker"
        assert child.process.stdin is not None
        child.process.stdin.close()  # what the kernel does when the parent dies
        assert child.process.wait(10) == EXIT_PARENT_GONE  # not 0: it did not read on to the end
        with pytest.raises(HistoryFailed, match="exit status 3"):
            while True:
                child.poll(1)
    finally:
        child.close()


def test_a_worker_that_cannot_start_falls_back_to_the_thread(big_log: Path, tmp_path: Path) -> None:
    stores: list[tuple[RunStore, bool]] = []
    follower = EventFollower(
        big_log,
        lambda events, bad, gaps: None,
        preview=PLAN,
        on_store=lambda store, exact: stores.append((store, exact)),
        make_store=lambda: RunStore(run_dir=big_log.parent),
        history_worker=(str(tmp_path / "no-such-python"), "-m", "vega_tui.history_worker"),
    )
    try:
        assert follower.wait_history(30)
    finally:
        follower.close()
    assert follower.error is None and follower.history_pid is None
    assert follower.history_error is not None and "could not start" in follower.history_error
    assert [exact for _, exact in stores] == [False, True]
    assert stores[-1][0].state.events_seen == exact_store(big_log).state.events_seen
