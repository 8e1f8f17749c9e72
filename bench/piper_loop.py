"""Piper's own trainer as bench/piper_step.py runs it: its data, its Lightning module, its Trainer.

piper-tts (GPL-3.0) is a bench dependency only: nothing under trainer_core imports it. Its
Lightning module (`piper.train.vits.lightning.VitsModel`) is built by its own constructor from
the Vega profile's shape, its data is prepared by its own `VitsDataModule.prepare_data` from the
very samples and ids Vega trains on, and it trains in `lightning.Trainer.fit` with Piper's
default callbacks, plus one that hands the turn to Vega after each step.

Piper's wheel lacks its compiled alignment search (`monotonic_align.core.maximum_path_c`):
`install_alignment` puts Vega's own search behind that import path, so that both loops find
alignments with the same code.
"""

from __future__ import annotations

import contextlib
import copy
import sys
import time
from collections.abc import Callable, Sequence, Sized
from pathlib import Path
from typing import Any, cast

import common
import lightning as L
import numpy as np
import torch
from turns import Aborted, Turns

sys.path.insert(0, str(common.REPO / "tests"))
import piper_reference  # noqa: E402  # the tests' Piper helpers (tests and benches only)

# Piper's VitsDataModule defaults: one loader worker, four batches prefetched, pinned memory.
PIPER_WORKERS = 1
PREFETCH = 4
ALIGNMENTS = {
    "vega": "Vega's monotonic_alignment_search (trainer_core.models.alignment: torch, batched)",
    "numpy": "the tests' numpy search (tests/piper_reference.py, one item at a time)",
}
# Seconds Piper's loop spent in the alignment search (its stand-in adds them up).
ALIGNMENT_S = {"alignment": 0.0}


def vega_maximum_path(
    paths: np.ndarray,
    values: np.ndarray,
    t_ys: np.ndarray,
    t_xs: np.ndarray,
) -> None:
    """Piper's `maximum_path_c` (paths and values (B, frames, tokens), frames and tokens per item),
    answered by Vega's monotonic alignment search."""
    from trainer_core.models.alignment import monotonic_alignment_search

    likelihood = torch.from_numpy(values).transpose(1, 2)
    found = monotonic_alignment_search(likelihood, torch.from_numpy(t_xs), torch.from_numpy(t_ys))
    paths[...] = found.transpose(1, 2).numpy()


def timed_search(search: Callable[..., None]) -> Callable[..., None]:
    def call(*args: Any) -> None:
        t0 = time.perf_counter()
        try:
            search(*args)
        finally:
            ALIGNMENT_S["alignment"] += time.perf_counter() - t0

    return call


def install_alignment(kind: str) -> contextlib.AbstractContextManager[None]:
    """The context giving Piper's loop an alignment search: "vega" or "numpy" (ALIGNMENTS)."""
    search = vega_maximum_path if kind == "vega" else piper_reference.maximum_path_numpy
    return piper_reference.piper_alignment(timed_search(search))


# ------------------------------------------------------------------------------------- the model


def piper_arguments(profile: Any, num_symbols: int, batch: int) -> dict[str, Any]:
    """Piper's VitsModel arguments for the model a Vega profile builds (one speaker)."""
    v, a = profile.vits, profile.audio
    return {
        "batch_size": batch,
        "sample_rate": a.sample_rate,
        "num_symbols": num_symbols,
        "num_speakers": 1,
        "resblock": v.resblock,
        "resblock_kernel_sizes": tuple(v.resblock_kernel_sizes),
        "resblock_dilation_sizes": tuple(tuple(d) for d in v.resblock_dilation_sizes),
        "upsample_rates": tuple(v.upsample_rates),
        "upsample_initial_channel": v.upsample_initial_channel,
        "upsample_kernel_sizes": tuple(v.upsample_kernel_sizes),
        "filter_length": a.n_fft,
        "hop_length": a.hop_length,
        "win_length": a.win_length,
        "mel_channels": a.n_mels,
        "mel_fmin": a.f_min,
        "mel_fmax": a.f_max,
        "inter_channels": v.inter_channels,
        "hidden_channels": v.hidden_channels,
        "filter_channels": v.filter_channels,
        "n_heads": v.n_heads,
        "n_layers": v.n_layers,
        "kernel_size": v.kernel_size,
        "p_dropout": v.p_dropout,
        "use_sdp": v.duration_predictor == "stochastic",
        "segment_size": v.segment_size,
        "mos_metric": None,
    }


def medium_differences(arguments: dict[str, Any]) -> list[str]:
    """Where `arguments` depart from Piper's medium voice (its quality level's decoder, VitsModel's
    defaults elsewhere); the batch and the segment are the benchmark's own."""
    import inspect

    from piper.train.vits.lightning import VitsModel

    defaults = {k: p.default for k, p in inspect.signature(VitsModel).parameters.items()}
    medium = {**defaults, **piper_reference.piper_quality_arguments("medium")}
    own = {"batch_size", "segment_size", "num_symbols", "mos_metric", "mel_fmax"}
    differ = [
        f"{k}={arguments[k]!r} (medium: {medium.get(k)!r})"
        for k in arguments
        if k not in own and _plain(arguments[k]) != _plain(medium.get(k))
    ]
    if arguments["mel_fmax"] not in (None, arguments["sample_rate"] / 2):
        differ.append(f"mel_fmax={arguments['mel_fmax']} (medium: the Nyquist frequency)")
    return differ


def _plain(value: Any) -> Any:
    return [_plain(v) for v in value] if isinstance(value, list | tuple) else value


def parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def piper_callbacks() -> list[Any]:
    """Copies of the callbacks Piper's training command gives its Trainer (two checkpointers)."""
    from piper.train.__main__ import _DEFAULT_CALLBACKS

    return copy.deepcopy(list(_DEFAULT_CALLBACKS))


# -------------------------------------------------------------------------------------- the data


class PiperData:
    """A Vega task's recordings and ids as a Piper dataset, preprocessed by Piper's own code."""

    def __init__(self, folder: Path, task: Any, profile: Any, batch: int) -> None:
        import soundfile as sf
        from piper.train.vits.dataset import VitsDataModule

        waves, tokens, a = task.waves, task.dataset.tokens, profile.audio
        wavs = folder / "wavs"
        wavs.mkdir(parents=True, exist_ok=True)
        rows = []
        for index in range(len(waves.item_ids)):
            # Float WAVs of the samples Vega decoded: Piper reads back exactly what Vega trains on.
            samples = waves.get(index).numpy()
            sf.write(str(wavs / f"{index:05d}.wav"), samples, a.sample_rate, subtype="FLOAT")
            # An item without ids is never in Vega's order; "0" keeps the rows in step.
            ids = " ".join(str(int(t)) for t in tokens[index]) or "0"
            text = " ".join(waves.texts[index].replace("|", " ").split()) or "-"
            rows.append(f"{index:05d}|{text}|{ids}")
        (folder / "metadata.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
        self.module = VitsDataModule(
            csv_path=folder / "metadata.csv",
            cache_dir=folder / "cache",
            espeak_voice="en-us",
            config_path=folder / "config.json",
            voice_name="vega-bench",
            sample_rate=a.sample_rate,
            audio_dir=wavs,
            num_symbols=task.symbols.num_symbols,
            batch_size=batch,
            filter_length=a.n_fft,
            hop_length=a.hop_length,
            win_length=a.win_length,
            segment_size=profile.vits.segment_size,
            num_workers=PIPER_WORKERS,
            trim_silence=False,
            dataset_type="phoneme_ids",
        )
        self.module.prepare_data()
        self.module.setup("fit")
        # Every row, in the CSV's order: Piper's index of an item is Vega's.
        self.dataset = self.module.train_dataset.dataset
        found, wanted = len(cast(Sized, self.dataset)), len(waves.item_ids)
        if found != wanted:
            raise SystemExit(f"Piper's dataset holds {found} items, Vega's {wanted}")
        self.segment = profile.vits.segment_size

    def loader(self, batches: Sequence[Sequence[int]]) -> Any:
        """Piper's DataLoader (its collate and worker settings) over `batches` of item indices."""
        from piper.train.vits.dataset import UtteranceCollate
        from torch.utils.data import DataLoader

        return DataLoader(
            self.dataset,
            batch_sampler=[list(b) for b in batches],
            collate_fn=UtteranceCollate(is_multispeaker=False, segment_size=self.segment),
            num_workers=PIPER_WORKERS,
            pin_memory=True,
            persistent_workers=PIPER_WORKERS > 0,
            prefetch_factor=PREFETCH if PIPER_WORKERS > 0 else None,
        )


def batch_order(dataset: Any, batch: int, count: int) -> list[list[int]]:
    """The items of the first `count` batches Vega's loop takes: each epoch's order in full
    batches (Vega ends an epoch before a short last batch)."""
    if dataset.train_items() < batch:
        raise SystemExit(f"{dataset.train_items()} training items cannot fill a batch of {batch}")
    batches: list[list[int]] = []
    epoch = 0
    while len(batches) < count:
        order = dataset.epoch_order(epoch)
        batches += [order[k : k + batch] for k in range(0, len(order) - batch + 1, batch)]
        epoch += 1
    return batches[:count]


# -------------------------------------------------------------------------------------- the loop


class PhaseClock:
    """Seconds Piper's steps spend in the loss forward, the backward passes and the optimizer
    steps (its module's `_compute_loss` and `manual_backward` and each optimizer's `step`,
    wrapped), and in the alignment search; the totals are kept after every step."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.snapshots: list[dict[str, float]] = []

    def attach(self, module: Any, optimizers: Sequence[Any]) -> None:
        totals = self.totals
        module._compute_loss = common.timed(module._compute_loss, totals, "forward")
        module.manual_backward = common.timed(module.manual_backward, totals, "backward")
        for optimizer in optimizers:
            optimizer.step = common.timed(optimizer.step, totals, "optimizer")
        ALIGNMENT_S["alignment"] = 0.0

    def snapshot(self) -> None:
        names = ("forward", "backward", "optimizer")
        self.snapshots.append({**{n: self.totals.get(n, 0.0) for n in names}, **ALIGNMENT_S})

    def step(self, index: int) -> dict[str, float]:
        """Seconds of each phase in step `index` (0-based; the first has no start mark)."""
        if not 0 < index < len(self.snapshots):
            return {}
        before, after = self.snapshots[index - 1], self.snapshots[index]
        return {name: after[name] - before[name] for name in after}


class TurnCallback(L.Callback):
    """Times Piper's phases; hands the turn to the other loop at the end of every batch."""

    def __init__(self, clock: PhaseClock) -> None:
        self.clock = clock
        self.turns: Turns | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.clock.attach(pl_module, trainer.optimizers)
        assert self.turns is not None
        self.turns.ready("piper")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any, **kwargs: Any) -> None:
        self.clock.snapshot()
        assert self.turns is not None
        self.turns.step_done("piper")


class PiperLoop:
    """Piper's VitsModel and a `lightning.Trainer` as Piper's training command sets it up (its
    progress bar off), fit on `loader` in a thread of its own (`run`)."""

    def __init__(
        self,
        arguments: dict[str, Any],
        loader: Any,
        root: Path,
        precision: Any,  # a Lightning precision name: "32-true", "bf16-mixed", "16-mixed"
        accelerator: str,
    ) -> None:
        from piper.train.vits.lightning import VitsModel

        self.module = VitsModel(**arguments)
        self.clock = PhaseClock()
        self.callback = TurnCallback(self.clock)
        self.loader = loader
        self.trainer = L.Trainer(
            accelerator=accelerator,
            devices=1,
            precision=precision,
            max_epochs=1,
            default_root_dir=str(root),
            callbacks=[*piper_callbacks(), self.callback],
            enable_progress_bar=False,
        )
        self.error: BaseException | None = None

    def run(self, turns: Turns) -> None:
        self.callback.turns = turns
        try:
            self.trainer.fit(self.module, train_dataloaders=self.loader)
        except Aborted:
            pass  # the other loop failed; its error is the one reported
        except BaseException as exc:  # handed to the main thread, which raises it
            self.error = exc
            turns.fail(exc)
        finally:
            turns.finish("piper")

    def scheduler_steps(self) -> list[int]:
        """How often each of Piper's LR schedulers stepped in the fit."""
        return [int(c.scheduler.last_epoch) for c in self.trainer.lr_scheduler_configs]
