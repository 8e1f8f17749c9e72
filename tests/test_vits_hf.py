"""transformers' VITS format into Vega's vits model: a random VITS made and saved by transformers loads
tensor for tensor, in both weight-norm layouts, and speaks as transformers' own VitsModel does with
every noise off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_reference import hub_cache_with, make_folder, old_layout_copy, transformers_speech, vega_speech
from trainer_core.contract.errors import InitSourceError
from trainer_core.contract.hf_voice import hf_audio_section, hub_folder, read_hf_voice
from trainer_core.models.vits.hf_config import vits_config_from_hf
from trainer_core.models.vits.hf_folder import HfWeightsError, load_hf_generator
from vega_tui.start_points import typed_start_point

TOLERANCE = 1e-4
IDS = [
    0,
    26,
    0,
    29,
    0,
    5,
    0,
    19,
    0,
    7,
    0,
    8,
    0,
    33,
    0,
]  # "and est" with blanks (id 0) between symbols


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("hf")
    saved = make_folder(base / "saved")
    return {"parametrizations": saved, "weight_g/weight_v": old_layout_copy(saved, base / "hub")}


@pytest.mark.parametrize("layout", ["parametrizations", "weight_g/weight_v"])
def test_a_transformers_vits_loads_strictly_and_speaks_as_transformers_does(
    folders: dict[str, Path], layout: str
) -> None:
    folder = folders[layout]
    generator = load_hf_generator(read_hf_voice(folder))
    ours, theirs = vega_speech(generator, IDS), transformers_speech(folder, IDS)
    assert ours.shape == theirs.shape and theirs.abs().max() < 0.9  # speech, not a saturated tanh
    assert (ours - theirs).abs().max().item() < TOLERANCE
    # Negative control: one tensor changed a little, and the comparison fails.
    with torch.no_grad():
        generator.flow.flows[2].enc.in_layers[0].bias.add_(0.05)
    assert (vega_speech(generator, IDS) - theirs).abs().max().item() > 10 * TOLERANCE


def test_speakers_and_the_deterministic_duration_predictor_match_too(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "multi", seed=1, num_speakers=3, speaker_embedding_size=4,
                         use_stochastic_duration_prediction=False)  # fmt: skip
    generator = load_hf_generator(read_hf_voice(folder))
    ours, theirs = (
        vega_speech(generator, IDS, speaker=2),
        transformers_speech(folder, IDS, speaker=2),
    )
    assert ours.shape == theirs.shape and (ours - theirs).abs().max().item() < TOLERANCE
    assert (vega_speech(generator, IDS, speaker=0) - theirs).abs().max().item() > 10 * TOLERANCE


def test_a_folder_that_does_not_fit_names_each_tensor(folders: dict[str, Path], tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "damaged"
    folder.mkdir()
    for name in ("config.json", "vocab.json", "tokenizer_config.json"):
        (folder / name).write_bytes((folders["parametrizations"] / name).read_bytes())
    state = load_file(str(folders["parametrizations"] / "model.safetensors"))
    state.pop("flow.flows.1.conv_pre.bias")
    state["decoder.extra.weight"] = state.pop("decoder.conv_post.weight")
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(HfWeightsError) as caught:
        load_hf_generator(read_hf_voice(folder))
    message = str(caught.value)
    assert "flow.flows.1.conv_pre.bias" in message and "decoder.conv_post.weight" in message
    assert "decoder.extra.weight" in message and "1 of its tensors are unused" in message


def test_config_values_vega_cannot_hold_are_refused_by_name(folders: dict[str, Path]) -> None:
    config = json.loads((folders["parametrizations"] / "config.json").read_text(encoding="utf-8"))
    assert vits_config_from_hf(config, "x").resblock == "1"
    for field, value in (
        ("window_size", 3),
        ("wavenet_kernel_size", 3),
        ("duration_predictor_flow_bins", 8),
    ):
        with pytest.raises(InitSourceError, match=rf"{field} is {value}"):
            vits_config_from_hf({**config, field: value}, "x")
    audio = hf_audio_section(config)
    assert (audio["sample_rate"], audio["n_fft"], audio["hop_length"]) == (16000, 256, 64)


def test_hub_ids_resolve_from_the_cache_and_offline_misses_name_the_fetch_command(
    folders: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants, scan_cache_dir, try_to_load_from_cache

    cache = tmp_path / "hub"
    commit = hub_cache_with(cache, "tiny-org/mms-tts-tiny", folders["weight_g/weight_v"])
    assert [r.repo_id for r in scan_cache_dir(cache).repos] == ["tiny-org/mms-tts-tiny"]
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    folder = hub_folder("hf:tiny-org/mms-tts-tiny")
    assert folder.name == commit and Path(str(try_to_load_from_cache("tiny-org/mms-tts-tiny", "config.json",
                                                                    cache_dir=cache))).parent == folder  # fmt: skip
    assert read_hf_voice(folder).license == "cc-by-nc-4.0"
    # The dashboard's typed field: a cached id is checked from the cache; an uncached one waits for Start.
    point = typed_start_point("hf:tiny-org/mms-tts-tiny", "vits")
    assert str(point.path) == "hf:tiny-org/mms-tts-tiny" and str(folder) in point.detail
    with pytest.raises(InitSourceError, match="trains a tts model"):
        typed_start_point("hf:tiny-org/mms-tts-tiny", "tts")
    assert "not cached" in typed_start_point("hf:facebook/mms-tts-kmr-script_latin", "vits").detail
    with pytest.raises(InitSourceError, match="hf:ORG/NAME"):
        typed_start_point("hf:facebook", "vits")
    # Through the command line, in a fresh process offline: exit status 2 and the command that fetches it.
    env = {
        **os.environ,
        "HF_HUB_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.getcwd(),
    }
    args = ["-m", "trainer_core", "train", "--dry-run", "--init-from", "hf:facebook/mms-tts-kmr-script_latin",
            "--data", str(tmp_path), "--run-dir", str(tmp_path / "run")]  # fmt: skip
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "hf download facebook/mms-tts-kmr-script_latin" in done.stderr and "HF_HUB_OFFLINE" in done.stderr


def test_export_round_trip_transformers_loads_speaks_and_tokenizes_it(folders: dict[str, Path], tmp_path: Path) -> None:
    from transformers import VitsTokenizer, pipeline

    from trainer_core.contract.mms_tokenizer import read_tokenizer_folder
    from trainer_core.contract.profile_audio import TtsSection
    from trainer_core.models.vits.hf_export import export_hf
    from trainer_core.models.vits.symbols import SymbolTable

    source = folders["weight_g/weight_v"]
    voice = read_hf_voice(source)
    generator = load_hf_generator(voice)
    with torch.no_grad():  # a fine-tuned voice: not the source's numbers any more
        generator.dec.resblocks[1].convs1[0].bias.add_(0.01)
    symbols, _ = SymbolTable.build([], TtsSection(), voice.num_symbols, None, read_tokenizer_folder(source))
    out = tmp_path / "exported"
    export_hf(generator, generator.config, symbols, 16000, out, {"noise_scale": 0.5, "length_scale": 1.25},
              base={"id": "tiny-org/mms-tts-tiny", "license": voice.license}, step=7)  # fmt: skip
    document = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert document["model_type"] == "vits" and document["architectures"] == ["VitsModel"]
    assert document["speaking_rate"] == 0.8 and document["noise_scale"] == 0.5
    assert "license: cc-by-nc-4.0" in (out / "README.md").read_text(encoding="utf-8")
    text = "and est"
    ids = symbols.encode(text)
    assert VitsTokenizer.from_pretrained(out)(text)["input_ids"] == ids
    ours, theirs = vega_speech(generator, ids), transformers_speech(out, ids)
    assert ours.shape == theirs.shape and (ours - theirs).abs().max().item() < TOLERANCE
    assert (transformers_speech(source, ids) - theirs).abs().max().item() > 10 * TOLERANCE  # the change came along
    spoken = pipeline("text-to-speech", model=str(out), device="cpu")(text)
    assert spoken["sampling_rate"] == 16000 and spoken["audio"].size > 0


def test_voices_transformers_cannot_hold_are_refused_with_the_reason(tmp_path: Path) -> None:
    from trainer_core.models.vits.config import VitsConfig
    from trainer_core.models.vits.hf_config import hf_config_from_vits

    with pytest.raises(InitSourceError, match='residual block "2"'):
        hf_config_from_vits(VitsConfig(), 22050)


def test_an_original_vits_discriminator_checkpoint_loads_into_vegas(tmp_path: Path) -> None:
    """D_*.pth as VITS's training wrote it (Meta's MMS checkpoints): {"model": ..., "iteration", "optimizer",
    "learning_rate"}, old weight-norm names, a "module." prefix; made from Piper's discriminator (VITS's own)."""
    from piper_reference import shared_discriminator
    from trainer_core.models.vits.discriminator import MultiPeriodDiscriminator
    from trainer_core.models.vits.hf_discriminator import read_discriminator

    theirs = shared_discriminator()
    state = {f"module.{name}": value for name, value in theirs.state_dict().items()}
    assert any(name.endswith(".weight_g") for name in state)
    path = tmp_path / "D_100000.pth"
    torch.save({"model": state, "iteration": 100000, "optimizer": {}, "learning_rate": 2e-4}, path)
    ours = MultiPeriodDiscriminator(32).eval()
    weights = {k.removeprefix("model_d."): v for k, v in read_discriminator(path).items()}
    ours.load_state_dict(weights, strict=True)
    wave, fake = torch.randn(1, 1, 4096) * 0.1, torch.randn(1, 1, 4096) * 0.1
    with torch.no_grad():
        expected, got = theirs(wave, fake)[0], ours(wave, fake)[0]
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(expected, got, strict=True))


def test_the_plan_adopts_the_models_settings_and_warms_a_fresh_discriminator(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    from conftest import TEST_VOICE
    from trainer_core.plan import make_plan

    base = [
        'compute.mode="cpu"',
        f"data.path={json.dumps(str(TEST_VOICE))}",
        f"data.cache_dir={json.dumps(str(tmp_path / 'cache'))}",
    ]
    start = [f"train.init_from={json.dumps(str(folders['parametrizations']))}"]
    plan = make_plan("vits-medium", base + start, run_dir=tmp_path / "run", use_machine_file=False)
    assert plan.init_from is not None and plan.init_from["form"] == "hf" and plan.init_from["kind"] == "vits"
    changes = plan.init_from["settings"]
    assert "audio.sample_rate: 22050 -> 16000" in changes and "vits.discriminator_warmup_steps: None -> 200" in changes
    assert any("resampled to 16000 Hz" in line for line in changes)
    assert plan.profile.vits.upsample_rates == [4, 4, 2, 2] and plan.profile.audio.n_fft == 256
    with_d = start + [f"train.init_discriminator={json.dumps(str(tmp_path / 'D_1.pth'))}"]
    plan = make_plan("vits-medium", base + with_d, run_dir=tmp_path / "run2", use_machine_file=False)
    assert plan.profile.vits.discriminator_warmup_steps == 0


def test_a_converted_train_folders_discriminator_loads_and_its_generator_ignores_it(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    """finetune-hf-vits's "-train" folders keep the discriminator beside the generator: `discriminator.*`, plain
    weights (weight norm removed), the last layer named final_conv."""
    import shutil

    from safetensors.torch import load_file, save_file

    from trainer_core.models.vits.discriminator import MultiPeriodDiscriminator
    from trainer_core.models.vits.hf_discriminator import read_discriminator

    torch.manual_seed(3)
    source_d = MultiPeriodDiscriminator(4).eval()
    plain = {}
    for name, value in source_d.state_dict().items():
        name = name.replace(".conv_post.", ".final_conv.")
        if name.endswith(".parametrizations.weight.original0"):
            stem = name.removesuffix(".parametrizations.weight.original0")
            direction = source_d.state_dict()[
                stem.replace(".final_conv", ".conv_post") + ".parametrizations.weight.original1"
            ]
            plain[f"discriminator.{stem}.weight"] = torch._weight_norm(direction, value, 0)
        elif not name.endswith(".original1"):
            plain[f"discriminator.{name}"] = value
    folder = tmp_path / "mms-tts-tiny-train"
    shutil.copytree(folders["parametrizations"], folder)
    save_file(
        {**load_file(str(folder / "model.safetensors")), **plain},
        str(folder / "model.safetensors"),
    )
    load_hf_generator(read_hf_voice(folder))  # the discriminator's tensors are not the generator's: no error
    ours = MultiPeriodDiscriminator(4).eval()
    ours.load_state_dict({k.removeprefix("model_d."): v for k, v in read_discriminator(folder).items()}, strict=True)
    wave = torch.randn(1, 1, 2048) * 0.1
    with torch.no_grad():
        expected, got = source_d(wave, wave)[0], ours(wave, wave)[0]
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(expected, got, strict=True))
