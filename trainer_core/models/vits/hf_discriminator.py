"""A discriminator for a run that starts from a transformers VITS folder, which holds the generator
alone.

`read_discriminator(PATH)` reads one of two layouts into Vega's names (`model_d.` + the names of
`MultiPeriodDiscriminator`, which are original VITS's and Piper's):
- an original VITS training checkpoint (`D_*.pth`, as Meta's MMS training wrote them): `{"model":
  state, ...}` with `discriminators.N.convs.M.weight_g` / `weight_v` (a `module.` prefix from
  multi-GPU training is dropped);
- a converted "-train" folder (finetune-hf-vits): the discriminator beside the generator in its
  weights file, as `discriminator.discriminators.N...`, with plain weights (weight norm removed) and
  the last layer named `final_conv`; each plain weight is split into Vega's gain and direction. The
  run's strict start then names any tensor left unset, unused or of another shape
  (`engine.vits_init`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor

from trainer_core.contract.errors import InitSourceError
from trainer_core.contract.hf_voice import read_hf_voice
from trainer_core.models.vits.hf_folder import DISCRIMINATOR_PREFIX, read_hf_weights
from trainer_core.models.vits.hf_names import DIRECTION, GAIN, to_vega
from trainer_core.models.vits.piper_names import vega_name

PREFIX = "model_d."
WRAPPER = "module."
# finetune-hf-vits names each discriminator's last convolution final_conv;
# VITS (and Vega) conv_post.
RENAMED = {".final_conv.": ".conv_post."}


def read_discriminator(path: Path) -> dict[str, Tensor]:
    """The discriminator's tensors keyed as `VitsModel.state_dict()` keys
    them (`model_d.` prefix)."""
    state = _from_folder(path) if path.is_dir() else _from_checkpoint(path)
    if not state:
        raise InitSourceError(f"train.init_discriminator: {path} holds no discriminator tensors")
    out: dict[str, Tensor] = {}
    for name, value in state.items():
        name = vega_name(name.removeprefix(WRAPPER))
        for old, new in RENAMED.items():
            name = name.replace(old, new)
        # a plain weight: Vega's convolutions are weight-normed
        if name.endswith(".weight") and value.dim() >= 3:
            stem = name[: -len(".weight")]
            out[PREFIX + stem + GAIN], out[PREFIX + stem + DIRECTION] = (
                to_vega(value, "gain"),
                value,
            )
        else:
            out[PREFIX + name] = value
    return out


def _from_checkpoint(path: Path) -> Mapping[str, Tensor]:
    try:
        content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - unreadable or refused by the weights-only loader: say which file
        raise InitSourceError(
            f"train.init_discriminator: cannot read {path} weights-only ({exc})"
        ) from exc
    state = content.get("model", content) if isinstance(content, Mapping) else None
    if not isinstance(state, Mapping):
        raise InitSourceError(
            f"train.init_discriminator: {path} is not a VITS checkpoint (no state dict)"
        )
    return {str(k): v for k, v in state.items() if isinstance(v, Tensor)}


def _from_folder(path: Path) -> Mapping[str, Tensor]:
    weights = read_hf_weights(read_hf_voice(path))
    return {
        k[len(DISCRIMINATOR_PREFIX) :]: v
        for k, v in weights.items()
        if k.startswith(DISCRIMINATOR_PREFIX)
    }
