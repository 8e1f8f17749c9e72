"""The graphs `trainer-core export --onnx` writes: a voice's acoustic model
and a GAN vocoder's generator.

Acoustic graph (`AcousticGraph`, the model's own `AcousticModel.speak`): one
utterance, free-running.
    inputs   ids (1, tokens) int64 · length_scale (1,) float32 · speaker (1,) int64, only for a
             voice with speakers
    outputs  mel (1, n_mels, frames) float32 log-mel · durations (1, tokens) int64 whole frames per
             token
The durations are predicted, rounded and expanded inside the graph, so
`frames` is decided at run time.

Vocoder graph (`VocoderGraph`): log-mel (batch, n_mels, frames) float32 -> audio (batch, frames *
hop) float32. ONNX has no complex inverse STFT, so `ConvISTFT` does it with real operations: the
inverse real DFT of each frame, times the synthesis window, is one matrix (cos and -sin rows
weighted for the one-sided spectrum) used as the kernel of a transposed convolution with stride hop,
which also does the overlap-add; the sum of squared windows it is divided by comes from the same
convolution over ones. It equals `torch.istft(center=True)`.

Both are exported with torch's dynamo exporter (`torch.export`, then onnxscript), opset `OPSET`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import warnings
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer_core.contract.errors import VegaError
from trainer_core.models.gan_vocoder import Generator
from trainer_core.models.tts import AcousticModel

# ONNX operator set of both graphs: torch's exporter default, run by onnxruntime 1.17 and later.
OPSET = 20
# Longest input the graphs are declared for (tokens; mel frames: about 20
# minutes at 22050 Hz, hop 256).
MAX_TOKENS = 8192
MAX_FRAMES = 100_000
INSTALL_HINT = "pip install -e '.[onnx]' (onnx, onnxscript and onnxruntime)"
# torch.istft refuses a window envelope below this; here such samples are left undivided instead.
ENVELOPE_FLOOR = 1e-11


class AcousticGraph(nn.Module):
    """Text ids (+ a speaker id when the voice has speakers) -> log-mel and
    durations (`AcousticModel.speak`)."""

    def __init__(self, model: AcousticModel) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, ids: Tensor, length_scale: Tensor, speaker: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        return self.model.speak(ids, length_scale, speaker)


class ConvISTFT(nn.Module):
    """(B, n_fft // 2 + 1, T) real and imaginary parts -> (B, T * hop) wave, as
    torch.istft(center=True, length=T * hop) computes it, from a transposed convolution alone
    (exportable to ONNX, which has no complex numbers)."""

    kernel: Tensor
    window_squared: Tensor

    def __init__(self, n_fft: int, hop_length: int, window: Tensor) -> None:
        super().__init__()
        self.n_fft, self.hop_length = n_fft, hop_length
        full = torch.zeros(n_fft, dtype=torch.float64)
        left = (n_fft - window.shape[0]) // 2  # torch.istft centres a shorter window in n_fft
        full[left : left + window.shape[0]] = window.double()
        bins = n_fft // 2 + 1
        angle = (
            2
            * math.pi
            * torch.outer(torch.arange(bins, dtype=torch.float64), torch.arange(n_fft) / n_fft)
        )
        # One-sided spectrum: every bin but DC (and Nyquist for an even n_fft)
        # stands for itself and its mirror.
        weight = torch.full((bins, 1), 2.0, dtype=torch.float64)
        weight[0] = 1.0
        if n_fft % 2 == 0:
            weight[-1] = 1.0
        rows = torch.cat([weight * angle.cos(), -weight * angle.sin()]) * full / n_fft
        self.register_buffer("kernel", rows[:, None, :].float(), persistent=False)
        self.register_buffer("window_squared", (full**2)[None, None, :].float(), persistent=False)
        # Samples short of T * hop after the centre trim (only when n_fft // 2 <
        # hop): torch.istft pads zeros.
        self.tail = max(0, hop_length - n_fft // 2)

    def forward(self, real: Tensor, imag: Tensor) -> Tensor:
        frames = real.shape[-1]
        wave = F.conv_transpose1d(
            torch.cat([real, imag], dim=1), self.kernel, stride=self.hop_length
        )
        ones = torch.ones(1, 1, frames, dtype=real.dtype, device=real.device)
        envelope = F.conv_transpose1d(ones, self.window_squared, stride=self.hop_length)
        wave = wave / torch.where(envelope > ENVELOPE_FLOOR, envelope, torch.ones_like(envelope))
        if self.tail:
            wave = F.pad(wave, (0, self.tail))
        start = self.n_fft // 2
        return wave[:, 0, start : start + frames * self.hop_length]


class VocoderGraph(nn.Module):
    """The GAN vocoder's generator with its inverse STFT as `ConvISTFT`: (B,
    n_mels, T) -> (B, T * hop)."""

    def __init__(self, generator: Generator) -> None:
        super().__init__()
        self.generator = generator
        self.istft = ConvISTFT(
            generator.config.n_fft, generator.config.hop_length, generator.window
        )

    def forward(self, mel: Tensor) -> Tensor:
        magnitude, phase = self.generator.magnitude_and_phase(mel)
        return self.istft(magnitude * phase.cos(), magnitude * phase.sin())


def export_acoustic(model: AcousticModel) -> bytes:
    """`model`'s free-running graph as a serialised ONNX model (inputs ids, length_scale and, when
    the model has a speaker embedding, speaker; outputs mel, durations)."""
    device = model.text_symbols.device
    args = [torch.ones(1, 8, dtype=torch.long, device=device), torch.ones(1, device=device)]
    names = ["ids", "length_scale"]
    shapes: dict[str, Any] = {
        "ids": {1: torch.export.Dim("tokens", min=1, max=MAX_TOKENS)},
        "length_scale": None,
    }
    if model.speaker_embedding is not None:
        args.append(torch.zeros(1, dtype=torch.long, device=device))
        names.append("speaker")
        shapes["speaker"] = None
    return _export(AcousticGraph(model).eval(), tuple(args), names, ["mel", "durations"], shapes)


def export_vocoder(generator: Generator) -> bytes:
    """The generator with its exportable inverse STFT as a serialised ONNX
    model (input mel; output audio)."""
    mel = torch.zeros(1, generator.config.n_mels, 16, device=generator.mel_mean.device)
    dims = {
        0: torch.export.Dim("batch", min=1, max=1024),
        2: torch.export.Dim("frames", min=1, max=MAX_FRAMES),
    }
    return _export(VocoderGraph(generator).eval(), (mel,), ["mel"], ["audio"], {"mel": dims})


def _export(
    graph: nn.Module,
    args: tuple[Tensor, ...],
    inputs: list[str],
    outputs: list[str],
    shapes: dict[str, Any],
) -> bytes:
    name = type(graph).__name__
    try:
        with quiet_exporter(), torch.no_grad():
            program = torch.onnx.export(
                graph,
                args,
                dynamo=True,
                opset_version=OPSET,
                input_names=inputs,
                output_names=outputs,
                dynamic_shapes=shapes,
                verbose=False,
            )
    except ImportError as exc:
        raise VegaError(
            f"ONNX export needs the onnx extra ({exc.name or exc} is missing): {INSTALL_HINT}"
        ) from exc
    # torch.export and the ONNX translation raise many types; the message says which step
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise VegaError(
            f"torch could not export the {name} to ONNX: {first} (--debug shows the traceback)"
        ) from exc
    if program is None:
        raise VegaError(f"torch's ONNX exporter returned no program for the {name}")
    return program.model_proto.SerializeToString()


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """The exporter's progress lines, warnings and log records are about
    torch, not the user's voice."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)
