"""The example task outside the package (examples/custom_task, a 1-D convolutional denoiser built on
trainer_core.api): a valid installable package; trained headless by `trainer-core train` with its profile and the
machine file allowing it, resumed exactly, under two gloo ranks, and from the dashboard's launch screen; and
docs/custom-tasks.md shows its files exactly as they are and its commands run. The two-rank run and the
dashboard's start from a working folder holding a same-named `vega_denoise` shadow package (test_task_shadowing):
neither the trainer, torchrun's workers nor the dashboard's launch may import it.

The package is put on PYTHONPATH for the trainer subprocesses rather than pip-installed (the test must not change
the environment it runs in); `test_the_example_is_a_valid_package` checks what `pip install -e` would read.
"""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from conftest import FAULTS_ON, REPO, TEST_VOICE, TrainerLauncher, finished, of_type, set_args, step_rows
from test_task_shadowing import shadow_package
from trainer_core.contract.eventlog import read_all
from trainer_core.contract.profile_loader import resolve_profile
from trainer_core.contract.protocol import Event
from trainer_core.contract.task_source import allowed_by
from vega_tui.store import RunStore
from vega_tui.widgets.charts import parts_chart, validation_chart, validation_wanted

EXAMPLE = REPO / "examples" / "custom_task"
SRC = EXAMPLE / "src"
TASK_FILE = SRC / "vega_denoise" / "task.py"
DOC = REPO / "docs" / "custom-tasks.md"
SPEC = "vega_denoise.task:factory"
CUSTOM_LOSSES = {"wave_l1", "mel_l1"}
# Seconds-long runs on the tests' 40-clip voice: tiny schedules, one thread, the CPU.
FAST: dict[str, Any] = {
    "train.max_steps": 16,
    "train.warmup_steps": 2,
    "train.eval_every_steps": 8,
    "compute.mode": "cpu",
    "compute.num_threads": 1,
    "logging.step_interval_s": 0.05,
    "logging.report": False,
}
SLOW = {**FAULTS_ON, "VEGA_FAULT_STEP_SLEEP_S": "0.1"}
DIGEST = re.compile(r"parameter digest of rank (\d+) of 2 .*: ([0-9a-f]{64})")


# ---------------------------------------------------------------------------------------------------------------
# The document's blocks


def doc_blocks() -> list[tuple[str, str]]:
    """(language, text) of every fenced code block of docs/custom-tasks.md, in order."""
    return re.findall(r"^```(\w+)\n(.*?)^```$", DOC.read_text(encoding="utf-8"), flags=re.S | re.M)


def doc_machine_lines() -> str:
    """The lines the document tells the reader to add to machine.toml: the tests' machine file."""
    (text,) = [text for lang, text in doc_blocks() if lang == "toml" and text.startswith("[tasks]")]
    return text


def fast(root: Path) -> dict[str, Any]:
    """The fast settings, with the feature cache in the test's own folder."""
    return {**FAST, "data.cache_dir": str(root / "cache")}


def with_path(env: dict[str, str], *folders: Path) -> dict[str, str]:
    return {**env, "PYTHONPATH": os.pathsep.join(str(folder) for folder in folders)}


@pytest.fixture
def example(tmp_path: Path) -> Iterator[TrainerLauncher]:
    """Trainers on the example's own profile and the tests' voice, the package on PYTHONPATH, the document's
    machine lines as this machine's file, and the feature cache in the test's folder."""
    launcher = TrainerLauncher(tmp_path, TEST_VOICE)
    launcher.profile = EXAMPLE / "denoise.toml"
    launcher.env = with_path(launcher.env, REPO, SRC)
    (tmp_path / "config" / "machine.toml").write_text(doc_machine_lines(), encoding="utf-8")
    yield launcher
    launcher.close()


# ---------------------------------------------------------------------------------------------------------------
# The package


def test_the_example_is_a_valid_package() -> None:
    setuptools = pytest.importorskip("setuptools", reason="setuptools reads and validates pyproject.toml")
    from setuptools.config.pyprojecttoml import read_configuration

    config = read_configuration(EXAMPLE / "pyproject.toml")  # validates against the pyproject schema
    project = config["project"]
    assert (project["name"], project["version"], project["dependencies"]) == ("vega-denoise", "0.1.0", ["vega"])
    assert config["build-system"]["build-backend"] == "setuptools.build_meta"
    assert setuptools.find_packages(where=str(SRC)) == ["vega_denoise"]  # the src layout setuptools discovers
    init = ast.parse((SRC / "vega_denoise" / "__init__.py").read_text(encoding="utf-8"))
    assert len(init.body) == 1 and isinstance(init.body[0], ast.Expr), "the package __init__ is a docstring only"
    task = ast.parse(TASK_FILE.read_text(encoding="utf-8"))
    vega_imports = {
        node.module for node in ast.walk(task) if isinstance(node, ast.ImportFrom) and "trainer_core" in node.module
    }
    assert vega_imports == {"trainer_core"}  # `from trainer_core import api`: nothing but the public API


# ---------------------------------------------------------------------------------------------------------------
# Headless


def test_trains_headless_with_its_own_losses_samples_and_metric_and_resumes_exactly(example: TrainerLauncher) -> None:
    settings = fast(example.root)
    whole = example.start("whole", settings)
    split = example.start("split", settings, env=SLOW)
    split.wait_for_step(6)
    split.send(signal.SIGTERM)
    assert split.wait() == 0, split.stderr
    stopped = finished(split.events())
    assert stopped.status == "stopped" and 6 <= stopped.step < 16
    resumed = example.run("split", settings, "--resume", "auto", run_dir=split.run_dir)
    assert resumed.proc.returncode == 0, resumed.stderr
    assert whole.wait() == 0, whole.stderr

    events = whole.events()
    assert finished(events).status == "completed" and finished(split.events()).step == 16
    # Every step exactly once across both segments, with the same losses and learning rates.
    assert sorted(step_rows(events)) == list(range(1, 17))
    assert step_rows(split.events()) == step_rows(events)
    check_custom_run(whole.run_dir, events)


def check_custom_run(run_dir: Path, events: list[Event]) -> None:
    """The task's code, losses, metric and samples reach the events, the files and the dashboard's charts."""
    (task,) = of_type(events, "task")
    assert (task.name, task.module, task.file, task.external, task.speaks) == (
        SPEC,
        "vega_denoise.task",
        str(TASK_FILE),
        True,
        False,
    )
    assert all(set(e.losses) == {"total"} | CUSTOM_LOSSES for e in of_type(events, "step"))
    validations = of_type(events, "validation")
    assert [v.step for v in validations] == [8, 16] and all(v.metric_name == "noise_left" for v in validations)
    samples = of_type(events, "sample")
    assert [(s.step, s.kind) for s in samples] == [
        (step, kind) for step in (8, 16) for kind in ("audio", "text", "image")
    ]
    assert all(Path(s.path).is_file() and Path(s.path).stat().st_size > 0 for s in samples)
    assert Path(samples[2].path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (run_dir / "export" / "model.safetensors").is_file()
    # The dashboard's store and charts, which know nothing of this task.
    store = RunStore(run_dir=run_dir)
    store.apply(events)
    state = store.state
    assert {line.label for line in parts_chart(state).lines} == CUSTOM_LOSSES
    assert validation_wanted(state)
    chart = validation_chart(state)
    assert chart.title.startswith("noise_left ") and [line.label for line in chart.lines] == ["noise_left"]
    assert [row.kind for row in state.samples] == [s.kind for s in samples]
    assert any(f"code from vega_denoise.task ({TASK_FILE})" in line.message for line in state.logs)


def test_the_task_event_decides_between_the_speech_and_the_validation_chart() -> None:
    from trainer_core.contract.protocol import TaskEvent, ValidationEvent

    for name, speaks in (("tts", True), ("lm", False), (SPEC, False)):
        store = RunStore()
        store.apply([TaskEvent(name=name, speaks=speaks, parameters=1234)])
        assert validation_wanted(store.state) is not speaks, name
        assert store.state.task is not None and store.state.task["name"] == name
        assert [line.message for line in store.state.logs] == [f"task {name}, 1,234 parameters"]
    assert not validation_wanted(RunStore().state)  # a log written before the task event: as it always was
    # Every metric a task reports is charted: the first on the left axis, the others each on the right.
    store = RunStore()
    metrics = [{"noise_left": 0.9, "snr_db": 12.0}, {"noise_left": 0.7, "snr_db": 15.5}]
    store.apply([TaskEvent(name=SPEC, speaks=False)])
    store.apply(
        ValidationEvent(
            step=8 * n, epoch=n, loss=0.1, metric_name="noise_left", metric_value=m["noise_left"], metrics=m
        )
        for n, m in enumerate(metrics, start=1)
    )
    chart = validation_chart(store.state)
    assert [(ln.label, ln.right, ln.ys) for ln in chart.lines] == [
        ("noise_left", False, [0.9, 0.7]),
        ("snr_db", True, [12.0, 15.5]),
    ]


def test_two_gloo_ranks_train_the_example_and_end_identical(example: TrainerLauncher) -> None:
    # The launcher's working folder holds a shadow of the package; the first process runs without PYTHONSAFEPATH.
    shadow_package(example.root, "vega_denoise", example.root / "markers")
    assert "PYTHONSAFEPATH" not in example.env
    run = example.run("ddp", {**fast(example.root), "train.max_steps": 8}, "--nproc-per-node", "2")
    assert run.proc.returncode == 0, run.stderr + run.stdout
    assert not list((example.root / "markers").iterdir())  # neither rank imported the shadow
    events = run.events()
    assert finished(events).status == "completed" and finished(events).step == 8
    assert [s.kind for s in of_type(events, "sample")] == ["audio", "text", "image"]  # rank 0 wrote them
    assert all(h.world_size == 2 and h.backend == "gloo" for h in of_type(events, "hello"))
    assert [t.file for t in of_type(events, "task")] == [str(TASK_FILE)]
    assert all(e.world_size == 2 for e in of_type(events, "step"))
    logs = (run.run_dir / "trainer.log").read_text() + (run.run_dir / "trainer-rank1.log").read_text()
    digests = dict(DIGEST.findall(logs))
    assert set(digests) == {"0", "1"} and digests["0"] == digests["1"]


# ---------------------------------------------------------------------------------------------------------------
# The document


def test_the_document_shows_the_example_files_as_they_are() -> None:
    assert len(DOC.read_text(encoding="utf-8").splitlines()) < 160  # one page; the example at 100 columns
    shown = {
        text.splitlines()[0].removeprefix("# "): text for _, text in doc_blocks() if text.startswith("# examples/")
    }
    assert set(shown) == {"examples/custom_task/src/vega_denoise/task.py", "examples/custom_task/denoise.toml"}
    for path, text in shown.items():
        assert (REPO / path).read_text(encoding="utf-8") == text, f"{path} differs from what the document shows"
    assert allowed_by("vega_denoise.task", resolve_allowed(doc_machine_lines()))
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "docs/custom-tasks.md" in readme


def resolve_allowed(machine_text: str) -> list[str]:
    import tomllib

    return list(tomllib.loads(machine_text)["tasks"]["allowed"])


def doc_commands() -> list[str]:
    return [
        line[2:] for lang, text in doc_blocks() if lang == "console" for line in text.splitlines() if line[:2] == "$ "
    ]


def as_test_command(command: str, run_dir: Path) -> str | None:
    """A document command as this test runs it (None: not here), from the repository root:
    - pip install: the alternative the document gives (PYTHONPATH), then the checkout itself after it;
    - trainer-core: this interpreter's; a real run gets the fast settings, the tests' voice and its own folder;
    - vega-tui: left to test_the_dashboard_trains_the_example (it needs the pilot)."""
    if command.startswith("pip install -e examples/custom_task"):
        alternative = command.partition("# or: ")[2]
        assert alternative.startswith("export PYTHONPATH=")
        return f'{alternative} && export PYTHONPATH="$PYTHONPATH:{REPO}"'
    if command == "vega-tui":
        return None
    if command.startswith("trainer-core "):
        line = f"{sys.executable} -m trainer_core {command.removeprefix('trainer-core ')}"
        if "--dry-run" in command:
            return line
        tiny = {**fast(run_dir.parent), "train.max_steps": 4, "train.eval_every_steps": 4}
        return f"{line} --data {TEST_VOICE} --run-dir {run_dir} " + " ".join(f"'{arg}'" for arg in set_args(tiny))
    return command


def test_the_document_commands_run(tmp_path: Path) -> None:
    """Every command of the document in one shell with a fresh home folder, the machine file written as section 3
    says; then the dashboard's profile that section 5 wrote resolves to the example's task."""
    home = tmp_path / "home"
    config = home / ".config" / "vega"
    config.mkdir(parents=True)
    (config / "machine.toml").write_text(doc_machine_lines(), encoding="utf-8")
    run_dir = tmp_path / "run"
    lines = [line for c in doc_commands() if (line := as_test_command(c, run_dir)) is not None]
    assert len(lines) == 5 and doc_commands()[-1] == "vega-tui"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("VEGA_", "XDG_"))}
    env.update(HOME=str(home), OMP_NUM_THREADS="1", PYTHONPATH="", COLUMNS="250")  # the plan table unwrapped
    script = "set -e\n" + "\n".join(lines) + "\n"
    out = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"this profile runs code from vega_denoise.task ({TASK_FILE})" in out.stdout
    assert finished(read_all(run_dir / "events.jsonl")).status == "completed"
    profile = resolve_profile(config / "profiles" / "denoise.toml", machine_file=config / "machine.toml").profile
    assert profile.model.task == SPEC and profile.data.path == REPO / "trainer_core" / "demo" / "voice"


# ---------------------------------------------------------------------------------------------------------------
# The dashboard


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def wait_until(pilot: Pilot, predicate: Callable[[], bool], what: str, timeout: float = 240.0) -> None:
    """Generous: the trainer shares two cores with other tests; a wait, never a timed assertion."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await pilot.pause(0.05)
    state = getattr(pilot.app.screen, "state", None)
    seen = (
        f"; status {state.status}, step {state.step}, logs {[x.message for x in list(state.logs)[-4:]]}"
        if state
        else ""
    )
    pytest.fail(f"timed out after {timeout:g} s waiting for {what}{seen}")


def dashboard_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, allow: bool) -> Path:
    """A user config folder whose `denoise` profile extends the example's (fast settings, the tests' voice), with
    the document's machine lines when `allow`; this process's environment set for the dashboard and its trainer."""
    config = tmp_path / "config"
    (config / "profiles").mkdir(parents=True)
    if allow:
        (config / "machine.toml").write_text(doc_machine_lines(), encoding="utf-8")
    settings = {**fast(tmp_path), "data.path": str(TEST_VOICE)}
    lines = [f"{key} = {value}" for key, value in (item.split("=", 1) for item in set_args(settings)[1::2])]
    (config / "profiles" / "denoise.toml").write_text(
        f'extends = "{EXAMPLE / "denoise.toml"}"\n' + "\n".join(lines) + "\n", encoding="utf-8"
    )
    for key in [key for key in os.environ if key.startswith("VEGA_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("VEGA_CONFIG_DIR", str(config))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), str(SRC)]))
    return config


@pytest.mark.anyio
async def test_the_launch_screen_says_how_to_allow_the_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.widgets import Button

    from vega_tui.app import VegaApp
    from vega_tui.screens.launch import LaunchScreen
    from vega_tui.widgets.preflight import PreflightPanel
    from vega_tui.widgets.profile_list import ProfileList

    config = dashboard_config(tmp_path, monkeypatch, allow=False)
    app = VegaApp(runs_root=tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        profiles = screen.query_one(ProfileList)
        await wait_until(pilot, lambda: "denoise" in profiles.entries, "the example's profile")
        assert profiles.entries["denoise"].valid  # naming a module is valid; running it is this machine's call
        profiles.select("denoise")
        await wait_until(pilot, lambda: screen.plan_error is not None, "the trainer's refusal")
        shown = screen.query_one(PreflightPanel).text
        assert "The trainer would not start:" in shown and f"this machine's file {config / 'machine.toml'}" in shown
        assert 'allowed = ["vega_denoise.task"]' in shown
        assert screen.query_one("#start", Button).disabled
    assert not (tmp_path / "runs").exists()


@pytest.mark.anyio
async def test_the_dashboard_trains_the_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vega_tui.app import VegaApp
    from vega_tui.screens.launch import LaunchScreen
    from vega_tui.screens.run import RunScreen
    from vega_tui.widgets.charts import ChartGrid
    from vega_tui.widgets.preflight import PreflightPanel
    from vega_tui.widgets.profile_list import ProfileList
    from vega_tui.widgets.samples import SamplesPanel

    dashboard_config(tmp_path, monkeypatch, allow=True)
    # Started from a working folder that holds a shadow of the package, as one shipped beside a profile would.
    shadow_package(tmp_path / "work", "vega_denoise", tmp_path / "markers")
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    app = VegaApp(runs_root=tmp_path / "runs")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        profiles = screen.query_one(ProfileList)
        await wait_until(pilot, lambda: "denoise" in profiles.entries, "the example's profile")
        profiles.select("denoise")
        await wait_until(pilot, lambda: screen.plan is not None or screen.plan_error is not None, "the plan")
        assert screen.plan is not None, screen.plan_error
        shown = screen.query_one(PreflightPanel).text
        assert f"code this profile runs code from vega_denoise.task ({TASK_FILE})" in shown
        assert f"custom task {SPEC}" in shown
        screen.query_one("#start").focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen), "the run dashboard")
        run = app.screen
        assert isinstance(run, RunScreen)
        await wait_until(pilot, lambda: run.state.status in ("finished", "failed", "crashed"), "the run to end")
        assert run.state.status == "finished", [line.message for line in list(run.state.logs)[-5:]]
        assert run.state.step == 16
        grid = run.query_one(ChartGrid)
        parts = grid.chart("parts")
        await wait_until(pilot, lambda: parts.data is not None and len(parts.data.lines) == 2, "the loss parts drawn")
        assert {line.label for line in parts.data.lines} == CUSTOM_LOSSES
        await wait_until(pilot, lambda: grid.validation_shown, "the validation chart in the speech chart's place")
        validation = grid.chart("validation")
        await wait_until(pilot, lambda: validation.data is not None and validation.data.points > 0, "noise_left drawn")
        assert validation.data.title.startswith("noise_left ")
        await pilot.press("4")
        panel = run.query_one(SamplesPanel)
        await wait_until(pilot, lambda: len(panel.items()) == 6, "the samples listed")
        assert [item.sample.kind for item in panel.items()] == ["audio", "text", "image"] * 2
    assert not list((tmp_path / "markers").iterdir())  # the shadow was never imported: not by the plan, nor the run
    assert (run.state.task or {}).get("file") == str(TASK_FILE)
