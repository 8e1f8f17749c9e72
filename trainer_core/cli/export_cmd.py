"""`trainer-core export --onnx`: a voice as ONNX graphs and a JSON config, to speak with onnxruntime
and no torch. (`--hf`: a vits voice as a transformers folder, `cli.hf_export`; `--piper`: a vits
voice as a Piper voice, `cli.piper_export`.)

    trainer-core export --onnx runs/demo-…                              # its best checkpoint ->
        runs/demo-…/onnx/
    trainer-core export --onnx runs/demo-…/export --out voice-onnx/ --vocoder runs/vocoder-…
    trainer-core synth --onnx voice-onnx/ --text "Hello." --out hello.wav   # torch is not imported

SOURCE is a voice's run folder (its best checkpoint, else its newest, as `evaluate` reads it), a
checkpoint or an export folder. The vocoder is --vocoder, else the voice's tts.vocoder: a trained
one is exported beside the acoustic model; with "griffin-lim" the ONNX folder holds the acoustic
model alone and `synth --onnx` runs Griffin-Lim in numpy. Both graphs are checked against torch
before anything is written (`cli.onnx_export`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from trainer_core.cli.commands import SUMMARIES
from trainer_core.cli.common import print_json
from trainer_core.contract.errors import VegaError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "export",
        help=SUMMARIES["export"],
        description=(
            "Export a trained voice (and its trained vocoder, when it has one) as ONNX graphs with"
            " a config.json, checked against torch, for `trainer-core synth --onnx` or any"
            " onnxruntime; or (--hf) a vits voice as a transformers VITS folder for transformers'"
            " VitsModel and text-to-speech pipeline; or (--piper) a vits voice as a Piper voice"
            " (.onnx + .onnx.json) that Piper's runtime speaks."
        ),
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--onnx",
        type=Path,
        metavar="SOURCE",
        help=(
            "the voice to export: a run folder (its best checkpoint), a checkpoint .pt or an export"
            " folder"
        ),
    )
    what.add_argument(
        "--hf",
        type=Path,
        metavar="SOURCE",
        help=(
            "a vits voice as a transformers VITS folder (VitsModel, VitsTokenizer, pipeline): its"
            " run folder, checkpoint or export"
        ),
    )
    what.add_argument(
        "--piper",
        type=Path,
        metavar="SOURCE",
        help=(
            "a vits voice as a Piper voice (LANG_REGION-NAME-QUALITY.onnx and .onnx.json): its run"
            " folder (its best checkpoint), checkpoint or export"
        ),
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help=(
            "folder to write (default: onnx/, hf/ or export/piper/ in SOURCE's run folder, else"
            " SOURCE-onnx, SOURCE-hf or SOURCE-piper beside it)"
        ),
    )
    parser.add_argument(
        "--name",
        metavar="NAME",
        help="--piper: the voice's name in its file names (default: the run's name)",
    )
    parser.add_argument(
        "--vocoder",
        metavar="V",
        help=(
            '"griffin-lim" (no vocoder graph), or a trained vocoder\'s run folder, checkpoint or'
            " export (default: the voice's tts.vocoder)"
        ),
    )
    parser.add_argument("--json", action="store_true", help="print the written config.json")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.hf is not None:
        from trainer_core.cli.hf_export import run_hf

        return run_hf(args)
    if args.piper is not None:
        from trainer_core.cli.piper_export import run_piper

        return run_piper(args)
    if args.name is not None:
        raise VegaError("--name goes with --piper (the Piper voice's file name)")
    from trainer_core.cli.evaluate_cmd import load_voice
    from trainer_core.cli.onnx_export import default_out, export_voice
    from trainer_core.cli.synthesiser import Synthesiser
    from trainer_core.models.mel_vocoders import load_vocoder

    source: Path = args.onnx
    if not source.exists():
        raise VegaError(
            f"--onnx {source}: no such file or folder; name a voice's run folder, checkpoint or"
            " export"
        )
    synth, path = load_voice(source, "cpu")
    if not isinstance(synth, Synthesiser):
        raise VegaError(
            f"{path} is a vits voice: export --onnx writes two-stage voices (an acoustic model and"
            " a vocoder); a vits voice speaks through trainer-core synth with its run, checkpoint"
            " or export"
        )
    vocoder = load_vocoder(
        args.vocoder if args.vocoder is not None else synth.tts.vocoder, synth.audio, "cpu"
    )
    out = args.out if args.out is not None else default_out(source)
    document = export_voice(synth, vocoder, out, path)
    if args.json:
        print_json({"out": str(out), **document})
        return 0
    files = [
        document["acoustic"]["file"],
        *([document["vocoder"]["file"]] if document["vocoder"] else []),
    ]
    measured = document["tolerance"]["measured"]
    print(f"wrote {', '.join(files)} and config.json to {out} (voice from {path})")
    vocoder_line = (
        f", audio {measured['audio']:.1e}"
        if measured["audio"] is not None
        else " (Griffin-Lim: no vocoder)"
    )
    print(
        f"onnxruntime matches torch within {document['tolerance']['max_abs_diff']:.0e}: log-mel"
        f" {measured['mel']:.1e}{vocoder_line}"
    )
    return 0
