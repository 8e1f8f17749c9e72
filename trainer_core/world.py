"""Who this process is among the training processes, and how `--nproc-per-node N` (and `--nnodes`)
relaunch under torchrun.

Torch-free on purpose: the plan (`trainer_core.plan`) and the launcher need `World` before any torch
import; the process group, DDP and rank agreement live in `engine.distributed`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

from trainer_core.contract.errors import VegaError
from trainer_core.contract.import_path import safe_env

NPROC_FLAG = "--nproc-per-node"
# The flags the launcher consumes: the ranks torchrun starts get the command line without them.
LAUNCH_FLAGS = (NPROC_FLAG, "--nnodes", "--node-rank", "--master-addr", "--master-port")
# torchrun's own default rendezvous port, used when --master-port is left out.
DEFAULT_MASTER_PORT = 29500
# The parent of a --nproc-per-node launch hands its warnings (fewer ranks, CPU
# fallback) to rank 0 through this.
LAUNCH_NOTES_ENV = "VEGA_LAUNCH_NOTES"


class DistributedError(VegaError):
    """The torchrun environment is inconsistent, or the ranks cannot agree."""


def rank_log_name(rank: int) -> str:
    """The only file a rank other than 0 writes in the run folder."""
    return f"trainer-rank{rank}.log"


# --------------------------------------------------------------------------------------------------
# Who am I


def _env_int(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = environ.get(name)
    if raw is None:
        if default is None:
            raise DistributedError(
                f"{name} is not set, but other torchrun variables are: start ranks with torchrun"
            )
        return default
    try:
        return int(raw)
    except ValueError:
        raise DistributedError(
            f"{name}={raw!r} is not a whole number; start the ranks with torchrun"
        ) from None


@dataclass(frozen=True)
class World:
    """This process's place among the training processes; `active` means torchrun started it."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    active: bool = False
    node_rank: int = 0
    """torchrun's GROUP_RANK: which machine this process runs on (rank 0 is on node 0)."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> World:
        """The world torchrun described in the environment, or a single process when it did not."""
        env = os.environ if environ is None else environ
        if "WORLD_SIZE" not in env and "RANK" not in env:
            return SINGLE
        world_size = _env_int(env, "WORLD_SIZE")
        rank = _env_int(env, "RANK")
        local_rank = _env_int(env, "LOCAL_RANK", rank)
        local_world_size = _env_int(env, "LOCAL_WORLD_SIZE", world_size)
        if not 0 <= rank < world_size or not 0 <= local_rank < local_world_size:
            raise DistributedError(
                f"inconsistent torchrun environment: RANK={rank}, WORLD_SIZE={world_size},"
                f" LOCAL_RANK={local_rank}, LOCAL_WORLD_SIZE={local_world_size}"
            )
        node_rank = _env_int(env, "GROUP_RANK", rank // local_world_size)
        return cls(rank, world_size, local_rank, local_world_size, active=True, node_rank=node_rank)

    def describe(self) -> str:
        return (
            f"rank {self.rank} of {self.world_size} (local rank {self.local_rank} of"
            f" {self.local_world_size})"
        )


SINGLE = World()


# --------------------------------------------------------------------------------------------------
# Launching: trainer-core train --nproc-per-node N [--nnodes N --node-rank R --master-addr A ...]


@dataclass(frozen=True)
class Nodes:
    """Several machines: torchrun's static rendezvous at
    `master_addr:master_port` (node 0 listens)"""

    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int = DEFAULT_MASTER_PORT

    def torchrun_args(self) -> list[str]:
        return [
            "--nnodes",
            str(self.nnodes),
            "--node-rank",
            str(self.node_rank),
            "--master-addr",
            self.master_addr,
            "--master-port",
            str(self.master_port),
        ]


def check_nodes(
    nnodes: int | None, node_rank: int | None, addr: str | None, port: int | None
) -> Nodes | None:
    """The --nnodes family checked together; None for one machine (no --nnodes, or --nnodes 1)."""
    values = (node_rank, addr, port)
    given = [f for f, v in zip(LAUNCH_FLAGS[2:], values, strict=True) if v is not None]
    if nnodes is None or nnodes == 1:
        if given and nnodes is None:
            raise DistributedError(
                f"{', '.join(given)} without --nnodes: add --nnodes N (the number of machines)"
            )
        if node_rank not in (None, 0):
            raise DistributedError(f"--node-rank {node_rank} with --nnodes 1: the only node is 0")
        return None
    if nnodes < 1:
        raise DistributedError(f"--nnodes must be at least 1, got {nnodes}")
    if node_rank is None:
        raise DistributedError(
            f"--nnodes {nnodes} needs --node-rank R: 0 on the first machine, up to {nnodes - 1}"
        )
    if not 0 <= node_rank < nnodes:
        raise DistributedError(
            f"--node-rank {node_rank} with --nnodes {nnodes}: node ranks are 0 to {nnodes - 1}, one"
            " per machine"
        )
    if not addr:
        raise DistributedError(
            f"--nnodes {nnodes} needs --master-addr ADDRESS: the address of the machine started "
            "with --node-rank 0, the same on every machine"
        )
    port = DEFAULT_MASTER_PORT if port is None else port
    if not 1 <= port <= 65535:
        raise DistributedError(f"--master-port must be a TCP port (1 to 65535), got {port}")
    return Nodes(nnodes, node_rank, addr, port)


def _launch_flag(token: str) -> str | None:
    """The launch flag `token` spells (`--nnodes`, `--nproc=2`, or a prefix), or None."""
    name = token.split("=", 1)[0]
    if len(name) < 4 or not name.startswith("--"):
        return None
    matches = [flag for flag in LAUNCH_FLAGS if flag.startswith(name)]
    return matches[0] if len(matches) == 1 else None


def without_nproc(cli_args: Sequence[str]) -> list[str]:
    """The command-line arguments without the launch flags (`--nproc-per-node N`, `--nnodes N`)."""
    out: list[str] = []
    skip_value = False
    for token in cli_args:
        if skip_value:
            skip_value = False
        elif token == "--":
            out.append(token)
        elif _launch_flag(token) is not None:
            skip_value = "=" not in token
        else:
            out.append(token)
    return out


def launch_argv(
    nproc: int, cli_args: Sequence[str], python: str | None = None, nodes: Nodes | None = None
) -> list[str]:
    """The torchrun command line (an argument list) that runs `trainer_core <cli_args>` on `nproc`
    local ranks: standalone on one machine, the static rendezvous of `nodes` across several."""
    where = nodes.torchrun_args() if nodes is not None else ["--standalone"]
    return [
        python or sys.executable,
        "-m",
        "torch.distributed.run",
        *where,
        NPROC_FLAG,
        str(nproc),
        "-m",
        "trainer_core",
        *without_nproc(cli_args),
    ]


def launch_env(notes: Sequence[str] = ()) -> dict[str, str]:
    """torchrun's environment, which its workers inherit: PYTHONSAFEPATH=1 (the working folder off
    their import path) and the parent's notes for rank 0."""
    env = safe_env()
    if notes:
        env[LAUNCH_NOTES_ENV] = json.dumps(list(notes))
    return env


def relaunch(
    nproc: int, cli_args: Sequence[str], notes: Sequence[str] = (), nodes: Nodes | None = None
) -> NoReturn:
    """Replace this process by torchrun with `nproc` ranks (same pid: a
    dashboard keeps following it)."""
    argv = launch_argv(nproc, cli_args, nodes=nodes)
    env = launch_env(notes)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(argv[0], argv, env)
    except OSError as exc:
        why = exc.strerror or exc
        raise DistributedError(
            f"cannot start torchrun ({argv[0]} -m torch.distributed.run): {why}"
        ) from exc
    raise AssertionError("unreachable")  # pragma: no cover - execve does not return


def launch_notes(environ: Mapping[str, str] | None = None) -> list[str]:
    """Warnings the launching parent left for rank 0 to report as events."""
    raw = (os.environ if environ is None else environ).get(LAUNCH_NOTES_ENV, "")
    try:
        notes = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [str(note) for note in notes] if isinstance(notes, list) else []
