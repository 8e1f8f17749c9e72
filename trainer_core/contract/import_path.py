"""The working folder stays off the trainer's import path: no folder there
stands in for an installed package.

`python -m` and `python -c` put the working folder first on `sys.path`, so a same-named folder in it
(one shipped beside a downloaded profile, say) would be imported instead of the package an allowed
`model.task` names. Every trainer process Vega starts (the dashboard's launches and helper commands,
torchrun and its workers) gets PYTHONSAFEPATH=1 (Python 3.11+), which leaves that entry out; `python
-m trainer_core` typed by hand drops it in `trainer_core.__main__`; and `search_path` is what the
task's file is resolved against (`contract.task_source`). Stdlib only, importing nothing that is not
loaded at start-up: `__main__` calls it before anything else runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

SAFE_PATH_ENV = "PYTHONSAFEPATH"
# The folder holding this trainer_core (a source checkout's root, or site-packages).
VEGA_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


def safe_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of `base` (default: this process's environment) with PYTHONSAFEPATH=1;
    Vega's own folder goes on PYTHONPATH when the child could not import this trainer_core
    without the working folder (a checkout run from its root, not installed), so the child
    never loads another copy or none."""
    env = dict(os.environ if base is None else base)
    env[SAFE_PATH_ENV] = "1"
    if not _found_without_working_folder():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (VEGA_ROOT, env.get("PYTHONPATH", "")) if p)
    return env


def _found_without_working_folder() -> bool:
    """True when the import system finds this very trainer_core without the
    working folder on the path."""
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        spec = find_spec("trainer_core", search_path()) if find_spec is not None else None
        if spec is not None:
            origin = spec.origin or ""
            return os.path.dirname(os.path.dirname(os.path.realpath(origin))) == VEGA_ROOT
    return False


def _working_folder() -> str | None:
    try:
        return os.path.realpath(os.getcwd())
    except OSError:  # the working folder was removed: nothing can be imported from it
        return None


def drop_working_folder(path: list[str] | None = None) -> bool:
    """Remove the entry for the working folder that `python -m` or `-c` put first on `path` (default
    sys.path), unless PYTHONSAFEPATH already left it out; True when one was removed. An explicit
    PYTHONPATH entry for the same folder comes later and stays."""
    entries = sys.path if path is None else path
    if sys.flags.safe_path or not entries:
        return False
    first = entries[0]
    if first == "" or os.path.realpath(first) == _working_folder():
        del entries[0]
        return True
    return False


def search_path() -> list[str]:
    """sys.path without the working folder ('' or its full path), unless PYTHONPATH names
    it: what a task's module is resolved against, so a same-named folder there never
    becomes the file the plan names."""
    here = _working_folder()
    named = {os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    if here is not None and here in named:
        return list(sys.path)
    return [
        entry
        for entry in sys.path
        if entry != "" and (here is None or os.path.realpath(entry) != here)
    ]
