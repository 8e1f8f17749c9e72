"""A Vega vits voice as a transformers VITS folder (`trainer-core export --hf`, a run's
`export/hf/{best,last}`).

What transformers cannot hold is refused with the reason before anything is written: a decoder with
residual block "2" (Piper's x_low, low and medium voices; `hf_config.hf_config_from_vits`) and a
text front end other than an MMS tokenizer's (Piper's framing; `hf_tokenizer_files`). The model card
carries the base model's licence, which the run recorded when it started from a transformers folder
(`base_model` in its model config).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn

from trainer_core.contract.errors import VegaError
from trainer_core.models.vits.config import VitsConfig
from trainer_core.models.vits.hf_folder import write_hf_folder
from trainer_core.models.vits.hf_tokenizer_files import (
    TokenizerNotRepresentable,
    write_tokenizer_files,
)
from trainer_core.models.vits.symbols import SymbolTable

NO_LICENSE = "other"


class HfExportError(VegaError):
    """The voice is one transformers' VitsModel cannot hold."""


def hf_inference(scales: Mapping[str, float]) -> dict[str, float]:
    """Vega's speaking scales under transformers' names (a length scale is
    the inverse of a speaking rate)."""
    return {
        "noise_scale": float(scales.get("noise_scale", 0.667)),
        "noise_scale_duration": float(scales.get("noise_scale_w", 0.8)),
        "speaking_rate": 1.0 / float(scales.get("length_scale", 1.0)),
    }


def model_card(base: Mapping[str, Any] | None, language: str | None, step: int | None) -> str:
    """README.md with YAML front matter: the base model's licence (or
    "other" when it is not known)."""
    license_name = (base or {}).get("license") or NO_LICENSE
    base_id = (base or {}).get("id")
    lines = [
        "---",
        f"license: {license_name}",
        "library_name: transformers",
        "pipeline_tag: text-to-speech",
    ]
    lines += [f"base_model: {base_id}"] if base_id else []
    lines += [f"language: {language}"] if language else []
    lines += ["tags:", "- vits", "- text-to-speech", "---", ""]
    started = f"fine-tuned from {base_id} " if base_id else ""
    lines.append(
        f"# VITS voice {started}with Vega" + (f" ({step} steps)" if step is not None else "")
    )
    lines.append("")
    if license_name == NO_LICENSE:
        lines.append(
            "The base model's licence was not recorded: check it before sharing this voice."
        )
    else:
        lines.append(f"Licensed as its base model is: {license_name}.")
    lines.append("")
    return "\n".join(lines)


def export_hf(
    generator: nn.Module,
    config: VitsConfig,
    symbols: SymbolTable,
    sample_rate: int,
    out: Path,
    scales: Mapping[str, float],
    base: Mapping[str, Any] | None = None,
    step: int | None = None,
) -> dict[str, Any]:
    """Write `out` for transformers; HfExportError (nothing written) when
    the voice cannot be held there."""
    if symbols.mms is None:
        try:
            write_tokenizer_files(symbols, out)  # refuses Piper's framing before it writes anything
        except TokenizerNotRepresentable as exc:
            raise HfExportError(f"export --hf: {exc}") from exc
    state = {name: tensor for name, tensor in generator.state_dict().items()}
    card = model_card(base, symbols.mms.language if symbols.mms is not None else None, step)
    try:
        return write_hf_folder(
            out,
            state,
            config,
            sample_rate,
            lambda folder: _tokenizer(symbols, folder),
            card,
            hf_inference(scales),
        )
    except VegaError as exc:
        raise HfExportError(f"export --hf: {exc}") from exc


def _tokenizer(symbols: SymbolTable, folder: Path) -> None:
    write_tokenizer_files(symbols, folder)


def base_model_of(given: Path | str | None) -> dict[str, Any] | None:
    """What a run started from, for the model card: a transformers folder's or hub model's id
    and licence; a Vega run, checkpoint or export passes on the base model its own model
    config recorded. None: from scratch."""
    from trainer_core.contract.checkpoint_peek import read_model_config
    from trainer_core.contract.hf_voice import hub_folder, hub_repo, is_hf_folder, read_hf_voice
    from trainer_core.contract.init_sources import read_export_config, resolve_source

    if given is None:
        return None
    repo = hub_repo(given)
    folder = hub_folder(str(given)) if repo is not None else Path(given)
    if is_hf_folder(folder):
        voice = read_hf_voice(folder, repo)
        return {"id": repo or folder.name, "license": voice.license}
    try:
        file = resolve_source(folder)
        if file.form not in ("export", "checkpoint"):
            return None  # a Piper checkpoint: no transformers base model
        config = read_export_config(file.path).get("model") if file.form == "export" else None
        config = config if config is not None else read_model_config(file.path)
    except VegaError:
        return None
    base = (config or {}).get("base_model")
    return dict(base) if isinstance(base, Mapping) else None
