"""`trainer-core export --piper SOURCE [--out DIR] [--name NAME]`: a vits voice as a Piper voice.

SOURCE is a vits run folder (its best checkpoint, else its newest), a checkpoint or an export.
Written: `<lang>_<REGION>-<name>-<quality>.onnx` and `.onnx.json`
(`models.vits.piper_voice_files`), which Piper's runtime speaks (`python -m piper -m FILE.onnx -f
out.wav`). Default DIR: `export/piper/` in SOURCE's run folder, else SOURCE-piper beside it. The
name defaults to the run's (run.name of its profile); the dataset and licence come from the voice
the run started from when it says them (a Piper voice config's dataset and language, a transformers
model's licence), else the data folder's name and "unknown".
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer_core.cli.common import print_json
from trainer_core.contract.errors import VegaError

PIPER_FOLDER = "piper"
OLD_FRONTEND = (
    "note: this voice learnt its ids from Vega's earlier phoneme front end (no clause marks, "
    "one sentence); Piper's runtime reads text as Piper does, so its speech may differ a little "
    "from trainer-core synth's"
)
# How many runs back the dataset and licence are looked for (a run from a run from a voice).
MAX_CHAIN = 4


def default_out(source: Path) -> Path:
    """`export/piper/` in the source's run folder, else `SOURCE-piper` beside the source."""
    from trainer_core.contract import rundir

    source = source.absolute()
    runs = [folder for folder in (source, *source.parents) if rundir.is_run_dir(folder)]
    if not runs:
        return source.with_name(source.name + "-piper")
    return runs[0] / rundir.EXPORT / PIPER_FOLDER


def source_document(path: Path) -> tuple[dict[str, Any], dict[str, Any], int | None]:
    """(model config, profile, step) of a checkpoint or export, read without its tensors."""
    from trainer_core.contract.init_sources import read_export_config
    from trainer_core.contract.piper_voice import PiperCheckpointError, read_pickled_document

    if path.is_dir():
        model = dict(read_export_config(path).get("model") or {})
        profile_text, step = model.get("profile"), model.get("step")
    else:
        try:
            document = read_pickled_document(path)
        except PiperCheckpointError:
            return {}, {}, None
        document = document if isinstance(document, Mapping) else {}
        extra = document.get("extra")
        config = extra.get("model_config") if isinstance(extra, Mapping) else None
        model = dict(config) if isinstance(config, Mapping) else {}
        profile_text, step = document.get("profile_toml"), document.get("step")
    try:
        profile = tomllib.loads(profile_text) if isinstance(profile_text, str) else {}
    except tomllib.TOMLDecodeError:
        profile = {}
    return model, profile, step if isinstance(step, int) else None


def started_from(init_from: Any, init_config: Any, depth: int = 0) -> dict[str, Any]:
    """What the voice a run started from says of itself: dataset, language, licence (or nothing)."""
    from trainer_core.contract.init_sources import resolve_source
    from trainer_core.contract.piper_voice import find_voice_config, read_voice_config

    if not init_from or depth >= MAX_CHAIN:
        return {}
    try:
        file = resolve_source(str(init_from))
        if file.form == "piper":
            found = find_voice_config(file.path, Path(init_config) if init_config else None)
            voice = read_voice_config(found)
            raw = json.loads(found.read_text(encoding="utf-8"))
            licence = raw.get("license") or raw.get("licence")
            facts = {
                "piper_checkpoint": str(file.path),
                "dataset": voice.dataset,
                "language": voice.language or None,
                "license": licence if isinstance(licence, str) else None,
            }
            return {key: value for key, value in facts.items() if value}
        if file.form == "hf":
            return {"transformers_model": str(init_from)}
        model, profile, _ = source_document(file.path)
    except (VegaError, OSError, ValueError):
        return {}
    base = model.get("base_model") if isinstance(model.get("base_model"), Mapping) else None
    if base:
        return {"transformers_model": base.get("id"), "license": base.get("license")}
    train = profile.get("train") or {}
    return started_from(train.get("init_from"), train.get("init_config"), depth + 1)


def voice_facts(path: Path, source: Path, name: str | None) -> Any:
    """The `VoiceFacts` of the voice at `path` (a checkpoint or export) given as `source`."""
    from trainer_core.models.vits.piper_voice_files import VoiceFacts

    model, profile, step = source_document(path)
    train, data, run = (
        profile.get("train") or {},
        profile.get("data") or {},
        profile.get("run") or {},
    )
    base = model.get("base_model") if isinstance(model.get("base_model"), Mapping) else None
    origin = {"transformers_model": base.get("id"), "license": base.get("license")} if base else {}
    origin = origin or started_from(train.get("init_from"), train.get("init_config"))
    data_path = data.get("path")
    dataset = origin.get("dataset") or (Path(str(data_path)).name if data_path else None)
    run_name = run.get("name") or source.absolute().name
    return VoiceFacts(
        name=name or str(run_name),
        quality_label=model.get("quality") or (profile.get("vits") or {}).get("quality"),
        dataset=str(dataset) if dataset else None,
        license=origin.get("license"),
        source=str(path),
        step=step,
        base={key: value for key, value in origin.items() if value and key != "license"},
    )


def run_piper(args: argparse.Namespace) -> int:
    from trainer_core.cli.evaluate_cmd import load_voice
    from trainer_core.cli.vits_voice import VitsVoice
    from trainer_core.models.vits.piper_export import TOLERANCE, export_piper
    from trainer_core.models.vits.piper_voice_files import voice_name
    from trainer_core.models.vits.symbols import PIPER_FRONTEND

    source: Path = args.piper
    if not source.exists():
        fix = "name a vits run folder, checkpoint or export"
        raise VegaError(f"--piper {source}: no such file or folder; {fix}")
    if args.name is not None:
        voice_name(args.name)  # a bad name fails before the model is loaded
    voice, path = load_voice(source, "cpu")
    if not isinstance(voice, VitsVoice):
        raise VegaError(
            f"{path} is a two-stage voice (an acoustic model and a vocoder): export --piper "
            'writes vits voices (model.kind = "vits"); export this one with export --onnx'
        )
    speaker = voice.speaker
    scales = {
        "noise_scale": speaker.noise_scale,
        "noise_scale_w": speaker.noise_scale_w,
        "length_scale": speaker.length_scale,
    }
    out = args.out if args.out is not None else default_out(source)
    facts = voice_facts(path, source, args.name)
    names, rate = voice.speaker_names, voice.audio.sample_rate
    result = export_piper(voice.model, voice.encoder, names, rate, scales, facts, out)
    symbols = voice.encoder
    if symbols.units == "phonemes" and symbols.frontend != PIPER_FRONTEND:
        print(OLD_FRONTEND, file=sys.stderr)
    if args.json:
        written = {"onnx": str(result.onnx), "config": str(result.config)}
        print_json({**written, "measured": result.measured})
        return 0
    print(f"wrote {result.onnx}")
    print(f"  and {result.config} (voice from {path})")
    gap = result.measured["audio"]
    print(f"onnxruntime matches torch within {gap:.1e} (allowed {TOLERANCE:.0e})")
    print(f"speak it: python -m piper -m {result.onnx} -f out.wav -- 'Hello.'")
    return 0
