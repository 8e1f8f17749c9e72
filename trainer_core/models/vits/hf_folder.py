"""Read a transformers VITS folder into Vega's generator, and write Vega's generator as one.

`read_hf_weights` reads `model.safetensors` (or `pytorch_model.bin`, weights-only) with either
weight-norm spelling. `vega_weights` maps them onto a generator's tensors strictly: every tensor of
the folder is used and every tensor of the generator is set, else `HfWeightsError` lists each name
missing, unused or of another shape. `write_hf_folder` writes config.json, model.safetensors (the
decoder's weight norm folded), the tokenizer files and a model card: the folder
`VitsModel.from_pretrained` and `pipeline("text-to-speech")` load.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from trainer_core.atomic import atomic_write, atomic_write_text
from trainer_core.contract.errors import InitSourceError
from trainer_core.contract.hf_voice import CONFIG, MODEL_CARD, HfVoice
from trainer_core.models.vits.config import VitsConfig
from trainer_core.models.vits.hf_config import hf_config_from_vits
from trainer_core.models.vits.hf_names import hf_layout, parametrized_names, to_hf, to_vega
from trainer_core.models.vits.piper_checkpoint import fit_problems

GENERATOR = "model_g."
# A discriminator kept in a converted "-train" folder (finetune-hf-vits): not the generator's.
DISCRIMINATOR_PREFIX = "discriminator."


class HfWeightsError(InitSourceError):
    """A transformers VITS folder's tensors do not fit the generator tensor for tensor."""


def read_hf_weights(voice: HfVoice) -> dict[str, Tensor]:
    """The folder's tensors by name (weight-norm tensors in the parametrization spelling)."""
    path = voice.weights
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a damaged file has many ways to fail; the message names it
        raise InitSourceError(
            f"{path}: cannot read its tensors ({exc}); download the model again"
        ) from exc
    if not isinstance(state, Mapping):
        raise InitSourceError(f"{path}: holds no state dict of tensors")
    try:
        return parametrized_names({str(k): v for k, v in state.items() if isinstance(v, Tensor)})
    except ValueError as exc:
        raise InitSourceError(f"{path}: {exc}") from exc


def vega_weights(
    hf: Mapping[str, Tensor], generator: Mapping[str, Tensor], where: str, prefix: str = GENERATOR
) -> dict[str, Tensor]:
    """Every tensor of `generator` (names without `prefix`) from transformers' tensors `hf`, keyed
    with `prefix`; HfWeightsError naming each tensor missing, unused or of another shape.
    Discriminator tensors are left out."""
    layout = hf_layout(generator)
    ours = {name: value for name, value in hf.items() if not name.startswith(DISCRIMINATOR_PREFIX)}
    missing = sorted({theirs for theirs, _ in layout.to_hf.values() if theirs not in ours})
    unused = sorted(name for name in ours if name not in layout.from_hf)
    out: dict[str, Tensor] = {}
    mismatched = []
    for name, (theirs, form) in layout.to_hf.items():
        if theirs not in ours:
            continue
        value = to_vega(ours[theirs], form)
        if value.shape != generator[name].shape:
            mismatched.append(
                f"{theirs} {list(ours[theirs].shape)} (this model: {list(generator[name].shape)})"
            )
            continue
        out[prefix + name] = value
    problems = fit_problems(missing, unused, mismatched)
    if problems:
        raise HfWeightsError(
            f"{where} does not fit Vega's vits model tensor for tensor: {'; '.join(problems)}"
        )
    return out


def hf_weights(generator: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A Vega generator's tensors (no prefix) in transformers' names and forms,
    contiguous, float32 on the CPU."""
    layout = hf_layout(generator)
    state = {name: value.detach().to("cpu", torch.float32) for name, value in generator.items()}
    out: dict[str, Tensor] = {}
    for name, (theirs, form) in layout.to_hf.items():
        if theirs not in out:
            out[theirs] = to_hf(state, name, form).contiguous()
    return out


def write_hf_folder(
    out: Path,
    generator: Mapping[str, Tensor],
    config: VitsConfig,
    sample_rate: int,
    write_tokenizer: Callable[[Path], None],
    card: str,
    inference: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Write transformers' VITS folder for a generator; returns the config written. Each file is
    atomic and config.json comes last, so a folder with a config is complete."""
    from safetensors.torch import save

    document = hf_config_from_vits(config, sample_rate, inference)
    out.mkdir(parents=True, exist_ok=True)
    payload = save(hf_weights(generator), metadata={"format": "pt"})
    atomic_write(out / "model.safetensors", lambda handle: handle.write(payload))
    write_tokenizer(out)
    atomic_write_text(out / MODEL_CARD, card)
    atomic_write_text(out / CONFIG, json.dumps(document, indent=2) + "\n")
    return document


def load_hf_generator(voice: HfVoice) -> Any:
    """The folder's model as Vega's generator (`Synthesizer`), every tensor
    set from it, in eval mode."""
    from trainer_core.models.vits.hf_config import vits_config_from_hf
    from trainer_core.models.vits.synthesizer import Synthesizer

    where = voice.describe()
    generator = Synthesizer(vits_config_from_hf(voice.config, where, n_vocab=voice.num_symbols))
    state = vega_weights(read_hf_weights(voice), generator.state_dict(), where, prefix="")
    generator.load_state_dict(state, strict=True)
    return generator.eval()
