"""Data-parallel training under torchrun: who this process is, the process
group, DDP and rank agreement.

Two ways in, one engine:
- `trainer-core train --nproc-per-node N` re-executes itself as `python -m
  torch.distributed.run --standalone
  --nproc-per-node N -m trainer_core train <the same arguments>` (`relaunch`);
- `torchrun ... -m trainer_core train ...` (multi-node too) starts the ranks directly.
Either way each rank finds RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE in its
environment (`World.from_env`).

Rules the engine keeps (docs/architecture.md, "Two processes"): rank 0 alone writes to the run
folder (events, checkpoints, samples, exports, session.json, report); the other ranks write only
`trainer-rank<N>.log`. Every collective is entered by all ranks at the same point of the loop, so no
rank ever waits for one that went elsewhere:
  - once per step boundary, `StepSync.exchange`: any rank's stop request, rank 0's commands and its
    finished / schedule-length decisions (the time budget is measured on rank 0), each rank's step
    timings;
  - inside a step: DDP's gradient all-reduce and `mean_over_ranks` of the loss (non-finite decisions
    agree);
  - at validation (`reduce_sums`), at every checkpoint (`gather_rank_rng`), after a resume
    (`gather_ints`) and at the end (`gather_digests`).
Control tensors stay on the CPU (gloo) even when the model trains on CUDA with NCCL.

`World` and the launcher are in `trainer_core.world` (torch-free); torch is
imported inside the functions here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_core.world import DistributedError, World

if TYPE_CHECKING:
    import torch
    from torch import nn

# Commands a step boundary carries from rank 0 to every rank; "stop" travels as a flag of its own.
COMMAND_CODES = {"pause": 1, "resume": 2, "save": 3, "evaluate": 4}
COMMAND_NAMES = {code: name for name, code in COMMAND_CODES.items()}
# Commands per step boundary; more wait for the next boundary (a person
# types far slower than steps run).
MAX_COMMANDS = 8
# stop, finished, total_steps, step seconds, data seconds, command count, then MAX_COMMANDS codes.
_SYNC_FIELDS = 6
_DIGEST_BYTES = 64


# --------------------------------------------------------------------------------------------------
# The process group


def connect(world: World, device_type: str) -> str:
    """Join the process group: gloo for CPU tensors always, NCCL for CUDA
    tensors when training on CUDA."""
    import torch
    import torch.distributed as dist

    if not world.active or dist.is_initialized():
        return dist.get_backend() if dist.is_initialized() else "none"
    if device_type == "cuda":
        torch.cuda.set_device(world.local_rank)
        backend = "cpu:gloo,cuda:nccl"
    else:
        backend = "gloo"
    try:
        dist.init_process_group(backend=backend, rank=world.rank, world_size=world.world_size)
    except (RuntimeError, ValueError) as exc:
        raise DistributedError(
            f"{world.describe()} could not join the process group ({backend}): {exc}"
        ) from exc
    return backend


def finish_together(world: World) -> None:
    """Wait until every rank has finished its run (a barrier); after a
    failure, torchrun stops the others."""
    import torch.distributed as dist

    if world.active and dist.is_available() and dist.is_initialized():
        dist.barrier()


def disconnect() -> None:
    """Leave the process group, if this process joined one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_text(world: World, text: str) -> str:
    """Rank 0's `text` on every rank (run folder names, loss names)."""
    if not world.active or world.world_size == 1:
        return text
    import torch
    import torch.distributed as dist

    data = text.encode("utf-8")
    size = torch.tensor([len(data)], dtype=torch.int64)
    dist.broadcast(size, src=0)
    buffer = torch.zeros(int(size.item()), dtype=torch.uint8)
    if world.is_main:
        buffer = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else buffer
    dist.broadcast(buffer, src=0)
    return bytes(buffer.tolist()).decode("utf-8")


def agreed_run_dir(world: World, mine: Path) -> Path:
    """Rank 0's run folder on node 0; on other machines a secondary folder of the same name beside
    this node's own choice (only trainer-rank<N>.log): each node keeps its
    files in its runs root."""
    # Without --run-dir each rank would propose its own time-stamped folder: rank 0's name wins.
    chosen = Path(broadcast_text(world, str(mine)))
    return chosen if world.node_rank == 0 else mine.parent / chosen.name


def gather_ints(world: World, values: Sequence[int]) -> list[list[int]]:
    """Every rank's `values` (the same length on all ranks), in rank order."""
    if not world.active:
        return [list(values)]
    import torch
    import torch.distributed as dist

    mine = torch.tensor(list(values), dtype=torch.int64)
    rows = [torch.empty_like(mine) for _ in range(world.world_size)]
    dist.all_gather(rows, mine)
    return [row.tolist() for row in rows]


# --------------------------------------------------------------------------------------------------
# The model and the numbers every rank must share


def wrap_model(model: nn.Module, device: torch.device, world: World) -> nn.Module:
    """DDP around `model` (already on `device`); the model itself when not under torchrun."""
    if not world.active:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = (
        [device.index if device.index is not None else world.local_rank]
        if device.type == "cuda"
        else None
    )
    return DistributedDataParallel(model, device_ids=ids)


def share_initial_weights(model: nn.Module, world: World) -> nn.Module:
    """Rank 0's parameters and buffers on every rank, as DDP's constructor does, for models
    trained without the DDP wrapper (several optimizer groups average each group's gradients
    themselves: `average_gradients`)."""
    if not world.active or world.world_size == 1:
        return model
    import torch
    import torch.distributed as dist

    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor, src=0)
    return model


def average_gradients(params: Sequence[nn.Parameter], world: World) -> None:
    """Replace each gradient by its mean over ranks, in one all-reduce of
    the flattened gradients."""
    if not world.active or world.world_size == 1:
        return
    import torch
    import torch.distributed as dist

    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world.world_size
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
        offset += grad.numel()


def mean_over_ranks(values: torch.Tensor, world: World) -> torch.Tensor:
    """The element-wise mean of `values` over all ranks (a new tensor; `values` is left alone)."""
    if not world.active or world.world_size == 1:
        return values
    import torch.distributed as dist

    total = values.detach().clone()
    dist.all_reduce(total)
    return total / world.world_size


def reduce_sums(world: World, sums: dict[str, float], items: int) -> tuple[dict[str, float], int]:
    """Add up per-name sums and item counts over all ranks; the names come from rank 0."""
    if not world.active or world.world_size == 1:
        return sums, items
    import torch
    import torch.distributed as dist

    names = [name for name in broadcast_text(world, "\n".join(sums)).split("\n") if name]
    values = torch.tensor(
        [sums.get(name, 0.0) for name in names] + [float(items)], dtype=torch.float64
    )
    dist.all_reduce(values)
    totals = values.tolist()
    return dict(zip(names, totals[:-1], strict=True)), int(totals[-1])


def shard_task_data(task: Any, world: World) -> None:
    """Make the task's dataset yield this rank's disjoint slice of every global batch."""
    if world.active and world.world_size > 1:
        task.shard(world.rank, world.world_size)


# --------------------------------------------------------------------------------------------------
# Random streams: one per rank


def rank_seed(seed: int, rank: int, step: int) -> int:
    """A 63-bit seed for rank `rank`'s dropout stream, identical on every platform."""
    digest = hashlib.sha256(f"vega-rank:{seed}:{rank}:{step}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def seed_rank_stream(seed: int, world: World, step: int = 0) -> None:
    """Give ranks other than 0 their own torch stream (rank 0 keeps the run
    seed's, as a single process would)."""
    if world.rank == 0:
        return
    import torch

    torch.manual_seed(rank_seed(seed, world.rank, step))


def _rank_rng_bytes(device: torch.device) -> tuple[torch.Tensor, int]:
    import torch

    cpu = torch.get_rng_state()
    cuda = (
        torch.cuda.get_rng_state(device)
        if device.type == "cuda"
        else torch.empty(0, dtype=torch.uint8)
    )
    return torch.cat([cpu, cuda]), len(cpu)


def gather_rank_rng(world: World, device: torch.device) -> list[dict[str, torch.Tensor | None]]:
    """Every rank's torch generator states, for rank 0's checkpoint (tensors
    only: weights_only loads them)."""
    import torch.distributed as dist

    flat, cpu_len = _rank_rng_bytes(device)
    rows = [flat.clone() for _ in range(world.world_size)]
    if world.active and world.world_size > 1:
        dist.all_gather(rows, flat)
    return [
        {
            "cpu": row[:cpu_len].clone(),
            "cuda": row[cpu_len:].clone() if len(row) > cpu_len else None,
        }
        for row in rows
    ]


def restore_rank_rng(
    saved: Any, world: World, device: torch.device, seed: int, step: int
) -> str | None:
    """Put this rank's generators back from a checkpoint's `rank_rng`; a
    note when that cannot be exact."""
    import torch

    if world.rank == 0:
        return None  # rank 0's streams are the checkpoint's main RNG state, already restored
    if not isinstance(saved, list) or len(saved) != world.world_size:
        seed_rank_stream(seed, world, step)
        count = len(saved) if isinstance(saved, list) else 0
        return (
            f"the checkpoint holds random streams for {count or 'no'} rank(s), this run has"
            f" {world.world_size}: rank {world.rank} draws a fresh dropout stream (the data order"
            " is still exact)"
        )
    mine = saved[world.rank]
    torch.set_rng_state(mine["cpu"])
    if device.type == "cuda" and mine.get("cuda") is not None:
        torch.cuda.set_rng_state(mine["cuda"], device)
    return None


# --------------------------------------------------------------------------------------------------
# Parameters: are the ranks still the same model?


def parameter_digest(state: Mapping[str, torch.Tensor]) -> str:
    """sha256 over names, dtypes, shapes and bytes of a state dict: equal
    digests, equal parameters."""
    import torch

    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().to("cpu").contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def gather_digests(world: World, digest: str) -> list[str]:
    """Every rank's digest (64 hex characters), in rank order."""
    codes = gather_ints(world, list(digest.encode("ascii")[:_DIGEST_BYTES]))
    return [bytes(row).decode("ascii") for row in codes]


# --------------------------------------------------------------------------------------------------
# The step boundary: one small collective that keeps every rank's decisions identical


@dataclass
class Agreement:
    """What every rank acts on at a step boundary (the same on all ranks)."""

    stop: bool
    finished: bool
    total_steps: int
    commands: list[str]
    step_seconds: list[float]
    data_seconds: list[float]


def encode_sync_row(
    stop: bool,
    finished: bool,
    total_steps: int,
    step_s: float,
    data_s: float,
    commands: Sequence[str],
) -> list[float]:
    """One rank's row of the step-boundary exchange (at most MAX_COMMANDS commands)."""
    codes = [float(COMMAND_CODES[c]) for c in commands[:MAX_COMMANDS]]
    padding = [0.0] * (MAX_COMMANDS - len(codes))
    return [
        float(stop),
        float(finished),
        float(total_steps),
        step_s,
        data_s,
        float(len(codes)),
        *codes,
        *padding,
    ]


def decode_sync_rows(rows: Sequence[Sequence[float]]) -> Agreement:
    """Any rank's stop stops everyone; commands, finished and the schedule length are rank 0's."""
    first = rows[0]
    count = int(first[5])
    commands = [COMMAND_NAMES[int(code)] for code in first[_SYNC_FIELDS : _SYNC_FIELDS + count]]
    return Agreement(
        stop=any(row[0] > 0 for row in rows),
        finished=first[1] > 0,
        total_steps=int(first[2]),
        commands=commands,
        step_seconds=[row[3] for row in rows],
        data_seconds=[row[4] for row in rows],
    )


class StepSync:
    """The per-step exchange: an all_gather of one small float64 row per rank, on the CPU (gloo)."""

    def __init__(self, world: World) -> None:
        self.world = world

    def exchange(
        self,
        *,
        stop: bool,
        finished: bool,
        total_steps: int,
        step_s: float,
        data_s: float,
        commands: Sequence[str],
    ) -> Agreement:
        row = encode_sync_row(stop, finished, total_steps, step_s, data_s, commands)
        if not self.world.active:
            return decode_sync_rows([row])
        import torch
        import torch.distributed as dist

        mine = torch.tensor(row, dtype=torch.float64)
        rows = [torch.empty_like(mine) for _ in range(self.world.world_size)]
        dist.all_gather(rows, mine)
        return decode_sync_rows([r.tolist() for r in rows])


@dataclass
class RankRates:
    """Per-rank throughput over a telemetry window, from the step timings
    each boundary exchange carries."""

    world_size: int
    items_per_rank: int = 0
    seconds: list[float] = field(default_factory=list)
    data_seconds: list[float] = field(default_factory=list)
    steps: int = 0

    def add(
        self, step_seconds: Sequence[float], data_seconds: Sequence[float], items_per_rank: int
    ) -> None:
        if not self.seconds:
            self.seconds, self.data_seconds = [0.0] * self.world_size, [0.0] * self.world_size
        self.seconds = [a + b for a, b in zip(self.seconds, step_seconds, strict=True)]
        self.data_seconds = [a + b for a, b in zip(self.data_seconds, data_seconds, strict=True)]
        self.items_per_rank += items_per_rank
        self.steps += 1

    def flush(self) -> tuple[list[float], list[float]]:
        """(`rank_samples_per_s`, `rank_data_wait_frac`) for a step event
        (empty lists before any step)."""
        if not self.steps:
            return [], []
        rates = [self.items_per_rank / s if s > 0 else 0.0 for s in self.seconds]
        waits = [
            d / s if s > 0 else 0.0 for d, s in zip(self.data_seconds, self.seconds, strict=True)
        ]
        self.seconds, self.data_seconds, self.items_per_rank, self.steps = [], [], 0, 0
        return rates, waits
