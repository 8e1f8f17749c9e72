"""Dynamic time warping between two feature sequences, on an L1 frame cost.

The path may step (1, 1), (1, 0) or (0, 1) and runs from the first frames of both sequences to their
last. The distance is the summed frame cost along the path divided by the path's length, so it is in
the units of one frame's cost (mean absolute log-mel difference per bin) whatever the lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Alignment:
    """A DTW result: the mean frame cost along the path and the path's (a, b) frame pairs."""

    distance: float
    path_a: np.ndarray
    path_b: np.ndarray


def frame_costs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(Ta, Tb) mean absolute difference over features between every frame
    of a (D, Ta) and b (D, Tb)."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[0]:
        raise ValueError(
            f"need two (features, frames) arrays with equal features, got {a.shape} and {b.shape}"
        )
    a64, b64 = a.astype(np.float64).T, b.astype(np.float64).T
    # One row of a at a time keeps memory at Ta x Tb, not Ta x Tb x D.
    return np.stack([np.abs(b64 - row).mean(axis=1) for row in a64])


def accumulated_costs(cost: np.ndarray) -> np.ndarray:
    """(Ta + 1, Tb + 1) cheapest cost to reach each cell; row and column 0 are the infinite border.

    Cells on one anti-diagonal depend only on the two before it, so each
    diagonal is one vector step.
    """
    rows, cols = cost.shape
    total = np.full((rows + 1, cols + 1), np.inf)
    total[0, 0] = 0.0
    for diagonal in range(rows + cols - 1):
        i = np.arange(max(0, diagonal - cols + 1), min(rows - 1, diagonal) + 1)
        j = diagonal - i
        best = np.minimum(np.minimum(total[i, j], total[i, j + 1]), total[i + 1, j])
        total[i + 1, j + 1] = cost[i, j] + best
    return total


def backtrack(total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest path's frame pairs, first to last, from accumulated costs."""
    i, j = total.shape[0] - 1, total.shape[1] - 1
    pairs_a, pairs_b = [i - 1], [j - 1]
    while i > 1 or j > 1:
        # Ties prefer the diagonal: the path stays as short as the data allows.
        moves = ((total[i - 1, j - 1], -1, -1), (total[i - 1, j], -1, 0), (total[i, j - 1], 0, -1))
        _, di, dj = min(moves, key=lambda move: move[0])
        i, j = i + di, j + dj
        pairs_a.append(i - 1)
        pairs_b.append(j - 1)
    return np.array(pairs_a[::-1]), np.array(pairs_b[::-1])


def dtw(a: np.ndarray, b: np.ndarray) -> Alignment:
    """Align a (D, Ta) with b (D, Tb); both need at least one frame."""
    if a.shape[-1] == 0 or b.shape[-1] == 0:
        raise ValueError("DTW needs at least one frame on each side")
    cost = frame_costs(a, b)
    total = accumulated_costs(cost)
    path_a, path_b = backtrack(total)
    return Alignment(float(cost[path_a, path_b].mean()), path_a, path_b)
