"""A same-named folder in the working folder cannot stand in for the package an allowed `model.task` names.

`python -m` and `python -c` put the working folder first on sys.path. The guards (contract.import_path): every
trainer process Vega starts gets PYTHONSAFEPATH=1 (the dashboard's launches and helper commands, torchrun and its
workers); `python -m trainer_core` typed by hand drops the entry itself; the plan resolves the task's file without
the working folder; and the registry refuses an import that loaded another file than the plan's (exit status 2).

The full launches run where they already train the example task: tests/test_custom_task.py starts it from the
dashboard's launch screen and under two gloo ranks, each from a working folder holding a same-named shadow package
made here, and finds its markers absent. This module holds the cheap parts and the negative controls: with the
working folder put back on sys.path the shadow is imported (its marker appears) and the check ends the run.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import REPO, write_corpus
from trainer_core.cli import main as cli_main
from trainer_core.contract.import_path import SAFE_PATH_ENV, drop_working_folder, safe_env, search_path
from trainer_core.contract.task_source import resolve_task
from trainer_core.tiny_profiles import tiny_profile
from trainer_core.world import launch_env
from vega_tui import runner

pytestmark = pytest.mark.usefixtures("one_torch_thread", "keep_torch_threads")

MODULE = "t30_models"
SPEC = f"{MODULE}.task:factory"
REAL_TASK = """
from trainer_core.models.lm import LmTask


def factory(request):
    return LmTask.from_report(request.profile, request.report, request.device)
"""


def shadow_package(folder: Path, package: str, markers: Path) -> Path:
    """`package/__init__.py` and `package/task.py` in `folder`, each writing a marker (its module name, holding
    the pid) when imported; the task's factory raises. Returns the task file."""
    markers.mkdir(parents=True, exist_ok=True)
    for module, name in ((package, "__init__.py"), (f"{package}.task", "task.py")):
        path = folder / package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        code = f"import os, pathlib\npathlib.Path({str(markers / module)!r}).write_text(str(os.getpid()))\n"
        if name == "task.py":
            code += "\n\ndef factory(request):\n    raise RuntimeError('the shadow task ran')\n"
        path.write_text(code, encoding="utf-8")
    return folder / package / "task.py"


def real_package(folder: Path) -> Path:
    (folder / MODULE).mkdir(parents=True)
    (folder / MODULE / "__init__.py").write_text('"""The real one."""\n', encoding="utf-8")
    (folder / MODULE / "task.py").write_text(REAL_TASK, encoding="utf-8")
    return folder / MODULE / "task.py"


class Workspace:
    """A working folder holding the shadow, the real package elsewhere on sys.path, and a machine file that
    allows the module."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root, self.markers, self.work = root, root / "markers", root / "work"
        self.shadow = shadow_package(self.work, MODULE, self.markers)
        self.real = real_package(root / "pkgs")
        config = root / "config"
        config.mkdir()
        (config / "machine.toml").write_text(f'[tasks]\nallowed = ["{MODULE}.*"]\n', encoding="utf-8")
        for key in [key for key in os.environ if key.startswith("VEGA_")]:
            monkeypatch.delenv(key)
        monkeypatch.setenv("VEGA_CONFIG_DIR", str(config))
        monkeypatch.syspath_prepend(str(root / "pkgs"))
        monkeypatch.chdir(self.work)

    def executed(self) -> list[str]:
        return sorted(path.name for path in self.markers.iterdir())


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Workspace]:
    yield Workspace(tmp_path, monkeypatch)
    for name in [name for name in sys.modules if name == MODULE or name.startswith(f"{MODULE}.")]:
        del sys.modules[name]  # whichever copy was imported, the next test imports afresh


def test_every_process_vega_starts_runs_with_the_working_folder_off_its_path() -> None:
    assert runner.trainer_env()[SAFE_PATH_ENV] == "1"  # the dashboard's launches, resumes included
    assert launch_env(["note"])[SAFE_PATH_ENV] == "1"  # torchrun, and through it its workers
    assert json.loads(launch_env(["note"])["VEGA_LAUNCH_NOTES"]) == ["note"]
    assert safe_env({"A": "b"})[SAFE_PATH_ENV] == "1" and safe_env({"A": "b"})["A"] == "b"
    entries = ["", "/elsewhere"]
    assert drop_working_folder(entries) and entries == ["/elsewhere"]
    assert not drop_working_folder(entries) and entries == ["/elsewhere"]  # only a first entry for it


def test_the_plan_resolves_the_task_without_the_working_folder(workspace: Workspace, monkeypatch) -> None:
    machine = workspace.root / "config" / "machine.toml"
    monkeypatch.syspath_prepend(str(workspace.work))  # the working folder first, as `python -m` puts it
    assert str(workspace.work) not in search_path()
    assert resolve_task(SPEC, machine).file == workspace.real
    # Named on PYTHONPATH, the working folder is the user's own choice: the plan says it will run from there.
    monkeypatch.setenv("PYTHONPATH", str(workspace.work))
    assert resolve_task(SPEC, machine).file == workspace.shadow
    assert workspace.executed() == []  # resolving imports nothing


def test_python_m_trainer_core_drops_the_working_folder_and_python_c_does_not(tmp_path: Path) -> None:
    """A module the trainer imports late (tomllib, for the profile) shadowed in the working folder: ignored by
    `python -m trainer_core` without PYTHONSAFEPATH; the negative control, started through `python -c`, which
    has no such step, imports it."""
    (tmp_path / "tomllib.py").write_text("import pathlib\npathlib.Path('shadow-ran').write_text('yes')\n")
    profile = tmp_path / "p.toml"
    profile.write_text(tiny_profile("lm"), encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key != SAFE_PATH_ENV}
    env["PYTHONPATH"] = str(REPO)
    argv = ["profile", "validate", str(profile)]
    run_m = [sys.executable, "-m", "trainer_core", *argv]
    guarded = subprocess.run(run_m, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert guarded.returncode == 0, guarded.stderr
    assert not (tmp_path / "shadow-ran").exists()
    code = "import sys\nfrom trainer_core.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    bare = subprocess.run([sys.executable, "-c", code, *argv], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert (tmp_path / "shadow-ran").read_text() == "yes", bare.stderr


def test_a_shadow_put_back_on_the_path_is_imported_and_then_refused(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Negative control of the path guards: the working folder inserted into sys.path by hand, the shadow is what
    `import` loads (its markers appear); the registry's check against the plan's file ends the run, exit 2."""
    corpus = write_corpus(workspace.root / "corpus", documents=2, lines=20)
    profile = workspace.root / "shared.toml"
    model = {"kind": None, "task": SPEC}
    profile.write_text(tiny_profile("lm", data={"path": str(corpus)}, model=model), encoding="utf-8")
    monkeypatch.syspath_prepend(str(workspace.work))
    run_dir = workspace.root / "run"
    try:
        code = cli_main(["train", "--profile", str(profile), "--run-dir", str(run_dir), "--set", "train.max_steps=6"])
    finally:
        for handler in logging.getLogger("trainer_core").handlers:  # trainer.log stays open otherwise
            handler.close()
    assert workspace.executed() == [MODULE, f"{MODULE}.task"]  # the shadow was imported...
    err = capsys.readouterr().err
    assert code == 2, err
    # ...and refused before its factory ran, naming both files.
    assert f"the plan resolved {MODULE}.task to {workspace.real}, but importing it loaded {workspace.shadow}" in err
    assert "the shadow task ran" not in err
    ended = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()][-1]
    assert (ended["type"], ended["status"]) == ("finished", "failed")
