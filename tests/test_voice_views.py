"""Voice views: a real tiny voice run draws a held-out clip's mel and alignment at each evaluation (image samples),
report.png gains the last alignment, and the dashboard's Samples tab draws the pictures in the terminal (half-block
cells; a graphics protocol through textual-image where the `images` extra is installed)."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import select
import shutil
import struct
import sys
import termios
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from rich.console import Console

from conftest import TEST_VOICE, of_type, run_here, tiny_voice_profile
from dash_pilot import DashApp, plain, settled, wait_until
from trainer_core.contract.eventlog import read_all
from trainer_core.contract.profile import Profile
from trainer_core.contract.protocol import Event
from trainer_core.engine.report import write_report
from trainer_core.models import voice_views
from trainer_core.models.registry import build_task
from trainer_core.models.voice_task import VoiceTask
from trainer_core.models.voice_views import ALIGNMENT_FIGSIZE, DPI, MEL_FIGSIZE, middle_clip
from vega_tui.__main__ import main as vega_main
from vega_tui.widgets import image_protocol
from vega_tui.widgets.halfblocks import UPPER_HALF, PictureError, decode_halfblocks, fitted_pixels
from vega_tui.widgets.sample_picture import SamplePicture
from vega_tui.widgets.samples import SamplesPanel

REPO = Path(__file__).resolve().parent.parent
STEPS, EVAL_EVERY = 8, 4
EVALUATED = [4, 8]
PROFILE = tiny_voice_profile("views", STEPS, EVAL_EVERY, ["Hello."], seed=4, logging={"report": True})

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pixels(size: tuple[float, float]) -> tuple[int, int]:
    return round(size[0] * DPI), round(size[1] * DPI)


@pytest.fixture(scope="module")
def voice_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny voice run (`trainer-core train`, in this process) with samples, views and report.png."""
    root = tmp_path_factory.mktemp("views")
    (root / "config").mkdir()
    profile = root / "views.toml"
    profile.write_text(PROFILE, encoding="utf-8")
    env = {**os.environ, "VEGA_CONFIG_DIR": str(root / "config"), "OMP_NUM_THREADS": "1"}
    done = run_here(env, "train", "--profile", str(profile), "--run-dir", str(root / "run"), cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "run"


def image_samples(events: list[Event]) -> list[Event]:
    return [e for e in of_type(events, "sample") if e.kind == "image"]


# ------------------------------------------------------------------------------------------------ the trainer side


def test_each_evaluation_writes_mel_and_alignment_pngs_announced_as_image_samples(voice_run: Path) -> None:
    events = read_all(voice_run / "events.jsonl")
    images = image_samples(events)
    assert [(e.step, Path(e.path).name) for e in images] == [
        (step, name) for step in EVALUATED for name in ("mel.png", "alignment.png")
    ]
    for event in images:
        path = Path(event.path)
        assert path == voice_run / "samples" / f"step-{event.step:08d}" / path.name and path.is_file()
        with Image.open(path) as picture:
            assert picture.format == "PNG" and picture.mode == "RGBA"
            expected = MEL_FIGSIZE if path.name == "mel.png" else ALIGNMENT_FIGSIZE
            assert picture.size == pixels(expected)
            colours = picture.convert("RGB").getcolors(maxcolors=1 << 20)
            assert colours is not None and len(colours) > 100, "a real plot, not a blank canvas"
    captions = [e.text for e in images]
    clip = captions[0].split(":")[0]
    assert clip and all(caption.startswith(f"{clip}: ") for caption in captions), "one fixed clip for the run"
    assert "recorded vs predicted mel" in captions[0] and "alignment of" in captions[1]
    samples = of_type(events, "sample")
    for step in EVALUATED:  # the step's sound is announced first, its pictures after it
        assert [e.kind for e in samples if e.step == step] == ["audio", "image", "image"]


def test_report_png_gains_the_last_alignment_when_the_run_has_one(voice_run: Path, tmp_path: Path) -> None:
    with Image.open(voice_run / "report.png") as report:
        assert report.size == (900, 1300), "loss, learning rate, throughput and the alignment panel"
    moved = tmp_path / "moved"
    shutil.copytree(voice_run, moved)
    with Image.open(write_report(moved)) as report:
        assert report.size == (900, 1300), "a moved run folder finds its own copy of the picture"
    for picture in moved.glob("samples/*/alignment.png"):
        picture.unlink()
    with Image.open(write_report(moved)) as report:
        assert report.size == (900, 900), "no alignment picture: the three panels as before"


@pytest.fixture(scope="module")
def voice_task(tmp_path_factory: pytest.TempPathFactory, one_torch_thread: None) -> VoiceTask:
    """The demo voice's task, untrained, built in this process (one torch thread)."""
    cache = tmp_path_factory.mktemp("view-cache")
    tiny = Profile(
        run={"seed": 5},
        data={"path": str(TEST_VOICE), "mode": "voice", "val_fraction": 0.2, "cache_dir": str(cache)},
        model={"kind": "tts", "hidden": 32, "encoder_layers": 1, "decoder_layers": 1, "heads": 2, "ffn_mult": 2},
        tts={"text_units": "chars", "griffin_lim_iters": 4},
        sample={"sentences": ["Hi."]},
    )
    task = build_task(tiny, TEST_VOICE, "cpu")
    assert isinstance(task, VoiceTask)
    return task


def test_the_views_show_the_held_out_clip_teacher_forced_and_its_monotonic_path(
    voice_task: VoiceTask, tmp_path: Path
) -> None:
    task = voice_task
    frames = task.features.frames
    clip = task.views.clip()
    assert clip in task.dataset.val_ids and clip == middle_clip(task.dataset.val_ids, frames)
    shorter = sum(frames[i] < frames[clip] for i in task.dataset.val_ids)
    assert shorter == len(task.dataset.val_ids) // 2 or frames.count(frames[clip]) > 1, "the middle length"
    task.model.train()
    view = task.views.view(task.model, 7)
    assert task.model.training, "the model's mode is restored"
    tokens = task.dataset.tokens[clip]
    assert view.item_id == task.features.item_ids[clip] and view.symbols == [task.encoder.symbols[i] for i in tokens]
    assert view.target.shape == view.predicted.shape == tuple(task.features.get_mel(clip).shape)
    assert np.allclose(view.target, task.features.get_mel(clip).numpy())
    assert view.likelihood.shape == (len(tokens), view.target.shape[1])
    assert np.allclose(view.likelihood.max(axis=0), 0.0), "each frame relative to its most likely symbol"
    steps = np.diff(view.path)
    assert view.path[0] == 0 and view.path[-1] == len(tokens) - 1 and set(steps.tolist()) <= {0, 1}, "monotonic"
    # The teacher-forced prediction is what the training loss scores.
    batch = task.dataset.collate([clip])
    task.model.eval()
    with torch.no_grad():
        losses = task.model(batch["text"], batch["text_lens"], batch["mel"], batch["mel_lens"])
    assert view.mel_l1 == pytest.approx(float(losses["mel"]), rel=1e-4)

    results = task.make_views(task.model, tmp_path, 7)
    folder = tmp_path / "step-00000007"
    assert [(r.kind, r.path) for r in results] == [("image", folder / "mel.png"), ("image", folder / "alignment.png")]
    assert results[0].text.endswith(f"L1 {view.mel_l1:.3f}")


def test_no_held_out_clip_means_no_views() -> None:
    assert middle_clip([], [10, 20]) is None
    assert middle_clip([0, 1, 2], [30, 10, 20]) == 2 and middle_clip([0, 1], [10, 10]) == 1
    assert voice_views.VISIBLE_SYMBOLS[" "] == "␣"


# ------------------------------------------------------------------------------------------------ half-block cells

RED, GREEN, BLUE, WHITE, BLACK = (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255), (0, 0, 0)


def write_png(path: Path, rows: list[list[tuple[int, ...]]], mode: str = "RGB") -> Path:
    picture = Image.new(mode, (len(rows[0]), len(rows)))
    picture.putdata([pixel for row in rows for pixel in row])
    picture.save(path)
    return path


def test_half_blocks_put_the_upper_pixel_in_front_and_the_lower_behind(tmp_path: Path) -> None:
    png = write_png(tmp_path / "known.png", [[RED, GREEN, BLUE], [WHITE, BLACK, RED], [BLUE, BLUE, GREEN], [RED] * 3])
    blocks = decode_halfblocks(png, 40, 10)  # room to spare: never enlarged
    assert blocks.source_size == (3, 4) and (blocks.width, blocks.height) == (3, 2)
    assert blocks.cells == (
        ((RED, WHITE), (GREEN, BLACK), (BLUE, RED)),
        ((BLUE, RED), (BLUE, RED), (GREEN, RED)),
    )
    console = Console(width=20, color_system="truecolor", force_terminal=True, record=True)
    lines = console.render_lines(blocks, console.options, pad=False)
    assert [len(line) for line in lines] == [3, 3]
    first = lines[0][1]
    assert first.text == UPPER_HALF
    assert first.style.color.get_truecolor() == GREEN and first.style.bgcolor.get_truecolor() == BLACK


def test_a_big_picture_shrinks_by_averaging_and_keeps_its_proportions(tmp_path: Path) -> None:
    blocks = [[RED, GREEN], [BLUE, WHITE]]  # each colour a 4x4 block of an 8x8 picture
    rows = [[blocks[y // 4][x // 4] for x in range(8)] for y in range(8)]
    png = write_png(tmp_path / "blocks.png", rows)
    small = decode_halfblocks(png, 2, 1)  # 2 x 2 pixels: one per block
    assert small.cells == (((RED, BLUE), (GREEN, WHITE)),)
    assert fitted_pixels(800, 500, 40, 10) == (32, 20), "the height limits: 10 rows hold 20 pixel rows"
    assert fitted_pixels(800, 400, 40, 100) == (40, 20), "the width limits"
    transparent = write_png(tmp_path / "alpha.png", [[(255, 0, 0, 0), (0, 255, 0, 255)]] * 2, mode="RGBA")
    assert decode_halfblocks(transparent, 4, 4).cells == (((BLACK, BLACK), (GREEN, GREEN)),), "shown over black"


def test_a_file_that_is_not_a_picture_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "mel.png"
    bad.write_text("not a png", encoding="utf-8")
    with pytest.raises(PictureError, match=r"mel\.png is not a picture"):
        decode_halfblocks(bad, 10, 10)
    with pytest.raises(PictureError, match=r"gone\.png is not there"):
        decode_halfblocks(tmp_path / "gone.png", 10, 10)


# ------------------------------------------------------------------------------------------------ the dashboard


async def test_samples_tab_lists_the_pictures_beside_the_audio_and_draws_the_highlighted_one(
    voice_run: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(voice_run, run_dir)
    async with DashApp(run_dir).run_test(size=(120, 40)) as pilot:
        screen = await settled(pilot)
        await pilot.press("4")
        panel = screen.query_one(SamplesPanel)
        items = panel.items()
        assert [(i.sample.step, i.sample.kind, i.path.name) for i in items] == [
            (step, kind, name)
            for step in EVALUATED
            for kind, name in (("audio", "01.wav"), ("image", "mel.png"), ("image", "alignment.png"))
        ]
        mel = items[1]
        assert mel.path == run_dir / "samples" / "step-00000004" / "mel.png", "found in this run folder"
        listed = plain(mel.query_one("Static"))
        assert "▣ step 4 · image mel" in listed and str(mel.path) in listed and "recorded vs predicted" in listed
        picture = screen.query_one(SamplePicture)
        assert picture.region.area == 0, "no picture while the audio sample is highlighted"

        panel.list_view.focus()
        panel.list_view.index = 1
        await wait_until(pilot, lambda: picture.picture is not None, "the picture drawn")
        canvas = picture.query_one("#picture-cells")
        size = canvas.content_region.size
        assert picture.region.area > 0 and picture.has_class("-shown")
        assert 0 < picture.picture.width <= size.width and 0 < picture.picture.height <= size.height
        assert picture.picture == decode_halfblocks(mel.path, size.width, size.height), "the file's own colours"
        rendered = "".join(
            segment.text for strip in canvas.render_lines(canvas.region.reset_offset) for segment in strip
        )
        assert rendered.count(UPPER_HALF) == picture.picture.width * picture.picture.height
        assert str(mel.path) in plain(picture.query_one("#picture-path"))
        assert "image sample" in plain(panel.query_one("#sample-detail"))

        await pilot.press("right_square_bracket")  # the same picture at the next evaluation
        later = run_dir / "samples" / "step-00000008" / "mel.png"
        await wait_until(pilot, lambda: picture.path == later and picture.picture is not None, "the later picture")
        assert str(later) in plain(picture.query_one("#picture-path"))

        panel.list_view.index = 0
        await pilot.pause(0.1)
        assert picture.region.area == 0 and picture.path is None, "an audio sample hides the picture"


async def test_a_missing_picture_says_so_instead_of_drawing(voice_run: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(voice_run, run_dir)
    (run_dir / "samples" / "step-00000004" / "alignment.png").unlink()
    async with DashApp(run_dir).run_test(size=(100, 30)) as pilot:
        screen = await settled(pilot)
        await pilot.press("4")
        panel = screen.query_one(SamplesPanel)
        panel.list_view.index = 2
        picture = screen.query_one(SamplePicture)
        await wait_until(pilot, lambda: picture.error is not None, "the error")
        assert "alignment.png is not there" in plain(picture.query_one("#picture-path"))


# ------------------------------------------------------------------------------------------------ graphics protocol


def test_without_a_terminal_or_when_told_pictures_are_cells() -> None:
    not_a_terminal = io.StringIO()
    assert image_protocol.detect({}, not_a_terminal) == "cells" and image_protocol.graphics_widget() is None
    assert image_protocol.detect({"VEGA_IMAGES": "cells"}) == "cells" and image_protocol.problem() is None
    with pytest.raises(ValueError, match="VEGA_IMAGES='sixels': use one of auto, cells"):
        image_protocol.detect({"VEGA_IMAGES": "sixels"})


def test_vega_tui_rejects_a_bad_images_setting(voice_run: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("VEGA_IMAGES", "kitty-please")
    assert vega_main(["attach", str(voice_run)]) == 2
    assert "error: VEGA_IMAGES='kitty-please': use one of auto, cells" in capsys.readouterr().err


def answer_as_a_sixel_terminal(
    argv: list[str], env: dict[str, str], size: tuple[int, ...], timeout: float = 30.0
) -> str:
    """Run `argv` on a pseudo-terminal of `size` (rows, columns, pixel width, pixel height) and answer its queries
    as a sixel terminal would; return what it printed."""
    pid, controller = pty.fork()
    if pid == 0:  # the child: its stdin and stdout are the terminal
        os.execve(argv[0], argv, env)
    fcntl.ioctl(controller, termios.TIOCSWINSZ, struct.pack("HHHH", *size))
    answers = {b"\x1b[c": b"\x1b[?62;4;22c", b"\x1b[16t": b"\x1b[6;20;10t"}  # DA1 with sixel (4); cell size
    seen, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([controller], [], [], 0.05)
        if not ready:
            continue
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
        for query, answer in answers.items():
            if query in chunk:
                os.write(controller, answer)
    os.waitpid(pid, 0)
    os.close(controller)
    return seen.decode(errors="replace")


DETECT = (
    "from vega_tui.widgets import image_protocol as p; found = p.detect({}); widget = p.graphics_widget(); "
    "print('protocol', found, widget and widget.__module__.split('.')[0], '|', p.problem())"
)


def test_a_terminal_that_speaks_sixel_gets_textual_images_widget() -> None:
    pytest.importorskip("textual_image", reason="the images extra (pip install 'vega[images]') is not installed")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TERM": "xterm-256color"}
    printed = answer_as_a_sixel_terminal([sys.executable, "-c", DETECT], env, (24, 80, 800, 480))
    assert "protocol sixel textual_image | None" in printed, printed


def test_a_failing_textual_image_leaves_cells_and_says_why() -> None:
    pytest.importorskip("textual_image", reason="the images extra is not installed")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TERM": "xterm-256color"}
    # A terminal that reports no size: textual-image divides by its zero columns.
    printed = answer_as_a_sixel_terminal([sys.executable, "-c", DETECT], env, (0, 0, 0, 0))
    assert "protocol cells None | textual-image could not ask the terminal" in printed, printed


async def test_a_graphics_widget_is_given_the_decoded_picture(voice_run: Path, tmp_path: Path) -> None:
    widget = pytest.importorskip("textual_image.widget", reason="the images extra is not installed")
    run_dir = tmp_path / "run"
    shutil.copytree(voice_run, run_dir)
    image_protocol.use(widget.HalfcellImage, "test")  # textual-image's own drawing, no graphics terminal needed
    try:
        async with DashApp(run_dir).run_test(size=(120, 40)) as pilot:
            screen = await settled(pilot)
            await pilot.press("4")
            panel = screen.query_one(SamplesPanel)
            panel.list_view.index = 2
            picture = screen.query_one(SamplePicture)
            canvas = picture.query_one("#picture-image", widget.HalfcellImage)
            await wait_until(pilot, lambda: canvas.image is not None, "the picture handed over")
            with Image.open(run_dir / "samples" / "step-00000004" / "alignment.png") as original:
                assert canvas.image.size == original.size and canvas.image.mode == "RGB"
            await pilot.pause(0.2)
            assert canvas.region.area > 0 and picture.picture is None
            assert "alignment.png" in plain(picture.query_one("#picture-path"))
    finally:
        image_protocol.use(None, "cells")
