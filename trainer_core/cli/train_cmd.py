"""`trainer-core train`: the one command line the dashboard, scripts and users share."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from trainer_core.cli.common import add_set_option, print_json


def register(sub) -> None:
    p = sub.add_parser(
        "train",
        help="train a model from a profile (--dry-run prints the plan without training)",
        description="Train from a profile. Flags below override the profile for this run only.",
    )
    p.add_argument("--profile", default="demo", help="profile file, or the name of a shipped/user profile")
    p.add_argument("--data", type=Path, help="data folder (overrides data.path)")
    p.add_argument("--run-dir", type=Path, help="run folder to create (default: <runs_dir>/<name>-<time>)")
    p.add_argument("--mode", choices=["gpu", "cpu", "mixed"], help="compute mode (overrides compute.mode)")
    p.add_argument("--voice-mode", choices=["voice", "text", "auto"], help="data mode (overrides data.mode)")
    p.add_argument("--device", help="explicit device: cuda:N, mps or cpu (overrides compute.device)")
    p.add_argument("--resume", metavar="auto|PATH", help="resume: 'auto' (newest complete checkpoint of --run-dir) or a file")
    p.add_argument("--events", choices=["-"], help="'-' also prints events as JSON lines on stdout")
    p.add_argument("--dry-run", action="store_true", help="resolve profile, device and data, print the plan, stop")
    p.add_argument("--json", action="store_true", help="with --dry-run: print the plan as JSON")
    add_set_option(p)
    p.set_defaults(handler=run)


def flag_overrides(args: argparse.Namespace) -> list[str]:
    """Turn the convenience flags into `--set` items, applied after the user's own `--set`s."""
    out: list[str] = []
    if args.data is not None:
        out.append(f"data.path={json.dumps(str(args.data.expanduser().resolve()))}")
    if args.mode:
        out.append(f"compute.mode={json.dumps(args.mode)}")
    if args.voice_mode:
        out.append(f"data.mode={json.dumps(args.voice_mode)}")
    if args.device:
        out.append(f"compute.device={json.dumps(args.device)}")
    return out


def run(args: argparse.Namespace) -> int:
    from trainer_core.plan import make_plan, render_plan

    overrides = [*args.overrides, *flag_overrides(args)]
    plan = make_plan(
        args.profile, overrides, run_dir=args.run_dir, resume=args.resume, use_machine_file=not args.no_machine_file
    )
    if args.dry_run:
        if args.json:
            print_json(plan.to_dict())
        else:
            render_plan(plan)
        return 0
    from trainer_core.engine.run import run_training

    return run_training(plan, events_to_stdout=args.events == "-")
