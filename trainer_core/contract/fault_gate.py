"""Fault switches act only in tests and drills: `VEGA_FAULTS=1` must be set as well.

A `VEGA_FAULT_*` variable left in a shell (the dashboard passes its environment on) or a
profile's `[debug]` fault field would otherwise crash, hold or weaken a real run without a
word. With the gate closed they are ignored and the trainer says so (a `warning` event
with code `fault_switches_ignored`); with it open every run they change starts with a
`warning` event coded `fault_injection_on`, and the dashboard shows a banner. The switches
themselves live in `engine.faults` and `engine.checkpoint_manager`; torch-free, so the
dashboard reads the codes from here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

GATE_ENV = "VEGA_FAULTS"
SWITCH_PREFIX = "VEGA_FAULT_"
ON_CODE = "fault_injection_on"
IGNORED_CODE = "fault_switches_ignored"
# The time budget bench's negative control: evaluation left out of the budget and run as it was
# before it was made cheap (every torch thread, one sentence at a time). Here, not in
# engine.faults: models read it too.
EVAL_UNBUDGETED_ENV = "VEGA_FAULT_EVAL_UNBUDGETED"


def faults_on(environ: Mapping[str, str] | None = None) -> bool:
    """True when VEGA_FAULTS=1: the switches may act (tests and drills set it)."""
    return (os.environ if environ is None else environ).get(GATE_ENV, "") == "1"


def switch_on(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """A `VEGA_FAULT_*` switch set to 1 with the gate open."""
    env = os.environ if environ is None else environ
    return faults_on(env) and env.get(name, "").strip() == "1"


def env_switches(environ: Mapping[str, str] | None = None) -> list[str]:
    """`NAME=value` of every VEGA_FAULT_* variable set to something, sorted."""
    env = os.environ if environ is None else environ
    return sorted(
        f"{name}={value}" for name, value in env.items() if name.startswith(SWITCH_PREFIX) and value
    )


def gate_warning(
    switches: Sequence[str], environ: Mapping[str, str] | None = None
) -> tuple[str, str] | None:
    """(code, message) of the warning a run with these switches set starts
    with; None when none is set."""
    if not switches:
        return None
    listed = ", ".join(switches)
    if faults_on(environ):
        return (
            ON_CODE,
            f"fault injection on ({GATE_ENV}=1): {listed}; a test or drill, never a real run",
        )
    return (
        IGNORED_CODE,
        (
            f"fault switches ignored: {listed}; they act only with {GATE_ENV}=1 (tests and drills),"
            " so this run trains as if they were not set"
        ),
    )
