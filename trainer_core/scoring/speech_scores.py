"""Scores of one synthesised utterance against a recording of the same sentence, and their summary.

Both sides are compared as heard: the synthesised mel goes through the vocoder, and the log-mel of
that audio is DTW-aligned with the recording's. The recording's own re-synthesis through the same
vocoder, scored the same way, is the floor no acoustic model can beat with that vocoder.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from trainer_core.data.pitch import PitchTrack, pitch_track
from trainer_core.scoring.dtw import dtw

# Log-mel (n_mels, frames) of a waveform, as training features are computed.
MelOf = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Recording:
    """A held-out sentence and what its recording sounds like: log-mel, and
    per-frame voicing and pitch."""

    item_id: str
    text: str
    mel: np.ndarray
    voiced: np.ndarray
    f0: np.ndarray


@dataclass(frozen=True)
class ItemScore:
    """One sentence: `distance` (DTW log-mel L1 per bin, as heard), the synthesised/recorded
    duration ratio, the share of aligned frames whose voicing agrees, and `acoustic_distance` (the
    model's mel before the vocoder; None for a re-synthesised recording), and the pitch error in
    cents over aligned frames voiced on both sides (None when there are none)."""

    item_id: str
    distance: float
    duration_ratio: float
    vuv_agreement: float
    acoustic_distance: float | None = None
    f0_error_cents: float | None = None


@dataclass(frozen=True)
class ScoreSummary:
    """Means over sentences; the duration ratio is a geometric mean, so 2x and 0.5x cancel."""

    distance: float
    duration_ratio: float
    vuv_agreement: float
    acoustic_distance: float | None
    f0_error_cents: float | None


@dataclass(frozen=True)
class Scores:
    """A set of sentences scored together; the summary is what events and charts carry."""

    items: list[ItemScore]

    def summary(self) -> ScoreSummary:
        items = self.items
        acoustic = [i.acoustic_distance for i in items if i.acoustic_distance is not None]
        cents = [i.f0_error_cents for i in items if i.f0_error_cents is not None]
        return ScoreSummary(
            distance=_mean([i.distance for i in items]),
            duration_ratio=math.exp(_mean([math.log(max(i.duration_ratio, 1e-6)) for i in items])),
            vuv_agreement=_mean([i.vuv_agreement for i in items]),
            acoustic_distance=_mean(acoustic) if acoustic else None,
            f0_error_cents=_mean(cents) if cents else None,
        )

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self.summary()), "items": [asdict(item) for item in self.items]}


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else float("nan")


def recording(
    item_id: str, text: str, wave: np.ndarray, mel_of: MelOf, sample_rate: int, hop: int
) -> Recording:
    """What the scorer keeps of a recording: its log-mel and voicing, computed once."""
    mel = mel_of(wave)
    pitch = _frames(pitch_track(wave, sample_rate, hop), mel.shape[1])
    return Recording(item_id, text, mel, pitch.voiced, pitch.f0)


def _frames(pitch: PitchTrack, count: int) -> PitchTrack:
    return PitchTrack(pitch.f0[:count], pitch.voiced[:count])


def score_heard(
    reference: Recording,
    wave: np.ndarray,
    mel_of: MelOf,
    sample_rate: int,
    hop: int,
    predicted_mel: np.ndarray | None = None,
) -> ItemScore:
    """Score `wave` (vocoded speech) against `reference`; `predicted_mel`
    adds the before-vocoder distance."""
    heard = mel_of(wave)
    aligned = dtw(heard, reference.mel)
    pitch = _frames(pitch_track(wave, sample_rate, hop), heard.shape[1])
    mine, theirs = pitch.voiced[aligned.path_a], reference.voiced[aligned.path_b]
    agreement = float(np.mean(mine == theirs))
    both = mine & theirs
    cents = None
    if both.any():
        ratio_f0 = pitch.f0[aligned.path_a][both] / reference.f0[aligned.path_b][both]
        cents = float(np.mean(np.abs(1200.0 * np.log2(ratio_f0))))
    acoustic = dtw(predicted_mel, reference.mel).distance if predicted_mel is not None else None
    ratio = heard.shape[1] / reference.mel.shape[1]
    return ItemScore(reference.item_id, aligned.distance, ratio, agreement, acoustic, cents)
