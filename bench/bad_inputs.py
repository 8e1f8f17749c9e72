"""Benchmark: the bad-input drill. Feed broken files to the real commands and count what escapes.

Every case writes one real bad thing into a fresh folder and runs the commands a user would, as
subprocesses (`trainer-core check-data`, `train`, `train --resume`, `synth`), or attaches the real
dashboard: audio, odd files, transcripts and tables (bench/bad_input_cases.py); cut checkpoints,
best.json and caches (bench/bad_input_runs.py); profiles and voice configs
(bench/bad_input_configs.py); damaged event lines (bench/bad_input_dashboard.py). Each command's
outcome is an error naming the input, a listed skip naming it, a correct use of it (8 channels are
downmixed), or a failure: unhandled (used silently, or an error that says nothing), crash (a
traceback, another exit status) or hang. The user's files (data, checkpoints, exports, profiles,
the event log's earlier bytes) are hashed before and after: any change is data lost.

Negative controls (--control, and after the drill unless --tiny): `crash` runs the first data
case's check-data under bench/bad_input_wrapper.py with an audio decoder that raises an exception
the product does not expect, so a crash must be counted; `lost` runs it under a wrapper that cuts
a data file in half after the command, so data lost must be counted. Under --control the drill
must fail (exit 1).

    .venv/bin/python bench/bad_inputs.py          # every case, then both controls
    .venv/bin/python bench/bad_inputs.py --tiny   # five quick cases, check-data and the dashboard
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import common
from bad_input_cases import DATA_CASES
from bad_input_checks import (
    FAILED,
    Case,
    Outcome,
    Workspace,
    log_prefixes,
    lost_files,
    run_command,
    snapshot,
)
from bad_input_configs import CONFIG_CASES
from bad_input_dashboard import DASHBOARD_CASES
from bad_input_runs import RUN_CASES

from trainer_core.tiny_profiles import tiny_profile

CASES: list[Case] = [*DATA_CASES, *RUN_CASES, *CONFIG_CASES, *DASHBOARD_CASES]
WRAPPER = str(common.BENCH / "bad_input_wrapper.py")
TITLE = "Bad-input drill: broken files fed to the real commands"
MESSAGE_CHARS = 300  # a message in the document's table is cut here
TTS_TRAIN = {"max_steps": 2, "batch_size": 4, "warmup_steps": 1, "eval_every_steps": 2}
LM_TRAIN = {"max_steps": 4, "warmup_steps": 1, "eval_every_steps": 2, "keep_last": 10}


def make_workspace(root: Path) -> Workspace:
    """Tiny TTS and LM profiles (a checkpoint every 2 steps), and the trainer's environment."""
    (root / "config").mkdir(parents=True)
    tts, lm = root / "tts.toml", root / "lm.toml"
    every = {"checkpoint_every_steps": 2}
    voice = tiny_profile(
        "tts",
        run={"name": "badin-voice"},
        data={"cache_dir": str(root / "cache")},
        train={**TTS_TRAIN, **every},
        tts={"griffin_lim_iters": 4, "text_units": "chars"},
        sample={"sentences": ["A short test."]},
    )
    tts.write_text(voice, encoding="utf-8")
    text = tiny_profile(
        "lm",
        run={"name": "badin-lm"},
        train={**LM_TRAIN, **every},
        sample={"max_new_bytes": 8},
    )
    lm.write_text(text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VEGA_")}
    env.update(VEGA_CONFIG_DIR=str(root / "config"), OMP_NUM_THREADS="1")
    env.update(PYTHONPATH=str(common.REPO))
    return Workspace(root, tts, lm, env)


def try_case(ws: Workspace, case: Case, tiny: bool, wrapper: list[str]) -> list[Outcome]:
    """Build the case, hash the user's files, run its commands (or its own check), hash again."""
    trial = case.build(ws)
    row = (case.key, case.group, case.fed)
    if trial.skipped:
        return [Outcome(*row, "-", "not tried", trial.skipped, 0.0)]
    before, grown = snapshot(trial.keep), log_prefixes(trial.grow)
    outcomes = []
    if trial.inline is not None:
        t0 = time.monotonic()
        try:
            kind, message = trial.inline()
        except Exception as exc:  # noqa: BLE001 - an exception out of the dashboard is a crash
            kind, message = "crash", f"{type(exc).__name__}: {exc}"
        outcomes.append(Outcome(*row, "dashboard", kind, message, time.monotonic() - t0))
    for command in trial.commands:
        if tiny and command.full_only:
            continue
        kind, message, seconds = run_command(command, ws.env, wrapper)
        outcomes.append(Outcome(*row, command.label, kind, message, seconds))
    lost = lost_files(before, grown)
    for outcome in outcomes:
        outcome.lost = lost
    return outcomes


def run_cases(root: Path, cases: list[Case], tiny: bool, wrapper: list[str]) -> list[Outcome]:
    ws = make_workspace(root)
    outcomes: list[Outcome] = []
    for case in cases:
        print(f"[bad_inputs] {case.key}: {case.fed}", flush=True)
        found = try_case(ws, case, tiny, wrapper)
        for o in found:
            lost = f"; LOST {', '.join(o.lost)}" if o.lost else ""
            print(f"    {o.command}: {o.kind} ({o.seconds:.1f} s) {o.message[:150]}{lost}")
        outcomes += found
    return outcomes


def release(root: Path) -> None:
    """Give mode-000 files and folders their modes back, so a user (not root) can remove them."""
    for folder, dirs, files in os.walk(root):  # top-down: a folder is opened before it is walked
        for name in [*dirs, *files]:
            path = Path(folder) / name
            if not path.is_symlink() and path.stat().st_mode & 0o777 == 0:
                path.chmod(0o755 if path.is_dir() else 0o644)


# -------------------------------------------------------------------------------------------------
# Report


def per_case(outcomes: list[Outcome]) -> dict[str, list[Outcome]]:
    cases: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        cases.setdefault(outcome.case, []).append(outcome)
    return cases


def tally(outcomes: list[Outcome]) -> dict[str, int]:
    """Counts over inputs (tried, crashed in any command, lost, unhandled) and over outcomes."""
    tried = [o for o in outcomes if o.kind != "not tried"]
    cases = per_case(tried).values()
    kinds = Counter(o.kind for o in outcomes)
    return {
        "tried": len(cases),
        "commands": len(tried),
        "crashes": sum(1 for runs in cases if any(o.kind in FAILED for o in runs)),
        "lost": sum(1 for runs in cases if runs[0].lost),
        "unhandled": sum(1 for runs in cases if any(o.kind == "unhandled" for o in runs)),
        "not tried": len(per_case([o for o in outcomes if o.kind == "not tried"])),
        **{kind: kinds[kind] for kind in ("error", "skip", "accepted", "crash", "hang")},
    }


def report(result: common.Result, outcomes: list[Outcome]) -> None:
    counts = tally(outcomes)
    tried, crashes, lost = counts["tried"], counts["crashes"], counts["lost"]
    unhandled = counts["unhandled"]
    result.add("bad inputs tried", tried, target="> 0", met=tried > 0)
    result.add("commands run on them", counts["commands"])
    crashed = "crashes (a traceback, an unexpected exit status or a hang)"
    result.add(crashed, crashes, target="= 0", met=crashes == 0)
    result.add("data lost (inputs whose user files changed)", lost, target="= 0", met=lost == 0)
    silent = "unhandled (used silently, or an error not naming the input)"
    result.add(silent, unhandled, target="= 0", met=unhandled == 0)
    labels = {"error": "clear errors", "skip": "listed skips", "accepted": "used correctly"}
    for kind, label in labels.items():
        result.add(f"command outcomes: {label}", counts[kind])
    untried = f" ({counts['not tried']} not tried here)" if counts["not tried"] else ""
    figure = f"bad inputs tried {tried}, crashes {crashes}, data lost {lost}{untried}"
    result.notes.insert(0, figure)
    failed = [o for o in outcomes if o.kind == "unhandled" or o.kind in FAILED]
    result.notes += [f"{o.case} ({o.command}): {o.kind}: {o.message}" for o in failed][:20]
    head = ["input", "what was fed", "command", "outcome", "first line of the message"]
    rows = []
    for o in outcomes:
        verdict = o.kind + (" + LOST " + ", ".join(o.lost) if o.lost else "")
        rows.append([o.case, o.fed, o.command, verdict, o.message])
    result.settings["table"] = {"head": head, "rows": rows}


def report_control(name: str, outcomes: list[Outcome], result: common.Result) -> None:
    counter = "crashes" if name == "crash" else "lost"
    caught = tally(outcomes)[counter]
    failed = [f"{o.case} ({o.command}): {o.message}" for o in outcomes if o.kind in FAILED]
    lost = [f"{o.case}: {', '.join(o.lost)}" for o in outcomes if o.lost]
    detail = (failed if name == "crash" else lost) or [""]
    title = f"negative control ({name}): {counter} counted"
    result.add(title, caught, target="> 0", met=caught > 0, detail=detail[0])


def hide_workspace(result: common.Result, root: Path) -> None:
    """Messages name files in the deleted temporary workspace: shown relative to it (the document
    points nowhere else), then cut to a table cell's length."""

    def shown(text: str, limit: int = MESSAGE_CHARS) -> str:
        text = str(text).replace(str(root), "WORKSPACE")
        return text if len(text) <= limit else text[: limit - 1] + "…"

    result.notes = [shown(note, 2 * MESSAGE_CHARS) for note in result.notes]
    for figure in result.figures:
        figure.detail = shown(figure.detail)
    table = result.settings.get("table")
    if table:
        table["rows"] = [[shown(cell) for cell in row] for row in table["rows"]]


def pick(only: str, tiny: bool, control: str | None) -> list[Case]:
    if only:
        keys = only.split(",")
        unknown = [k for k in keys if k not in {c.key for c in CASES}]
        if unknown:
            known = ", ".join(c.key for c in CASES)
            raise SystemExit(f"error: --only {','.join(unknown)}: no such case (known: {known})")
        return [c for c in CASES if c.key in keys]
    if control:
        return control_cases()
    return [c for c in CASES if c.tiny] if tiny else CASES


def control_cases() -> list[Case]:
    """One data folder is enough: every data case decodes audio and holds files to lose."""
    return [DATA_CASES[0]]


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.split("\n\n")[0])
    parser.add_argument(
        "--control",
        choices=("crash", "lost"),
        help="run only this negative control (must fail)",
    )
    parser.add_argument("--only", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep the workspace (printed)")
    args = parser.parse_args(argv)
    cases = pick(args.only, args.tiny, args.control)
    settings: dict[str, Any] = {"tiny": args.tiny, "control": args.control}
    settings["cases"] = [c.key for c in cases]
    key, title = "bad_inputs", TITLE
    if args.control:
        key, title = f"bad_inputs_{args.control}", f"{TITLE} (negative control: {args.control})"
    result = common.start_result(key, title, settings)
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="vega-badin-"))
    try:
        wrapper = [WRAPPER, args.control] if args.control else []
        report(result, run_cases(root / "drill", cases, args.tiny or bool(args.control), wrapper))
        if args.control is None and not args.tiny and not args.only:
            for name in ("crash", "lost"):
                found = run_cases(root / name, control_cases(), True, [WRAPPER, name])
                report_control(name, found, result)
    finally:
        if args.keep:
            print(f"workspace kept: {root}")
        else:
            release(root)
            shutil.rmtree(root, ignore_errors=True)
    hide_workspace(result, root)
    common.finish_result(result, started, args.out)
    return 0 if all(f.met is not False for f in result.figures) else 1


if __name__ == "__main__":
    sys.exit(main())
