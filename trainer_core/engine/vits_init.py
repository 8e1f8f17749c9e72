"""Starting a VITS run from a trained VITS (a Piper checkpoint, or a Vega vits
run or export): what moves where.

`apply_vits_init(model, source, vocabulary, speakers, strict, keep_speaker)`
changes the fresh model in place:
- the text embedding row by row through the symbol each row stands for (a Piper
  voice's `phoneme_id_map`, a Vega
  voice's symbol map); rows of symbols only this corpus has keep their fresh initialisation;
- speakers by name. A one-speaker source starting a multi-speaker voice: the
  speaker conditioning layers this
  model adds start at zero (so every speaker starts as the source's voice) and the speaker table
  fresh. A multi-speaker source starting a one-speaker voice keeps one speaker: its conditioning is
  a constant per channel, which is added to the biases it feeds (exact for the decoder, the
  posterior encoder, the flow and the stochastic duration predictor; the deterministic predictor's
  convolution edges see it approximately);
- every other tensor by name and shape.
`strict` (a Piper checkpoint, a transformers folder): a tensor of this model left unset, a source
tensor left unused, or one of another shape is an error naming it, so nothing is silently trained
from scratch. Otherwise those are reported as skipped and new, as for any other start source. A
source with no discriminator at all (transformers' folders hold the generator alone) leaves this
model's fresh, which the report lists as new.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from torch import nn

from trainer_core.contract.errors import VegaError
from trainer_core.contract.protocol import MappedRows
from trainer_core.engine.init_from import InitReport
from trainer_core.engine.model_source import ModelSource

TEXT_TABLE = "model_g.enc_p.emb.weight"
SPEAKER_TABLE = "model_g.emb_g.weight"
# Layers that read the speaker embedding, and the bias each one's output is added
# to (None: per WaveNet layer).
CONDITIONING = re.compile(
    r"^model_g\.(dec\.cond|dp\.cond|enc_q\.enc\.cond_layer|flow\.flows\.\d+\.enc\.cond_layer)\."
)
FOLDED_INTO = {"dec.cond": "dec.conv_pre.bias", "dp.cond": "dp.pre.bias"}
DISCRIMINATOR = "model_d."
G, V = "parametrizations.weight.original0", "parametrizations.weight.original1"
LISTED = 8


class VitsInitError(VegaError):
    """A VITS source does not fit this model where it must (a strict start)."""


def apply_vits_init(
    model: nn.Module,
    source: ModelSource,
    vocabulary: Sequence[str | None],
    speakers: Sequence[str],
    strict: bool,
    keep_speaker: str | None = None,
) -> InitReport:
    """Copy `source` into `model` as the module docstring says; the report lists what happened."""
    report = InitReport(source)
    state = model.state_dict()
    weights = dict(source.weights)
    # an export holds the generator alone
    if not any(name.startswith("model_g.") for name in weights):
        weights = {f"model_g.{name}": tensor for name, tensor in weights.items()}
    used: set[str] = set()
    with torch.no_grad():
        _text_rows(state, weights, vocabulary, source, report, used)
        _speakers(state, weights, speakers, source, report, used, keep_speaker)
        for name, target in state.items():
            if name in used or name in report.new:
                continue
            if name not in weights:
                report.new.append(name)
            elif weights[name].shape != target.shape:
                report.skipped.append(
                    (name, f"{list(weights[name].shape)} in the source, {list(target.shape)} here")
                )
                used.add(name)
            else:
                target.copy_(weights[name].to(target.dtype))
                report.loaded.append(name)
                used.add(name)
    report.skipped += [(name, "not in this model") for name in weights if name not in used]
    if source.file.form == "hf" and not any(name.startswith(DISCRIMINATOR) for name in weights):
        report.notes.append(
            f"{source.describe()} holds no discriminator: this run's starts fresh (it trains alone"
            " for the first vits.discriminator_warmup_steps steps)"
        )
    if strict:
        _refuse_loose_ends(report, source)
    return report


def _text_rows(
    state: dict[str, torch.Tensor],
    weights: dict[str, torch.Tensor],
    vocabulary: Sequence[str | None],
    source: ModelSource,
    report: InitReport,
    used: set[str],
) -> None:
    if TEXT_TABLE not in weights or TEXT_TABLE not in state or source.vocabulary is None:
        return
    target, table = state[TEXT_TABLE], weights[TEXT_TABLE]
    if table.shape[1:] != target.shape[1:]:
        return  # a width mismatch: reported with the other tensors
    where = {symbol: row for row, symbol in enumerate(source.vocabulary) if symbol is not None}
    rows = {
        row: where[symbol]
        for row, symbol in enumerate(vocabulary)
        if symbol is not None and symbol in where
    }
    for row, from_row in rows.items():
        target[row] = table[from_row].to(target.dtype)
    used.add(TEXT_TABLE)
    report.mapped.append(
        MappedRows(name=TEXT_TABLE, kept=len(rows), rows=int(target.shape[0]), by="symbol")
    )
    fresh = [symbol for symbol in vocabulary if symbol is not None and symbol not in where]
    if fresh:
        report.notes.append(f"symbols new to the source start from fresh rows: {' '.join(fresh)}")


def _speakers(
    state: dict[str, torch.Tensor],
    weights: dict[str, torch.Tensor],
    speakers: Sequence[str],
    source: ModelSource,
    report: InitReport,
    used: set[str],
    keep_speaker: str | None,
) -> None:
    source_multi, target_multi = SPEAKER_TABLE in weights, SPEAKER_TABLE in state
    if source_multi and target_multi:
        names = source.speaker_names or []
        where = {name: row for row, name in enumerate(names)}
        rows = {row: where[name] for row, name in enumerate(speakers) if name in where}
        target, table = state[SPEAKER_TABLE], weights[SPEAKER_TABLE]
        if table.shape[1:] == target.shape[1:]:
            for row, from_row in rows.items():
                target[row] = table[from_row].to(target.dtype)
            used.add(SPEAKER_TABLE)
            report.mapped.append(
                MappedRows(name=SPEAKER_TABLE, kept=len(rows), rows=len(speakers), by="speaker")
            )
    elif target_multi:
        layers = set()
        for name, tensor in state.items():
            if (match := CONDITIONING.match(name)) and name not in weights:
                # Weight norm's g = 0 zeroes the weight yet gets gradient v/|v|.dL/dw, so g trains
                # at once and v from the next step (v = 0 would be 0/0); a plain layer's zero
                # weight and bias train at once.
                if not name.endswith(V):
                    tensor.zero_()
                report.new.append(name)
                layers.add(match.group(1))
        report.new.append(SPEAKER_TABLE)
        report.notes.append(
            f"new speaker layers for {len(speakers)} speakers, zero-initialised (a speaker table of"
            f" width {state[SPEAKER_TABLE].shape[1]} and {len(layers)} conditioning layers): each"
            " speaker starts as the source's one voice"
        )
    elif source_multi:
        row, name = _kept_speaker(source, speakers, keep_speaker)
        g = weights[SPEAKER_TABLE][row].double()
        _fold_speaker(state, weights, g, used)
        used.add(SPEAKER_TABLE)
        report.notes.append(
            f"kept speaker {name!r} of the source's {weights[SPEAKER_TABLE].shape[0]}: its"
            " conditioning is folded into the biases"
        )


def _kept_speaker(
    source: ModelSource, speakers: Sequence[str], keep: str | None
) -> tuple[int, str]:
    names = source.speaker_names or []
    wanted = (
        keep
        or (speakers[0] if speakers and speakers[0] in names else None)
        or source.default_speaker
    )
    if wanted is None:
        return 0, names[0] if names else "0"
    if wanted not in names:
        raise VitsInitError(
            f"train.init_speaker = {wanted!r}: the source has no such speaker; it has"
            f" {', '.join(names[:20])}"
        )
    return names.index(wanted), wanted


def _fold_speaker(
    state: dict[str, torch.Tensor],
    weights: dict[str, torch.Tensor],
    g: torch.Tensor,
    used: set[str],
) -> None:
    """Add each conditioning layer's output for speaker vector `g` to the
    bias its output is added to."""
    layers = sorted(
        {m.group(0)[: -len(".")] for name in weights if (m := CONDITIONING.match(name))}
    )
    for layer in layers:
        weight = _effective_weight(weights, layer).double()
        offset = weight[:, :, 0] @ g + weights[f"{layer}.bias"].double()
        used.update(name for name in weights if name.startswith(f"{layer}."))
        part = layer.removeprefix("model_g.")
        if part == "dp.cond" and "model_g.dp.pre.bias" not in weights:
            # The deterministic predictor adds it before a convolution: its
            # kernel summed carries a constant.
            conv = weights["model_g.dp.conv_1.weight"].double()
            _add_bias(state, weights, "model_g.dp.conv_1.bias", conv.sum(dim=2) @ offset, used)
            continue
        if part in FOLDED_INTO:
            _add_bias(state, weights, f"model_g.{FOLDED_INTO[part]}", offset, used)
            continue
        # a WaveNet: 2 * hidden conditioning channels per layer
        stack = part.removesuffix(".cond_layer")
        width = offset.shape[0] // sum(
            1
            for n in weights
            if n.startswith(f"model_g.{stack}.in_layers.") and n.endswith(".bias")
        )
        for index in range(offset.shape[0] // width):
            piece = offset[index * width : (index + 1) * width]
            _add_bias(state, weights, f"model_g.{stack}.in_layers.{index}.bias", piece, used)


def _effective_weight(weights: dict[str, torch.Tensor], layer: str) -> torch.Tensor:
    if f"{layer}.weight" in weights:
        return weights[f"{layer}.weight"]
    return torch._weight_norm(weights[f"{layer}.{V}"], weights[f"{layer}.{G}"], 0)


def _add_bias(
    state: dict[str, torch.Tensor],
    weights: dict[str, torch.Tensor],
    name: str,
    offset: torch.Tensor,
    used: set[str],
) -> None:
    state[name].copy_((weights[name].double() + offset).to(state[name].dtype))
    used.add(name)


def _refuse_loose_ends(report: InitReport, source: ModelSource) -> None:
    # A source without a discriminator (transformers' folders) leaves this one
    # fresh: warmed up, not refused.
    fresh_d = not any(name.startswith(DISCRIMINATOR) for name in source.weights)
    allowed_new = {
        name
        for name in report.new
        if CONDITIONING.match(name)
        or name == SPEAKER_TABLE
        or (fresh_d and name.startswith(DISCRIMINATOR))
    }
    unset = [name for name in report.new if name not in allowed_new]
    problems = (
        [f"{len(unset)} tensor(s) of this model not in it: {', '.join(unset[:LISTED])}"]
        if unset
        else []
    )
    if report.skipped:
        listing = ", ".join(f"{name} ({why})" for name, why in report.skipped[:LISTED])
        problems.append(f"{len(report.skipped)} of its tensor(s) unused: {listing}")
    if problems:
        raise VitsInitError(
            f"{source.describe()} does not fit this vits model tensor for tensor:"
            f" {'; '.join(problems)}; start from a checkpoint of the shape this profile builds (its"
            " settings are adopted from the checkpoint's hyperparameters), or report the"
            " checkpoint"
        )
