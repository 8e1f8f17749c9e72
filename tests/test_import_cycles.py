"""No import cycles in trainer_core or vega_tui: every module-level, function-level and type-checking import
counts, so a cycle cannot hide behind a lazy import. The negative control plants one and sees it found."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest


def import_cycles(*packages: str) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm over grimp's import graph)."""
    graph = grimp.build_graph(*packages, cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in edges.get(module, []):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in edges:
        if module not in index:
            visit(module)
    return cycles


def test_no_import_cycles() -> None:
    assert import_cycles("trainer_core", "vega_tui") == []


def test_a_planted_cycle_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "base.py").write_text(
        "def build():\n    from cyclic import child  # lazy, still a cycle\n", encoding="utf-8"
    )
    (package / "child.py").write_text("from cyclic import base\n", encoding="utf-8")
    (package / "alone.py").write_text("import cyclic.base\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("cyclic") == [["cyclic.base", "cyclic.child"]]
