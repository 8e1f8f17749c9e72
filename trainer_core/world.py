"""Who this process is among the training processes, and how `--nproc-per-node N` relaunches under torchrun.

Torch-free on purpose: the plan (`trainer_core.plan`) and the launcher need `World` before any torch import;
the process group, DDP and rank agreement live in `engine.distributed`.
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
# The parent of a --nproc-per-node launch hands its warnings (fewer ranks, CPU fallback) to rank 0 through this.
LAUNCH_NOTES_ENV = "VEGA_LAUNCH_NOTES"


class DistributedError(VegaError):
    """The torchrun environment is inconsistent, or the ranks cannot agree."""


def rank_log_name(rank: int) -> str:
    """The only file a rank other than 0 writes in the run folder."""
    return f"trainer-rank{rank}.log"


# ---------------------------------------------------------------------------------------------------------------
# Who am I


def _env_int(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = environ.get(name)
    if raw is None:
        if default is None:
            raise DistributedError(f"{name} is not set, but other torchrun variables are: start ranks with torchrun")
        return default
    try:
        return int(raw)
    except ValueError:
        raise DistributedError(f"{name}={raw!r} is not a whole number; start the ranks with torchrun") from None


@dataclass(frozen=True)
class World:
    """This process's place among the training processes; `active` means torchrun started it."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    active: bool = False

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
                f"inconsistent torchrun environment: RANK={rank}, WORLD_SIZE={world_size}, LOCAL_RANK={local_rank}, "
                f"LOCAL_WORLD_SIZE={local_world_size}"
            )
        return cls(rank, world_size, local_rank, local_world_size, active=True)

    def describe(self) -> str:
        return f"rank {self.rank} of {self.world_size} (local rank {self.local_rank} of {self.local_world_size})"


SINGLE = World()


# ---------------------------------------------------------------------------------------------------------------
# Launching: trainer-core train --nproc-per-node N


def _is_nproc_flag(token: str) -> bool:
    """`--nproc-per-node`, `--nproc-per-node=2` and the prefixes argparse accepts for it (`--nproc 2`)."""
    name = token.split("=", 1)[0]
    return len(name) >= 4 and name.startswith("--np") and NPROC_FLAG.startswith(name)


def without_nproc(cli_args: Sequence[str]) -> list[str]:
    """The command-line arguments with `--nproc-per-node N` (in any spelling argparse takes) removed."""
    out: list[str] = []
    skip_value = False
    for token in cli_args:
        if skip_value:
            skip_value = False
        elif token == "--":
            out.append(token)
        elif _is_nproc_flag(token):
            skip_value = "=" not in token
        else:
            out.append(token)
    return out


def launch_argv(nproc: int, cli_args: Sequence[str], python: str | None = None) -> list[str]:
    """The torchrun command line (an argument list) that runs `trainer_core <cli_args>` on `nproc` local ranks."""
    return [
        python or sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        NPROC_FLAG,
        str(nproc),
        "-m",
        "trainer_core",
        *without_nproc(cli_args),
    ]


def launch_env(notes: Sequence[str] = ()) -> dict[str, str]:
    """torchrun's environment, which its workers inherit: PYTHONSAFEPATH=1 (the working folder off their import
    path) and the parent's notes for rank 0."""
    env = safe_env()
    if notes:
        env[LAUNCH_NOTES_ENV] = json.dumps(list(notes))
    return env


def relaunch(nproc: int, cli_args: Sequence[str], notes: Sequence[str] = ()) -> NoReturn:
    """Replace this process by torchrun with `nproc` ranks (same pid: a dashboard keeps following it)."""
    argv = launch_argv(nproc, cli_args)
    env = launch_env(notes)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(argv[0], argv, env)
    except OSError as exc:
        why = exc.strerror or exc
        raise DistributedError(f"cannot start torchrun ({argv[0]} -m torch.distributed.run): {why}") from exc
    raise AssertionError("unreachable")  # pragma: no cover - execve does not return


def launch_notes(environ: Mapping[str, str] | None = None) -> list[str]:
    """Warnings the launching parent left for rank 0 to report as events."""
    raw = (os.environ if environ is None else environ).get(LAUNCH_NOTES_ENV, "")
    try:
        notes = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [str(note) for note in notes] if isinstance(notes, list) else []
