"""A vits generator's speaking path as the ONNX graph Piper's runtime runs (`export --piper`).

    inputs   input (1, phonemes) int64 ids · input_lengths (1,) int64 ·
             scales (3,) float32 = noise_scale, length_scale, noise_w ·
             sid (1,) int64, only for a voice with several speakers
    outputs  output (1, 1, 1, time) float32 audio in [-1, 1] (Piper's layout; its runtime squeezes)
             durations (1, 1, phonemes) float32 whole frames per id (the ceil'd durations;
             alignments are durations * hop_length samples)

`PiperGraph` speaks as `Synthesizer.infer` does, written so that a trace keeps every length
symbolic (no Python int is taken from a tensor), on a copy of the generator whose weight norm is
folded into plain weights. The export goes through TorchScript (`torch.onnx.export(dynamo=False)`):
the dynamo exporter fails in the stochastic duration predictor's spline. Opset 15, as Piper's own.
"""

from __future__ import annotations

import io
from typing import cast

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from trainer_core.contract.errors import VegaError
from trainer_core.models.onnx_graphs import quiet_exporter
from trainer_core.models.vits.duration import StochasticDurationPredictor
from trainer_core.models.vits.synthesizer import Synthesizer

OPSET = 15
INPUTS = ("input", "input_lengths", "scales")
SPEAKER_INPUT = "sid"
OUTPUTS = ("output", "durations")


def fold_weight_norm(generator: Synthesizer) -> Synthesizer:
    """A copy of `generator` in eval mode, each weight norm folded into a plain weight."""
    # Built anew, not deep-copied: a copy shares the parametrized classes that unfolding edits.
    folded = Synthesizer(generator.config).eval()
    state = {name: tensor.detach().cpu().float() for name, tensor in generator.state_dict().items()}
    folded.load_state_dict(state, strict=True)
    for module in (*folded.flow.modules(), *folded.dec.modules()):  # the posterior is not spoken
        if parametrize.is_parametrized(module):
            for name in list(cast(nn.ModuleDict, module.parametrizations)):
                parametrize.remove_parametrizations(module, name, leave_parametrized=True)
    for parameter in folded.parameters():
        parameter.requires_grad_(False)
    return folded


class PiperGraph(nn.Module):
    """Ids, lengths, scales (and a speaker) -> audio and durations, as `Synthesizer.infer`."""

    def __init__(self, generator: Synthesizer) -> None:
        super().__init__()
        self.generator = fold_weight_norm(generator)

    @property
    def speakers(self) -> int:
        return int(self.generator.n_speakers)

    def forward(
        self,
        ids: Tensor,
        lengths: Tensor,
        scales: Tensor,
        sid: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        g = self.generator
        noise_scale, length_scale, noise_w = scales[0], scales[1], scales[2]
        text = g.enc_p(ids, lengths)
        speaker = g.emb_g(sid).unsqueeze(-1) if sid is not None and g.n_speakers > 1 else None
        if isinstance(g.dp, StochasticDurationPredictor):
            noise: float = noise_w  # type: ignore[assignment]  # a 0-d tensor, traced
            log_w = g.dp.log_durations(text.hidden, text.mask, g=speaker, noise_scale=noise)
        else:
            log_w = g.dp(text.hidden, text.mask, g=speaker)
        w_ceil = torch.ceil(torch.exp(log_w) * text.mask * length_scale)
        frames_of = torch.clamp_min(torch.sum(w_ceil, [1, 2]), 1).long()
        frames = cast(int, frames_of.max())  # a 0-d tensor: the trace keeps it symbolic
        positions = torch.arange(frames, device=ids.device)
        y_mask = (positions[None, :] < frames_of[:, None]).unsqueeze(1).to(text.mask.dtype)
        durations = w_ceil.squeeze(1).long().clamp(min=0)
        ends = durations.cumsum(dim=1)
        starts = ends - durations
        steps = positions[None, None, :]
        path = (steps >= starts[..., None]) & (steps < ends[..., None])
        # (B, Tx, Ty) 0/1, masked on both sides as Synthesizer.infer masks it.
        attn = path.to(text.mask.dtype) * text.mask.transpose(1, 2) * y_mask
        m_p = torch.matmul(attn.transpose(1, 2), text.m.transpose(1, 2)).transpose(1, 2)
        logs_p = torch.matmul(attn.transpose(1, 2), text.logs.transpose(1, 2)).transpose(1, 2)
        z_p = m_p + torch.randn_like(m_p) * torch.exp(logs_p) * noise_scale
        z = g.flow.inverse(z_p, y_mask, g=speaker)
        audio = g.dec(z * y_mask, g=speaker)
        return audio.unsqueeze(1), w_ceil


def framed_ids(symbol_ids: list[int], pad: int, bos: int, eos: int) -> list[int]:
    """Ids framed as Piper's runtime frames a sentence: `^ _ s1 _ s2 _ ... $`."""
    out = [bos, pad]
    for index in symbol_ids:
        out += [index, pad]
    return [*out, eos]


def export_graph(graph: PiperGraph, trace_ids: list[int]) -> bytes:
    """The graph as ONNX bytes, traced on `trace_ids`, its phoneme and time axes left dynamic."""
    ids = torch.tensor([trace_ids], dtype=torch.int64)
    lengths = torch.tensor([len(trace_ids)], dtype=torch.int64)
    scales = torch.tensor([0.667, 1.0, 0.8], dtype=torch.float32)
    args: tuple[Tensor, ...] = (ids, lengths, scales)
    inputs = list(INPUTS)
    if graph.speakers > 1:
        args, inputs = (*args, torch.tensor([0], dtype=torch.int64)), [*inputs, SPEAKER_INPUT]
    buffer = io.BytesIO()
    try:
        with quiet_exporter(), torch.no_grad():
            torch.onnx.export(
                graph,
                args,
                buffer,  # type: ignore[arg-type]  # torch writes to a file object too
                dynamo=False,
                opset_version=OPSET,
                input_names=inputs,
                output_names=list(OUTPUTS),
                dynamic_axes={
                    "input": {1: "phonemes"},
                    "output": {3: "time"},
                    "durations": {2: "phonemes"},
                },
            )
    except ImportError as exc:
        missing = exc.name or exc
        raise VegaError(f"export --piper needs the onnx package ({missing} is missing)") from exc
    except Exception as exc:  # the exporter raises many types; the first line says the step
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise VegaError(f"torch could not export the vits voice to ONNX: {first}") from exc
    return buffer.getvalue()
