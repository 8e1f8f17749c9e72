"""Capture and restore every random number generator a training run draws from.

A resumed run must draw the same dropout masks, shuffles and noise as the run that
stopped, so a checkpoint holds the state of: torch's CPU generator, each CUDA device's
generator (only when CUDA is already initialised: capturing must never start a CUDA
context), the MPS generator (when MPS is available), numpy's global RNG and Python's
`random`. Everything is stored as tensors or plain ints/floats/lists/strings/dicts, so
`torch.load(..., weights_only=True)` accepts it without allow-listing any class.

Layout of the captured dict (format version 1):
    {"version": 1,
     "torch_cpu": uint8 tensor,
     "cuda": [uint8 tensor per device] (empty when CUDA was not initialised),
     "mps": uint8 tensor | None,
     "numpy": {"name": str, "keys": int64 tensor, "pos": int, "has_gauss": int, "cached_gaussian":
     float}, "python": {"version": int, "state": int64 tensor, "gauss_next": float | None}}
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from trainer_core.engine.checkpoint_manager import CheckpointError

RNG_STATE_VERSION = 1


def capture_rng_state() -> dict[str, Any]:
    """Snapshot all generators into a dict that survives torch.save /
    torch.load(weights_only=True)."""
    return {
        "version": RNG_STATE_VERSION,
        "torch_cpu": torch.get_rng_state().clone(),
        "cuda": _capture_cuda(),
        "mps": _capture_mps(),
        "numpy": _capture_numpy(),
        "python": _capture_python(),
    }


def restore_rng_state(state: dict[str, Any]) -> list[str]:
    """Put every generator back to `state`; return notes for parts this machine cannot restore.

    A run saved on a GPU and resumed on CPU (or the reverse) restores what exists here and
    reports the rest, rather than failing: the data order still matches exactly.
    """
    if not isinstance(state, dict) or state.get("version") != RNG_STATE_VERSION:
        raise CheckpointError(
            "the checkpoint's RNG state is not in the expected format (version"
            f" {RNG_STATE_VERSION}); it was written by a different Vega version or is damaged:"
            " start a fresh run"
        )
    try:
        torch.set_rng_state(_as_byte_tensor(state["torch_cpu"]))
        _restore_numpy(state["numpy"])
        _restore_python(state["python"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(
            f"the checkpoint's RNG state is damaged ({exc}): start a fresh run"
        ) from exc
    return _restore_cuda(state.get("cuda") or []) + _restore_mps(state.get("mps"))


def _capture_cuda() -> list[torch.Tensor]:
    # torch.cuda.is_initialized() avoids creating a CUDA context just to read generators.
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return []
    return [s.clone() for s in torch.cuda.get_rng_state_all()]


def _capture_mps() -> torch.Tensor | None:
    if not torch.backends.mps.is_available():
        return None
    return torch.mps.get_rng_state().clone()


def _capture_numpy() -> dict[str, Any]:
    name, keys, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    return {
        "name": str(name),
        # uint32 keys fit in int64 exactly; a torch tensor is what weights_only accepts.
        "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached_gaussian),
    }


def _capture_python() -> dict[str, Any]:
    version, internal, gauss_next = random.getstate()
    return {
        "version": int(version),
        "state": torch.tensor(internal, dtype=torch.int64),
        "gauss_next": None if gauss_next is None else float(gauss_next),
    }


def _as_byte_tensor(value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"expected a tensor, got {type(value).__name__}")
    return value.to(device="cpu", dtype=torch.uint8)


def _restore_numpy(saved: dict[str, Any]) -> None:
    keys = saved["keys"].numpy().astype(np.uint32)
    np.random.set_state(
        (
            saved["name"],
            keys,
            int(saved["pos"]),
            int(saved["has_gauss"]),
            float(saved["cached_gaussian"]),
        )
    )


def _restore_python(saved: dict[str, Any]) -> None:
    internal = tuple(int(v) for v in saved["state"].tolist())
    random.setstate((int(saved["version"]), internal, saved["gauss_next"]))


def _restore_cuda(saved: list[Any]) -> list[str]:
    if not saved:
        return []
    if not torch.cuda.is_available():
        return [
            f"the checkpoint holds RNG state for {len(saved)} CUDA device(s) but CUDA is not"
            " available here: not restored"
        ]
    count = torch.cuda.device_count()
    if count != len(saved):
        return [
            f"the checkpoint holds RNG state for {len(saved)} CUDA device(s) but {count} are"
            " visible here: not restored"
        ]
    torch.cuda.set_rng_state_all([_as_byte_tensor(s) for s in saved])
    return []


def _restore_mps(saved: Any) -> list[str]:
    if saved is None:
        return []
    if not torch.backends.mps.is_available():
        return ["the checkpoint holds MPS RNG state but MPS is not available here: not restored"]
    torch.mps.set_rng_state(_as_byte_tensor(saved))
    return []
