"""Tiny profiles: a model that trains in seconds on one CPU thread, for tests,
benchmarks and trying a change.

One definition per data mode, so that tests and benchmarks agree on what "tiny"
means; callers change what they need through `sections` (TOML form) or
`tiny_settings()` (`--set` form). Torch-free.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

import tomli_w

Kind = Literal["lm", "tts", "vocoder", "vits"]
_ORDER = (
    "run",
    "data",
    "model",
    "train",
    "compute",
    "audio",
    "tts",
    "vocoder",
    "vits",
    "sample",
    "logging",
    "memory",
    "debug",
)

# The parts both kinds share: CPU, one thread, quick telemetry, no report.
_COMMON: dict[str, dict[str, Any]] = {
    "train": {"batch_size": 8, "lr": 3e-3, "warmup_steps": 5},
    "compute": {"mode": "cpu", "num_threads": 1},
    "logging": {"step_interval_s": 0.05, "report": False},
}
_MODEL = {"hidden": 32, "encoder_layers": 1, "heads": 2, "ffn_mult": 2}

TINY: dict[Kind, dict[str, dict[str, Any]]] = {
    "lm": {
        **_COMMON,
        "run": {"name": "tiny", "seed": 7},
        "data": {"mode": "text", "context_bytes": 32, "val_fraction": 0.1},
        "model": {"kind": "lm", **_MODEL, "dropout": 0.1},
        "sample": {"prompts": ["The "], "max_new_bytes": 16},
    },
    "tts": {
        **_COMMON,
        "run": {"name": "tiny-voice", "seed": 3},
        "data": {"mode": "voice", "val_fraction": 0.1},
        "model": {"kind": "tts", **_MODEL, "decoder_layers": 1, "dropout": 0.0},
    },
    "vocoder": {
        **_COMMON,
        "run": {"name": "tiny-vocoder", "seed": 5},
        "data": {"mode": "voice", "val_fraction": 0.1},
        "model": {"kind": "vocoder"},
        "train": {**_COMMON["train"], "batch_size": 4, "lr": 2e-3},
        "vocoder": {
            "channels": 16,
            "blocks": 1,
            "segment_frames": 8,
            "discriminator_channels": 4,
            "periods": [2, 3],
            "resolutions": [[256, 64, 256]],
            "copy_items": 1,
        },
    },
    # A VITS with every part present but a few thousand parameters each, at
    # 16 kHz with a 64-sample hop.
    "vits": {
        **_COMMON,
        "run": {"name": "tiny-vits", "seed": 9},
        "data": {"mode": "voice", "val_fraction": 0.1},
        "model": {"kind": "vits"},
        "train": {**_COMMON["train"], "batch_size": 4, "lr": 2e-3, "free_running_items": 2},
        "audio": {
            "sample_rate": 16000,
            "n_fft": 256,
            "hop_length": 64,
            "win_length": 256,
            "n_mels": 40,
            "f_max": 8000.0,
        },
        "tts": {"text_units": "chars"},
        "vits": {
            "inter_channels": 8,
            "hidden_channels": 16,
            "filter_channels": 32,
            "n_heads": 2,
            "n_layers": 1,
            "p_dropout": 0.0,
            "resblock_kernel_sizes": [3],
            "resblock_dilation_sizes": [[1, 2]],
            "upsample_rates": [4, 4, 4],
            "upsample_initial_channel": 16,
            "upsample_kernel_sizes": [8, 8, 8],
            "posterior_layers": 2,
            "flow_layers": 1,
            "flow_count": 2,
            "speaker_channels": 8,
            "discriminator_channels": 2,
            "segment_size": 1024,
            "num_symbols": 64,
        },
        "sample": {"sentences": ["Hello there."]},
    },
}


def tiny_sections(kind: Kind = "lm", **sections: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tiny profile of `kind` as TOML sections, with each given section's keys set over it."""
    out = copy.deepcopy(TINY[kind])
    for name, values in sections.items():
        out.setdefault(name, {}).update(values)
    # A value of None removes the key: the profile default applies. Sections
    # in the order profiles use.
    ordered = sorted(out, key=lambda name: _ORDER.index(name) if name in _ORDER else len(_ORDER))
    return {name: {k: v for k, v in out[name].items() if v is not None} for name in ordered}


def tiny_profile(kind: Kind = "lm", **sections: dict[str, Any]) -> str:
    """The tiny profile as TOML text, e.g. `tiny_profile("lm", train={"max_steps": 40})`."""
    return tomli_w.dumps(tiny_sections(kind, **sections))


def tiny_settings(kind: Kind = "lm", sections: tuple[str, ...] = ("model",)) -> list[str]:
    """`section.key=value` strings (for `--set`) making another profile tiny
    in the given sections."""
    out = []
    for name in sections:
        for key, value in TINY[kind].get(name, {}).items():
            if key != "kind":
                out.append(f"{name}.{key}={_toml_value(value)}")
    return out


def _toml_value(value: Any) -> str:
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()
