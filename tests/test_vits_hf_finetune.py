"""A transformers VITS folder fine-tuned headless (`trainer-core train --init-from FOLDER`): its
settings adopted (16 kHz), every generator tensor loaded strictly, a fresh discriminator; the run
ends with export/hf/{last,best}, which transformers loads and speaks as Vega does; `export --hf` of
the run writes the same."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import torch

from conftest import TEST_VOICE, TrainerLauncher, finished, of_type
from hf_reference import make_folder, transformers_speech
from trainer_core.cli import main
from trainer_core.cli.vits_voice import voice_from_config
from trainer_core.engine.checkpoint_manager import load_checkpoint
from trainer_core.engine.export import load_exported
from trainer_core.engine.model_source import load_model_source

STEPS = 2
TOLERANCE = 1e-4
FAST = {
    "compute.mode": "cpu", "compute.num_threads": 1, "train.batch_size": 2, "vits.segment_size": 512,
    "vits.discriminator_channels": 2, "train.max_steps": STEPS, "train.eval_every_steps": STEPS,
    "train.free_running_every": 0, "data.cache_dir": "cache", "data.val_max_items": 2, "sample.sentences": ["hi"],
    "logging.report": False, "vits.discriminator_warmup_steps": 1,
    "train.checkpoint_every_steps": 1,
}  # fmt: skip


def test_a_transformers_vits_fine_tunes_and_ends_as_a_folder_transformers_speaks(
    tmp_path: Path,
) -> None:
    source = make_folder(tmp_path / "mms-tts-tiny")
    voices = TrainerLauncher(tmp_path, TEST_VOICE)
    voices.profile = Path(__file__).resolve().parent.parent / "profiles" / "vits-medium.toml"
    run = voices.run_here("ft", FAST, "--init-from", str(source))
    assert run.proc.returncode == 0, run.stderr
    events = run.events()
    assert finished(events).status == "completed" and finished(events).step == STEPS
    start = of_type(events, "init_from")[0]
    assert start.form == "hf" and start.kind == "vits" and start.skipped == 0
    assert start.new > 0 and all(name.startswith("model_d.") for name in start.new_names)  # a fresh discriminator
    # Step 1 trains the fresh discriminator alone (vits.discriminator_warmup_steps): the generator is the
    # folder's after it; step 2 trains both.
    first = load_checkpoint(run.run_dir / "checkpoints" / "step-00000001.pt")["model"]
    loaded = load_model_source(source).weights
    assert len(loaded) > 100 and all(torch.equal(first[name], value) for name, value in loaded.items())
    assert {"generator.mel", "discriminator.total"} <= set(of_type(events, "step")[-1].losses)
    frozen = tomllib.loads((run.run_dir / "profile.toml").read_text(encoding="utf-8"))
    assert frozen["audio"]["sample_rate"] == 16000 and frozen["vits"]["hidden_channels"] == 8
    assert frozen["vits"]["upsample_rates"] == [4, 4, 2, 2] and frozen["vits"]["resblock"] == "1"

    last, best = run.run_dir / "export" / "hf" / "last", run.run_dir / "export" / "hf" / "best"
    assert (best / "config.json").is_file()
    assert "license: cc-by-nc-4.0" in (last / "README.md").read_text(encoding="utf-8")
    weights, document = load_exported(run.run_dir / "export")
    voice = voice_from_config(document["model"], weights, run.run_dir / "export", "cpu")
    text = "the sun is warm"
    ids = voice.encoder.encode(text)
    ours = torch.from_numpy(voice.speaker.speak(voice.model, text, noise_scales=(0.0, 0.0)))
    theirs = transformers_speech(last, ids)
    assert ours.shape == theirs.shape and (ours - theirs).abs().max().item() < TOLERANCE
    before = transformers_speech(source, ids)
    assert before.shape != theirs.shape or (before - theirs).abs().max().item() > TOLERANCE  # it trained

    # `trainer-core export --hf` of the run's export writes the same folder (in this process: torch is loaded).
    out = tmp_path / "cli-hf"
    assert main(["export", "--hf", str(run.run_dir / "export"), "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text()) == json.loads((last / "config.json").read_text())
    assert (out / "model.safetensors").read_bytes() == (last / "model.safetensors").read_bytes()
