"""The liveness check's hello lookup reads only what was appended since its last call, and stays correct."""

from __future__ import annotations

import json
from pathlib import Path

from vega_tui import runner_tail


def hello(pid: int) -> str:
    return json.dumps({"v": 1, "seq": 0, "t": 1.0, "type": "hello", "pid": pid, "host": "h"}) + "\n"


def step(n: int) -> str:
    return json.dumps({"v": 1, "seq": n, "t": 1.0, "type": "step", "step": n, "pad": "x" * 200}) + "\n"


def test_newest_hello_follows_a_growing_log_and_a_replaced_one(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text(hello(1) + "".join(step(n) for n in range(2000)))  # ~500 KB: hello far behind the tail
    assert runner_tail.last_hello(tmp_path)["pid"] == 1
    with events.open("a") as f:
        f.write("".join(step(n) for n in range(50)))
    assert runner_tail.last_hello(tmp_path)["pid"] == 1  # nothing new: the remembered hello
    line = hello(2)
    with events.open("a") as f:
        f.write(line[:30])  # a resumed trainer's hello, half-written at the moment of the check
    assert runner_tail.last_hello(tmp_path)["pid"] == 1
    with events.open("a") as f:
        f.write(line[30:] + step(1))
    assert runner_tail.last_hello(tmp_path)["pid"] == 2  # read whole once complete
    replacement = tmp_path / "new.jsonl"
    replacement.write_text(hello(3))
    replacement.replace(events)  # a different file at the same path: scanned from scratch
    assert runner_tail.last_hello(tmp_path)["pid"] == 3


def naive_newest(path: Path, types: tuple[str, ...]) -> dict | None:
    """The reference: every line parsed, the last one of `types` wins."""
    found = None
    for line in path.read_bytes().split(b"\n"):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("type") in types:
            found = event
    return found


def test_backward_search_in_small_windows_finds_the_same_events(tmp_path: Path, monkeypatch) -> None:
    """Windows far smaller than a line, or holding many: lines cut at every boundary, decoys in messages."""
    decoy = json.dumps({"v": 1, "seq": 5, "t": 1.0, "type": "log", "message": 'said "hello" and "finished"'})
    finished = json.dumps({"v": 1, "seq": 9, "t": 2.0, "type": "finished", "status": "completed", "step": 3})
    lines = [
        hello(1),
        *(step(n) for n in range(40)),
        hello(2),
        decoy + "\n",
        *(step(n) for n in range(30)),
        finished + "\n",
        decoy + "\n",
        step(99),
    ]
    events = tmp_path / "events.jsonl"
    events.write_text("".join(lines))
    for window in (7, 100, 250, 1000, 4096, 1 << 20):
        monkeypatch.setattr(runner_tail, "SCAN_WINDOW", window)
        for types in (("hello",), ("hello", "finished"), ("finished",), ("calibration",)):
            assert runner_tail._newest_event(events, types) == naive_newest(events, types), (window, types)
    monkeypatch.setattr(runner_tail, "SCAN_WINDOW", 100)
    runner_tail._scan_cache.clear()
    assert runner_tail.last_lifecycle_event(tmp_path)["type"] == "finished"
    with events.open("a") as f:
        f.write(hello(3))  # a resume after the end: found by reading only the appended bytes
    assert runner_tail.last_lifecycle_event(tmp_path)["pid"] == 3 and runner_tail.last_hello(tmp_path)["pid"] == 3
