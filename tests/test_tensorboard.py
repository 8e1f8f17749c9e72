"""TensorBoard for real: a short voice run with `[logging] tensorboard = true`, read back with TensorBoard's own
event reader and compared with events.jsonl; and the run without the package, in an interpreter that cannot
import it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import of_type, tiny_voice_profile
from trainer_core.contract.eventlog import read_all

REPO = Path(__file__).resolve().parent.parent
STEPS = 6

PROFILE = tiny_voice_profile("board", STEPS, 3, ["Hello.", "A second sentence."], seed=4, logging={"tensorboard": True})


def train(root: Path, extra_pythonpath: str = "") -> tuple[subprocess.CompletedProcess, Path]:
    (root / "config").mkdir(exist_ok=True)
    profile = root / "board.toml"
    profile.write_text(PROFILE, encoding="utf-8")
    env = {**os.environ, "VEGA_CONFIG_DIR": str(root / "config"), "OMP_NUM_THREADS": "1"}
    if extra_pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([extra_pythonpath, *sys.path])
    argv = [sys.executable, "-m", "trainer_core", "train", "--profile", str(profile), "--run-dir", str(root / "run")]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=280)
    return done, root / "run"


@pytest.fixture(scope="module")
def board_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    done, run_dir = train(tmp_path_factory.mktemp("board"))
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def test_scalars_and_audio_samples_read_back_with_tensorboards_reader(board_run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = EventAccumulator(str(board_run / "tensorboard"), size_guidance={"scalars": 0, "audio": 0})
    board.Reload()
    events = read_all(board_run / "events.jsonl")
    logged = {}
    for step_event in of_type(events, "step"):
        logged.update(zip(step_event.step_series, step_event.loss_series, strict=True))
    read_back = {s.step: s.value for s in board.Scalars("train/loss")}
    assert sorted(read_back) == sorted(logged) == list(range(1, STEPS + 1))
    assert read_back == pytest.approx(logged, rel=1e-6)
    validations = {e.step: e.loss for e in of_type(events, "validation")}
    assert {s.step: s.value for s in board.Scalars("val/loss")} == pytest.approx(validations, rel=1e-6)

    samples = [e for e in of_type(events, "sample") if e.kind == "audio"]
    assert (
        {f"samples/{Path(e.path).stem}" for e in samples} == set(board.Tags()["audio"]) == {"samples/01", "samples/02"}
    )
    first = board.Audio("samples/01")
    assert [a.step for a in first] == sorted({e.step for e in samples})
    assert first[0].sample_rate == 22050 and first[0].length_frames > 1000
    assert first[0].encoded_audio_string[:4] == b"RIFF", "a real wav inside the event file"


def test_without_the_package_the_run_goes_on_and_says_what_to_install(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoTensorBoard:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'tensorboard' or name.startswith('tensorboard.'):\n"
        "            raise ImportError('No module named tensorboard (hidden by the test)')\n"
        "sys.meta_path.insert(0, _NoTensorBoard())\n"
    )
    done, run_dir = train(tmp_path, extra_pythonpath=str(blocker))
    assert done.returncode == 0, done.stderr[-3000:]
    events = read_all(run_dir / "events.jsonl")
    (warning,) = [e for e in of_type(events, "warning") if e.code == "tensorboard_unavailable"]
    assert 'pip install "vega[tensorboard]"' in warning.message and "logging.tensorboard = false" in warning.message
    assert not (run_dir / "tensorboard").exists()
    assert of_type(events, "finished")[-1].status == "completed"
