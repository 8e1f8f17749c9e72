"""Deliberately broken tasks for tests/test_task_failures.py: Vega's own tasks with one thing broken in each.

Each class breaks one method; the line a failure report must name carries a `# site: NAME` comment, which
`marked_line(NAME)` finds. `TASKS` names them for the command line:

    python tests/broken_tasks.py NAME train --profile ...

runs `trainer-core train ...` in this process with the text task (or the vocoder's, for `vocoder_*` names)
replaced by NAME: a real trainer process whose task fails in its own code.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainer_core.models.base import Batch, Carry, SampleResult
from trainer_core.models.lm import LmTask
from trainer_core.models.registry import TaskFactory, TaskRequest, register_task, task_factory
from trainer_core.models.vocoder_task import VocoderTask

# The training step at which the step-counting tasks below break (with train.grad_accum = 1).
BREAK_AT_STEP = 5


def marked_line(name: str) -> int:
    """The line of this file that carries `# site: NAME`."""
    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    (number,) = [n for n, line in enumerate(lines, start=1) if line.rstrip().endswith(f"# site: {name}")]
    return number


class CountingLm(LmTask):
    """The byte LM, counting its training forward passes (validation runs the model in eval mode)."""

    training_calls = 0

    def counted(self, model: nn.Module) -> int:
        if model.training:
            self.training_calls += 1
        return self.training_calls


class RaisesInLoss(CountingLm):
    def compute_losses(self, model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
        if self.counted(model) == BREAK_AT_STEP:
            raise ValueError(f"the loss blew up at step {BREAK_AT_STEP}")  # site: raises_in_loss
        return super().compute_losses(model, batch)


class NonScalarTotal(CountingLm):
    def compute_losses(self, model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:  # site: non_scalar
        logits = model(batch["input"]).float()
        per_item = F.cross_entropy(logits.transpose(1, 2), batch["target"], reduction="none").mean(dim=1)
        return {"total": per_item}  # one loss per item: the reduction was forgotten


class MissingTotal(CountingLm):
    def compute_losses(self, model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:  # site: missing_total
        losses = super().compute_losses(model, batch)
        return {"ce": losses["total"]}


class NonTensorLoss(CountingLm):
    def compute_losses(self, model: nn.Module, batch: Batch) -> Any:  # site: non_tensor
        return {"total": super().compute_losses(model, batch)["total"].item()}  # a number, not a tensor


class DetachedTotal(CountingLm):
    def compute_losses(self, model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:  # site: detached
        with torch.no_grad():
            return super().compute_losses(model, batch)


class ListBatches(CountingLm):
    def train_batches(self, epoch: int, batch_size: int, start_item: int = 0) -> Iterator[Any]:
        for batch, items in super().train_batches(epoch, batch_size, start_item):
            yield [batch["input"], batch["target"]], items  # site: list_batches


class ShortEpoch(CountingLm):
    def train_batches(self, epoch: int, batch_size: int, start_item: int = 0) -> Iterator[Any]:  # site: short_epoch
        yield next(iter(super().train_batches(epoch, batch_size, start_item)))  # one batch, then the epoch ends


class MetricsNotADict(CountingLm):
    def val_metrics(self, losses_mean: dict[str, float]) -> Any:  # site: metrics_list
        return [losses_mean["total"]]


class RaisesInSamples(CountingLm):
    def make_samples(self, model: nn.Module, out_dir: Path, step: int) -> list[SampleResult]:
        raise RuntimeError(f"no sampler for step {step}")  # site: raises_in_samples


class RaisesWhenBuilt(CountingLm):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise OSError("the tokenizer file is missing")  # site: raises_when_built


class VocoderNonScalarGenerator(VocoderTask):
    def group_losses(self, model: nn.Module, batch: Batch, group: str, carry: Carry) -> Any:  # site: vocoder_group
        losses = super().group_losses(model, batch, group, carry)
        return {**losses, "total": losses["total"].expand(2)} if group == "generator" else losses


LM_TASKS: dict[str, type[LmTask]] = {
    "raises_in_loss": RaisesInLoss,
    "non_scalar": NonScalarTotal,
    "missing_total": MissingTotal,
    "non_tensor": NonTensorLoss,
    "detached": DetachedTotal,
    "list_batches": ListBatches,
    "short_epoch": ShortEpoch,
    "metrics_list": MetricsNotADict,
    "raises_in_samples": RaisesInSamples,
    "raises_when_built": RaisesWhenBuilt,
}


def lm_factory(cls: type[LmTask]) -> TaskFactory:
    def build(request: TaskRequest) -> LmTask:
        return cls.from_report(request.profile, request.report, request.device)

    return build


def vocoder_factory(request: TaskRequest) -> VocoderTask:
    return VocoderNonScalarGenerator(
        request.profile, request.report, request.device, progress=request.progress, where=request.preload_where
    )


def install(name: str) -> tuple[str, TaskFactory]:
    """Register the broken task NAME in place of its built-in; returns (mode, the factory it replaced)."""
    mode = "vocoder" if name.startswith("vocoder") else "text"
    previous = task_factory(mode)
    register_task(mode, vocoder_factory if mode == "vocoder" else lm_factory(LM_TASKS[name]))
    return mode, previous


def main(argv: list[str]) -> int:
    from trainer_core.cli import main as trainer_core

    install(argv[0])
    return trainer_core(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
