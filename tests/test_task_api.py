"""The task API's surface: trainer_core.api exports exactly the names pinned in tests/task_api_names.txt.

Task authors import these names; removing one breaks their code, so the check fails on a removal (and on an
addition the list does not record yet, so every change to the surface is a deliberate edit of the list). The
negative control runs the same check on a copy of api.py with a name taken out.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import trainer_core.api as api

PINNED = Path(__file__).with_name("task_api_names.txt")


def pinned_names() -> list[str]:
    lines = PINNED.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def public_names(module: ModuleType) -> set[str]:
    """What `from module import ...` offers a reader of dir(): every non-underscore attribute that is no module."""
    return {
        name for name, value in vars(module).items() if not name.startswith("_") and not isinstance(value, ModuleType)
    }


def surface_problems(module: ModuleType, pinned: list[str]) -> list[str]:
    """Every way the module's surface differs from the pinned list, one line each (empty: they agree)."""
    exported = list(getattr(module, "__all__", []))
    problems = [
        f"removed from trainer_core.api: {name} (task authors import it)" for name in pinned if name not in exported
    ]
    problems += [f"new in trainer_core.api, not in {PINNED.name}: {name}" for name in exported if name not in pinned]
    problems += [
        f"__all__ names {name}, which the module does not define" for name in exported if not hasattr(module, name)
    ]
    problems += [f"public but not in __all__: {name}" for name in sorted(public_names(module) - set(exported))]
    return problems


def test_the_api_exports_exactly_the_pinned_names() -> None:
    pinned = pinned_names()
    assert pinned == sorted(pinned), f"keep {PINNED.name} sorted"
    assert surface_problems(api, pinned) == []
    assert len(pinned) >= 30


def test_a_name_taken_out_of_the_api_fails_the_check(tmp_path: Path) -> None:
    source = Path(api.__file__).read_text(encoding="utf-8")
    broken = source.replace('    "SegmentDataset",\n', "").replace("SegmentDataset, segment_offset", "segment_offset")
    assert broken.count("SegmentDataset") < source.count("SegmentDataset")
    path = tmp_path / "broken_api.py"
    path.write_text(broken, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("broken_api", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert surface_problems(module, pinned_names()) == [
        "removed from trainer_core.api: SegmentDataset (task authors import it)"
    ]


def test_a_name_added_without_the_list_fails_the_check() -> None:
    assert surface_problems(api, [name for name in pinned_names() if name != "write_wav"]) == [
        f"new in trainer_core.api, not in {PINNED.name}: write_wav"
    ]


def test_the_api_has_a_version_and_re_exports_the_real_objects() -> None:
    assert re.fullmatch(r"[1-9]\d*\.\d+", api.API_VERSION)
    from trainer_core.data.voice_dataset import VoiceDataset
    from trainer_core.models.base import GroupSpec, Task
    from trainer_core.models.registry import TaskRequest, register_task

    assert (api.Task, api.GroupSpec, api.TaskRequest, api.VoiceDataset) == (Task, GroupSpec, TaskRequest, VoiceDataset)
    assert api.register_task is register_task


def test_the_api_imports_on_its_own_in_a_fresh_interpreter() -> None:
    code = "import trainer_core.api as a; print(a.API_VERSION, len(a.__all__))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [api.API_VERSION, str(len(pinned_names()))]
