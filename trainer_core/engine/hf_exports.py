"""A run's transformers folders: `export/hf/last/` (the final model) and `export/hf/best/` (its best
checkpoint), written at the end of a vits run whose text front end is a transformers tokenizer's (a
run started from an MMS voice). Only those voices can be: a voice with Piper's framing has ids
VitsTokenizer cannot make, so for it the run writes none and `trainer-core export --hf` says why."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from trainer_core.contract import rundir
from trainer_core.engine.checkpoint_manager import checkpoint_dir, load_checkpoint, read_best
from trainer_core.engine.events import EventHub

log = logging.getLogger("trainer_core")
HF_FOLDER = "hf"


def export_hf_folders(trainer: Any, hub: EventHub, run_dir: Path) -> dict[str, str]:
    """Write export/hf/last and export/hf/best when the run's voice can be a
    transformers VITS; the paths written."""
    from trainer_core.models.vits.hf_export import HfExportError, export_hf
    from trainer_core.models.vits.speech import inference_scales
    from trainer_core.models.vits.synthesizer import Synthesizer

    task = trainer.task
    symbols: Any = getattr(task, "symbols", None)  # a vits task's SymbolTable
    if getattr(symbols, "mms", None) is None:
        return {}
    folder = run_dir / rundir.EXPORT / HF_FOLDER
    scales, rate = inference_scales(trainer.profile), trainer.profile.audio.sample_rate
    written: dict[str, str] = {}
    models: dict[str, tuple[Any, int]] = {"last": (trainer.module.model_g, trainer.state.step)}
    best = read_best(checkpoint_dir(run_dir))
    if best is not None:
        state = load_checkpoint(checkpoint_dir(run_dir) / best["path"])
        generator = Synthesizer(task.config)
        weights = {
            k.removeprefix("model_g."): v
            for k, v in state["model"].items()
            if k.startswith("model_g.")
        }
        generator.load_state_dict(weights, strict=True)
        models["best"] = (generator, int(state.get("step", 0)))
    for name, (generator, step) in models.items():
        try:
            export_hf(
                generator, task.config, symbols, rate, folder / name, scales, task.base_model, step
            )
        except HfExportError as exc:
            hub.warn(
                f"{exc}; the trained weights are in {run_dir / rundir.CHECKPOINTS}",
                code="hf_export_failed",
            )
            return written
        written[f"hf_{name}"] = str(folder / name)
        log.info("wrote the transformers folder %s (step %d)", folder / name, step)
    return written
