"""The static checks CI runs through the test command: ruff (lint and format), mypy and import-linter.

Each check also runs against a deliberately broken copy of the code and must fail there: a check that
cannot fail proves nothing. Configuration is in pyproject.toml; docs/architecture.md explains the rules.
"""

from __future__ import annotations

import pkgutil
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

import trainer_core

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
Completed = subprocess.CompletedProcess[str]
CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def tool(
    name: str, *args: str, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / name), *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env
    )  # fmt: skip


def broken_copy(tmp_path: Path) -> Path:
    """trainer_core and vega_tui copied with pyproject.toml, ready to be broken on purpose."""
    root = tmp_path / "copy"
    ignore = shutil.ignore_patterns("__pycache__", "*.wav", "*.flac", "corpus")
    for package in ("trainer_core", "vega_tui"):
        shutil.copytree(REPO / package, root / package, ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{path}: {old!r} not found; update this negative control"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


# ------------------------------------------------------------------------------------------------ ruff


def test_ruff_finds_nothing() -> None:
    out = tool("ruff", "check", ".")
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format_is_applied() -> None:
    out = tool("ruff", "format", "--check", ".")
    assert out.returncode == 0, f"run `ruff format .`:\n{out.stdout}{out.stderr}"


def test_ruff_fails_on_an_unused_import_and_unformatted_code(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nx = {  'a':1 }\n", encoding="utf-8")
    config = str(REPO / "pyproject.toml")
    lint = tool("ruff", "check", "--config", config, str(bad))
    assert lint.returncode == 1 and "F401" in lint.stdout
    assert tool("ruff", "format", "--check", "--config", config, str(bad)).returncode == 1


def test_a_line_over_100_fails_outside_tests_and_passes_inside(tmp_path: Path) -> None:
    line = f"# {'x' * 99}\n"  # 101 characters: over the product's limit, within the tests' 120
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (tmp_path / "tests").mkdir()
    shutil.copy(REPO / "tests" / "ruff.toml", tmp_path / "tests" / "ruff.toml")
    (tmp_path / "product.py").write_text(line, encoding="utf-8")
    (tmp_path / "tests" / "test_x.py").write_text(line, encoding="utf-8")
    out = tool("ruff", "check", "--no-cache", ".", cwd=tmp_path)
    assert out.returncode == 1 and "E501" in out.stdout, out.stdout + out.stderr
    assert "product.py" in out.stdout and "test_x.py" not in out.stdout


# ------------------------------------------------------------------------------------------------ mypy


def test_mypy_passes() -> None:
    out = tool("mypy")
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_catches_a_field_renamed_on_one_side_and_untyped_contract_code(tmp_path: Path) -> None:
    root = broken_copy(tmp_path)
    # The protocol renames a field the dashboard's store and the trainer's telemetry still use.
    edit(
        root / "trainer_core/contract/protocol.py",
        "    samples_per_s: Real\n    data_wait_frac",
        "    items_per_s: Real\n    data_wait_frac",
    )
    # The contract wing is checked strictly: a function without annotations fails there.
    with (root / "trainer_core/contract/units.py").open("a", encoding="utf-8") as handle:
        handle.write("\n\ndef untyped(value):\n    return value\n")
    out = tool("mypy", "--cache-dir", str(REPO / ".mypy_cache"), cwd=root)
    assert out.returncode == 1
    assert "vega_tui/store_progress.py" in out.stdout and '"StepEvent" has no attribute "samples_per_s"' in out.stdout
    assert "telemetry.py" in out.stdout and 'Unexpected keyword argument "samples_per_s"' in out.stdout
    assert "units.py" in out.stdout and "missing a type annotation" in out.stdout


# ------------------------------------------------------------------------------------------------ import rules


def test_import_contracts_hold() -> None:
    out = tool("lint-imports")
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_trainer_wing_but_the_contract_is_forbidden_to_the_dashboard() -> None:
    """A new module or package under trainer_core must be added to the rule, or to the contract wing."""
    rule = next(c for c in CONFIG["tool"]["importlinter"]["contracts"] if c["id"] == "dashboard")
    children = {f"trainer_core.{m.name}" for m in pkgutil.iter_modules(trainer_core.__path__)}
    assert children - {"trainer_core.contract"} <= set(rule["forbidden_modules"])


def test_import_contracts_fail_on_a_leak_direct_or_through_a_package_init(tmp_path: Path) -> None:
    root = broken_copy(tmp_path)
    (root / "vega_tui/leak.py").write_text("from trainer_core.engine import trainer\n", encoding="utf-8")
    # The contract's package __init__ pulls in the engine: vega_tui imports only the contract, yet gets torch.
    with (root / "trainer_core/contract/__init__.py").open("a", encoding="utf-8") as handle:
        handle.write("\nfrom trainer_core.engine import events  # noqa: E402,F401\n")
    out = tool("lint-imports", "--no-cache", cwd=root, env={"PYTHONPATH": str(root), "PATH": str(BIN)})
    assert out.returncode == 1, out.stdout
    assert "vega_tui.leak -> trainer_core.engine" in out.stdout
    assert "trainer_core.contract -> trainer_core.engine.events" in out.stdout


def modules_run_by(graph: grimp.ImportGraph, sources: set[str]) -> set[str]:
    """Every module importing `sources` executes: their imports, and the package `__init__` of each one."""
    seen: set[str] = set()
    todo = list(sources)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        parents = {".".join(parts[:n]) for n in range(1, len(parts))}
        todo += [m for m in graph.find_modules_directly_imported_by(module) | parents if m in graph.modules]
    return seen


def dashboard_reaches(root: Path | None = None) -> set[str]:
    """The trainer_core modules a vega_tui import runs, package `__init__`s included (grimp alone skips them)."""
    graph = grimp.build_graph("trainer_core", "vega_tui", cache_dir=None)
    dashboard = {m for m in graph.modules if m.split(".")[0] == "vega_tui"}
    return {m for m in modules_run_by(graph, dashboard) if m.startswith("trainer_core.")}


def test_the_dashboard_runs_only_the_contract_wing_counting_package_inits() -> None:
    reached = dashboard_reaches()
    assert reached and all(m.startswith("trainer_core.contract") for m in reached), sorted(reached)


@pytest.mark.parametrize("package", ["trainer_core", "vega_tui"])
def test_the_copy_is_importable_from_its_own_folder(tmp_path: Path, package: str) -> None:
    """The negative controls above check the copy, not the installed tree: make sure of it."""
    root = broken_copy(tmp_path)
    code = f"import {package}; print({package}.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env={"PYTHONPATH": str(root)}, capture_output=True, text=True
    )
    assert out.stdout.strip().startswith(str(root)), out.stdout + out.stderr


def test_a_package_init_bypass_is_reached(tmp_path: Path) -> None:
    """The negative control of the check above: a contract __init__ that imports the engine is reached."""
    root = broken_copy(tmp_path)
    with (root / "trainer_core/contract/__init__.py").open("a", encoding="utf-8") as handle:
        handle.write("\nfrom trainer_core.engine import events  # noqa: E402,F401\n")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]); "
        "import test_code_checks as t, trainer_core; assert trainer_core.__file__.startswith(sys.argv[1]); "
        "print(sorted(m for m in t.dashboard_reaches() if not m.startswith('trainer_core.contract')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(root), str(REPO / "tests")], capture_output=True, text=True, cwd=root,
        env={"PYTHONPATH": str(root)}, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "trainer_core.engine.events" in out.stdout
