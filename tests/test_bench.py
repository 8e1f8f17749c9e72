"""Every benchmark in bench/ runs once on its smoke settings (--tiny), so none of them rots.

Each script runs in its own process (forked from an interpreter that has imported torch once:
tests/bench_processes.py) with VEGA_BENCH_DATA pointing at a temporary folder, and must
write a result whose figures are all there and numeric. The numbers themselves are not judged: a smoke
run on a shared machine measures nothing, and the figures are published by `bench/run_all`, not here.
`bench/run_all --render-only` then turns results into the document, keeping hand-written text.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench_processes import run_bench_script

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"

# script -> figure names every smoke run must report (prefixes: the names carry sizes and rates). The kill drill
# and the soak run tiny in tests/test_reliability.py, with their negative controls and closer checks.
EXPECTED = {
    "pipeline_efficiency.py": (
        "lm-small: pipeline efficiency",
        "tts-small: pipeline efficiency",
        "vocoder-small: pipeline efficiency",
        "lm-small: data-wait fraction (step events)",
    ),
    "framework_overhead.py": (
        "lm-small: Vega / raw",
        "lm-small: Lightning / raw",
        "lm-tiny: Vega / Lightning",
        "lm-tiny: control, raw / raw",
        "vocoder-small: Vega / raw",
        "vocoder-small: Vega steps/s",
    ),
    "preload_speed.py": ("Vega cold vs naive librosa loop", "cache hit vs cold", "Vega cold: real-time factor"),
    "event_cost.py": ("demo (TTS): EventHub.emit", "lm-small: MemoryGuard.observe", "event log at 1000 steps/s"),
    "dashboard_speed.py": (
        "first frame of vega-tui",
        "open a 20,000-line events.jsonl",
        "peak RSS of vega-tui",
        "key-press latency while following",
        "vega-tui CPU while following a live",
    ),
    "redraw_ratio.py": (
        "redraw time, 10,000 points / 1,000 points",
        "redraw at 10,000 points",
        "negative control (full-history downsampling)",
    ),
    "vocoder_quality.py": ("Griffin-Lim: mel L1 (the reference)", "vocoder-small, end of the budget: mel L1"),
    "time_budget.py": (
        "demo, 0.24 min, quiet: whole job against the target",
        "demo, 0.24 min, quiet: free-running evaluation, share of wall time",
    ),
    "demo_run.py": (
        "demo: best checkpoint's place in the run",
        "demo: last validation / best",
        "negative control (16 clips, same steps)",
    ),
    "finetune.py": (
        "fine-tuned from the demo voice / from scratch: best mel loss",
        "negative control (from an untrained base) / from scratch",
        "from scratch: mean best mel loss",
    ),
    "scale.py": (
        "scan, cold",
        "scan, warm",
        "preload, cold",
        "preload, cache hit",
        "peak RSS of a trainer",
        "demo: spawn to first step, cold",
        "demo: spawn to first step, warm",
        "tts-small: spawn to first step, warm",
        "demo: share of wall time in validation passes",
        "demo: share of wall time validating, samples included",
        "tts-small: share of wall time in validation passes",
        "demo, no cap (negative control): share of wall time in validation passes",
    ),
    "synth_speed.py": (
        "cold: one sentence, spawn to wav written",
        "negative control: cold with librosa",
        "batch: sentences per second",
        "batch, book sentences: seconds of speech",
        "synth --text-file end to end",
    ),
    "common_voice_scale.py": (
        "scan, cold",
        "scan, warm",
        "preload, cold",
        "preload, cache hit",
        "mms-finetune: spawn to first step, warm caches",
        "negative control: warm start with the wave cache emptied",
        "trainer memory, cold start",
        "trainer memory, warm start",
        "waves kept on disk",
    ),
    "piper_step.py": (
        "Piper step time (its Lightning loop)",
        "Vega / Piper step time",
        "Vega / Piper, 95 % interval (top)",
        "Vega steps/s",
        "Piper steps/s",
        "negative control",
        "where a Vega step goes",
        "where a Piper step goes",
        "model parameters",
        "machine load during the pairs",
    ),
    "learning.py": (
        "demo, before: free-running distance",
        "demo, after: free-running distance",
        "demo: after / before",
        "demo, after with the transformer decoder: free-running distance",
        "demo, after with twice the budget / before",  # the smoke run trains it whatever the ratio
        'demo, after with model.size = "auto": free-running distance',
        "demo: floor (recordings through Griffin-Lim)",
        "demo, negative control",
        "wrong sentence (another recording, through Griffin-Lim)",
    ),
}
KEYS = {
    "pipeline_efficiency.py": "pipeline",
    "framework_overhead.py": "overhead",
    "preload_speed.py": "preload",
    "event_cost.py": "event_cost",
    "dashboard_speed.py": "dashboard",
    "redraw_ratio.py": "redraw_ratio",
    "time_budget.py": "budget",
    "scale.py": "scale",
    "synth_speed.py": "synth",
    "learning.py": "learning",
    "vocoder_quality.py": "vocoder",
    "demo_run.py": "demo_run",
    "finetune.py": "finetune",
    "common_voice_scale.py": "common_voice",
    "piper_step.py": "piper_step",
}
# Scripts with a GPU section written to a result of its own: skipped, with its reason, where CUDA is missing.
GPU_RESULTS = {"piper_step.py": "piper_step_gpu"}
# Scripts that write a second result: its key and the figures it must report.
SECOND = {
    "framework_overhead.py": (
        "overhead_mms",
        ("mms: Vega / raw", "mms: Vega / raw, 95 % interval", "mms, negative control"),
    ),
    "learning.py": (
        "sizing",
        (
            "lm-small as shipped: bits per byte",
            'lm-small, model.size = "auto": bits per byte',
            'negative control: model.size = "auto"',
        ),
    ),
}


# Sections run as smoke tests of their own: (script, section) -> the result's key and figures.
SECTIONS = {
    ("vits_learning.py", "learning"): (
        "vits_learning",
        (
            "vits-small: free-running distance",
            "tts-small + vocoder-small: free-running distance",
            "tts-small through Griffin-Lim: free-running distance",
            "vits-small / tts-small + vocoder-small",
            "floor: vits-small's decoder",
            "floor: the recordings' mels through vocoder-small",
            "floor: the recordings' mels through Griffin-Lim",
            "wrong sentence (another recording)",
            "negative control (vits-small stopped at step 2)",
        ),
    ),
    ("vits_learning.py", "warm"): (
        "vits_warm",
        (
            "warm start (from the English base), seed 1: validation mel loss",
            "from scratch, seed 1: free-running distance",
            "negative control (from an untrained base): mean validation mel loss",
            "warm start (from the English base) beats scratch: seeds won, validation mel loss",
            "warm start (from the English base) beats scratch: seeds won, free-running distance",
            "negative control (from an untrained base) beats scratch: seeds won",
        ),
    ),
}


def bench_env(data: Path) -> dict[str, str]:
    return {
        **os.environ,
        "VEGA_BENCH_DATA": str(data),
        "VEGA_CONFIG_DIR": str(data / "config"),
        "NUMBA_CACHE_DIR": os.environ.get("NUMBA_CACHE_DIR", str(REPO / ".cache" / "numba")),
    }


def run_script(script: str, data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_bench_script(BENCH / script, list(args), bench_env(data), REPO, timeout=240)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_benchmark_runs_on_smoke_settings(script: str, tmp_path: Path) -> None:
    done = run_script(script, tmp_path, "--tiny")
    assert done.returncode == 0, f"{script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    check_result(script, tmp_path, KEYS[script], EXPECTED[script])
    if script in SECOND:
        check_result(script, tmp_path, *SECOND[script])
    if script in GPU_RESULTS:
        check_gpu_result(script, tmp_path, GPU_RESULTS[script])
    # Scratch folders are cleaned up; only data worth keeping (generated corpora, logs) and results remain.
    leftovers = [
        p.name
        for p in tmp_path.iterdir()
        if p.name.split("-")[0]
        in {"pipeline", "overhead", "preload", "events", "growth", "dashboard", "budget", "scale", "learning", "sizing"}
        | {"demo", "finetune", "common", "piperstep"}
    ]
    assert not leftovers, leftovers


@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", sorted({script for script, _ in SECTIONS}))
def test_benchmark_sections_run_on_smoke_settings(script: str, tmp_path: Path) -> None:
    """A script's sections run in one smoke process (one start, one import of torch) and each reports."""
    sections = sorted(section for name, section in SECTIONS if name == script)
    args = f"--tiny --sections {','.join(sections)}"
    done = run_script(script, tmp_path, *args.split())
    output = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"{script} {args} failed:\n{output}"
    for section in sections:
        check_result(script, tmp_path, *SECTIONS[(script, section)], args=args)
    scratch = ("vitslearn-", "vitswarm-")
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(scratch)]


def check_result(
    script: str,
    tmp_path: Path,
    key: str,
    expected: tuple[str, ...],
    args: str = "--tiny",
) -> None:
    result = json.loads((tmp_path / "results" / f"{key}.json").read_text(encoding="utf-8"))
    assert result["command"].endswith(f"bench/{script} {args}")
    assert result["machine"]["cores"] >= 1 and result["machine"]["torch"]
    if result["skipped"]:
        pytest.skip(f"{script}: {result['skipped']}")
    names = [f["name"] for f in result["figures"]]
    for wanted in expected:
        assert any(name.startswith(wanted) for name in names), f"{script} did not report {wanted!r}: {names}"
    for figure in result["figures"]:
        value = figure["value"]
        if figure["target"]:
            assert isinstance(figure["met"], bool), figure
            assert value is not None and math.isfinite(value), figure
    failed = [note for note in result["notes"] if "measurement failed" in note]
    assert not failed, failed


def check_gpu_result(script: str, tmp_path: Path, key: str) -> None:
    """A GPU section reports where there is CUDA and says why it did not run where there is none."""
    result = json.loads((tmp_path / "results" / f"{key}.json").read_text(encoding="utf-8"))
    if result["skipped"]:
        assert "CUDA" in result["skipped"] and not result["figures"], result
        return
    check_result(script, tmp_path, key, ("bf16 vs Piper's default (fp32): Vega / Piper step time",))


def sample_result(key: str, title: str, value: float, met: bool) -> dict:
    return {
        "key": key,
        "title": title,
        "command": f".venv/bin/python bench/{key}.py --x 1",
        "figures": [
            {"name": f"{key} ratio", "value": value, "unit": "x", "target": ">= 5x", "met": met, "detail": "a | b"}
        ],
        "notes": [f"{key} note"],
        "settings": {},
        "machine": {"cpu": "Test CPU", "cores": 2, "ram_gib": 8.0, "torch": "2.13.0", "lightning": None},
        "started": "2026-01-01T00:00:00+00:00",
        "seconds": 1.0,
        "load_before": [1.0, 1.0, 1.0],
        "load_after": [2.0, 2.0, 2.0],
        "skipped": None,
    }


def test_render_rewrites_only_the_generated_part(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "a.json").write_text(json.dumps(sample_result("a", "1. First", 6.0, True)))
    (results / "b.json").write_text(json.dumps(sample_result("b", "2. Second", 1.5, False)))
    doc = tmp_path / "benchmarks.md"
    doc.write_text(
        "# Benchmarks\n\nIntro by hand.\n\n<!-- bench:results:start -->\nold figures\n"
        "<!-- bench:results:end -->\n\n## Analysis\n\nKept by hand.\n"
    )
    argv = [str(BENCH / "run_all"), "--render-only", "--out", str(results), "--doc", str(doc)]
    done = subprocess.run(argv, cwd=REPO, env=bench_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    text = doc.read_text()
    assert "Intro by hand." in text and "Kept by hand." in text and "old figures" not in text
    assert "| 1. First | a ratio | 6 x | >= 5x | yes |" in text
    assert "| 2. Second | b ratio | 1.5 x | >= 5x | **no** |" in text
    assert "`.venv/bin/python bench/b.py --x 1`" in text and "Test CPU, 2 cores" in text
    assert "a / b" in text, "a | inside a cell must not split the table"


def test_a_result_records_the_commit_it_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import machine

    assert re.fullmatch(r"[0-9a-f]{40}( dirty)?", machine.git_commit())


def test_run_all_rejects_an_unknown_benchmark(tmp_path: Path) -> None:
    argv = [str(BENCH / "run_all"), "--only", "nonsense", "--out", str(tmp_path), "--doc", str(tmp_path / "d.md")]
    done = subprocess.run(argv, cwd=REPO, env=bench_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "unknown benchmark name" in done.stderr and "preload" in done.stderr


def test_render_keeps_sections_whose_results_are_absent(tmp_path: Path) -> None:
    """`--only X` on a fresh clone has X's result alone: the other sections and their summary rows stay."""
    results = tmp_path / "results"
    results.mkdir()
    (results / "a.json").write_text(json.dumps(sample_result("a", "1. First", 6.0, True)))
    b = {**sample_result("b", "2. Second", 1.5, False), "commit": "abc1 dirty"}
    (results / "b.json").write_text(json.dumps(b))
    doc = tmp_path / "benchmarks.md"
    argv = [str(BENCH / "run_all"), "--render-only", "--out", str(results), "--doc", str(doc)]
    env = bench_env(tmp_path)
    assert subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60).returncode == 0
    (results / "b.json").unlink()
    (results / "a.json").write_text(json.dumps(sample_result("a", "1. First", 7.0, True)))
    (results / "c.json").write_text(json.dumps(sample_result("c", "10. Tenth", 9.0, True)))
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    text = doc.read_text()
    assert "| 1. First | a ratio | 7 x | >= 5x | yes |" in text and "| 1. First | a ratio | 6 x" not in text
    assert "| 2. Second | b ratio | 1.5 x | >= 5x | **no** |" in text, "the absent benchmark's summary row is kept"
    assert "`.venv/bin/python bench/b.py --x 1`" in text, "the absent benchmark's section is kept"
    # A kept section shows the date and commit it measured; a result without a commit says so.
    kept = "Kept from earlier runs (no result file this time): 2. Second (measured 2026-01-01, abc1 dirty)."
    assert kept in text
    assert "Measured 2026-01-01T00:00:00+00:00 at commit abc1 dirty in 1 s" in text
    assert "Measured 2026-01-01T00:00:00+00:00 (commit not recorded) in 1 s" in text
    order = [text.index(f"### {title}") for title in ("1. First", "2. Second", "10. Tenth")]
    assert order == sorted(order), "sections sort by their number, 10 after 2"


# The bad-input drill (bench/bad_inputs.py): its five quick cases, and each negative control, which
# must fail on its own counter: (arguments, exit status, result key, counters that must be 0, the
# counter that must trip).
BAD_INPUT_RUNS = {
    "tiny": (["--tiny"], 0, "bad_inputs", ("crashes", "data lost", "unhandled"), None),
    "crash": (["--control", "crash"], 1, "bad_inputs_crash", ("data lost",), "crashes"),
    "lost": (["--control", "lost"], 1, "bad_inputs_lost", ("crashes",), "data lost"),
}


@pytest.mark.timeout(300)
def test_the_bad_input_drill_counts_crashes_and_lost_data_and_its_controls_trip(
    tmp_path: Path,
) -> None:
    argv = [sys.executable, str(BENCH / "bad_inputs.py")]
    started = {}
    for name, (args, *_) in BAD_INPUT_RUNS.items():
        out = tmp_path / name
        started[name] = subprocess.Popen(
            [*argv, *args, "--out", str(out)],
            cwd=REPO,
            env=bench_env(tmp_path / f"{name}-data"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    for name, (_, status, key, zero, tripped) in BAD_INPUT_RUNS.items():
        output = started[name].communicate(timeout=240)[0]
        assert started[name].returncode == status, f"{name}:\n{output[-3000:]}"
        result = json.loads((tmp_path / name / f"{key}.json").read_text(encoding="utf-8"))
        figures = {f["name"].split(" (")[0]: f for f in result["figures"]}
        for counter in zero:
            found = figures[counter]
            assert found["value"] == 0 and found["met"], (name, found)
        if tripped is not None:
            found = figures[tripped]
            assert found["value"] >= 1 and found["met"] is False, (name, found)
    tiny = json.loads((tmp_path / "tiny" / "bad_inputs.json").read_text(encoding="utf-8"))
    rows = tiny["settings"]["table"]["rows"]
    assert len(rows) == 5 and {row[3] for row in rows} <= {"skip", "error"}, rows
    assert any("non-finite samples" in row[4] for row in rows)
    assert any("malformed line" in row[4] for row in rows)
    crash = json.loads((tmp_path / "crash" / "bad_inputs_crash.json").read_text(encoding="utf-8"))
    assert any("ZeroDivisionError: injected" in note for note in crash["notes"]), crash["notes"]
    doc = tmp_path / "reliability.md"
    render = [sys.executable, str(BENCH / "run_all.py"), "--render-only"]
    render += ["--out", str(tmp_path / "tiny"), "--doc", str(tmp_path / "b.md")]
    render += ["--reliability-doc", str(doc)]
    done = subprocess.run(render, cwd=REPO, env=bench_env(tmp_path), timeout=60)
    assert done.returncode == 0
    text = doc.read_text(encoding="utf-8")
    assert "| input | what was fed | command | outcome | first line of the message |" in text
    assert "bad inputs tried 5, crashes 0, data lost 0" in text and "WORKSPACE" in text


def test_reliability_render_keeps_the_soak_when_only_the_kill_drill_ran(tmp_path: Path) -> None:
    """`bench/run_all --only kill` has kill.json alone: the soak's sections stay, in their place,
    and say so."""
    results, doc = tmp_path / "results", tmp_path / "reliability.md"
    results.mkdir()
    (results / "kill.json").write_text(json.dumps(sample_result("kill", "Kill drill", 2.0, True)))
    (results / "soak.json").write_text(json.dumps(sample_result("soak", "Soak", 3.0, True)))
    argv = [str(BENCH / "run_all"), "--render-only", "--out", str(results)]
    argv += ["--doc", str(tmp_path / "b.md"), "--reliability-doc", str(doc)]

    def render() -> int:
        env = bench_env(tmp_path)
        return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, timeout=60).returncode

    assert render() == 0
    (results / "soak.json").unlink()
    (results / "kill.json").write_text(json.dumps(sample_result("kill", "Kill drill", 5.0, True)))
    assert render() == 0
    text = doc.read_text()
    assert "| kill ratio | 5 x |" in text and "| kill ratio | 2 x |" not in text
    assert "| soak ratio | 3 x |" in text
    kept = "Kept from earlier runs (no result file this time): Soak (measured 2026-01-01, commit not recorded)."
    assert kept in text
    assert text.index("### Kill drill") < text.index("### Soak")
