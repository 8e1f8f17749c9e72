"""`trainer-core export --hf SOURCE [--out DIR]`: a vits voice as a transformers VITS folder.

SOURCE is a vits run folder (its best checkpoint), a checkpoint or an export. The folder holds
config.json (model_type "vits"), model.safetensors (the decoder's weight norm folded), the tokenizer
files and a README.md whose front matter carries the base model's licence;
`VitsModel.from_pretrained`, `VitsTokenizer.from_pretrained` and `pipeline("text-to-speech",
model=DIR)` load it. Default DIR: `hf/` in SOURCE's run folder, else SOURCE-hf.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from trainer_core.cli.common import print_json
from trainer_core.contract.errors import VegaError


def default_out(source: Path) -> Path:
    from trainer_core.contract import rundir

    run = (
        source
        if rundir.is_run_dir(source)
        else next((p for p in source.parents if rundir.is_run_dir(p)), None)
    )
    return run / "hf" if run is not None else source.with_name(source.name + "-hf")


def _model_config(path: Path) -> dict[str, Any]:
    """The voice's model config, read without its tensors (an export's
    config.json, a checkpoint's extra)."""
    from trainer_core.contract.checkpoint_peek import read_model_config
    from trainer_core.contract.init_sources import read_export_config

    if path.is_dir():
        return dict(read_export_config(path).get("model") or {})
    return dict(read_model_config(path) or {})


def run_hf(args: argparse.Namespace) -> int:
    from trainer_core.cli.evaluate_cmd import load_voice
    from trainer_core.cli.vits_voice import VitsVoice
    from trainer_core.models.vits.hf_export import export_hf

    source: Path = args.hf
    if not source.exists():
        raise VegaError(
            f"--hf {source}: no such file or folder; name a vits run folder, checkpoint or export"
        )
    voice, path = load_voice(source, "cpu")
    if not isinstance(voice, VitsVoice):
        raise VegaError(
            f"{path} is a two-stage voice (acoustic model and vocoder); export --hf writes vits"
            " voices"
        )
    config = _model_config(path)
    speaker = voice.speaker
    scales = {
        "noise_scale": speaker.noise_scale,
        "noise_scale_w": speaker.noise_scale_w,
        "length_scale": speaker.length_scale,
    }
    out = args.out if args.out is not None else default_out(source)
    step = config.get("step")
    document = export_hf(
        voice.model,
        voice.model.config,
        voice.encoder,
        voice.audio.sample_rate,
        out,
        scales,
        config.get("base_model"),
        step if isinstance(step, int) else None,
    )
    if args.json:
        print_json({"out": str(out), "config": document})
    else:
        print(f"wrote a transformers VITS folder to {out} (voice from {path})")
    return 0
