"""Resuming on several machines: rank 0 reads the checkpoint and sends it to every other rank over
the process group, so only node 0 needs the run folder's checkpoints/ (others: rank logs only)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from trainer_core.engine.checkpoint_manager import find_resume, load_checkpoint
from trainer_core.world import DistributedError, World

Found = tuple[Path, dict[str, Any], list[str]]
# The header rank 0 broadcasts first: a checkpoint follows, none was found, or reading it failed.
_SENT, _NONE, _FAILED = 1, 0, -1


def read_resume(resume: str, run_dir: Path) -> Found | None:
    """The checkpoint --resume names, read here: (path, state, warnings); None: `auto`, none yet."""
    if resume == "auto":
        return find_resume(run_dir)
    path = Path(resume).expanduser()
    return path, load_checkpoint(path), []


def shared_resume(resume: str, run_dir: Path, world: World) -> Found | None:
    """`read_resume` on rank 0, and what it read on every other rank (the same state, no file)."""
    if not world.active or world.world_size == 1:
        return read_resume(resume, run_dir)
    if world.is_main:
        try:
            found = read_resume(resume, run_dir)
        except BaseException:
            _broadcast_header(_FAILED, 0, 0)  # the other ranks fail with a pointer, not a hang
            raise
        _send(found)
        return found
    return _receive()


def _broadcast_header(status: int, path_len: int, data_len: int) -> list[int]:
    import torch.distributed as dist

    header = torch.tensor([status, path_len, data_len], dtype=torch.int64)
    dist.broadcast(header, src=0)
    return [int(v) for v in header.tolist()]


def _send(found: Found | None) -> None:
    import torch.distributed as dist

    if found is None:
        _broadcast_header(_NONE, 0, 0)
        return
    path, state, _ = found
    buffer = io.BytesIO()
    torch.save(state, buffer)
    name, data = str(path).encode("utf-8"), buffer.getvalue()
    _broadcast_header(_SENT, len(name), len(data))
    dist.broadcast(torch.frombuffer(bytearray(name + data), dtype=torch.uint8), src=0)


def _receive() -> Found | None:
    import torch.distributed as dist

    status, path_len, data_len = _broadcast_header(0, 0, 0)
    if status == _FAILED:
        raise DistributedError(
            "rank 0 could not read the checkpoint to resume from: see trainer.log on node 0"
        )
    if status == _NONE:
        return None
    payload = torch.empty(path_len + data_len, dtype=torch.uint8)
    dist.broadcast(payload, src=0)
    raw = payload.numpy().tobytes()
    state = torch.load(io.BytesIO(raw[path_len:]), map_location="cpu", weights_only=True)
    return Path(raw[:path_len].decode("utf-8")), state, []
