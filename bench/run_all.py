"""Run every benchmark and rewrite the generated part of docs/benchmarks.md
(`bench/run_all` calls this).

    bench/run_all                 every benchmark with its documented settings (about 4 hours: the
                                  learning benchmarks train 12 minutes per variant; --only skips
                                  them)
    bench/run_all --tiny          every benchmark once on smoke settings (what tests/test_bench.py
                                  runs)
    bench/run_all --only preload,dashboard   rerun those; the other sections of the document are
                                             kept
    bench/run_all --render-only   rewrite the document from the JSON results already in --out

Each benchmark runs as its own process (`python bench/<script>.py ...`), one after the other, the
ten-minute time-budget run last so that nothing else competes with it. Results are JSON files in
--out; the document's part between the `bench:results` markers is regenerated from them, and the
hand-written analysis around it is kept. Each section shows the date and commit its result measured;
sections kept from earlier runs are listed with theirs ("commit not recorded" for results from
before commits were recorded).
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
# Results rendered into docs/reliability.md (between the same markers)
# instead of docs/benchmarks.md.
RELIABILITY_DOC = common.REPO / "docs" / "reliability.md"
# The soak (bench/soak.py) is not in BENCHES (30 minutes alone); its results
# are rendered when present.
RELIABILITY_KEYS = ("kill", "soak", "soak_control", "bad_inputs")
# Results with a document of their own, left out of docs/benchmarks.md
# (bench/gpu_check writes docs/gpu.md).
OWN_DOC_KEYS = (*RELIABILITY_KEYS, "bad_inputs_crash", "bad_inputs_lost", "gpu")


@dataclass(frozen=True)
class Bench:
    key: str
    script: str
    full: tuple[str, ...]
    # arguments for both the full and the --tiny run (which part of a script)
    shared: tuple[str, ...] = ()


# In run order: the long budgeted runs go last.
BENCHES = (
    Bench("preload", "preload_speed.py", ("--files", "300", "--repeats", "3")),
    Bench("event_cost", "event_cost.py", ("--steps", "30", "--files", "300")),
    Bench(
        "overhead",
        "framework_overhead.py",
        (
            "--sizes",
            "lm-small,lm-tiny,vocoder-small",
            "--steps",
            "lm-small=20,lm-tiny=300,vocoder-small=25",
            "--warmup",
            "3",
            "--repeats",
            "1",
        ),
    ),
    Bench(
        "pipeline",
        "pipeline_efficiency.py",
        (
            "--models",
            "lm-small,tts-small,vocoder-small",
            "--steps",
            "20",
            "--warmup",
            "2",
            "--files",
            "300",
        ),
    ),
    Bench(
        "dashboard",
        "dashboard_speed.py",
        ("--lines", "1000000", "--repeats", "3", "--open-repeats", "2", "--profile-open"),
    ),
    Bench("redraw_ratio", "redraw_ratio.py", ("--points", "1000000", "--repeats", "15")),
    Bench("scale", "scale.py", ("--hours", "24", "--steps", "100", "--eval-every", "50")),
    Bench(
        "synth", "synth_speed.py", ("--sentences", "40", "--train-steps", "20", "--repeats", "5")
    ),
    Bench("bad_inputs", "bad_inputs.py", ()),
    Bench("demo_run", "demo_run.py", ()),
    Bench("finetune", "finetune.py", ("--steps", "150", "--eval-every", "25")),
    Bench("common_voice", "common_voice_scale.py", ("--clips", "42000")),
    Bench(
        "overhead_mms",
        "framework_overhead.py",
        ("--sizes", "mms", "--steps", "mms=8", "--warmup", "1", "--repeats", "3"),
    ),
    Bench(
        "piper_step",
        "piper_step.py",
        ("--steps", "24", "--warmup", "2", "--repeats", "2", "--batch", "2"),
    ),
    Bench("kill", "kill_loop.py", ("--kills", "36")),
    Bench("budget", "time_budget.py", ("--busy", "--minutes", "3")),
    Bench(
        "budget_long",
        "time_budget.py",
        ("--busy", "--minutes", "15", "--key", "budget_long", "--no-controls"),
    ),
    Bench("vocoder", "vocoder_quality.py", ("--minutes", "30")),
    Bench("sizing", "learning.py", ("--lm-minutes", "4"), ("--sections", "lm")),
    Bench("learning", "learning.py", ("--minutes", "12"), ("--sections", "voice")),
    Bench("vits_learning", "vits_learning.py", ("--minutes", "12"), ("--sections", "learning")),
    Bench(
        "vits_warm",
        "vits_learning.py",
        ("--base-minutes", "5", "--steps", "120", "--seeds", "3"),
        ("--sections", "warm"),
    ),
)


def run_bench(bench: Bench, tiny: bool, out: Path) -> tuple[int, float]:
    """Run one benchmark script; its exit status and wall seconds."""
    argv = [
        sys.executable,
        str(common.BENCH / bench.script),
        *(("--tiny",) if tiny else bench.full),
        *bench.shared,
    ]
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
        print(
            f"error: --only {args.only}: unknown benchmark name (known: {known})", file=sys.stderr
        )
        return 2
    failures, ran = [], []
    started, load = time.monotonic(), common.load_average()
    if not args.render_only:
        for bench in wanted:
            status, seconds = run_bench(bench, args.tiny, args.out)
            ran.append((bench.key, status, seconds))
            if status != 0:
                failures.append(bench.key)
    run_info = {
        "tiny": args.tiny,
        "ran": ran,
        "seconds": time.monotonic() - started,
        "load_start": load,
        "load_end": common.load_average(),
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join(["bench/run_all", *sys.argv[1:]]),
        "out": args.out,
    }
    write_doc(args.doc, render(args.out, run_info, generated_part(args.doc)))
    print(f"[run_all] wrote {args.doc}" + (f"; failed: {', '.join(failures)}" if failures else ""))
    reliability = render_reliability(args.out, run_info, generated_part(args.reliability_doc))
    if reliability is not None:
        write_doc(args.reliability_doc, reliability)
        print(f"[run_all] wrote {args.reliability_doc}")
    return 1 if failures else 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/run_all", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="smoke settings: checks everything runs, in about a minute",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated benchmark names: " + ",".join(b.key for b in BENCHES),
    )
    parser.add_argument(
        "--out", type=Path, default=common.RESULTS, help="folder of the JSON results"
    )
    parser.add_argument(
        "--doc", type=Path, default=DOC, help="the document to update (default docs/benchmarks.md)"
    )
    parser.add_argument(
        "--reliability-doc",
        type=Path,
        default=RELIABILITY_DOC,
        help=(
            "where the kill drill's and the soak's results are rendered (default"
            " docs/reliability.md)"
        ),
    )
    parser.add_argument(
        "--render-only", action="store_true", help="only rewrite the document from existing results"
    )
    return parser.parse_args()


# --------------------------------------------------------------------------------------------------
# The document


def generated_part(path: Path) -> str:
    """The text between the markers of an existing document ("" when there is none)."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    return text.partition(START)[2].partition(END)[0] if START in text and END in text else ""


def write_doc(path: Path, generated: str) -> None:
    """Replace the part between the markers (or create the document around
    it), keeping everything else."""
    block = f"{START}\n{generated.rstrip()}\n{END}"
    text = (
        path.read_text(encoding="utf-8") if path.is_file() else f"# Benchmarks\n\n{START}\n{END}\n"
    )
    if START in text and END in text:
        head, _, rest = text.partition(START)
        _, _, tail = rest.partition(END)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def render(out: Path, run_info: dict, earlier: str = "") -> str:
    """The generated part: sections of the results in `out`, plus the sections of
    `earlier` (the document's previous generated part) whose benchmark has no result file
    now, so `--only X` rewrites X alone."""
    found = (common.load_result(p) for p in out.glob("*.json"))
    results = sorted(
        (r for r in found if r.key not in OWN_DOC_KEYS), key=lambda r: title_order(r.title)
    )
    kept_sections, kept_rows = earlier_sections(earlier, {r.title for r in results})
    rows = [(r.title, row) for r in results for row in summary_rows(r)] + kept_rows
    sections = [(r.title, render_section(r)) for r in results] + list(kept_sections.items())
    lines = render_header(results, run_info)
    lines += kept_line(kept_sections)
    lines += [*SUMMARY_HEAD, *(row for _, row in sorted(rows, key=lambda x: title_order(x[0]))), ""]
    for _, section in sorted(sections, key=lambda x: title_order(x[0])):
        # A kept section lost its trailing blank line at the end marker: keep headings apart.
        lines += [*section, ""] if section and section[-1].strip() else section
    return "\n".join(lines) + "\n"


def render_reliability(out: Path, run_info: dict, earlier: str = "") -> str | None:
    """The generated part of docs/reliability.md: the kill drill's and the soak's results, or None
    when `out` has none of them. Sections of `earlier` (the previous part) without a result now are
    kept, in their place: the 30-minute soak is rarely rerun with the drill."""
    paths = [out / f"{key}.json" for key in RELIABILITY_KEYS if (out / f"{key}.json").is_file()]
    if not paths:
        return None
    results = {r.title: r for r in (common.load_result(p) for p in paths)}
    kept, _ = earlier_sections(earlier, set(results))
    lines = [
        f"Rendered by `bench/run_all` on {run_info['date']} from `{shown_path(run_info['out'])}`. "
        "Machine: " + machine_text(next(iter(results.values())).machine) + ".",
        "",
    ]
    lines += kept_line(kept)
    order = [line[4:].strip() for line in earlier.splitlines() if line.startswith("### ")]
    order += [title for title in results if title not in order]
    for title in order:
        section = render_section(results[title]) if title in results else kept.get(title, [])
        lines += [*section, ""] if section and section[-1].strip() else section
    return "\n".join(lines) + "\n"


NO_COMMIT = "commit not recorded"


def measured_line(result: common.Result) -> str:
    commit = f"at commit {result.commit}" if result.commit else f"({NO_COMMIT})"
    return (
        f"Measured {result.started} {commit} in {result.seconds:.0f} s; load average"
        f" {load_text(result.load_before)} before, {load_text(result.load_after)} after. Command:"
        f" `{result.command}`"
    )


def stamp_of(section: list[str]) -> str:
    """A kept section's date and commit, read from its "Measured" line
    ("date unknown" without one)."""
    line = next((x for x in section if x.startswith("Measured ")), "")
    date = line.split()[1][:10] if line else "date unknown"
    commit = (
        line.partition(" at commit ")[2].partition(" in ")[0]
        if " at commit " in line
        else NO_COMMIT
    )
    return f"measured {date}, {commit}"


def kept_line(kept: dict[str, list[str]]) -> list[str]:
    """The list of sections carried from earlier runs, each with the date and commit it measured."""
    if not kept:
        return []
    for section in kept.values():  # sections rendered before commits were recorded say so
        for i, line in enumerate(section):
            if line.startswith("Measured ") and " at commit " not in line and NO_COMMIT not in line:
                date, _, rest = line[len("Measured ") :].partition(" ")
                section[i] = f"Measured {date} ({NO_COMMIT}) {rest}"
    shown = ", ".join(f"{title} ({stamp_of(section)})" for title, section in kept.items())
    return [f"Kept from earlier runs (no result file this time): {shown}.", ""]


def title_order(title: str) -> tuple[int, str]:
    """Sections sort by their leading number ("10. X" after "9. Y"), then by name."""
    number, _, _ = title.partition(".")
    return (int(number), title) if number.isdigit() else (10**6, title)


def earlier_sections(
    block: str, fresh: set[str]
) -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """From a previous generated part: its sections (title -> lines) and summary rows (title, row),
    leaving out the titles in `fresh` and the per-run header, which are rendered anew."""
    sections: dict[str, list[str]] = {}
    rows: list[tuple[str, str]] = []
    title = ""
    for line in block.splitlines():
        if line.startswith("### "):
            title = line[4:].strip()
            if title != SUMMARY_TITLE and title not in fresh:
                sections[title] = []
        elif line.startswith("## "):
            title = ""
        if title == SUMMARY_TITLE:
            cell = line.split("|")[1].strip() if line.startswith("| ") else ""
            if cell and cell != "section" and cell not in fresh:
                rows.append((cell, line))
        elif title in sections:
            sections[title].append(line)
    return sections, rows


def render_header(results: list[common.Result], run_info: dict) -> list[str]:
    machine = results[0].machine if results else common.machine_info()
    mode = " (--tiny: smoke settings, not measurements)" if run_info["tiny"] else ""
    lines = ["## Latest figures" + mode, "", "Machine: " + machine_text(machine) + ".", ""]
    if run_info["ran"]:
        ran = ", ".join(
            f"{key} {seconds:.0f} s" + ("" if status == 0 else f" (exit {status})")
            for key, status, seconds in run_info["ran"]
        )
        lines += [
            (
                f"Last run: `{run_info['command']}` on {run_info['date']},"
                f" {run_info['seconds'] / 60:.1f} min ({ran}); load average (1, 5, 15 min)"
                f" {load_text(run_info['load_start'])} at its start and"
                f" {load_text(run_info['load_end'])} at its end."
            ),
            "",
        ]
    else:
        lines += [
            f"Rendered on {run_info['date']} from the results in `{shown_path(run_info['out'])}`.",
            "",
        ]
    lines += [
        (
            "Each section states when it was measured, the load average around it and its exact"
            " command. Other work shared the machine, so every ratio is measured side by side in"
            " one process and reduced with a median; absolute times are indicative only."
        ),
        "",
    ]
    return lines


def shown_path(path: Path) -> str:
    resolved = Path(path).resolve()
    return (
        str(resolved.relative_to(common.REPO))
        if resolved.is_relative_to(common.REPO)
        else str(resolved)
    )


def machine_text(m: dict) -> str:
    # Results from before the GPU was recorded come from machines without one.
    gpu = f"GPU {m['gpu']}" if m.get("gpu") else "no GPU"
    return (
        f"{m.get('cpu')}, {m.get('cores')} cores, {m.get('ram_gib')} GiB RAM, {m.get('os')}, Python"
        f" {m.get('python')}, torch {m.get('torch')}, Lightning {m.get('lightning')}, Textual"
        f" {m.get('textual')}; {gpu}"
    )


def load_text(load: list[float]) -> str:
    return " / ".join(f"{x:.2f}" for x in load) if load else "unknown"


def met_text(met: bool | None) -> str:
    return {True: "yes", False: "**no**", None: ""}[met]


SUMMARY_TITLE = "Targets at a glance"
SUMMARY_HEAD = [
    f"### {SUMMARY_TITLE}",
    "",
    "| section | figure | value | target | met? |",
    "|---|---|---|---|---|",
]


def summary_rows(result: common.Result) -> list[str]:
    return [
        f"| {result.title} | {f.name} | {common.format_value(f.value, f.unit)} | {f.target} |"
        f" {met_text(f.met)} |"
        for f in result.figures
        if f.target
    ]


def render_section(result: common.Result) -> list[str]:
    lines = [f"### {result.title}", ""]
    lines.append(measured_line(result))
    lines.append("")
    if result.skipped:
        return [*lines, f"Skipped: {result.skipped}", ""]
    lines += ["| figure | value | target | met? | details | command |", "|---|---|---|---|---|---|"]
    for f in result.figures:
        detail = f.detail.replace("|", "/")
        lines.append(
            f"| {f.name} | {common.format_value(f.value, f.unit)} | {f.target} | {met_text(f.met)}"
            f" | {detail} | `{result.command}` |"
        )
    lines.append("")
    lines += [f"- {note}" for note in result.notes]
    lines += [""] if result.notes else []
    return [*lines, *settings_table(result.settings.get("table"))]


def settings_table(table: dict | None) -> list[str]:
    """A result's own table (settings["table"]: "head" and "rows"), as markdown."""
    if not table:
        return []

    def row(cells: list) -> str:
        shown = (str(cell).replace("|", "/").replace("\n", " ") for cell in cells)
        return "| " + " | ".join(shown) + " |"

    rule = "|" + "---|" * len(table["head"])
    return [row(table["head"]), rule, *(row(r) for r in table["rows"]), ""]


if __name__ == "__main__":
    raise SystemExit(main())
