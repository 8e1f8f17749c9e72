"""A voice exported as ONNX (`trainer-core export --onnx`), spoken with
onnxruntime and numpy: no torch.

The folder holds `config.json` (CONFIG_FILENAME), the acoustic graph (`acoustic.onnx`)
and, when the voice was exported with a trained vocoder, its generator
(`vocoder.onnx`); `trainer_core.models.onnx_graphs` describes the graphs. config.json
says everything else a speaker needs:

    {"format": "vega-onnx", "version": 1, "vega_version", "created", "source", "opset",
     "acoustic": {"file", "inputs", "outputs"}, "vocoder": {"file", "source", "inputs", "outputs"}
     or null, "text": the text encoder's state (units, lowercase, espeak voice and backend, symbols:
     id -> symbol), "audio": the [audio] settings, "tts": the [tts] settings (length_scale,
     griffin_lim_iters, ...), "mel_statistics": {"mean", "std"} per mel bin (the graph already
     returns plain log-mels), "speakers": names, id = position (empty: one speaker, no speaker
     input), "tolerance": {"max_abs_diff", "measured": {"mel", "audio"}, "inputs"}: onnxruntime
     against torch at export}

Text becomes ids with the same torch-free front end training used (`text_frontend`);
without `vocoder.onnx` the mel is heard through Griffin-Lim in numpy (`griffin_lim_numpy`).
This module never imports torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from trainer_core.contract.confined_path import inside
from trainer_core.contract.errors import VegaError
from trainer_core.contract.event_lines import describe_validation_error
from trainer_core.contract.profile_audio import AudioSection, TtsSection
from trainer_core.data.speakers import speaker_index
from trainer_core.models.text_frontend import TextEncoder

ONNX_FORMAT = "vega-onnx"
ONNX_VERSION = 1
CONFIG_FILENAME = "config.json"
ACOUSTIC_FILENAME = "acoustic.onnx"
VOCODER_FILENAME = "vocoder.onnx"
INSTALL_HINT = "pip install -e '.[onnx]' (or pip install onnxruntime)"


def start_session(graph: Path | bytes, name: str | Path | None = None) -> Any:
    """An onnxruntime session on the CPU for the graph file (or serialised graph,
    called `name`), or a clear error."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise VegaError(f"running an ONNX graph needs onnxruntime: {INSTALL_HINT}") from exc
    label = name or (graph if isinstance(graph, Path) else "the ONNX graph")
    if isinstance(graph, Path) and not graph.is_file():
        raise VegaError(f"{graph} does not exist: the ONNX export is incomplete; export it again")
    options = onnxruntime.SessionOptions()
    # errors only: its warnings are about graph optimisations, not the voice
    options.log_severity_level = 3
    source = str(graph) if isinstance(graph, Path) else graph
    try:
        return onnxruntime.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    # onnxruntime raises its own exception types for a damaged or unsupported graph
    except Exception as exc:
        raise VegaError(
            f"{label} is not a graph this onnxruntime can run ({exc}); export it again"
        ) from exc


def read_config(folder: Path) -> dict[str, Any]:
    """The folder's config.json, checked to be a Vega ONNX export."""
    path = folder / CONFIG_FILENAME
    if not folder.is_dir():
        raise VegaError(
            f"--onnx {folder}: no such folder; make one with trainer-core export --onnx RUN"
        )
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VegaError(
            f"{folder} has no {CONFIG_FILENAME}: not an ONNX export (trainer-core export --onnx)"
        ) from None
    except (OSError, ValueError) as exc:
        raise VegaError(f"{path} is not readable JSON ({exc}); export the voice again") from exc
    if not isinstance(document, dict) or document.get("format") != ONNX_FORMAT:
        raise VegaError(f'{path} is not a Vega ONNX config (no "format": "{ONNX_FORMAT}")')
    if document.get("version") != ONNX_VERSION:
        raise VegaError(
            f"{path} has format version {document.get('version')}; this Vega reads {ONNX_VERSION}"
        )
    return document


def graph_file(folder: Path, name: str, field: str) -> Path:
    """A graph file config.json names, refused unless it lies in the export folder."""
    fix = "an export names its graphs beside config.json: export the voice again"
    return inside(folder, name, field=field, source=folder / CONFIG_FILENAME, fix=fix)


@dataclass
class OnnxVoice:
    """An ONNX voice: text -> ids -> log-mel (acoustic graph) -> audio (vocoder
    graph, else numpy Griffin-Lim)."""

    folder: Path
    encoder: TextEncoder
    audio: AudioSection
    tts: TtsSection
    acoustic: Any  # onnxruntime.InferenceSession
    vocoder: Any | None = None
    speakers: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, folder: Path) -> OnnxVoice:
        config = read_config(folder)
        try:
            encoder = TextEncoder.from_state(config["text"])
            audio, tts = AudioSection(**config["audio"]), TtsSection(**config.get("tts", {}))
            acoustic_file = str(config["acoustic"]["file"])
            vocoder = config.get("vocoder")
            vocoder_file = str(vocoder["file"]) if vocoder else None
            speakers = [str(name) for name in config.get("speakers") or []]
        except VegaError as exc:  # the text section: say which file it is in
            raise VegaError(f"{folder / CONFIG_FILENAME}: {exc}") from exc
        # pydantic's ValidationError is a ValueError
        except (KeyError, TypeError, ValueError) as exc:
            why = describe_validation_error(exc) if isinstance(exc, ValidationError) else str(exc)
            path = folder / CONFIG_FILENAME
            bad = f"{path} is incomplete or damaged ({why})"
            raise VegaError(f"{bad}; export the voice again") from exc
        acoustic = start_session(graph_file(folder, acoustic_file, "acoustic.file"))
        vocoder_path = graph_file(folder, vocoder_file, "vocoder.file") if vocoder_file else None
        generator = start_session(vocoder_path) if vocoder_path else None
        return cls(folder, encoder, audio, tts, acoustic, generator, speakers)

    def speaker_id(self, name: str | None) -> int:
        """The id of speaker `name` (None: the first); a clear error for a
        name the voice does not know."""
        return (
            0 if name is None else speaker_index(self.speakers, name, f"the voice in {self.folder}")
        )

    def mel(
        self, ids: list[int], length_scale: float | None = None, speaker: int = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids -> (log-mel (n_mels, frames) float32, frames per token (tokens,)
        int64), through the acoustic graph."""
        if not ids:
            raise VegaError("nothing to say: the text has no symbols after normalisation")
        scale = self.tts.length_scale if length_scale is None else length_scale
        if not scale > 0:
            raise VegaError(f"length scale must be positive, got {scale}")
        feeds = {
            "ids": np.asarray([ids], dtype=np.int64),
            "length_scale": np.asarray([scale], dtype=np.float32),
        }
        # Only a voice with a speaker embedding has the input; a single named speaker has none.
        if "speaker" in {graph_input.name for graph_input in self.acoustic.get_inputs()}:
            feeds["speaker"] = np.asarray([speaker], dtype=np.int64)
        mel, durations = self.acoustic.run(["mel", "durations"], feeds)
        return mel[0], durations[0]

    def wave(self, mel: np.ndarray, griffin_lim_iters: int | None = None) -> np.ndarray:
        """(n_mels, frames) log-mel -> float32 audio at `audio.sample_rate`."""
        if self.vocoder is None:
            from trainer_core.models.griffin_lim_numpy import mel_to_audio

            return mel_to_audio(mel, self.audio, griffin_lim_iters or self.tts.griffin_lim_iters)
        (audio,) = self.vocoder.run(
            ["audio"], {"mel": np.ascontiguousarray(mel[None], dtype=np.float32)}
        )
        return np.asarray(audio[0], dtype=np.float32)

    def speak_to_wav(
        self,
        text: str,
        out: Path,
        length_scale: float | None = None,
        iters: int | None = None,
        speaker: str | None = None,
    ) -> dict[str, Any]:
        """Speak `text` into `out` (16-bit WAV) as `speaker` (a name; None: the first); return what
        was written, as `synth` prints it."""
        from trainer_core.models.griffin_lim import write_wav

        speaker_id = self.speaker_id(speaker)
        ids = self.encoder.encode(text)
        if not ids:
            raise VegaError(f"nothing to say: {text!r} has no symbols after normalisation")
        mel, _ = self.mel(ids, length_scale, speaker_id)
        wave = self.wave(mel, iters)
        path = write_wav(out, wave, self.audio.sample_rate)
        rate = self.audio.sample_rate
        return {
            "out": str(path),
            "seconds": len(wave) / rate,
            "sample_rate": rate,
            "frames": mel.shape[1],
            "symbols": len(ids),
            "speaker": self.speakers[speaker_id] if self.speakers else None,
        }
