"""A transformers VITS tokenizer's files (MMS voices), read without torch or transformers.

A folder in transformers' VITS format holds `vocab.json` (character -> id) and
`tokenizer_config.json` (`add_blank`, `normalize`, `phonemize`, `is_uroman`, `language`, the special
tokens). Older folders also carry `special_tokens_map.json` and `added_tokens.json`; newer ones list
`added_tokens_decoder` in the config. `read_tokenizer_folder` turns them into an `MmsTokenizer`,
with the ids transformers' `VitsTokenizer` would give its special tokens: a special token the
vocabulary holds keeps its id, the others get the ids after the vocabulary, in transformers' order
(bos, eos, unk, sep, pad, cls, mask, then the extra ones).

`MmsTokenizer.state()` holds only plain types: it goes into the voice's symbol map
(`vits.symbols`), so checkpoints and exports rebuild the same text front end. What the settings do
is `models.vits.mms_symbols`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer_core.contract.errors import ProfileError

VOCAB_FILE = "vocab.json"
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_MAP_FILE = "special_tokens_map.json"
ADDED_FILE = "added_tokens.json"
TOKENIZER_CLASS = "VitsTokenizer"
# transformers' order of the named special tokens: tokens missing from the
# vocabulary get ids in this order.
SPECIAL_ATTRIBUTES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
EXTRA_SPECIALS = ("extra_special_tokens", "additional_special_tokens")
# VitsTokenizer's own defaults for what a tokenizer_config.json leaves out.
DEFAULT_SPECIALS = {"unk_token": "<unk>", "pad_token": "<pad>"}
# Flags of an added token that would strip text around it: VitsTokenizer's folders never set them.
STRIPPING_FLAGS = ("lstrip", "rstrip", "single_word")


@dataclass(frozen=True)
class MmsTokenizer:
    """A VITS tokenizer's vocabulary and settings, as
    `VitsTokenizer.from_pretrained` would read them."""

    vocab: dict[str, int]
    """Symbol -> id, in the file's order (the order decides which entry a text matches first)."""
    add_blank: bool
    normalize: bool
    is_uroman: bool
    language: str | None
    specials: dict[str, str]
    """Named special tokens: attribute (unk_token, pad_token, ...) -> text."""
    added: dict[str, int] = field(default_factory=dict)
    """Added tokens (special or not) but the special tokens the vocabulary holds: text -> id."""
    name: str = ""
    """The voice these files belong to, for messages (a hub id or a folder)."""

    @property
    def unk_id(self) -> int:
        return self.whole_tokens()[self.specials["unk_token"]]

    def whole_tokens(self) -> dict[str, int]:
        """Tokens found whole in a text before it is split into characters: every added token, and
        the special tokens the vocabulary holds (with their vocabulary ids)."""
        found = {text: self.vocab[text] for text in self.specials.values() if text in self.vocab}
        return {**found, **self.added}

    def rows(self) -> int:
        """Embedding rows every id the tokenizer can give needs: the vocabulary's, an
        added token's when a text can still hold it after normalising, and, when text is
        not normalised, the unknown token's (a character outside the vocabulary then
        becomes it instead of being dropped)."""
        ids = list(self.vocab.values())
        ids += [
            i
            for text, i in self.added.items()
            if not self.normalize or set(text) <= self.vocab.keys()
        ]
        return 1 + max(ids + ([self.unk_id] if not self.normalize else []))

    def state(self) -> dict[str, Any]:
        return {
            "vocab": dict(self.vocab),
            "add_blank": self.add_blank,
            "normalize": self.normalize,
            "is_uroman": self.is_uroman,
            "language": self.language,
            "specials": dict(self.specials),
            "added": dict(self.added),
            "name": self.name,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> MmsTokenizer:
        try:
            language = state.get("language")
            tokenizer = cls(
                {str(s): int(i) for s, i in dict(state["vocab"]).items()},
                bool(state["add_blank"]),
                bool(state["normalize"]),
                bool(state["is_uroman"]),
                str(language) if language is not None else None,
                {str(k): str(v) for k, v in dict(state["specials"]).items()},
                {str(s): int(i) for s, i in dict(state.get("added") or {}).items()},
                str(state.get("name") or ""),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ProfileError(
                f"the voice's MMS tokenizer settings are incomplete ({exc}); export it again"
            ) from exc
        _check(tokenizer, "the voice's MMS tokenizer settings")
        return tokenizer


def is_tokenizer_folder(folder: Path) -> bool:
    return (folder / VOCAB_FILE).is_file() and (folder / CONFIG_FILE).is_file()


def read_tokenizer_folder(folder: Path, name: str | None = None) -> MmsTokenizer:
    """The tokenizer of a transformers VITS folder; ProfileError naming the file and
    field when it is one Vega cannot reproduce exactly (phonemized text, stripping
    added tokens) or is malformed."""
    vocab_path, config_path = folder / VOCAB_FILE, folder / CONFIG_FILE
    vocab = _json_object(vocab_path)
    config = _json_object(config_path)
    for symbol, index in vocab.items():
        if not symbol or not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ProfileError(
                f"{vocab_path}: entry {symbol!r}: {index!r} is not a symbol with an id >= 0"
            )
    ids = sorted(vocab.values())
    if ids != list(range(len(ids))):
        raise ProfileError(
            f"{vocab_path}: the ids are not 0..{len(ids) - 1}, one per symbol; fix the vocabulary"
        )
    cls = config.get("tokenizer_class", TOKENIZER_CLASS)
    if cls != TOKENIZER_CLASS:
        raise ProfileError(
            f"{config_path}: tokenizer_class is {cls!r}; a VITS voice's is {TOKENIZER_CLASS!r}"
        )
    if config.get("phonemize", True) is not False:
        raise ProfileError(
            f"{config_path}: phonemize is not false: this voice expects espeak phonemes made by the"
            " phonemizer package, which Vega does not reproduce; use a character voice (MMS voices"
            " set phonemize false)"
        )
    specials, added = _special_tokens(folder, config)
    language = config.get("language")
    tokenizer = MmsTokenizer(
        {str(s): int(i) for s, i in vocab.items()},
        _flag(config, "add_blank", True, config_path),
        _flag(config, "normalize", True, config_path),
        _flag(config, "is_uroman", False, config_path),
        str(language) if language is not None else None,
        specials,
        added,
        name or str(folder),
    )
    _check(tokenizer, str(config_path))
    return tokenizer


def _special_tokens(folder: Path, config: dict[str, Any]) -> tuple[dict[str, str], dict[str, int]]:
    """(named special tokens, added tokens outside the vocabulary with their
    ids), as transformers makes them."""
    config_path = folder / CONFIG_FILE
    settings = {**DEFAULT_SPECIALS, **{k: v for k, v in config.items() if k in SPECIAL_ATTRIBUTES}}
    extras = [token for key in EXTRA_SPECIALS for token in config.get(key) or []]
    added: dict[str, int] = {}
    if "added_tokens_decoder" in config:
        for index, token in dict(config["added_tokens_decoder"]).items():
            added[_token_text(token, config_path, "added_tokens_decoder")] = int(index)
    else:
        # Older folders: special_tokens_map.json overrides the config's special
        # tokens, added_tokens.json adds.
        if (folder / SPECIAL_MAP_FILE).is_file():
            mapped = _json_object(folder / SPECIAL_MAP_FILE)
            settings.update({k: v for k, v in mapped.items() if k in SPECIAL_ATTRIBUTES})
            extras += [token for key in EXTRA_SPECIALS for token in mapped.get(key) or []]
        if (folder / ADDED_FILE).is_file():
            added.update(
                {str(text): int(i) for text, i in _json_object(folder / ADDED_FILE).items()}
            )
    specials = {
        key: _token_text(value, config_path, key)
        for key, value in settings.items()
        if value is not None
    }
    vocab = _json_object(folder / VOCAB_FILE)
    wanted = [specials[key] for key in SPECIAL_ATTRIBUTES if key in specials]
    wanted += [_token_text(token, config_path, "extra special tokens") for token in extras]
    for text in wanted:
        if text not in vocab and text not in added:
            added[text] = len(set(vocab) | set(added))
    # A special token the vocabulary holds keeps its vocabulary id (whole_tokens
    # finds it): not listed twice.
    kept = [text for text in specials.values() if text in vocab]
    return specials, {text: index for text, index in added.items() if text not in kept}


def _token_text(token: Any, path: Path, key: str) -> str:
    """A token's text: a string, or a serialised AddedToken (refused when it
    strips text around it)."""
    if isinstance(token, str) and token:
        return token
    if isinstance(token, dict) and isinstance(token.get("content"), str) and token["content"]:
        flags = [flag for flag in STRIPPING_FLAGS if token.get(flag)]
        if flags:
            raise ProfileError(
                f"{path}: {key}: token {token['content']!r} sets {', '.join(flags)}, "
                "which Vega does not reproduce; remove the flag"
            )
        return str(token["content"])
    raise ProfileError(f"{path}: {key}: {token!r} is not a token (a non-empty string)")


def _flag(config: dict[str, Any], key: str, default: bool, path: Path) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise ProfileError(f"{path}: {key} is {value!r}; it must be true or false")
    return value


def _check(tokenizer: MmsTokenizer, where: str) -> None:
    if "unk_token" not in tokenizer.specials:
        raise ProfileError(f"{where}: unk_token is unset; a VITS tokenizer needs one")
    if 0 not in tokenizer.vocab.values():
        raise ProfileError(f"{where}: no symbol has id 0, the blank put between symbols")


def _json_object(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ProfileError(
            f"{path} is missing; a transformers VITS folder holds {VOCAB_FILE} and {CONFIG_FILE}"
        ) from exc
    except (OSError, ValueError) as exc:
        raise ProfileError(f"{path} is not readable JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise ProfileError(f"{path}: expected a JSON object, found {type(document).__name__}")
    return document
