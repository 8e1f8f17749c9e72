"""The reference loops that the framework benchmarks measure Vega against: a plain PyTorch loop
(`RawLoop`), a hand-written GAN step over a task's optimizer groups (`TwoOptimizerLoop`), the
optimizer and schedule Vega would build for a profile, and `Paired`, which runs one reference step
right after each framework step so that both see the same machine load.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any


class RawLoop:
    """A plain hand-written PyTorch loop, one step per `step()`: zero_grad,
    forward, backward, clip, step.

    `batches` is any iterator of batches (resident ones, or the corpus iterator);
    `scheduler` is stepped after the optimizer when given. The loss is read back once per
    step, as a loop that logs it does.
    """

    def __init__(
        self,
        model: Any,
        compute_loss: Callable[[Any, Any], Any],
        batches: Iterable[Any],
        optimizer: Any,
        clip: float,
        scheduler: Any = None,
    ) -> None:
        self.model, self.compute_loss, self.optimizer = model, compute_loss, optimizer
        self.batches, self.clip, self.scheduler = iter(batches), clip, scheduler
        model.train()

    def step(self) -> None:
        import torch

        batch = next(self.batches)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.compute_loss(self.model, batch)
        loss.backward()
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        loss.item()


class TwoOptimizerLoop:
    """A hand-written GAN step over a task's optimizer groups, in their update order: for each group
    zero_grad, its loss (`Task.group_losses`, the carry shared along the step), backward, clip,
    step; then every schedule steps and the losses are read back once. Earlier groups are frozen
    during later groups' passes, as Vega does (`freeze=False`: HiFi-GAN's reference loop, which also
    computes the discriminator's unused gradients in the generator's backward). Nothing is
    snapshotted or guarded: the plain loop."""

    def __init__(
        self,
        task: Any,
        model: Any,
        batches: Iterable[Any],
        profile: Any,
        total_steps: int,
        freeze: bool = True,
    ) -> None:
        names = {id(p): n for n, p in task.model.named_parameters()}
        params = dict(model.named_parameters())
        self.groups = []
        for spec in task.optimizer_groups():
            own = [params[names[id(p)]] for p in spec.params]
            optimizer = adamw_like_vega(own, profile, lr=spec.lr, betas=spec.betas)
            self.groups.append(
                (spec.name, own, optimizer, scheduler_like_vega(optimizer, profile, total_steps))
            )
        self.task, self.model, self.batches, self.clip = (
            task,
            model,
            iter(batches),
            profile.train.grad_clip,
        )
        self.freeze = freeze
        model.train()

    def step(self) -> None:
        from contextlib import nullcontext

        import torch

        from trainer_core.engine.group_step import frozen

        batch, carry, losses, stepped = next(self.batches), {}, [], []
        for name, params, optimizer, _ in self.groups:
            with frozen(stepped) if self.freeze else nullcontext():
                optimizer.zero_grad(set_to_none=True)
                loss = self.task.group_losses(self.model, batch, name, carry)["total"]
                loss.backward()
            if self.clip:
                torch.nn.utils.clip_grad_norm_(params, self.clip)
            optimizer.step()
            losses.append(loss.detach())
            stepped.extend(params)
        for *_, scheduler in self.groups:
            scheduler.step()
        torch.stack(losses).tolist()


class Paired:
    """Per-step pairing on a noisy machine: right after each step of a framework's loop, one step of
    the reference loop runs and is timed on its own. Neighbouring steps see the same load, so the
    ratio of each pair is far steadier than the ratio of two runs measured one after the other.

    Call the instance after every framework step (it is the hook). The framework's step i lasts from
    the end of the reference step after step i-1 to the end of step i: one whole loop iteration.
    """

    def __init__(self, reference_step: Callable[[], None]) -> None:
        self.reference_step = reference_step
        self.ends: list[float] = []
        self.resumes: list[float] = []
        self.reference: list[float] = []

    def __call__(self, *_: Any) -> None:
        t0 = time.perf_counter()
        self.ends.append(t0)
        self.reference_step()
        t1 = time.perf_counter()
        self.reference.append(t1 - t0)
        self.resumes.append(t1)

    def framework_s(self, warmup: int) -> list[float]:
        """Seconds of each framework step after `warmup` steps (at least 1:
        the first has no start mark)."""
        return [self.ends[i] - self.resumes[i - 1] for i in range(max(1, warmup), len(self.ends))]

    def reference_s(self, warmup: int) -> list[float]:
        return self.reference[max(1, warmup) :]

    def ratios(self, warmup: int) -> list[float]:
        """framework / reference seconds, one per measured pair."""
        return [
            f / r for f, r in zip(self.framework_s(warmup), self.reference_s(warmup), strict=True)
        ]


def adamw_like_vega(model: Any, profile: Any, lr: float | None = None, betas: Any = None) -> Any:
    """The optimizer Vega builds for a profile on the CPU: AdamW with its hyper-parameters and
    torch's default implementation there (Vega asks for `fused` only on CUDA). `model` may be a
    module or a parameter list; `lr` and `betas` stand for an optimizer group's own settings."""
    import torch

    t = profile.train
    params = model.parameters() if hasattr(model, "parameters") else model
    return torch.optim.AdamW(
        params, lr=lr or t.lr, betas=betas or t.betas, weight_decay=t.weight_decay
    )


def scheduler_like_vega(optimizer: Any, profile: Any, total_steps: int) -> Any:
    from trainer_core.engine.schedule import build_lr_scheduler

    t = profile.train
    return build_lr_scheduler(
        optimizer, t.schedule, t.warmup_steps, total_steps, t.restart_period, t.restart_mult
    )
