"""Precision policy: which autocast dtype and which loss scaler a run uses on its device.

The loop never branches on precision: it always enters `policy.autocast()` and always calls
`policy.scaler.scale/step/update` (a disabled scaler passes everything through). Rules:
CUDA auto -> bf16 where the GPU has it natively, else fp16 + torch's GradScaler; MPS auto -> fp16 +
torch's native MPS scaler where it works, else VegaGradScaler; CPU auto -> fp32. After
`train.nonfinite_patience` non-finite steps in a row, `fallback()` gives the next safer policy.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch

from trainer_core.contract.errors import DeviceError, ProfileError
from trainer_core.engine.grad_scaler import VegaGradScaler

PRECISIONS = ("auto", "fp32", "fp16", "bf16")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
ScalerKind = Literal["none", "torch", "vega"]
SCALING_NAMES = {
    "none": "no loss scaling",
    "torch": "loss scaling by torch.amp.GradScaler",
    "vega": "loss scaling by VegaGradScaler",
}
# One shared no-op context for fp32 (nullcontext is stateless and re-entrant): none built per step.
NO_AUTOCAST = contextlib.nullcontext()


@functools.cache
def autocast_works(device_type: str, dtype: torch.dtype) -> bool:
    """Whether autocast to `dtype` really runs a matmul on this device type
    in the installed torch."""
    try:
        with warnings.catch_warnings():
            # Unsupported dtypes only warn and disable autocast; the output dtype tells the truth.
            warnings.simplefilter("ignore")
            a = torch.ones(2, 2, device=device_type)
            with torch.autocast(device_type, dtype=dtype):
                return (a @ a).dtype == dtype
    except Exception:  # noqa: BLE001 - any failure means "not usable here"
        return False


@functools.cache
def native_scaler_works(device_type: str) -> bool:
    """Whether torch.amp.GradScaler(device_type) exists and runs a full step on that device."""
    try:
        param = torch.nn.Parameter(torch.ones(2, device=device_type))
        optimizer = torch.optim.SGD([param], lr=0.1)
        scaler = torch.amp.GradScaler(device_type)
        scaler.scale(param.sum()).backward()
        scaler.step(optimizer)
        scaler.update()
        return scaler.is_enabled()
    except Exception:  # noqa: BLE001 - missing kernels (older torch on MPS) raise various errors
        return False


def mps_autocast_available() -> bool:
    """Whether the installed torch has fp16 autocast for MPS (a build-level
    check, no device needed)."""
    try:
        return bool(torch.amp.is_autocast_available("mps"))
    # older torch: no torch.amp.is_autocast_available, no MPS autocast either
    except AttributeError:
        return False


def cuda_bf16_supported(device: torch.device | str | int | None = None) -> bool:
    """Native (not emulated) bf16 on this CUDA device: compute capability 8.0+ or ROCm."""
    if not torch.cuda.is_available():
        return False
    return bool(torch.version.hip) or torch.cuda.get_device_capability(device)[0] >= 8


def cuda_device_label(device: torch.device | str | int | None = None) -> str:
    """'NVIDIA T4 (compute capability 7.5)' for messages; a generic label without CUDA."""
    if not torch.cuda.is_available():
        return "this CUDA device"
    major, minor = torch.cuda.get_device_capability(device)
    return f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor})"


def device_bf16_supported(device: torch.device) -> bool:
    """Whether bf16 autocast is usable on this device."""
    if device.type == "cuda":
        return cuda_bf16_supported(device)
    return autocast_works(device.type, torch.bfloat16)


def is_finite(tensor: torch.Tensor) -> bool:
    """True when every element is finite. On an accelerator this is a device sync: call it only
    where the loop syncs anyway (e.g. when it reads the loss value for a step event)."""
    return bool(torch.isfinite(tensor).all())


@dataclass(frozen=True)
class PrecisionPolicy:
    """The resolved precision of a run: autocast dtype, loss scaler, and where to fall back."""

    name: Literal["fp32", "fp16", "bf16"]
    device_type: str
    scaler_kind: ScalerKind
    bf16_supported: bool
    reason: str

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES.get(self.name, torch.float32)

    def autocast(self) -> AbstractContextManager[Any]:
        """The context for the forward pass (and loss): a fresh autocast, or
        the shared no-op one at fp32."""
        if self.name == "fp32":
            return NO_AUTOCAST
        return torch.autocast(self.device_type, dtype=self.dtype)

    @functools.cached_property
    def scaler(self) -> Any:
        """The loss scaler (GradScaler API), built once per policy; disabled when not scaling."""
        if self.scaler_kind == "torch":
            return torch.amp.GradScaler(self.device_type)
        return VegaGradScaler(enabled=self.scaler_kind == "vega")

    def fallback(self) -> PrecisionPolicy | None:
        """The next safer policy after repeated non-finite steps: fp16 -> bf16 -> fp32 -> None."""
        why = f"fallback from {self.name} after repeated non-finite steps"
        if self.name == "fp16" and self.bf16_supported:
            return replace(self, name="bf16", scaler_kind="none", reason=why)
        if self.name in ("fp16", "bf16"):
            return replace(self, name="fp32", scaler_kind="none", reason=why)
        return None

    @classmethod
    def resolve(
        cls, requested: str, device: torch.device | str, **probes: bool | None
    ) -> PrecisionPolicy:
        """Same as `resolve_precision` (probes: bf16_supported, native_mps_scaler)."""
        return resolve_precision(requested, device, **probes)

    def describe(self) -> str:
        """One line for logs and events, e.g. 'fp16 autocast on mps, loss
        scaling by VegaGradScaler (...)'."""
        mode = "fp32, no autocast" if self.name == "fp32" else f"{self.name} autocast"
        return f"{mode} on {self.device_type}, {SCALING_NAMES[self.scaler_kind]} ({self.reason})"


def resolve_precision(
    requested: str,
    device: torch.device | str,
    *,
    bf16_supported: bool | None = None,
    native_mps_scaler: bool | None = None,
) -> PrecisionPolicy:
    """Turn `train.precision` and the training device into a policy; probes what is not given."""
    if requested not in PRECISIONS:
        raise ProfileError(f"train.precision = {requested!r} is not one of {', '.join(PRECISIONS)}")
    device = torch.device(device)
    if device.type not in ("cuda", "mps", "cpu"):
        raise DeviceError(f"device {str(device)!r} is not supported: use cuda, mps or cpu")
    if bf16_supported is None:
        bf16_supported = device_bf16_supported(device)
    resolver = {"cuda": _resolve_cuda, "mps": _resolve_mps, "cpu": _resolve_cpu}[device.type]
    return resolver(requested, device, bf16_supported, native_mps_scaler)


def _policy(
    name: str, device: torch.device, scaler: ScalerKind, bf16: bool, reason: str
) -> PrecisionPolicy:
    return PrecisionPolicy(name, device.type, scaler, bf16, reason)  # type: ignore[arg-type]


def _resolve_cuda(
    requested: str, device: torch.device, bf16: bool, _native: bool | None
) -> PrecisionPolicy:
    if requested == "fp32":
        return _policy("fp32", device, "none", bf16, "train.precision = fp32")
    if requested == "bf16" and not bf16:
        raise ProfileError(
            f'train.precision = "bf16" but {cuda_device_label(device)} has no native bf16 (needs'
            ' compute capability 8.0 or newer): set train.precision to "fp16" or "auto"'
        )
    if requested == "bf16" or (requested == "auto" and bf16):
        return _policy("bf16", device, "none", bf16, f"{requested}: the GPU supports bf16")
    reason = "auto: the GPU has no native bf16" if requested == "auto" else "train.precision = fp16"
    return _policy("fp16", device, "torch", bf16, reason)


def _resolve_mps(
    requested: str, device: torch.device, bf16: bool, native: bool | None
) -> PrecisionPolicy:
    if requested == "fp32":
        return _policy("fp32", device, "none", bf16, "train.precision = fp32")
    if requested == "bf16":
        if not bf16:
            raise ProfileError(
                'train.precision = "bf16" but bf16 autocast does not work on this Mac/torch: '
                'set train.precision to "fp16" or "auto"'
            )
        return _policy("bf16", device, "none", bf16, "train.precision = bf16")
    if not mps_autocast_available():
        if requested == "fp16":
            raise ProfileError(
                'train.precision = "fp16" but fp16 autocast does not work on MPS with this torch: '
                'set train.precision to "fp32" or upgrade torch'
            )
        return _policy(
            "fp32", device, "none", bf16, "auto: fp16 autocast does not work on MPS with this torch"
        )
    native = native_scaler_works("mps") if native is None else native
    kind: ScalerKind = "torch" if native else "vega"
    scaler_note = "native MPS grad scaler" if native else "torch has no working MPS grad scaler"
    return _policy("fp16", device, kind, bf16, f"{requested}: {scaler_note}")


def _resolve_cpu(
    requested: str, device: torch.device, bf16: bool, _native: bool | None
) -> PrecisionPolicy:
    if requested in ("auto", "fp32"):
        return _policy("fp32", device, "none", bf16, f"{requested}: CPU trains in fp32")
    if requested == "bf16":
        if not bf16:
            raise ProfileError(
                'train.precision = "bf16" but CPU bf16 autocast does not work with this torch: '
                'set train.precision to "fp32"'
            )
        return _policy("bf16", device, "none", bf16, "train.precision = bf16")
    if not (autocast_works("cpu", torch.float16) and native_scaler_works("cpu")):
        raise ProfileError(
            'train.precision = "fp16" is not supported on CPU by this torch: set train.precision to'
            ' "bf16" or "fp32"'
        )
    return _policy("fp16", device, "torch", bf16, "train.precision = fp16")


class NonfiniteTracker:
    """Counts non-finite steps in a row; says when `patience` of them call for a fallback."""

    def __init__(self, patience: int) -> None:
        if patience < 1:
            raise ProfileError(f"train.nonfinite_patience = {patience} must be at least 1")
        self.patience = patience
        self.consecutive = 0
        self.total = 0

    def record(self, finite: bool) -> bool:
        """Record one step; True while the run of non-finite steps has reached `patience`.

        The loop falls back and then calls `reset()`, so the safer precision gets its own patience.
        """
        if finite:
            self.consecutive = 0
            return False
        self.consecutive += 1
        self.total += 1
        return self.consecutive >= self.patience

    def reset(self) -> None:
        """Start counting afresh (after a precision fallback)."""
        self.consecutive = 0

    def state_dict(self) -> dict[str, int]:
        return {"consecutive": self.consecutive, "total": self.total}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore counts; missing keys (older checkpoints) count as zero."""
        self.consecutive = int(state.get("consecutive", 0))
        self.total = int(state.get("total", 0))
