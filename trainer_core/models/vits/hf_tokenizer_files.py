"""A voice's text front end as transformers' VITS tokenizer files, for an
exported transformers folder.

`write_tokenizer_files(table, folder)` writes `vocab.json`, `tokenizer_config.json` and
`special_tokens_map.json` so that `VitsTokenizer.from_pretrained(folder)` gives the ids
`table.encode` gives. Only a voice that keeps an MMS (transformers VITS) tokenizer can be written:
Piper's framing (`^` first, `$` last, NFD code points, espeak phonemes for most voices) is not
something VitsTokenizer can make, so such a voice is refused with the reason. The files are read
back with Vega's own reader before returning, and must describe the same tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainer_core.contract.errors import VegaError
from trainer_core.contract.mms_tokenizer import (
    CONFIG_FILE,
    SPECIAL_MAP_FILE,
    TOKENIZER_CLASS,
    VOCAB_FILE,
    MmsTokenizer,
    read_tokenizer_folder,
)
from trainer_core.models.vits.symbols import SymbolTable


class TokenizerNotRepresentable(VegaError):
    """The voice's text front end is one transformers' VitsTokenizer cannot reproduce."""


def write_tokenizer_files(table: SymbolTable, folder: Path) -> list[Path]:
    """Writes the tokenizer files of `table`'s voice into `folder`
    (created); returns the files written."""
    tokenizer = table.mms
    if tokenizer is None:
        raise TokenizerNotRepresentable(
            f"this voice frames its ids as Piper does ({table.units}, `^` first and `$` last,"
            " accents as symbols of their own), which transformers' VitsTokenizer cannot make: it"
            " only puts blanks between characters; a voice fine-tuned from a transformers VITS"
            " voice (e.g. an MMS voice) can be exported so"
        )
    folder.mkdir(parents=True, exist_ok=True)
    vocab_path, config_path = folder / VOCAB_FILE, folder / CONFIG_FILE
    special_path = folder / SPECIAL_MAP_FILE
    _write_json(vocab_path, tokenizer.vocab)
    _write_json(special_path, tokenizer.specials)
    config = _config(tokenizer)
    _write_json(config_path, config)
    if read_tokenizer_folder(folder, tokenizer.name).added != tokenizer.added:
        # Ids transformers would not give its added tokens by itself: spell them out.
        config["added_tokens_decoder"] = {
            str(index): {"content": text, "special": text in tokenizer.specials.values()}
            for text, index in sorted(tokenizer.added.items(), key=lambda item: item[1])
        }
        _write_json(config_path, config)
    again = read_tokenizer_folder(folder, tokenizer.name)
    if again != tokenizer:
        raise TokenizerNotRepresentable(
            f"{folder}: the tokenizer files written read back as another tokenizer "
            f"({again} instead of {tokenizer})"
        )
    return [vocab_path, config_path, special_path]


def _config(tokenizer: MmsTokenizer) -> dict[str, Any]:
    return {
        "add_blank": tokenizer.add_blank,
        "is_uroman": tokenizer.is_uroman,
        "language": tokenizer.language,
        "normalize": tokenizer.normalize,
        "phonemize": False,
        "tokenizer_class": TOKENIZER_CLASS,
        **tokenizer.specials,
    }


def _write_json(path: Path, document: dict[str, Any]) -> None:
    # The vocabulary's order is kept: it decides which entry a text matches first.
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
