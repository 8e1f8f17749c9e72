"""`trainer-core synth` end to end: a real short voice training run, then the CLI on its outputs (through its entry
point in this process; one check runs a fresh interpreter to see what synth imports)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

from conftest import run_here, tiny_voice_profile
from trainer_core.contract.errors import VegaError

REPO = Path(__file__).resolve().parent.parent
STEPS = 6

TINY_VOICE_PROFILE = tiny_voice_profile("synth-test", STEPS, STEPS, ["Hello."])


def _env(config_dir: Path) -> dict[str, str]:
    # An empty config folder: no machine file or user profile of this computer changes the run.
    return {**os.environ, "VEGA_CONFIG_DIR": str(config_dir), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A finished voice run: `trainer-core train` on the demo corpus."""
    root = tmp_path_factory.mktemp("voice-run")
    (root / "config").mkdir()
    profile = root / "tiny-voice.toml"
    profile.write_text(TINY_VOICE_PROFILE, encoding="utf-8")
    env = _env(root / "config")
    result = run_here(env, "train", "--profile", str(profile), "--run-dir", str(root / "run"))
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "run", env


def _wav_seconds(path: Path) -> float:
    info = soundfile.info(str(path))
    assert (info.samplerate, info.channels, info.subtype) == (22050, 1, "PCM_16")
    audio, _ = soundfile.read(str(path))
    assert np.sqrt(np.mean(audio**2)) > 0.01, "not silent"
    return info.duration


def test_the_training_run_wrote_voice_samples_checkpoints_and_an_export(run_dir) -> None:
    run, _ = run_dir
    events = [json.loads(line) for line in (run / "events.jsonl").read_text(encoding="utf-8").splitlines()]
    steps = [e for e in events if e["type"] == "step"]
    assert {"total", "mel", "prior", "duration"} <= set(steps[-1]["losses"])
    samples = [e for e in events if e["type"] == "sample" and e["kind"] == "audio"]  # images: test_voice_views.py
    assert samples and samples[-1]["text"] == "Hello."
    assert Path(samples[-1]["path"]) == run / "samples" / f"step-{STEPS:08d}" / "01.wav"
    _wav_seconds(Path(samples[-1]["path"]))
    assert events[-1]["type"] == "finished" and events[-1]["status"] == "completed"
    config = json.loads((run / "export" / "config.json").read_text(encoding="utf-8"))
    assert config["model"]["kind"] == "tts" and config["model"]["text"]["symbols"][:2] == ["<pad>", "<unk>"]


def test_synth_from_a_checkpoint_and_from_the_export(run_dir, tmp_path: Path) -> None:
    run, env = run_dir
    checkpoint = run / "checkpoints" / f"step-{STEPS:08d}.pt"
    out = tmp_path / "nested" / "hello.wav"
    result = run_here(
        env, "synth", "--checkpoint", str(checkpoint), "--text", "Hello there, wörld!", "--out", str(out), "--json"
    )
    assert result.returncode == 0, result.stderr
    written = json.loads(result.stdout)
    assert written["out"] == str(out) and written["sample_rate"] == 22050 and written["symbols"] == 19
    normal = _wav_seconds(out)
    assert normal == pytest.approx(written["seconds"], abs=1e-3)

    slow = tmp_path / "slow.wav"
    result = run_here(
        env,
        "synth",
        "--export",
        str(run / "export"),
        "--text",
        "Hello there, wörld!",
        "--out",
        str(slow),
        "--length-scale",
        "2.5",
    )
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stdout and str(slow) in result.stdout
    assert _wav_seconds(slow) > 1.5 * normal, "the export holds the same model; a larger length scale is slower"


def test_synth_errors_are_one_clear_line(run_dir, tmp_path: Path) -> None:
    from trainer_core.engine.export import export_model
    from trainer_core.models.lm import LmConfig, build_model

    _, env = run_dir
    out_x, out_y = str(tmp_path / "x.wav"), str(tmp_path / "y.wav")
    missing = run_here(env, "synth", "--checkpoint", str(tmp_path / "nope.pt"), "--text", "hi", "--out", out_x)
    assert missing.returncode == 2 and missing.stderr.startswith("error:") and "nope.pt" in missing.stderr
    assert "Traceback" not in missing.stderr
    lm_config = LmConfig(context_bytes=16, hidden=8, layers=1, heads=1, ffn_mult=1, dropout=0.0)
    export_model(build_model(lm_config, 0), {"kind": "lm"}, tmp_path / "lm-export")
    wrong = run_here(env, "synth", "--export", str(tmp_path / "lm-export"), "--text", "hi", "--out", out_y)
    assert wrong.returncode == 2 and "not a TTS voice" in wrong.stderr
    assert not (tmp_path / "x.wav").exists() and not (tmp_path / "y.wav").exists()


def test_loading_helpers_refuse_text_with_nothing_to_say(run_dir, tmp_path: Path) -> None:
    from trainer_core.cli.synthesiser import load_from_export, synthesise_to_wav

    run, _ = run_dir
    synth = load_from_export(run / "export")
    assert synth.encoder.units == "chars" and synth.audio.sample_rate == 22050
    with pytest.raises(VegaError, match="nothing to say"):
        synthesise_to_wav(synth, "   \n", tmp_path / "empty.wav")
    result = synthesise_to_wav(synth, "Ünïcödé, 日本語!", tmp_path / "unicode.wav", iters=2)
    assert result["frames"] >= result["symbols"] and Path(result["out"]).is_file()


def test_a_text_file_becomes_one_wav_per_line_with_an_index(run_dir, tmp_path: Path) -> None:
    run, env = run_dir
    script = tmp_path / "lines.txt"
    script.write_text(
        "Hi.\n\nA somewhat longer line to say.\n   \n%%%\nThis one is the longest line of them all, by far.\n",
        encoding="utf-8",
    )
    out = tmp_path / "spoken"
    result = run_here(env, "synth", "--export", str(run / "export"), "--text-file", str(script), "--out-dir", str(out))
    # "%%%" has symbols; a line with none would be listed. All four non-empty lines are spoken.
    assert result.returncode == 0, result.stderr
    assert "wrote 4 wavs" in result.stdout
    index = json.loads((out / "index.json").read_text(encoding="utf-8"))
    assert [(row["line"], row["file"]) for row in index] == [
        (1, "0001.wav"),
        (3, "0003.wav"),
        (5, "0005.wav"),
        (6, "0006.wav"),
    ]
    seconds = [_wav_seconds(out / row["file"]) for row in index]
    assert seconds == pytest.approx([row["seconds"] for row in index], abs=1e-3)
    assert seconds[0] < seconds[1] < seconds[3], "longer lines take longer to say"
    rows = (out / "index.csv").read_text(encoding="utf-8").splitlines()
    assert rows[0] == "line,file,text,seconds,error" and rows[2].startswith("3,0003.wav,A somewhat longer line")


def test_text_file_mistakes_are_named_before_the_model_loads(run_dir, tmp_path: Path) -> None:
    run, env = run_dir
    export = str(run / "export")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    a_file = tmp_path / "taken"
    a_file.write_text("x", encoding="utf-8")
    script = tmp_path / "ok.txt"
    script.write_text("Hello.\n", encoding="utf-8")
    cases = [
        (["--text-file", str(tmp_path / "missing.txt"), "--out-dir", str(tmp_path / "o")], "missing.txt: no such file"),
        (["--text-file", str(empty), "--out-dir", str(tmp_path / "o")], "no non-empty line"),
        (["--text-file", str(script), "--out-dir", str(a_file)], "is a file, not a folder"),
        (["--text-file", str(script), "--out", str(tmp_path / "x.wav")], "give --out-dir DIR"),
        (["--text", "hi", "--out-dir", str(tmp_path / "o")], "give --out FILE.wav"),
    ]
    for args, message in cases:
        done = run_here(env, "synth", "--export", export, *args)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
    assert a_file.read_text(encoding="utf-8") == "x"


def test_speaking_imports_neither_dynamo_nor_librosa() -> None:
    """Those two imports cost ~7 s of a cold synth; the speaking path needs neither."""
    code = (
        "import sys\n"
        "from trainer_core.cli import synth_cmd, synth_batch\n"
        "from trainer_core.models import tts, alignment, text_frontend\n"
        "from trainer_core.models import griffin_lim, mel_vocoders, gan_vocoder\n"
        "from trainer_core.cli import vocode_cmd\n"
        "from trainer_core.engine import checkpoint_manager, export\n"
        "print(sorted(m for m in sys.modules if m.startswith(('torch._dynamo', 'librosa'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
