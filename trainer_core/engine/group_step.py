"""One optimizer step over several optimizer groups (e.g. a discriminator, then
a generator), in update order.

The step's micro-batches are fetched once; then each group in turn runs forward and backward over
all of them (`Task.group_losses`, with one `carry` per micro-batch shared by the groups' passes),
has its gradients averaged over ranks, unscaled and clipped, and is stepped, so a later group trains
against the earlier groups' updated weights. One loss scaler serves every optimizer (unscale and
step each, update once, as torch documents for several optimizers) and the losses of every group
reach the host in one sync at the end.

A group the task rests this step (`Task.resting_groups`, e.g. a pretrained generator while a fresh
discriminator warms up) has no pass and no update; the step's loss is then the last working group's.

A group stepped before a later one fails is undone from a snapshot: a non-finite loss or
gradient anywhere skips the whole step (no group moves, no schedule advances), and out-of-memory
anywhere leaves every weight as it was, so the base runner's halving retry starts clean. Groups
already stepped are frozen during later passes: their gradients would be wasted work. With
gradient accumulation each micro-batch's carry (e.g. the generator's output with its graph)
lives until the last group's pass.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from trainer_core.engine.distributed import average_gradients
from trainer_core.engine.grad_scaler import abandon_iteration
from trainer_core.engine.optimizers import OptimizerGroup
from trainer_core.engine.step import StepOutcome, StepRunner
from trainer_core.engine.task_contract import TaskCall, check_losses
from trainer_core.models.base import Batch, Carry, batch_to


class GroupSnapshot:
    """A group's weights and optimizer state just before its step: enough to undo it.

    The copies live in buffers kept from step to step and refilled (`capture`): a 47M-parameter
    discriminator's weights and Adam moments are half a gigabyte, and allocating them anew every
    step cost as much as the step."""

    def __init__(self, group: OptimizerGroup) -> None:
        self.group = group
        self.weights: list[torch.Tensor] = []
        self.state: dict[int, dict[str, Any]] = {}
        """Per parameter (by position) that had optimizer state: its
        entries, tensors copied into buffers."""

    @torch.no_grad()
    def capture(self) -> GroupSnapshot:
        params = [p.detach() for p in self.group.params]
        if len(self.weights) != len(params):
            self.weights = [p.clone() for p in params]
        else:
            torch._foreach_copy_(self.weights, params)
        state, kept = self.group.optimizer.state, self.state
        self.state = {}
        for index, param in enumerate(self.group.params):
            if param in state:
                old = kept.get(index, {})
                self.state[index] = {
                    name: _copy_into(old.get(name), value) for name, value in state[param].items()
                }
        return self

    @torch.no_grad()
    def restore(self) -> None:
        torch._foreach_copy_([p.detach() for p in self.group.params], self.weights)
        state = self.group.optimizer.state
        for index, param in enumerate(self.group.params):
            saved = self.state.get(index)
            if saved is None:
                state.pop(param, None)  # it had no state before this step (the first one)
                continue
            for name, value in saved.items():
                current = state[param].get(name)
                if isinstance(value, torch.Tensor) and isinstance(current, torch.Tensor):
                    current.copy_(value)
                else:
                    state[param][name] = value.clone() if isinstance(value, torch.Tensor) else value


def _copy_into(buffer: Any, value: Any) -> Any:
    """`value` copied, into `buffer` when it is a tensor of the same shape
    and type (no new allocation)."""
    if not isinstance(value, torch.Tensor):
        return copy.deepcopy(value)
    if (
        isinstance(buffer, torch.Tensor)
        and buffer.shape == value.shape
        and buffer.dtype == value.dtype
    ):
        return buffer.copy_(value)
    return value.clone()


@contextmanager
def frozen(params: Sequence[torch.nn.Parameter]) -> Iterator[None]:
    """No gradients for `params` inside the block (their requires_grad flags come back after it)."""
    flags = [p.requires_grad for p in params]
    for param in params:
        param.requires_grad_(False)
    try:
        yield
    finally:
        for param, flag in zip(params, flags, strict=True):
            param.requires_grad_(flag)


class GroupedStepRunner(StepRunner):
    """StepRunner for tasks that declare optimizer groups; OOM recovery and
    the loop position are inherited."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._snapshots: dict[str, GroupSnapshot] = {}

    def _attempt(self) -> StepOutcome:
        s, t0 = self.state, time.perf_counter()
        self.groups.zero_grad()
        batches, items, data_s = self._fetch(s.grad_accum)
        lr, lrs = self.groups.main.lr(), self.groups.lrs()
        # the groups stepped so far this step, each able to undo its step
        snapshots: list[GroupSnapshot] = []
        resting = self.task.resting_groups(s.step + 1)
        groups = [group for group in self.groups if group.name not in resting] or list(self.groups)
        try:
            rows, norms = self._passes(groups, batches, s.step + 1, snapshots)
            outcome = self._finish(groups, rows, norms, snapshots, items, (lr, lrs))
        except torch.OutOfMemoryError:
            self._undo(snapshots)
            abandon_iteration(self.precision.scaler)
            raise
        s.item += items
        self._batches_at = (s.epoch, s.micro_batch, s.item)
        self.data_s, self.step_s = data_s, time.perf_counter() - t0
        return outcome

    def _fetch(self, accum: int) -> tuple[list[Batch], int, float]:
        """The step's micro-batches on the device, the items in them and the
        seconds spent waiting for data."""
        source = self._train_batches()
        batches, items, data_s = [], 0, 0.0
        for _ in range(accum):
            d0 = time.perf_counter()
            with self.profiler.phase("data"):
                batch, n = self._next_batch(source, items)
            data_s += time.perf_counter() - d0
            with self.profiler.phase("transfer"):
                batches.append(
                    batch_to(batch, self.device, non_blocking=self.device.type == "cuda")
                )
            items += n
        return batches, items, data_s

    def _passes(
        self,
        groups: list[OptimizerGroup],
        batches: list[Batch],
        step_no: int,
        snapshots: list[GroupSnapshot],
    ) -> tuple[list[dict[str, torch.Tensor]], list[torch.Tensor]]:
        """Each working group's pass in update order: per micro-batch its named
        losses, and its gradient norm."""
        carries: list[Carry] = [{} for _ in batches]
        rows: list[dict[str, torch.Tensor]] = [{} for _ in batches]
        norms: list[torch.Tensor] = []
        stepped: list[torch.nn.Parameter] = []
        last = groups[-1]
        for group in groups:
            with frozen(stepped):
                for row, batch, carry in zip(rows, batches, carries, strict=True):
                    row.update(
                        self._forward_backward_group(group, batch, carry, step_no, len(batches))
                    )
            average_gradients(group.params, self.world)
            with self.profiler.phase("optimizer", group.name):
                self.precision.scaler.unscale_(group.optimizer)
                norms.append(
                    torch.nn.utils.clip_grad_norm_(group.params, group.clip or float("inf"))
                )
                self.faults.after_unscale(step_no, group.name)
                if group is not last:
                    snapshots.append(self._snapshot(group).capture())
                    self.precision.scaler.step(group.optimizer)
            stepped.extend(group.params)
        return rows, norms

    def _forward_backward_group(
        self, group: OptimizerGroup, batch: Batch, carry: Carry, step_no: int, accum: int
    ) -> dict[str, torch.Tensor]:
        name = group.name
        with self.profiler.phase("forward", name), self.precision.autocast():
            self.faults.before_forward(step_no, name)
            with TaskCall(self.task, "group_losses"):
                losses = self.task.group_losses(self.model, batch, name, carry)
            losses = check_losses(self.task, "group_losses", losses, training=True, group=name)
            loss = self.faults.poison_loss(step_no, losses["total"], name)
            scaled = loss / accum if accum > 1 else loss
        with self.profiler.phase("backward", name):
            self.precision.scaler.scale(scaled).backward()
        return {
            f"{name}.{part}": loss if part == "total" else value for part, value in losses.items()
        }

    def _finish(
        self,
        groups: list[OptimizerGroup],
        rows: list[dict[str, torch.Tensor]],
        norms: list[torch.Tensor],
        snapshots: list[GroupSnapshot],
        items: int,
        lr: tuple[float, dict[str, float]],
    ) -> StepOutcome:
        """The one sync, then the last group's step, or the whole step
        undone when anything was non-finite."""
        scaler, last = self.precision.scaler, groups[-1]
        names = list(rows[0])
        main = self.groups.main
        # a resting primary: the last working one
        primary = f"{(main if main in groups else last).name}.total"
        with self.profiler.phase("optimizer", last.name):
            grad_norm = torch.linalg.vector_norm(torch.stack(norms))
            loss, norm, parts = self._read_step_values(
                [[row[primary], *row.values()] for row in rows], grad_norm
            )
            finite = math.isfinite(norm) and all(math.isfinite(v) for v in parts)
            if finite:
                scaler.step(last.optimizer)
            else:
                self._undo(snapshots)
            scaler.update()
            if finite:
                self._advance()
        self.profiler.step_done()
        return StepOutcome(
            finite, loss, dict(zip(names, parts, strict=True)), norm, items, lr[0], lr[1]
        )

    def _snapshot(self, group: OptimizerGroup) -> GroupSnapshot:
        """The group's snapshot, its buffers kept from the step before (a
        new one for a new group object)."""
        kept = self._snapshots
        if group.name not in kept or kept[group.name].group is not group:
            kept[group.name] = GroupSnapshot(group)
        return kept[group.name]

    @staticmethod
    def _undo(snapshots: list[GroupSnapshot]) -> None:
        for snapshot in reversed(snapshots):
            snapshot.restore()
