"""`trainer-core train`: the one command line the dashboard, scripts and users share.

Data-parallel: `--nproc-per-node N` plans the processes for the compute mode, then re-executes
this command under `python -m torch.distributed.run --standalone` (same arguments, the run
folder fixed); `torchrun -m trainer_core train ...` (multi-node too) lands here directly, and
each rank joins the process group before it agrees with rank 0 on the run folder. `--nnodes N
--node-rank R --master-addr A` runs the same command on N machines, joined by torchrun's static
rendezvous at A (docs/architecture.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainer_core.cli.commands import SUMMARIES
from trainer_core.cli.common import add_set_option


def register(sub) -> None:
    p = sub.add_parser(
        "train",
        help=SUMMARIES["train"],
        description="Train from a profile. Flags below override the profile for this run only.",
    )
    p.add_argument(
        "--profile", default="demo", help="profile file, or the name of a shipped/user profile"
    )
    p.add_argument("--data", type=Path, help="data folder (overrides data.path)")
    p.add_argument(
        "--run-dir", type=Path, help="run folder to create (default: <runs_dir>/<name>-<time>)"
    )
    p.add_argument(
        "--compute-mode",
        "--mode",
        dest="compute_mode",
        choices=["gpu", "cpu", "mixed"],
        help="compute mode (overrides compute.mode); --mode is the older spelling",
    )
    p.add_argument(
        "--data-mode",
        "--voice-mode",
        dest="data_mode",
        choices=["voice", "text", "auto"],
        help="data mode (overrides data.mode); --voice-mode is the older spelling",
    )
    p.add_argument(
        "--device", help="explicit device: cuda:N, mps or cpu (overrides compute.device)"
    )
    p.add_argument(
        "--resume",
        metavar="auto|PATH",
        help="resume: 'auto' (newest complete checkpoint of --run-dir) or a file",
    )
    p.add_argument(
        "--init-from",
        type=Path,
        metavar="PATH",
        help=(
            "start from a trained model of the same kind: a run folder, checkpoint or export, a"
            " Piper checkpoint, a transformers VITS folder or hub model hf:ORG/NAME[@REVISION]"
            " (overrides train.init_from); optimizer and schedule start fresh"
        ),
    )
    p.add_argument(
        "--init-discriminator",
        type=Path,
        metavar="PATH",
        help=(
            "with --init-from a transformers VITS: its discriminator, an original VITS D_*.pth or a"
            ' converted "-train" folder (overrides train.init_discriminator; without one it starts'
            " fresh and warms up first)"
        ),
    )
    p.add_argument(
        "--task",
        metavar="PACKAGE.MODULE:FACTORY",
        help=(
            "train a task from an installed package (overrides model.task); a module outside Vega"
            " must be allowed by this machine's file ([tasks] allowed in machine.toml)"
        ),
    )
    p.add_argument("--events", choices=["-"], help="'-' also prints events as JSON lines on stdout")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="resolve profile, device and data, print the plan, stop",
    )
    p.add_argument("--json", action="store_true", help="with --dry-run: print the plan as JSON")
    p.add_argument(
        "--nproc-per-node",
        type=int,
        metavar="N",
        help=(
            "data-parallel training with N processes on this machine (one per GPU, or CPU"
            " processes), started through torchrun"
        ),
    )
    p.add_argument(
        "--nnodes",
        type=int,
        metavar="N",
        help="machines taking part: run this command on each, with its --node-rank",
    )
    p.add_argument(
        "--node-rank", type=int, metavar="R", help="with --nnodes: this machine's number, 0 to N-1"
    )
    p.add_argument(
        "--master-addr",
        metavar="ADDRESS",
        help="with --nnodes: the address of node 0, the same on every machine",
    )
    p.add_argument(
        "--master-port",
        type=int,
        metavar="PORT",
        help="with --nnodes: node 0's rendezvous port (default 29500)",
    )
    add_set_option(p)
    p.set_defaults(handler=run)


def flag_overrides(args: argparse.Namespace) -> list[str]:
    """Turn the convenience flags into `--set` items, applied after the user's own `--set`s."""
    out: list[str] = []
    if args.data is not None:
        out.append(f"data.path={json.dumps(str(args.data.expanduser().resolve()))}")
    if args.compute_mode:
        out.append(f"compute.mode={json.dumps(args.compute_mode)}")
    if args.data_mode:
        out.append(f"data.mode={json.dumps(args.data_mode)}")
    if args.device:
        out.append(f"compute.device={json.dumps(args.device)}")
    if args.init_from is not None:
        given = str(args.init_from)
        hub_id = given.startswith("hf:")  # a Hugging Face hub id, not a path
        start = given if hub_id else str(args.init_from.expanduser().resolve())
        out.append(f"train.init_from={json.dumps(start)}")
    if args.init_discriminator is not None:
        path = str(args.init_discriminator.expanduser().resolve())
        out.append(f"train.init_discriminator={json.dumps(path)}")
    if args.task is not None:
        # The task chooses the model: whatever kind and sizing the profile names are Vega's models'.
        out += [
            f"model.task={json.dumps(checked_task(args.task))}",
            'model.kind="auto"',
            'model.size="fixed"',
        ]
    return out


def checked_task(text: str) -> str:
    """--task's value, refused with the rule when it is not package.module:factory."""
    from trainer_core.contract.errors import VegaError
    from trainer_core.contract.task_source import spec_problem

    problem = spec_problem(text)
    if problem is not None:
        raise VegaError(f"--task {text}: {problem}")
    return text


def check_start_flags(args: argparse.Namespace) -> None:
    """--resume continues a run's own checkpoint; --init-from starts a new
    run from another model: not both."""
    from trainer_core.contract.errors import VegaError

    if args.resume is not None and args.init_from is not None:
        raise VegaError(
            f"--resume {args.resume} and --init-from {args.init_from} together: --resume continues"
            " this run from its own checkpoint (optimizer and schedule included), --init-from"
            " starts a new run from another model's weights; pass one of them"
        )


def run(args: argparse.Namespace) -> int:
    from trainer_core.cli.plan_document import plan_report
    from trainer_core.cli.plan_render import render_plan
    from trainer_core.plan import make_plan, plan_launch
    from trainer_core.world import World, check_nodes

    check_start_flags(args)
    nodes = check_nodes(args.nnodes, args.node_rank, args.master_addr, args.master_port)
    world = World.from_env()
    overrides = [*args.overrides, *flag_overrides(args)]
    plan = make_plan(
        args.profile,
        overrides,
        run_dir=args.run_dir,
        resume=args.resume,
        use_machine_file=not args.no_machine_file,
        world=world,
    )
    launching = args.nproc_per_node is not None or nodes is not None
    if launching and not world.active:
        plan.launch = plan_launch(plan.profile, args.nproc_per_node or 1, plan.resources, nodes)
    elif launching and world.is_main:
        plan.notes.append(
            f"--nproc-per-node is ignored under torchrun, which started {world.world_size}"
            " process(es)"
        )
    if args.dry_run:
        if args.json:
            print(plan_report(plan).to_json())
        else:
            render_plan(plan)
        return 0
    if plan.launch is not None:
        _relaunch_under_torchrun(args, plan)
    if world.active:
        return _run_rank(plan, events_to_stdout=args.events == "-")
    from trainer_core.engine.run import run_training

    return run_training(plan, events_to_stdout=args.events == "-")


def _relaunch_under_torchrun(args: argparse.Namespace, plan) -> None:
    """Become torchrun with the planned number of processes; the run folder
    is fixed here for every rank."""
    from trainer_core.world import relaunch

    cli_args = sys.argv[1:]
    if args.run_dir is None:
        cli_args = [*cli_args, "--run-dir", str(plan.run_dir.absolute())]
    relaunch(plan.launch.nproc, cli_args, plan.launch.notes, plan.launch.nodes)


def _run_rank(plan, events_to_stdout: bool) -> int:
    """One torchrun rank: join the process group, agree on the run folder,
    train, leave the group."""
    from trainer_core.engine.distributed import agreed_run_dir, connect, disconnect, finish_together
    from trainer_core.engine.run import run_training

    plan.backend = connect(plan.world, plan.device.kind)
    try:
        plan.run_dir = agreed_run_dir(plan.world, plan.run_dir.absolute())
        status = run_training(plan, events_to_stdout=events_to_stdout and plan.world.is_main)
        # Leave together: a rank tearing gloo down while rank 0 still exports could abort at exit.
        finish_together(plan.world)
        return status
    finally:
        disconnect()
