"""The event log: the writer numbers, flushes and never fails its caller; the reader follows a growing file
incrementally, tolerating partial lines, garbage, gaps, truncation and replacement."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from trainer_core.contract.event_lines import event_to_json
from trainer_core.contract.eventlog import EventLogError, EventReader, EventWriter, last_seq, read_all
from trainer_core.contract.protocol import LogEvent, PausedEvent, ProtocolError, StepEvent, UnknownEvent


def step_event(step: int) -> StepEvent:
    return StepEvent(
        step=step,
        epoch=step // 100,
        loss=1.0 / (step + 1),
        losses={"mel": 0.5},
        lr=1e-3,
        samples_per_s=500.0,
        data_wait_frac=0.02,
        micro_batch=16,
    )


def line_for(seq: int, step: int | None = None) -> bytes:
    """A valid log line with a chosen seq, written without the writer."""
    event = PausedEvent(step=seq if step is None else step, seq=seq, t=1000.0 + seq)
    return (event_to_json(event) + "\n").encode()


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---------------------------------------------------------------------------------------------------------------
# Writer


def test_writer_numbers_stamps_and_returns_events(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    original = step_event(1)
    with EventWriter(path) as writer:
        stamped = [writer.emit(original) for _ in range(3)]
        stamped.append(writer.emit({"type": "log", "message": "from a dict"}))
        assert writer.next_seq == 4
    assert [event.seq for event in stamped] == [0, 1, 2, 3]
    assert original.seq == 0 and original is not stamped[0]  # the caller's model is not changed
    assert isinstance(stamped[3], LogEvent) and stamped[3].level == "info"
    rows = lines_of(path)
    assert [row["seq"] for row in rows] == [0, 1, 2, 3]
    assert all(row["t"] >= stamped[0].t for row in rows)
    assert read_all(path) == stamped


def test_each_line_is_visible_to_another_reader_at_once(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    reader = EventReader(path)
    with EventWriter(path) as writer:
        for step in range(20):
            writer.emit(step_event(step))
            # No close, no flush call: the line must already be in the file.
            events = reader.poll()
            assert [event.step for event in events] == [step]
            assert path.read_bytes().endswith(b"\n")


def test_writer_rejects_what_is_not_an_event(tmp_path: Path) -> None:
    with EventWriter(tmp_path / "events.jsonl") as writer:
        with pytest.raises(ProtocolError, match="'paused' event: step"):
            writer.emit({"type": "paused", "step": "ten"})
        with pytest.raises(TypeError):
            writer.emit("paused")  # type: ignore[arg-type]
        assert writer.emit({"type": "future_thing", "x": 1}).type == "future_thing"
        assert writer.next_seq == 1


def test_concurrent_emits_get_unique_ordered_seqs(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with EventWriter(path) as writer:
        threads = [threading.Thread(target=lambda: [writer.emit(step_event(i)) for i in range(400)]) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert [row["seq"] for row in lines_of(path)] == list(range(1600))


def test_resume_continues_numbering(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with EventWriter(path) as writer:
        for step in range(5):
            writer.emit(step_event(step))
    assert last_seq(path) == 4
    with EventWriter.resume(path) as writer:
        assert writer.emit(PausedEvent(step=5)).seq == 5
    reader = EventReader(path)
    assert [event.seq for event in reader.read_to_end()] == list(range(6))
    assert reader.gaps == 0 and reader.malformed == 0


def test_resume_after_a_crash_mid_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(line_for(0) + line_for(1) + b'{"v":1,"seq":2,"t":3.0,"type":"pau')
    assert last_seq(path) == 1
    with EventWriter.resume(path) as writer:
        writer.emit(PausedEvent(step=9))
    reader = EventReader(path)
    events = reader.read_to_end()
    # The cut line is ended by the writer, so it costs one malformed line and the new event stays intact.
    assert [event.seq for event in events] == [0, 1, 2]
    assert events[-1].step == 9 and reader.malformed == 1


def test_last_seq_scans_backwards_across_chunks(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    body = b"".join(line_for(seq) for seq in range(3000))  # about 200 KB: several 64 KB chunks
    path.write_bytes(body + b"x" * 200_000 + b"\n\n")  # a long garbage tail to skip
    assert last_seq(path) == 2999
    assert last_seq(tmp_path / "missing.jsonl") is None
    (tmp_path / "garbage.jsonl").write_bytes(b"nothing\nvalid\n")
    assert last_seq(tmp_path / "garbage.jsonl") is None
    with EventWriter.resume(tmp_path / "fresh.jsonl") as writer:
        assert writer.next_seq == 0


def test_writer_into_a_directory_never_raises_and_reports_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    writer = EventWriter(tmp_path)
    for step in range(5):
        assert writer.emit(step_event(step)).seq == step
    writer.close()
    assert writer.write_errors == 5 and writer.lost_lines == 5
    err = capsys.readouterr().err
    assert err.count("cannot write the event log") == 1 and str(tmp_path) in err


def test_writer_recovers_when_the_folder_appears_and_readers_see_the_gap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    path = run / "events.jsonl"
    writer = EventWriter(path)
    writer.emit(PausedEvent(step=1))
    writer.emit(PausedEvent(step=2))
    assert writer.write_errors == 2
    run.mkdir()  # the retry on the next emit succeeds
    writer.emit(PausedEvent(step=3))
    writer.close()
    assert "writable again; 2 event(s) were lost" in capsys.readouterr().err
    reader = EventReader(path)
    assert [event.seq for event in reader.read_to_end()] == [2]
    writer2 = EventWriter.resume(path)
    writer2.emit(PausedEvent(step=4))
    writer2.close()
    reader = EventReader(path)
    reader.read_to_end()
    assert (reader.last_seq, reader.gaps, reader.missing) == (3, 0, 0)


def test_writer_survives_its_folder_being_removed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    writer = EventWriter(run / "events.jsonl")
    writer.emit(PausedEvent(step=1))
    (run / "events.jsonl").unlink()
    run.rmdir()
    writer.emit(PausedEvent(step=2))  # goes to the unlinked file: no error, no crash
    writer.close()
    writer.emit(PausedEvent(step=3))  # after close: counted, not raised
    assert writer.lost_lines == 1


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full to simulate a full disk")
def test_writer_on_a_full_disk_never_raises(capsys: pytest.CaptureFixture[str]) -> None:
    with EventWriter(Path("/dev/full")) as writer:
        for step in range(50):
            writer.emit(step_event(step))
    assert writer.write_errors == 50 and writer.next_seq == 50
    assert "No space left on device" in capsys.readouterr().err


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores file permissions")
def test_writer_on_a_read_only_file_never_raises(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(line_for(0))
    path.chmod(0o444)
    with EventWriter(path) as writer:
        writer.emit(PausedEvent(step=1))
    assert writer.write_errors == 1 and path.read_bytes() == line_for(0)


# ---------------------------------------------------------------------------------------------------------------
# The stdout copy


def test_stdout_copy_to_a_stream_matches_the_file(tmp_path: Path) -> None:
    path, stream = tmp_path / "events.jsonl", io.StringIO()
    writer = EventWriter(path, stdout=stream)
    for step in range(25):
        writer.emit(step_event(step))
    writer.close(timeout=30)
    assert stream.getvalue() == path.read_text() and writer.stdout_dropped == 0


def test_stdout_pipe_nobody_reads_never_blocks(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    read_end, write_end = os.pipe()
    stream = os.fdopen(write_end, "w")
    try:
        writer = EventWriter(path, stdout=stream, stdout_queue_lines=64)
        for step in range(3000):  # ~700 KB: ten times what a pipe buffers
            writer.emit(step_event(step))
        assert len(path.read_text().splitlines()) == 3000
        assert writer.stdout_dropped > 0
        assert os.read(read_end, 100).startswith(b'{"v":1,"seq":0,')  # the copy did start, in order
        writer.close(timeout=0.05)
    finally:
        os.close(read_end)  # the stuck copy thread gets EPIPE and ends
        stream.close()


CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from trainer_core.contract.eventlog import EventWriter
    from trainer_core.contract.protocol import PausedEvent

    writer = EventWriter(Path(sys.argv[1]), stdout=True, stdout_queue_lines=100)
    for step in range(20000):
        writer.emit(PausedEvent(step=step))
    writer.close(timeout=0.1)
    Path(sys.argv[2]).write_text(str(writer.stdout_dropped))
    """
)


def test_child_with_an_unread_stdout_pipe_finishes_and_logs_everything(tmp_path: Path) -> None:
    path, dropped = tmp_path / "events.jsonl", tmp_path / "dropped.txt"
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(dropped)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as child:
        assert child.wait(timeout=120) == 0  # exits although nobody ever reads its stdout
    assert [row["seq"] for row in lines_of(path)] == list(range(20000))
    assert int(dropped.read_text()) > 0


# ---------------------------------------------------------------------------------------------------------------
# Reader


def test_reader_waits_for_the_file_to_appear(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    reader = EventReader(path)
    assert reader.poll() == [] and reader.pending_bytes == 0
    path.write_bytes(line_for(0))
    assert [event.seq for event in reader.poll()] == [0]
    assert reader.poll() == []


def test_reader_keeps_a_partial_line_until_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    line = line_for(0)
    path.write_bytes(line[:20])
    reader = EventReader(path)
    assert reader.poll() == []
    with path.open("ab") as handle:
        handle.write(line[20:-1])
    assert reader.poll() == []
    with path.open("ab") as handle:
        handle.write(b"\n" + line_for(1))
    assert [event.seq for event in reader.poll()] == [0, 1]
    assert reader.malformed == 0


def test_reader_follows_a_writer_appending_in_split_chunks(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    data = b"".join(line_for(seq) for seq in range(500))
    rng = random.Random(7)

    def append_in_pieces() -> None:
        position = 0
        with path.open("ab", buffering=0) as handle:
            while position < len(data):
                size = rng.randint(1, 97)
                handle.write(data[position : position + size])
                position += size

    reader = EventReader(path)
    writer = threading.Thread(target=append_in_pieces)
    writer.start()
    events = []
    while writer.is_alive():
        events.extend(reader.poll())
    writer.join()
    events.extend(reader.poll())
    assert [event.seq for event in events] == list(range(500))
    assert reader.malformed == 0 and reader.gaps == 0 and reader.offset == len(data)


def test_reader_follows_another_process(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    script = textwrap.dedent(
        """
        import sys
        from trainer_core.contract.eventlog import EventWriter
        from trainer_core.contract.protocol import PausedEvent
        with EventWriter(sys.argv[1]) as writer:
            for step in range(2000):
                writer.emit(PausedEvent(step=step))
        """
    )
    reader = EventReader(path, max_bytes_per_poll=4096)
    events = []
    with subprocess.Popen([sys.executable, "-c", script, str(path)]) as child:
        while child.poll() is None:
            events.extend(reader.poll())
    events.extend(reader.read_to_end())
    assert [event.step for event in events] == list(range(2000))
    assert reader.malformed == 0 and reader.gaps == 0


def test_malformed_and_unknown_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(
        line_for(0)
        + b"garbage\n"
        + b'{"v":1,"seq":1,"t":1.0,"type":"paused","step":"one"}\n'
        + b"[]\n"
        + b"\n   \n"  # blank lines are not events, and not errors either
        + b'{"v":1,"seq":2,"t":1.0,"type":"from_the_future","x":[1]}\r\n'
        + line_for(3)
    )
    reader = EventReader(path)
    events = reader.poll()
    assert [event.seq for event in events] == [0, 2, 3]
    assert isinstance(events[1], UnknownEvent) and events[1].x == [1]
    assert reader.malformed == 3 and "JSON object" in (reader.last_error or "")
    assert (reader.gaps, reader.missing) == (1, 1)  # the rejected seq-1 line is missing from the events


def test_seq_gaps_are_counted_and_restarts_are_not_gaps(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(line_for(seq) for seq in (0, 1, 2, 5, 6, 10, 0, 1)))
    reader = EventReader(path)
    assert len(reader.poll()) == 8
    assert (reader.gaps, reader.missing, reader.last_seq) == (2, 5, 1)


def test_truncated_file_is_read_again_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(line_for(seq) for seq in range(5)))
    reader = EventReader(path)
    assert len(reader.poll()) == 5
    path.write_bytes(line_for(0, step=100) + line_for(1, step=101))  # "w": truncate and rewrite, shorter
    assert [event.step for event in reader.poll()] == [100, 101]
    assert reader.restarts == 1 and reader.gaps == 0


def test_file_rewritten_in_place_past_the_old_offset_is_noticed(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(line_for(0) + line_for(1))
    reader = EventReader(path)
    assert len(reader.poll()) == 2
    # Same inode, bigger than before, and the old offset now falls inside a line.
    long_log = LogEvent(seq=0, t=1.0, message="x" * 300)
    path.write_bytes((event_to_json(long_log) + "\n").encode() + line_for(1, step=7))
    assert [event.seq for event in reader.poll()] == [0, 1]
    assert reader.restarts == 1 and reader.malformed == 0


def test_replaced_file_is_followed(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(line_for(0) + line_for(1) + line_for(2))
    reader = EventReader(path)
    assert len(reader.poll()) == 3
    replacement = tmp_path / "new.jsonl"
    replacement.write_bytes(b"".join(line_for(seq, step=50 + seq) for seq in range(4)))
    os.replace(replacement, path)
    assert [event.step for event in reader.poll()] == [50, 51, 52, 53]
    assert reader.restarts == 1


def test_large_log_loads_in_bounded_slices(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    lines = [
        (event_to_json(step_event(step).model_copy(update={"seq": step})) + "\n").encode() for step in range(20000)
    ]
    path.write_bytes(b"".join(lines))
    limit = 64 * 1024
    reader = EventReader(path, max_bytes_per_poll=limit)
    total, polls, previous_offset = 0, 0, 0
    while True:
        total += len(reader.poll())
        polls += 1
        assert reader.offset - previous_offset <= limit  # never more than one slice, never re-reading
        previous_offset = reader.offset
        if reader.pending_bytes == 0:
            break
    assert total == 20000 and polls >= path.stat().st_size // limit
    assert reader.poll() == [] and reader.malformed == 0 and reader.gaps == 0


def test_overlong_garbage_line_is_skipped_not_buffered(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    reader = EventReader(path, max_line_bytes=100)
    path.write_bytes(b"z" * 150)
    assert reader.poll() == []
    with path.open("ab") as handle:
        handle.write(b"z" * 150 + b"\n" + line_for(0))
    assert [event.seq for event in reader.poll()] == [0]
    assert reader.malformed == 1 and "longer than 100 bytes" in (reader.last_error or "")


def test_read_all_takes_a_final_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(line_for(0) + line_for(1).rstrip(b"\n"))
    assert [event.seq for event in read_all(path)] == [0, 1]
    path.write_bytes(line_for(0) + b'{"v":1,"seq":1,"t"')  # killed mid-write
    reader = EventReader(path)
    assert [event.seq for event in reader.read_to_end()] == [0] and reader.malformed == 1


def test_read_all_of_a_missing_log_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EventLogError, match="missing.jsonl not found"):
        read_all(tmp_path / "missing.jsonl")
