"""`trainer-core synth`: speak a sentence with a trained TTS model, from a checkpoint or an export.

    trainer-core synth --checkpoint runs/demo-…/checkpoints/step-00000200.pt --text "Hello." --out hello.wav
    trainer-core synth --export runs/demo-…/export --text "Hello." --out hello.wav --length-scale 1.2
    trainer-core synth --checkpoint C --text-file lines.txt --out-dir spoken/   # one wav per line + index

A checkpoint carries the weights (with the text vocabulary in the model's `text_symbols` buffer) and
the run's profile TOML (architecture sizes, audio parameters, text settings). An export carries the
weights as safetensors and everything else in config.json's "model" entry. Either way the model is
rebuilt, its durations predicted, and the mel turned into audio with Griffin-Lim (torch, no librosa).
Only what speaking needs is imported, so a cold call is quick; `--text-file` speaks many lines with one
loaded model, and a line that cannot be spoken is listed in the index while the others are written.
"""

from __future__ import annotations

import argparse
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_core.cli.common import print_json
from trainer_core.contract.errors import VegaError

if TYPE_CHECKING:
    from trainer_core.contract.profile import AudioSection, TtsSection
    from trainer_core.models.text_frontend import TextEncoder
    from trainer_core.models.tts import AcousticModel

# Prefixes a wrapped model (DistributedDataParallel, torch.compile) adds to state dict names.
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


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
        help="synthesise speech from text with a trained TTS checkpoint or export",
        description="Speak TEXT with a trained voice (Griffin-Lim audio) and write a 16-bit WAV file.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", type=Path, metavar="FILE", help="a checkpoint .pt written by training")
    source.add_argument("--export", type=Path, metavar="DIR", help="an export folder (model.safetensors + config.json)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--text", help="the text to say (with --out)")
    what.add_argument(
        "--text-file",
        type=Path,
        metavar="FILE",
        help="UTF-8 text, one sentence per line: each non-empty line becomes a wav (with --out-dir)",
    )
    parser.add_argument("--out", type=Path, metavar="FILE.wav", help="where to write the audio of --text")
    parser.add_argument(
        "--out-dir",
        type=Path,
        metavar="DIR",
        help="folder for --text-file: NNNN.wav per line (NNNN = the line number), index.json, index.csv",
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
    parser.add_argument("--device", default="cpu", help="torch device to run the model on (default: cpu)")
    parser.add_argument("--json", action="store_true", help="print what was written as JSON")
    parser.set_defaults(handler=run)


@dataclass
class Synthesiser:
    """A rebuilt TTS model with what it needs to turn text into a WAV file."""

    model: AcousticModel
    encoder: TextEncoder
    audio: AudioSection
    tts: TtsSection


def _strip_wrappers(state: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, value in state.items():
        for prefix in WRAPPER_PREFIXES:
            name = name.removeprefix(prefix)
        out[name] = value
    return out


def _profile_from_checkpoint(state: dict[str, Any], path: Path):
    from trainer_core.contract.profile_loader import load_profile_dict

    text = state.get("profile_toml") or ""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise VegaError(f"checkpoint {path}: its profile TOML does not parse ({exc}); use another checkpoint") from exc
    return load_profile_dict(data, base_dir=path.parent, source=f"{path} (profile_toml)")


def load_from_checkpoint(path: Path, device: str = "cpu") -> Synthesiser:
    """Rebuild the model and text encoder from a training checkpoint (loaded weights-only)."""
    from trainer_core.engine.checkpoint import check_model_compatible, load_checkpoint
    from trainer_core.models.text_frontend import TextEncoder
    from trainer_core.models.tts import AcousticModel, TtsConfig

    state = load_checkpoint(path)
    weights = _strip_wrappers(state.get("model") or {})
    if "text_symbols" not in weights:
        raise VegaError(f"checkpoint {path} is not a TTS model (no text vocabulary in it); synth needs a voice run")
    profile = _profile_from_checkpoint(state, path)
    codes = [int(c) for c in weights["text_symbols"].tolist()]
    phonemes = "text_phonemes" in weights and int(weights["text_phonemes"]) == 1
    t = profile.tts
    units = "phonemes" if phonemes else "chars"
    encoder = TextEncoder.from_symbol_codes(codes, units, t.lowercase, t.espeak_voice, t.espeak_backend)
    model = AcousticModel(TtsConfig.from_profile(profile, len(codes)), codes, phonemes)
    check_model_compatible(model, weights)
    model.load_state_dict(weights)
    return Synthesiser(model.to(device).eval(), encoder, profile.audio, profile.tts)


def load_from_export(folder: Path, device: str = "cpu") -> Synthesiser:
    """Rebuild the model and text encoder from an export folder (safetensors weights + config.json)."""
    from pydantic import ValidationError

    from trainer_core.contract.profile import AudioSection, TtsSection
    from trainer_core.engine.checkpoint import check_model_compatible
    from trainer_core.engine.export import load_exported
    from trainer_core.models.text_frontend import TextEncoder
    from trainer_core.models.tts import AcousticModel, config_from_dict

    weights, document = load_exported(folder)
    config = document.get("model") or {}
    if config.get("kind") != "tts":
        raise VegaError(f"{folder} holds a {config.get('kind', 'unknown')!r} model, not a TTS voice; synth needs one")
    encoder = TextEncoder.from_state(config.get("text") or {})
    model = AcousticModel(config_from_dict(config), encoder.symbol_codes(), encoder.units == "phonemes")
    check_model_compatible(model, weights)
    model.load_state_dict(weights)
    try:
        audio, tts = AudioSection(**config.get("audio", {})), TtsSection(**config.get("tts", {}))
    except (ValidationError, TypeError) as exc:
        raise VegaError(f"{folder}/config.json has bad audio or tts settings ({exc}); re-export the model") from exc
    return Synthesiser(model.to(device).eval(), encoder, audio, tts)


def synthesise_to_wav(
    synth: Synthesiser, text: str, out: Path, length_scale: float | None = None, iters: int | None = None
) -> dict[str, Any]:
    """Speak `text` into `out`; return what was written."""
    from trainer_core.models.vocoder import mel_to_audio, write_wav

    ids = synth.encoder.encode(text)
    if not ids:
        raise VegaError(f"nothing to say: {text!r} has no symbols after normalisation")
    mel = synth.model.synthesise(ids, length_scale or synth.tts.length_scale)
    wave = mel_to_audio(mel, synth.audio, iters or synth.tts.griffin_lim_iters)
    path = write_wav(out, wave, synth.audio.sample_rate)
    rate = synth.audio.sample_rate
    return {
        "out": str(path),
        "seconds": len(wave) / rate,
        "sample_rate": rate,
        "frames": int(mel.shape[1]),
        "symbols": len(ids),
    }


def _check_outputs(args: argparse.Namespace) -> list[tuple[int, str]] | None:
    """Check the text and output options before a model is loaded; the lines of --text-file, if given."""
    from trainer_core.cli.synth_batch import prepare_out_dir, read_lines

    if args.text is not None:
        if args.out is None or args.out_dir is not None:
            raise VegaError("--text writes one file: give --out FILE.wav (--out-dir goes with --text-file)")
        return None
    if args.out_dir is None or args.out is not None:
        raise VegaError("--text-file writes one wav per line: give --out-dir DIR (--out goes with --text)")
    lines = read_lines(args.text_file)
    prepare_out_dir(args.out_dir)
    return lines


def _speak_lines(synth: Synthesiser, lines: list[tuple[int, str]], args: argparse.Namespace) -> int:
    from trainer_core.cli.synth_batch import speak_lines, write_index

    rows = speak_lines(synth, lines, args)
    write_index(args.out_dir, rows)
    failed = [row for row in rows if row["error"]]
    if args.json:
        print_json({"out_dir": str(args.out_dir), "written": len(rows) - len(failed), "failed": failed})
    else:
        seconds = sum(row["seconds"] or 0.0 for row in rows)
        print(
            f"wrote {len(rows) - len(failed)} wavs ({seconds:.1f} s of speech) and index.json/index.csv to "
            f"{args.out_dir}"
        )
        for row in failed:
            print(f"  line {row['line']} not spoken: {row['error']}")
    return 1 if failed else 0


def _check_device(name: str) -> str:
    import torch

    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise VegaError(f"--device {name!r} is not a torch device ({exc}); try cpu, cuda or mps") from exc
    missing = (device.type == "cuda" and not torch.cuda.is_available()) or (
        device.type == "mps" and not torch.backends.mps.is_available()
    )
    if missing:
        raise VegaError(f"--device {name}: this machine has no usable {device.type.upper()} device; use --device cpu")
    return str(device)


def run(args: argparse.Namespace) -> int:
    lines = _check_outputs(args)
    device = _check_device(args.device)
    if args.checkpoint is not None:
        synth = load_from_checkpoint(args.checkpoint, device)
    else:
        synth = load_from_export(args.export, device)
    if lines is not None:
        return _speak_lines(synth, lines, args)
    result = synthesise_to_wav(synth, args.text, args.out, args.length_scale, args.griffin_lim_iters)
    if args.json:
        print_json(result)
    else:
        print(f"wrote {result['out']} ({result['seconds']:.2f} s at {result['sample_rate']} Hz)")
    return 0
