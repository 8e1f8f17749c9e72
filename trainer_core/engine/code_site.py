"""Where in the code a failure is: the task's own line, not the engine's or torch's.

A traceback from the engine into a task's method and on into torch holds frames of three kinds; a
task's author wants the innermost one in their code. `failure_site` picks, innermost first: a
frame in the task's own files (the modules of its class and base classes, or their whole
package), else a frame outside trainer_core, the standard library and installed libraries (code
beside the task: a helper in a test or a script), else the innermost frame. A wrong return value
has no traceback into the task: `method_site` names the method's first line, `generator_site` the
`yield` a generator is paused at.
"""

from __future__ import annotations

import inspect
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import TracebackType

import trainer_core

TRAINER_CORE = str(Path(trainer_core.__file__).resolve().parent)


@dataclass(frozen=True)
class CodeSite:
    """A line of source code: where a task's method failed or is defined."""

    file: str
    line: int
    function: str

    @property
    def where(self) -> str:
        """`path/to/file.py:42`."""
        return f"{self.file}:{self.line}"

    def __str__(self) -> str:
        return f"{self.where} in {self.function}"


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


@cache
def _library_roots() -> tuple[str, ...]:
    """The standard library and site-packages of this interpreter (and of
    the one a venv is made from)."""
    paths = sysconfig.get_paths()
    roots = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    return tuple(str(Path(root).resolve()) for root in roots)


def task_files(task: object | None) -> tuple[str, ...]:
    """Files and folders holding a task's code: each class in its MRO below `Task`, by
    module; a class from a package outside trainer_core brings its whole package (its helpers
    fail inside the same package)."""
    if task is None:
        return ()
    roots: list[str] = []
    for cls in type(task).__mro__:
        module = sys.modules.get(cls.__module__)
        file = getattr(module, "__file__", None)
        if file is None or cls.__module__ in ("builtins", "abc", "trainer_core.models.base"):
            continue
        top = sys.modules.get(cls.__module__.partition(".")[0])
        package_file = getattr(top, "__file__", None)
        if (
            top is not None
            and hasattr(top, "__path__")
            and package_file
            and top.__name__ != "trainer_core"
        ):
            roots.append(str(Path(package_file).resolve().parent))
        else:
            roots.append(str(Path(file).resolve()))
    return tuple(dict.fromkeys(roots))


def _frames(tb: TracebackType | None) -> list[CodeSite]:
    """The traceback's frames, outermost first."""
    sites = []
    while tb is not None:
        code = tb.tb_frame.f_code
        sites.append(CodeSite(code.co_filename, tb.tb_lineno, code.co_qualname))
        tb = tb.tb_next
    return sites


def failure_site(tb: TracebackType | None, task: object | None = None) -> CodeSite | None:
    """The frame of `tb` that a task's author wants to see (see the module
    docstring); None for no frames."""
    frames = _frames(tb)
    if not frames:
        return None
    resolved = [
        str(Path(site.file).resolve()) if not site.file.startswith("<") else site.file
        for site in frames
    ]
    own = task_files(task)
    for site, path in zip(reversed(frames), reversed(resolved), strict=True):
        if own and _under(path, own):
            return site
    for site, path in zip(reversed(frames), reversed(resolved), strict=True):
        if not path.startswith("<") and not _under(path, (TRAINER_CORE, *_library_roots())):
            return site
    return frames[-1]


def method_site(task: object, name: str) -> CodeSite | None:
    """The first line of `task.name` (through decorators that keep
    `__wrapped__`); None when it has no source."""
    func = getattr(task, name, None)
    func = inspect.unwrap(getattr(func, "__func__", func)) if func is not None else None
    code = getattr(func, "__code__", None)
    if code is None:
        return None
    return CodeSite(code.co_filename, code.co_firstlineno, code.co_qualname)


def generator_site(iterator: object) -> CodeSite | None:
    """The line a generator is paused at (its last `yield`), following `yield
    from`; None for other iterators."""
    frame = None
    while iterator is not None and getattr(iterator, "gi_frame", None) is not None:
        frame = iterator.gi_frame  # type: ignore[attr-defined]  # a generator, checked above
        iterator = getattr(iterator, "gi_yieldfrom", None)
    if frame is None:
        return None
    return CodeSite(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_qualname)
