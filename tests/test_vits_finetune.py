"""Fine-tuning headless, as `trainer-core train --init-from` on a terminal: a Piper checkpoint made by Piper's own
code trains 20 steps on the test voice, every tensor of it loaded strictly, its settings adopted. (A vits
run started from another vits run and resumed: tests/test_vits_train.py.)"""

from __future__ import annotations

import tomllib
from pathlib import Path

from conftest import TEST_VOICE, TrainerLauncher, finished, of_type, step_rows
from trainer_core.contract.piper_voice import read_pickled_document
from trainer_core.engine.checkpoint_manager import list_checkpoints

STEPS = 20
FAST = {
    "compute.mode": "cpu", "compute.num_threads": 1, "train.batch_size": 1, "vits.segment_size": 512,
    "train.max_steps": STEPS, "train.eval_every_steps": STEPS, "train.free_running_items": 2,
    "data.cache_dir": "cache", "data.val_max_items": 4,
    # Piper's discriminator is full size (47M parameters) whatever the voice: trained, it is 3/4 of each CPU
    # step. Loaded and used but frozen here (train.freeze through the CLI); the dashboard's pilot test and the
    # engine's tests train it.
    "train.freeze": ["discriminator"],
}  # fmt: skip


def test_a_piper_checkpoint_fine_tunes_for_20_steps_headless(tmp_path: Path, piper_voice: Path) -> None:
    voices = TrainerLauncher(tmp_path, TEST_VOICE)
    voices.profile = Path(__file__).resolve().parent.parent / "profiles" / "vits-medium.toml"
    run = voices.run_here("ft", FAST, "--init-from", str(piper_voice))
    assert run.proc.returncode == 0, run.stderr
    events = run.events()
    assert finished(events).status == "completed" and finished(events).step == STEPS
    start = of_type(events, "init_from")[0]
    assert start.form == "piper" and start.kind == "vits" and start.skipped == 0 and start.new == 0
    assert start.mapped[0].name == "model_g.enc_p.emb.weight" and start.mapped[0].by == "symbol"
    # Every tensor of the model came from the checkpoint, generator and discriminator (read without its tensors).
    model = read_pickled_document(list_checkpoints(run.run_dir / "checkpoints")[0])["model"]
    assert start.loaded + 1 == len(model)  # + the embedding, moved row by row
    assert {name.split(".")[0] for name in model} == {"model_g", "model_d"}
    steps = step_rows(events)
    assert sorted(steps) == list(range(1, STEPS + 1))
    losses = [e.losses for e in of_type(events, "step")]
    assert all(value == value for row in losses for value in row.values())  # finite: no NaN in any part
    assert all(name.startswith("generator.") for name in losses[-1]), losses[-1]  # the frozen one: no step
    assert losses[-1]["generator.kl"] < losses[0]["generator.kl"]
    frozen = tomllib.loads((run.run_dir / "profile.toml").read_text(encoding="utf-8"))
    # The checkpoint's 16 kHz replaced the profile's 22.05 kHz: the test clips were resampled to it.
    assert frozen["audio"]["sample_rate"] == 16000 and frozen["vits"]["hidden_channels"] == 16
    assert frozen["train"]["lr"] == 2e-4
    assert of_type(events, "free_running")[-1].vocoder == "vits"
    assert (run.run_dir / "export" / "model.safetensors").is_file()
