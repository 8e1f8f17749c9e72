"""transformers' VITS tensor names (`VitsModel` of transformers) <-> Vega's generator names, and the
two values that differ in form.

One direction is written out (`hf_name`: a Vega generator tensor's name in transformers' layout);
the other is its inverse over the tensors of the model at hand (`hf_layout`), so a name only one
side has is found by lookup. Where the layouts differ beyond names:
- attention projections are `Linear` ([C, C]) in transformers and 1x1 `Conv1d` ([C, C, 1]) in Vega;
- transformers' HiFi-GAN decoder holds plain weights, Vega's weight-normed ones (`original0` the
  gain, norm of the weight over every dimension but 0; `original1` the direction): loading splits a
  weight into the two, exporting folds them back;
- Vega's flows hold a parameterless `Flip` after each coupling, so transformers' coupling i is
  Vega's 2i in the prior flow, and 2i - 1 in the duration predictor's flows (whose first flow is the
  elementwise affine one);
- layer norms name their parameters `weight`/`bias` there and `gamma`/`beta` here.

The WaveNet layers are weight-normed in both: the hub's files spell them `weight_g`/`weight_v`,
`save_pretrained` `parametrizations.weight.original0/1`; both are read (`piper_names.vega_name` maps
the old spelling).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from trainer_core.models.vits.piper_names import vega_name

GAIN = ".parametrizations.weight.original0"
DIRECTION = ".parametrizations.weight.original1"
Form = Literal["same", "linear", "gain", "direction"]

_Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], str]]


def _rule(pattern: str, template: str | Callable[[re.Match[str]], str]) -> _Rule:
    build = template if callable(template) else (lambda m, t=template: m.expand(t))
    return re.compile(pattern), build


_FLOW_PARTS = {
    "pre": "conv_pre",
    "enc": "wavenet",
    "post": "conv_post",
    "convs": "conv_dds",
    "proj": "conv_proj",
}


def _flow(prefix: str, offset: int) -> Callable[[re.Match[str]], str]:
    """Vega's flow index -> transformers' coupling index (Flip modules take the other slots)."""

    def build(m: re.Match[str]) -> str:
        index = (int(m.group(2)) + offset) // 2
        return f"{prefix}{m.group(1) or ''}flows.{index}.{_FLOW_PARTS[m.group(3)]}."

    return build


# Vega's generator name (no `model_g.`) -> transformers' name, the first
# matching rule applied to the prefix.
_RULES: tuple[_Rule, ...] = (
    _rule(r"^enc_p\.emb\.", "text_encoder.embed_tokens."),
    _rule(
        r"^enc_p\.encoder\.attn_layers\.(\d+)\.conv_([qkv])\.",
        r"text_encoder.encoder.layers.\1.attention.\2_proj.",
    ),
    _rule(
        r"^enc_p\.encoder\.attn_layers\.(\d+)\.conv_o\.",
        r"text_encoder.encoder.layers.\1.attention.out_proj.",
    ),
    _rule(r"^enc_p\.encoder\.attn_layers\.(\d+)\.", r"text_encoder.encoder.layers.\1.attention."),
    _rule(
        r"^enc_p\.encoder\.norm_layers_1\.(\d+)\.", r"text_encoder.encoder.layers.\1.layer_norm."
    ),
    _rule(r"^enc_p\.encoder\.ffn_layers\.(\d+)\.", r"text_encoder.encoder.layers.\1.feed_forward."),
    _rule(
        r"^enc_p\.encoder\.norm_layers_2\.(\d+)\.",
        r"text_encoder.encoder.layers.\1.final_layer_norm.",
    ),
    _rule(r"^enc_p\.proj\.", "text_encoder.project."),
    _rule(r"^enc_q\.pre\.", "posterior_encoder.conv_pre."),
    _rule(r"^enc_q\.enc\.", "posterior_encoder.wavenet."),
    _rule(r"^enc_q\.proj\.", "posterior_encoder.conv_proj."),
    _rule(r"^flow\.()flows\.(\d+)\.(pre|enc|post)\.", _flow("flow.", 0)),
    _rule(r"^dp\.(post_)?flows\.(\d+)\.(pre|convs|proj)\.", _flow("duration_predictor.", 1)),
    _rule(r"^dp\.(post_)?flows\.0\.m$", r"duration_predictor.\1flows.0.translate"),
    _rule(r"^dp\.(post_)?flows\.0\.logs$", r"duration_predictor.\1flows.0.log_scale"),
    _rule(r"^dp\.(post_)?pre\.", r"duration_predictor.\1conv_pre."),
    _rule(r"^dp\.(post_)?proj\.", r"duration_predictor.\1conv_proj."),
    _rule(r"^dp\.(post_)?convs\.", r"duration_predictor.\1conv_dds."),
    _rule(r"^dp\.", "duration_predictor."),
    _rule(r"^dec\.ups\.", "decoder.upsampler."),
    _rule(r"^dec\.", "decoder."),
    _rule(r"^emb_g\.", "embed_speaker."),
)
# Applied after the prefix: the parts named differently inside a module.
_INNER = (
    (re.compile(r"\.convs_sep\."), ".convs_dilated."),
    (re.compile(r"\.convs_1x1\."), ".convs_pointwise."),
    (re.compile(r"\.gamma$"), ".weight"),
    (re.compile(r"\.beta$"), ".bias"),
)
_DECODER_NORMED = re.compile(r"^dec\.(ups|resblocks)\.")
_ATTENTION = re.compile(r"^enc_p\.encoder\.attn_layers\.\d+\.conv_[qkvo]\.weight$")


def _prefix(name: str) -> str:
    for pattern, build in _RULES:
        match = pattern.match(name)
        if match:
            return build(match) + name[match.end() :]
    raise KeyError(f"no transformers name for Vega tensor {name}")


def hf_name(name: str, deterministic_dp: bool = False) -> tuple[str, Form]:
    """A Vega generator tensor (no `model_g.`) -> (its transformers name, how the value differs);
    `deterministic_dp`: the duration predictor is the deterministic one,
    whose `proj` keeps its name."""
    out = (
        f"duration_predictor.{name[3:]}"
        if deterministic_dp and name.startswith("dp.")
        else _prefix(name)
    )
    for pattern, replacement in _INNER:
        out = pattern.sub(replacement, out)
    if _DECODER_NORMED.match(name) and name.endswith((GAIN, DIRECTION)):
        base = out[: -len(GAIN)] + ".weight"
        return base, "gain" if name.endswith(GAIN) else "direction"
    if _ATTENTION.match(name):
        return out, "linear"
    return out, "same"


@dataclass(frozen=True)
class HfLayout:
    """Each Vega generator tensor's transformers name and form, and the inverse:
    transformers' names -> Vega's."""

    to_hf: dict[str, tuple[str, Form]]
    from_hf: dict[str, list[str]]


def hf_layout(vega_names: Iterable[str]) -> HfLayout:
    """The layout of a generator whose tensors (no `model_g.`) are `vega_names`."""
    names = list(vega_names)
    deterministic = any(name.startswith("dp.conv_1.") for name in names)
    to_hf = {name: hf_name(name, deterministic) for name in names}
    from_hf: dict[str, list[str]] = {}
    for name, (theirs, _) in to_hf.items():
        from_hf.setdefault(theirs, []).append(name)
    return HfLayout(to_hf, from_hf)


def parametrized_names(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A transformers state dict with the hub's old weight-norm names (`weight_g`/`weight_v`) in
    torch's parametrization spelling; a tensor under both spellings is an error."""
    renamed = {vega_name(name): value for name, value in state.items()}
    if len(renamed) != len(state):
        raise ValueError("the weights hold a tensor under both weight-norm spellings")
    return renamed


def to_vega(value: Tensor, form: Form) -> Tensor:
    """transformers' value of a tensor in Vega's form."""
    if form == "linear":
        return value.unsqueeze(-1)
    if form == "gain":
        dims = list(range(1, value.dim()))
        return torch.linalg.vector_norm(value, dim=dims, keepdim=True)
    return value


def to_hf(state: Mapping[str, Tensor], name: str, form: Form) -> Tensor:
    """Vega's tensor `name` in transformers' form (the decoder's weight norm folded)."""
    value = state[name]
    if form == "linear":
        return value.squeeze(-1)
    if form in ("gain", "direction"):
        stem = name[: -len(GAIN if form == "gain" else DIRECTION)]
        return torch._weight_norm(state[stem + DIRECTION], state[stem + GAIN], 0)
    return value
