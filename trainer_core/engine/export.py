"""Final model export: `model.safetensors` plus `config.json`, both written atomically.

`export_model(model, config, out_dir)` writes the weights with safetensors (no pickle, so
anyone can load them safely) and a JSON config next to them:
    {"format": "vega-export", "version": 1, "vega_version": str,
     "created": ISO-8601 UTC time, "created_unix": float,
     "weights": "model.safetensors", "num_parameters": int, "dtypes": [str],
     "tied_parameters": [[name, name, ...], ...],   # names that shared one tensor in the model
     "model": <the caller's config: architecture, vocab / audio format, ...>}

Tied weights (e.g. an embedding shared with the output layer) are stored once per name:
safetensors refuses tensors that share memory, so every alias after the first is cloned,
and `tied_parameters` records which names were one tensor. Loading the state dict into a
model that ties the same names restores the tie, since both names carry the same values.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save
from torch import nn

from trainer_core import __version__ as VEGA_VERSION
from trainer_core.atomic import atomic_write
from trainer_core.contract.errors import VegaError

EXPORT_FORMAT = "vega-export"
EXPORT_VERSION = 1
WEIGHTS_FILENAME = "model.safetensors"
CONFIG_FILENAME = "config.json"


class ExportError(VegaError):
    """The model could not be exported, or an export folder cannot be read."""


def export_model(
    model: nn.Module, config: dict[str, Any], out_dir: str | Path
) -> tuple[Path, Path]:
    """Write `out_dir/model.safetensors` and `out_dir/config.json`; return both paths."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(
            f"cannot create the export folder {out_dir}: {exc.strerror or exc}"
        ) from exc
    tensors, tied = _untie_for_safetensors(model.state_dict())
    document = _config_document(config, tensors, tied)
    config_text = _to_json(document, out_dir / CONFIG_FILENAME)
    weights_path = out_dir / WEIGHTS_FILENAME
    config_path = out_dir / CONFIG_FILENAME
    _write_or_fail(weights_path, lambda file: file.write(save(tensors, metadata={"format": "pt"})))
    _write_or_fail(config_path, lambda file: file.write(config_text.encode("utf-8")))
    return weights_path, config_path


def load_exported(out_dir: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Read an export folder back: (state_dict on CPU, config dict)."""
    out_dir = Path(out_dir)
    weights_path, config_path = out_dir / WEIGHTS_FILENAME, out_dir / CONFIG_FILENAME
    for required in (weights_path, config_path):
        if not required.is_file():
            raise ExportError(f"{required} does not exist: {out_dir} is not a complete Vega export")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ExportError(
            f"{config_path} is not valid JSON ({exc}); export the model again"
        ) from exc
    if not isinstance(config, dict) or config.get("format") != EXPORT_FORMAT:
        raise ExportError(
            f'{config_path} is not a Vega export config (no "format": "{EXPORT_FORMAT}")'
        )
    try:
        state = load_file(str(weights_path), device="cpu")
    except (SafetensorError, OSError, ValueError) as exc:
        raise ExportError(
            f"{weights_path} is not a readable safetensors file ({exc}); export the model again"
        ) from exc
    return state, config


def _untie_for_safetensors(
    state: dict[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], list[list[str]]]:
    """CPU, contiguous copies safe for safetensors; tensors sharing storage are cloned.

    Returns (tensors, tie groups)."""
    seen_storages: set[tuple[str, int]] = set()
    aliases: dict[tuple[Any, ...], list[str]] = {}
    tensors: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        tensor = value.detach()
        storage_key = (str(tensor.device), tensor.untyped_storage().data_ptr())
        shares_storage = storage_key in seen_storages
        seen_storages.add(storage_key)
        # The same data, shape and layout under two names is a tie (e.g.
        # embedding == output weight).
        aliases.setdefault(
            (str(tensor.device), tensor.data_ptr(), tuple(tensor.shape), tensor.stride()), []
        ).append(name)
        tensor = tensor.to("cpu").contiguous()
        # safetensors refuses two names over one storage, so every later one gets its own copy.
        tensors[name] = tensor.clone() if shares_storage else tensor
    return tensors, [names for names in aliases.values() if len(names) > 1]


def _config_document(
    config: dict[str, Any], tensors: dict[str, torch.Tensor], tied: list[list[str]]
) -> dict[str, Any]:
    now = time.time()
    tied_copies = sum(tensors[name].numel() for group in tied for name in group[1:])
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "vega_version": VEGA_VERSION,
        "created": datetime.fromtimestamp(now, tz=UTC).isoformat(timespec="seconds"),
        "created_unix": round(now, 3),
        "weights": WEIGHTS_FILENAME,
        # Tied names are one parameter in the model, so each group counts once.
        "num_parameters": sum(t.numel() for t in tensors.values()) - tied_copies,
        "dtypes": sorted({str(t.dtype).removeprefix("torch.") for t in tensors.values()}),
        "tied_parameters": tied,
        "model": config,
    }


def _to_json(document: dict[str, Any], destination: Path) -> str:
    try:
        return json.dumps(document, indent=2, allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise ExportError(
            f"the model config for {destination} cannot be written as JSON ({exc}); "
            "it must hold only strings, numbers, booleans, lists and dicts"
        ) from exc


def _write_or_fail(target: Path, write: Callable[[Any], object]) -> None:
    """Atomic write with export-specific error wording."""
    try:
        atomic_write(target, write)
    except (OSError, SafetensorError) as exc:
        raise ExportError(
            f"could not write {target}: {getattr(exc, 'strerror', None) or exc}"
        ) from exc
