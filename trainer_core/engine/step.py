"""One optimizer step: micro-batches forward and backward, then every optimizer group updated once.

Owns what a step touches: the (possibly DDP-wrapped) model, the optimizer groups, the precision
policy with its loss scaler, the batch iterator and the step's timings. On out-of-memory it halves
the micro-batch (keeping the effective batch) and retries the same items. One sync point per step:
every loss and the gradient norm reach the host in a single `tolist()`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import torch

from trainer_core.contract.errors import VegaError
from trainer_core.contract.protocol import OomRecoveredEvent
from trainer_core.engine.distributed import mean_over_ranks
from trainer_core.engine.events import EventHub
from trainer_core.engine.faults import FaultInjector
from trainer_core.engine.grad_scaler import abandon_iteration
from trainer_core.engine.loop_state import LoopState, halve_micro_batch
from trainer_core.engine.memory_manager import MemoryManager
from trainer_core.engine.optimizers import OptimizerGroups
from trainer_core.engine.precision import PrecisionPolicy
from trainer_core.engine.profiler import StepProfiler
from trainer_core.engine.task_contract import (
    END,
    TaskCall,
    as_iterator,
    check_losses,
    check_train_item,
    epoch_ended_early,
    next_item,
)
from trainer_core.models.base import Batch, Task, batch_to
from trainer_core.world import World

# The gradient-sync context of a step that averages over ranks as usual (or has
# no ranks): shared, stateless.
SYNC_AS_USUAL = nullcontext()


@dataclass
class StepOutcome:
    """One optimizer step after its single sync point: plain floats, ready for telemetry."""

    applied: bool
    loss: float
    losses: dict[str, float]
    grad_norm: float
    items: int
    lr: float
    """The learning rate this step was taken with (the scheduler has moved on since)."""
    lrs: dict[str, float] = field(default_factory=dict)
    """Several optimizers: each group's learning rate for this step, by name."""


class StepRunner:
    """Runs optimizer steps on the loop's position (`LoopState`): step,
    item, micro-batch and accumulation."""

    def __init__(
        self,
        task: Task,
        model: torch.nn.Module,
        groups: OptimizerGroups,
        precision: PrecisionPolicy,
        state: LoopState,
        device: torch.device,
        world: World,
        events: EventHub,
        profiler: StepProfiler,
        memory: MemoryManager,
        faults: FaultInjector,
        on_resize: Callable[[], None] = lambda: None,
    ) -> None:
        self.task, self.model, self.groups, self.precision = task, model, groups, precision
        self.state, self.device, self.world, self.events = state, device, world, events
        self.profiler, self.memory, self.faults = profiler, memory, faults
        # told when OOM recovery changed the micro-batch (the time budget re-measures)
        self.on_resize = on_resize
        self.data_s = self.step_s = 0.0  # the last step's data wait and wall time
        self._batches: Iterator[tuple[Batch, int]] | None = None
        # (epoch, micro_batch, item) _batches is at
        self._batches_at: tuple[int, int, int] | None = None

    def run(self) -> StepOutcome:
        """One optimizer step; on out-of-memory, halve the micro-batch and retry the same items."""
        while True:
            random_state = self._random_state()
            try:
                return self._attempt()
            except torch.OutOfMemoryError as exc:
                message = str(exc).splitlines()[0] if str(exc) else "out of memory"
            if self.world.active:
                raise self._oom_under_ddp(message)
            # Recover outside the except block: the traceback pins the failed step's tensors.
            self._recover_from_oom(message)
            # The retry draws the noise the failed attempt drew (dropout
            # masks, a VITS's latent samples).
            self._restore_random_state(random_state)

    def _random_state(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        cuda = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        return torch.get_rng_state(), cuda

    def _restore_random_state(self, state: tuple[torch.Tensor, torch.Tensor | None]) -> None:
        torch.set_rng_state(state[0])
        if state[1] is not None:
            torch.cuda.set_rng_state(state[1], self.device)

    def _attempt(self) -> StepOutcome:
        s, t0 = self.state, time.perf_counter()
        step_no, accum, profiler = s.step + 1, s.grad_accum, self.profiler
        self.groups.zero_grad()
        batches = self._train_batches()
        # per micro-batch: the loss as stepped, then the task's loss parts
        rows: list[list[torch.Tensor]] = []
        items, data_s = 0, 0.0
        names: list[str] = []
        for micro in range(accum):
            d0 = time.perf_counter()
            with profiler.phase("data"):
                batch, n = self._next_batch(batches, items)
            data_s += time.perf_counter() - d0
            with profiler.phase("transfer"):
                batch = batch_to(batch, self.device, non_blocking=self.device.type == "cuda")
            with self._gradient_sync(last=micro == accum - 1):
                losses, loss = self._forward_backward(batch, step_no, accum)
            rows.append([loss, *losses.values()])
            names = list(losses)
            items += n
        outcome = self._optimizer_step(rows, names, items)
        s.item += items
        self._batches_at = (s.epoch, s.micro_batch, s.item)
        self.data_s, self.step_s = data_s, time.perf_counter() - t0
        return outcome

    def _forward_backward(
        self, batch: Batch, step_no: int, accum: int
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        with self.profiler.phase("forward"), self.precision.autocast():
            self.faults.before_forward(step_no)
            with TaskCall(self.task, "compute_losses"):
                losses = self.task.compute_losses(self.model, batch)
            losses = check_losses(self.task, "compute_losses", losses, training=True)
            loss = self.faults.poison_loss(step_no, losses["total"])
            # Gradients average over the micro-batches; a division by 1 would only add a graph node.
            scaled = loss / accum if accum > 1 else loss
        with self.profiler.phase("backward"):
            self.precision.scaler.scale(scaled).backward()
        return losses, loss

    def _train_batches(self) -> Iterator[tuple[Batch, int]]:
        """The batch iterator, kept from step to step while the loop's position is
        where it left off; a new one after a new epoch, a resume, a halved micro-batch
        or a step that failed half-way."""
        s = self.state
        if self._batches is None or self._batches_at != (s.epoch, s.micro_batch, s.item):
            with TaskCall(self.task, "train_batches"):
                made = self.task.train_batches(s.epoch, s.micro_batch, start_item=s.item)
            self._batches = as_iterator(self.task, "train_batches", made)
        # until this step completes, the iterator is ahead of the loop's position
        self._batches_at = None
        return self._batches

    def _next_batch(self, batches: Iterator[tuple[Batch, int]], taken: int) -> tuple[Batch, int]:
        """The next (batch, items) of the epoch's order, checked (`taken`:
        items this step read before it)."""
        item = next_item(self.task, "train_batches", batches)
        if item is END:
            raise epoch_ended_early(self.task, self.state.epoch, self.state.item + taken, batches)
        return check_train_item(self.task, item, batches)

    def _gradient_sync(self, last: bool) -> AbstractContextManager[object]:
        """DDP averages gradients over ranks on the last micro-batch of a
        step only (no_sync on the others)."""
        if self.world.active and not last:
            return self.model.no_sync()  # type: ignore[operator]  # DistributedDataParallel.no_sync
        return SYNC_AS_USUAL

    def _optimizer_step(
        self, rows: list[list[torch.Tensor]], names: list[str], items: int
    ) -> StepOutcome:
        """Unscale, clip and step every group; one loss scaler for all of
        them, updated once per step."""
        scaler = self.precision.scaler
        lr = self.groups.main.lr()
        with self.profiler.phase("optimizer"):
            norms = []
            for group in self.groups:
                scaler.unscale_(group.optimizer)
                norms.append(
                    torch.nn.utils.clip_grad_norm_(group.params, group.clip or float("inf"))
                )
            self.faults.after_unscale(self.state.step + 1)
            grad_norm = (
                norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack(norms))
            )
            loss, norm, parts = self._read_step_values(rows, grad_norm)
            finite = math.isfinite(loss) and math.isfinite(norm)
            if finite or scaler.is_enabled():
                for group in self.groups:
                    # a scaler skips the step itself on inf/NaN gradients
                    scaler.step(group.optimizer)
            scaler.update()
            if finite:
                self._advance()
        self.profiler.step_done()
        return StepOutcome(finite, loss, dict(zip(names, parts, strict=True)), norm, items, lr)

    def _advance(self) -> None:
        """An applied step: every group's schedule moves on, and the step counts."""
        for group in self.groups:
            group.scheduler.step()
        self.state.step += 1

    def _read_step_values(
        self, rows: list[list[torch.Tensor]], grad_norm: torch.Tensor
    ) -> tuple[float, float, list[float]]:
        """(loss, grad norm, loss parts) of the step, each loss the mean over its micro-batches.

        The step's one sync point: every micro-batch's losses and the gradient norm reach the
        host in a single `tolist()` and are averaged there, so the loss parts cost no tensor
        ops of their own on the device.
        """
        flat = [value for row in rows for value in row]
        with torch.no_grad():
            if self.world.active:
                # Every rank reports (and judges finiteness by) the mean loss over
                # ranks, so their decisions agree.
                losses = mean_over_ranks(torch.stack(flat).float(), self.world)
                values = torch.cat([losses, grad_norm.float().reshape(1)]).tolist()
            else:
                values = torch.stack([*flat, grad_norm]).float().tolist()
        norm, width = values.pop(), len(rows[0])
        means = [sum(values[i::width]) / len(rows) for i in range(width)]
        return means[0], norm, means[1:]

    def _oom_under_ddp(self, message: str) -> VegaError:
        # Halving the batch on one rank alone would make the ranks' steps
        # differ: fail with advice instead.
        return VegaError(
            f"out of memory on {self.world.describe()} at step {self.state.step + 1} ({message});"
            " under DDP the micro-batch cannot shrink on one rank alone: lower train.batch_size"
            f" (now {self.state.micro_batch}) and raise train.grad_accum to keep the effective"
            " batch, then resume"
        )

    def shrink_micro_batch(self) -> tuple[int, int] | None:
        """Halve the micro-batch and raise accumulation so the effective batch holds: (micro_batch,
        grad_accum), or None when it is 1 already. OOM recovery and the memory manager's pre-emptive
        shrink both come here; the next step reads the same items in smaller pieces (the batch
        iterator follows the new size)."""
        s = self.state
        smaller = halve_micro_batch(s.micro_batch, s.grad_accum)
        if smaller is None:
            return None
        s.micro_batch, s.grad_accum = smaller
        self.on_resize()
        return smaller

    def _recover_from_oom(self, message: str) -> None:
        s = self.state
        self.groups.zero_grad()
        # An OOM after the scaler unscaled (inside the optimizer step): the
        # retry must unscale afresh.
        abandon_iteration(self.precision.scaler)
        action = self.memory.release()
        if self.shrink_micro_batch() is None:
            raise VegaError(
                f"out of memory at step {s.step + 1} even with micro-batch 1 ({message}); "
                "use a smaller model (model.hidden, model.*_layers) or a GPU with more free memory"
            )
        self.events.emit(
            OomRecoveredEvent(
                step=s.step + 1,
                micro_batch=s.micro_batch,
                grad_accum=s.grad_accum,
                message=f"{message}; freed memory ({action}), retrying the step",
            )
        )
