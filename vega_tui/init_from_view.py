"""What a run started from (its `init_from` event), as the lines the run
dashboard shows. Plain functions.

`init_from_lines(info)` turns the event's fields (as `RunState.init_from` keeps them) into
a headline such as "started from lessac-20261123-101010 (export): 52 tensors loaded,
embedding 41/57 symbols kept, 3 skipped, 6 new" (a Piper voice: "started from Piper
checkpoint epoch=2164-step=1355540.ckpt: ...") and, when there are any, one line naming the
skipped and one naming the new tensors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Names shown per list; the counts are complete.
SHOWN_NAMES = 4


def source_name(info: dict[str, Any]) -> str:
    """`RUN (export)`, `RUN (step-00000400.pt)`, `Piper checkpoint NAME.ckpt`, or the name."""
    given, path = (
        Path(str(info.get("source", "?"))),
        Path(str(info.get("path") or info.get("source", "?"))),
    )
    if info.get("form") == "piper":
        return f"Piper checkpoint {path.name}"
    if info.get("form") == "export":
        run = path.parent.name if path.name == "export" else path.name
        return f"{run} (export)"
    if path != given and path.parent.name == "checkpoints":
        return f"{path.parent.parent.name} ({path.name})"
    return path.name


def _table_text(table: dict[str, Any]) -> str:
    name = str(table.get("name", "?")).removesuffix(".weight")
    return (
        f"{name} {table.get('kept', '?')}/{table.get('rows', '?')} {table.get('by', 'row')}s kept"
    )


def init_from_headline(info: dict[str, Any]) -> str:
    parts = [f"{info.get('loaded', 0)} tensors loaded"]
    parts += [_table_text(table) for table in info.get("mapped") or [] if isinstance(table, dict)]
    parts += [f"{info.get('skipped', 0)} skipped", f"{info.get('new', 0)} new"]
    return f"started from {source_name(info)}: {', '.join(parts)}"


def _names_line(label: str, names: list[str], count: int) -> str | None:
    if not count:
        return None
    shown = ", ".join(names[:SHOWN_NAMES])
    more = count - min(len(names), SHOWN_NAMES)
    return f"{label}: {shown}" + (f" … and {more} more" if more > 0 else "")


def init_from_lines(info: dict[str, Any] | None) -> list[str]:
    """The headline, then the skipped and the new tensors by name; [] for a
    run started from scratch."""
    if not info:
        return []
    details = [
        _names_line(
            "skipped", list(info.get("skipped_names") or []), int(info.get("skipped") or 0)
        ),
        _names_line("new", list(info.get("new_names") or []), int(info.get("new") or 0)),
    ]
    return [init_from_headline(info), *(line for line in details if line)]
