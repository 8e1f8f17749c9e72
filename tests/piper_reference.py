"""Piper's own VITS as the reference Vega's is checked against (tests and benches only).

piper-tts is GPL-3.0 and a test dependency: nothing under trainer_core imports it. This module
builds random-weight Piper voices at each quality level, saves them through Lightning's own
checkpoint path with the voice config Piper writes, and makes the variants a loader must read: the
same weights under torch's parametrization weight-norm names, a checkpoint shaped like a published
Lightning 1.x one (pathlib paths and an AttributeDict in its hyperparameters), and one holding a
global nobody allowed.

Piper's training forward imports a compiled alignment extension its wheel lacks;
`piper_alignment()` installs, for as long as it is active, a numpy stand-in written here from the
VITS paper's dynamic programme (most likely monotonic path, ties staying on the current symbol).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import pathlib
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

CORE_MODULE = "piper.train.vits.monotonic_align.monotonic_align.core"
# Small training windows keep the reference fast; the architecture stays the quality level's.
SEGMENT_SIZE = 1024
# Spread of the noise added to every tensor, relative to the tensor's own spread (absolute for
# constant tensors such as the zero-initialised flow projections).
RELATIVE_NOISE = 0.3
ABSOLUTE_NOISE = 0.03

_NARROW = {"hidden_channels": 96, "inter_channels": 96, "filter_channels": 384}


def piper_quality_arguments(quality: str) -> dict[str, Any]:
    """Piper's VitsModel arguments of a quality level: the decoders are piper.train.vits.config's
    ModelAudioConfig (low_quality for x_low/low/medium, high_quality for high); x_low narrows the
    encoders as rhasspy's trainer did; low and x_low are 16 kHz voices."""
    from piper.train.vits.config import ModelAudioConfig

    heavy = quality == "high"
    decoder = ModelAudioConfig.high_quality() if heavy else ModelAudioConfig.low_quality()
    arguments: dict[str, Any] = {
        "sample_rate": 16000 if quality in ("x_low", "low") else 22050,
        "resblock": decoder.resblock,
        "resblock_kernel_sizes": decoder.resblock_kernel_sizes,
        "resblock_dilation_sizes": decoder.resblock_dilation_sizes,
        "upsample_rates": decoder.upsample_rates,
        "upsample_initial_channel": decoder.upsample_initial_channel,
        "upsample_kernel_sizes": decoder.upsample_kernel_sizes,
    }
    if quality == "x_low":
        arguments.update(_NARROW)
    return arguments


# --------------------------------------------------------------------------------------- alignment


def maximum_path_numpy(
    paths: np.ndarray,
    values: np.ndarray,
    t_ys: np.ndarray,
    t_xs: np.ndarray,
) -> None:
    """Fill `paths` (B, Ty, Tx) int32 with the most likely monotonic path of `values` per item.

    score[y, x] = values[y, x] + max(score[y - 1, x], score[y - 1, x - 1]) over the cells from
    which the path can still start at (0, 0) and end at (Ty - 1, Tx - 1); the path is traced back
    from the end, stepping to the previous symbol only when that is strictly better (or
    unavoidable).
    """
    for b in range(values.shape[0]):
        t_y, t_x = int(t_ys[b]), int(t_xs[b])
        value = values[b, :t_y, :t_x].astype(np.float32)
        score = np.full((t_y, t_x), -np.inf, dtype=np.float32)
        columns = np.arange(t_x)
        for y in range(t_y):
            reachable = (columns <= y) & (columns >= t_x - t_y + y)
            if y == 0:
                best = np.where(columns == 0, np.float32(0.0), np.float32(-np.inf))
            else:
                before = np.concatenate([[np.float32(-np.inf)], score[y - 1, :-1]])
                best = np.maximum(score[y - 1], before).astype(np.float32)
            score[y] = np.where(reachable, value[y] + best, np.float32(-np.inf))
        x = t_x - 1
        for y in range(t_y - 1, -1, -1):
            paths[b, y, x] = 1
            if x > 0 and (x == y or score[y - 1, x] < score[y - 1, x - 1]):
                x -= 1


def _restore_modules(saved: dict[str, types.ModuleType | None]) -> None:
    """Put `sys.modules` entries back as they were (None: the name was absent)."""
    for name, module in saved.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module


@contextlib.contextmanager
def piper_alignment(search: Callable[..., None] = maximum_path_numpy) -> Iterator[None]:
    """Make Piper's `monotonic_align` importable with `search` as its compiled `maximum_path_c`
    (the numpy search by default), then take it away again."""
    import piper.train.vits as vits_package

    names = [CORE_MODULE.rsplit(".", 1)[0], CORE_MODULE, "piper.train.vits.monotonic_align"]
    saved = {name: sys.modules.get(name) for name in names}
    saved_attribute = getattr(vits_package, "monotonic_align", None)
    package = types.ModuleType(names[0])
    package.__path__ = []
    core = types.ModuleType(CORE_MODULE)
    core.maximum_path_c = search  # type: ignore[attr-defined]
    package.core = core  # type: ignore[attr-defined]
    sys.modules[names[0]], sys.modules[CORE_MODULE] = package, core
    sys.modules.pop(names[2], None)
    try:
        yield
    finally:
        _restore_modules(saved)
        if saved_attribute is None:
            vits_package.__dict__.pop("monotonic_align", None)
        else:
            vits_package.monotonic_align = saved_attribute


# ------------------------------------------------------------------------------------------ models


def quiet() -> contextlib.AbstractContextManager[None]:
    """Lightning's and torch's chatter off (banners, deprecation of the old weight norm)."""
    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning"):
        logger = logging.getLogger(name)
        level = logger.level
        logger.setLevel(logging.ERROR)
        stack.callback(logger.setLevel, level)
    return stack


_SHARED: dict[str, Any] = {}


def shared_discriminator() -> Any:
    """One Piper MultiPeriodDiscriminator for every reference: its shape is the same at every
    quality level, and building its 47 M parameters once saves time in each test module."""
    if "mpd" not in _SHARED:
        from piper.train.vits.models import MultiPeriodDiscriminator

        torch.manual_seed(1234)
        with quiet():
            _SHARED["mpd"] = MultiPeriodDiscriminator().eval()
    return _SHARED["mpd"]


def _meta_lightning(quality: str, num_speakers: int) -> Any:
    """Piper's Lightning VitsModel at a quality level, built by Piper's constructor on the meta
    device (no weights)."""
    from piper.train.vits.lightning import VitsModel

    with quiet(), torch.device("meta"):
        return VitsModel(
            mos_metric=None,
            num_speakers=num_speakers,
            segment_size=SEGMENT_SIZE,
            **piper_quality_arguments(quality),
        )


def _real_generator(meta_model: Any, seed: int) -> Any:
    """A real generator built by Piper's SynthesizerTrn from the very arguments Piper's constructor
    passed the meta one (read back from it)."""
    import inspect

    from piper.train.vits.models import SynthesizerTrn

    wiring = inspect.signature(SynthesizerTrn).parameters
    torch.manual_seed(seed)
    with quiet():
        return SynthesizerTrn(**{name: getattr(meta_model.model_g, name) for name in wiring})


def build_piper_generator(quality: str, num_speakers: int = 1, seed: int = 0) -> tuple[Any, Any]:
    """(hyperparameters, generator) of a Piper voice at a quality level, without Lightning's
    module and discriminator; the generator randomised as `build_piper_model`'s, in eval mode."""
    meta = _meta_lightning(quality, num_speakers)
    generator = _real_generator(meta, seed)
    randomise(generator, seed + 1)
    return dict(meta.hparams), generator.eval()


def build_piper_model(quality: str, num_speakers: int = 1, seed: int = 0) -> Any:
    """Piper's Lightning VitsModel at a quality level, generator randomised, in eval mode.

    The Lightning module is built by Piper's constructor on the meta device (no weights), then
    given a real generator, built by Piper's SynthesizerTrn from the very arguments Piper's
    constructor passed it (read back from the meta one), and the shared real discriminator.
    """
    model = _meta_lightning(quality, num_speakers)
    model.model_g = _real_generator(model, seed)
    model.model_d = shared_discriminator()
    assert model.model_mrd is None
    # The generator's zero-initialised parts need moving; the discriminator's default init is
    # random.
    randomise(model.model_g, seed + 1)
    # Lightning remembers the device a module was built on: the meta one, until told.
    return model.to("cpu").eval()


@torch.no_grad()
def randomise(model: torch.nn.Module, seed: int) -> None:
    """Move every tensor off its initial value, zero-initialised flow projections included, so that
    every path (splines, couplings, affine flows) does real work in the comparisons."""
    generator = torch.Generator().manual_seed(seed)
    for tensor in model.state_dict().values():
        spread = float(tensor.std()) if tensor.numel() > 1 else 0.0
        scale = RELATIVE_NOISE * spread if spread > 0 else ABSOLUTE_NOISE
        tensor.add_(torch.randn(tensor.shape, generator=generator) * scale)


def save_lightning_checkpoint(model: Any, path: Path) -> None:
    """Save through Lightning's own path (Trainer.save_checkpoint), as Piper's training does, but
    without zip CRCs (the Lightning 1.x fixture has them, so readers see both)."""
    import lightning

    with quiet(), _without_crc():
        trainer = lightning.Trainer(
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.strategy.connect(model)
        trainer.save_checkpoint(path)


def write_voice_config(
    path: Path,
    quality: str,
    sample_rate: int,
    num_symbols: int,
    speakers: int,
) -> None:
    """The voice config as Piper writes it (PiperConfig.to_dict), with audio.quality, dataset and
    language as published voices have them."""
    from piper.config import PhonemeType, PiperConfig
    from piper.phoneme_ids import DEFAULT_PHONEME_ID_MAP

    config = PiperConfig(
        num_symbols=num_symbols,
        num_speakers=speakers,
        sample_rate=sample_rate,
        espeak_voice="en-us",
        phoneme_id_map=DEFAULT_PHONEME_ID_MAP,
        phoneme_type=PhonemeType.ESPEAK,
        speaker_id_map={f"speaker_{i}": i for i in range(speakers)} if speakers > 1 else {},
        piper_version="1.8.0",
    ).to_dict()
    config["audio"]["quality"] = quality
    config["dataset"] = "reference"
    config["language"] = {"code": "en_US", "family": "en", "region": "US"}
    path.write_text(json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8")


def _load(path: Path) -> dict[str, Any]:
    # A file this module has just written: the fast full unpickler is safe here.
    return torch.load(path, map_location="cpu", weights_only=False, mmap=True)


@contextlib.contextmanager
def _without_crc() -> Iterator[None]:
    """torch.save without zip CRCs (torch's option; several times faster): readers must cope."""
    from torch.utils.serialization import config

    saved = config.save.compute_crc32
    config.save.compute_crc32 = False
    try:
        yield
    finally:
        config.save.compute_crc32 = saved


def resave_with_parametrization_names(source: Path, target: Path) -> None:
    """The checkpoint with its weight-norm tensors under torch's parametrization names, saved
    without zip CRCs."""
    content = _load(source)
    renamed = {}
    for name, tensor in content["state_dict"].items():
        name = name.replace(".weight_g", ".parametrizations.weight.original0")
        renamed[name.replace(".weight_v", ".parametrizations.weight.original1")] = tensor
    content["state_dict"] = renamed
    with _without_crc():
        torch.save(content, target)


class _AttributeDict(dict):  # type: ignore[type-arg]
    """Shaped like Lightning 1.x's AttributeDict: a dict whose items are also attributes."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as exc:
            raise AttributeError(key) from exc


def resave_as_lightning_1x(source: Path, target: Path) -> dict[str, Any]:
    """The checkpoint re-pickled as a published Lightning 1.x Piper checkpoint: hyperparameters in
    an AttributeDict of `pytorch_lightning.utilities.parsing`, with pathlib paths; returns them."""
    content = _load(source)
    hyper = _AttributeDict(content["hyper_parameters"])
    hyper["dataset"] = [pathlib.PosixPath("/data/voices/reference/dataset.jsonl")]
    hyper["config_path"] = pathlib.PosixPath("/data/voices/reference/config.json")
    hyper["trained_on"] = pathlib.PureWindowsPath("C:/voices/reference")
    content["hyper_parameters"] = hyper
    content["pytorch-lightning_version"] = "1.7.7"
    # Throwaway modules under Lightning 1.x's names, just for the save (pickle checks the class is
    # importable where its __module__ says).
    root = "pytorch_lightning"
    names = [root, f"{root}.utilities", f"{root}.utilities.parsing"]
    saved = {name: sys.modules.get(name) for name in names}
    for name in names:
        sys.modules[name] = types.ModuleType(name)
    _AttributeDict.__module__, _AttributeDict.__qualname__ = names[-1], "AttributeDict"
    sys.modules[names[-1]].AttributeDict = _AttributeDict  # type: ignore[attr-defined]
    try:
        torch.save(content, target)
    finally:
        _restore_modules(saved)
    return dict(hyper)


def save_with_foreign_global(target: Path) -> None:
    """A small checkpoint whose hyperparameters hold a datetime.timedelta: outside every
    allow-list."""
    import datetime

    content = {
        "state_dict": {"model_g.enc_p.emb.weight": torch.zeros(4, 2)},
        "hyper_parameters": {"sample_rate": 22050, "max_time": datetime.timedelta(hours=1)},
    }
    buffer = io.BytesIO()
    torch.save(content, buffer)
    target.write_bytes(buffer.getvalue())


@dataclass
class PiperReference:
    """One random-weight Piper voice on disk, and the model it was saved from."""

    quality: str
    num_speakers: int
    model: Any
    """piper.train.vits.lightning.VitsModel, eval mode."""
    checkpoint: Path
    parametrized: Path
    """The same checkpoint with torch's parametrization weight-norm names."""
    voice_config: Path


def make_reference(
    folder: Path,
    quality: str,
    num_speakers: int = 1,
    seed: int = 0,
) -> PiperReference:
    """Build, save and describe a reference voice in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    model = build_piper_model(quality, num_speakers, seed)
    checkpoint = folder / "epoch=0-step=0.ckpt"
    save_lightning_checkpoint(model, checkpoint)
    voice_config = folder / f"{checkpoint.name}.onnx.json"
    hparams = model.hparams
    write_voice_config(
        voice_config,
        quality,
        hparams.sample_rate,
        hparams.num_symbols,
        num_speakers,
    )
    parametrized = folder / "parametrized" / checkpoint.name
    parametrized.parent.mkdir(exist_ok=True)
    resave_with_parametrization_names(checkpoint, parametrized)
    (parametrized.parent / voice_config.name).write_bytes(voice_config.read_bytes())
    return PiperReference(quality, num_speakers, model, checkpoint, parametrized, voice_config)


# ----------------------------------------------------------------------------------- small voices

# A Piper voice far narrower than any quality level (the dashboard's tests need a Piper-made
# checkpoint, not a good one): 16 kHz, Piper's low-quality decoder layout at a fraction of its
# width. Piper's discriminator keeps its fixed size whatever the generator's.
SMALL_ARGUMENTS: dict[str, Any] = {
    "sample_rate": 16000,
    "inter_channels": 16,
    "hidden_channels": 16,
    "filter_channels": 32,
    "n_layers": 1,
    "resblock": "2",
    "resblock_kernel_sizes": (3,),
    "resblock_dilation_sizes": ((1, 2),),
    "upsample_rates": (8, 8, 4),
    "upsample_initial_channel": 32,
    "upsample_kernel_sizes": (16, 16, 8),
}


def make_small_reference(
    folder: Path,
    quality: str = "x_low",
    seed: int = 0,
    **arguments: Any,
) -> tuple[Path, Path]:
    """A random-weight Piper voice built by Piper's own VitsModel constructor from SMALL_ARGUMENTS
    (each overridable), saved through Lightning as `<folder>/<folder name>.ckpt` with the voice
    config Piper writes beside it (audio.quality says `quality`); returns (checkpoint, config)."""
    import inspect

    from piper.train.vits.lightning import VitsModel
    from piper.train.vits.models import SynthesizerTrn

    folder.mkdir(parents=True, exist_ok=True)
    wanted = {**SMALL_ARGUMENTS, **arguments}
    with quiet(), torch.device("meta"):  # the constructor's wiring, no weights (as above)
        model = VitsModel(mos_metric=None, segment_size=SEGMENT_SIZE, **wanted)
    wiring = inspect.signature(SynthesizerTrn).parameters
    torch.manual_seed(seed)
    with quiet():
        model.model_g = SynthesizerTrn(**{name: getattr(model.model_g, name) for name in wiring})
    model.model_d = shared_discriminator()
    randomise(model.model_g, seed + 1)
    model = model.to("cpu").eval()
    checkpoint = folder / f"{folder.name}.ckpt"
    save_lightning_checkpoint(model, checkpoint)
    voice_config = folder / f"{folder.name}.onnx.json"
    hparams = model.hparams
    write_voice_config(voice_config, quality, hparams.sample_rate, hparams.num_symbols, 1)
    return checkpoint, voice_config


# ----------------------------------------------------------------------------------- comparing


def build_vega(config: Any) -> Any:
    """Vega's model with uninitialised memory: every tensor is about to be loaded anyway."""
    from trainer_core.models.vits.model import VitsModel

    with torch.device("meta"):
        model = VitsModel(config)
    return model.to_empty(device="cpu").eval()


def gap(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}"
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


class Gauge:
    """Asserts each comparison and records its largest difference (a junit property). Tolerances
    are absolute for values up to 1 and relative above (a KL of 400 has float32 steps of 3e-5)."""

    def __init__(self, record: Any) -> None:
        self.record = record

    def same(self, name: str, piper: torch.Tensor, vega: torch.Tensor, tolerance: float) -> float:
        difference = gap(piper, vega)
        scale = max(1.0, float(piper.double().abs().max())) if piper.numel() else 1.0
        self.record(name, f"{difference:.3g}")
        message = f"{name}: differs by {difference:.3g} (scale {scale:.3g})"
        assert difference <= tolerance * scale, message
        return difference

    def lists(self, name: str, piper: list[Any], vega: list[Any], tolerance: float) -> None:
        flat_p = [t for group in piper for t in (group if isinstance(group, list) else [group])]
        flat_v = [t for group in vega for t in (group if isinstance(group, list) else [group])]
        assert len(flat_p) == len(flat_v) > 0
        worst = max(gap(p, v) for p, v in zip(flat_p, flat_v, strict=True))
        self.record(name, f"{worst:.3g}")
        assert worst <= tolerance, f"{name}: differs by {worst:.3g}"
