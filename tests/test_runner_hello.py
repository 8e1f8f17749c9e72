"""The liveness check's hello lookup reads only what was appended since its last call, and stays correct."""

from __future__ import annotations

import json
from pathlib import Path

from vega_tui import runner


def hello(pid: int) -> str:
    return json.dumps({"v": 1, "seq": 0, "t": 1.0, "type": "hello", "pid": pid, "host": "h"}) + "\n"


def step(n: int) -> str:
    return json.dumps({"v": 1, "seq": n, "t": 1.0, "type": "step", "step": n, "pad": "x" * 200}) + "\n"


def test_newest_hello_follows_a_growing_log_and_a_replaced_one(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text(hello(1) + "".join(step(n) for n in range(2000)))  # ~500 KB: hello far behind the tail
    assert runner._last_hello(tmp_path)["pid"] == 1
    with events.open("a") as f:
        f.write("".join(step(n) for n in range(50)))
    assert runner._last_hello(tmp_path)["pid"] == 1  # nothing new: the remembered hello
    line = hello(2)
    with events.open("a") as f:
        f.write(line[:30])  # a resumed trainer's hello, half-written at the moment of the check
    assert runner._last_hello(tmp_path)["pid"] == 1
    with events.open("a") as f:
        f.write(line[30:] + step(1))
    assert runner._last_hello(tmp_path)["pid"] == 2  # read whole once complete
    replacement = tmp_path / "new.jsonl"
    replacement.write_text(hello(3))
    replacement.replace(events)  # a different file at the same path: scanned from scratch
    assert runner._last_hello(tmp_path)["pid"] == 3
