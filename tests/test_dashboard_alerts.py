"""An attached dashboard rings the bell and sends OSC 9 and OSC 777 desktop notifications for news that arrives
while it watches, never for the history it reads on attaching: `vega-tui attach` on a real pseudo-terminal,
reading the bytes it writes (the history's overtraining event shows in the banner, without an alert)."""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

from trainer_core.contract.event_lines import event_to_json
from trainer_core.contract.eventlog import EventWriter
from trainer_core.contract.notices import Notice
from trainer_core.contract.protocol import FinishedEvent, HelloEvent, OvertrainingEvent
from vega_tui.alerts import DashboardAlerts, alert_sequences

NOTIFY_777 = b"\x1b]777;notify;vega kmr-run: "


def test_alert_sequences_are_clean_and_wrapped_for_tmux() -> None:
    notice = Notice("failed", "vega a;b: failed", "boom\x1b]0;evil\x07 here\nnext", "high")
    text = alert_sequences(notice)
    assert text == (
        "\a\x1b]9;vega a,b: failed: boom ]0;evil  here next\x1b\\"
        "\x1b]777;notify;vega a,b: failed;boom ]0;evil  here next\x1b\\"
    )
    wrapped = alert_sequences(notice, in_tmux=True)
    assert wrapped.startswith(text) and "\x1bPtmux;\x1b\x1b]9;vega a,b" in wrapped


def test_each_event_alerts_once_and_history_never() -> None:
    now = time.time()
    alerts, written = DashboardAlerts("r", since=now), []
    old = FinishedEvent(seq=3, t=now - 60, status="completed", step=10, epoch=1, seconds=5.0)
    new = FinishedEvent(seq=9, t=now, status="failed", step=12, epoch=1, seconds=6.0)
    alerts.on_events([old, new], written.append)
    alerts.on_events([new], written.append)  # a big log's live line delivered again after the history
    assert [n.kind for n in alerts.sent] == ["failed"] and len(written) == 1


class Terminal:
    """A pseudo-terminal whose output a thread collects."""

    def __init__(self, columns: int = 100, rows: int = 30) -> None:
        self.controller, self.side = os.openpty()
        fcntl.ioctl(self.side, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.output = bytearray()
        self.lock = threading.Lock()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.controller, 65536)
            except OSError:
                return
            if not data:
                return
            with self.lock:
                self.output += data

    def wait_for(self, needle: bytes, timeout: float = 60.0) -> bytes:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if needle in self.output:
                    return bytes(self.output)
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} not written within {timeout:g} s; tail: {bytes(self.output[-400:])!r}")


def test_an_attached_dashboard_notifies_live_news_only(tmp_path: Path) -> None:
    run = tmp_path / "kmr-run"
    run.mkdir()
    old = time.time() - 600
    history = [
        HelloEvent(trainer_version="0", pid=os.getpid(), host="h", profile_hash="x", run_dir=str(run), python="3"),
        OvertrainingEvent(step=30, evaluations=3, best_step=10, message="rose 3 times (history)"),
    ]
    lines = [event_to_json(e.model_copy(update={"seq": i, "t": old + i})) for i, e in enumerate(history)]
    (run / "events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    terminal = Terminal()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("VEGA_", "TMUX"))}
    env.update(VEGA_CONFIG_DIR=str(tmp_path / "config"), TERM="xterm-256color", VEGA_HISTORY_WORKER="0")
    side = terminal.side
    app = subprocess.Popen([sys.executable, "-m", "vega_tui", "attach", str(run)], stdin=side, stdout=side,
                           stderr=side, env=env, start_new_session=True)  # fmt: skip
    os.close(side)
    try:
        terminal.wait_for(b"OVERTRAINING")  # the banner: the dashboard has read the history
        assert b"]777;" not in terminal.output and b"]9;" not in terminal.output  # history is not news
        with EventWriter.resume(run / "events.jsonl") as writer:
            writer.emit(FinishedEvent(status="completed", step=40, epoch=2, seconds=75.0, summary={"best_step": 20}))
        output = terminal.wait_for(NOTIFY_777 + b"finished at step 40")
    finally:
        app.send_signal(signal.SIGTERM)
        try:
            app.wait(timeout=20)
        except subprocess.TimeoutExpired:
            app.kill()
            app.wait()
        os.close(terminal.controller)
    alert = output[output.index(b"\x1b]9;vega kmr-run: finished") - 1 :]
    assert alert.startswith(b"\a\x1b]9;vega kmr-run: finished at step 40 after 1m15s: completed; best checkpoint")
    assert output.count(b"]777;notify;") == 1
