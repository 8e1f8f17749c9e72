"""Writing a voice as ONNX (`trainer-core export --onnx`): the graphs, a check
against torch, and config.json.

The acoustic model (and the vocoder, when it is a trained one) are exported (`models.onnx_graphs`),
then run with onnxruntime on the same inputs as the torch models: PARITY_TEXTS at two speaking rates
for the acoustic graph (the durations must agree exactly, the log-mels within TOLERANCE), and the
torch mels of those for the vocoder graph (the audio within TOLERANCE). A graph that misses is an
error and nothing is left half-written: the files go in atomically, config.json last, so a folder
with a config.json is a complete export. config.json records the measured differences beside the
tolerance (its layout: `models.onnx_voice`).
"""

from __future__ import annotations

import copy
import itertools
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer_core import __version__ as VEGA_VERSION
from trainer_core.atomic import atomic_write, atomic_write_text
from trainer_core.contract.errors import VegaError
from trainer_core.contract.rundir import ONNX, is_run_dir
from trainer_core.models.onnx_voice import (
    ACOUSTIC_FILENAME,
    CONFIG_FILENAME,
    ONNX_FORMAT,
    ONNX_VERSION,
    VOCODER_FILENAME,
    start_session,
)

if TYPE_CHECKING:
    from trainer_core.cli.synthesiser import Synthesiser
    from trainer_core.models.mel_vocoders import MelVocoder

# Largest absolute difference allowed between onnxruntime and torch: on log-mels
# (natural log of mel power) and on audio samples (full scale 1). Measured differences
# on the tiny test voices are about 1e-6.
TOLERANCE = 1e-4
PARITY_TEXTS = ("The quick brown fox jumps over the lazy dog.", "Hello, world!", "A")
PARITY_SCALES = (1.0, 1.3)
ACOUSTIC_IO = {
    "inputs": {
        "ids": "int64 (1, tokens): text symbol ids (the text section's symbols, by position)",
        "length_scale": "float32 (1,): speaking-rate factor, above 1 is slower (tts.length_scale)",
    },
    "outputs": {
        "mel": "float32 (1, n_mels, frames): natural-log mel power",
        "durations": "int64 (1, tokens): whole frames per token",
    },
}
SPEAKER_INPUT = "int64 (1,): speaker id, the position of its name in speakers"
VOCODER_IO = {
    "inputs": {"mel": "float32 (batch, n_mels, frames): natural-log mel power"},
    "outputs": {"audio": "float32 (batch, frames * hop_length): the wave at audio.sample_rate"},
}


def default_out(source: Path) -> Path:
    """Where an export goes by default: `onnx/` in the source's run folder,
    else beside the source."""
    source = source.resolve()
    for folder in (source, source.parent, source.parent.parent):
        if is_run_dir(folder):
            return folder / ONNX
    return source.with_name(f"{source.stem}-onnx")


def export_voice(
    synth: Synthesiser, vocoder: MelVocoder, out: Path, source: Path
) -> dict[str, Any]:
    """Export `synth` (and `vocoder` when trained) to `out` as ONNX; check both
    against torch; return config.json."""
    from trainer_core.models.onnx_graphs import OPSET, export_acoustic, export_vocoder

    model = synth.model.cpu().eval()
    if out.exists() and not out.is_dir():
        raise VegaError(
            f"--out {out} is a file; name a folder for the ONNX files (it is created when missing)"
        )
    acoustic_bytes = export_acoustic(model)
    vocoder_bytes = (
        export_vocoder(vocoder.generator.cpu().eval()) if vocoder.generator is not None else None
    )
    measured = _check_parity(synth, vocoder, acoustic_bytes, vocoder_bytes, out)
    _make_folder(out)
    _write(out / ACOUSTIC_FILENAME, acoustic_bytes)
    if vocoder_bytes is not None:
        _write(out / VOCODER_FILENAME, vocoder_bytes)
    else:
        # an earlier export's vocoder is not this voice's
        (out / VOCODER_FILENAME).unlink(missing_ok=True)
    acoustic_io: dict[str, Any] = copy.deepcopy(ACOUSTIC_IO)
    if model.speaker_embedding is not None:
        acoustic_io["inputs"]["speaker"] = SPEAKER_INPUT
    now = time.time()
    document = {
        "format": ONNX_FORMAT,
        "version": ONNX_VERSION,
        "vega_version": VEGA_VERSION,
        "created": datetime.fromtimestamp(now, tz=UTC).isoformat(timespec="seconds"),
        "source": str(source),
        "opset": OPSET,
        "acoustic": {"file": ACOUSTIC_FILENAME, **acoustic_io},
        "vocoder": (
            {"file": VOCODER_FILENAME, "source": vocoder.name, **VOCODER_IO}
            if vocoder_bytes
            else None
        ),
        "text": synth.encoder.state_dict(),
        "audio": synth.audio.model_dump(mode="json"),
        "tts": synth.tts.model_dump(mode="json"),
        "mel_statistics": {"mean": model.mel_mean.tolist(), "std": model.mel_std.tolist()},
        "speakers": synth.speaker_names,
        "tolerance": {
            "max_abs_diff": TOLERANCE,
            "measured": measured,
            "inputs": {"texts": list(PARITY_TEXTS), "length_scales": list(PARITY_SCALES)},
        },
    }
    atomic_write_text(
        out / CONFIG_FILENAME, json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    )
    return document


def _make_folder(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VegaError(f"--out {out}: cannot be created ({exc.strerror or exc})") from None


def _write(path: Path, data: bytes) -> None:
    try:
        atomic_write(path, lambda file: file.write(data))
    except OSError as exc:
        raise VegaError(f"could not write {path}: {exc.strerror or exc}") from exc


def _check_parity(
    synth: Synthesiser, vocoder: MelVocoder, acoustic: bytes, generator: bytes | None, out: Path
) -> dict[str, float | None]:
    """Largest |onnxruntime - torch| on the mels and on the audio; VegaError beyond TOLERANCE."""
    import torch

    from trainer_core.models.onnx_graphs import AcousticGraph

    graph = AcousticGraph(synth.model).eval()
    # A voice with speakers is checked as its first and its last speaker.
    speakers = (
        [0, synth.model.config.speakers - 1]
        if synth.model.speaker_embedding is not None
        else [None]
    )
    acoustic_session = start_session(acoustic, out / ACOUSTIC_FILENAME)
    vocoder_session = (
        start_session(generator, out / VOCODER_FILENAME) if generator is not None else None
    )
    worst_mel, worst_audio = 0.0, 0.0
    for text, scale, speaker in itertools.product(PARITY_TEXTS, PARITY_SCALES, speakers):
        ids = synth.encoder.encode(text)
        feeds = {
            "ids": np.asarray([ids], dtype=np.int64),
            "length_scale": np.asarray([scale], dtype=np.float32),
        }
        if speaker is not None:
            feeds["speaker"] = np.asarray([speaker], dtype=np.int64)
        with torch.no_grad():
            mel, durations = graph(*(torch.from_numpy(value) for value in feeds.values()))
        onnx_mel, onnx_durations = acoustic_session.run(["mel", "durations"], feeds)
        if not np.array_equal(onnx_durations, durations.numpy()):
            raise VegaError(
                f"the ONNX acoustic graph gives other durations than torch for {text!r}; not"
                " written"
            )
        worst_mel = max(worst_mel, float(np.abs(onnx_mel - mel.numpy()).max()))
        if vocoder_session is not None and vocoder.generator is not None:
            with torch.no_grad():
                wave = vocoder.generator(mel).numpy()
            (onnx_wave,) = vocoder_session.run(["audio"], {"mel": mel.numpy()})
            worst_audio = max(worst_audio, float(np.abs(onnx_wave - wave).max()))
    for name, worst in (("log-mel", worst_mel), ("audio", worst_audio)):
        if worst > TOLERANCE:
            raise VegaError(
                f"the ONNX graphs differ from torch by up to {worst:.2e} in the {name}, more than"
                f" {TOLERANCE:.0e}; nothing was written"
            )
    return {"mel": worst_mel, "audio": worst_audio if vocoder_session is not None else None}
