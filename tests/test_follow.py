"""vega_tui.follow.EventFollower: a real thread following a file that another thread appends to."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from trainer_core.contract.protocol import Event
from vega_tui.follow import EventFollower
from vega_tui.store import RunStore

FIXTURES = Path(__file__).parent / "fixtures" / "events"


class Collector:
    """Thread-safe sink for on_batch calls."""

    def __init__(self) -> None:
        self.batches: list[list[Event]] = []
        self.counters: list[tuple[int, int]] = []
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)

    def __call__(self, events: list[Event], malformed: int, gaps: int) -> None:
        with self.changed:
            self.batches.append(list(events))
            self.counters.append((malformed, gaps))
            self.changed.notify_all()

    @property
    def events(self) -> list[Event]:
        with self.lock:
            return [event for batch in self.batches for event in batch]

    def wait_for(self, count: int, timeout: float = 20.0) -> list[Event]:
        deadline = time.monotonic() + timeout
        with self.changed:
            while sum(len(b) for b in self.batches) < count and time.monotonic() < deadline:
                self.changed.wait(0.1)
        return self.events


def line(seq: int) -> bytes:
    return (json.dumps({"v": 1, "seq": seq, "t": 1.0 + seq, "type": "log", "message": f"m{seq}"}) + "\n").encode()


def test_follows_a_file_written_in_chunks_with_partial_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    total = 600
    data = b"".join(line(i) for i in range(total))
    sink = Collector()
    follower = EventFollower(path, sink, poll_interval=0.01)  # started before the file exists

    def writer() -> None:
        with open(path, "ab", buffering=0) as handle:
            for start in range(0, len(data), 997):  # chunk edges fall inside lines
                handle.write(data[start : start + 997])
                time.sleep(0.002)

    thread = threading.Thread(target=writer)
    thread.start()
    thread.join()
    events = sink.wait_for(total)
    follower.stop()
    follower.join(5)
    assert not follower.alive
    assert [e.seq for e in events] == list(range(total))
    assert [e.message for e in events[:3]] == ["m0", "m1", "m2"]
    assert sink.counters[-1] == (0, 0)  # no line was ever seen cut in half
    assert len(sink.batches) < total  # batched, not one call per event
    assert all(sink.batches)


def test_existing_log_is_delivered_in_batches_of_at_most_max_batch(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(line(i) for i in range(12_000)))
    sink = Collector()
    follower = EventFollower(path, sink, max_batch=5000)
    events = sink.wait_for(12_000)
    assert follower.wait_caught_up(10)
    follower.close()
    assert len(events) == 12_000
    assert all(0 < len(batch) <= 5000 for batch in sink.batches)
    assert len(sink.batches) <= 6


def test_malformed_lines_and_gaps_reach_the_callback(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(line(0) + b"garbage\n" + line(1) + line(5))
    sink = Collector()
    follower = EventFollower(path, sink)
    sink.wait_for(3)
    follower.close()
    assert sink.counters[-1] == (1, 1)


def test_a_replayed_run_feeds_the_store(tmp_path: Path) -> None:
    store = RunStore()
    lock = threading.Lock()

    def on_batch(events: list[Event], malformed: int, gaps: int) -> None:
        with lock:
            store.apply(events)
            store.note_reader(malformed, gaps)

    follower = EventFollower(FIXTURES / "lm_completed" / "events.jsonl", on_batch)
    assert follower.wait_caught_up(10)
    follower.close()
    assert store.state.status == "finished" and store.state.step == 60


def test_stop_ends_the_thread_promptly_even_with_a_long_poll_interval(tmp_path: Path) -> None:
    sink = Collector()
    follower = EventFollower(tmp_path / "events.jsonl", sink, poll_interval=60)
    assert follower.wait_caught_up(5)
    follower.stop()
    follower.join(5)
    assert not follower.alive
    assert sink.batches == []  # nothing to read, nothing delivered


def test_autostart_false_waits_for_start(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(line(0))
    sink = Collector()
    follower = EventFollower(path, sink, autostart=False)
    assert not follower.alive
    follower.start()
    follower.start()  # idempotent
    assert len(sink.wait_for(1)) == 1
    follower.close()


def test_a_failing_callback_ends_the_thread_and_keeps_the_error(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(line(0))

    def broken(events: list[Event], malformed: int, gaps: int) -> None:
        raise RuntimeError("screen closed")

    follower = EventFollower(path, broken)
    follower.join(5)
    assert not follower.alive
    assert isinstance(follower.error, RuntimeError)
