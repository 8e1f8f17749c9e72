"""A VITS voice in transformers' format (Meta's MMS voices on the Hugging Face hub), read without
torch.

Such a folder holds `config.json` (`model_type` "vits": the model's shape and sample rate), the
weights (`model.safetensors`, else `pytorch_model.bin`), and the tokenizer (`vocab.json`: symbol ->
id; `tokenizer_config.json`: blanks, normalisation, uroman); a `README.md` model card may name its
licence in its front matter. `read_hf_voice` reads what the plan and the dashboard need from the
JSON files; the tensors are read by `models.vits.hf_folder`. `hub_folder` turns
`hf:ORG/NAME[@REVISION]` into a folder of huggingface_hub's cache, downloading it when the machine
may (`HF_HUB_OFFLINE` unset); offline, a model missing from the cache is an error naming the command
that fetches it.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer_core.contract.errors import InitSourceError

HUB_PREFIX = "hf:"
CONFIG = "config.json"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
VOCAB = "vocab.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
MODEL_CARD = "README.md"
MODEL_TYPE = "vits"
# MMS was trained on 80 mel bands from 0 Hz to the Nyquist frequency, with a
# window as long as the FFT.
MEL_BANDS = 80


@dataclass(frozen=True)
class HfVoice:
    """A transformers VITS folder: its config, weights file, vocabulary and tokenizer settings."""

    folder: Path
    config: dict[str, Any]
    weights: Path
    vocab: dict[str, int]
    tokenizer: dict[str, Any]
    license: str | None
    repo_id: str | None = None
    """`ORG/NAME` when the folder came from the hub (or its cache)."""

    @property
    def num_symbols(self) -> int:
        """Rows of the text embedding: the config's vocab_size (at least one
        past the highest id)."""
        top = max(self.vocab.values(), default=-1) + 1
        return max(int(self.config.get("vocab_size") or 0), top)

    def audio_section(self) -> dict[str, Any]:
        return hf_audio_section(self.config)

    @property
    def speaker_names(self) -> list[str]:
        """transformers numbers a multi-speaker voice's speakers (its
        speaker_id): "0", "1", ...; [] for one."""
        count = int(self.config.get("num_speakers") or 1)
        return [str(index) for index in range(count)] if count > 1 else []

    def describe(self) -> str:
        return (
            f"transformers VITS {self.repo_id}"
            if self.repo_id
            else f"transformers VITS folder {self.folder}"
        )


def hf_audio_section(config: dict[str, Any]) -> dict[str, Any]:
    """The [audio] values a transformers VITS was trained with: its sample rate, an FFT of
    2 * (spectrogram_bins - 1), the decoder's hop (the product of upsample_rates)."""
    rate = int(config.get("sampling_rate") or 16000)
    n_fft = 2 * (int(config.get("spectrogram_bins") or 513) - 1)
    hop = math.prod(int(r) for r in config.get("upsample_rates") or (8, 8, 2, 2))
    return {
        "sample_rate": rate,
        "n_fft": n_fft,
        "hop_length": hop,
        "win_length": n_fft,
        "n_mels": MEL_BANDS,
        "f_min": 0.0,
        "f_max": rate / 2,
    }


def is_hf_folder(folder: Path) -> bool:
    """A folder whose config.json says model_type "vits" (transformers' layout)."""
    try:
        document = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(document, dict) and document.get("model_type") == MODEL_TYPE


def _json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InitSourceError(
            f"{path.parent}: no {path.name} ({what}); a transformers VITS folder needs it"
        ) from exc
    except (OSError, ValueError) as exc:
        raise InitSourceError(f"{path}: not readable JSON ({exc})") from exc


def read_license(folder: Path) -> str | None:
    """The `license:` of a model card's YAML front matter (`---` lines), or None."""
    try:
        lines = (folder / MODEL_CARD).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    if not lines or lines[0].strip() != "---":
        return None
    for line in lines[1:]:
        if line.strip() == "---":
            break
        key, _, value = line.partition(":")
        if key.strip() == "license" and value.strip():
            return value.strip().strip("\"'")
    return None


def read_hf_voice(folder: Path, repo_id: str | None = None) -> HfVoice:
    """Read a transformers VITS folder's JSON files; InitSourceError naming the
    file that is missing or wrong."""
    config = _json(folder / CONFIG, "the model's shape")
    if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE:
        kind = config.get("model_type") if isinstance(config, dict) else None
        raise InitSourceError(
            f'{folder / CONFIG}: model_type is {kind!r}, not "vits"; name a VITS model'
        )
    weights = next((folder / name for name in WEIGHT_FILES if (folder / name).is_file()), None)
    if weights is None:
        raise InitSourceError(
            f"{folder}: no weights ({' or '.join(WEIGHT_FILES)}); download the whole model"
        )
    vocab = _json(folder / VOCAB, "the symbol -> id table")
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise InitSourceError(f"{folder / VOCAB}: expected a JSON object of symbol -> integer id")
    tokenizer_path = folder / TOKENIZER_CONFIG
    tokenizer = _json(tokenizer_path, "the tokenizer settings") if tokenizer_path.is_file() else {}
    license_name = read_license(folder) or config.get("license")
    return HfVoice(
        folder,
        config,
        weights,
        {str(k): int(v) for k, v in vocab.items()},
        dict(tokenizer),
        str(license_name) if license_name else None,
        repo_id,
    )


# ------------------------------------------------------------------------------------------------
# the hub


def parse_hub_id(given: str) -> tuple[str, str | None]:
    """`hf:ORG/NAME[@REVISION]` -> (ORG/NAME, REVISION or None);
    InitSourceError for another shape."""
    spec = given[len(HUB_PREFIX) :]
    repo, _, revision = spec.partition("@")
    if repo.count("/") != 1 or not all(repo.split("/")) or (spec.endswith("@") and not revision):
        raise InitSourceError(f"{given}: name a hub model as hf:ORG/NAME or hf:ORG/NAME@REVISION")
    return repo, revision or None


def hub_repo(given: object) -> str | None:
    """ORG/NAME when `given` is a hub id (`hf:ORG/NAME[@REVISION]`), else None."""
    text = str(given)
    return parse_hub_id(text)[0] if text.startswith(HUB_PREFIX) else None


# the plan, the start settings and the loader each ask: one hub query
@functools.lru_cache(maxsize=8)
def hub_folder(given: str) -> Path:
    """The cached folder of `hf:ORG/NAME[@REVISION]`, downloaded into
    huggingface_hub's cache unless offline."""
    repo, revision = parse_hub_id(given)
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError as exc:
        raise InitSourceError(
            f"{given}: hub models need huggingface_hub (pip install 'vega[hf]'), or name a"
            " downloaded folder"
        ) from exc
    fetch = f"hf download {repo}" + (f" --revision {revision}" if revision else "")
    try:
        return Path(snapshot_download(repo, revision=revision))
    except LocalEntryNotFoundError as exc:
        raise InitSourceError(
            f"{given}: {repo} is not in the Hugging Face cache and this machine is offline"
            f" (HF_HUB_OFFLINE); fetch it where there is internet with `{fetch}` (or"
            f" `huggingface-cli download {repo}`) and copy the cache, or name the downloaded folder"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - the hub's errors are many; each is the user's to fix
        raise InitSourceError(
            f"{given}: could not fetch {repo} from the hub ({exc}); try `{fetch}`"
        ) from exc


def cached_hub_folder(given: str) -> Path | None:
    """The cached folder of `hf:ORG/NAME[@REVISION]`, or None when it is not in the cache (or
    huggingface_hub is missing): a look that never downloads, for the dashboard's typed field."""
    repo, revision = parse_hub_id(given)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo, revision=revision, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached, or no huggingface_hub: the trainer says which
        return None
