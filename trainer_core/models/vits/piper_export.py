"""A Vega vits voice as a Piper voice: the ONNX graph (`piper_graph`), checked, and its voice
config (`piper_voice_files`), written where Piper's runtime reads voices (`export --piper`).

The check runs the exported graph with onnxruntime beside the generator's own `Synthesizer.infer`
(what `trainer-core synth` speaks through), noise scales 0, on Piper-framed inputs of
`CHECK_SYMBOLS` lengths (none the traced length), as the speakers at either end of a multi-speaker
voice: the durations must be the same and the audio within `TOLERANCE`; then once at the voice's
own scales (finite audio). A graph that misses is refused before anything is written. The files go
to a staging folder beside the destination, then into place, the config last: a folder with the
config holds its graph.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer_core import __version__ as VEGA_VERSION
from trainer_core.atomic import fsync_dir
from trainer_core.models.onnx_voice import start_session
from trainer_core.models.vits.piper_graph import OPSET, PiperGraph, export_graph, framed_ids
from trainer_core.models.vits.piper_voice_files import (
    PiperExportError,
    VoiceFacts,
    file_stem,
    language_of,
    quality_of,
    voice_config,
)
from trainer_core.models.vits.symbols import BOS, EOS, PAD

if TYPE_CHECKING:
    from collections.abc import Mapping

    from trainer_core.models.vits.symbols import SymbolTable
    from trainer_core.models.vits.synthesizer import Synthesizer

# Largest |onnxruntime - torch| allowed on audio samples (full scale 1); measured: about 1e-6.
TOLERANCE = 1e-4
# Symbols of the inputs the graph is checked on (ids: 2 * symbols + 3), and of the traced one.
CHECK_SYMBOLS = (1, 6)
TRACE_SYMBOLS = 4
NOTHING = "; nothing was written"


@dataclass(frozen=True)
class PiperExport:
    """What was written: the graph, its voice config, the largest differences the check measured."""

    onnx: Path
    config: Path
    measured: dict[str, float]
    document: dict[str, Any]


def sample_ids(symbols: SymbolTable, count: int) -> list[int]:
    """Piper-framed ids of `count` symbols of the voice's map, picked at random (seed: `count`)."""
    framing = (PAD, BOS, EOS)
    pool = sorted({ids[0] for sym, ids in symbols.id_map.items() if sym not in framing and ids})
    if not pool:
        raise PiperExportError("the voice's symbol map holds no symbol besides the framing ones")
    rng = random.Random(count)
    picks = [rng.choice(pool) for _ in range(count)]
    first = symbols.id_map
    return framed_ids(picks, first[PAD][0], first[BOS][0], first[EOS][0])


def check_graph(
    graph: bytes, generator: Synthesizer, symbols: SymbolTable, scales: Mapping[str, float]
) -> dict[str, float]:
    """Largest |onnxruntime - torch| on the audio over the check's inputs; PiperExportError on a
    miss (other durations, another length, a larger difference, non-finite audio)."""
    session = start_session(graph, "the Piper graph")
    speakers = sorted({0, generator.n_speakers - 1}) if generator.n_speakers > 1 else [None]
    worst = 0.0
    for count, speaker in itertools.product(CHECK_SYMBOLS, speakers):
        ids = sample_ids(symbols, count)
        where = f"{len(ids)} ids" + (f", speaker {speaker}" if speaker is not None else "")
        worst = max(worst, _difference(session, generator, ids, speaker, where))
        if worst > TOLERANCE:
            raise PiperExportError(
                f"the Piper graph differs from torch by up to {worst:.2e} in the audio ({where}), "
                f"more than {TOLERANCE:.0e}{NOTHING}"
            )
    own = (scales["noise_scale"], scales["length_scale"], scales["noise_scale_w"])
    audio, _ = _run(session, sample_ids(symbols, CHECK_SYMBOLS[0]), own, speakers[0], "own scales")
    if not np.isfinite(audio).all():
        raise PiperExportError(f"the Piper graph speaks non-finite audio at its scales{NOTHING}")
    return {"audio": worst}


def _difference(
    session: Any,
    generator: Synthesizer,
    ids: list[int],
    speaker: int | None,
    where: str,
) -> float:
    """|onnxruntime - torch| on one input, noise scales 0; PiperExportError when lengths differ."""
    import torch

    with torch.no_grad(), torch.random.fork_rng():
        sid = torch.tensor([speaker]) if speaker is not None else None
        x, x_lengths = torch.tensor([ids]), torch.tensor([len(ids)])
        spoken = generator.infer(x, x_lengths, sid, 0.0, 1.0, 0.0)
    audio, durations = _run(session, ids, (0.0, 1.0, 0.0), speaker, where)
    if not np.array_equal(durations.reshape(-1), spoken.durations[0].numpy()):
        raise PiperExportError(f"the graph's durations differ from torch's ({where}){NOTHING}")
    expected = spoken.audio[0, 0].numpy()
    if audio.size != expected.size:
        samples = f"{audio.size} samples where torch speaks {expected.size}"
        raise PiperExportError(f"the Piper graph speaks {samples} ({where}){NOTHING}")
    return float(np.abs(audio.reshape(-1) - expected).max())


def _run(
    session: Any,
    ids: list[int],
    scales: tuple[float, float, float],
    speaker: int | None,
    where: str,
) -> Any:
    try:
        return session.run(None, _feeds(ids, scales, speaker))
    except Exception as exc:  # onnxruntime raises its own types; a graph that cannot run is a miss
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PiperExportError(f"the Piper graph fails on {where}: {first}{NOTHING}") from exc


def _feeds(
    ids: list[int],
    scales: tuple[float, float, float],
    speaker: int | None,
) -> dict[str, np.ndarray]:
    feeds: dict[str, np.ndarray] = {
        "input": np.asarray([ids], dtype=np.int64),
        "input_lengths": np.asarray([len(ids)], dtype=np.int64),
        "scales": np.asarray(scales, dtype=np.float32),
    }
    if speaker is not None:
        feeds["sid"] = np.asarray([speaker], dtype=np.int64)
    return feeds


def export_piper(
    generator: Synthesizer,
    symbols: SymbolTable,
    speaker_names: list[str],
    sample_rate: int,
    scales: Mapping[str, float],
    facts: VoiceFacts,
    out: Path,
) -> PiperExport:
    """Export, check and write the voice to `out/<stem>.onnx` and `.onnx.json`; PiperExportError,
    with nothing written, when the voice cannot be a Piper voice or its graph misses the check."""
    if symbols.mms is not None:
        raise PiperExportError(
            "export --piper: this voice reads text with a transformers (MMS) tokenizer, whose ids "
            "Piper's runtime cannot make; export it with export --hf"
        )
    if out.exists() and not out.is_dir():
        raise PiperExportError(f"--out {out} is a file; name a folder (it is created when missing)")
    stem = file_stem(
        language_of(symbols.espeak_voice),
        facts.name,
        quality_of(facts.quality_label, generator.config, sample_rate),
    )
    generator = generator.cpu().eval()
    graph = export_graph(PiperGraph(generator), sample_ids(symbols, TRACE_SYMBOLS))
    measured = check_graph(graph, generator, symbols, scales)
    tolerance = {
        "max_abs_diff": TOLERANCE,
        "measured": measured,
        "opset": OPSET,
        "input_ids": [2 * count + 3 for count in CHECK_SYMBOLS],
    }
    document = voice_config(
        config=generator.config,
        symbols=symbols.state_dict(),
        speaker_names=speaker_names,
        sample_rate=sample_rate,
        scales=scales,
        facts=facts,
        vega_version=VEGA_VERSION,
        tolerance=tolerance,
    )
    onnx_path, config_path = write_voice(out, stem, graph, document)
    return PiperExport(onnx_path, config_path, measured, document)


def write_voice(
    out: Path,
    stem: str,
    graph: bytes,
    document: Mapping[str, Any],
) -> tuple[Path, Path]:
    """Write `stem.onnx` and `stem.onnx.json` in a staging folder beside `out`, then move them in
    (the config last); a new `out` is the staging folder renamed."""
    import json

    out = out.absolute()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = out.parent / f".{out.name}.piper.{os.getpid()}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
    except OSError as exc:
        raise PiperExportError(f"--out {out}: cannot be created ({exc.strerror or exc})") from None
    names = (f"{stem}.onnx", f"{stem}.onnx.json")
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    try:
        for name, data in zip(names, (graph, text.encode("utf-8")), strict=True):
            with open(staging / name, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
        if not out.exists():
            os.replace(staging, out)
        else:
            for name in names:
                os.replace(staging / name, out / name)
            staging.rmdir()
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        reason = exc.strerror or exc
        raise PiperExportError(f"could not write the Piper voice to {out}: {reason}") from exc
    fsync_dir(out)
    fsync_dir(out.parent)
    return out / names[0], out / names[1]
