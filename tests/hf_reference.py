"""A small random VITS made by transformers itself (its VitsConfig + save_pretrained), for the tests
that load, speak and export transformers' format: the same folder in both weight-norm layouts, and
transformers' own speech from a folder to compare Vega's with."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

# MMS's vocabulary shape: pad ("_" here is a real symbol, id 0 the blank), letters, space, apostrophe.
VOCAB = {symbol: index for index, symbol in enumerate(["k", "'", "z", "y", "u", "d", "h", "e", "s", "w", "–", "3",
                                                       "c", "p", "-", "1", "j", "m", "i", " ", "f", "l", "o", "0",
                                                       "b", "r", "a", "4", "2", "n", "_", "x", "v", "t", "q", "5",
                                                       "6", "g"])}  # fmt: skip
TOKENIZER = {
    "add_blank": True, "normalize": True, "phonemize": False, "is_uroman": False, "language": "eng",
    "pad_token": "k", "unk_token": "<unk>", "tokenizer_class": "VitsTokenizer", "model_max_length": 1000000000000,
}  # fmt: skip
CARD = "---\nlicense: cc-by-nc-4.0\ntags:\n- mms\n- vits\npipeline_tag: text-to-speech\n---\n\n# A tiny MMS VITS\n"
# Tiny, but every part of MMS's shape: stochastic durations, 4 upsamplings, resblock 1, 16 kHz.
TINY: dict[str, Any] = {
    "vocab_size": len(VOCAB), "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "ffn_dim": 16,
    "flow_size": 8, "spectrogram_bins": 129, "upsample_initial_channel": 32, "upsample_rates": [4, 4, 2, 2],
    "upsample_kernel_sizes": [8, 8, 4, 4], "resblock_kernel_sizes": [3, 5],
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5]], "posterior_encoder_num_wavenet_layers": 2,
    "prior_encoder_num_wavenet_layers": 2, "prior_encoder_num_flows": 2, "sampling_rate": 16000,
}  # fmt: skip
OLD_G, OLD_V = ".weight_g", ".weight_v"
NEW_G, NEW_V = ".parametrizations.weight.original0", ".parametrizations.weight.original1"


def make_folder(folder: Path, seed: int = 0, vocab: dict[str, int] | None = None, **overrides: Any) -> Path:
    """save_pretrained of a random transformers VitsModel, with MMS's tokenizer files (`vocab`, else VOCAB)
    and model card."""
    from transformers import VitsConfig, VitsModel

    vocab = vocab or VOCAB
    torch.manual_seed(seed)
    model = VitsModel(VitsConfig(**{**TINY, "vocab_size": len(vocab), **overrides})).eval()
    with torch.no_grad():
        # Random flows and affine layers start at zero in training; give them values so every tensor matters.
        for name, parameter in model.named_parameters():
            if "flows" in name or "conv_post" in name or "conv_proj" in name:
                parameter.add_(torch.randn_like(parameter) * 0.05)
        model.decoder.conv_post.weight.mul_(0.05)  # speech well inside tanh's range, so differences show
        if hasattr(model.duration_predictor, "flows"):  # a few frames per symbol: short audio, quick tests
            model.duration_predictor.flows[0].translate[0] += 3.0
    model.save_pretrained(folder)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps(TOKENIZER), encoding="utf-8")
    (folder / "README.md").write_text(CARD, encoding="utf-8")
    return folder


def hub_cache_with(cache: Path, repo: str, folder: Path) -> str:
    """huggingface_hub's cache layout (blobs by hash, a snapshot of links, refs/main) holding `folder`."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = cache / f"models--{repo.replace('/', '--')}"
    (root / "blobs").mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for path in folder.iterdir():
        data = path.read_bytes()
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / path.name).symlink_to(os.path.relpath(blob, snapshot))
    return commit


def old_layout_copy(folder: Path, out: Path) -> Path:
    """The folder with its weight-norm tensors renamed weight_g / weight_v, as the hub's MMS files hold them."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, out)
    state = load_file(str(folder / "model.safetensors"))
    renamed = {name.replace(NEW_G, OLD_G).replace(NEW_V, OLD_V): value for name, value in state.items()}
    assert any(name.endswith(OLD_G) for name in renamed)
    save_file(renamed, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def transformers_speech(folder: Path, ids: list[int], speaker: int | None = None) -> torch.Tensor:
    """transformers' VitsModel from `folder` speaking `ids` with every noise off: (samples,)."""
    from transformers import VitsModel

    model = VitsModel.from_pretrained(folder).eval()
    model.noise_scale, model.noise_scale_duration, model.speaking_rate = 0.0, 0.0, 1.0
    with torch.no_grad():
        kwargs = {"speaker_id": speaker} if speaker is not None else {}
        return model(torch.tensor([ids]), **kwargs).waveform[0]


def vega_speech(generator: Any, ids: list[int], speaker: int | None = None) -> torch.Tensor:
    """Vega's generator speaking `ids` with noise scales 0 and length scale 1: (samples,)."""
    sid = torch.tensor([speaker]) if speaker is not None else None
    with torch.no_grad():
        out = generator.infer(torch.tensor([ids]), torch.tensor([len(ids)]), sid=sid, noise_scale=0.0,
                              noise_scale_w=0.0, length_scale=1.0)  # fmt: skip
    return out.audio[0, 0]
