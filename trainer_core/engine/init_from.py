"""Starting a new run from a trained model (`train.init_from`): copy what fits, move
table rows by meaning, report.

`apply_init(model, source)` changes the freshly built model in place, tensor by tensor:
- the text embedding moves row by row by symbol: a symbol both vocabularies hold
  keeps its learned row, a symbol
  only this corpus has keeps its fresh one, and the special symbols (padding, unknown) go by
  position;
- a speaker embedding moves by speaker name when both models name their
  speakers, else by name and shape;
- the run's own values stay: the mel statistics (already computed on this
  run's data), the vocabulary and the
  speaker names of this corpus;
- every other tensor whose name and shape match is copied ("loaded"); a source
  tensor this model lacks or holds
  in another shape is "skipped", and one only this model has is "new" (fresh initialisation).
The optimizer and the schedule are built before and hold no state yet: they start fresh.
`InitReport` says what happened, as an `init_from` event and one log line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from trainer_core.contract.protocol import InitFromEvent, MappedRows
from trainer_core.engine.model_source import ModelSource

# This run's own values, never taken from the source: statistics of its
# data, its corpus's vocabulary.
OWN_VALUES = ("mel_mean", "mel_std", "text_symbols", "text_phonemes", "speaker_names")
TEXT_EMBEDDING = "embedding.weight"
SPEAKER_EMBEDDING = "speaker_embedding.weight"
# Names listed in the event per list; the counts are complete.
LISTED_NAMES = 20


@dataclass
class InitReport:
    """What `apply_init` did with each tensor."""

    source: ModelSource
    loaded: list[str] = field(default_factory=list)
    mapped: list[MappedRows] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(name, why): absent from this model, or another shape."""
    new: list[str] = field(default_factory=list)
    own: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def event(self) -> InitFromEvent:
        file = self.source.file
        return InitFromEvent(
            source=str(file.given),
            path=str(file.path),
            form=file.form,
            kind=self.source.kind,
            step=self.source.step,
            loaded=len(self.loaded),
            mapped=self.mapped,
            skipped=len(self.skipped),
            new=len(self.new),
            loaded_names=self.loaded[:LISTED_NAMES],
            skipped_names=[name for name, _ in self.skipped[:LISTED_NAMES]],
            new_names=self.new[:LISTED_NAMES],
            own=self.own,
        )

    def summary(self) -> str:
        """`started from run X: its export: 52 tensors loaded, embedding.weight 41/57
        symbols kept, 3 skipped, 6 new`"""
        tables = [f"{m.name} {m.kept}/{m.rows} {m.by}s kept" for m in self.mapped]
        parts = [
            f"{len(self.loaded)} tensors loaded",
            *tables,
            f"{len(self.skipped)} skipped",
            f"{len(self.new)} new",
        ]
        return f"started from {self.source.describe()}: {', '.join(parts)}"


def symbol_rows(target: list[int], source: list[int]) -> dict[int, int]:
    """Target row -> source row for the symbols both vocabularies hold;
    special symbols (-1) by position."""
    where = {code: row for row, code in enumerate(source) if code >= 0}
    rows = {}
    for row, code in enumerate(target):
        if code < 0:
            if row < len(source) and source[row] < 0:
                rows[row] = row
        elif code in where:
            rows[row] = where[code]
    return rows


def name_rows(target: list[str], source: list[str]) -> dict[int, int]:
    """Target row -> source row for the names both lists hold."""
    where = {name: row for row, name in enumerate(source)}
    return {row: where[name] for row, name in enumerate(target) if name in where}


def _target_symbols(state: dict[str, torch.Tensor]) -> list[int] | None:
    symbols = state.get("text_symbols")
    return [int(code) for code in symbols.tolist()] if symbols is not None else None


def row_maps(
    model: nn.Module, state: dict[str, torch.Tensor], source: ModelSource
) -> dict[str, tuple[str, dict]]:
    """The tables whose rows move by meaning: name -> (what a row stands
    for, target row -> source row)."""
    maps: dict[str, tuple[str, dict[int, int]]] = {}
    symbols = _target_symbols(state)
    if symbols is not None and source.symbols is not None and TEXT_EMBEDDING in state:
        maps[TEXT_EMBEDDING] = ("symbol", symbol_rows(symbols, source.symbols))
    speakers = getattr(getattr(model, "config", None), "speaker_names", None)
    if speakers and source.speaker_names and SPEAKER_EMBEDDING in state:
        maps[SPEAKER_EMBEDDING] = ("speaker", name_rows(list(speakers), source.speaker_names))
    return maps


def _shape(tensor: torch.Tensor) -> str:
    return "[" + ", ".join(str(d) for d in tensor.shape) + "]"


@torch.no_grad()
def apply_init(model: nn.Module, source: ModelSource, prefix: str = "") -> InitReport:
    """Copy `source` into `model` in place by the rules above; `prefix` is added to the source's
    names (a vocoder's export holds its generator alone, which the model holds as `generator.`)."""
    report = InitReport(source)
    state = model.state_dict()  # tensors sharing storage with the model's: copy_ changes the model
    weights = {prefix + name: tensor for name, tensor in source.weights.items()}
    maps = row_maps(model, state, source)
    for name, target in state.items():
        if name in OWN_VALUES:
            report.own.append(name)
        elif name not in weights:
            report.new.append(name)
        elif name in maps and weights[name].shape[1:] == target.shape[1:]:
            by, rows = maps[name]
            _copy_rows(target, weights[name], rows)
            report.mapped.append(MappedRows(name=name, kept=len(rows), rows=target.shape[0], by=by))
        elif weights[name].shape != target.shape:
            report.skipped.append(
                (name, f"{_shape(weights[name])} in the source, {_shape(target)} here")
            )
        else:
            target.copy_(weights[name].to(target.dtype))
            report.loaded.append(name)
    report.skipped += [(name, "not in this model") for name in weights if name not in state]
    if (
        source.symbols is not None
        and _target_symbols(state) is not None
        and source.phonemes != _phonemes(state)
    ):
        units = ("phonemes", "characters") if source.phonemes else ("characters", "phonemes")
        report.notes.append(
            f"the source reads {units[0]}, this run {units[1]}: embedding rows moved by symbol may"
            " stand for other sounds"
        )
    return report


def _phonemes(state: dict[str, torch.Tensor]) -> bool:
    flag = state.get("text_phonemes")
    return flag is not None and int(flag) == 1


def _copy_rows(target: torch.Tensor, source: torch.Tensor, rows: dict[int, int]) -> None:
    if not rows:
        return
    index = torch.tensor(list(rows), dtype=torch.long, device=target.device)
    picked = source[torch.tensor(list(rows.values()), dtype=torch.long)]
    target.index_copy_(0, index, picked.to(device=target.device, dtype=target.dtype))


def export_prefix(model: nn.Module, exported: nn.Module) -> str:
    """The name under which `model` holds the part an export keeps ("generator." for a GAN vocoder;
    "" when the export is the whole model)."""
    if exported is model:
        return ""
    found = next((name for name, module in model.named_modules() if module is exported), "")
    return f"{found}." if found else ""
