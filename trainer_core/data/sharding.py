"""Checks shared by every dataset that splits its batches across ranks (see `shard()` in each)."""

from __future__ import annotations


def check_shard(rank: int, world: int) -> tuple[int, int]:
    """(rank, world) when rank is one of world's ranks; ValueError naming
    the allowed range otherwise."""
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"rank must be within 0..{world - 1} for a world of {world}, got {rank}")
    return rank, world
