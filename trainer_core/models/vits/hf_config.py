"""transformers' VITS `config.json` <-> Vega's `VitsConfig` (torch-free: the
plan reads a hub model's shape).

Field by field: hidden_size -> hidden_channels, flow_size -> inter_channels, ffn_dim ->
filter_channels, num_attention_heads -> n_heads, num_hidden_layers -> n_layers, ffn_kernel_size ->
kernel_size, the decoder's fields by the same names (transformers' decoder has residual block "1"
only), posterior_encoder_num_wavenet_layers -> posterior_layers, prior_encoder_num_wavenet_layers ->
flow_layers, prior_encoder_num_flows -> flow_count, num_speakers / speaker_embedding_size ->
n_speakers / gin_channels, use_stochastic_duration_prediction -> use_sdp. The fields Vega's model
holds fixed (the attention window, the WaveNet kernel, the duration flows' bins and depth, the
slopes and epsilons) must have Vega's values: another one is refused naming the field and both
values. A field the file lacks takes transformers' default (`HF_DEFAULTS`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from trainer_core.contract.errors import InitSourceError
from trainer_core.models.vits.config import VitsConfig

# transformers' VitsConfig defaults, for a config.json that leaves a field out.
HF_DEFAULTS: dict[str, Any] = {
    "vocab_size": 38,
    "hidden_size": 192,
    "num_hidden_layers": 6,
    "num_attention_heads": 2,
    "window_size": 4,
    "use_bias": True,
    "ffn_dim": 768,
    "layerdrop": 0.1,
    "ffn_kernel_size": 3,
    "flow_size": 192,
    "spectrogram_bins": 513,
    "hidden_act": "relu",
    "hidden_dropout": 0.1,
    "attention_dropout": 0.1,
    "activation_dropout": 0.1,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-5,
    "use_stochastic_duration_prediction": True,
    "num_speakers": 1,
    "speaker_embedding_size": 0,
    "upsample_initial_channel": 512,
    "upsample_rates": [8, 8, 2, 2],
    "upsample_kernel_sizes": [16, 16, 4, 4],
    "resblock_kernel_sizes": [3, 7, 11],
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "leaky_relu_slope": 0.1,
    "depth_separable_channels": 2,
    "depth_separable_num_layers": 3,
    "duration_predictor_flow_bins": 10,
    "duration_predictor_tail_bound": 5.0,
    "duration_predictor_kernel_size": 3,
    "duration_predictor_dropout": 0.5,
    "duration_predictor_num_flows": 4,
    "duration_predictor_filter_channels": 256,
    "prior_encoder_num_flows": 4,
    "prior_encoder_num_wavenet_layers": 4,
    "posterior_encoder_num_wavenet_layers": 16,
    "wavenet_kernel_size": 5,
    "wavenet_dilation_rate": 1,
    "wavenet_dropout": 0.0,
    "speaking_rate": 1.0,
    "noise_scale": 0.667,
    "noise_scale_duration": 0.8,
    "sampling_rate": 16000,
}
# Values Vega's modules hold fixed (attention.WINDOW, the synthesizer's kernels, the
# duration flows, layers.LEAK).
FIXED: dict[str, Any] = {
    name: HF_DEFAULTS[name]
    for name in (
        "window_size",
        "use_bias",
        "hidden_act",
        "layer_norm_eps",
        "leaky_relu_slope",
        "depth_separable_channels",
        "depth_separable_num_layers",
        "duration_predictor_flow_bins",
        "duration_predictor_tail_bound",
        "duration_predictor_kernel_size",
        "duration_predictor_dropout",
        "duration_predictor_num_flows",
        "wavenet_kernel_size",
        "wavenet_dilation_rate",
        "wavenet_dropout",
    )
}
# Only the deterministic duration predictor has this width (Vega's: 256).
DETERMINISTIC_FIXED = {"duration_predictor_filter_channels": 256}
# transformers' field -> VitsConfig's, where only the name differs.
RENAMED = {
    "hidden_size": "hidden_channels",
    "flow_size": "inter_channels",
    "ffn_dim": "filter_channels",
    "num_attention_heads": "n_heads",
    "num_hidden_layers": "n_layers",
    "ffn_kernel_size": "kernel_size",
    "posterior_encoder_num_wavenet_layers": "posterior_layers",
    "prior_encoder_num_wavenet_layers": "flow_layers",
    "prior_encoder_num_flows": "flow_count",
}
DECODER = (
    "upsample_initial_channel",
    "upsample_rates",
    "upsample_kernel_sizes",
    "resblock_kernel_sizes",
    "resblock_dilation_sizes",
)
DROPOUTS = ("hidden_dropout", "attention_dropout", "activation_dropout")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or isinstance(b, str):
        return bool(a == b)
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def _refuse(where: str, problems: list[str]) -> InitSourceError:
    return InitSourceError(
        f"{where}: Vega's vits model cannot hold this model: {'; '.join(problems)}"
    )


def vits_config_from_hf(
    config: Mapping[str, Any],
    where: str,
    n_vocab: int | None = None,
    segment_size: int | None = None,
) -> VitsConfig:
    """The VitsConfig of a transformers VITS config (`n_vocab` overrides its vocab_size)."""
    values = {**HF_DEFAULTS, **config}
    fixed = {
        **FIXED,
        **({} if values["use_stochastic_duration_prediction"] else DETERMINISTIC_FIXED),
    }
    problems = [
        f"{name} is {values[name]!r} (Vega's model has {wanted!r})"
        for name, wanted in fixed.items()
        if not _same(values[name], wanted)
    ]
    dropouts = {name: values[name] for name in DROPOUTS}
    if len({float(v) for v in dropouts.values()}) > 1:
        listed = ", ".join(f"{k} {v}" for k, v in dropouts.items())
        problems.append(f"the text encoder's dropouts differ ({listed}); Vega's has one p_dropout")
    speakers, width = int(values["num_speakers"]), int(values["speaker_embedding_size"])
    if (speakers > 1) != (width > 0):
        problems.append(
            f"num_speakers is {speakers} and speaker_embedding_size {width}: Vega conditions on a"
            " speaker exactly when there are two or more"
        )
    if problems:
        raise _refuse(where, problems)
    hop = math.prod(int(r) for r in values["upsample_rates"])
    fields: dict[str, Any] = {ours: values[theirs] for theirs, ours in RENAMED.items()}
    fields.update({name: values[name] for name in DECODER})
    fields.update(
        n_vocab=n_vocab if n_vocab is not None else int(values["vocab_size"]),
        spec_channels=int(values["spectrogram_bins"]),
        hop_length=hop,
        segment_size=segment_size if segment_size is not None else 32 * hop,
        p_dropout=float(values["hidden_dropout"]),
        resblock="1",
        n_speakers=speakers,
        gin_channels=width,
        use_sdp=bool(values["use_stochastic_duration_prediction"]),
    )
    try:
        return VitsConfig.from_dict(fields)
    except (TypeError, ValueError) as exc:
        raise _refuse(where, [str(exc)]) from exc


def hf_config_from_vits(
    config: VitsConfig, sample_rate: int, inference: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """transformers' config.json for a Vega VITS (every field written); a
    resblock "2" decoder is refused."""
    if config.resblock != "1":
        raise InitSourceError(
            "this voice's decoder uses residual block \"2\" (Piper's x_low, low and medium voices);"
            ' transformers\' VITS decoder has residual block "1" only, so it cannot hold this voice'
        )
    if config.n_speakers <= 1 and config.gin_channels:
        raise InitSourceError(
            "this one-speaker voice has speaker conditioning layers, which transformers drops"
        )
    values = dict(HF_DEFAULTS)
    values.update({theirs: getattr(config, ours) for theirs, ours in RENAMED.items()})
    plain = config.to_dict()
    values.update({name: plain[name] for name in DECODER})
    values.update(
        vocab_size=config.n_vocab,
        spectrogram_bins=config.spec_channels,
        hidden_dropout=config.p_dropout,
        attention_dropout=config.p_dropout,
        activation_dropout=config.p_dropout,
        num_speakers=config.n_speakers,
        speaker_embedding_size=config.gin_channels,
        use_stochastic_duration_prediction=config.use_sdp,
        sampling_rate=sample_rate,
        **dict(inference or {}),
    )
    return {"model_type": "vits", "architectures": ["VitsModel"], **values}
