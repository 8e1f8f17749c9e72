"""Read a Piper voice checkpoint into Vega's VITS: `load_piper_checkpoint`, then `strict_load`.

The file is read with torch's weights-only loader, memory-mapped (the optimizer states that make
up most of a published checkpoint are never read); the globals it may name beyond tensors are
those of `contract.piper_voice.PICKLE_ALLOW_LIST`, each replaced by its stand-in (paths become
strings, attribute dicts become dicts), so the torch reader and the torch-free metadata reader
accept the same files. `weights` is keyed exactly like `VitsModel.state_dict()` (the `model_g.` /
`model_d.` prefixes kept, weight-norm names mapped by `piper_names`); every other tensor of the
checkpoint's state_dict (such as Piper 1.8's optional `model_mrd.` discriminator) is kept apart in
`unused` and reported by `strict_load`, which accepts a checkpoint only when every tensor of the
model is set from it and every tensor of it is used.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from trainer_core.contract.piper_voice import (
    PICKLE_ALLOW_LIST,
    PiperAudioSettings,
    PiperCheckpointError,
    PiperVoiceConfig,
    audio_settings,
    find_voice_config,
    plain,
    read_checkpoint_metadata,
    read_voice_config,
)
from trainer_core.models.vits.config import VitsConfig
from trainer_core.models.vits.model import VitsModel
from trainer_core.models.vits.piper_hparams import vits_config_from_piper
from trainer_core.models.vits.piper_names import to_vega_names

MODEL_PREFIXES = ("model_g.", "model_d.")


@dataclass(frozen=True)
class PiperCheckpoint:
    """A Piper checkpoint's tensors in Vega's names, its hyperparameters and its voice config."""

    path: Path
    weights: dict[str, Tensor]
    """Generator and discriminator tensors keyed like `VitsModel.state_dict()` (prefixes kept)."""
    unused: dict[str, Tensor]
    """Every other tensor of the checkpoint's state_dict, under its name in the file."""
    hyperparameters: dict[str, Any]
    voice: PiperVoiceConfig
    lightning_version: str | None = None

    @property
    def sample_rate(self) -> int:
        return self.audio.sample_rate

    @property
    def audio(self) -> PiperAudioSettings:
        """filter_length, hop_length, win_length, mel_channels, mel_fmin, mel_fmax, sample_rate."""
        return audio_settings(self.hyperparameters, self.voice)

    def vits_config(self, n_vocab: int | None = None, n_speakers: int | None = None) -> VitsConfig:
        """The shape of the checkpoint's model (`n_vocab`, `n_speakers` override its own)."""
        return vits_config_from_piper(self.hyperparameters, self.voice, n_vocab, n_speakers)


def torch_safe_globals() -> list[Callable[..., Any] | tuple[Callable[..., Any], str]]:
    """The allow-list's entries torch does not allow by itself, as (stand-in, "module.Name")."""
    entries: list[Callable[..., Any] | tuple[Callable[..., Any], str]] = []
    for name, allowed in PICKLE_ALLOW_LIST.items():
        if not allowed.torch_native and callable(allowed.stand_in):
            entries.append((allowed.stand_in, name))
    return entries


def _load_weights_only(path: Path, mmap: bool) -> Any:
    with torch.serialization.safe_globals(torch_safe_globals()):
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)


def _read(path: Path) -> Mapping[str, Any]:
    try:
        try:
            # Memory-mapped: a published checkpoint's optimizer states (most of the file) are
            # never read, and the weights are copied once, into the model.
            content = _load_weights_only(path, mmap=True)
        except RuntimeError:
            # Files from before torch's zip format cannot be mapped: read them whole.
            content = _load_weights_only(path, mmap=False)
    except pickle.UnpicklingError as exc:
        # The torch-free reader names the global torch refused (and raises with it).
        read_checkpoint_metadata(path)
        raise PiperCheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
    except (OSError, RuntimeError, EOFError) as exc:
        raise PiperCheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
    if not isinstance(content, Mapping) or not isinstance(content.get("state_dict"), Mapping):
        problem = "has no state_dict: is it a Piper (Lightning) checkpoint?"
        raise PiperCheckpointError(f"checkpoint {path} {problem}")
    return content


def load_piper_checkpoint(path: Path, config_path: Path | None = None) -> PiperCheckpoint:
    """Read checkpoint `path` and its voice config (`config_path`, else found beside it)."""
    path = Path(path)
    voice = read_voice_config(find_voice_config(path, config_path))
    content = _read(path)
    state = {str(k): v for k, v in content["state_dict"].items() if isinstance(v, Tensor)}
    ours = {k: v for k, v in state.items() if k.startswith(MODEL_PREFIXES)}
    others = {k: v for k, v in state.items() if not k.startswith(MODEL_PREFIXES)}
    hyper = content.get("hyper_parameters") or {}
    version = content.get("pytorch-lightning_version")
    return PiperCheckpoint(
        path=path,
        weights=to_vega_names(ours),
        unused=others,
        hyperparameters=plain(hyper) if isinstance(hyper, Mapping) else {},
        voice=voice,
        lightning_version=str(version) if version is not None else None,
    )


def fit_problems(
    missing: Sequence[str], unused: Sequence[str], mismatched: Sequence[str]
) -> list[str]:
    """What keeps a file's tensors from fitting a model tensor for tensor,
    one phrase per kind of problem."""
    problems = []
    if missing:
        problems.append(f"{len(missing)} tensors of the model are not in it: {', '.join(missing)}")
    if unused:
        problems.append(f"{len(unused)} of its tensors are unused: {', '.join(unused)}")
    if mismatched:
        problems.append(f"{len(mismatched)} shapes differ: {', '.join(mismatched)}")
    return problems


def strict_load(
    model: VitsModel,
    ckpt: PiperCheckpoint,
    ignore_prefixes: Sequence[str] = (),
) -> None:
    """Set every tensor of `model` from `ckpt`, or raise naming each tensor left unset, each tensor
    of the checkpoint unused (those under `ignore_prefixes` aside) and each shape that differs."""
    expected = model.state_dict()
    missing = [name for name in expected if name not in ckpt.weights]
    unused = [name for name in ckpt.weights if name not in expected]
    unused += [name for name in ckpt.unused if not name.startswith(tuple(ignore_prefixes))]
    mismatched = [
        f"{name} (model {tuple(expected[name].shape)}, checkpoint {tuple(tensor.shape)})"
        for name, tensor in ckpt.weights.items()
        if name in expected and tensor.shape != expected[name].shape
    ]
    problems = fit_problems(missing, unused, mismatched)
    if problems:
        listed = "; ".join(problems)
        raise PiperCheckpointError(f"checkpoint {ckpt.path} does not fit this model: {listed}")
    model.load_state_dict(ckpt.weights, strict=True)
