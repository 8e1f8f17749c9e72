"""`trainer-core synth`: speak a sentence with a trained TTS model, from a checkpoint or an export.

    trainer-core synth --checkpoint runs/demo-…/checkpoints/step-00000200.pt --text "Hello." --out
    hello.wav trainer-core synth --export runs/demo-…/export --text "Hello." --out hello.wav
    --length-scale 1.2 trainer-core synth --checkpoint C --text-file lines.txt --out-dir spoken/   #
    one wav per line + index trainer-core synth --export runs/multi-…/export --speaker alice --text
    "Hello." --out alice.wav trainer-core synth --onnx runs/demo-…/onnx --text "Hello." --out
    hello.wav   # onnxruntime, no torch

A checkpoint carries the weights (with the text vocabulary in the model's `text_symbols` buffer) and
the run's profile TOML (architecture sizes, audio parameters, text settings). An export carries the
weights as safetensors and everything else in config.json's "model" entry. Either way the model is
rebuilt, its durations predicted, and the mel turned into audio by the vocoder (`--vocoder`,
default the profile's tts.vocoder: Griffin-Lim in torch, or a trained GAN vocoder with the same
audio features). Only what speaking needs is imported, so a cold call is quick; `--text-file`
speaks many lines with one loaded model, and a line that cannot be spoken is listed in the
index while the others are written.

`--onnx DIR` speaks an ONNX export (`trainer-core export --onnx`) with onnxruntime and numpy
and never imports torch: the text front end, the graphs, Griffin-Lim in numpy when the export
has no vocoder, the WAV writer.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_core.cli.commands import SUMMARIES
from trainer_core.cli.common import print_json
from trainer_core.cli.synthesiser import (
    Synthesiser,
    load_from_checkpoint,
    load_from_export,
    synthesise_to_wav,
)
from trainer_core.cli.vits_voice import VitsVoice
from trainer_core.contract.errors import VegaError

if TYPE_CHECKING:
    from trainer_core.models.onnx_voice import OnnxVoice


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "synth",
        help=SUMMARIES["synth"],
        description=(
            "Speak TEXT with a trained voice (through Griffin-Lim or a trained vocoder) into a"
            " 16-bit WAV."
        ),
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--checkpoint", type=Path, metavar="FILE", help="a checkpoint .pt written by training"
    )
    source.add_argument(
        "--export",
        type=Path,
        metavar="DIR",
        help="an export folder (model.safetensors + config.json)",
    )
    source.add_argument(
        "--onnx",
        type=Path,
        metavar="DIR",
        help=(
            "an ONNX export (trainer-core export --onnx): spoken with onnxruntime and numpy,"
            " without torch"
        ),
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--text", help="the text to say (with --out)")
    what.add_argument(
        "--text-file",
        type=Path,
        metavar="FILE",
        help=(
            "UTF-8 text, one sentence per line: each non-empty line becomes a wav (with --out-dir)"
        ),
    )
    parser.add_argument(
        "--out", type=Path, metavar="FILE.wav", help="where to write the audio of --text"
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        metavar="DIR",
        help=(
            "folder for --text-file: NNNN.wav per line (NNNN = the line number), index.json,"
            " index.csv"
        ),
    )
    parser.add_argument(
        "--length-scale",
        type=_positive_float,
        default=None,
        metavar="X",
        help="speaking-rate factor: above 1 is slower (default: the profile's tts.length_scale)",
    )
    parser.add_argument(
        "--griffin-lim-iters",
        type=_positive_int,
        default=None,
        metavar="N",
        help="Griffin-Lim iterations (default: the profile's tts.griffin_lim_iters)",
    )
    parser.add_argument(
        "--vocoder",
        metavar="V",
        help=(
            '"griffin-lim", or a trained vocoder\'s run folder, checkpoint or export (default: the'
            " profile's tts.vocoder); it must have been trained on the voice's audio features"
        ),
    )
    parser.add_argument(
        "--speaker",
        metavar="NAME",
        help=(
            "a voice trained on several speakers: who speaks (default: the first; an unknown name"
            " lists them)"
        ),
    )
    parser.add_argument(
        "--device", default=None, help="torch device to run the model on (default: cpu)"
    )
    parser.add_argument("--json", action="store_true", help="print what was written as JSON")
    parser.set_defaults(handler=run)


def _check_outputs(args: argparse.Namespace) -> list[tuple[int, str]] | None:
    """Check the text and output options before a model is loaded; the lines
    of --text-file, if given."""
    from trainer_core.cli.synth_batch import prepare_out_dir, read_lines

    if args.text is not None:
        if args.out is None or args.out_dir is not None:
            raise VegaError(
                "--text writes one file: give --out FILE.wav (--out-dir goes with --text-file)"
            )
        return None
    if args.out_dir is None or args.out is not None:
        raise VegaError(
            "--text-file writes one wav per line: give --out-dir DIR (--out goes with --text)"
        )
    lines = read_lines(args.text_file)
    prepare_out_dir(args.out_dir)
    return lines


def _speak_lines(
    synth: Synthesiser | VitsVoice | OnnxVoice,
    lines: list[tuple[int, str]],
    args: argparse.Namespace,
) -> int:
    from trainer_core.cli.synth_batch import speak_lines, write_index

    rows = speak_lines(synth, lines, args)
    write_index(args.out_dir, rows)
    failed = [row for row in rows if row["error"]]
    if args.json:
        print_json(
            {"out_dir": str(args.out_dir), "written": len(rows) - len(failed), "failed": failed}
        )
    else:
        seconds = sum(row["seconds"] or 0.0 for row in rows)
        print(
            f"wrote {len(rows) - len(failed)} wavs ({seconds:.1f} s of speech) and"
            f" index.json/index.csv to {args.out_dir}"
        )
        for row in failed:
            print(f"  line {row['line']} not spoken: {row['error']}")
    return 1 if failed else 0


def _check_device(name: str) -> str:
    import torch

    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise VegaError(
            f"--device {name!r} is not a torch device ({exc}); try cpu, cuda or mps"
        ) from exc
    missing = (device.type == "cuda" and not torch.cuda.is_available()) or (
        device.type == "mps" and not torch.backends.mps.is_available()
    )
    if missing:
        raise VegaError(
            f"--device {name}: this machine has no usable {device.type.upper()} device; use"
            " --device cpu"
        )
    return str(device)


def _load_onnx(args: argparse.Namespace) -> OnnxVoice:
    """The ONNX voice, checked against the options that only torch voices
    take; torch is never imported."""
    from trainer_core.models.onnx_voice import OnnxVoice

    if args.device not in (None, "cpu"):
        raise VegaError(
            f"--device {args.device}: an ONNX voice runs on the CPU with onnxruntime; leave"
            " --device out"
        )
    if args.vocoder is not None:
        raise VegaError(
            "--vocoder does not go with --onnx: the ONNX folder's vocoder.onnx is its vocoder (else"
            " Griffin-Lim); export again with trainer-core export --onnx SOURCE --vocoder V"
        )
    voice = OnnxVoice.load(args.onnx)
    voice.speaker_id(args.speaker)  # an unknown name fails before any audio is made
    return voice


def run(args: argparse.Namespace) -> int:
    lines = _check_outputs(args)
    if args.onnx is not None:
        voice = _load_onnx(args)
        if lines is not None:
            return _speak_lines(voice, lines, args)
        result = voice.speak_to_wav(
            args.text, args.out, args.length_scale, args.griffin_lim_iters, args.speaker
        )
        return _report(result, args)
    from trainer_core.models.mel_vocoders import load_vocoder

    device = _check_device(args.device or "cpu")
    if args.checkpoint is not None:
        synth = load_from_checkpoint(args.checkpoint, device)
    else:
        synth = load_from_export(args.export, device)
    synth.speaker_id(args.speaker)  # an unknown name fails before any audio is made
    if isinstance(synth, VitsVoice):
        if args.vocoder is not None:
            raise VegaError(
                "--vocoder does not go with a vits voice: it speaks audio itself; leave"
                " --vocoder out"
            )
        if lines is not None:
            return _speak_lines(synth, lines, args)
        return _report(
            synth.speak_to_wav(args.text, args.out, args.length_scale, None, args.speaker), args
        )
    synth.vocoder = load_vocoder(
        args.vocoder if args.vocoder is not None else synth.tts.vocoder,
        synth.audio,
        device,
        args.griffin_lim_iters or synth.tts.griffin_lim_iters,
    )
    if lines is not None:
        return _speak_lines(synth, lines, args)
    result = synthesise_to_wav(
        synth, args.text, args.out, args.length_scale, args.griffin_lim_iters, args.speaker
    )
    return _report(result, args)


def _report(result: dict[str, Any], args: argparse.Namespace) -> int:
    if args.json:
        print_json(result)
    else:
        who = f", speaker {result['speaker']}" if result["speaker"] else ""
        print(
            f"wrote {result['out']} ({result['seconds']:.2f} s at {result['sample_rate']} Hz{who})"
        )
    return 0
