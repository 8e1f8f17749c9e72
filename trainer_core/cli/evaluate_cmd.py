"""`trainer-core evaluate`: score a trained voice on sentences of a voice folder,
spoken without teacher forcing.

    trainer-core evaluate runs/demo-…                 --data my-voice/     # the run's best (else
                                                      newest) checkpoint
    trainer-core evaluate runs/demo-…/checkpoints/step-00000400.pt --data my-voice/ --json
    trainer-core evaluate runs/demo-…/export          --data my-voice/ --all

The sentences are the folder's held-out split (the same rule training uses, by item id, so a run's
own data folder gives its validation sentences), spread over their lengths; `--all` scores every
item. Two runs evaluated on the same folder are scored on the same sentences. Each score is printed
beside the floor: the recordings re-synthesised through the same vocoder. A voice with several
speakers says each sentence as the speaker of its recording (read by the run's data.speakers); a
speaker the voice does not know is spoken by its first speaker, and a note says how many were.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_core.cli.commands import SUMMARIES
from trainer_core.cli.common import print_json
from trainer_core.contract.errors import VegaError

if TYPE_CHECKING:
    from trainer_core.cli.synthesiser import Synthesiser
    from trainer_core.cli.vits_voice import VitsVoice
    from trainer_core.data.scan_report import VoiceItem
    from trainer_core.models.free_running import HeldOutSentence


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "evaluate",
        help=SUMMARIES["evaluate"],
        description=(
            "Speak held-out sentences of DIR with a trained voice and score them against their"
            " recordings: DTW-aligned log-mel distance, duration ratio and voicing agreement,"
            " beside the vocoder's floor."
        ),
    )
    parser.add_argument(
        "source", type=Path, metavar="RUN|CHECKPOINT|EXPORT", help="a run folder, .pt or export"
    )
    parser.add_argument(
        "--data", type=Path, required=True, metavar="DIR", help="a voice folder with transcripts"
    )
    how_many = parser.add_mutually_exclusive_group()
    how_many.add_argument(
        "--items", type=int, default=None, metavar="N", help="sentences to score (default 8)"
    )
    how_many.add_argument(
        "--all", action="store_true", help="score every item of the folder, not the held-out ones"
    )
    parser.add_argument(
        "--vocoder",
        default="griffin-lim",
        metavar="V",
        help=(
            'what the sentences and the floor are heard through: "griffin-lim" (default, the same'
            " for every voice) or a trained vocoder's run folder, checkpoint or export"
        ),
    )
    parser.add_argument("--device", default="cpu", help="torch device for the model (default: cpu)")
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")
    parser.set_defaults(handler=run)


def resolve_source(source: Path) -> tuple[str, Path]:
    """("checkpoint" | "export", path): a run folder means its best checkpoint, else its newest."""
    from trainer_core.engine.checkpoint_manager import checkpoint_dir, list_checkpoints, read_best

    if source.is_file():
        return "checkpoint", source
    if (source / "model.safetensors").is_file():
        return "export", source
    folder = checkpoint_dir(source)
    best = read_best(folder)
    if best is not None:
        return "checkpoint", folder / best["path"]
    found = list_checkpoints(folder)
    if found:
        return "checkpoint", found[-1]
    raise VegaError(
        f"{source}: not a checkpoint file, an export folder or a run folder with checkpoints"
    )


def load_voice(source: Path, device: str) -> tuple[Synthesiser | VitsVoice, Path]:
    from trainer_core.cli.synthesiser import load_from_checkpoint, load_from_export

    kind, path = resolve_source(source)
    synth = (
        load_from_checkpoint(path, device)
        if kind == "checkpoint"
        else load_from_export(path, device)
    )
    return synth, path


def choose_sentences(
    synth: Synthesiser | VitsVoice, items: list[VoiceItem], count: int | None, every: bool
) -> list[Any]:
    """The held-out split of `items` by the run's data settings (an export:
    the defaults), spread by length."""
    from trainer_core.contract.profile import DataSection
    from trainer_core.data.voice_dataset import split_items
    from trainer_core.models.free_running import HeldOutSentence, pick_sentences

    ids = {name: number for number, name in enumerate(synth.speaker_names)}
    sentences = [
        HeldOutSentence(i.item_id, i.text, i.path, ids.get(i.speaker))
        for i in items
        if synth.encoder.encode(i.text)
    ]
    if every:
        return sentences
    data = synth.data or DataSection()
    flags = {i.item_id: i.held_out for i in items}  # a corpus's own split (Common Voice dev/test)
    names = [s.item_id for s in sentences]
    held_out = [flags[name] for name in names]
    _, held = split_items(names, data.val_fraction, data.val_max_items, held_out)
    pool = [sentences[i] for i in held] or sentences
    seconds = {i.item_id: i.duration_s for i in items}
    picked = pick_sentences(pool, [seconds[s.item_id] for s in pool], count or 8)
    return [pool[k] for k in picked]


def run(args: argparse.Namespace) -> int:
    from trainer_core.cli.synth_cmd import _check_device
    from trainer_core.cli.vits_voice import VitsVoice
    from trainer_core.data.cache_location import cache_folder
    from trainer_core.data.scan import scan_data
    from trainer_core.data.scan_report import VoiceItem
    from trainer_core.models.eval_cache import EvalCache
    from trainer_core.models.free_running import FreeRunning, evaluate_free_running
    from trainer_core.models.mel_vocoders import load_vocoder

    if args.items is not None and args.items < 1:
        raise VegaError(f"--items must be at least 1, got {args.items}")
    synth, path = load_voice(args.source, _check_device(args.device))
    report = scan_data(
        args.data, mode="voice", speakers=synth.data.speakers if synth.data else "auto"
    )
    items = [item for item in report.items if isinstance(item, VoiceItem)]
    sentences: list[HeldOutSentence] = choose_sentences(synth, items, args.items, args.all)
    if not sentences:
        raise VegaError(
            f"{args.data}: no transcript has a symbol this voice knows; nothing to evaluate"
        )
    _note_unknown_speakers(synth, sentences, items)
    if isinstance(synth, VitsVoice):  # it speaks audio itself: its own decoder makes the floor
        result = synth.free_running(sentences)
    else:
        vocoder = load_vocoder(
            args.vocoder, synth.audio, synth.model_device, synth.tts.griffin_lim_iters
        )
        # the floor, kept beside the feature cache
        cache = EvalCache(cache_folder(None) / "evaluation")
        trained = vocoder if vocoder.trained else None
        free = FreeRunning(sentences, synth.audio, synth.tts, vocoder=trained, cache=cache)
        result = evaluate_free_running(free, synth.model, synth.encoder)
    out = {
        "source": str(path),
        "data": str(args.data),
        "vocoder": result.vocoder,
        "scores": result.scores.to_dict(),
        "floor": result.floor.to_dict(),
        "seconds": result.seconds,
    }
    print_json(out) if args.json else print_table(out)
    return 0


def _note_unknown_speakers(
    synth: Synthesiser | VitsVoice, sentences: list[HeldOutSentence], items: list[VoiceItem]
) -> None:
    """A multi-speaker voice hears recordings of speakers it was not trained on
    with its first speaker: say so."""
    if len(synth.speaker_names) < 2:
        return
    speaker_of = {item.path: item.speaker for item in items}
    unknown = sorted({speaker_of[s.path] or "(none)" for s in sentences if s.speaker is None})
    if unknown:
        print(
            f"note: speakers this voice does not know ({', '.join(unknown)}) are spoken by its"
            f" first speaker, {synth.speaker_names[0]}",
            file=sys.stderr,
        )


def print_table(out: dict[str, Any]) -> None:
    scores, floor = out["scores"], out["floor"]
    print(
        f"{out['source']} on {len(scores['items'])} sentences of {out['data']} (vocoder:"
        f" {out['vocoder']})"
    )
    print(f"{'item':<28} {'distance':>9} {'floor':>7} {'duration':>9} {'voicing':>8} {'pitch':>11}")
    for mine, base in zip(scores["items"], floor["items"], strict=True):
        print(
            f"{mine['item_id'][:28]:<28} {mine['distance']:>9.3f} {base['distance']:>7.3f}"
            f" {_rest(mine)}"
        )
    print(f"{'mean':<28} {scores['distance']:>9.3f} {floor['distance']:>7.3f} {_rest(scores)}")


def _rest(row: dict[str, Any]) -> str:
    cents = row.get("f0_error_cents")
    pitch = f"{cents:>6.0f} cents" if cents is not None else f"{'—':>11}"
    return f"{row['duration_ratio']:>8.2f}x {100 * row['vuv_agreement']:>7.1f}% {pitch}"
