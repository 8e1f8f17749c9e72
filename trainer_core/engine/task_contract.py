"""The boundary between the engine and a task's code: failures named by the task's own source line.

Every call into a Task method that can fail runs inside `TaskCall(task, method)`: an exception
becomes a `TaskError` that names the method, the line in the task's code (`engine.code_site`)
and the original exception (chained, so trainer.log keeps the whole traceback). What a method
returns or yields is checked here too, for what the engine relies on: losses a dict of scalar
tensors with a "total" that requires grad in training, batches dicts of tensors, metrics
numbers, samples `SampleResult`s. The checks look at types, dimensions and flags only, never at
values, so they cost no device sync.

`run.run_training` reports a TaskError as an `error` event (code, method, file, line, expected) and
a `finished` event with status "failed", and exits with status 3 (TASK_FAILED_EXIT). Out-of-memory
errors pass through for the step runner's retry, and `VegaError`s (bad data or settings a task
reports) keep their own message and status 2.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any, Literal

import torch

from trainer_core.contract.errors import VegaError
from trainer_core.engine.code_site import CodeSite, failure_site, generator_site, method_site
from trainer_core.models.base import Batch, SampleResult

# The exit status of a run whose task's code failed (1: any other exception;
# 2: bad settings or data).
TASK_FAILED_EXIT = 3
BUILDING = "building the task"
# What next_item returns for an exhausted iterator (None is a wrong batch, not the end).
END: Any = object()
# Not the task's failure: the engine handles these itself (OOM retry, clear user errors, stops).
PASS_THROUGH = (torch.OutOfMemoryError, VegaError)


class TaskError(Exception):
    """A task's code failed: raised an exception (`code` task_failed) or
    broke the contract (task_contract)."""

    exit_code = TASK_FAILED_EXIT

    def __init__(
        self, message: str, *, method: str, site: CodeSite | None, expected: str | None = None
    ) -> None:
        where = f" ({site})" if site is not None else ""
        super().__init__(f"{message}{where}")
        self.method, self.site, self.expected = method, site, expected
        self.code = "task_contract" if expected is not None else "task_failed"


class TaskCall:
    """`with TaskCall(task, "compute_losses"):` turns an exception from the
    task's code into a TaskError."""

    __slots__ = ("method", "task")

    def __init__(self, task: object | None, method: str) -> None:
        self.task, self.method = task, method

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        if (
            exc is None
            or not isinstance(exc, Exception)
            or isinstance(exc, (*PASS_THROUGH, TaskError))
        ):
            return False
        site = failure_site(tb, self.task)
        detail = f": {exc}" if str(exc) else ""
        raise TaskError(
            f"{self.method} raised {type(exc).__name__}{detail}", method=self.method, site=site
        ) from exc


def broken(
    task: object, method: str, expected: str, got: str, site: CodeSite | None = None
) -> TaskError:
    """A contract failure: `method` returned or yielded something other than `expected`."""
    return TaskError(
        f"{expected}; got {got}",
        method=method,
        site=site or method_site(task, method),
        expected=expected,
    )


def describe_value(value: object) -> str:
    """`a tensor of shape (4,)`, `a list`, `None`: what a wrong value is, in a few words."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if value is None:
        return "None"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"


def check_losses(
    task: object, method: str, losses: Any, training: bool, group: str | None = None
) -> dict[str, Any]:
    """`losses` as compute_losses / group_losses must return them: scalar tensors by
    name, "total" among them, and in training a "total" that requires grad (else backward
    would fail far from the cause)."""
    label = method if group is None else f"{method} (group {group!r})"
    expected = f"{label} must return a dict with a scalar tensor 'total'"
    if not isinstance(losses, dict):
        raise broken(task, method, expected, describe_value(losses))
    total = losses.get("total")
    if total is None:
        keys = ", ".join(map(repr, losses)) or "none"
        raise broken(task, method, expected, f"a dict without 'total' (keys: {keys})")
    for name, value in losses.items():
        if not isinstance(value, torch.Tensor) or value.dim() != 0:
            parts = f"{label} must return scalar tensors (0-dim: reduce with .mean() or .sum())"
            raise broken(
                task,
                method,
                expected if name == "total" else parts,
                f"{describe_value(value)} for {name!r}",
            )
    if training and not total.requires_grad:
        expected = (
            f"{label}'s 'total' must require grad in training (computed from the model's"
            " parameters)"
        )
        raise broken(
            task,
            method,
            expected,
            "a tensor that does not (detached, or computed under torch.no_grad()?)",
        )
    return losses


def as_iterator(task: object, method: str, made: Any) -> Iterator[Any]:
    """What train_batches / val_batches returned, as an iterator (a generator, or any iterable)."""
    if not isinstance(made, Iterable) or isinstance(made, (str, bytes, dict)):
        expected = f"{method} must return an iterator (a generator, say) of batches"
        raise broken(task, method, expected, describe_value(made))
    return iter(made)


def next_item(task: object, method: str, source: Iterator[Any]) -> Any:
    """The next item of a task's batch iterator, fetched inside the boundary (a generator's body
    runs here); END when it is exhausted."""
    with TaskCall(task, method):
        return next(source, END)


def epoch_ended_early(task: Any, epoch: int, item: int, source: object) -> TaskError:
    """train_batches stopped before the epoch's train_items() were all yielded."""
    expected = f"train_batches must yield train_items() = {task.train_items()} items in every epoch"
    return broken(
        task,
        "train_batches",
        expected,
        f"the end of epoch {epoch} at item {item}",
        generator_site(source),
    )


def check_train_item(task: object, item: Any, source: object) -> tuple[Batch, int]:
    """One item of train_batches: (batch, items in it); `source` is the
    iterator, to find the yield's line."""
    expected = (
        "train_batches must yield (batch, items) pairs: a dict of tensors and the number of items"
        " in it"
    )
    if not isinstance(item, tuple) or len(item) != 2:
        raise broken(task, "train_batches", expected, describe_value(item), generator_site(source))
    batch, items = item
    count = (
        0 if isinstance(items, bool) or not hasattr(items, "__index__") else operator.index(items)
    )
    if count < 1:
        raise broken(
            task, "train_batches", expected, f"{items!r} as the item count", generator_site(source)
        )
    _check_batch(task, "train_batches", batch, source)
    return batch, count


def check_val_batch(task: object, batch: Any, source: object) -> Batch:
    """One val_batches batch: a dict of tensors whose first tensor's first
    dimension counts its items."""
    _check_batch(task, "val_batches", batch, source)
    first = next(iter(batch.values()))
    if first.dim() == 0:
        expected = "val_batches must yield tensors with the batch as their first dimension"
        raise broken(
            task,
            "val_batches",
            expected,
            f"a 0-dim tensor for {next(iter(batch))!r}",
            generator_site(source),
        )
    return batch


def _check_batch(task: object, method: str, batch: Any, source: object) -> None:
    expected = f"{method} must yield batches as dicts of tensors"
    if not isinstance(batch, dict) or not batch:
        got = "an empty dict" if isinstance(batch, dict) else describe_value(batch)
        raise broken(task, method, expected, got, generator_site(source))
    for name, value in batch.items():
        if not isinstance(value, torch.Tensor):
            raise broken(
                task,
                method,
                expected,
                f"{describe_value(value)} for {name!r}",
                generator_site(source),
            )


def check_metrics(task: object, metrics: Any) -> dict[str, float]:
    """val_metrics' figures: a dict of numbers by name (they go into
    `validation` events and charts)."""
    expected = "val_metrics must return a dict of numbers by name"
    if not isinstance(metrics, dict):
        raise broken(task, "val_metrics", expected, describe_value(metrics))
    for name, value in metrics.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not isinstance(name, str) or not (
            number or isinstance(value, torch.Tensor) and value.numel() == 1
        ):
            raise broken(task, "val_metrics", expected, f"{describe_value(value)} for {name!r}")
    return {name: float(value) for name, value in metrics.items()}


def check_samples(task: object, method: str, samples: Any) -> list[SampleResult]:
    """make_samples / make_views: a list of SampleResult (each becomes a `sample` event)."""
    expected = f"{method} must return a list of SampleResult"
    if not isinstance(samples, (list, tuple)):
        raise broken(task, method, expected, describe_value(samples))
    for sample in samples:
        if not isinstance(sample, SampleResult):
            raise broken(task, method, expected, f"a list holding {describe_value(sample)}")
    return list(samples)


def error_details(exc: BaseException, task: object | None) -> dict[str, Any]:
    """The `error` event's fields beyond the message: what failed, and the line of code (the task's
    where the traceback reaches it, else the innermost frame)."""
    details: dict[str, Any]
    if isinstance(exc, TaskError):
        site, details = (
            exc.site,
            {"code": exc.code, "task_method": exc.method, "expected": exc.expected},
        )
    else:
        site, details = failure_site(exc.__traceback__, task), {"code": "trainer"}
    if site is not None:
        details.update(file=site.file, line=site.line, function=site.function)
    return details
