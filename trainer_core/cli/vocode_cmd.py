"""`trainer-core vocode`: re-synthesise a recording through a vocoder, to judge
the vocoder on your own audio.

    trainer-core vocode --vocoder runs/vocoder-small-…/ --in my-voice.flac --out heard.wav
    trainer-core vocode --vocoder griffin-lim --in my-voice.mp3 --out heard.wav

The recording (wav, flac, ogg or mp3; any sample rate; stereo is mixed down) is decoded and
resampled to the vocoder's sample rate, turned into a log-mel by Vega's own mel code with the
vocoder's audio features, and turned back into audio by the vocoder. Griffin-Lim uses the [audio]
settings of `--profile` (default: the defaults every shipped profile uses). Nothing is trimmed or
normalised, so the result lines up with the input.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from trainer_core.cli.commands import SUMMARIES
from trainer_core.cli.common import print_json
from trainer_core.contract.errors import VegaError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("vocode", help=SUMMARIES["vocode"], description=SUMMARIES["vocode"])
    parser.add_argument(
        "--vocoder",
        required=True,
        metavar="V",
        help='"griffin-lim", or a trained vocoder\'s run folder, checkpoint or export folder',
    )
    parser.add_argument(
        "--in", dest="source", type=Path, required=True, metavar="CLIP", help="wav/flac/ogg/mp3"
    )
    parser.add_argument(
        "--out", type=Path, required=True, metavar="FILE.wav", help="where to write the result"
    )
    parser.add_argument(
        "--profile",
        metavar="P",
        help="Griffin-Lim only: take the [audio] settings from this profile",
    )
    parser.add_argument(
        "--griffin-lim-iters", type=int, default=32, metavar="N", help="Griffin-Lim iterations"
    )
    parser.add_argument(
        "--device", default="cpu", help="torch device to run the vocoder on (default: cpu)"
    )
    parser.add_argument("--json", action="store_true", help="print what was written as JSON")
    parser.set_defaults(handler=run)


def _audio_settings(profile: str | None):  # -> AudioSection
    from trainer_core.contract.profile_audio import AudioSection
    from trainer_core.contract.profile_loader import load_profile

    return load_profile(profile).audio if profile else AudioSection()


def run(args: argparse.Namespace) -> int:
    from trainer_core.data.audio import AudioDecodeError, load_audio
    from trainer_core.data.mel import MelExtractor
    from trainer_core.models.griffin_lim import write_wav
    from trainer_core.models.mel_vocoders import open_vocoder

    if not args.source.is_file():
        raise VegaError(f"--in {args.source}: no such file")
    vocoder = open_vocoder(
        args.vocoder, _audio_settings(args.profile), args.device, args.griffin_lim_iters
    )
    audio = vocoder.audio
    try:
        wave = load_audio(args.source, audio.sample_rate, trim_silence=False, normalize=False)
    except AudioDecodeError as exc:
        raise VegaError(f"--in {args.source}: {exc}") from exc
    mel = MelExtractor(audio)([wave])[0]
    heard = vocoder(mel)[: len(wave)]
    path = write_wav(args.out, heard, audio.sample_rate)
    result = {
        "out": str(path),
        "vocoder": vocoder.name,
        "seconds": len(heard) / audio.sample_rate,
        "sample_rate": audio.sample_rate,
    }
    if args.json:
        print_json(result)
    else:
        print(
            f"wrote {path} ({result['seconds']:.2f} s at {audio.sample_rate} Hz) through"
            f" {vocoder.name}"
        )
    return 0
