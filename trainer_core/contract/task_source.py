"""Where a profile's task comes from, and whether this machine lets it run:
checked without running any of it.

`model.task = "package.module:factory"` names a task factory by module name only (no file paths, no
expressions). Profiles travel between machines, and importing a module runs its code (and its
packages' `__init__` files), so a module outside Vega runs only when this machine's file (`<config
dir>/machine.toml`, never a profile) allows it:

    [tasks]
    allowed = ["my_models.*"]

(fnmatch patterns on the module name). The module's file is found the way the import system would
find it, one level at a time with each parent's search locations and the installed finders, but
without importing anything: `importlib.util.find_spec("a.b")` would import package `a` (running
`a/__init__.py`) to learn where `a.b` is. An outside module is looked for without the working folder
(`contract.import_path.search_path`): the registry refuses an import that loads any other file than
the one found here. Torch-free and stdlib-only: the plan and the dashboard's preflight use it.
"""

from __future__ import annotations

import fnmatch
import importlib.machinery
import keyword
import os
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer_core.contract.errors import ProfileError, VegaError
from trainer_core.contract.import_path import search_path

# Modules of Vega itself: they run without an allow-list entry.
VEGA_PACKAGE = "trainer_core"
TASKS_TABLE = "tasks"


class TaskNotAllowedError(VegaError):
    """A profile names code outside Vega that this machine's file does not allow."""


@dataclass(frozen=True)
class TaskSpec:
    """A parsed `package.module:factory`."""

    module: str
    factory: str

    def __str__(self) -> str:
        return f"{self.module}:{self.factory}"

    @property
    def in_vega(self) -> bool:
        return self.module == VEGA_PACKAGE or self.module.startswith(f"{VEGA_PACKAGE}.")


@dataclass(frozen=True)
class TaskSource:
    """A task spec with the file its module would be loaded from, and the
    allow-list pattern that lets it run."""

    spec: TaskSpec
    file: Path | None
    allowed_by: str | None
    """The machine file's pattern that matched; None for Vega's own modules."""

    def runs_code_text(self) -> str:
        where = str(self.file) if self.file is not None else "built in"
        return f"this profile runs code from {self.spec.module} ({where})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": str(self.spec),
            "module": self.spec.module,
            "factory": self.spec.factory,
            "file": str(self.file) if self.file is not None else None,
            "external": not self.spec.in_vega,
            "allowed_by": self.allowed_by,
            "text": self.runs_code_text(),
        }


# ---------------------------------------------------------------- the spec


def _is_name(part: str) -> bool:
    return part.isidentifier() and not keyword.iskeyword(part)


def spec_problem(text: str) -> str | None:
    """Why `text` is not `package.module:factory` (dotted Python names, one
    colon, a name), or None when it is."""
    module, colon, factory = text.partition(":")
    if not colon:
        return "expected package.module:factory (a module name, a colon, then the factory's name)"
    if "/" in text or "\\" in text or module.endswith(".py"):
        return (
            "a module name, not a file path: install the package (or put its folder on PYTHONPATH)"
            " and name it"
        )
    if not module or not all(_is_name(part) for part in module.split(".")):
        return f"{module!r} is not a dotted module name (Python identifiers joined by dots)"
    if not _is_name(factory):
        return (
            f"{factory!r} after the colon is not a Python name (no expressions, calls or"
            " attributes)"
        )
    return None


def parse_task_spec(text: str) -> TaskSpec:
    """The spec of a valid `package.module:factory`; ValueError saying what is wrong otherwise."""
    problem = spec_problem(text)
    if problem is not None:
        raise ValueError(problem)
    module, _, factory = text.partition(":")
    return TaskSpec(module, factory)


# ---------------------------------------------------------------- finding the
# module's file without importing it


def locate_module(module: str, top: Sequence[str] | None = None) -> Path | None:
    """The file `module` would be loaded from (a package's `__init__.py`), found without executing
    any code of it or of its parent packages; None when it is not installed (or has no file, like a
    built-in module). `top`: the folders to find its top-level package in (None: sys.path)."""
    locations: Sequence[str] | None = top
    found = None
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        found = _find_spec_here(".".join(parts[:depth]), locations)
        if found is None:
            return None
        if depth < len(parts):
            locations = found.submodule_search_locations
            if not locations:
                return None  # a plain module has no submodules
    origin = getattr(found, "origin", None)
    return Path(origin) if origin and os.path.isfile(origin) else None


def _find_spec_here(
    name: str, locations: Sequence[str] | None
) -> importlib.machinery.ModuleSpec | None:
    """Ask the installed finders, in import order, for `name` inside `locations` (None: sys.path),
    as the import system does after importing the parent; nothing is imported."""
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        spec = find_spec(name, list(locations) if locations is not None else None)
        if spec is not None:
            return spec  # type: ignore[no-any-return]
    return None


# ---------------------------------------------------------------- the machine file's allow-list


def read_allowed(machine_file: Path) -> list[str]:
    """The `[tasks] allowed` patterns of a machine file ([] when the file or
    the table is absent)."""
    if not machine_file.is_file():
        return []
    try:
        with open(machine_file, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(f"machine file {machine_file}: cannot read it: {exc}") from None
    return allowed_patterns(data.get(TASKS_TABLE), f"machine file {machine_file}")


def allowed_patterns(table: Any, label: str) -> list[str]:
    """The checked `allowed` list of a machine file's [tasks] table (None: no table)."""
    if table is None:
        return []
    example = f'[{TASKS_TABLE}] allowed = ["my_models.*"]'
    if not isinstance(table, dict):
        raise ProfileError(f"{label}: {TASKS_TABLE} must be a table, for example {example}")
    unknown = sorted(set(table) - {"allowed"})
    if unknown:
        raise ProfileError(
            f"{label}: unknown key {TASKS_TABLE}.{unknown[0]}: the [tasks] table holds only allowed"
        )
    patterns = table.get("allowed", [])
    if not isinstance(patterns, list) or not all(
        isinstance(p, str) and p.strip() for p in patterns
    ):
        raise ProfileError(
            f"{label}: {TASKS_TABLE}.allowed must be a list of module name patterns, e.g. {example}"
        )
    return list(patterns)


def allowed_by(module: str, patterns: Sequence[str]) -> str | None:
    """The first pattern that allows `module` (fnmatch on the module name, case-sensitive)."""
    return next((p for p in patterns if fnmatch.fnmatchcase(module, p)), None)


def refusal(spec: TaskSpec, file: Path | None, machine_file: Path, patterns: Sequence[str]) -> str:
    """How to allow a module this machine does not allow: the machine file and
    the exact line to write in it."""
    where = f" ({file})" if file is not None else ""
    line = "allowed = [" + ", ".join(f'"{p}"' for p in [*patterns, spec.module]) + "]"
    table = "the [tasks] table's allowed line" if patterns else "these lines"
    return (
        f'model.task = "{spec}" runs code from {spec.module}{where}, which this machine does not'
        " allow: a profile "
        f"can come from anywhere, and naming a module runs its code. If you trust it, allow it in"
        f" this machine's "
        f"file {machine_file} ({table}):\n    [{TASKS_TABLE}]\n    {line}\n"
        f'(a pattern such as "{spec.module.partition(".")[0]}.*" allows the whole package)'
    )


def resolve_task(text: str, machine_file: Path) -> TaskSource:
    """The task source of `model.task`: its file, found without importing, and the allow-list entry
    that lets it run; TaskNotAllowedError (exit 2, saying how to allow it) for a module outside Vega
    the machine does not allow; VegaError for a module that is not installed."""
    try:
        spec = parse_task_spec(text)
    except ValueError as exc:
        raise ProfileError(f'model.task = "{text}": {exc}') from None
    patterns = [] if spec.in_vega else read_allowed(machine_file)
    pattern = None if spec.in_vega else allowed_by(spec.module, patterns)
    file = locate_module(spec.module, None if spec.in_vega else search_path())
    if not spec.in_vega and pattern is None:
        raise TaskNotAllowedError(refusal(spec, file, machine_file, patterns))
    if file is None:
        raise VegaError(
            f'model.task = "{spec}": module {spec.module} is not installed here (searched'
            f" {len(sys.path)} folders of sys.path and the installed packages): pip install its"
            " package, or put the folder that holds it on PYTHONPATH"
        )
    return TaskSource(spec, file, pattern)
