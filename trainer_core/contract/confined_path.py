"""Names read from profiles, files and events stay inside the folder they belong to.

One check for every reader (docs/reliability.md lists the fields): `component_problem` says
why a text is not one plain folder or file name (`run.name`); `inside` turns a name read from a
document into a path in its folder, or refuses it with a PathEscapeError naming the document, the
field and the value. Links are followed before comparing, so a link in the folder cannot lead out.
Torch-free: the dashboard uses it.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Annotated

from pydantic import AfterValidator, Field

from trainer_core.contract.errors import VegaError

# A run folder adds `-YYYYmmdd-HHMMSS-NN` to run.name; file systems allow 255 bytes per name.
MAX_NAME_BYTES = 200
FIX = "name a file inside that folder (or make the file again)"


class PathEscapeError(VegaError):
    """A name read from a profile, a file or an event leads outside the folder it belongs in."""


def _control_char(text: str) -> str | None:
    """The first NUL or other control character in `text`, if any."""
    return next((char for char in text if ord(char) < 32 or ord(char) == 127), None)


def component_problem(name: object) -> str | None:
    """Why `name` is not one plain name for a folder or file (None when it is one)."""
    if not isinstance(name, str):
        return f"must be text, not {type(name).__name__}"
    if not name:
        return "must not be empty"
    if name in (".", ".."):
        return f"must not be {name!r} (a folder that already exists)"
    if "/" in name or "\\" in name:
        return "must be one name, without / or \\ (not a path)"
    char = _control_char(name)
    if char is not None:
        return f"must not hold NUL or control characters (it holds {char!r})"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"must be at most {MAX_NAME_BYTES} bytes long"
    return None


def relative_problem(name: object) -> str | None:
    """Why `name` is not a relative path below a folder (absolute, `..`, `\\`, NUL, control)."""
    if not isinstance(name, str):
        return f"expected a file name, got {type(name).__name__}"
    if not name:
        return "is empty"
    char = _control_char(name)
    if char is not None:
        return f"holds the NUL or control character {char!r}"
    windows = PureWindowsPath(name)  # "C:x" and "\\x" are absolute where Windows reads them
    if PurePosixPath(name).is_absolute() or windows.drive or windows.root:
        return "is an absolute path"
    if "\\" in name:
        return "holds a \\ (folders are separated by /)"
    if ".." in PurePosixPath(name).parts:
        return "holds a '..' part, which leads out of the folder"
    return None


def inside(
    folder: str | os.PathLike[str],
    name: object,
    *,
    field: str,
    source: str | os.PathLike[str],
    fix: str = FIX,
) -> Path:
    """`folder / name` when it resolves inside `folder` (links followed); else PathEscapeError.

    `field` is where the name was read (`acoustic.file`), `source` the file or event holding it,
    `fix` what to do; the message shows the value as Python writes it, so hidden characters show.
    """
    text = os.fspath(name) if isinstance(name, os.PathLike) else name
    problem = relative_problem(text)
    if problem is None and isinstance(text, str):
        try:
            base = Path(folder).resolve()
            target = (base / text).resolve()
        except (OSError, RuntimeError) as exc:  # Python 3.11 raises RuntimeError on a link loop
            problem = f"cannot be followed ({exc})"
        else:
            if not target.is_relative_to(base):
                problem = f"leads outside {base} through a link (to {target})"
    if problem is not None or not isinstance(text, str):
        raise PathEscapeError(f"{os.fspath(source)}: {field} = {text!r} {problem}; {fix}")
    return Path(folder) / text


def inside_or_none(folder: str | os.PathLike[str], name: object) -> Path | None:
    """`folder / name` when `inside` accepts it, else None (for records ignored when damaged)."""
    try:
        return inside(folder, name, field="name", source=folder)
    except PathEscapeError:
        return None


def run_name(value: str) -> str:
    """`run.name` checked to be one folder name (a validator: ValueError says the rule and fix)."""
    problem = component_problem(value)
    if problem is not None:
        fix = 'run folders are made as <run.name>-<date>, so choose a plain name like "my-voice"'
        raise ValueError(f"{problem}; {fix}")
    return value


# A profile's run.name: not empty (pydantic's "must not be empty"), then one plain folder name.
RunName = Annotated[str, Field(min_length=1), AfterValidator(run_name)]
