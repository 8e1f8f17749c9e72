"""Atomic torch writes of checkpoints, with the fault hooks a crash-safety drill uses: the
half-way hold (`hold_s`, the `write` and `best_write` hold points), the injected full disk
(VEGA_FAULT_CHECKPOINT_ENOSPC) and the in-place negative control. `engine.checkpoint_manager`
decides what to write and when; this module only writes one file.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from trainer_core.atomic import atomic_write
from trainer_core.engine.faults import hold_at, writes_in_place

FAULT_ENOSPC_ENV = "VEGA_FAULT_CHECKPOINT_ENOSPC"


class _PartialWriteHook:
    """File wrapper torch.save writes through: once about half the payload is written
    (never inside the first write, which is the zip header), it writes part of the current
    chunk, flushes, and calls `fault`."""

    def __init__(self, file: Any, fault_after: int, fault: Callable[[], None]) -> None:
        self._file = file
        self._fault_after = fault_after
        self._fault: Callable[[], None] | None = fault
        self.written = 0
        # torch wraps what a write raises; this is the real cause
        self.failure: OSError | None = None

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        size = len(view)
        if (
            self._fault is not None
            and self.written > 0
            and self.written + size >= self._fault_after
            and size > 1
        ):
            fault, self._fault = self._fault, None
            half = size // 2
            self._file.write(view[:half])
            # make the partial bytes visible on disk, as a real interrupted write would
            self._file.flush()
            self.written += half
            try:
                fault()
            except OSError as exc:
                self.failure = exc
                raise
            view = view[half:]
        self._file.write(view)
        self.written += len(view)
        return size

    def flush(self) -> None:
        self._file.flush()


def _tensor_bytes(obj: Any) -> int:
    """The bytes of every tensor in a nested state: the bulk of what torch.save writes."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def _partial_write_fault(
    target: Path, hold_s: float, fail_enospc: bool, best: bool = False
) -> Callable[[], None]:
    """What happens half-way through a write: an injected full disk, a timed
    hold, or a drill's hold point."""

    def fault() -> None:
        if fail_enospc:
            raise OSError(
                errno.ENOSPC,
                "No space left on device (injected by " + FAULT_ENOSPC_ENV + ")",
                str(target),
            )
        time.sleep(hold_s)
        hold_at("write")
        if best:
            hold_at("best_write")

    return fault


def _write_torch_atomically(
    obj: Any, target: Path, hold_s: float = 0.0, fail_enospc: bool = False, best: bool = False
) -> int:
    """torch.save `obj` to `target` atomically; return the byte count."""
    fault = _partial_write_fault(target, hold_s, fail_enospc, best)
    fault_after = max(1, _tensor_bytes(obj) // 2)

    def write(file: Any) -> int:
        hook = _PartialWriteHook(file, fault_after, fault)
        try:
            torch.save(obj, hook)  # type: ignore[arg-type]  # torch.save needs only write/flush; its hint wants IO[bytes]
        except RuntimeError as exc:
            if hook.failure is not None:
                raise hook.failure from exc
            raise
        return hook.written

    # the kill drill's negative control: what a non-atomic save would leave behind
    if writes_in_place():
        with open(target, "wb") as file:
            return write(file)
    return atomic_write(target, write, before_replace=lambda: hold_at("rename"))
