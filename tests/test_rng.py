"""RNG capture/restore: every generator a run draws from comes back exactly, also through torch.save/load."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer_core.engine.checkpoint_manager import CheckpointError
from trainer_core.engine.rng import capture_rng_state, restore_rng_state


def draw_from_all() -> tuple[torch.Tensor, np.ndarray, list[float]]:
    """Draw uniform and gaussian numbers from torch, numpy and random (gaussians exercise cached state)."""
    torch_values = torch.cat([torch.rand(5), torch.randn(3), torch.randint(0, 1000, (4,)).float()])
    numpy_values = np.concatenate([np.random.rand(5), np.random.normal(size=3), [np.random.standard_normal()]])
    python_values = [random.random(), random.gauss(0.0, 1.0), random.random(), float(random.randrange(10**6))]
    return torch_values, numpy_values, python_values


def assert_same_draws(a: tuple, b: tuple) -> None:
    assert torch.equal(a[0], b[0])
    assert np.array_equal(a[1], b[1])
    assert a[2] == b[2]


def test_restore_replays_identical_numbers_from_all_libraries() -> None:
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    random.gauss(0.0, 1.0)  # leave a cached gaussian in Python's state so it must be captured too
    state = capture_rng_state()
    first = draw_from_all()
    restore_rng_state(state)
    second = draw_from_all()
    assert_same_draws(first, second)
    # The draws are not trivially equal: a further draw after them differs.
    assert not torch.equal(first[0], draw_from_all()[0])


def test_state_survives_weights_only_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(11)
    np.random.seed(12)
    random.seed(13)
    path = tmp_path / "rng.pt"
    torch.save({"rng": capture_rng_state()}, path)
    expected = draw_from_all()
    draw_from_all()  # move every generator on, so restoring has real work to do
    loaded = torch.load(path, map_location="cpu", weights_only=True)["rng"]
    notes = restore_rng_state(loaded)
    assert notes == []
    assert_same_draws(expected, draw_from_all())


def test_cuda_state_without_cuda_is_reported_not_fatal() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the test covers resuming a GPU run on a CPU-only machine")
    state = capture_rng_state()
    state["cuda"] = [torch.get_rng_state()]  # any byte tensor stands in for a saved CUDA generator state
    notes = restore_rng_state(state)
    assert len(notes) == 1 and "CUDA" in notes[0] and "not restored" in notes[0]


@pytest.mark.parametrize("damage", ["not-a-dict", "wrong-version", "missing-numpy", "bad-torch"])
def test_damaged_state_raises_checkpoint_error(damage: str) -> None:
    state = capture_rng_state()
    if damage == "not-a-dict":
        state = [1, 2, 3]
    elif damage == "wrong-version":
        state["version"] = 99
    elif damage == "missing-numpy":
        del state["numpy"]
    else:
        state["torch_cpu"] = "garbage"
    with pytest.raises(CheckpointError, match="RNG state"):
        restore_rng_state(state)  # type: ignore[arg-type]
