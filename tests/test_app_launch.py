"""The launch screen, driven with Textual's pilot: modes, devices, profiles, data checks, preflight, Start.

Every check the screen shows comes from the real thing: `trainer_core.contract.resources` on this machine (or
GPUs injected through VEGA_FAKE_GPUS), profile files in a temporary VEGA_CONFIG_DIR validated by the
trainer's loader, `trainer-core check-data` and `train --dry-run` subprocesses, and a real trainer
started with Start. The snapshot tests pin the layout at 80x24 and 120x40 (regenerate them with
`pytest tests/test_app_launch.py --snapshot-update` after an intended change).
"""

from __future__ import annotations

import json
import shutil
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
import tomli_w
from textual.pilot import Pilot
from textual.widgets import Button, Input, Static

from trainer_core.contract.eventlog import read_all
from trainer_core.contract.plan_report import LaunchInfo
from trainer_core.contract.profile_loader import repo_profiles_dir
from trainer_core.contract.resources import describe_modes, probe
from trainer_core.tiny_profiles import tiny_profile
from vega_tui import read_only
from vega_tui.app import VegaApp
from vega_tui.screens.launch import LaunchScreen
from vega_tui.screens.launch_state import Phase
from vega_tui.widgets.choice_list import ChoiceList
from vega_tui.widgets.preflight import PreflightPanel, plan_rows
from vega_tui.widgets.profile_list import ProfileList

pytestmark = pytest.mark.anyio

# Subprocess checks share two cores with other tests: waits are generous, never timed assertions.
WAIT_S = 60.0
FAKE_GPU = {"name": "NVIDIA Fake 24GB", "memory_total_bytes": 24 * 1024**3, "memory_free_bytes": 20 * 1024**3}
WORDS = [
    "the",
    "quiet",
    "fox",
    "reads",
    "a",
    "small",
    "book",
    "by",
    "the",
    "river",
    "while",
    "dogs",
    "walk",
    "past",
    "the",
    "old",
    "mill",
]


def write_text_corpus(folder: Path, files: int = 3, lines: int = 40) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(files):
        rows = [" ".join(WORDS[(n + i + j) % len(WORDS)] for j in range(9)).capitalize() + "." for i in range(lines)]
        (folder / f"story-{n}.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


def launch_profile(data: Path, runs: Path, max_steps: int = 30) -> str:
    """The tiny LM profile (trainer_core.tiny_profiles) on `data`, writing runs under `runs`."""
    return tiny_profile(
        "lm",
        run={"runs_dir": str(runs), "seed": None},
        data={"path": str(data), "val_fraction": None},
        model={"dropout": None},
        train={"warmup_steps": 2, "max_steps": max_steps, "lr": None},
        sample={"max_new_bytes": 8},
        logging={"step_interval_s": 0.1},
    )


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def config(empty_config: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty user config folder; each trainer on one thread."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return empty_config


async def wait_until(pilot: Pilot, predicate: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await pilot.pause(0.05)
    screen = pilot.app.screen
    detail = ""
    if isinstance(screen, LaunchScreen):
        why = text_of(screen, "#start-why")
        detail = f"; plan error: {screen.plan_error}; data error: {screen.data_error}; why: {why}"
    pytest.fail(f"timed out after {timeout:g} s waiting for {what}{detail}")


def text_of(screen: LaunchScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


def launch(screen_of: VegaApp) -> LaunchScreen:
    screen = screen_of.screen
    assert isinstance(screen, LaunchScreen), f"expected the launch screen, got {screen!r}"
    return screen


def option_texts(choice_list: ChoiceList) -> dict[str, tuple[str, bool]]:
    """value -> (prompt text, disabled) for every option."""
    return {option.id: (str(option.prompt), option.disabled) for option in choice_list.options}


def plan_ready(app: VegaApp) -> bool:
    screen = app.screen
    return isinstance(screen, LaunchScreen) and (screen.plan is not None or screen.plan_error is not None)


# ------------------------------------------------------------------------------------------------ modes


async def test_compute_modes_show_what_this_machine_would_pick(config: Path) -> None:
    app = VegaApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = launch(app)
        await wait_until(pilot, lambda: screen.resources and screen.selection.profile, "the probe and the profile")
        options = option_texts(screen.query_one("#compute-mode", ChoiceList))
        min_gb = screen.selection.profile.profile.compute.min_gpu_memory_gb
        # The list is the trainer's own policy on this machine, mode by mode.
        for mode, picked in describe_modes(probe(), min_gb).items():
            text, disabled = options[mode]
            assert disabled == isinstance(picked, str), (mode, text)
            assert (f"-> {picked.device}" in text) if not isinstance(picked, str) else ("unavailable" in text)


async def test_gpu_mode_disabled_with_reason_without_gpus(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VEGA_FAKE_GPUS", "[]")
    app = VegaApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: launch(app).resources is not None, "the machine probe")
        modes = option_texts(launch(app).query_one("#compute-mode", ChoiceList))
        gpu_text, gpu_disabled = modes["gpu"]
        assert gpu_disabled and "unavailable: no CUDA or MPS device" in gpu_text
        assert modes["mixed"] == (modes["mixed"][0], False) and "-> cpu" in modes["mixed"][0]
        assert "-> cpu: no usable accelerator (no GPU:" in modes["mixed"][0]
        assert "-> cpu: never uses an accelerator" in modes["cpu"][0]
        devices = option_texts(launch(app).query_one("#device", ChoiceList))
        assert list(devices) == ["auto", "cpu"]


async def test_fake_gpu_listed_as_device_and_picked_by_gpu_mode(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VEGA_FAKE_GPUS", json.dumps([FAKE_GPU]))
    app = VegaApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = launch(app)
        await wait_until(pilot, lambda: screen.resources and screen.selection.profile, "the probe and the profile")
        modes = option_texts(screen.query_one("#compute-mode", ChoiceList))
        assert not modes["gpu"][1] and "-> cuda:0" in modes["gpu"][0]
        devices = option_texts(screen.query_one("#device", ChoiceList))
        assert "NVIDIA Fake 24GB · 20.0 of 24.0 GiB free" in devices["cuda:0"][0]
        # cpu mode never uses a GPU: choosing it disables the GPU row, with the reason.
        screen.query_one("#compute-mode", ChoiceList).select("cpu")
        devices = screen.query_one("#device", ChoiceList)
        await wait_until(pilot, lambda: option_texts(devices)["cuda:0"][1], "the GPU row to be disabled")
        assert "cpu mode never uses it" in option_texts(devices)["cuda:0"][0]


# ------------------------------------------------------------------------------------------------ profiles


async def test_demo_preselected_and_enter_would_start_it(config: Path) -> None:
    app = VegaApp()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = launch(app)
        await wait_until(pilot, lambda: screen.query_one(ProfileList).value is not None, "the profile list")
        assert screen.query_one(ProfileList).value == "demo"
        assert screen.selection.profile is not None and screen.selection.profile.path.parent == repo_profiles_dir()
        demo_data = screen.selection.profile.profile.data.path
        assert Path(screen.query_one("#data-folder", Input).value).resolve() == demo_data.resolve()
        # Start has the focus from the first frame: Enter is the one key a new user presses.
        assert app.focused is screen.query_one("#start", Button)
        await wait_until(pilot, lambda: plan_ready(app), "the demo plan")
        assert screen.plan is not None, screen.plan_error
        assert not screen.query_one("#start", Button).disabled and screen.flow.phase is Phase.READY
        # Every control is also in the command palette, with its key.
        commands = {command.title: command.help for command in app.get_system_commands(screen)}
        assert commands["Start"] == "key: s" and commands["Runs"] == "key: r" and "Quit" in commands


async def test_invalid_profile_shows_its_error_and_disables_start(config: Path, tmp_path: Path) -> None:
    data = write_text_corpus(tmp_path / "data")
    bad = launch_profile(data, tmp_path / "runs").replace("batch_size = 8", "batch_size = -4")
    (config / "profiles" / "broken.toml").write_text(bad, encoding="utf-8")
    app = VegaApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = launch(app)
        profiles = screen.query_one(ProfileList)
        await wait_until(pilot, lambda: "broken" in profiles.entries, "the user profile in the list")
        text, _ = option_texts(profiles)["broken"]
        assert "✗ train.batch_size = -4: must be >= 1" in text
        profiles.focus()
        while profiles.value != "broken":  # keyboard only: arrow down to it
            await pilot.press("down")
        await wait_until(pilot, lambda: screen.query_one("#start", Button).disabled, "Start to be disabled")
        assert "profile broken is invalid: train.batch_size = -4: must be >= 1" in text_of(screen, "#start-why")
        assert screen.flow.phase is Phase.BLOCKED
        preflight = screen.query_one(PreflightPanel)
        await wait_until(pilot, lambda: "train.batch_size = -4: must be >= 1" in preflight.text, "the errors")
        await pilot.press("s")  # the key is refused with the reason, nothing starts
        assert not (tmp_path / "runs").exists()


async def test_profile_edited_on_disk_refreshes_the_list(config: Path, tmp_path: Path) -> None:
    data = write_text_corpus(tmp_path / "data")
    path = config / "profiles" / "mine.toml"
    path.write_text(launch_profile(data, tmp_path / "runs"), encoding="utf-8")
    app = VegaApp()
    async with app.run_test(size=(120, 40)) as pilot:
        profiles = launch(app).query_one(ProfileList)
        await wait_until(pilot, lambda: "mine" in profiles.entries and profiles.entries["mine"].valid, "mine valid")
        await pilot.pause(0.3)  # let the watcher settle on the folder before the edit
        path.write_text(launch_profile(data, tmp_path / "runs").replace("hidden = 32", "hidden = 33"), encoding="utf-8")
        await wait_until(pilot, lambda: not profiles.entries["mine"].valid, "the edit to show up")
        assert "heads (2) must divide hidden (33)" in option_texts(profiles)["mine"][0]
        (config / "profiles" / "second.toml").write_text(launch_profile(data, tmp_path / "runs"), encoding="utf-8")
        await wait_until(pilot, lambda: "second" in profiles.entries, "a new profile file to appear")


# ------------------------------------------------------------------------------------------------ data


async def test_data_folder_with_nothing_usable_says_why(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative folder name is read from the current folder, as typed
    empty = tmp_path / "nothing"
    empty.mkdir()
    (empty / "notes.csv").write_text("a,b\n", encoding="utf-8")
    app = VegaApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = launch(app)
        await wait_until(pilot, lambda: screen.selection.profile is not None, "the demo profile")
        folder = screen.query_one("#data-folder", Input)
        folder.focus()
        folder.value = ""
        await pilot.press(*"nothing")
        await wait_until(pilot, lambda: screen.data_error is not None, "the data check to fail")
        # The trainer's own scan says what it looked for and what it found instead.
        assert "no audio with transcripts" in screen.data_error and "found 1 .csv" in screen.data_error
        assert screen.data_error in text_of(screen, "#data-detect")
        await wait_until(pilot, lambda: screen.query_one("#start", Button).disabled, "Start to be disabled")
        assert text_of(screen, "#start-why").startswith("data folder:")


async def test_preflight_shows_the_plan(config: Path, tmp_path: Path) -> None:
    data = write_text_corpus(tmp_path / "data")
    (data / "empty.txt").write_text("", encoding="utf-8")
    (config / "profiles" / "tiny.toml").write_text(launch_profile(data, tmp_path / "runs"), encoding="utf-8")
    app = VegaApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = launch(app)
        profiles = screen.query_one(ProfileList)
        await wait_until(pilot, lambda: "tiny" in profiles.entries, "the tiny profile")
        profiles.select("tiny")
        await wait_until(pilot, lambda: plan_ready(app) and screen.selection.data_mode == "text", "the tiny plan")
        assert screen.plan is not None, screen.plan_error
        shown = screen.query_one(PreflightPanel).text
        for expected in (
            "device",
            "cpu",
            "data",
            "text · 3 usable, 1 skipped",
            "empty.txt",
            "RAM",
            "model",
            "lm, hidden 32",
            "30 steps",
            "run",
            "tiny-<start time>",
        ):
            assert expected in shown, (expected, shown)
        await wait_until(pilot, lambda: screen.data_report is not None, "the data detection")
        assert text_of(screen, "#data-detect").startswith("→ text")


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("vocoder-small", "generator 64 channels x 3 blocks; 5 period + 3 resolution discriminators"),
        ("vocoder-base", "generator 512 channels x 8 blocks; 5 period + 3 resolution discriminators"),
    ],
)
async def test_vocoder_profiles_are_listed_and_their_plan_renders(config: Path, name: str, shape: str) -> None:
    app = VegaApp()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = launch(app)
        profiles = screen.query_one(ProfileList)
        await wait_until(pilot, lambda: name in profiles.entries, f"the shipped {name} profile")
        assert profiles.entries[name].valid and profiles.entries[name].origin == "shipped"
        text, disabled = option_texts(profiles)[name]
        assert "✓ valid" in text and not disabled
        profiles.select(name)
        if name == "vocoder-base":  # ships without a data folder (a real voice's): the demo voice stands in
            why = lambda: text_of(screen, "#start-why")  # noqa: E731
            await wait_until(pilot, lambda: why() == "choose a data folder", "the missing data folder")
            voice = repo_profiles_dir().parent / "trainer_core" / "demo" / "voice"
            screen.query_one("#data-folder", Input).value = str(voice)
        await wait_until(
            pilot,
            lambda: plan_ready(app) and (screen.plan is None or screen.plan.profile.endswith(f"{name}.toml")),
            f"the {name} plan",
        )
        assert screen.plan is not None, screen.plan_error
        assert screen.plan.model.kind == "vocoder" and screen.selection.data_mode == "voice"
        shown = screen.query_one(PreflightPanel).text
        for expected in ("data voice · 330 usable, 0 skipped", f"model vocoder, {shape}", f"{name}-<start time>"):
            assert expected in shown, (expected, shown)
        assert "hidden" not in shown  # the plan's transformer fields mean nothing for a vocoder
        older = screen.plan.model_copy(update={"model": screen.plan.model.model_copy(update={"vocoder": None})})
        assert ("model", "vocoder (GAN: generator + discriminators)") in plan_rows(older)  # an older trainer's plan
        await wait_until(pilot, lambda: not screen.query_one("#start", Button).disabled, "Start enabled")


async def test_preflight_shows_validation_items_capped_and_share(config: Path, tmp_path: Path) -> None:
    data = write_text_corpus(tmp_path / "data", files=30)
    profile = (
        launch_profile(data, tmp_path / "runs")
        .replace("context_bytes = 32\n", "context_bytes = 32\nval_fraction = 0.5\nval_max_items = 3\n")
        .replace("warmup_steps = 2\n", "warmup_steps = 2\neval_every_steps = 5\n")
    )
    (config / "profiles" / "capped.toml").write_text(profile, encoding="utf-8")
    app = VegaApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = launch(app)
        profiles = screen.query_one(ProfileList)
        await wait_until(pilot, lambda: "capped" in profiles.entries, "the capped profile")
        profiles.select("capped")
        await wait_until(
            pilot,
            lambda: plan_ready(app) and (screen.plan is None or screen.plan.profile.endswith("capped.toml")),
            "the capped plan",
        )
        assert screen.plan is not None, screen.plan_error
        validation = screen.plan.validation
        assert validation is not None
        assert validation.items == 3 and validation.capped > 0 and validation.every_steps == 5
        shown = screen.query_one(PreflightPanel).text
        expected = (
            f"validate 3 items ({validation.capped} capped away), every 5 steps · "
            f"~{validation.estimated_share:.0%} of the time (estimate)"
        )
        assert expected in shown, shown


# ------------------------------------------------------------------------------------------------ start


async def test_start_runs_a_real_trainer_and_opens_its_dashboard(config: Path, tmp_path: Path) -> None:
    from vega_tui.screens.run import RunScreen

    data = write_text_corpus(tmp_path / "data")
    (config / "profiles" / "tiny.toml").write_text(launch_profile(data, tmp_path / "elsewhere"), encoding="utf-8")
    runs = tmp_path / "runs"
    app = VegaApp(runs_root=runs)  # --runs-root wins over the profile's runs_dir
    async with app.run_test(size=(80, 24)) as pilot:
        screen = launch(app)
        profiles = screen.query_one(ProfileList)
        await wait_until(pilot, lambda: "tiny" in profiles.entries, "the tiny profile")
        profiles.focus()
        while profiles.value != "tiny":
            await pilot.press("down")
        await pilot.press("enter")  # accept the profile: focus moves on to Start
        assert app.focused is screen.query_one("#start", Button)
        await pilot.press("enter")  # Start (waits for the plan if it is still being computed)
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen), "the run dashboard", timeout=WAIT_S)
        run_dir = app.screen.run_dir
        assert run_dir.parent == runs and run_dir.name.startswith("tiny-")
        events_path = run_dir / "events.jsonl"
        await wait_until(pilot, lambda: events_path.is_file() and _finished(events_path), "the run to finish", 90)
        events = read_all(events_path)
        assert events[0].type == "hello"
        assert [e.status for e in events if e.type == "finished"] == ["completed"]
        assert any(e.type == "step" for e in events)


async def test_two_gloo_processes_start_from_the_launch_screen_and_show_both_ranks(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vega_tui.screens.run import RunScreen
    from vega_tui.widgets.process_list import ProcessList
    from vega_tui.widgets.status import StatusLine

    monkeypatch.setenv("VEGA_FAKE_GPUS", "[]")  # no GPU, whatever this machine has: the processes are gloo ranks
    data = write_text_corpus(tmp_path / "data")
    (config / "profiles" / "tiny.toml").write_text(launch_profile(data, tmp_path / "runs", 24), encoding="utf-8")
    app = VegaApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = launch(app)
        profiles, processes = screen.query_one(ProfileList), screen.query_one(ProcessList)
        await wait_until(pilot, lambda: "tiny" in profiles.entries, "the tiny profile")
        profiles.focus()
        while profiles.value != "tiny":
            await pilot.press("down")
        await wait_until(pilot, lambda: "2" in option_texts(processes), "the CPU process counts")
        assert "gloo" in option_texts(processes)["2"][0]
        processes.focus()
        await pilot.press("down")  # 1 -> 2 processes
        assert screen.selection.nproc == 2
        await wait_until(pilot, lambda: screen.plan is not None, "the two-process plan")
        processes_planned = screen.plan.distributed if screen.plan is not None else None
        assert isinstance(processes_planned, LaunchInfo) and processes_planned.nproc_per_node == 2
        await pilot.press("s")
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen), "the run dashboard")
        run = app.screen
        assert isinstance(run, RunScreen)
        events_path = run.run_dir / "events.jsonl"
        await wait_until(pilot, lambda: events_path.is_file() and _finished(events_path), "the run to finish", 120)
        await wait_until(pilot, lambda: len(run.state.rank_samples_per_s) == 2, "both ranks on the dashboard")
        await wait_until(pilot, lambda: "ranks 0 " in run.query_one(StatusLine).content.plain, "the rank line")
        assert ", slowest " in run.query_one(StatusLine).content.plain
        assert (run.run_dir / "trainer-rank1.log").is_file()
        assert [e.status for e in read_all(events_path) if e.type == "finished"] == ["completed"]


def _finished(path: Path) -> bool:
    return b'"type":"finished"' in path.read_bytes().replace(b" ", b"")


# ------------------------------------------------------------------------------------------------ layout


async def test_a_tall_terminal_is_used_by_the_profile_list_and_the_preflight(config: Path) -> None:
    """At 160x45 both columns reach the start bar: the profile list shows every profile without
    scrolling and the preflight takes the rest of its column."""
    app = VegaApp()
    async with app.run_test(size=(160, 45)) as pilot:
        screen = launch(app)
        profiles = screen.query_one(ProfileList)
        await wait_until(pilot, lambda: profiles.value is not None, "the profile list")
        await pilot.pause()
        bottom = screen.query_one("#start-bar").region.y
        for column in ("#launch-left", "#launch-right"):
            last = list(screen.query_one(column).children)[-1]
            assert last.region.bottom == bottom, (column, last, last.region, bottom)
        assert screen.query_one("#preflight-section").region.height >= 30
        assert profiles.region.height > 10 and profiles.region.height >= len(profiles.entries)


async def test_read_only_launch_screen_refuses_start(config: Path) -> None:
    app = VegaApp(read_only=True)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = launch(app)
        await wait_until(pilot, lambda: screen.query_one(ProfileList).value is not None, "the profiles")
        await pilot.press("s")
        screen.query_one("#start", Button).press()
        await pilot.pause()
        notices = [n.message for n in app._notifications]  # the key and the button, both refused
        assert notices.count(read_only.notice("start")) == 2, notices
        assert screen.flow.phase in (Phase.CHECKING, Phase.READY) and app.screen is screen


# ------------------------------------------------------------------------------------------------ snapshots


@pytest.fixture
def snapshot_env(tmp_path: Path, config: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Everything the launch screen shows made fixed: one fake GPU, a user 'demo' profile shadowing the
    shipped one with data and runs folders inside the current folder (so paths print the same everywhere)."""
    monkeypatch.setenv("VEGA_FAKE_GPUS", json.dumps([FAKE_GPU]))
    monkeypatch.chdir(tmp_path)
    write_text_corpus(tmp_path / "data")
    demo = tomllib.loads((repo_profiles_dir() / "demo.toml").read_text(encoding="utf-8"))
    demo["data"]["path"] = "../../data"  # relative to config/profiles/: tmp_path/data
    demo["run"]["runs_dir"] = "../../runs"
    (config / "profiles" / "demo.toml").write_text(tomli_w.dumps(demo), encoding="utf-8")
    shutil.rmtree(tmp_path / "runs", ignore_errors=True)
    return tmp_path


async def _settled(pilot: Pilot) -> None:
    screen = launch(pilot.app)
    await wait_until(pilot, lambda: plan_ready(pilot.app) and screen.data_report is not None, "a settled screen")
    await wait_until(pilot, lambda: screen.start_key_shown == screen.start_key, "the models to start from")
    await pilot.pause(0.2)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_launch_screen_snapshot(snapshot_env: Path, snap_compare, size: tuple[int, int]) -> None:
    assert snap_compare(VegaApp(), terminal_size=size, run_before=_settled)
