"""`vega-tui`: the terminal dashboard.

    vega-tui [launch]            pick a profile and data, then start training (the default)
    vega-tui attach [RUN_DIR]    follow one run, live or finished (the newest run when none is
                                 named)
    vega-tui runs [ROOT]         list the runs under ROOT and compare their loss curves
    vega-tui serve               the dashboard in a browser, behind a token (the web extra)

Arguments are checked before the screen opens: a RUN_DIR that is not a run folder is an
`error: ...` line and exit status 2, like `trainer-core`. Textual is imported only after that,
so `--help` and argument errors answer at once.
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

from vega_tui import __version__


class UsageError(Exception):
    """Bad command-line input: printed as `error: ...`, exit 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vega-tui",
        description=(
            "Terminal dashboard for Vega: start, follow, control and compare training runs."
        ),
    )
    parser.add_argument("--version", action="version", version=f"vega-tui {__version__}")
    parser.add_argument(
        "--runs-root", type=Path, metavar="DIR", help="folder holding run folders (default: ./runs)"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="profile override for runs started here (repeatable), as in trainer-core train --set",
    )
    read_only_help = "watch only: no pause, save, stop, start or resume"
    parser.add_argument("--read-only", action="store_true", help=read_only_help)
    sub = parser.add_subparsers(dest="command", metavar="{launch,attach,runs,serve}")
    sub.add_parser("launch", help="choose profile, data and device, then start a run (the default)")
    attach = sub.add_parser(
        "attach", help="open one run's dashboard; the trainer keeps running when you leave"
    )
    attach.add_argument(
        "run_dir", nargs="?", type=Path, metavar="RUN_DIR", help="run folder (default: the newest)"
    )
    runs = sub.add_parser("runs", help="list runs and overlay their loss curves")
    runs.add_argument(
        "root",
        nargs="?",
        type=Path,
        metavar="ROOT",
        help="runs folder (default: --runs-root or ./runs)",
    )
    from vega_tui.serve.cli import add_arguments as add_serve_arguments

    serve = sub.add_parser("serve", help="serve the dashboard to a browser, behind a token")
    add_serve_arguments(serve)
    return parser


def resolve_runs_root(given: Path | None) -> Path:
    from vega_tui.run_summary import default_runs_root

    return given.expanduser() if given is not None else default_runs_root()


def attach_target(run_dir: Path | None, runs_root: Path | None) -> Path:
    """The run folder to open: the one named (it must be a run folder) or
    the newest under the runs root."""
    from trainer_core.contract.rundir import EVENTS, is_run_dir
    from vega_tui.run_summary import newest_run

    if run_dir is not None:
        run_dir = run_dir.expanduser()
        if not run_dir.is_dir():
            raise UsageError(f"{run_dir} is not a folder; give a run folder (one holding {EVENTS})")
        if not is_run_dir(run_dir):
            raise UsageError(
                f"{run_dir} is not a run folder (no {EVENTS} in it); try: vega-tui runs {run_dir}"
            )
        return run_dir
    root = resolve_runs_root(runs_root)
    newest = newest_run(root) if root.is_dir() else None
    if newest is None:
        raise UsageError(
            f"no runs under {root}; start one with vega-tui, or name a run folder: vega-tui attach"
            " RUN_DIR"
        )
    return newest


def runs_root_for_list(root: Path | None, runs_root: Path | None) -> Path:
    chosen = resolve_runs_root(root if root is not None else runs_root)
    if chosen.exists() and not chosen.is_dir():
        raise UsageError(f"{chosen} is not a folder; give the folder that holds your run folders")
    if not chosen.exists() and (root is not None or runs_root is not None):
        raise UsageError(f"runs folder {chosen} does not exist")
    return chosen


def make_app(args: argparse.Namespace):
    """The app for parsed arguments; raises UsageError for bad ones before anything is drawn."""
    from vega_tui.app import VegaApp

    command, ro = args.command or "launch", args.read_only
    if command == "attach":
        run_dir = attach_target(args.run_dir, args.runs_root)
        return VegaApp("attach", run_dir=run_dir, runs_root=args.runs_root, read_only=ro)
    if command == "runs":
        root = runs_root_for_list(args.root, args.runs_root)
        return VegaApp("runs", runs_root=root, read_only=ro)
    return VegaApp("launch", runs_root=args.runs_root, overrides=args.overrides, read_only=ro)


def served_argv(args: argparse.Namespace) -> list[str]:
    """The `vega-tui` arguments each session of `vega-tui serve` runs, checked before serving."""
    argv = [] if args.allow_control else ["--read-only"]
    if args.runs_root is not None:
        argv += ["--runs-root", str(resolve_runs_root(args.runs_root).resolve())]
    for override in args.overrides:
        argv += ["--set", override]
    if args.attach is not None:
        return [*argv, "attach", str(attach_target(args.attach, args.runs_root).resolve())]
    return [*argv, "launch"]


def ask_terminal_for_graphics() -> None:
    """Whether the Samples tab can draw pictures with sixel or kitty graphics (the `images` extra):
    asked now, because the terminal can be asked only before the app reads its input."""
    from vega_tui.widgets import image_protocol

    try:
        image_protocol.detect()
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    if image_protocol.problem():
        print(f"vega-tui: {image_protocol.problem()}", file=sys.stderr)


def quiet_gc() -> None:
    """Move everything built so far (modules, classes, the app) out of the collector's sight: a full
    collection then walks only what the dashboard made since, and pauses a
    key press for less time."""
    gc.collect()
    gc.freeze()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "serve":
            from vega_tui.serve.cli import serve

            return serve(args, served_argv(args))
        app = make_app(args)
        ask_terminal_for_graphics()
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    quiet_gc()
    app.run()
    return app.return_code or 0


if __name__ == "__main__":
    raise SystemExit(main())
