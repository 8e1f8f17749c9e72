"""Profiles cannot run code the user did not install: `model.task` and the machine file's `[tasks] allowed`.

A test package whose every level (package `__init__`s and the task module) writes a marker file when executed
stands for code from elsewhere. A shared profile naming it must run none of it, through `train` and `train
--dry-run`, unless this machine's file allows the module; a profile cannot allow itself. The negative control
swaps the guard's resolver for `importlib.util.find_spec` (which imports the parent packages) and shows that the
same harness then finds the markers: the check can fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_cli, write_corpus
from trainer_core.contract.errors import ProfileError
from trainer_core.contract.eventlog import read_all
from trainer_core.contract.plan_report import PlanReport
from trainer_core.contract.profile_loader import load_profile_dict, resolve_profile
from trainer_core.contract.task_source import allowed_by, locate_module, read_allowed, spec_problem
from trainer_core.tiny_profiles import tiny_profile
from vega_tui.widgets.preflight import plan_rows

SPEC = "evilpkg.sub.task:factory"
MARKERS = ("evilpkg", "evilpkg.sub", "evilpkg.sub.task")
TASK_CODE = """
from trainer_core.models.lm import LmTask


def factory(request):
    return LmTask.from_report(request.profile, request.report, request.device)
"""


def write_marker_package(root: Path, markers: Path) -> Path:
    """evilpkg/__init__.py, evilpkg/sub/__init__.py and evilpkg/sub/task.py, each leaving a marker when run."""
    files = {
        "evilpkg": "evilpkg/__init__.py",
        "evilpkg.sub": "evilpkg/sub/__init__.py",
        "evilpkg.sub.task": "evilpkg/sub/task.py",
    }
    for module, name in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        mark = f"import pathlib\npathlib.Path({str(markers / module)!r}).write_text('executed')\n"
        path.write_text(mark + (TASK_CODE if module == "evilpkg.sub.task" else ""), encoding="utf-8")
    return root / files["evilpkg.sub.task"]


class Machine:
    """A user config folder, the marker package on PYTHONPATH, and a shared profile naming the package's task."""

    def __init__(self, root: Path, corpus: Path) -> None:
        self.root, self.markers, self.config = root, root / "markers", root / "config"
        self.markers.mkdir()
        self.config.mkdir()
        self.task_file = write_marker_package(root / "pkgs", self.markers)
        self.profile = root / "shared.toml"
        self.profile.write_text(
            tiny_profile(
                "lm",
                run={"name": "shared"},
                data={"path": str(corpus)},
                model={"kind": None, "task": SPEC},
                train={"max_steps": 6, "warmup_steps": 2},
            ),
            encoding="utf-8",
        )
        keep = {key: value for key, value in os.environ.items() if not key.startswith("VEGA_")}
        path = os.pathsep.join([str(REPO), str(root / "pkgs")])
        self.env = {**keep, "VEGA_CONFIG_DIR": str(self.config), "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}

    @property
    def machine_file(self) -> Path:
        return self.config / "machine.toml"

    def allow(self, *patterns: str) -> None:
        self.machine_file.write_text(f"[tasks]\nallowed = {json.dumps(list(patterns))}\n", encoding="utf-8")

    def executed(self) -> list[str]:
        return sorted(path.name for path in self.markers.iterdir())

    def train(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(self.env, "train", "--profile", str(self.profile), "--run-dir", str(self.root / "run"), *args)


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path, write_corpus(tmp_path / "corpus", documents=3, lines=30))


def test_a_shared_profile_naming_a_module_the_machine_does_not_allow_runs_nothing(machine: Machine) -> None:
    for args in ((), ("--dry-run",), ("--dry-run", "--json")):
        out = machine.train(*args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert machine.executed() == [], args
        # The message says exactly what to write where.
        assert f"this machine's file {machine.machine_file}" in out.stderr
        assert '    [tasks]\n    allowed = ["evilpkg.sub.task"]\n' in out.stderr
        assert f"runs code from evilpkg.sub.task ({machine.task_file})" in out.stderr
    assert not (machine.root / "run").exists()
    # A machine file that allows other modules: the line to write keeps them.
    machine.allow("mymodels.*")
    out = machine.train("--dry-run")
    assert out.returncode == 2 and machine.executed() == []
    assert 'allowed = ["mymodels.*", "evilpkg.sub.task"]' in out.stderr


def test_the_task_flag_is_checked_the_same_way(machine: Machine) -> None:
    machine.profile.write_text(machine.profile.read_text().replace(f'task = "{SPEC}"\n', ""), encoding="utf-8")
    out = machine.train("--task", SPEC, "--dry-run")
    assert out.returncode == 2 and "which this machine does not allow" in out.stderr
    assert machine.executed() == []
    out = machine.train("--task", "evilpkg/sub/task.py:factory", "--dry-run")
    assert out.returncode == 2 and "--task evilpkg/sub/task.py:factory: a module name, not a file path" in out.stderr
    # Allowed, --task takes over from the profile's own model, whatever kind it names.
    machine.profile.write_text(machine.profile.read_text().replace("[model]\n", '[model]\nkind = "lm"\n'))
    machine.allow("evilpkg.sub.task")
    out = machine.train("--task", SPEC, "--dry-run", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["task"]["allowed_by"] == "evilpkg.sub.task"
    assert machine.executed() == []


def test_allowed_by_the_machine_file_it_runs_and_the_plan_says_whose_code(machine: Machine) -> None:
    machine.allow("evilpkg.*")
    plan_out = machine.train("--dry-run", "--json")
    assert plan_out.returncode == 0, plan_out.stderr
    plan = json.loads(plan_out.stdout)
    text = f"this profile runs code from evilpkg.sub.task ({machine.task_file})"
    assert plan["task"] == {
        "spec": SPEC,
        "module": "evilpkg.sub.task",
        "factory": "factory",
        "file": str(machine.task_file),
        "external": True,
        "allowed_by": "evilpkg.*",
        "text": text,
    }
    assert plan["model"]["kind"] == "custom" and plan["model"]["task"] == SPEC
    shown = plan_rows(PlanReport.model_validate_json(plan_out.stdout))  # the launch screen's rows
    assert ("code", text) in [(label, str(value)) for label, value in shown]
    rendered = machine.train("--dry-run")
    assert rendered.returncode == 0 and "this profile runs code from evilpkg.sub.task" in rendered.stdout
    assert machine.executed() == []  # planning never imports the module, even an allowed one

    out = machine.train()
    assert out.returncode == 0, out.stderr
    assert machine.executed() == sorted(MARKERS)
    events = read_all(machine.root / "run" / "events.jsonl")
    (task,) = [e for e in events if e.type == "task"]
    assert (task.name, task.module, task.file, task.external) == (
        SPEC,
        "evilpkg.sub.task",
        str(machine.task_file),
        True,
    )
    assert [e.status for e in events if e.type == "finished"] == ["completed"]


def test_a_profile_cannot_allow_its_own_code(machine: Machine, tmp_path: Path) -> None:
    text = machine.profile.read_text()
    machine.profile.write_text(text + '\n[tasks]\nallowed = ["evilpkg.*"]\n', encoding="utf-8")
    out = machine.train()
    assert out.returncode == 2 and machine.executed() == []
    assert "[tasks] (allowed) cannot be set in a profile" in out.stderr
    assert f"allow modules in this machine's file {machine.machine_file} instead" in out.stderr
    # Nor through a parent profile, a --set, or a profile edited in the dashboard.
    parent = tmp_path / "parent.toml"
    parent.write_text('[tasks]\nallowed = ["*"]\n', encoding="utf-8")
    child = tmp_path / "child.toml"
    child.write_text(f'extends = "parent.toml"\n\n[model]\ntask = "{SPEC}"\n', encoding="utf-8")
    with pytest.raises(ProfileError, match=r"parent\.toml: \[tasks\] \(allowed\) cannot be set in a profile"):
        resolve_profile(child, machine_file=None)
    plain = tmp_path / "plain.toml"
    plain.write_text("", encoding="utf-8")
    with pytest.raises(ProfileError, match=r"--set tasks.allowed=\[\"\*\"\]: \[tasks\] \(allowed\) cannot be set"):
        resolve_profile(plain, ['tasks.allowed=["*"]'], machine_file=None)
    with pytest.raises(ProfileError, match=r"<profile>: \[tasks\]"):
        load_profile_dict({"tasks": {"allowed": ["*"]}})
    out = machine.train("--set", 'tasks.allowed=["*"]')
    assert out.returncode == 2 and "cannot be set in a profile" in out.stderr
    assert machine.executed() == []


def test_the_broken_guard_is_caught_by_the_same_harness(machine: Machine) -> None:
    """Negative control: resolving the module with importlib.util.find_spec imports its parent packages, so the
    package __init__ files run before the allow-list says no; the marker harness sees it."""
    machine.allow("somewhere.else.*")
    code = (
        "import importlib.util, sys\n"
        "from pathlib import Path\n"
        "import trainer_core.contract.task_source as guard\n"
        "guard.locate_module = lambda name, top=None: Path(importlib.util.find_spec(name).origin)\n"
        "from trainer_core.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    argv = ["train", "--profile", str(machine.profile), "--dry-run"]
    out = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=machine.env, timeout=120
    )
    assert out.returncode == 2, out.stderr  # it still refuses...
    assert machine.executed() == ["evilpkg", "evilpkg.sub"]  # ...but too late: the packages' code ran


# ---------------------------------------------------------------------------------------------------------------
# The parts, in-process


def test_model_task_takes_a_module_name_and_a_factory_name_only() -> None:
    assert spec_problem("my_models.denoise:factory") is None
    assert spec_problem("single:make") is None
    bad = {
        "my_models/denoise.py:factory": "a module name, not a file path",
        "denoise.py:factory": "a module name, not a file path",
        "my_models.denoise": "expected package.module:factory",
        "my_models.denoise:factory()": "'factory()' after the colon is not a Python name",
        "my_models.denoise:a.b": "'a.b' after the colon is not a Python name",
        "os.system('x'):f": "is not a dotted module name",
        "a..b:f": "'a..b' is not a dotted module name",
        "class.x:f": "'class.x' is not a dotted module name",
        ":f": "'' is not a dotted module name",
    }
    for text, why in bad.items():
        assert why in (spec_problem(text) or ""), text
    with pytest.raises(ProfileError, match=r"model.task = \"x/y.py:f\": a module name, not a file path"):
        load_profile_dict({"model": {"task": "x/y.py:f"}})
    with pytest.raises(ProfileError, match=r'model.task \(a.b:f\) chooses the model: leave model.kind "auto"'):
        load_profile_dict({"model": {"task": "a.b:f", "kind": "tts"}})


def test_the_module_file_is_found_level_by_level_without_importing(tmp_path: Path, monkeypatch) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    task_file = write_marker_package(tmp_path / "pkgs", markers)
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    assert locate_module("evilpkg.sub.task") == task_file
    assert locate_module("evilpkg") == task_file.parent.parent / "__init__.py"
    assert locate_module("evilpkg.sub.missing") is None and locate_module("evilpkg.sub.task.deeper") is None
    assert locate_module("no_such_package_here") is None
    assert locate_module("trainer_core.models.lm") == REPO / "trainer_core" / "models" / "lm.py"
    assert not list(markers.iterdir())
    assert "evilpkg" not in sys.modules


def test_allow_list_patterns_and_the_machine_file_table(tmp_path: Path) -> None:
    assert allowed_by("evilpkg.sub.task", ["other", "evilpkg.*"]) == "evilpkg.*"
    assert allowed_by("evilpkg.sub.task", ["evilpkg.sub.task"]) == "evilpkg.sub.task"
    assert allowed_by("evilpkg.sub.task", ["EvilPkg.*", "evilpkg"]) is None  # case-sensitive, whole names
    machine = tmp_path / "machine.toml"
    assert read_allowed(machine) == []
    machine.write_text('[train]\nlr = 1e-3\n\n[tasks]\nallowed = ["a.*", "b"]\n', encoding="utf-8")
    assert read_allowed(machine) == ["a.*", "b"]
    # The machine file's [tasks] is no profile section: its other settings still apply.
    profile = tmp_path / "p.toml"
    profile.write_text('[model]\ntask = "a.b:f"\n', encoding="utf-8")
    assert resolve_profile(profile, machine_file=machine).profile.train.lr == 1e-3
    for table, why in (
        ('allowed = "a.*"', "tasks.allowed must be a list of module name patterns"),
        ('allowed = ["a", 3]', "tasks.allowed must be a list of module name patterns"),
        ('allow = ["a"]', "unknown key tasks.allow"),
    ):
        machine.write_text(f"[tasks]\n{table}\n", encoding="utf-8")
        with pytest.raises(ProfileError, match=why):
            read_allowed(machine)
        with pytest.raises(ProfileError, match=why):
            resolve_profile(profile, machine_file=machine)


def test_the_registry_imports_only_allowed_modules_and_says_what_is_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainer_core.contract.errors import VegaError
    from trainer_core.contract.profile import Profile
    from trainer_core.contract.task_source import TaskNotAllowedError
    from trainer_core.models.registry import build_task, task_factory

    pkgs, config = tmp_path / "pkgs", tmp_path / "config"
    pkgs.mkdir()
    config.mkdir()
    modules = {
        "t16_broken": "X = 1\nraise ValueError('boom')\n",
        "t16_nofactory": "def other(request):\n    return None\n",
        "t16_notask": "def factory(request):\n    return 42\n",
    }
    for name, code in modules.items():
        (pkgs / f"{name}.py").write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(pkgs))
    monkeypatch.setenv("VEGA_CONFIG_DIR", str(config))
    with pytest.raises(TaskNotAllowedError):
        task_factory("t16_broken:factory")
    assert "t16_broken" not in sys.modules
    (config / "machine.toml").write_text('[tasks]\nallowed = ["t16_*"]\n', encoding="utf-8")
    broken = pkgs / "t16_broken.py"
    with pytest.raises(VegaError, match=rf"importing t16_broken \({broken}\) failed at {broken}:2: ValueError: boom"):
        task_factory("t16_broken:factory")
    with pytest.raises(VegaError, match=r"has no callable 'factory' \(it defines other\); name a function"):
        task_factory("t16_nofactory:factory")
    profile = Profile.model_validate({"model": {"task": "t16_notask:factory"}, "data": {"mode": "text"}})
    corpus = write_corpus(tmp_path / "corpus", documents=2, lines=10)
    with pytest.raises(VegaError, match=r"the factory returned int, not a Task"):
        build_task(profile, corpus, "cpu")
