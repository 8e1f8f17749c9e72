"""A Vega checkpoint's model config, read without torch and without reading any tensor.

A resumed VITS run must build the model its checkpoints hold before loading them (the symbol map
decides the embedding's size), and the plan, which never imports torch, decides that. Checkpoints
are torch zip files whose `data.pkl` holds plain data and tensors; it is read with the same
allow-listed unpickler as a Piper checkpoint's metadata (`contract.piper_voice`), tensors becoming
shapes, so nothing in the file can run code.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer_core.contract.piper_voice import PiperCheckpointError, read_pickled_document


def read_model_config(path: Path) -> dict[str, Any] | None:
    """`extra.model_config` of a Vega checkpoint (what its export's config.json holds under
    "model"), or None when the file is unreadable or holds none."""
    try:
        document = read_pickled_document(path)
    except PiperCheckpointError:
        return None
    extra = document.get("extra") if isinstance(document, Mapping) else None
    config = extra.get("model_config") if isinstance(extra, Mapping) else None
    return dict(config) if isinstance(config, Mapping) else None
