"""Notifications from the trainer: payloads as each service expects them, posted to a real HTTP server on
127.0.0.1; a server that never answers and a port that refuses never delay the caller, and are retried a
bounded number of times; the webhook comes from the machine file or the environment, never from a profile;
which events are news (contract.notices)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from notify_server import hanging_server, recording_server, refused_url
from trainer_core.contract.errors import ProfileError, VegaError
from trainer_core.contract.eventlog import EventWriter
from trainer_core.contract.notices import Notice, NoticeTracker
from trainer_core.contract.notify_config import NotifyConfig, guess_format, read_notify_config
from trainer_core.contract.profile_loader import load_profile, profile_to_toml
from trainer_core.contract.protocol import (
    ErrorEvent,
    FinishedEvent,
    FreeRunningEvent,
    HelloEvent,
    OvertrainingEvent,
    PausedEvent,
    StepEvent,
)
from trainer_core.engine.events import EventHub
from trainer_core.engine.notify import NotifySink, WebhookSender
from trainer_core.tiny_profiles import tiny_profile

SECRET = "vega-topic-s3cr3t"
NOTICE = Notice("finished", "vega kurmancî: finished at step 40", "completed; best step 30", "default", ("ok",))


def quick(url: str, fmt: str = "json", **kwargs: float) -> WebhookSender:
    settings = {"tries": 3, "timeout_s": 10.0, "backoff_s": 0.05, **kwargs}
    return WebhookSender(NotifyConfig(url, fmt, "test"), **settings)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------
# Payloads


def test_each_format_reaches_the_server_as_the_service_expects_it() -> None:
    with recording_server() as inbox:
        for fmt in ("ntfy", "slack", "discord", "json"):
            sender = quick(f"{inbox.url}/{fmt}", fmt)
            assert sender.send(NOTICE)
            assert sender.close(drain_s=10)
            assert (sender.sent, sender.attempts) == (1, 1)
        got = {r.path.strip("/"): r for r in inbox.wait_for(4)}
    ntfy = got["ntfy"]
    assert ntfy.body.decode("utf-8") == NOTICE.message
    assert ntfy.headers["Title"].startswith("=?UTF-8?B?")  # non-ASCII title as an encoded word
    assert (ntfy.headers["Priority"], ntfy.headers["Tags"]) == ("3", "ok")
    assert json.loads(got["slack"].body) == {"text": f"*{NOTICE.title}*\n{NOTICE.message}"}
    assert json.loads(got["discord"].body) == {"content": f"**{NOTICE.title}**\n{NOTICE.message}"}
    generic = json.loads(got["json"].body)
    assert (generic["title"], generic["kind"], generic["tags"]) == (NOTICE.title, "finished", ["ok"])
    assert got["json"].headers["Content-Type"] == "application/json"


def test_the_format_is_guessed_from_the_host() -> None:
    assert guess_format("https://hooks.slack.com/services/T0/B0/x") == "slack"
    assert guess_format("https://discord.com/api/webhooks/1/abc") == "discord"
    assert guess_format("https://discord.com/channels/1") == "ntfy"  # not a webhook path
    assert guess_format("https://ntfy.sh/topic") == "ntfy"


# ---------------------------------------------------------------------------------------------------------------
# A server that hangs, a port that refuses


def test_a_hanging_server_never_delays_the_caller_and_is_tried_three_times(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trainer_core")
    with hanging_server() as url:
        secret_url = f"{url}/{SECRET}"
        sender = quick(secret_url, queue_size=1, timeout_s=0.1)
        hub = EventHub(EventWriter(tmp_path / "events.jsonl"))
        hub.listeners.append(NotifySink(sender, NoticeTracker("run")).on_event)
        worst = 0.0
        for step in range(3):  # the first is taken by the thread, the second waits, the third is dropped
            started = time.perf_counter()
            hub.emit(FinishedEvent(status="completed", step=step, epoch=0, seconds=1.0))
            worst = max(worst, time.perf_counter() - started)
            while step == 0 and sender.attempts == 0 and time.perf_counter() - started < 10:
                time.sleep(0.005)  # until the thread holds the first notice
        assert worst < 0.05, f"an emit took {worst:.3f} s with a hanging webhook"
        assert sender.dropped == 1
        started = time.perf_counter()
        assert sender.close(drain_s=5.0)
        waited = time.perf_counter() - started
        hub.writer.close()
    # Two notices, three tries each (the last ones without waiting once closing): bounded, then given up.
    assert (sender.attempts, sender.failed, sender.sent) == (6, 2, 0)
    assert waited < 3.0
    text = caplog.text + (tmp_path / "events.jsonl").read_text(encoding="utf-8")
    assert "dropped" in caplog.text and "not delivered to 127.0.0.1: timed out" in caplog.text
    assert SECRET not in text  # the log names the host, never the URL


def test_closing_gives_up_after_its_limit_on_a_hanging_server() -> None:
    # Negative control of the bound: with more waiting left than allowed, close() returns False on time.
    with hanging_server() as url:
        sender = quick(url, timeout_s=3.0)
        sender.send(NOTICE)
        started = time.perf_counter()
        assert not sender.close(drain_s=0.3)
        assert time.perf_counter() - started < 1.0


def test_a_refused_port_is_retried_a_bounded_number_of_times() -> None:
    sender = quick(refused_url())
    sender.send(NOTICE)
    assert sender.close(drain_s=5.0)
    assert (sender.attempts, sender.failed) == (3, 1)


def test_client_errors_are_not_retried_server_errors_are() -> None:
    with recording_server() as inbox:
        refused, broken = quick(f"{inbox.url}/status/400"), quick(f"{inbox.url}/status/503")
        for sender in (refused, broken):
            sender.send(NOTICE)
            assert sender.close(drain_s=5.0)
    assert (refused.attempts, refused.failed) == (1, 1)
    assert (broken.attempts, broken.failed) == (3, 1)


# ---------------------------------------------------------------------------------------------------------------
# Where the webhook comes from


def machine_file(folder: Path, body: str) -> Path:
    path = folder / "machine.toml"
    path.write_text(body, encoding="utf-8")
    return path


def test_the_machine_file_and_the_environment_name_the_webhook(tmp_path: Path) -> None:
    path = machine_file(tmp_path, f'[notify]\nurl = "https://ntfy.example/{SECRET}"\n\n[train]\nlr = 1e-3\n')
    config = read_notify_config(path, {})
    assert config is not None and (config.format, config.host) == ("ntfy", "ntfy.example")
    assert SECRET not in repr(config) and SECRET not in config.where()
    by_env = read_notify_config(path, {"VEGA_NOTIFY_URL": "https://hooks.slack.com/services/x"})
    assert by_env is not None and (by_env.format, by_env.source) == ("slack", "VEGA_NOTIFY_URL")
    reshaped = read_notify_config(path, {"VEGA_NOTIFY_FORMAT": "json"})
    assert reshaped is not None and reshaped.format == "json" and reshaped.url.endswith(SECRET)
    assert read_notify_config(tmp_path / "absent.toml", {}) is None
    # The machine file's other tables still apply to profiles; [notify] never reaches the profile.
    profile_path = tmp_path / "p.toml"
    profile_path.write_text(tiny_profile("lm"), encoding="utf-8")
    profile = load_profile(profile_path, machine_file=path)
    assert profile.train.lr == 1e-3 and SECRET not in profile_to_toml(profile)


def test_a_bad_webhook_setting_is_refused_without_showing_it(tmp_path: Path) -> None:
    path = machine_file(tmp_path, f'[notify]\nurl = "ftp://{SECRET}"\n')
    with pytest.raises(ProfileError, match=r"machine.toml \[notify\]: .*must start with http") as bad:
        read_notify_config(path, {})
    assert SECRET not in str(bad.value)
    with pytest.raises(ProfileError, match="unknown key notify.token"):
        read_notify_config(machine_file(tmp_path, '[notify]\nurl = "https://a.b/c"\ntoken = "x"\n'), {})
    with pytest.raises(VegaError, match="VEGA_NOTIFY_FORMAT.*'teams' is not one of"):
        read_notify_config(
            tmp_path / "absent.toml", {"VEGA_NOTIFY_URL": "https://a.b/c", "VEGA_NOTIFY_FORMAT": "teams"}
        )


def test_a_profile_that_sets_a_webhook_is_refused(tmp_path: Path) -> None:
    profile_path = tmp_path / "p.toml"
    profile_path.write_text(tiny_profile("lm") + f'\n[notify]\nurl = "https://ntfy.sh/{SECRET}"\n', encoding="utf-8")
    with pytest.raises(ProfileError, match=r"p.toml: \[notify\] .*cannot be set in a profile: profiles travel") as bad:
        load_profile(profile_path, machine_file=None)
    assert "VEGA_NOTIFY_URL" in str(bad.value) and SECRET not in str(bad.value)
    plain = tmp_path / "q.toml"
    plain.write_text(tiny_profile("lm"), encoding="utf-8")
    with pytest.raises(ProfileError, match=r"--set notify.url=x: \[notify\]"):
        load_profile(plain, ["notify.url=x"], machine_file=None)


# ---------------------------------------------------------------------------------------------------------------
# Which events are news


def test_which_events_are_news() -> None:
    tracker = NoticeTracker()
    hello = HelloEvent(trainer_version="0", pid=1, host="h", profile_hash="x", run_dir="/runs/kmr-1", python="3")
    step = StepEvent(step=1, epoch=0, loss=1.0, lr=1e-3, samples_per_s=1.0, data_wait_frac=0.0, micro_batch=1)
    assert tracker.observe(hello) is None and tracker.observe(step) is None
    assert tracker.observe(PausedEvent(step=3)) is None  # a pause someone asked for is not news
    paused = tracker.observe(PausedEvent(step=3, reason="memory at 97% of its 2.0 GiB budget"))
    assert (
        paused is not None and paused.kind == "memory_pause" and paused.title == "vega kmr-1: paused itself at step 3"
    )

    def scored(step: int, distance: float) -> Notice | None:
        fields = dict(duration_ratio=1.0, vuv_agreement=0.9, floor_distance=0.5, floor_vuv_agreement=0.95)
        return tracker.observe(FreeRunningEvent(step=step, items=2, distance=distance, **fields))

    assert scored(10, 2.0) is None  # the first score is where the curve starts
    best = scored(20, 1.5)
    assert best is not None and best.kind == "best_free_running" and "was 2" in best.message
    assert scored(30, 1.7) is None
    over = tracker.observe(OvertrainingEvent(step=40, evaluations=3, message="rose", best_step=10))
    assert over is not None and (over.kind, over.priority) == ("overtraining", "high")

    def ended(status: str, **summary: object) -> Notice | None:
        return tracker.observe(FinishedEvent(status=status, step=50, epoch=1, seconds=90.0, summary=summary))

    done = ended("completed", best_step=30, best_val_loss=1.25)
    assert done is not None and done.kind == "finished" and "best checkpoint step 30 (score 1.250)" in done.message
    early = ended("completed", early_stopped=True, best_step=30)
    assert early is not None and early.kind == "early_stop"
    tracker.observe(ErrorEvent(message="boom\ntraceback", code="trainer"))
    failed = ended("failed", error_at="task.py:12")
    assert failed is not None and (failed.kind, failed.message) == ("failed", "boom (at task.py:12)")
    tracker.observe(ErrorEvent(message="non-finite in 30 steps", code="nonfinite_stop"))
    nonfinite = ended("failed")
    assert nonfinite is not None and nonfinite.kind == "nonfinite_stop"
