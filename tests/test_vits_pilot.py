"""A vits run from a Piper voice, through the real dashboard: Textual's pilot drives the launch
screen, a real trainer subprocess trains, and the run dashboard follows it.

The voice is a random-weight Piper checkpoint made by Piper's own code
(`tests/piper_reference.py`, `make_small_reference`: Piper's VitsModel constructor with a narrow
generator; the discriminator keeps Piper's fixed 47 M parameters, so a training step takes a
second or two here). Its path is pasted and typed into "Start from"; the preflight says what of
the test voice its symbol map covers and which of its settings replace the profile's; Start
trains 8 steps on the test voice with `--set` overrides, and the run dashboard says it started
from the Piper checkpoint and charts the generator's and the discriminator's losses. Smaller
tests: a `.ckpt` under the machine file's `[voices] dirs` is offered to a vits profile (not to a
tts one), a path that cannot be started from says why and blocks Start, and checking a Piper
checkpoint loads no torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from textual.events import Paste
from textual.pilot import Pilot
from textual.widgets import Button, Input, Static

from conftest import TEST_VOICE
from test_app_launch import text_of, wait_until
from trainer_core.contract.eventlog import read_all
from vega_tui.app import VegaApp
from vega_tui.screens.launch import LaunchScreen
from vega_tui.widgets.choice_list import ChoiceList
from vega_tui.widgets.preflight import PreflightPanel, plan_rows
from vega_tui.widgets.profile_list import ProfileList

pytestmark = pytest.mark.anyio

PROFILE = "vits-x_low"
STEPS = 4
# `--set` items, as `vega-tui --set` passes them: a short run, small batches and training windows,
# validated once, at its end; no free-running evaluation or report picture (not tested here).
OVERRIDES = [
    f"train.max_steps={STEPS}",
    "train.batch_size=1",
    "vits.segment_size=512",
    f"train.eval_every_steps={STEPS}",
    "train.free_running_every=0",
    "logging.report=false",
    "data.val_max_items=4",  # the test voice holds out 4 clips: validation runs
]
VOICE_NAME = "en_US-reference-x_low"  # Piper's naming: language, dataset, quality
VOICE_FACTS = "x_low · 16000 Hz · one speaker · tiny-piper.ckpt"
PARTS = ["adversarial", "duration", "feature", "kl", "mel"]
RUN_WAIT_S = 240.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def choose_profile(pilot: Pilot, name: str) -> LaunchScreen:
    """Select profile `name` and wait until the screen followed its defaults (then change them)."""
    screen = pilot.app.screen
    assert isinstance(screen, LaunchScreen)
    profiles = screen.query_one(ProfileList)
    await wait_until(pilot, lambda: name in profiles.entries, f"the {name} profile")
    assert profiles.select(name)

    def chosen() -> bool:
        return screen.selection.profile is not None and screen.selection.profile.name == name

    await wait_until(pilot, chosen, f"the {name} profile chosen")
    return screen


def listed(screen: LaunchScreen) -> dict[str, tuple[str, str]]:
    """The Start-from list: value -> (label, detail)."""
    choices = screen.query_one("#start-from", ChoiceList).choices
    return {choice.value: (choice.label, choice.detail) for choice in choices}


def finished(path: Path) -> bool:
    return path.is_file() and b'"type":"finished"' in path.read_bytes().replace(b" ", b"")


# ----------------------------------------------------------------------------------- the run


async def test_a_vits_run_from_a_typed_piper_checkpoint(
    empty_config: Path,
    tmp_path: Path,
    piper_voice: Path,
) -> None:
    from vega_tui.screens.run import RunScreen
    from vega_tui.widgets.charts import RunChart, parts_chart, validation_chart

    runs = tmp_path / "runs"
    app = VegaApp(runs_root=runs, overrides=OVERRIDES)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await choose_profile(pilot, PROFILE)
        await wait_until(pilot, lambda: screen.resources is not None, "the machine probe")
        assert screen.query_one("#compute-mode", ChoiceList).select("cpu")
        screen.query_one("#data-folder", Input).value = str(TEST_VOICE)
        field = screen.query_one("#start-path", Input)
        field.focus()
        app.post_message(Paste(f"{piper_voice.parent}/"))  # the folder pasted, as a terminal does
        await pilot.pause()
        assert field.value == f"{piper_voice.parent}/"
        await pilot.press(*piper_voice.name, "enter")  # the name typed; Enter: on to Start if good
        path = str(piper_voice)
        await wait_until(pilot, lambda: screen.selection.init_from == path, "the typed path")
        # A good path joins the list, chosen, labelled from its voice config.
        assert listed(screen)[path] == (VOICE_NAME, f"Piper checkpoint · {VOICE_FACTS} · step 0")
        assert text_of(screen, "#start-path-status") == f"✓ {VOICE_NAME}: chosen above"

        def plan_from_it() -> bool:
            return bool(screen.plan and screen.plan.init_from)

        await wait_until(pilot, plan_from_it, "the plan from it")
        assert screen.plan is not None
        start = screen.plan.init_from
        assert start is not None and start.mapping is not None and start.settings is not None
        assert start.form == "piper" and start.mapping.symbols_new == []
        adopted = [line.split(": ")[0] for line in start.settings]
        assert adopted[:2] == ["vits.inter_channels", "vits.hidden_channels"]
        shown = screen.query_one(PreflightPanel).text
        for expected in (
            "model vits, Piper quality x_low: generator 0.2M + discriminator 46.7M parameters, "
            "hidden 16 x 1 layers; segments of 512 samples (2 frames); ~",
            "start from Piper checkpoint tiny-piper.ckpt (vits, step 0); optimizer and schedule",
            f"maps {start.mapping.text}",
            "transcripts) in its map",  # a sample of the test voice's 40 transcripts
            f"adopts the checkpoint's settings replace the profile's ({len(adopted)}):",
            "vits.hidden_channels: 96 -> 16",
            "vits.upsample_initial_channel: 256 -> 32",
            f"plan {STEPS} steps",
        ):
            assert expected in shown, (expected, shown)
        model = screen.plan.model.model_copy(update={"vits": None})
        older = screen.plan.model_copy(update={"model": model})  # an older trainer's plan: no vits shape
        assert ("model", "vits (generator + discriminator)") in plan_rows(older)

        assert app.focused is screen.query_one("#start", Button)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen), "the run dashboard")
        run = app.screen
        assert isinstance(run, RunScreen) and run.run_dir.parent == runs
        events_path = run.run_dir / "events.jsonl"
        await wait_until(pilot, lambda: finished(events_path), "the run's end", RUN_WAIT_S)
        await wait_until(pilot, lambda: run.state.status == "finished", "the dashboard to see it")

        events = read_all(events_path)
        hello = next(e for e in events if e.type == "hello")
        assert hello.argv[hello.argv.index("--init-from") + 1] == path
        ends = [(e.status, e.step) for e in events if e.type == "finished"]
        assert ends == [("completed", STEPS)]
        [init] = [e for e in events if e.type == "init_from"]
        assert init.form == "piper" and init.skipped == 0 and init.new == 0

        headline = f"started from Piper checkpoint tiny-piper.ckpt: {init.loaded} tensors loaded"
        logs = [line.message for line in run.state.logs if line.kind == "init_from"]
        assert logs and logs[0].startswith(headline), logs
        assert run.state.groups == ["discriminator", "generator"]
        await pilot.press("1")
        loss = run.query_one("#chart-loss", RunChart)

        def loss_drawn() -> bool:
            # drawn once the last step is in: an earlier picture holds every line but the last point
            lines = {line.label: line for line in loss.data.lines} if loss.data is not None else {}
            return all(lines.get(g) and lines[g].xs[-1] == STEPS for g in ("generator", "discriminator"))

        await wait_until(pilot, loss_drawn, "the loss chart")
        assert loss.data is not None
        by_label = {line.label: line for line in loss.data.lines}
        assert by_label["generator"].xs == list(range(1, STEPS + 1))
        assert by_label["discriminator"].right and by_label["discriminator"].xs[-1] == STEPS
        last = [e for e in events if e.type == "step"][-1]
        assert by_label["discriminator"].ys[-1] == last.losses["discriminator.total"]
        assert sorted(line.label for line in parts_chart(run.state).lines) == PARTS
        validation = {line.label: line.xs for line in validation_chart(run.state).lines}
        assert validation["mel_l1"] == [STEPS]

        await pilot.press("3")
        info = run.query_one("#ckpt-info", Static)
        await wait_until(pilot, lambda: headline in info.content.plain, "the checkpoints panel")


# ----------------------------------------------------------------------------------- finding


async def test_a_voice_under_the_machine_files_voices_dirs_is_offered(
    empty_config: Path,
    piper_voice: Path,
) -> None:
    voices = json.dumps(str(piper_voice.parent.parent))  # the checkpoint is a level below it
    (empty_config / "machine.toml").write_text(f"[voices]\ndirs = [{voices}]\n", encoding="utf-8")
    app = VegaApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await choose_profile(pilot, PROFILE)
        path = str(piper_voice)
        await wait_until(pilot, lambda: path in listed(screen), "the Piper voice in the list")
        assert listed(screen)[path] == (VOICE_NAME, VOICE_FACTS)
        await choose_profile(pilot, "demo")  # tts: a Piper voice is no model to start it from

        def tts_listed() -> bool:
            return screen.start_key_shown is not None and screen.start_key_shown[1] == "tts"

        await wait_until(pilot, tts_listed, "the tts list")
        assert path not in listed(screen)


async def test_a_path_that_cannot_be_started_from_says_why_and_blocks_start(
    empty_config: Path,
    tmp_path: Path,
) -> None:
    app = VegaApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await choose_profile(pilot, PROFILE)
        screen.query_one("#data-folder", Input).value = str(TEST_VOICE)
        missing = tmp_path / "nowhere" / "voice.ckpt"
        start, field = screen.query_one("#start", Button), screen.query_one("#start-path", Input)
        field.value = str(missing)
        await wait_until(pilot, lambda: "✗" in text_of(screen, "#start-path-status"), "its check")
        status = text_of(screen, "#start-path-status")
        assert status.startswith(f"✗ {missing} does not exist; name a run folder"), status
        assert start.disabled
        why = f"start from: {missing} does not exist"
        # The reason beside Start follows the field's status on a later refresh: wait for it too.
        await wait_until(pilot, lambda: text_of(screen, "#start-why").startswith(why), "the reason beside Start")
        assert screen.selection.init_from is None and set(listed(screen)) == {"scratch"}

        field.value = ""  # cleared: from scratch, and Start is free again
        await wait_until(pilot, lambda: not start.disabled, "Start enabled")
        assert text_of(screen, "#start-path-status") == ""


def test_checking_a_piper_checkpoint_loads_no_torch(piper_voice: Path) -> None:
    """The typed-path check and the voice listing in a fresh interpreter, as the dashboard runs
    them: the right answers, and no torch, librosa or matplotlib loaded."""
    code = f"""
import json, sys
from pathlib import Path
from vega_tui.piper_voices import find_piper_voices
from vega_tui.start_points import typed_start_point
point = typed_start_point({str(piper_voice)!r}, "vits")
voices = find_piper_voices([Path({str(piper_voice.parent.parent)!r})])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "librosa", "matplotlib"))
print(json.dumps([point.label, [v.label for v in voices], heavy]))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [VOICE_NAME, [VOICE_NAME], []]
