"""A quick first look at a big event log: its head, a sample of its middle and its tail.

Parsing every line of a long run's events.jsonl takes tens of seconds (pydantic validation plus the
store, ~20 µs a line), far too long before the dashboard's first useful frame. A preview reads only:

- the head (`head_bytes`): hello, resources, device, data scan, calibration plan;
- `samples` single lines spread evenly through the middle, of which `step`
  and `validation` events are kept:
  enough points for the charts to have the right shape;
- the tail (`tail_bytes`): the latest steps, checkpoints, logs, status and the finished event.

Folded into a `RunStore` in file order, they give the real latest state at once; the
follower then reads the exact history in the background and swaps it in
(vega_tui/follow.py). Pure Python, no widgets.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from trainer_core.contract.eventlog import parse_lines
from trainer_core.contract.protocol import Event

# Event types taken from the sampled middle: series points. Others (pause, evaluate, best model)
# need their neighbours to make sense and wait for the exact history.
SAMPLE_TYPES = frozenset({"step", "validation"})
# Bytes read at each sample point: one line of a step event is ~400 bytes; more covers long windows.
SAMPLE_READ_BYTES = 16 * 1024


@dataclass(frozen=True)
class PreviewPlan:
    """When to preview (logs of at least `min_bytes`) and how much to read."""

    min_bytes: int = 4 * 1024 * 1024
    head_bytes: int = 64 * 1024
    tail_bytes: int = 512 * 1024
    samples: int = 800


DEFAULT_PLAN = PreviewPlan()


@dataclass
class Preview:
    """The events of a preview in file order; `end` is the byte after the last complete
    line of the tail, where following goes on; `size` and `identity` (st_dev, st_ino)
    describe the file when it was read."""

    events: list[Event] = field(default_factory=list)
    end: int = 0
    size: int = 0
    identity: tuple[int, int] = (0, 0)
    malformed: int = 0


def wants_preview(path: Path | str, plan: PreviewPlan | None) -> bool:
    """True when the log is big enough that reading it whole would keep the first frame waiting."""
    if plan is None:
        return False
    try:
        return os.stat(path).st_size >= plan.min_bytes
    except OSError:
        return False


def read_preview(path: Path | str, plan: PreviewPlan = DEFAULT_PLAN) -> Preview | None:
    """Head, sampled middle and tail of the log at `path` (None when it cannot be opened)."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - the `with` below owns it; only open() errors are caught here
    except OSError:
        return None
    with handle:
        info = os.fstat(handle.fileno())
        size = info.st_size
        head, head_end = _lines_between(handle, 0, min(size, plan.head_bytes))
        tail_start = max(head_end, size - plan.tail_bytes)
        middle = _sampled_lines(handle, head_end, tail_start, plan.samples)
        tail, tail_end = _lines_between(handle, tail_start, size)
    head_events, bad_head = parse_lines(head)
    middle_events, bad_middle = parse_lines(middle)
    tail_events, bad_tail = parse_lines(tail)
    sampled = [event for event in middle_events if event.type in SAMPLE_TYPES]
    return Preview(
        events=head_events + sampled + tail_events,
        end=tail_end,
        size=size,
        identity=(info.st_dev, info.st_ino),
        malformed=bad_head + bad_middle + bad_tail,
    )


def _lines_between(handle: BinaryIO, start: int, stop: int) -> tuple[list[bytes], int]:
    """Complete lines that start at or after `start` and end (newline included) by `stop`; and the
    offset just after the last of them (`start` when there is none)."""
    if stop <= start:
        return [], start
    begin = start - 1 if start > 0 else 0  # one byte early: tells whether `start` begins a line
    handle.seek(begin)
    data = handle.read(stop - begin)
    if start > 0:
        cut = data.find(b"\n")
        if cut < 0:
            return [], start
        begin, data = begin + cut + 1, data[cut + 1 :]
    last = data.rfind(b"\n")
    if last < 0:
        return [], begin
    return data[:last].split(b"\n"), begin + last + 1


def _sampled_lines(handle: BinaryIO, start: int, stop: int, count: int) -> list[bytes]:
    """About `count` whole lines evenly spread between byte offsets `start`
    and `stop`, in file order."""
    span = stop - start
    if span <= 0 or count <= 0:
        return []
    lines: list[bytes] = []
    next_free = start  # a sample must begin after the previous one ended: no line twice
    for index in range(count):
        point = max(next_free, 1, start + (span * (2 * index + 1)) // (2 * count))
        if point >= stop:
            break
        line, line_end = _line_after(handle, point, stop)
        if line is not None:
            lines.append(line)
            next_free = line_end
    return lines


def _line_after(handle: BinaryIO, point: int, stop: int) -> tuple[bytes | None, int]:
    """The first complete line beginning at or after `point` and ending by
    `stop`, and the offset after it."""
    handle.seek(point - 1)
    data = handle.read(min(SAMPLE_READ_BYTES, stop - point + 1))
    first = data.find(b"\n")
    second = data.find(b"\n", first + 1) if first >= 0 else -1
    if second < 0:
        return None, point
    return data[first + 1 : second], point + second
