"""`model.size = "auto"`: the model's width and depth chosen for the time
budget, this machine and the corpus.

Compute-optimal training puts about 20 training tokens through the model per parameter (Hoffmann
et al. 2022, "Training Compute-Optimal Large Language Models"). Repeated data is worth less than
new data: after R repeats of U unique tokens the effective data is U (1 + R* (1 - exp(-R / R*)))
with R* about 15 (Muennighoff et al. 2023, "Scaling Data-Constrained Language Models"), so four
epochs are worth nearly four times the corpus and forty epochs little more than sixteen. Vega
times one optimizer step of each shape on a ladder, small to large, with batches of the run's
real shape on the run's device; works out the effective tokens each would see in the budget; and
keeps the largest shape that still sees 20 per parameter. Tokens are bytes for the LM and mel
frames for the voice model: the scaling laws were measured on language models, and using them for
frames is this module's assumption.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from torch import nn

if TYPE_CHECKING:
    from trainer_core.contract.profile import Profile

TOKENS_PER_PARAMETER = 20.0
REPEAT_DECAY = 15.4  # R* of Muennighoff et al. 2023: how fast repeated epochs lose their worth
# Share of the budget spent in training steps; start-up, validation and the
# final export take the rest.
TRAIN_SHARE = 0.85
TIMED_STEPS = 3


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int


# Width grows with depth, as in the published small-model families; heads keep 32-64 channels each.
LADDER = (
    Shape(64, 2, 2),
    Shape(96, 2, 2),
    Shape(128, 3, 4),
    Shape(192, 4, 4),
    Shape(256, 4, 4),
    Shape(384, 6, 6),
    Shape(512, 8, 8),
    Shape(768, 12, 12),
)


class Probe(Protocol):
    """Builds a model of a given shape and a loss on one batch of the run's real shape."""

    unit: str
    tokens_per_step: int
    corpus_tokens: int

    def build(self, shape: Shape) -> nn.Module: ...

    def loss(self, model: nn.Module) -> torch.Tensor: ...


@dataclass(frozen=True)
class Candidate:
    """One measured shape: its size, its optimizer-step time here and the
    tokens it would see in the budget."""

    shape: Shape
    parameters: int
    step_s: float
    tokens: float
    useful_tokens: float

    @property
    def tokens_per_parameter(self) -> float:
        return self.useful_tokens / self.parameters


@dataclass(frozen=True)
class SizeChoice:
    chosen: Candidate
    candidates: list[Candidate]
    budget_s: float
    corpus_tokens: int
    unit: str
    lr: float = 0.0  # the learning rate for the chosen width (sized_lr)

    def reason(self) -> str:
        c = self.chosen
        fits = c.tokens_per_parameter >= TOKENS_PER_PARAMETER
        why = (
            f"the largest that sees >= {TOKENS_PER_PARAMETER:g} {self.unit} per parameter in the"
            " budget"
            if fits
            else (
                f"the smallest on the ladder (even it sees fewer than {TOKENS_PER_PARAMETER:g} per"
                " parameter)"
            )
        )
        epochs = c.tokens / max(self.corpus_tokens, 1)
        capped = (
            f" ({epochs:.0f} epochs of the corpus, worth {c.useful_tokens / 1e6:.2f}M new)"
            if epochs > 1
            else ""
        )
        return (
            f"hidden {c.shape.hidden}, {c.shape.layers} layers, {c.shape.heads} heads, lr"
            f" {self.lr:.2g}, no dropout: {c.parameters / 1e6:.2f}M parameters,"
            f" {c.step_s * 1000:.0f} ms per step here, {c.tokens / 1e6:.2f}M {self.unit} in"
            f" {self.budget_s / 60:.1f} min{capped} = {c.tokens_per_parameter:.0f} per parameter;"
            f" {why}"
        )

    def to_dict(self) -> dict[str, object]:
        rows = [
            {**asdict(c), "tokens_per_parameter": c.tokens_per_parameter} for c in self.candidates
        ]
        return {
            "chosen": asdict(self.chosen.shape),
            "lr": self.lr,
            "reason": self.reason(),
            "candidates": rows,
        }


def time_step(
    probe: Probe, shape: Shape, device: torch.device, accumulation: int
) -> tuple[int, float]:
    """Parameters and seconds per optimizer step (`accumulation`
    micro-batches) of `shape` on `device`."""
    model = probe.build(shape).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for step in range(TIMED_STEPS + 1):
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        probe.loss(model).backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if step:  # the first step pays for allocation and kernel selection
            times.append(time.perf_counter() - started)
    parameters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return parameters, statistics.median(times) * accumulation


def choose_size(
    probe: Probe, budget_s: float, device: torch.device, accumulation: int = 1
) -> SizeChoice:
    """Measure the ladder from the smallest shape up, stopping at the first
    that sees too few tokens."""
    candidates: list[Candidate] = []
    for shape in LADDER:
        parameters, step_s = time_step(probe, shape, device, accumulation)
        tokens = budget_s * TRAIN_SHARE / step_s * probe.tokens_per_step * accumulation
        useful = effective_tokens(tokens, probe.corpus_tokens)
        candidates.append(Candidate(shape, parameters, step_s, tokens, useful))
        if candidates[-1].tokens_per_parameter < TOKENS_PER_PARAMETER:
            break
    fitting = [c for c in candidates if c.tokens_per_parameter >= TOKENS_PER_PARAMETER]
    chosen = fitting[-1] if fitting else candidates[0]
    return SizeChoice(chosen, candidates, budget_s, probe.corpus_tokens, probe.unit)


def effective_tokens(tokens: float, unique: int) -> float:
    """What `tokens` drawn from `unique` distinct ones are worth as new data
    (Muennighoff et al. 2023)."""
    if unique <= 0 or tokens <= unique:
        return tokens
    repeats = tokens / unique - 1.0
    return unique * (1.0 + REPEAT_DECAY * (1.0 - math.exp(-repeats / REPEAT_DECAY)))


def sized_lr(profile: Profile, shape: Shape) -> float:
    """The profile's learning rate moved to the new width: Adam's best rate for hidden layers
    falls as 1 / width (Yang et al. 2022, "Tensor Programs V", muP), so the profile's
    (hidden, lr) pair is the reference."""
    return profile.train.lr * profile.model.hidden / shape.hidden


def sized_profile(profile: Profile, choice: SizeChoice) -> Profile:
    """The profile with the chosen shape, its learning rate and no dropout written in, and
    `model.size` fixed (a resume rebuilds the same model). No dropout: a compute-optimal run
    sees each token a few times at most, as in the published runs, and CPU attention with
    dropout leaves its fused kernel."""
    s = choice.chosen.shape
    update = {
        "hidden": s.hidden,
        "encoder_layers": s.layers,
        "heads": s.heads,
        "size": "fixed",
        "dropout": 0.0,
    }
    model = profile.model.model_copy(update={**update, "attention_dropout": None})
    train = profile.train.model_copy(update={"lr": sized_lr(profile, s)})
    return profile.model_copy(update={"model": model, "train": train})
