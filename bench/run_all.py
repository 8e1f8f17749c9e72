"""Run every benchmark and rewrite the generated part of docs/benchmarks.md (`bench/run_all` calls this).

    bench/run_all                 every benchmark with its documented settings (under 30 minutes)
    bench/run_all --tiny          every benchmark once on smoke settings (what tests/test_bench.py runs)
    bench/run_all --only preload,dashboard
    bench/run_all --render-only   rewrite the document from the JSON results already in --out

Each benchmark runs as its own process (`python bench/<script>.py ...`), one after the other, the
ten-minute time-budget run last so that nothing else competes with it. Results are JSON files in --out;
the document's part between the `bench:results` markers is regenerated from them, and the hand-written
analysis around it is kept.
"""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import common

DOC = common.REPO / "docs" / "benchmarks.md"
START, END = "<!-- bench:results:start -->", "<!-- bench:results:end -->"


@dataclass(frozen=True)
class Bench:
    key: str
    script: str
    full: tuple[str, ...]


# In run order: the long time-budget run goes last.
BENCHES = (
    Bench("preload", "preload_speed.py", ("--files", "300", "--repeats", "3")),
    Bench("event_cost", "event_cost.py", ("--steps", "30", "--files", "300")),
    Bench("overhead", "framework_overhead.py", ("--sizes", "lm-small,lm-tiny", "--steps", "lm-small=20,lm-tiny=300",
                                                "--warmup", "3", "--repeats", "1")),
    Bench("pipeline", "pipeline_efficiency.py", ("--models", "lm-small,tts-small", "--steps", "20", "--warmup", "2",
                                                 "--files", "300")),
    Bench("dashboard", "dashboard_speed.py", ("--lines", "1000000", "--repeats", "3", "--open-repeats", "2",
                                                 "--profile-open")),
    Bench("scale", "scale.py", ("--hours", "24", "--steps", "100", "--eval-every", "50")),
    Bench("budget", "time_budget.py", ("--hours", "0.1667",)),
)


def run_bench(bench: Bench, tiny: bool, out: Path) -> tuple[int, float]:
    """Run one benchmark script; its exit status and wall seconds."""
    argv = [sys.executable, str(common.BENCH / bench.script), *(("--tiny",) if tiny else bench.full)]
    if out != common.RESULTS:
        argv += ["--out", str(out)]
    print(f"[run_all] {bench.key}: {' '.join(argv[1:])}", flush=True)
    t0 = time.monotonic()
    status = subprocess.run(argv, cwd=common.REPO, check=False).returncode
    return status, time.monotonic() - t0


def main() -> int:
    args = parse_args()
    wanted = [b for b in BENCHES if not args.only or b.key in args.only.split(",")]
    if args.only and len(wanted) != len(args.only.split(",")):
        known = ", ".join(b.key for b in BENCHES)
        print(f"error: --only {args.only}: unknown benchmark name (known: {known})", file=sys.stderr)
        return 2
    failures, ran = [], []
    started, load = time.monotonic(), common.load_average()
    if not args.render_only:
        for bench in wanted:
            status, seconds = run_bench(bench, args.tiny, args.out)
            ran.append((bench.key, status, seconds))
            if status != 0:
                failures.append(bench.key)
    run_info = {"tiny": args.tiny, "ran": ran, "seconds": time.monotonic() - started, "load_start": load,
                "load_end": common.load_average(), "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                "command": " ".join(["bench/run_all", *sys.argv[1:]]), "out": args.out}
    write_doc(args.doc, render(args.out, run_info))
    print(f"[run_all] wrote {args.doc}" + (f"; failed: {', '.join(failures)}" if failures else ""))
    return 1 if failures else 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/run_all", description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="smoke settings: checks everything runs, in about a minute")
    parser.add_argument("--only", default="", help="comma-separated benchmark names: " + ",".join(b.key for b in BENCHES))
    parser.add_argument("--out", type=Path, default=common.RESULTS, help="folder of the JSON results")
    parser.add_argument("--doc", type=Path, default=DOC, help="the document to update (default docs/benchmarks.md)")
    parser.add_argument("--render-only", action="store_true", help="only rewrite the document from existing results")
    return parser.parse_args()


# ---------------------------------------------------------------------------------------------------------------
# The document


def write_doc(path: Path, generated: str) -> None:
    """Replace the part between the markers (or create the document around it), keeping everything else."""
    block = f"{START}\n{generated.rstrip()}\n{END}"
    text = path.read_text(encoding="utf-8") if path.is_file() else f"# Benchmarks\n\n{START}\n{END}\n"
    if START in text and END in text:
        head, _, rest = text.partition(START)
        _, _, tail = rest.partition(END)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def render(out: Path, run_info: dict) -> str:
    results = sorted((common.load_result(p) for p in out.glob("*.json")), key=lambda r: r.title)
    lines = [*render_header(results, run_info), *render_summary(results)]
    for result in results:
        lines += render_section(result)
    return "\n".join(lines) + "\n"


def render_header(results: list[common.Result], run_info: dict) -> list[str]:
    machine = results[0].machine if results else common.machine_info()
    mode = " (--tiny: smoke settings, not measurements)" if run_info["tiny"] else ""
    lines = ["## Latest figures" + mode, "", "Machine: " + machine_text(machine) + ".", ""]
    if run_info["ran"]:
        ran = ", ".join(f"{key} {seconds:.0f} s" + ("" if status == 0 else f" (exit {status})")
                        for key, status, seconds in run_info["ran"])
        lines += [
            f"Last run: `{run_info['command']}` on {run_info['date']}, {run_info['seconds'] / 60:.1f} min ({ran}); "
            f"load average (1, 5, 15 min) {load_text(run_info['load_start'])} at its start and "
            f"{load_text(run_info['load_end'])} at its end.", "",
        ]
    else:
        lines += [f"Rendered on {run_info['date']} from the results in `{shown_path(run_info['out'])}`.", ""]
    lines += [
        "Each section states when it was measured, the load average around it and its exact command. Other work "
        "shared the machine, so every ratio is measured side by side in one process and reduced with a median; "
        "absolute times are indicative only.", "",
    ]
    return lines


def shown_path(path: Path) -> str:
    resolved = Path(path).resolve()
    return str(resolved.relative_to(common.REPO)) if resolved.is_relative_to(common.REPO) else str(resolved)


def machine_text(m: dict) -> str:
    return (f"{m.get('cpu')}, {m.get('cores')} cores, {m.get('ram_gib')} GiB RAM, {m.get('os')}, Python {m.get('python')}, "
            f"torch {m.get('torch')}, Lightning {m.get('lightning')}, Textual {m.get('textual')}; no GPU")


def load_text(load: list[float]) -> str:
    return " / ".join(f"{x:.2f}" for x in load) if load else "unknown"


def met_text(met: bool | None) -> str:
    return {True: "yes", False: "**no**", None: ""}[met]


def render_summary(results: list[common.Result]) -> list[str]:
    lines = ["### Targets at a glance", "", "| section | figure | value | target | met? |", "|---|---|---|---|---|"]
    for result in results:
        for f in result.figures:
            if f.target:
                lines.append(f"| {result.title} | {f.name} | {common.format_value(f.value, f.unit)} | {f.target} | "
                             f"{met_text(f.met)} |")
    return [*lines, ""]


def render_section(result: common.Result) -> list[str]:
    lines = [f"### {result.title}", ""]
    lines.append(f"Measured {result.started} in {result.seconds:.0f} s; load average {load_text(result.load_before)} "
                 f"before, {load_text(result.load_after)} after. Command: `{result.command}`")
    lines.append("")
    if result.skipped:
        return [*lines, f"Skipped: {result.skipped}", ""]
    lines += ["| figure | value | target | met? | details | command |", "|---|---|---|---|---|---|"]
    for f in result.figures:
        detail = f.detail.replace("|", "/")
        lines.append(f"| {f.name} | {common.format_value(f.value, f.unit)} | {f.target} | {met_text(f.met)} | "
                     f"{detail} | `{result.command}` |")
    lines.append("")
    lines += [f"- {note}" for note in result.notes]
    return [*lines, ""] if result.notes else lines


if __name__ == "__main__":
    raise SystemExit(main())
