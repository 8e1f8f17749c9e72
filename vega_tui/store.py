"""Run state built from events: everything the run dashboard shows, in bounded memory.

`RunStore.apply(events)` folds trainer events (trainer_core.contract.protocol) into one `RunState`:
status, progress, chart series (those vega_tui/chart_specs.py declares, copied by
`StoreBase._feed`), markers, checkpoints, samples and a ring buffer of log lines. Memory stays
bounded however long the run: every `Series` keeps at most `max_points` points by merging
neighbours into min/max buckets (so a spike survives downsampling), logs are a fixed-size ring,
markers, samples and checkpoints are capped.

Pure Python: no Textual, no torch. The screens read `state` on the app thread; `state.version` tells
them whether anything changed since their last redraw.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from trainer_core.contract.fault_gate import ON_CODE as FAULTS_ON_CODE
from trainer_core.contract.protocol import (
    BestModelEvent,
    CalibrationEvent,
    CheckpointSavedEvent,
    CommandAckEvent,
    DataScanEvent,
    DeviceSelectedEvent,
    EpochEndEvent,
    EpochStartEvent,
    ErrorEvent,
    Event,
    FinishedEvent,
    FreeRunningEvent,
    HelloEvent,
    InitFromEvent,
    LogEvent,
    MemoryEvent,
    NonfiniteEvent,
    OomRecoveredEvent,
    OvertrainingEvent,
    PausedEvent,
    PhaseEvent,
    PreloadDoneEvent,
    PreloadProgressEvent,
    ProfileBreakdownEvent,
    ResourcesEvent,
    ResumedEvent,
    SampleEvent,
    StepEvent,
    TaskEvent,
    ValidationEvent,
    WarningEvent,
)
from trainer_core.contract.units import format_bytes, format_number
from vega_tui.chart_specs import ChartSpec
from vega_tui.init_from_view import init_from_lines
from vega_tui.run_state import (
    MAX_SAMPLES,
    SampleRow,
    finite_or_none,
    group_losses_text,
)
from vega_tui.store_lifecycle import RunLifecycleHandlers
from vega_tui.store_progress import RunProgressHandlers

# The trainer's own log line when the validation metric first beats the reference ("step 24: mel_l1
# 0.2 passes griffin_lim's 0.21"); it comes just before that validation event.
TRAINER_PASSES = re.compile(r"^step (\d+): \S+ \S+ passes ")

# --------------------------------------------------------------------------------------------------
# The store


class RunStore(RunProgressHandlers, RunLifecycleHandlers):
    """Folds events into `state`. One store per run; call `apply` from one
    thread (the app thread)."""

    def __init__(
        self,
        max_points: int = 2000,
        max_logs: int = 5000,
        *,
        run_dir: Path | str | None = None,
        charts: Iterable[ChartSpec] | None = None,
    ) -> None:
        super().__init__(max_points, max_logs, run_dir=run_dir, charts=charts)
        # Event class -> handler; each handler's parameter is typed, so a field renamed in the
        # protocol fails mypy.
        self._handlers: dict[type[Event], Callable[[Any], None]] = {
            HelloEvent: self._on_hello,
            ResourcesEvent: self._on_resources,
            DeviceSelectedEvent: self._on_device_selected,
            DataScanEvent: self._on_data_scan,
            PreloadProgressEvent: self._on_preload_progress,
            PreloadDoneEvent: self._on_preload_done,
            CalibrationEvent: self._on_calibration,
            InitFromEvent: self._on_init_from,
            TaskEvent: self._on_task,
            EpochStartEvent: self._on_epoch_start,
            EpochEndEvent: self._on_epoch_end,
            StepEvent: self._on_step,
            ProfileBreakdownEvent: self._on_profile_breakdown,
            MemoryEvent: self._on_memory,
            OomRecoveredEvent: self._on_oom_recovered,
            NonfiniteEvent: self._on_nonfinite,
            ValidationEvent: self._on_validation,
            CheckpointSavedEvent: self._on_checkpoint_saved,
            BestModelEvent: self._on_best_model,
            FreeRunningEvent: self._on_free_running,
            SampleEvent: self._on_sample,
            PhaseEvent: self._on_phase,
            LogEvent: self._on_log,
            WarningEvent: self._on_warning,
            OvertrainingEvent: self._on_overtraining,
            ErrorEvent: self._on_error,
            CommandAckEvent: self._on_command_ack,
            PausedEvent: self._on_paused,
            ResumedEvent: self._on_resumed,
            FinishedEvent: self._on_finished,
        }

    # -- public API --------------------------------------------------------------------------------

    def apply(self, events: Iterable[Event]) -> bool:
        """Fold events into the state; True when anything changed (then
        `state.version` went up by one)."""
        state, handlers = self.state, self._handlers
        changed = False
        for event in events:
            state.events_seen += 1
            state.last_t = event.t
            changed = True
            handler = handlers.get(type(event))
            if handler is None:
                state.unknown_events += 1  # a newer trainer's event: counted, never an error
                continue
            if event.__pydantic_extra__:
                state.unknown_fields += 1  # fields a newer trainer added: ignored
            try:
                handler(event)
                self._feed(event)
            except (AttributeError, TypeError, ValueError, KeyError) as exc:
                # An event built outside the protocol's validation must not take the dashboard down.
                self._bad_event(event, exc)
        if changed:
            self._update_elapsed()
            state.version += 1
        return changed

    def note_reader(self, malformed: int, gaps: int) -> None:
        """Record the reader's running totals of malformed lines and seq
        gaps (a log line when they grow)."""
        state = self.state
        if malformed == state.malformed_lines and gaps == state.seq_gaps:
            return
        new_bad, new_gaps = malformed - state.malformed_lines, gaps - state.seq_gaps
        if new_bad > 0:
            self._log(
                "warning",
                "reader",
                f"{new_bad} malformed line(s) in events.jsonl skipped ({malformed} in all)",
            )
        if new_gaps > 0:
            self._log(
                "warning",
                "reader",
                f"{new_gaps} gap(s) in the event sequence: some lines were lost",
            )
        state.malformed_lines, state.seq_gaps = malformed, gaps
        state.version += 1

    def note_dashboard(self, level: str, message: str) -> None:
        """A line of the dashboard's own (not the trainer's) in the Logs tab,
        e.g. how the history was read."""
        self._log(level, "dashboard", message)

    def mark_crashed(self, log_tail: list[str]) -> None:
        """The trainer died without a `finished` event: show it as crashed
        with the end of its trainer.log."""
        state = self.state
        if state.finished is not None or (
            state.status == "crashed" and state.crash_log == list(log_tail)
        ):
            return
        state.status = "crashed"
        state.crash_log = list(log_tail)
        self._log(
            "error",
            "crashed",
            "the trainer exited without a finished event; last lines of trainer.log:",
        )
        for line in log_tail:
            self._log("error", "trainer.log", line)
        state.version += 1

    # -- start-up events ---------------------------------------------------------------------------

    def _on_hello(self, e: HelloEvent) -> None:
        state = self.state
        if state.started_t is not None:
            self._log(
                "info",
                "hello",
                f"trainer restarted (pid {e.pid}){' resuming' if e.resumed else ''}",
                e.t,
            )
        # A new trainer in the same folder (a resume) starts a new life: clear the previous ending.
        state.status, state.finished, state.crash_log = "starting", None, []
        state.early_stopped_step = state.fault_injection = state.overtraining = None
        state.started_t = state.started_t if state.started_t is not None else e.t
        state.pid, state.host, state.world_size = e.pid, e.host, e.world_size
        state.profile_path, state.resumed = e.profile_path, e.resumed
        if state.run_dir is None:
            state.run_dir = Path(e.run_dir)
            state.name = state.run_dir.name
        self._log(
            "info",
            "hello",
            f"trainer {e.trainer_version} pid {e.pid} on {e.host}; profile {e.profile_path}",
            e.t,
        )

    def _on_resources(self, e: ResourcesEvent) -> None:
        self.state.resources = e.model_dump(exclude={"v", "seq", "type"})

    def _on_device_selected(self, e: DeviceSelectedEvent) -> None:
        state = self.state
        state.device, state.device_reason, state.fallback = e.device, e.reason, e.fallback
        state.precision = e.precision or state.precision
        level = "warning" if e.fallback else "info"
        self._log(level, "device_selected", f"device {e.device} ({e.mode} mode): {e.reason}", e.t)

    def _on_data_scan(self, e: DataScanEvent) -> None:
        state = self.state
        state.data_mode = e.data_mode
        state.data_scan = {
            "usable": e.usable,
            "skipped": e.skipped,
            "hours": e.total_hours,
            "reason": e.reason,
        }
        hours = f", {e.total_hours:.2f} h" if e.total_hours else ""
        speakers = f", {len(e.speakers)} speakers" if e.speakers else ""
        text = f"data: {e.data_mode}, {e.usable} usable, {e.skipped} skipped{hours}{speakers}"
        self._log("info", "data_scan", text, e.t)

    def _on_preload_progress(self, e: PreloadProgressEvent) -> None:
        self.state.preload = (e.done, e.total)
        self._set_status("preloading")

    def _on_preload_done(self, e: PreloadDoneEvent) -> None:
        self.state.preload = (e.items, e.items)
        where = f"{e.where} ({format_bytes(e.bytes)})"
        self._log(
            "info",
            "preload_done",
            f"preloaded {e.items} items in {e.seconds:.1f} s into {where}",
            e.t,
        )

    def _on_calibration(self, e: CalibrationEvent) -> None:
        state = self.state
        state.total_steps, state.planned_epochs = e.planned_steps, e.planned_epochs
        self._log(
            "info",
            "calibration",
            f"calibrated {e.samples_per_s:.1f} samples/s: {e.planned_epochs} epochs,"
            f" {e.planned_steps} steps",
            e.t,
        )

    def _on_init_from(self, e: InitFromEvent) -> None:
        self.state.init_from = e.model_dump(mode="json", exclude={"v", "seq", "t", "type"})
        for line in init_from_lines(self.state.init_from):
            self._log("info", "init_from", line, e.t)

    def _on_task(self, e: TaskEvent) -> None:
        self.state.task = e.model_dump(mode="json", exclude={"v", "seq", "t", "type"})
        size = f", {e.parameters:,} parameters" if e.parameters is not None else ""
        code = f": code from {e.module} ({e.file})" if e.module else ""
        self._log("info", "task", f"task {e.name}{size}{code}", e.t)

    # -- evaluation, checkpoints, samples ----------------------------------------------------------

    def _on_validation(self, e: ValidationEvent) -> None:
        state = self.state
        state.val_loss = finite_or_none(e.loss)
        state.metrics = dict(e.metrics)
        state.metric_name = e.metric_name or state.metric_name
        if e.reference:
            state.reference = {
                name: v for name, v in e.reference.items() if finite_or_none(v) is not None
            }
            state.reference_name = e.reference_name or state.reference_name
        metric = f", {e.metric_name} {format_number(e.metric_value)}" if e.metric_name else ""
        reference = state.reference.get(e.metric_name or "")
        if reference is not None:
            metric += f" ({state.reference_name or 'reference'} {format_number(reference)})"
        self._log(
            "info",
            "validation",
            f"validation at step {e.step}: loss {format_number(e.loss)}{metric}",
            e.t,
        )
        if len(state.groups) > 1 and state.losses:
            # a GAN's parts, once per validation
            self._log("info", "losses", group_losses_text(state), e.t)
        self._note_reference_passed(e)
        state.last_validation_t = max(state.last_validation_t, e.t)
        self._end_evaluating()

    def _note_reference_passed(self, e: ValidationEvent) -> None:
        """The first validation after step 0 whose metric beats the reference: a chart
        marker, and a log line unless the trainer wrote its own just before (the untrained
        model at step 0 is no achievement)."""
        state, name = self.state, e.metric_name
        if state.reference_passed_step is not None or e.step <= 0 or name is None:
            return
        value, reference = finite_or_none(e.metric_value), state.reference.get(name)
        if value is None or reference is None or value >= reference:
            return
        state.reference_passed_step = e.step
        label = state.reference_name or "the reference"
        text = (
            f"step {e.step}: {name} {format_number(value)} passes {label}"
            f" {format_number(reference)}"
        )
        self._mark("passed", e.step, e.t, text)
        if self._trainer_passed_step != e.step:
            self._log("info", "validation", text, e.t)

    def _end_evaluating(self) -> None:
        if self.state.status == "evaluating":
            self._set_status(self._status_before_eval)

    def _on_free_running(self, e: FreeRunningEvent) -> None:
        state = self.state
        state.free_running_floor = finite_or_none(e.floor_distance)
        state.free_running = e.model_dump(exclude={"v", "seq", "t", "type", "per_item"})
        text = (
            f"free-running at step {e.step}: distance {format_number(e.distance)} "
            f"(floor {format_number(e.floor_distance)} through {e.vocoder}), "
            f"durations x{format_number(e.duration_ratio)}, "
            f"voicing agrees {format_number(100 * e.vuv_agreement)} %"
            + (
                f", pitch off {format_number(e.f0_error_cents)} cents"
                if e.f0_error_cents is not None
                else ""
            )
        )
        self._log("info", "free_running", text, e.t)

    def _on_phase(self, e: PhaseEvent) -> None:
        self.state.phase = None if e.phase == "training" else (e.step, e.phase, e.done, e.total)

    def _on_sample(self, e: SampleEvent) -> None:
        samples = self.state.samples
        samples.append(SampleRow(e.step, e.kind, e.path, e.text, e.t))
        if len(samples) > MAX_SAMPLES + MAX_SAMPLES // 4:
            del samples[: len(samples) - MAX_SAMPLES]
        self._log("info", "sample", f"{e.kind} sample at step {e.step}: {e.path}", e.t)

    # -- messages and control ----------------------------------------------------------------------

    def _on_log(self, e: LogEvent) -> None:
        passed = TRAINER_PASSES.match(e.message)
        if passed:
            self._trainer_passed_step = int(passed.group(1))
        self._log(e.level, "log", e.message, e.t)

    def _on_warning(self, e: WarningEvent) -> None:
        if e.code == FAULTS_ON_CODE:
            self.state.fault_injection = e.message
        code = f"[{e.code}] " if e.code else ""
        self._log("warning", "warning", f"{code}{e.message}", e.t)

    def _on_error(self, e: ErrorEvent) -> None:
        state = self.state
        state.last_error, state.last_error_file, state.last_error_line = e.message, e.file, e.line
        where = f"{e.file}:{e.line}" if e.file and e.line is not None else None
        # A task's failure names its line in the message already; other failures get it added here.
        self._log(
            "error",
            "error",
            e.message if not where or where in e.message else f"{e.message} (at {where})",
            e.t,
        )
