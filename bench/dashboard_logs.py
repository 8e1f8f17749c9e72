"""Event logs for benchmark 5 (bench/dashboard_speed.py): the big finished run's events.jsonl,
generated once under bench/.data, and the writer thread that appends a live stream of step lines
with a heartbeat log line, both in the trainer's own line format.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import common

HEARTBEAT = "bench heartbeat"
OTHER_HOST = "bench-remote-writer"


def step_line(seq: int, step: int, t: float, epoch: int = 0) -> str:
    """One `step` event line as the trainer writes it (one step per window:
    the most lines per step)."""
    loss = 2.0 + 3.0 / (1.0 + step * 0.001)
    return (
        f'{{"v":1,"seq":{seq},"t":{t:.6f},"type":"step","step":{step},"epoch":{epoch},"loss":{loss:.6f},'
        f'"losses":{{"total":{loss:.6f},"ce":{loss:.6f}}},"lr":0.0003,"grad_norm":0.8123,"loss_scale":null,'
        '"samples_per_s":512.5,"data_wait_frac":0.0021,"micro_batch":16,"grad_accum":1,"mem_device_bytes":null,'
        f'"mem_host_bytes":null,"eta_s":1000.0,"steps_in_window":1,"step_series":[{step}],'
        f'"loss_series":[{loss:.6f}],"lr_series":[0.0003]}}\n'
    )


def header_events(run_dir: Path, host: str, pid: int) -> list[dict]:
    return [
        {
            "type": "hello",
            "trainer_version": "bench",
            "pid": pid,
            "host": host,
            "profile_hash": "bench",
            "run_dir": str(run_dir),
            "python": sys.version.split()[0],
        },
        {
            "type": "resources",
            "cpu_cores": os.cpu_count(),
            "ram_total_bytes": 2**34,
            "ram_available_bytes": 2**33,
        },
        {
            "type": "device_selected",
            "mode": "cpu",
            "device": "cpu",
            "reason": "benchmark",
            "precision": "fp32",
        },
        {"type": "epoch_start", "epoch": 0},
    ]


def write_events(path: Path, events: list[dict], start_seq: int) -> int:
    """Append validated events through the real EventWriter; returns the next seq."""
    from trainer_core.contract.eventlog import EventWriter

    with EventWriter(path, start_seq=start_seq) as writer:
        for event in events:
            writer.emit(event)
        return writer.next_seq


def big_log(lines: int) -> tuple[Path, int]:
    """A finished run folder whose events.jsonl holds `lines` lines;
    (folder, final step). Made once."""
    from trainer_core.contract.eventlog import read_all

    run_dir = common.DATA / f"log-{lines}"
    path = run_dir / "events.jsonl"
    steps = lines - 5
    if path.is_file() and (run_dir / "complete").is_file():
        return run_dir, steps
    run_dir.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    seq = write_events(path, header_events(run_dir, os.uname().nodename, 4_000_000), 0)
    t0 = time.time() - steps * 0.5
    with open(path, "a", encoding="utf-8") as handle:
        for step in range(1, steps + 1):
            handle.write(step_line(seq + step - 1, step, t0 + step * 0.5, epoch=step // 10000))
    finished = {
        "type": "finished",
        "status": "completed",
        "step": steps,
        "epoch": steps // 10000,
        "seconds": steps * 0.5,
        "summary": {},
    }
    write_events(path, [finished], seq + steps)
    if lines <= 100_000:
        assert len(read_all(path)) == lines, "the generated log does not read back as valid events"
    (run_dir / "complete").write_text("ok\n")
    return run_dir, steps


class StreamWriter(threading.Thread):
    """Appends step lines at `rate` lines/s (in 10 ms bursts) and a
    heartbeat log line every 100 ms."""

    def __init__(self, path: Path, rate: int, start_seq: int) -> None:
        super().__init__(daemon=True, name="bench-stream")
        self.path, self.rate, self.seq, self.step = path, rate, start_seq, 0
        self.stop = threading.Event()

    def run(self) -> None:
        from trainer_core.contract.event_lines import event_to_json, parse_event

        burst, beat = max(1, self.rate // 100), 0
        next_t = time.perf_counter()
        with open(self.path, "a", encoding="utf-8") as handle:
            while not self.stop.is_set():
                lines = []
                for _ in range(burst):
                    self.step += 1
                    lines.append(step_line(self.seq, self.step, time.time()))
                    self.seq += 1
                if self.step % max(1, self.rate // 10) < burst:
                    beat += 1
                    log = {
                        "v": 1,
                        "seq": self.seq,
                        "t": time.time(),
                        "type": "log",
                        "level": "info",
                        "message": f"{HEARTBEAT} {beat}",
                    }
                    lines.append(event_to_json(parse_event(log)) + "\n")
                    self.seq += 1
                handle.write("".join(lines))
                handle.flush()
                next_t += 0.01
                time.sleep(max(0.0, next_t - time.perf_counter()))
