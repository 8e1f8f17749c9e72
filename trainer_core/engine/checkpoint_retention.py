"""Which checkpoints a run keeps: the newest `train.keep_last`, the best,
and a disk budget over them.

The budget (`train.keep_disk_gb`, in GB of 10^9 bytes) removes the oldest kept checkpoints until
the rest fit; it never removes the best one or the newest complete one, since a resume and an
export need those. When those two alone are over the budget both stay and the caller is told once,
so a run never loses them to a number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

GB = 1_000_000_000


@dataclass(frozen=True)
class RetentionChoice:
    """What one prune decided: the files to remove and, when the budget cannot be kept, why."""

    remove: tuple[Path, ...]
    over_budget: str | None = None


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # removed meanwhile: it no longer takes space
        return 0


@dataclass(frozen=True)
class Retention:
    """`Retention(keep_last, keep_disk_gb=None)`: applied after each save to
    the complete checkpoints."""

    keep_last: int
    keep_disk_gb: float | None = None

    def choose(
        self,
        newest_first: list[Path],
        best: Path | None,
        size_of: Callable[[Path], int] = _file_size,
    ) -> RetentionChoice:
        """Decide over `newest_first` (complete checkpoint files, highest step first)."""
        kept = newest_first[: self.keep_last]
        if best is not None and best in newest_first and best not in kept:
            kept.append(best)
        remove = [p for p in newest_first if p not in kept]
        if self.keep_disk_gb is None or not newest_first:
            return RetentionChoice(tuple(remove))
        budget = int(self.keep_disk_gb * GB)
        protected = {newest_first[0], *([best] if best in kept else [])}
        sizes = {p: size_of(p) for p in kept}
        total = sum(sizes.values())
        # Oldest first: the checkpoints a resume or an export would least likely want.
        for path in sorted(kept, key=newest_first.index, reverse=True):
            if total <= budget:
                break
            if path not in protected:
                remove.append(path)
                total -= sizes[path]
        if total <= budget:
            return RetentionChoice(tuple(remove))
        return RetentionChoice(
            tuple(remove), self._over_budget_note(protected, sizes, newest_first[0])
        )

    def _over_budget_note(self, protected: set[Path], sizes: dict[Path, int], newest: Path) -> str:
        held = sum(sizes[p] for p in protected)
        names = " and ".join(
            f"the {'newest' if p == newest else 'best'} ({p.name}, {sizes[p] / GB:.3g} GB)"
            for p in sorted(protected, key=lambda p: p != newest)
        )
        return (
            f"the checkpoint disk budget train.keep_disk_gb = {self.keep_disk_gb:g} GB cannot hold"
            f" {names}: {held / GB:.3g} GB are kept anyway (they are never removed); raise"
            f" train.keep_disk_gb above {held / GB:.3g} or free space elsewhere"
        )
