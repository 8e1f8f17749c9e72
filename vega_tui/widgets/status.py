"""The run's status line, the crash/failure and fault-injection banner, and the small number
formatters the dashboard shares.

Everything here renders from a `vega_tui.store.RunState`; nothing reads files or clocks by itself
(the caller passes `now`), so a finished run always renders the same way.
"""

from __future__ import annotations

import math
from pathlib import PurePath
from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import Static

from trainer_core.contract.units import format_duration
from vega_tui.run_state import ENDED as ENDED_STATES

if TYPE_CHECKING:
    from vega_tui.run_state import RunState

STATE_STYLES = {
    "starting": "bold",
    "preloading": "bold blue",
    "training": "bold green",
    "paused": "bold yellow",
    "evaluating": "bold cyan",
    "finished": "bold green",
    "stopped": "bold yellow",
    "failed": "bold red",
    "crashed": "bold red",
}


def format_rate(value: float | None) -> str:
    """Throughput without exponents: `3660`, `52.3`, `4.27`."""
    if value is None or not math.isfinite(value):
        return "—"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def elapsed_seconds(state: RunState, now: float | None) -> float | None:
    """Wall time of the run: up to `now` while it lives, up to its last event once it ended."""
    if state.status in ENDED_STATES or now is None:
        return state.elapsed_s
    if state.started_t is None:
        return None
    return max(0.0, now - state.started_t)


def _step_text(state: RunState) -> str:
    total = f"/{state.total_steps}" if state.total_steps else ""
    return f"step {state.step}{total}"


def _epoch_text(state: RunState) -> str:
    planned = f"/{state.planned_epochs}" if state.planned_epochs else ""
    return f"epoch {state.epoch}{planned}"


def _preload_text(state: RunState) -> str:
    if state.status != "preloading" or not state.preload:
        return ""
    done, total = state.preload
    return f" {done}/{total}"


PHASE_WORDS = {
    "validating": "validating",
    "sampling": "sampling",
    "free_running": "free-running",
    "finishing": "finishing",
}


def phase_text(state: RunState) -> str:
    """`free-running 3/8`, `validating`, `sampling`: what the trainer does
    between steps, else ""."""
    if state.phase is None or state.status in ENDED_STATES:
        return ""
    _, phase, done, total = state.phase
    counted = f" {done}/{total}" if done is not None and total else ""
    return f"{PHASE_WORDS.get(phase, phase)}{counted}"


def status_first_line(state: RunState, now: float | None) -> Text:
    """`name · STATE · step 120/600 · epoch 1/5 · 3m05s · ETA 12m00s`."""
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(
        state.name or (state.run_dir.name if state.run_dir is not None else ""), style="bold"
    )
    line.append("  ")
    line.append(
        f"{state.status.upper()}{_preload_text(state)}",
        style=STATE_STYLES.get(state.status, "bold"),
    )
    if state.status == "paused" and state.pause_reason:
        line.append(f" ({state.pause_reason})", style="yellow")
    if state.status == "failed" and (site := error_site(state, short=True)):
        line.append(f" at {site}", style="red")
    if state.early_stopped_step is not None:
        best = f", best step {state.best_step}" if state.best_step is not None else ""
        line.append(f" (early stop{best})", style="yellow")
    elif state.overtraining is not None:
        best_step = state.overtraining.get("best_step")
        kept = f", best step {best_step}" if best_step is not None else ""
        line.append(f" (overtraining{kept})", style="yellow")
    eta = "—" if state.status in ENDED_STATES else format_duration(state.eta_s)
    parts = [
        _step_text(state),
        _epoch_text(state),
        f"elapsed {format_duration(elapsed_seconds(state, now))}",
    ]
    doing = phase_text(state)
    parts.append(doing if doing else f"ETA {eta}")
    if state.history_progress is not None:
        # a preview: the exact history is still loading
        parts.append(f"history {state.history_progress * 100:.0f} %")
    line.append("  " + " · ".join(parts))
    return line


def rank_text(state: RunState) -> str | None:
    """`ranks 0 12.3/s · 1 11.8/s, slowest 1` for a multi-process run's
    latest step window, else None."""
    rates = state.rank_samples_per_s
    if len(rates) < 2:
        return None
    slowest = min(range(len(rates)), key=lambda rank: rates[rank])
    listing = " · ".join(f"{rank} {format_rate(rate)}/s" for rank, rate in enumerate(rates))
    return f"ranks {listing}, slowest {slowest}"


def status_second_line(state: RunState) -> Text:
    """`52.3 samples/s · cpu fp32 · world 1 · text · batch 16×1` (DDP: `ranks 0
    26.1/s · 1 25.9/s, slowest 1`)."""
    device = " ".join(part for part in (state.device, state.precision) if part) or "device —"
    # several processes: each rank's own rate says more than the world size
    ranks = rank_text(state)
    parts = [
        f"{format_rate(state.samples_per_s)} samples/s",
        device,
        ranks or f"world {state.world_size or 1}",
    ]
    if state.data_mode:
        parts.append(state.data_mode)
    if state.micro_batch:
        parts.append(f"batch {state.micro_batch}×{state.grad_accum or 1}")
    if state.data_wait_frac is not None and math.isfinite(state.data_wait_frac):
        parts.append(f"data wait {state.data_wait_frac:.0%}")
    return Text(" · ".join(parts), style="dim", no_wrap=True, overflow="ellipsis")


class StatusLine(Static):
    """Two lines at the top of the dashboard: what the run is doing, and on what."""

    DEFAULT_CSS = """
    StatusLine { height: 2; padding: 0 1; }
    """

    def show(self, state: RunState, now: float | None, waiting: list[str] | None = None) -> None:
        """Redraw; `waiting` names requests under way ("saving…"), shown
        until their event arrives."""
        text = status_first_line(state, now)
        for label in waiting or ():
            text.append(f"  {label}", style="bold yellow")
        text.append("\n")
        text.append_text(status_second_line(state))
        # two rows always: a layout pass each redraw would cost the whole screen
        self.update(text, layout=False)


def last_error_message(state: RunState) -> str | None:
    """The most recent error the trainer reported (an `error` event first,
    else an error-level log line)."""
    if state.last_error:
        return state.last_error
    for line in reversed(state.logs):
        if line.level in ("error", "critical") and line.kind == "log":
            return line.message
    return None


def error_site(state: RunState, short: bool = False) -> str | None:
    """`file.py:42` (`short`: the file's name only) of the last error, when
    the trainer named where it was."""
    if not state.last_error_file or state.last_error_line is None:
        return None
    file = PurePath(state.last_error_file).name if short else state.last_error_file
    return f"{file}:{state.last_error_line}"


def problem_text(state: RunState) -> Text | None:
    """What the banner says for a crashed or failed run, a run with fault injection on (a test or
    drill, whose failures may be planted), or an overtraining one; None when the run is fine."""
    failure = _join(_failure_text(state), overtraining_text(state))
    if state.fault_injection is None:
        return failure
    text = Text("FAULT INJECTION ON", style="bold reverse yellow")
    text.append(f" {state.fault_injection.removeprefix('fault injection on ')}", style="yellow")
    return text if failure is None else text.append("\n").append_text(failure)


def _join(first: Text | None, second: Text | None) -> Text | None:
    if first is None or second is None:
        return first or second
    return first.append("\n").append_text(second)


def overtraining_text(state: RunState) -> Text | None:
    """`OVERTRAINING since step 120: validation loss rose 3 evaluations ...; the
    best checkpoint is step 50: PATH`."""
    found = state.overtraining
    if found is None:
        return None
    text = Text("OVERTRAINING", style="bold reverse yellow")
    text.append(f" since step {found['step']}: ", style="yellow")
    text.append(str(found["message"]))
    return text


def _failure_text(state: RunState) -> Text | None:
    if state.status == "crashed":
        text = Text("The trainer died without finishing", style="bold red")
        text.append(" (no 'finished' event). Last lines of trainer.log:\n", style="red")
        tail = state.crash_log
        text.append("\n".join(tail) if tail else "(trainer.log is empty or missing)", style="dim")
        return text
    if state.status == "failed":
        message = (last_error_message(state) or "no error message was recorded").strip()
        text = Text("The run failed: ", style="bold red")
        first = message.splitlines()[0] if message else "no error message was recorded"
        text.append(first)
        site = error_site(state)
        if site and site not in first:
            text.append(f"\nat {site}", style="red")
        text.append("\n(the traceback is in the Logs tab and in trainer.log)", style="dim")
        return text
    return None


class ProblemBanner(Static):
    """Shown above the tabs only while the run is crashed or failed,
    overtrains, or has fault injection on."""

    DEFAULT_CSS = """
    ProblemBanner {
        display: none; max-height: 8; padding: 0 1; border-left: thick $error; overflow-y: auto;
    }
    ProblemBanner.-shown { display: block; }
    """

    _shown: Text | None = None

    def show(self, state: RunState) -> None:
        text = problem_text(state)
        if text == self._shown:
            # unchanged (nearly always: nothing wrong): no update, so no
            # layout pass of the whole screen
            return
        self._shown = text
        self.set_class(text is not None, "-shown")
        self.update(text or "")
