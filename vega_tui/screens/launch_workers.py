"""The launch screen's background jobs, each run on a daemon thread
(`vega_tui.screens.run_in_background`).

Probing the machine (`trainer_core.contract.resources`, torch-free), reading and watching the
profile folders (watchfiles), and `run_check` for both `trainer-core check-data --json` and the
preflight's `trainer-core train --dry-run --json`. None touches a widget: each posts its answer
(`vega_tui.screens.launch_messages`) through `post`, the screen's thread-safe `post_message`.
The slow imports happen here, on these threads, after the first frame.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from trainer_core.contract.errors import VegaError
from vega_tui.screens.launch_messages import (
    BackgroundProblem,
    CheckAnswered,
    Post,
    ProfilesChanged,
    ProfilesScanned,
    ResourcesProbed,
    Result,
)
from vega_tui.widgets.profile_list import scan_profiles

# A dry run scans the data folder; big corpora take a while, but never forever.
CHECK_TIMEOUT_S = 300.0


def probe_machine(post: Post) -> None:
    from trainer_core.contract.resources import probe

    try:
        post(ResourcesProbed(probe(), None))
    except Exception as exc:  # a broken driver must not stop the launch screen from opening
        post(ResourcesProbed(None, f"cannot read this machine's devices: {exc}"))


def read_profiles(overrides: Sequence[str], post: Post) -> None:
    try:
        post(ProfilesScanned(scan_profiles(overrides)))
    except OSError as exc:
        post(BackgroundProblem(f"cannot read the profile folders: {exc}"))


def watch_profiles(stop: threading.Event, post: Post) -> None:
    """Post ProfilesChanged when a .toml file (a profile, the machine file) changes."""
    import watchfiles  # imported on this thread: not needed for the first frame

    from trainer_core.contract.profile_loader import config_dir, repo_profiles_dir

    folders = [str(path) for path in (config_dir(), repo_profiles_dir()) if path.is_dir()]
    if not folders:
        return
    try:
        for changes in watchfiles.watch(*folders, stop_event=stop, debounce=200, step=50):
            if any(path.endswith(".toml") for _change, path in changes):
                post(ProfilesChanged())
    except (OSError, RuntimeError) as exc:  # the inotify limit: lose live refresh, not the screen
        post(BackgroundProblem(f"profile files are not watched for changes: {exc}"))


def run_check(
    answer: type[CheckAnswered[Result]],
    generation: int,
    argv: list[str],
    post: Post,
) -> None:
    """Run a `trainer-core` JSON command (check-data, the dry run); post its document, parsed
    into `answer.model()`, or its failure (a document that does not fit included) as `answer`."""
    from vega_tui.runner import run_report

    try:
        post(answer(generation, run_report(argv, answer.model(), CHECK_TIMEOUT_S), None))
    except VegaError as exc:
        post(answer(generation, None, str(exc)))
