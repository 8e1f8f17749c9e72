"""Optional Weights & Biases logging (`[logging] wandb = true`, the `wandb` extra), from events.

Like the TensorBoard sink, a listener of rank 0's event hub: it logs what events.jsonl records
(every step of each coalesced `step` event, validations, free-running scores, audio samples,
view images), with the frozen profile as the run's config. W&B's work runs in a thread of its
own: its start launches a service process (seconds), so a slow or failing W&B never delays a
step. Any W&B failure becomes one `warning` event (`wandb_failed`) and the sink turns off.

W&B keeps one row per step and commits it when a later step is logged. RUN/wandb.json
(`wandb_state`) keeps the W&B run id and the last committed step; a resume continues that W&B
run after the last step W&B holds (offline: its own files, which a kill can leave about a second
behind), replays from events.jsonl the rows it lacks up to the checkpoint (`wandb_rows`), then
skips the retrained steps it has.
"""

from __future__ import annotations

import os
import queue
import threading
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer_core.contract import rundir
from trainer_core.contract.eventlog import read_all
from trainer_core.contract.fault_gate import switch_on
from trainer_core.contract.profile import LoggingSection
from trainer_core.contract.protocol import Event, LogEvent, SampleEvent
from trainer_core.engine.events import EventHub
from trainer_core.engine.wandb_files import last_logged_step
from trainer_core.engine.wandb_rows import LOGGED, event_rows, in_run_folder, replay_rows
from trainer_core.engine.wandb_state import WandbState, read_state, write_state

FOLDER = "wandb"  # W&B's own files: RUN/wandb/, unless WANDB_DIR says elsewhere
# The resume test's negative control: log the retrained steps again, as a sink with no skip would.
RELOG_ENV = "VEGA_FAULT_WANDB_RELOG"
# The replay test's negative control: a resume leaves out the rows W&B lost in a kill.
NO_REPLAY_ENV = "VEGA_FAULT_WANDB_NO_REPLAY"
QUEUE_EVENTS = 10_000  # events waiting for W&B; past this they are counted and left out
FLUSH_INTERVAL_S = 1.0  # how often W&B writes its transaction log: what a kill can lose of it
FINISH_WAIT_S = 60.0
ABANDON_WAIT_S = 5.0  # after a failure: how long the end of training waits for W&B
EXTRA_HINT = 'install the extra with `pip install "vega[wandb]"` (or `pip install wandb`)'


@dataclass(frozen=True)
class _StartsAfter:
    """Queued when the model is ready: the step training starts after (a resume's checkpoint)."""

    step: int


class WandbSink:
    """Queues the events W&B logs; a worker thread starts the W&B run and logs them in order."""

    def __init__(
        self,
        settings: LoggingSection,
        run_dir: Path,
        hub: EventHub,
        resume: bool,
    ) -> None:
        self.settings, self.run_dir, self.hub, self.resume = settings, run_dir, hub, resume
        self.off = False
        self.dropped = 0
        self.state: WandbState | None = None
        self.open_step = 0  # the step of W&B's current, uncommitted row (0: none yet)
        self.committed = 0  # the last row W&B committed (a later step was logged)
        self.skip_to = 0
        self.run: Any = None
        self._queue: queue.Queue[Event | _StartsAfter | int] = queue.Queue(maxsize=QUEUE_EVENTS)
        self._thread = threading.Thread(target=self._work, name="wandb", daemon=True)
        self._thread.start()

    def on_event(self, event: Event | _StartsAfter) -> None:
        if self.off or not isinstance(event, (*LOGGED, _StartsAfter)):
            return
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1

    def starts_after(self, step: int) -> None:
        """Training starts after `step`: a resume first replays the rows W&B lacks up to it."""
        if self.resume and not self.off:
            self.on_event(_StartsAfter(step))

    def close(self, exit_code: int) -> None:
        """Finish the W&B run (waiting at most FINISH_WAIT_S); the exit code marks it failed."""
        try:
            self._queue.put(exit_code, timeout=5.0)
        except queue.Full:
            self.off = True
        self._thread.join(FINISH_WAIT_S if not self.off else ABANDON_WAIT_S)
        if self._thread.is_alive() and not self.off:
            self._warn(
                f"W&B did not finish within {FINISH_WAIT_S:g} s; "
                f"`wandb sync {self.run_dir / FOLDER}` uploads what it kept",
                code="wandb_incomplete",
            )
        elif self.dropped:
            behind = f"W&B fell behind: {self.dropped} events were not logged to it"
            self._warn(f"{behind} (events.jsonl has them)", code="wandb_incomplete")

    # The worker thread from here on.

    def _work(self) -> None:
        try:
            self._start()
            while True:
                item = self._queue.get()
                if isinstance(item, _StartsAfter):
                    self._replay(item.step)
                elif isinstance(item, int):
                    self._finish(item)
                    return
                else:
                    self._log(item)
                if self.committed > self.state_step():
                    self._save(self.committed)
        except Exception as exc:  # W&B never crashes training: one warning, then the sink is off
            self.off = True
            why = f"{type(exc).__name__}: {exc}"
            self._warn(f"Weights & Biases failed ({why}); training goes on without it")
            self._abandon()

    def _abandon(self) -> None:
        """Mark a started W&B run failed, if W&B still can (close waits for this only briefly)."""
        try:
            if self.run is not None:
                self.run.finish(exit_code=1)
        except Exception:  # already reported: the sink is off
            pass

    def state_step(self) -> int:
        return self.state.last_step if self.state is not None else 0

    def _start(self) -> None:
        import wandb

        state, why_not = read_state(self.run_dir) if self.resume else (None, None)
        if why_not:
            self._warn(f"{why_not}; this resume starts a new W&B run")
        if state is not None and state.project != self.settings.wandb_project:
            state = None  # the profile moved the run to another project: a new W&B run there
        self.run = wandb.init(
            project=self.settings.wandb_project,
            entity=self.settings.wandb_entity,
            name=self.run_dir.name,
            id=state.run_id if state is not None else None,
            resume="allow",
            dir=os.environ.get("WANDB_DIR") or str(self.run_dir),  # W&B adds its `wandb/` folder
            config=self._config(),
            settings=wandb.Settings(**_known(wandb.Settings, _SETTINGS)),
        )
        if state is not None:
            state.last_step = self._held(state)
            self.skip_to = 0 if relog_on() else state.last_step
        self.state = state or WandbState(str(self.run.id), self.settings.wandb_project)
        write_state(self.run_dir, self.state)
        where = f"offline, in {self.run.sync_dir}" if self.run.offline else self.run.url
        verb = "continues" if state is not None else "logs to"
        message = f"Weights & Biases: this run {verb} W&B run {self.run.id} ({where})"
        self.hub.emit(LogEvent(message=message))

    def _held(self, state: WandbState) -> int:
        """The last step W&B holds: never skip a step it lacks (a kill can lose what it had not
        written or sent yet). Offline: its own files; online: where it says its history ends."""
        if not self.run.offline:
            start = int(self.run.starting_step)
            return min(state.last_step, start - 1) if start > 0 else state.last_step
        try:
            found = last_logged_step(Path(self.run.sync_dir).parent, state.run_id)
        except Exception:  # unreadable (a torn file, another format): trust wandb.json
            found = None
        return state.last_step if found is None else found

    def _replay(self, upto: int) -> None:
        """Log from events.jsonl the rows W&B lacks up to the step training starts after."""
        if upto <= max(self.skip_to, self.open_step) or replay_off():
            return
        events = read_all(self.run_dir / rundir.EVENTS)
        for step, row in replay_rows(events, self.skip_to, upto).items():
            self._row(step, row.scalars)
            for sample in row.samples:
                self._sample(in_run_folder(sample, self.run_dir))

    def _config(self) -> dict[str, Any]:
        """The frozen profile (RUN/profile.toml) as W&B's config."""
        try:
            return tomllib.loads((self.run_dir / rundir.PROFILE).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError):
            return {}

    def _finish(self, exit_code: int) -> None:
        self.run.finish(exit_code=exit_code)
        if self.open_step > self.state_step():
            self._save(self.open_step)  # finish committed the last row

    def _save(self, step: int) -> None:
        assert self.state is not None
        self.state.last_step = step
        write_state(self.run_dir, self.state)

    def _row(self, step: int, data: dict[str, Any]) -> None:
        """Log `data` in step `step`'s row; never twice, never into a row W&B committed already."""
        if step <= self.skip_to or step < self.open_step or not data:
            return
        self.run.log(data, step=step)
        if step > self.open_step:
            self.committed, self.open_step = self.open_step, step

    def _log(self, event: Event) -> None:
        if isinstance(event, SampleEvent):
            self._sample(event)
        for step, scalars in event_rows(event):
            self._row(step, scalars)

    def _sample(self, event: SampleEvent) -> None:
        import wandb

        path = Path(event.path)
        if event.kind == "text" or not path.is_file():
            return  # a missing file leaves W&B without it; the event stands in the log
        media: dict[str, Any]
        if event.kind == "audio":
            media = {f"samples/{path.stem}": wandb.Audio(str(path), caption=event.text)}
        else:
            media = {f"views/{path.stem}": wandb.Image(str(path), caption=event.text)}
        self._row(event.step, media)

    def _warn(self, message: str, code: str = "wandb_failed") -> None:
        self.hub.warn(message, code=code)


# Quiet (no banner, and never a login prompt: a missing key fails the start) and light: no console
# capture (stdout may carry the event stream), no system sampling (the run's resource events cover
# it), no code or requirements upload. Keys this wandb version lacks are left out.
_SETTINGS: dict[str, Any] = {
    "console": "off",
    "silent": True,
    "save_code": False,
    "x_disable_stats": True,
    "x_disable_meta": True,
    "x_disable_machine_info": True,
    "x_save_requirements": False,
    "x_transaction_log_flush_interval": FLUSH_INTERVAL_S,
}


def relog_on() -> bool:
    """The negative control's switch (with VEGA_FAULTS=1): a resume logs W&B's steps again."""
    return switch_on(RELOG_ENV)


def replay_off() -> bool:
    """The replay's negative control (with VEGA_FAULTS=1): a resume replays nothing."""
    return switch_on(NO_REPLAY_ENV)


def _known(settings_class: Any, wanted: dict[str, Any]) -> dict[str, Any]:
    fields = getattr(settings_class, "model_fields", None)
    return wanted if fields is None else {k: v for k, v in wanted.items() if k in fields}


@contextmanager
def wandb_logging(
    settings: LoggingSection,
    hub: EventHub,
    run_dir: Path,
    resume: bool,
) -> Iterator[WandbSink | None]:
    """W&B logging while training (yields the sink), when the profile asks for it and the
    package is there."""
    if not settings.wandb:
        yield None
        return
    import importlib.util

    if importlib.util.find_spec("wandb") is None:
        hub.warn(
            f"logging.wandb = true, but the wandb package is not installed; {EXTRA_HINT}, or set "
            "logging.wandb = false. Training goes on without it",
            code="wandb_unavailable",
        )
        yield None
        return
    sink = WandbSink(settings, run_dir, hub, resume)
    hub.listeners.append(sink.on_event)
    exit_code = 1
    try:
        yield sink
        exit_code = 0
    finally:
        hub.listeners.remove(sink.on_event)
        sink.close(exit_code)
