"""Vega's own dynamic loss scaler, for Apple MPS when torch has no native `GradScaler("mps")`.

It follows `torch.amp.GradScaler` exactly: the same scale trajectory (float32 arithmetic,
growth only when the grown scale is finite), the same growth-tracker resets, the same skipped
steps and the same `state_dict` keys, so checkpoints move between the two scalers. It uses only
ordinary tensor ops (no `torch._amp_*` kernels), which is why it runs where those kernels are
missing. The scale lives on the host as a float; `unscale_()` queues its work without a sync, and
the one device sync per step is `step()` reading the inf/NaN flags, as in torch's scaler.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from enum import Enum
from typing import Any

import torch


class _Stage(Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _to_float32(value: float) -> float:
    """Round a Python float to the nearest float32, as torch's float32 scale tensor stores it."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        # struct refuses values that round past float32's range; the float32 result would be inf.
        return math.copysign(math.inf, value)


def _grads_of(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The gradient tensors of an optimizer's parameters (values only, for sparse gradients)."""
    grads = []
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.grad is None:
                continue
            if param.grad.dtype == torch.float16:
                raise ValueError(
                    "Attempting to unscale FP16 gradients: keep parameters in float32 under"
                    " autocast."
                )
            grads.append(param.grad._values() if param.grad.is_sparse else param.grad)
    return grads


class VegaGradScaler:
    """Dynamic loss scaler with the API and behaviour of `torch.amp.GradScaler`."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        if enabled and growth_factor <= 1.0:
            raise ValueError(f"growth_factor must be > 1.0, got {growth_factor}")
        if enabled and backoff_factor >= 1.0:
            raise ValueError(f"backoff_factor must be < 1.0, got {backoff_factor}")
        self._enabled = enabled
        self._scale = _to_float32(float(init_scale))
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._last_step_skipped = False
        self._reset_iteration()

    def _reset_iteration(self) -> None:
        # Per optimizer (by id): its stage this iteration, and its "all grads finite" flags (one
        # device tensor per device until step() reads them, then whether inf/NaN was found).
        self._stages: dict[int, _Stage] = {}
        self._found_inf: dict[int, list[torch.Tensor] | bool] = {}

    def scale(self, outputs: torch.Tensor | Iterable[torch.Tensor]) -> Any:
        """Multiply a tensor (or a nested list/tuple of tensors) by the current scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, torch.Tensor):
            return outputs * self._scale
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(item) for item in outputs)
        if isinstance(outputs, Iterable):
            return map(self.scale, outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the optimizer's gradients by the scale and record whether any is inf/NaN."""
        if not self._enabled:
            return
        stage = self._stages.get(id(optimizer), _Stage.READY)
        if stage is _Stage.UNSCALED:
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last update()."
            )
        if stage is _Stage.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        grads = _grads_of(optimizer)
        self._found_inf[id(optimizer)] = self._check_and_unscale(grads)
        self._stages[id(optimizer)] = _Stage.UNSCALED

    def _check_and_unscale(self, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        """Flag inf/NaN in the scaled grads (before unscaling, as torch
        does), then unscale in place.

        Returns one "all finite" flag tensor per device; nothing is read back to the host here.
        """
        inv_scale = _to_float32(1.0 / self._scale)
        per_device: dict[torch.device, list[torch.Tensor]] = {}
        with torch.no_grad():
            for grad in grads:
                per_device.setdefault(grad.device, []).append(torch.isfinite(grad).all())
                if inv_scale != 1.0:
                    grad.mul_(inv_scale)
            return [torch.stack(flags).all() for flags in per_device.values()]

    def _found_inf_in(self, key: int) -> bool:
        """Whether that optimizer's grads held inf/NaN; reading the flags is
        the step's device sync."""
        found = self._found_inf[key]
        if not isinstance(found, bool):
            if not found:
                raise RuntimeError(
                    "No inf checks were recorded for this optimizer: none of its parameters has a"
                    " grad."
                )
            found = not all(bool(flag) for flag in found)
            self._found_inf[key] = found
        return found

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        """Unscale (unless done already) and call `optimizer.step()` only if
        all grads are finite."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        stage = self._stages.get(id(optimizer), _Stage.READY)
        if stage is _Stage.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if stage is _Stage.READY:
            self.unscale_(optimizer)
        skipped = self._found_inf_in(id(optimizer))
        self._stages[id(optimizer)] = _Stage.STEPPED
        self._last_step_skipped = skipped
        return None if skipped else optimizer.step(*args, **kwargs)

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        """Back off after inf/NaN, grow after `growth_interval` finite steps, or set `new_scale`."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = _to_float32(float(new_scale))
        else:
            if not self._found_inf:
                raise RuntimeError(
                    "No inf checks were recorded prior to update(): call step() first."
                )
            found_inf = any([self._found_inf_in(key) for key in self._found_inf])
            self._last_step_skipped = found_inf
            self._apply_update(found_inf)
        self._reset_iteration()

    def _apply_update(self, found_inf: bool) -> None:
        """The scale/growth-tracker rule of torch's `_amp_update_scale_` kernel."""
        if found_inf:
            self._scale = _to_float32(self._scale * self._backoff_factor)
            self._growth_tracker = 0
            return
        successful = self._growth_tracker + 1
        if successful == self._growth_interval:
            grown = _to_float32(self._scale * self._growth_factor)
            if math.isfinite(grown):
                self._scale = grown
            self._growth_tracker = 0
        else:
            self._growth_tracker = successful

    @property
    def last_step_skipped(self) -> bool:
        """Whether the most recent `step()` (or the iteration closed by
        `update()`) skipped the optimizer."""
        return self._enabled and self._last_step_skipped

    def get_scale(self) -> float:
        """The current scale as a Python float (1.0 when disabled); no device sync."""
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict[str, Any]:
        """The same five entries torch's scaler saves (empty when disabled);
        plain Python numbers."""
        if not self._enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state saved by this scaler or by `torch.amp.GradScaler`."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError(
                "The source state dict is empty, possibly because it was saved from a disabled"
                " scaler."
            )
        self._scale = _to_float32(float(state_dict["scale"]))
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])


def step_was_skipped(scaler: Any, scale_before: float) -> bool:
    """Whether the iteration just closed by `scaler.update()` skipped its optimizer step.

    Works for VegaGradScaler (reads `last_step_skipped`) and torch's GradScaler, where a skip is
    seen as the scale dropping below `scale_before` (read with `get_scale()` before `update()`;
    on CUDA each `get_scale()` is a device sync, so read it only where the loop syncs anyway).
    """
    if not scaler.is_enabled():
        return False
    if isinstance(scaler, VegaGradScaler):
        return scaler.last_step_skipped
    return scaler.get_scale() < scale_before


def abandon_iteration(scaler: Any) -> None:
    """Forget which optimizers this iteration has unscaled or stepped, keeping the scale: a
    step retried after out-of-memory recovery unscales them again (both scalers refuse a
    second unscale_ before update())."""
    if not scaler.is_enabled():
        return
    if isinstance(scaler, VegaGradScaler):
        scaler._reset_iteration()
        return
    from collections import defaultdict

    from torch.amp.grad_scaler import _refresh_per_optimizer_state

    scaler._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)
