"""GPU readings behind a small interface: NVML on real machines, static or injected lists in tests.

`GpuSource.read()` returns one `GpuInfo` per CUDA device this process can see. `NvmlSource` reads
the NVIDIA driver through `pynvml` (package nvidia-ml-py): it initialises NVML once, keeps it open,
and is cheap enough to poll every couple of seconds. A machine without an NVIDIA driver is the
normal case, not an error: `read()` returns `[]` and `note` says why, without printing anything.

Testing hook: when the environment variable `VEGA_FAKE_GPUS` holds a JSON list of `GpuInfo`
dicts (see `GpuInfo.from_dict`), `default_gpu_source()` returns those GPUs instead of asking
NVML, so tests and demos can pretend to have 0, 1 or 3 GPUs. It is never meant for real runs.

This module never imports torch.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trainer_core.contract.errors import DeviceError
from trainer_core.contract.units import GIB

FAKE_GPUS_ENV = "VEGA_FAKE_GPUS"


@dataclass(frozen=True, kw_only=True)
class GpuInfo:
    """One CUDA device as this process sees it; `index` is the one to put in `cuda:N`."""

    index: int
    name: str
    uuid: str | None = None
    memory_total_bytes: int
    memory_free_bytes: int
    memory_used_bytes: int
    utilization_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    compute_capability: tuple[int, int] | None = None
    torch_usable: bool | None = None

    @property
    def memory_free_gib(self) -> float:
        return self.memory_free_bytes / GIB

    @property
    def memory_total_gib(self) -> float:
        return self.memory_total_bytes / GIB

    @property
    def label(self) -> str:
        """Short human name, e.g. `GPU 1 (NVIDIA A100-SXM4-40GB)`."""
        return f"GPU {self.index} ({self.name})"

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        cc = self.compute_capability
        data["compute_capability"] = f"{cc[0]}.{cc[1]}" if cc else None
        return data

    @classmethod
    def from_dict(cls, data: Any, position: int = 0) -> GpuInfo:
        """Build from a plain dict (the `to_dict` shape); `index` defaults to `position`.

        Raises DeviceError naming the bad field, so a broken `VEGA_FAKE_GPUS` is easy to fix.
        """
        where = f"{FAKE_GPUS_ENV} item {position}"
        if not isinstance(data, dict):
            raise DeviceError(f"{where}: expected a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise DeviceError(f"{where}: unknown field(s) {', '.join(unknown)}")
        total = _require_bytes(data, "memory_total_bytes", where)
        free = _require_bytes(data, "memory_free_bytes", where)
        if free > total:
            raise DeviceError(
                f"{where}: memory_free_bytes ({free}) exceeds memory_total_bytes ({total})"
            )
        return cls(
            index=_optional_int(data, "index", where, default=position),
            name=str(data.get("name") or f"Fake GPU {position}"),
            uuid=data.get("uuid"),
            memory_total_bytes=total,
            memory_free_bytes=free,
            memory_used_bytes=_optional_int(data, "memory_used_bytes", where, default=total - free),
            utilization_pct=_optional_number(data, "utilization_pct", where),
            temperature_c=_optional_number(data, "temperature_c", where),
            power_w=_optional_number(data, "power_w", where),
            compute_capability=parse_compute_capability(data.get("compute_capability"), where),
            torch_usable=_optional_bool(data, "torch_usable", where),
        )


def _require_bytes(data: dict[str, Any], key: str, where: str) -> int:
    if key not in data:
        raise DeviceError(f"{where}: missing required field {key!r}")
    value = _optional_int(data, key, where, default=0)
    if value < 0:
        raise DeviceError(f"{where}: {key} must not be negative, got {value}")
    return value


def _optional_int(data: dict[str, Any], key: str, where: str, default: int) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise DeviceError(f"{where}: {key} must be an integer, got {value!r}")
    return value


def _optional_number(data: dict[str, Any], key: str, where: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DeviceError(f"{where}: {key} must be a number or null, got {value!r}")
    return float(value)


def _optional_bool(data: dict[str, Any], key: str, where: str) -> bool | None:
    value = data.get(key)
    if value is not None and not isinstance(value, bool):
        raise DeviceError(f"{where}: {key} must be true, false or null, got {value!r}")
    return value


def parse_compute_capability(
    value: Any, where: str = "compute_capability"
) -> tuple[int, int] | None:
    """Accept `"8.6"`, `[8, 6]` or `None`."""
    if value is None:
        return None
    parts = value.split(".") if isinstance(value, str) else value
    try:
        major, minor = (int(p) for p in parts)
    except (TypeError, ValueError):
        raise DeviceError(
            f'{where}: compute_capability must look like "8.6" or [8, 6], got {value!r}'
        ) from None
    return (major, minor)


class GpuSource(Protocol):
    """Anything that can list the GPUs; `note` says why the last `read()` found none (else "")."""

    note: str

    def read(self) -> list[GpuInfo]: ...


class StaticGpuSource:
    """A fixed list of GPUs: for tests, and for `VEGA_FAKE_GPUS`."""

    def __init__(
        self,
        gpus: Sequence[GpuInfo],
        note: str = "no GPU in the static list",
        origin: str = "static list",
    ) -> None:
        self._gpus = list(gpus)
        self.note = "" if self._gpus else note
        # Shown next to the GPU count, so nobody mistakes injected GPUs for real ones.
        self.origin = origin

    def read(self) -> list[GpuInfo]:
        return list(self._gpus)


def fake_gpus_from_env(environ: dict[str, str] | None = None) -> StaticGpuSource | None:
    """The `VEGA_FAKE_GPUS` testing hook: a JSON list of GpuInfo dicts, or None when unset."""
    raw = (os.environ if environ is None else environ).get(FAKE_GPUS_ENV)
    if raw is None:
        return None
    try:
        items = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DeviceError(
            f"{FAKE_GPUS_ENV} is not valid JSON ({exc}); expected a list of GPU objects"
        ) from None
    if not isinstance(items, list):
        raise DeviceError(
            f"{FAKE_GPUS_ENV} must be a JSON list of GPU objects, got {type(items).__name__}"
        )
    gpus = [GpuInfo.from_dict(item, position) for position, item in enumerate(items)]
    return StaticGpuSource(
        gpus, note=f"no GPU ({FAKE_GPUS_ENV} is an empty list)", origin=FAKE_GPUS_ENV
    )


def visible_device_order(cuda_visible: str | None, uuids: Sequence[str | None]) -> list[int] | None:
    """Map CUDA_VISIBLE_DEVICES onto NVML indices: position = CUDA index, value = NVML index.

    Returns None when every device is visible in NVML order (unset variable, or entries we
    cannot map such as MIG ids). Like CUDA, parsing stops at the first invalid entry.
    """
    if cuda_visible is None:
        return None
    order: list[int] = []
    for token in (t.strip() for t in cuda_visible.split(",")):
        match = _match_visible_token(token, uuids)
        if match is _UNMAPPABLE:
            return None
        if not isinstance(match, int) or match in order:
            break
        order.append(match)
    return order


# Marks a CUDA_VISIBLE_DEVICES entry (a MIG id) that NVML device indices cannot express.
_UNMAPPABLE = object()


def _match_visible_token(token: str, uuids: Sequence[str | None]) -> int | object | None:
    if token.isdigit():
        return int(token) if int(token) < len(uuids) else None
    if token.upper().startswith("MIG-"):
        return _UNMAPPABLE
    if token.upper().startswith("GPU-"):
        hits = [
            i for i, uuid in enumerate(uuids) if uuid and uuid.lower().startswith(token.lower())
        ]
        return hits[0] if len(hits) == 1 else None
    return None


class NvmlSource:
    """Real GPUs through NVML; initialised on first read, shut down by `close()`."""

    def __init__(self) -> None:
        self.note = ""
        self._nvml: Any = None
        self._failed = False
        self._lock = threading.Lock()

    def read(self) -> list[GpuInfo]:
        with self._lock:
            if not self._ensure_init():
                return []
            return self._read_devices()

    def close(self) -> None:
        with self._lock:
            if self._nvml is not None:
                # Shutting down a driver that went away is not worth reporting.
                with contextlib.suppress(self._nvml.NVMLError):
                    self._nvml.nvmlShutdown()
                self._nvml = None

    def _ensure_init(self) -> bool:
        if self._nvml is not None:
            return True
        if self._failed:
            return False  # a missing library will not appear while we run: do not retry every poll
        try:
            import pynvml
        except ImportError:
            return self._fail("cannot read NVIDIA GPUs: the nvidia-ml-py package is not installed")
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            return self._fail(_describe_init_error(pynvml, exc))
        self._nvml = pynvml
        return True

    def _fail(self, note: str) -> bool:
        self._failed = True
        self.note = note
        return False

    def _read_devices(self) -> list[GpuInfo]:
        nvml = self._nvml
        try:
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        except nvml.NVMLError as exc:
            self.note = f"the NVIDIA driver could not list GPUs ({exc})"
            return []
        uuids = [self._query(nvml.nvmlDeviceGetUUID, h) for h in handles]
        order = visible_device_order(os.environ.get("CUDA_VISIBLE_DEVICES"), uuids)
        nvml_indices = list(range(len(handles))) if order is None else order
        read = [
            self._read_one(cuda_index, handles[n], uuids[n])
            for cuda_index, n in enumerate(nvml_indices)
        ]
        gpus = [gpu for gpu in read if gpu is not None]
        self.note = "" if gpus else _empty_note(len(handles), order)
        return gpus

    def _read_one(self, cuda_index: int, handle: Any, uuid: str | None) -> GpuInfo | None:
        nvml = self._nvml
        memory = self._memory(handle)
        if memory is None:
            # a GPU without memory figures (lost, or resetting) is useless to the policy
            return None
        utilization = self._query(nvml.nvmlDeviceGetUtilizationRates, handle)
        power_mw = self._query(nvml.nvmlDeviceGetPowerUsage, handle)
        return GpuInfo(
            index=cuda_index,
            name=self._query(nvml.nvmlDeviceGetName, handle) or f"NVIDIA GPU {cuda_index}",
            uuid=uuid,
            memory_total_bytes=int(memory.total),
            memory_free_bytes=int(memory.free),
            memory_used_bytes=int(memory.used),
            utilization_pct=float(utilization.gpu) if utilization is not None else None,
            temperature_c=self._temperature(handle),
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            compute_capability=self._query(nvml.nvmlDeviceGetCudaComputeCapability, handle),
        )

    def _memory(self, handle: Any) -> Any:
        """Memory figures as nvidia-smi shows them: version 2 leaves out the driver's
        reservation (about 0.5 GiB on an H100), which version 1 counts as used; older drivers
        and bindings only have version 1."""
        nvml = self._nvml
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is not None:
            try:
                memory = self._query(nvml.nvmlDeviceGetMemoryInfo, handle, version=version)
            except TypeError:  # bindings whose call takes no version keyword
                memory = None
            if memory is not None:
                return memory
        return self._query(nvml.nvmlDeviceGetMemoryInfo, handle)

    def _temperature(self, handle: Any) -> float | None:
        nvml = self._nvml
        sensor = nvml.NVML_TEMPERATURE_GPU
        # The V form is the current API; older drivers and bindings only have the deprecated one.
        for fn in (getattr(nvml, "nvmlDeviceGetTemperatureV", None), nvml.nvmlDeviceGetTemperature):
            value = self._query(fn, handle, sensor) if fn is not None else None
            if value is not None:
                return float(value)
        return None

    def _query(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One NVML call; NotSupported, NoPermission and friends become None, never an exception."""
        try:
            value = fn(*args, **kwargs)
        except self._nvml.NVMLError:
            return None
        # Old bindings return bytes for names and UUIDs; current ones return str.
        return value.decode() if isinstance(value, bytes) else value


def _describe_init_error(pynvml: Any, exc: Exception) -> str:
    if isinstance(exc, pynvml.NVMLError_LibraryNotFound):
        return "no NVIDIA driver (NVML library not found)"
    if isinstance(exc, pynvml.NVMLError_DriverNotLoaded):
        return "no NVIDIA GPU driver loaded (NVML: driver not loaded)"
    if isinstance(exc, pynvml.NVMLError_NoPermission):
        return "no permission to query the NVIDIA driver (NVML: no permission)"
    return f"the NVIDIA driver could not be queried (NVML: {exc})"


def _empty_note(device_count: int, order: list[int] | None) -> str:
    if device_count == 0:
        return "the NVIDIA driver reports no GPU"
    if order == []:
        return f"CUDA_VISIBLE_DEVICES hides all {device_count} NVIDIA GPU(s)"
    return f"{device_count} NVIDIA GPU(s) found but none could be read"


_default_source: NvmlSource | None = None
_default_lock = threading.Lock()


def default_gpu_source() -> GpuSource:
    """`VEGA_FAKE_GPUS` when set, else one shared NvmlSource (NVML stays open between polls)."""
    global _default_source
    fake = fake_gpus_from_env()
    if fake is not None:
        return fake
    with _default_lock:
        if _default_source is None:
            _default_source = NvmlSource()
            atexit.register(_default_source.close)
        return _default_source
