"""Precision policy: resolution rules per device, real autocast/scaler behaviour, fallback, tracker."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from trainer_core.contract.errors import DeviceError, ProfileError
from trainer_core.engine.grad_scaler import VegaGradScaler
from trainer_core.engine.precision import (
    NonfiniteTracker,
    PrecisionPolicy,
    autocast_works,
    cuda_bf16_supported,
    cuda_device_label,
    is_finite,
    native_scaler_works,
    resolve_precision,
)


def _train(policy: PrecisionPolicy, steps: int = 40) -> list[float]:
    """The loop's shape, with no branch on precision: autocast, scale, unscale, clip, step, update."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-2)
    x = torch.randn(64, 8)
    y = x.sum(dim=1, keepdim=True)
    scaler, losses = policy.scaler, []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with policy.autocast():
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    return losses


def _matmul_dtype(policy: PrecisionPolicy) -> torch.dtype:
    a = torch.ones(4, 4)
    with policy.autocast():
        return (a @ a).dtype


def test_cpu_auto_is_fp32_with_a_pass_through_scaler() -> None:
    policy = resolve_precision("auto", "cpu")
    assert (policy.name, policy.scaler_kind, policy.dtype) == ("fp32", "none", torch.float32)
    assert _matmul_dtype(policy) == torch.float32
    assert not policy.scaler.is_enabled()
    loss = torch.tensor(2.0)
    assert policy.scaler.scale(loss) is loss
    assert policy.fallback() is None
    assert "fp32" in policy.describe() and "cpu" in policy.describe()


@pytest.mark.parametrize("requested", ["fp32", "bf16", "fp16"])
def test_every_cpu_policy_trains_through_the_same_code(requested: str) -> None:
    policy = resolve_precision(requested, torch.device("cpu"))
    assert policy.name == requested
    expected = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[requested]
    assert _matmul_dtype(policy) == expected
    assert policy.scaler.is_enabled() == (requested == "fp16")
    losses = _train(policy)
    assert all(math.isfinite(v) for v in losses) and losses[-1] < 0.1 * losses[0]


def test_vega_scaler_policy_trains_fp16_like_torch_scaler() -> None:
    torch_policy = resolve_precision("fp16", "cpu")
    vega_policy = dataclasses.replace(torch_policy, scaler_kind="vega")
    assert isinstance(vega_policy.scaler, VegaGradScaler) and vega_policy.scaler.is_enabled()
    assert _train(vega_policy) == _train(torch_policy)  # same arithmetic, same losses
    assert vega_policy.scaler.state_dict() == torch_policy.scaler.state_dict()


def test_cpu_fp16_falls_back_to_bf16_then_fp32() -> None:
    policy = resolve_precision("fp16", "cpu")
    bf16 = policy.fallback()
    assert bf16 is not None and (bf16.name, bf16.scaler_kind) == ("bf16", "none")
    assert "fallback from fp16" in bf16.describe()
    fp32 = bf16.fallback()
    assert fp32 is not None and fp32.name == "fp32" and fp32.fallback() is None
    assert policy.scaler is policy.scaler  # one scaler per policy; a fallback gets a fresh one
    assert fp32.scaler is not policy.scaler


def test_cuda_rules() -> None:
    bf16 = PrecisionPolicy.resolve("auto", "cuda", bf16_supported=True)
    assert (bf16.name, bf16.scaler_kind, bf16.device_type) == ("bf16", "none", "cuda")
    fp16 = resolve_precision("auto", "cuda:1", bf16_supported=False)
    assert (fp16.name, fp16.scaler_kind) == ("fp16", "torch")
    assert fp16.fallback().name == "fp32"  # no bf16 on this GPU: straight to fp32
    assert resolve_precision("fp16", "cuda", bf16_supported=True).fallback().name == "bf16"
    assert resolve_precision("fp32", "cuda", bf16_supported=True).name == "fp32"
    with pytest.raises(ProfileError, match="compute capability 8.0"):
        resolve_precision("bf16", "cuda", bf16_supported=False)


def test_mps_uses_native_scaler_when_it_works_else_vega() -> None:
    native = resolve_precision("auto", "mps", bf16_supported=False, native_mps_scaler=True)
    assert (native.name, native.scaler_kind) == ("fp16", "torch")
    assert isinstance(native.scaler, torch.amp.GradScaler)
    own = resolve_precision("fp16", "mps", bf16_supported=False, native_mps_scaler=False)
    assert isinstance(own.scaler, VegaGradScaler) and own.scaler.is_enabled()
    assert "VegaGradScaler" in own.describe()
    assert own.fallback().name == "fp32"
    assert resolve_precision("fp16", "mps", bf16_supported=True, native_mps_scaler=False).fallback().name == "bf16"
    with pytest.raises(ProfileError, match="bf16"):
        resolve_precision("bf16", "mps", bf16_supported=False)


def test_bad_requests_are_clear_errors() -> None:
    with pytest.raises(ProfileError, match="train.precision = 'fp8'"):
        resolve_precision("fp8", "cpu")
    with pytest.raises(DeviceError, match="meta"):
        resolve_precision("auto", "meta")
    with pytest.raises(ProfileError, match="bf16"):
        resolve_precision("bf16", "cpu", bf16_supported=False)


def test_probes_on_this_machine() -> None:
    assert native_scaler_works("cpu")
    assert autocast_works("cpu", torch.bfloat16)
    if not torch.backends.mps.is_available():
        assert not native_scaler_works("mps")  # no MPS device: the probe fails cleanly
    if not torch.cuda.is_available():
        assert not cuda_bf16_supported() and cuda_device_label() == "this CUDA device"


def test_is_finite() -> None:
    assert is_finite(torch.tensor([1.0, -2.0]))
    assert not is_finite(torch.tensor([1.0, math.nan]))
    assert not is_finite(torch.tensor(-math.inf))


def test_nonfinite_tracker_counts_runs_and_round_trips() -> None:
    tracker = NonfiniteTracker(3)
    assert [tracker.record(f) for f in (False, False, True, False, False)] == [False] * 5
    assert tracker.consecutive == 2
    assert tracker.record(False) and tracker.consecutive == 3  # third in a row: fall back
    assert tracker.record(False)  # still over patience until the loop resets
    tracker.reset()
    assert tracker.consecutive == 0 and not tracker.record(False)
    saved = tracker.state_dict()
    assert saved == {"consecutive": 1, "total": 7}
    restored = NonfiniteTracker(3)
    restored.load_state_dict(saved)
    assert restored.state_dict() == saved
    assert not restored.record(False) and restored.record(False)
    restored.load_state_dict({})  # a checkpoint without tracker state
    assert restored.state_dict() == {"consecutive": 0, "total": 0}
    with pytest.raises(ProfileError, match="nonfinite_patience"):
        NonfiniteTracker(0)
