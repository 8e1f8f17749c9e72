"""Machine resources and the compute-mode device policy, plus `trainer-core resources`.

GPUs come from `StaticGpuSource` / `VEGA_FAKE_GPUS` (this machine has none); NVML, psutil, torch
and the CLI subprocess are the real ones.
"""

from __future__ import annotations

import ctypes.util
import dataclasses
import json
import os
import subprocess
import sys
import warnings

import pytest

from trainer_core.contract.errors import DeviceError
from trainer_core.contract.nvml import FAKE_GPUS_ENV, fake_gpus_from_env, visible_device_order
from trainer_core.contract.resources import (
    DeviceChoice,
    GpuInfo,
    MachineResources,
    NvmlSource,
    StaticGpuSource,
    describe_modes,
    parse_device,
    probe,
    select_device,
)
from trainer_core.contract.resources_report import mode_choice, resources_report
from trainer_core.contract.units import GIB
from trainer_core.torch_check import TORCH

NO_GPU_NOTE = "no NVIDIA driver (NVML library not found)"


def gpu(index: int, free_gib: float, total_gib: float = 24.0, torch_usable: bool | None = None) -> GpuInfo:
    free = int(free_gib * GIB)
    total = int(total_gib * GIB)
    return GpuInfo(
        index=index,
        name=f"Test GPU {index}",
        uuid=f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd",
        memory_total_bytes=total,
        memory_free_bytes=free,
        memory_used_bytes=total - free,
        utilization_pct=10.0 * index,
        temperature_c=40.0 + index,
        power_w=None,
        compute_capability=(8, 6),
        torch_usable=torch_usable,
    )


def machine(*gpus: GpuInfo, mps: bool = False) -> MachineResources:
    resources = probe(source=StaticGpuSource(list(gpus), note=NO_GPU_NOTE))
    if mps:
        return dataclasses.replace(resources, mps_available=True, accelerator_note="Apple GPU (MPS) available")
    return resources


THREE_GPUS = (gpu(0, 6.0), gpu(1, 20.0), gpu(2, 11.0))


# --- cpu mode ----------------------------------------------------------------------------------


@pytest.mark.parametrize("gpus", [(), (gpu(0, 20.0),), THREE_GPUS])
def test_cpu_mode_always_picks_cpu(gpus: tuple[GpuInfo, ...]) -> None:
    choice = select_device("cpu", resources=machine(*gpus))
    assert (choice.device, choice.kind, choice.fallback, choice.gpu) == ("cpu", "cpu", False, None)
    assert "never uses an accelerator" in choice.reason
    if gpus:
        assert f"{len(gpus)} NVIDIA GPU" in choice.reason  # says what it ignored


def test_cpu_mode_without_resources_does_not_probe_or_fail() -> None:
    assert select_device("cpu").device == "cpu"


# --- gpu mode ----------------------------------------------------------------------------------


def test_gpu_mode_with_no_gpu_names_what_was_found() -> None:
    with pytest.raises(DeviceError) as info:
        select_device("gpu", resources=machine())
    message = str(info.value)
    assert message.startswith("--mode gpu needs a CUDA or MPS device, but none was found: ")
    assert NO_GPU_NOTE in message and "use --mode mixed or --mode cpu" in message


def test_gpu_mode_picks_the_gpu_with_most_free_memory() -> None:
    choice = select_device("gpu", resources=machine(*THREE_GPUS))
    assert (choice.device, choice.kind, choice.fallback) == ("cuda:1", "cuda", False)
    assert choice.gpu == THREE_GPUS[1]
    assert "most free memory" in choice.reason and "20.0 GiB free of 24.0 GiB" in choice.reason


def test_gpu_mode_uses_a_small_gpu_but_warns() -> None:
    choice = select_device("gpu", min_gpu_memory_gb=2.0, resources=machine(gpu(0, 1.2)))
    assert choice.device == "cuda:0"
    assert choice.warnings == [
        "GPU 0 (Test GPU 0) has only 1.2 GiB free, below min 2.0 GiB; training may run out of memory"
    ]


def test_gpu_mode_falls_back_to_mps_without_cuda() -> None:
    choice = select_device("gpu", resources=machine(mps=True))
    assert (choice.device, choice.kind, choice.gpu) == ("mps", "mps", None)


def test_gpu_mode_skips_gpus_torch_cannot_use() -> None:
    gpus = (gpu(0, 6.0), gpu(1, 20.0, torch_usable=False), gpu(2, 11.0, torch_usable=True))
    choice = select_device("gpu", resources=machine(*gpus))
    assert choice.device == "cuda:2"
    assert any("GPU 1 (Test GPU 1)" in w and "torch cannot use it" in w for w in choice.warnings)


def test_gpu_mode_errors_when_torch_can_use_no_gpu() -> None:
    with pytest.raises(DeviceError, match=r"GPU 0 \(Test GPU 0\) is visible to the NVIDIA driver but the installed"):
        select_device("gpu", resources=machine(gpu(0, 20.0, torch_usable=False)))


# --- mixed mode --------------------------------------------------------------------------------


def test_mixed_mode_with_no_gpu_falls_back_with_reason() -> None:
    choice = select_device("mixed", resources=machine())
    assert (choice.device, choice.kind, choice.fallback) == ("cpu", "cpu", True)
    assert NO_GPU_NOTE in choice.reason
    assert choice.warnings == [choice.reason]


def test_mixed_mode_below_threshold_falls_back_naming_the_gpu() -> None:
    choice = select_device("mixed", min_gpu_memory_gb=2.0, resources=machine(gpu(0, 1.2)))
    assert (choice.device, choice.fallback) == ("cpu", True)
    assert "GPU 0 (Test GPU 0) has only 1.2 GiB free, below min 2.0 GiB" in choice.reason


def test_mixed_mode_uses_the_gpu_when_threshold_is_met() -> None:
    choice = select_device("mixed", min_gpu_memory_gb=1.0, resources=machine(gpu(0, 1.2)))
    assert (choice.device, choice.fallback) == ("cuda:0", False)


@pytest.mark.parametrize(("min_gb", "expected"), [(2.0, "cuda:1"), (15.0, "cuda:1"), (0.0, "cuda:1")])
def test_mixed_mode_picks_most_free_of_three(min_gb: float, expected: str) -> None:
    assert select_device("mixed", min_gb, resources=machine(*THREE_GPUS)).device == expected


def test_mixed_mode_with_three_small_gpus_lists_each() -> None:
    choice = select_device("mixed", 25.0, resources=machine(*THREE_GPUS))
    assert choice.fallback and choice.device == "cpu"
    for index, free in ((0, "6.0"), (1, "20.0"), (2, "11.0")):
        assert f"GPU {index} (Test GPU {index}) has only {free} GiB free, below min 25.0 GiB" in choice.reason


def test_mixed_mode_prefers_mps_over_cpu() -> None:
    choice = select_device("mixed", 2.0, resources=machine(mps=True))
    assert (choice.device, choice.fallback) == ("mps", False)


def test_ties_go_to_the_lowest_index() -> None:
    tied = (gpu(0, 4.0), gpu(1, 16.0), gpu(2, 16.0), gpu(3, 16.0))
    for mode in ("gpu", "mixed"):
        assert select_device(mode, resources=machine(*reversed(tied))).device == "cuda:1"


def test_fractional_free_memory_is_not_rounded_onto_the_threshold() -> None:
    choice = select_device("mixed", 2.0, resources=machine(gpu(0, 1.96)))
    assert "only 1.96 GiB free, below min 2.0 GiB" in choice.reason


# --- explicit devices --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["gpu", "mixed"])
def test_explicit_cuda_index_overrides_the_choice(mode: str) -> None:
    choice = select_device(mode, device="cuda:0", resources=machine(*THREE_GPUS))
    assert (choice.device, choice.gpu) == ("cuda:0", THREE_GPUS[0])
    assert choice.reason.startswith("explicit device cuda:0: GPU 0 (Test GPU 0)")


def test_explicit_cuda_without_index_takes_the_most_free() -> None:
    assert select_device("mixed", device="cuda", resources=machine(*THREE_GPUS)).device == "cuda:1"


def test_explicit_small_gpu_is_used_with_a_warning() -> None:
    choice = select_device("mixed", 2.0, device="cuda:0", resources=machine(gpu(0, 1.2)))
    assert choice.device == "cuda:0" and not choice.fallback
    assert "using it anyway because --device was given" in choice.warnings[0]


def test_missing_cuda_index_lists_the_gpus_found() -> None:
    with pytest.raises(DeviceError) as info:
        select_device("gpu", device="cuda:5", resources=machine(*THREE_GPUS))
    message = str(info.value)
    assert message.startswith("--device cuda:5 does not exist on this machine; found: ")
    assert "cuda:0 (Test GPU 0, 6.0 GiB free), cuda:1 (Test GPU 1, 20.0 GiB free), cuda:2" in message


def test_cuda_index_on_a_machine_without_gpu_says_none_found() -> None:
    with pytest.raises(DeviceError, match=r"cuda:0 does not exist .*no CUDA GPU \(no NVIDIA driver"):
        select_device("mixed", device="cuda:0", resources=machine())


def test_explicit_gpu_torch_cannot_use_is_refused() -> None:
    resources = machine(gpu(0, 20.0, torch_usable=False))
    with pytest.raises(DeviceError, match=r"--device cuda:0 cannot be used: .*torch cannot use it"):
        select_device("mixed", device="cuda:0", resources=resources)
    with pytest.raises(DeviceError, match="--device cuda was requested but no usable CUDA GPU"):
        select_device("mixed", device="cuda", resources=resources)


def test_explicit_accelerator_under_cpu_mode_is_a_conflict() -> None:
    for device in ("cuda:1", "cuda", "mps"):
        with pytest.raises(DeviceError, match=f"--device {device} conflicts with --mode cpu"):
            select_device("cpu", device=device, resources=machine(*THREE_GPUS, mps=True))


def test_explicit_cpu_under_gpu_mode_is_a_conflict() -> None:
    with pytest.raises(DeviceError, match="--device cpu conflicts with --mode gpu"):
        select_device("gpu", device="cpu", resources=machine(*THREE_GPUS))


@pytest.mark.parametrize("mode", ["cpu", "mixed"])
def test_explicit_cpu_is_honoured(mode: str) -> None:
    choice = select_device(mode, device="cpu", resources=machine(*THREE_GPUS))
    assert (choice.device, choice.fallback) == ("cpu", False)
    assert "explicit device cpu" in choice.reason


def test_explicit_mps_needs_mps() -> None:
    assert select_device("gpu", device="mps", resources=machine(mps=True)).device == "mps"
    with pytest.raises(DeviceError, match="--device mps was requested but MPS is not available"):
        select_device("gpu", device="mps", resources=machine(*THREE_GPUS))


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("cpu", ("cpu", None)), ("MPS", ("mps", None)), ("cuda", ("cuda", None)), (" CUDA:3", ("cuda", 3))],
)
def test_parse_device_accepts_the_usual_spellings(text: str, parsed: tuple[str, int | None]) -> None:
    assert parse_device(text) == parsed


@pytest.mark.parametrize("text", ["tpu", "cuda:", "cuda:x", "gpu", "cuda:1:2", "cuda:-1"])
def test_parse_device_rejects_the_rest(text: str) -> None:
    with pytest.raises(DeviceError, match="use cpu, mps, cuda or cuda:N"):
        parse_device(text)


def test_unknown_mode_is_an_error() -> None:
    with pytest.raises(DeviceError, match="compute mode 'auto' is not one of gpu, cpu, mixed"):
        select_device("auto", resources=machine())


# --- describe_modes and serialisation ----------------------------------------------------------


def test_describe_modes_without_gpu_disables_gpu_with_reason() -> None:
    modes = describe_modes(machine(), 2.0)
    assert list(modes) == ["gpu", "cpu", "mixed"]
    assert isinstance(modes["gpu"], str) and modes["gpu"].startswith("--mode gpu needs a CUDA or MPS device")
    assert isinstance(modes["mixed"], DeviceChoice) and modes["mixed"].fallback


def test_describe_modes_with_three_gpus() -> None:
    modes = describe_modes(machine(*THREE_GPUS), 2.0)
    assert {mode: choice.device for mode, choice in modes.items()} == {  # type: ignore[union-attr]
        "gpu": "cuda:1",
        "cpu": "cpu",
        "mixed": "cuda:1",
    }


def test_the_resources_document_is_plain_json() -> None:
    resources = machine(*THREE_GPUS)
    data = json.loads(resources_report(resources, {}).to_json())
    assert data["accelerator"] == {"found": True, "note": "3 NVIDIA GPUs (fake, from static list)"}
    assert data["gpus"][1]["memory_free_bytes"] == THREE_GPUS[1].memory_free_bytes
    assert data["gpus"][1]["compute_capability"] == "8.6"
    assert data["cpu"]["logical"] >= 1 and data["ram"]["total_bytes"] > data["ram"]["available_bytes"] > 0
    choice = select_device("mixed", resources=resources)
    assert json.loads(mode_choice(choice).model_dump_json())["gpu"]["index"] == 1


def test_gpu_info_round_trips_through_dict() -> None:
    for original in THREE_GPUS:
        assert GpuInfo.from_dict(json.loads(json.dumps(original.to_dict()))) == original


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        ({"memory_free_bytes": 1}, "missing required field 'memory_total_bytes'"),
        ({"memory_total_bytes": 10, "memory_free_bytes": 20}, "memory_free_bytes (20) exceeds"),
        ({"memory_total_bytes": 10, "memory_free_bytes": 5, "vram": 3}, "unknown field(s) vram"),
        ({"memory_total_bytes": "10", "memory_free_bytes": 5}, "memory_total_bytes must be an integer"),
        ({"memory_total_bytes": 10, "memory_free_bytes": 5, "compute_capability": "eight"}, "compute_capability"),
        ({"memory_total_bytes": 10, "memory_free_bytes": 5, "torch_usable": "yes"}, "torch_usable must be"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_fake_gpu_errors_name_the_field(item: object, problem: str) -> None:
    with pytest.raises(DeviceError) as info:
        fake_gpus_from_env({FAKE_GPUS_ENV: json.dumps([item])})
    assert f"{FAKE_GPUS_ENV} item 0: " in str(info.value) and problem in str(info.value)


def test_fake_gpus_env_shapes() -> None:
    assert fake_gpus_from_env({}) is None
    empty = fake_gpus_from_env({FAKE_GPUS_ENV: "[]"})
    assert empty is not None and empty.read() == [] and FAKE_GPUS_ENV in empty.note
    with pytest.raises(DeviceError, match="is not valid JSON"):
        fake_gpus_from_env({FAKE_GPUS_ENV: "[{"})
    with pytest.raises(DeviceError, match="must be a JSON list"):
        fake_gpus_from_env({FAKE_GPUS_ENV: '{"memory_total_bytes": 1}'})
    source = fake_gpus_from_env({FAKE_GPUS_ENV: '[{"memory_total_bytes": 100, "memory_free_bytes": 40}]'})
    assert source is not None
    (only,) = source.read()
    assert (only.index, only.name, only.memory_used_bytes) == (0, "Fake GPU 0", 60)


# --- CUDA_VISIBLE_DEVICES mapping --------------------------------------------------------------

UUIDS = ["GPU-aaaa-0", "GPU-bbbb-1", "GPU-cccc-2"]


@pytest.mark.parametrize(
    ("value", "order"),
    [
        (None, None),
        ("", []),
        ("2,0", [2, 0]),
        ("1, 2", [1, 2]),
        ("0,7,1", [0]),  # like CUDA: stop at the first invalid entry
        ("-1", []),
        ("1,1", [1]),
        ("GPU-cccc,GPU-aaaa", [2, 0]),
        ("GPU-zzzz", []),
        ("MIG-1234", None),
    ],
)
def test_visible_device_order(value: str | None, order: list[int] | None) -> None:
    assert visible_device_order(value, UUIDS) == order


# --- real NVML, psutil and torch on this machine -----------------------------------------------


def test_real_nvml_source_is_quiet_and_consistent(capfd: pytest.CaptureFixture[str]) -> None:
    source = NvmlSource()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first, second = source.read(), source.read()
        source.close()
    assert capfd.readouterr() == ("", "")
    assert len(first) == len(second)
    if ctypes.util.find_library("nvidia-ml") is None and not first:
        assert source.note == NO_GPU_NOTE
    for found in first:  # a machine with a driver: the readings must be sane
        assert found.memory_total_bytes > 0 and 0 <= found.memory_free_bytes <= found.memory_total_bytes


class _BindingWithTwoGpus:
    """Stands in for the pynvml module where no NVIDIA driver exists: two GPUs, the second without
    power or temperature sensors (NotSupported), raised as pynvml's own exception classes."""

    def __init__(self) -> None:
        import pynvml

        self.NVMLError = pynvml.NVMLError
        self.NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
        self._not_supported = pynvml.NVML_ERROR_NOT_SUPPORTED
        self.shutdowns = 0

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return f"GPU-{handle}{handle}{handle}-uuid".encode()  # old bindings return bytes

    def nvmlDeviceGetName(self, handle: int) -> str:
        return f"Binding GPU {handle}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> object:
        total = (8 + 8 * handle) * GIB
        return dataclasses.make_dataclass("Memory", ["total", "free", "used"])(total, total // 4, total - total // 4)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> object:
        return dataclasses.make_dataclass("Rates", ["gpu", "memory"])(30 + handle, 5)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        if handle == 1:
            raise self.NVMLError(self._not_supported)  # pynvml maps the code to NVMLError_NotSupported
        return 123_456

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        if handle == 1:
            raise self.NVMLError(self._not_supported)
        return 47

    nvmlDeviceGetTemperatureV = nvmlDeviceGetTemperature

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return (9, handle)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1


def test_nvml_device_reading_turns_unsupported_queries_into_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    binding = _BindingWithTwoGpus()
    source = NvmlSource()
    source._nvml = binding  # the NVML library cannot load here; drive the reading code directly
    first, second = source.read()
    assert (first.name, first.uuid) == ("Binding GPU 0", "GPU-000-uuid")
    assert (first.power_w, first.temperature_c) == (123.456, 47.0)
    assert (first.utilization_pct, first.compute_capability, first.memory_free_bytes) == (30.0, (9, 0), 2 * GIB)
    assert (second.index, second.power_w, second.temperature_c, second.memory_total_bytes) == (1, None, None, 16 * GIB)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    (only,) = source.read()
    assert (only.index, only.name) == (0, "Binding GPU 1")  # cuda:0 of this process is NVML device 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert source.read() == [] and source.note == "CUDA_VISIBLE_DEVICES hides all 2 NVIDIA GPU(s)"
    source.close()
    assert binding.shutdowns == 1


def test_real_probe_reports_cpu_and_ram() -> None:
    resources = probe(source=NvmlSource())
    assert resources.cpu_logical == os.cpu_count()
    assert 0 < resources.ram_available_bytes <= resources.ram_total_bytes
    assert resources.accelerator_note
    assert resources.has_accelerator == bool(resources.gpus)  # no MPS off macOS
    again = probe(source=NvmlSource())
    assert again.cpu_percent is None or 0.0 <= again.cpu_percent <= 100.0


class _DriverSeesOneGpu(NvmlSource):
    """The classic broken box: NVML sees a GPU, but pip installed a CPU-only torch."""

    def read(self) -> list[GpuInfo]:
        return [gpu(0, 20.0)]


def test_check_torch_marks_gpus_a_cpu_torch_cannot_use() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a torch that cannot use CUDA")
    resources = probe(source=_DriverSeesOneGpu(), torch_check=TORCH)
    assert resources.gpus[0].torch_usable is False
    assert "cannot" in resources.torch_note or "without CUDA" in resources.torch_note
    assert resources.torch_note in resources.accelerator_note
    with pytest.raises(DeviceError, match="installed torch cannot use it"):
        select_device("gpu", resources=resources)
    assert select_device("mixed", resources=resources).fallback


def test_probe_never_imports_torch_without_a_torch_check() -> None:
    code = (
        "import sys, trainer_core.contract.resources as r; r.probe(); r.describe_modes(r.probe()); "
        "a = 'torch' in sys.modules; from trainer_core import torch_check; torch_check.probe_with_torch(); "
        "print(a, 'torch' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != FAKE_GPUS_ENV}
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, env=env)
    assert (out.returncode, out.stderr) == (0, "")
    # The torch check only imports torch when NVML found GPUs (or on macOS, for MPS).
    expected = "True" if sys.platform == "darwin" or ctypes.util.find_library("nvidia-ml") else "False"
    assert out.stdout.split() == ["False", expected]


# --- the CLI, as a real subprocess -------------------------------------------------------------

FAKE_THREE = json.dumps(
    [
        {"name": "Fake A100", "memory_total_bytes": 40 * GIB, "memory_free_bytes": int(1.2 * GIB), "power_w": 250},
        {"name": "Fake 4090", "memory_total_bytes": 24 * GIB, "memory_free_bytes": 20 * GIB, "temperature_c": 55},
        {"name": "Fake 3060", "memory_total_bytes": 12 * GIB, "memory_free_bytes": 11 * GIB},
    ]
)


def run_resources(*args: str, fake_gpus: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != FAKE_GPUS_ENV}
    env["COLUMNS"] = "200"  # Rich wraps to the terminal width; keep table rows on one line
    if fake_gpus is not None:
        env[FAKE_GPUS_ENV] = fake_gpus
    command = [sys.executable, "-W", "error", "-m", "trainer_core", "resources", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)


def test_cli_json_on_this_machine() -> None:
    out = run_resources("--json")
    assert (out.returncode, out.stderr) == (0, "")
    report = json.loads(out.stdout)
    assert report["cpu"]["logical"] == os.cpu_count() and report["ram"]["total_bytes"] > 0
    assert set(report["modes"]) == {"gpu", "cpu", "mixed"}
    assert report["modes"]["cpu"]["device"] == "cpu"
    if not report["gpus"]:
        assert report["accelerator"]["found"] is report["mps_available"]
        assert "error" in report["modes"]["gpu"] or report["mps_available"]


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has an NVIDIA driver")
def test_cli_without_gpu_says_so_and_gpu_mode_fails_cleanly() -> None:
    out = run_resources("--json", "--mode", "gpu")
    assert out.returncode == 2
    assert out.stderr == (
        "error: --mode gpu needs a CUDA or MPS device, but none was found: "
        f"{NO_GPU_NOTE}; use --mode mixed or --mode cpu\n"
    )
    report = json.loads(out.stdout)  # the report is still printed before the error
    assert report["accelerator"] == {"found": False, "note": NO_GPU_NOTE}
    assert report["modes"]["mixed"]["fallback"] is True and report["selected"] == report["modes"]["gpu"]


def test_cli_json_with_three_fake_gpus() -> None:
    out = run_resources("--json", "--mode", "mixed", "--min-gpu-memory-gb", "15", fake_gpus=FAKE_THREE)
    assert (out.returncode, out.stderr) == (0, "")
    report = json.loads(out.stdout)
    assert [g["name"] for g in report["gpus"]] == ["Fake A100", "Fake 4090", "Fake 3060"]
    assert report["accelerator"] == {"found": True, "note": "3 NVIDIA GPUs (fake, from VEGA_FAKE_GPUS)"}
    assert report["modes"]["gpu"]["device"] == "cuda:1"
    assert report["modes"]["mixed"]["device"] == "cuda:1" and report["selected"]["device"] == "cuda:1"
    assert report["modes"]["cpu"]["device"] == "cpu"


def test_cli_threshold_above_every_fake_gpu_falls_back() -> None:
    out = run_resources("--json", "--min-gpu-memory-gb", "30", fake_gpus=FAKE_THREE)
    mixed = json.loads(out.stdout)["modes"]["mixed"]
    assert (mixed["device"], mixed["fallback"]) == ("cpu", True)
    assert "GPU 0 (Fake A100) has only 1.2 GiB free, below min 30.0 GiB" in mixed["reason"]


def test_cli_table_shows_gpus_and_modes() -> None:
    out = run_resources("--device", "cuda:0", fake_gpus=FAKE_THREE)
    assert (out.returncode, out.stderr) == (0, "")
    for text in ("Machine", "RAM", "Fake A100", "Fake 3060", "250 W", "55 °C", "Compute modes", "selected: cuda:0"):
        assert text in out.stdout
    assert "using it anyway because --device was given" in out.stdout


def test_cli_bad_device_and_bad_fake_gpus_are_clean_errors() -> None:
    out = run_resources("--json", "--device", "cuda:9", fake_gpus=FAKE_THREE)
    assert out.returncode == 2 and out.stderr.startswith("error: --device cuda:9 does not exist on this machine")
    out = run_resources(fake_gpus='[{"name": "x"}]')
    assert out.returncode == 2
    assert out.stderr == "error: VEGA_FAKE_GPUS item 0: missing required field 'memory_total_bytes'\n"
