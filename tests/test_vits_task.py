"""The vits model kind around its model: Piper's quality levels as profiles, the symbol map, the plan of a run
that starts from a Piper checkpoint (its settings adopted, what maps), freezing parts, and the run's own voice
through synth and evaluate."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import soundfile as sf
import torch

from conftest import TEST_VOICE, new_group_trainer, new_vits_export
from trainer_core.cli import main
from trainer_core.cli.plan_document import plan_report
from trainer_core.contract.errors import ProfileError
from trainer_core.contract.profile_loader import find_profile, load_profile
from trainer_core.contract.profile_vits import VitsSection
from trainer_core.models.vits.config import QUALITY_PRESETS
from trainer_core.models.vits.shape import config_from_profile
from trainer_core.models.vits.symbols import SymbolTable
from trainer_core.plan import make_plan
from trainer_core.tiny_profiles import tiny_profile

pytestmark = pytest.mark.usefixtures("one_torch_thread", "keep_torch_threads")


@pytest.mark.parametrize("quality", ["x_low", "low", "medium", "high"])
def test_each_quality_profile_is_pipers_quality_level(quality: str) -> None:
    profile = load_profile(find_profile(f"vits-{quality}"))
    preset = QUALITY_PRESETS[quality]
    config = config_from_profile(profile, 256, 1)
    assert profile.vits.quality == quality and profile.audio.sample_rate == preset["sample_rate"]
    assert {name: getattr(config, name) for name in preset if name != "sample_rate"} == {
        name: value for name, value in preset.items() if name != "sample_rate"
    }
    # Piper's audio front end: 1024-point FFT, hop 256, 80 mels up to the Nyquist frequency.
    a = profile.audio
    assert (a.n_fft, a.hop_length, a.win_length, a.n_mels, a.f_min, a.f_max) == (
        1024, 256, 1024, 80, 0.0, preset["sample_rate"] / 2,
    )  # fmt: skip


def test_a_decoder_that_cannot_make_the_hop_is_refused_naming_both() -> None:
    with pytest.raises(ProfileError, match=r"=800: vits.upsample_rates \[8, 8, 4\] make 256 samples per frame but "
                       r"audio.hop_length is 200: their product must equal the hop$"):  # fmt: skip
        load_profile(find_profile("vits-small"), ["audio.hop_length=200", "audio.win_length=800"])
    with pytest.raises(ValueError, match='resblock "1" takes 3 dilations per block'):
        VitsSection(resblock="1")


def test_the_symbol_map_frames_ids_as_piper_and_gives_new_symbols_unused_ids() -> None:
    tts = load_profile(find_profile("vits-small"), ["tts.text_units=chars"]).tts
    base = {"_": [0], "^": [1], "$": [2], " ": [3], "a": [4], "b": [6]}
    table, added = SymbolTable.build(["ab ba", "abc"], tts, 8, base)
    assert added == ["c"] and table.id_map["c"] == [5]  # the first id the base map leaves unused
    assert table.num_symbols == 8
    assert table.encode("ab c") == [1, 0, 4, 0, 6, 0, 3, 0, 5, 0, 2]  # ^ _ a _ b _ ␣ _ c _ $
    assert table.encode("zz") == [] and table.missing["z"] == 2
    grown, more = SymbolTable.build(["abcdefgh"], tts, 8, base)
    assert grown.num_symbols == 12 and more == list("cdefgh")  # 5 and 7 were free; d..h rows past the source
    again = SymbolTable.from_state(json.loads(json.dumps(table.state_dict())))
    assert again.id_map == table.id_map and again.encode("ab c") == table.encode("ab c")
    assert table.vocabulary()[:7] == ["_", "^", "$", " ", "a", "c", "b"]


def test_frozen_parts_do_not_move_and_a_frozen_discriminator_has_no_optimizer(tmp_path: Path) -> None:
    trainer = new_group_trainer("vits", tmp_path, "freeze", 'train.freeze=["text_encoder", "discriminator"]')
    assert [group.name for group in trainer.runner.groups] == ["generator"]
    before = {name: t.clone() for name, t in trainer.module.state_dict().items()}
    assert trainer.runner.run().applied
    after = trainer.module.state_dict()
    moved = {name for name in before if not torch.equal(before[name], after[name])}
    assert moved and not any(name.startswith(("model_g.enc_p.", "model_d.")) for name in moved)
    assert any(name.startswith("model_g.dec.") for name in moved)
    with pytest.raises(Exception, match="'encoder' is not a part of a vits model; parts: text_encoder"):
        new_group_trainer("vits", tmp_path, "bad", 'train.freeze=["encoder"]')


def dry_run(profile: str, *settings: str) -> dict:
    """The plan `trainer-core train --dry-run --json` prints, made in process (no machine file)."""
    overrides = [f"data.path={TEST_VOICE}", "compute.mode=cpu", *settings]
    plan = make_plan(profile, overrides, use_machine_file=False)
    return plan_report(plan).model_dump(mode="json", exclude_unset=True)


def test_a_piper_checkpoint_decides_the_shape_and_audio_and_the_plan_says_what_maps(
    piper_voice: Path, tmp_path: Path
) -> None:
    plan = dry_run("vits-medium", f"train.init_from={piper_voice}")
    start = plan["init_from"]
    assert start["applied"] and start["form"] == "piper" and start["kind"] == "vits"
    assert start["text"].startswith("Piper checkpoint tiny-piper.ckpt (vits, step 0)")
    settings = start["settings"]
    assert "audio.sample_rate: 22050 -> 16000" in settings  # the checkpoint's rate wins: the corpus is resampled
    assert "vits.hidden_channels: 192 -> 16" in settings and "vits.quality: 'medium' -> 'x_low'" in settings
    assert "audio.f_max: 11025.0 -> 8000.0" in settings
    mapping = start["mapping"]
    assert (
        mapping["symbols_seen"] > 20
        and mapping["symbols_known"] + mapping["symbols_new_count"] == (mapping["symbols_seen"])
    )
    assert mapping["text"].startswith(f"{mapping['symbols_known']} of {mapping['symbols_seen']} symbols")
    vits = plan["model"]["vits"]
    assert vits["hidden_channels"] == 16 and vits["discriminator_parameters"] == 46747132  # Piper's fixed MPD
    # A two-stage (tts) profile cannot start from a Piper voice.
    with pytest.raises(ProfileError, match="is a Piper voice, a vits model, .* use a vits profile"):
        dry_run("tts-small", f"train.init_from={piper_voice}")
    # A checkpoint without its voice config beside it names the option that supplies one.
    lonely = tmp_path / "lonely" / "voice.ckpt"
    lonely.parent.mkdir()
    os.link(piper_voice, lonely)
    with pytest.raises(ProfileError, match=r"no Piper voice config for checkpoint .*pass --init-config FILE"):
        dry_run("vits-medium", f"train.init_from={lonely}")
    config = piper_voice.with_suffix(".onnx.json")
    given = dry_run("vits-medium", f"train.init_from={lonely}", f"train.init_config={config}")
    assert given["init_from"]["applied"]


def test_a_vits_voice_is_refused_as_the_start_of_another_kind(tmp_path: Path) -> None:
    source = new_vits_export(tmp_path)
    profile = tmp_path / "tts.toml"
    profile.write_text(tiny_profile("tts"), encoding="utf-8")
    with pytest.raises(ProfileError, match="holds a 'vits' model, but this run trains a 'tts' model"):
        dry_run(str(profile), f"train.init_from={source}")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`trainer-core ARGV` in this process (the commands import nothing a subprocess would not)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_vits_run_speaks_through_synth_and_is_scored_by_evaluate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainer_core.engine.export import export_model

    # Three steps in this process (a checkpoint at the end, then the export, as the trainer writes them).
    trainer = new_group_trainer("vits", tmp_path, "run", "train.max_steps=3", "train.warmup_steps=1",
                                "train.free_running_every=0", "train.eval_every_steps=3")  # fmt: skip
    assert trainer.fit() == "completed"
    run = tmp_path / "run"
    config = {**trainer.task.model_config(), "step": 3, "profile": trainer.profile_toml}
    export_model(trainer.task.export_module(trainer.module), config, run / "export")
    config = json.loads((run / "export" / "config.json").read_text(encoding="utf-8"))["model"]
    assert config["kind"] == "vits" and config["symbols"]["id_map"]["^"] == [1]
    out = tmp_path / "a.wav"
    code, said, _ = cli(capsys, "synth", "--export", str(run / "export"), "--text", "Hello there.", "--out",
                        str(out), "--json")  # fmt: skip
    assert code == 0 and json.loads(said)["sample_rate"] == 16000 and sf.info(str(out)).frames > 0
    checkpoint = sorted((run / "checkpoints").glob("step-*.pt"))[-1]
    code, said, _ = cli(capsys, "synth", "--checkpoint", str(checkpoint), "--text", "Hello there.", "--out",
                        str(tmp_path / "b.wav"))  # fmt: skip
    assert code == 0 and (tmp_path / "b.wav").read_bytes() == out.read_bytes()  # the same generator, the same seed
    code, _, err = cli(capsys, "synth", "--export", str(run / "export"), "--text", "Hi.", "--out",
                       str(tmp_path / "c.wav"), "--vocoder", "griffin-lim")  # fmt: skip
    assert code == 2 and "--vocoder does not go with a vits voice" in err
    code, said, _ = cli(capsys, "evaluate", str(run), "--data", str(TEST_VOICE), "--items", "2", "--json")
    scores = json.loads(said)
    assert code == 0 and scores["vocoder"] == "vits"
    assert len(scores["scores"]["items"]) == len(scores["floor"]["items"]) == 2
    code, _, err = cli(capsys, "export", "--onnx", str(run))
    assert code == 2 and "is a vits voice" in err
