"""The task protocol: everything the training engine needs from a model family, and nothing more.

The engine never looks inside a model or a dataset. It asks a `Task` for batches in a deterministic
order, for losses, for validation metrics, for samples and for an export config. A task owns its
model (`task.model`), but every method that runs the model takes it as an argument, because the
engine may hand in a wrapped copy (DistributedDataParallel, torch.compile).

Resuming: `train_batches(epoch, batch_size, start_item)` yields the epoch's items in an order fixed
by (run seed, epoch). `start_item` counts items, not batches, so a run that stopped after N items
(or halved its batch size after an out-of-memory error) continues with item N, skipping and
repeating nothing: the engine simply calls `train_batches` again with the items it has consumed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import nn

if TYPE_CHECKING:
    from trainer_core.models.free_running import FreeRunningResult

Batch = dict[str, torch.Tensor]
SampleKind = Literal["text", "audio", "image"]
# What a group's pass leaves for the later groups of the same micro-batch
# (e.g. the generator's output).
Carry = dict[str, Any]


def batch_to(batch: Batch, device: torch.device | str, non_blocking: bool = False) -> Batch:
    """Move every tensor of a batch to `device` (non-blocking copies need
    pinned host memory to overlap)."""
    return {name: tensor.to(device, non_blocking=non_blocking) for name, tensor in batch.items()}


@dataclass(frozen=True)
class SampleResult:
    """One sample written during evaluation: a text, audio or image (PNG)
    file, with its text or caption."""

    kind: SampleKind
    path: Path
    text: str


class Task(ABC):
    """A model family bound to its data: the only interface the training engine talks to."""

    model: nn.Module

    @abstractmethod
    def train_items(self) -> int:
        """Items in one training epoch (the same for every epoch)."""

    @abstractmethod
    def train_batches(
        self, epoch: int, batch_size: int, start_item: int = 0
    ) -> Iterator[tuple[Batch, int]]:
        """Yield (batch, items in it) for `epoch`, starting at item
        `start_item` of its fixed order."""

    @abstractmethod
    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        """Yield the validation set in a fixed order (empty when nothing is held out)."""

    @abstractmethod
    def compute_losses(self, model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
        """Scalar losses for a batch on the model's device: "total" (what
        backward uses) and named parts."""

    @abstractmethod
    def val_metrics(self, losses_mean: dict[str, float]) -> dict[str, float]:
        """Extra validation figures derived from the mean losses (e.g. bits per byte)."""

    @abstractmethod
    def make_samples(self, model: nn.Module, out_dir: Path, step: int) -> list[SampleResult]:
        """Write this evaluation's samples under `out_dir` and describe them."""

    def make_views(self, model: nn.Module, out_dir: Path, step: int) -> list[SampleResult]:
        """Pictures of this evaluation (a voice's mel and alignment of a held-out clip) under
        `out_dir`; none by default. Called after make_samples, with the model in eval mode."""
        return []

    @abstractmethod
    def model_config(self) -> dict[str, Any]:
        """JSON-ready architecture description, enough to rebuild the model
        for the exported weights."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """JSON-ready summary for events and the dry-run plan: items,
        vocabulary, parameter count, warnings."""

    @abstractmethod
    def shard(self, rank: int, world_size: int) -> None:
        """Make train batches yield this rank's disjoint slice of every global batch (DDP)."""

    def speaks(self) -> bool:
        """True for tasks whose model turns text into speech: they can be scored free-running."""
        return False

    def free_running(self, model: nn.Module) -> FreeRunningResult | None:
        """Held-out sentences spoken without teacher forcing and scored against their recordings;
        None when the task cannot (no held-out items, or not a speech task)."""
        return None

    # Set by the engine before a free-running pass: called with (sentences
    # scored, sentences in the pass).
    report_progress: Callable[[int, int], None] | None = None

    def free_running_estimate(self) -> float | None:
        """Seconds a free-running pass is expected to take, known before the
        first (None: not known yet)."""
        return None

    def optimizer_groups(self) -> list[GroupSpec]:
        """Several optimizers, in update order (e.g. the discriminator, then the generator
        against the updated discriminator); empty for one AdamW over every parameter
        driven by compute_losses' "total"."""
        return []

    def primary_group(self) -> str:
        """The group whose "total" is the step's loss and whose learning rate is the run's "lr"."""
        groups = self.optimizer_groups()
        return groups[-1].name if groups else "main"

    def resting_groups(self, step: int) -> frozenset[str]:
        """Groups that sit optimizer step `step` (1-based) out: no pass, no update (e.g. a generator
        while a fresh discriminator warms up against it). Never every group."""
        return frozenset()

    def group_losses(
        self, model: nn.Module, batch: Batch, group: str, carry: Carry
    ) -> dict[str, torch.Tensor]:
        """Losses that drive `group` ("total" and named parts) for one micro-batch; `carry` is
        shared by the groups' passes over that micro-batch, in update order. Only tasks with
        optimizer groups implement it."""
        raise NotImplementedError(
            f"{type(self).__name__} declares optimizer groups but not group_losses"
        )

    def reference_scores(self) -> dict[str, float] | None:
        """Validation metrics of a reference to beat, by the names val_metrics uses (e.g.
        Griffin-Lim's copy-synthesis scores for a vocoder); None when the task has none."""
        return None

    def reference_name(self) -> str:
        return "reference"

    def export_module(self, model: nn.Module) -> nn.Module:
        """The part of the trained model an export holds (a GAN exports its generator alone)."""
        return model

    def preload_done_event(self, reason: str = "") -> dict[str, Any] | None:
        """Fields of a `preload_done` event, for tasks that preload features;
        None when nothing was preloaded."""
        return None


@dataclass(frozen=True)
class GroupSpec:
    """One optimizer group a task declares: what it trains and how (None:
    the profile's train section)."""

    name: str
    """Names the group's losses ("discriminator.total") and learning rate in events and charts."""
    params: list[nn.Parameter]
    """Every trainable parameter belongs to exactly one group."""
    lr: float | None = None
    betas: tuple[float, float] | None = None
    weight_decay: float | None = None
    clip: float | None = None
    """Gradient-norm clipping; None keeps train.grad_clip."""
    schedule: str | None = None
    """A train.schedule name; None keeps the profile's."""


def count_parameters(model: nn.Module) -> int:
    """Distinct trainable parameters (tied weights count once:
    `parameters()` yields each tensor once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The plain module inside a DistributedDataParallel or torch.compile wrapper."""
    inner = getattr(model, "_orig_mod", model)
    return getattr(inner, "module", inner)
