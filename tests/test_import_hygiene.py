"""The dashboard and the torch-free trainer modules must never pull in torch, librosa or matplotlib.

Each import runs in a fresh interpreter: another test importing torch must not hide a leak.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "librosa", "matplotlib", "numba")

LIGHT_MODULES = [
    "vega_tui",
    "vega_tui.__main__",
    "vega_tui.app",
    "vega_tui.screens.run",
    "vega_tui.screens.launch",
    "vega_tui.store",
    "vega_tui.follow",
    "vega_tui.history_worker",
    "vega_tui.runner",
    "vega_tui.pending",
    "vega_tui.start_points",
    "vega_tui.piper_voices",
    "vega_tui.widgets.start_from",
    "vega_tui.screens.launch_workers",
    "vega_tui.init_from_view",
    "vega_tui.serve.server",
    "trainer_core",
    "trainer_core.contract.protocol",
    "trainer_core.contract.profile",
    "trainer_core.contract.profile_loader",
    "trainer_core.contract.eventlog",
    "trainer_core.contract.resources",
    "trainer_core.contract.control_client",
    "trainer_core.cli.control_wait",
    "trainer_core.contract.errors",
    "trainer_core.contract.rundir",
    "trainer_core.contract.init_sources",
    # Speaking an ONNX voice (`synth --onnx`): onnxruntime and numpy only.
    "trainer_core.cli.synth_cmd",
    "trainer_core.models.onnx_voice",
    "trainer_core.models.griffin_lim_numpy",
]


def heavy_modules_after_import(module: str) -> list[str]:
    code = (
        f"import importlib, json, sys; importlib.import_module({module!r}); "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("module", LIGHT_MODULES)
def test_module_stays_free_of_heavy_imports(module: str) -> None:
    assert heavy_modules_after_import(module) == []


def test_resources_probe_without_torch() -> None:
    # The dashboard polls resources every 2 s; probing must not import torch either.
    code = (
        "import json, sys; from trainer_core.contract import resources; resources.probe(); "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
