"""The torch side of resource probing: which NVML GPUs the installed torch
can drive, and whether MPS works.

Kept out of the torch-free contract wing (`contract.resources` only declares `TorchCheck`); torch is
imported inside the calls, so importing this module stays cheap.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from trainer_core.contract.nvml import GpuSource
from trainer_core.contract.resources import GpuInfo, MachineResources, probe


class _InstalledTorch:
    """`TorchCheck` answered by the installed torch."""

    def usable_gpus(self, gpus: list[GpuInfo]) -> tuple[list[GpuInfo], str]:
        return _apply_torch_view(gpus)

    def mps_available(self) -> bool:
        import torch

        return bool(torch.backends.mps.is_available())


TORCH = _InstalledTorch()


def probe_with_torch(source: GpuSource | None = None) -> MachineResources:
    """`probe()` with what only the installed torch knows: the trainer's view of the machine."""
    return probe(source, torch_check=TORCH)


def _apply_torch_view(gpus: list[GpuInfo]) -> tuple[list[GpuInfo], str]:
    """Mark which NVML GPUs the installed torch can drive, with torch's own
    indices and capability."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import torch
        except (ImportError, OSError) as exc:
            # A torch built for another CUDA can fail at import; report it instead of a traceback.
            return [
                dataclasses.replace(gpu, torch_usable=False) for gpu in gpus
            ], f"torch cannot be imported ({exc})"
        usable = torch.cuda.is_available()
        devices = (
            [_torch_device(torch, i) for i in range(torch.cuda.device_count())] if usable else []
        )
    if not usable:
        note = _torch_cuda_problem(torch, [str(w.message) for w in caught])
        return [dataclasses.replace(gpu, torch_usable=False) for gpu in gpus], note
    matched = [_match_torch_device(gpu, position, devices) for position, gpu in enumerate(gpus)]
    return sorted(matched, key=lambda gpu: gpu.index), ""


def _torch_device(torch: Any, index: int) -> tuple[str | None, tuple[int, int]]:
    props = torch.cuda.get_device_properties(index)
    try:
        uuid = _uuid_key(str(props.uuid))
    except Exception:  # older torch builds have no uuid on device properties
        uuid = None
    return uuid, (int(props.major), int(props.minor))


def _uuid_key(uuid: str | None) -> str | None:
    """NVML says `GPU-3f2a…`, torch says `3f2a…`: compare without the prefix."""
    if not uuid:
        return None
    text = uuid.strip().lower()
    return text.split("-", 1)[1] if text.startswith(("gpu-", "mig-")) else text


def _match_torch_device(
    gpu: GpuInfo, position: int, devices: list[tuple[str | None, tuple[int, int]]]
) -> GpuInfo:
    key = _uuid_key(gpu.uuid)
    if key and all(uuid for uuid, _ in devices):
        hits = [i for i, (uuid, _) in enumerate(devices) if uuid == key]
        if not hits:
            return dataclasses.replace(gpu, torch_usable=False)
        index = hits[0]
    else:
        # No UUIDs to compare: assume torch numbers the devices as NVML does (PCI order).
        index = position
        if index >= len(devices):
            return dataclasses.replace(gpu, torch_usable=False)
    return dataclasses.replace(
        gpu, index=index, torch_usable=True, compute_capability=devices[index][1]
    )


def _torch_cuda_problem(torch: Any, messages: list[str]) -> str:
    if torch.version.cuda is None:
        return f"the installed torch {torch.__version__} was built without CUDA"
    detail = f": {messages[0]}" if messages else ""
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}) cannot initialise CUDA{detail}"
