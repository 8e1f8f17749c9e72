"""The named parts of a VITS model, for `train.freeze`: which modules each name stands for."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from trainer_core.contract.errors import ProfileError

# Name -> attribute path in VitsModel (Piper's layout).
PARTS = {
    "text_encoder": "model_g.enc_p",
    "posterior_encoder": "model_g.enc_q",
    "flow": "model_g.flow",
    "duration_predictor": "model_g.dp",
    "decoder": "model_g.dec",
    "speaker_embedding": "model_g.emb_g",
    "discriminator": "model_d",
}


def frozen_parameters(model: nn.Module, names: Sequence[str]) -> list[nn.Parameter]:
    """The parameters of the parts `names` (train.freeze); an unknown name is
    an error listing the known ones."""
    out: list[nn.Parameter] = []
    for name in names:
        if name not in PARTS:
            raise ProfileError(
                f"train.freeze: {name!r} is not a part of a vits model; parts: {', '.join(PARTS)}"
            )
        module = model.get_submodule(PARTS[name]) if _has(model, PARTS[name]) else None
        if module is None:
            raise ProfileError(
                f"train.freeze: this model has no {name} (a one-speaker voice has no speaker"
                " embedding)"
            )
        out += list(module.parameters())
    return out


def _has(model: nn.Module, path: str) -> bool:
    try:
        model.get_submodule(path)
    except AttributeError:
        return False
    return True
