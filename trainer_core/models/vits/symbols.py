"""A VITS voice's text front end: transcripts to ids the way Piper numbers
them, through a symbol -> ids map.

With phonemes from the espeak-ng library (`frontend = "piper"`), a transcript becomes Piper's
sentences of phoneme symbols with their clause marks (`vits.piper_text`); each sentence is framed as
Piper's runtime frames it: `^`, then `_` after every symbol, `$` at the end (`_` is padding, id 0);
a transcript's framed sentences are joined for training, as Piper's trainer joins them, and spoken
one by one. Characters (and voices made before this front end, or with the espeak-ng program) take
the text's units as one sentence. A symbol the map does not hold is left out and counted. The map is
a voice's own: a new voice starts from Piper's map for new voices, then every symbol of its corpus
it lacks; a voice started from another model keeps that model's map, and the corpus's symbols it
lacks take ids the model's embedding leaves unused (more rows only when none are left).

A voice started from a transformers VITS folder (an MMS voice) keeps that folder's vocabulary and
its text front end instead (`mms`, `vits.mms_symbols`): no Piper framing, blanks as VitsTokenizer
puts them, characters outside the vocabulary dropped and counted, never given new rows.

`state_dict()` (plain types) goes into the task's model config, so checkpoints
and exports rebuild the same map.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer_core.contract.errors import ProfileError
from trainer_core.contract.mms_tokenizer import MmsTokenizer
from trainer_core.models.text_frontend import TextEncoder, espeak_backend, resolve_units
from trainer_core.models.vits.mms_symbols import MmsText, require_romanizer
from trainer_core.models.vits.piper_text import PiperText, piper_id_map

PAD, BOS, EOS = "_", "^", "$"
PIPER_FRONTEND = "piper"


@dataclass
class SymbolTable:
    """Symbol -> ids, the number of embedding rows, and how transcripts become symbols."""

    id_map: dict[str, list[int]]
    num_symbols: int
    units: str
    """"phonemes" or "chars"."""
    lowercase: bool
    espeak_voice: str
    espeak_backend: str = "auto"
    missing: Counter[str] = field(default_factory=Counter)
    """Units of the transcripts encoded so far that the map does not hold, with their counts."""
    mms: MmsTokenizer | None = None
    """A transformers VITS voice's tokenizer: its vocabulary is `id_map`,
    its front end replaces Piper's."""
    frontend: str = ""
    """ "piper": Piper's sentences and clause marks; "": the text's units as one sentence."""

    def __post_init__(self) -> None:
        self._mms = MmsText(self.mms) if self.mms is not None else None
        if self._mms is not None:
            # one count of what transcripts lose, whichever front end
            self._mms.missing = self.missing
        for symbol in (PAD, BOS, EOS) if self.mms is None else ():
            if symbol not in self.id_map:
                raise ProfileError(
                    f"the symbol map has no {symbol!r}, which frames every sentence; use another"
                    " voice"
                )
        top = max(i for ids in self.id_map.values() for i in ids)
        if top >= self.num_symbols:
            raise ProfileError(
                f"the symbol map uses id {top} but the voice has {self.num_symbols} symbols"
            )
        self._frontend = TextEncoder(
            [],
            self.units,  # type: ignore[arg-type]
            self.lowercase,
            self.espeak_voice,
            self.espeak_backend,
        )
        self._piper = PiperText(self.espeak_voice) if self.frontend == PIPER_FRONTEND else None

    @classmethod
    def build(
        cls,
        transcripts: Iterable[str],
        tts: Any,
        num_symbols: int,
        base: Mapping[str, Sequence[int]] | None = None,
        mms: MmsTokenizer | None = None,
    ) -> tuple[SymbolTable, list[str]]:
        """The map for a corpus: `base` (a source model's) or the framing and punctuation, plus
        every symbol of the corpus it lacks; returns the table and the symbols added. With `mms`,
        its vocabulary as it is (none added)."""
        if mms is not None:
            table = cls(mms_id_map(mms), max(num_symbols, mms.rows()), "chars", False, "", mms=mms)
            require_romanizer(mms)
            return table, []
        units = resolve_units(tts.text_units, tts.espeak_backend)
        id_map = {symbol: list(ids) for symbol, ids in (base or piper_id_map()).items()}
        # Piper's clause marks need the library's read positions: the espeak-ng program has none.
        library = units == "phonemes" and espeak_backend(tts.espeak_backend) == "library"
        frontend = PIPER_FRONTEND if library else ""
        table = cls(
            dict(id_map),
            max(num_symbols, _rows(id_map)),
            units,
            tts.lowercase,
            tts.espeak_voice,
            tts.espeak_backend,
            frontend=frontend,
        )
        transcripts = list(transcripts)
        if table._piper is None:
            table._frontend.prepare(transcripts)
        seen = sorted({symbol for text in transcripts for symbol in table.symbols_of(text)})
        added = [symbol for symbol in seen if symbol not in id_map]
        used = {i for ids in id_map.values() for i in ids}
        free = (i for i in range(table.num_symbols + len(added)) if i not in used)
        for symbol in added:
            id_map[symbol] = [next(free)]
        grown = cls(
            id_map,
            max(table.num_symbols, _rows(id_map)),
            units,
            tts.lowercase,
            tts.espeak_voice,
            tts.espeak_backend,
            frontend=frontend,
        )
        # Phonemized once, reused by the dataset's encode calls.
        grown._frontend, grown._piper = table._frontend, table._piper
        return grown, added

    def symbols_of(self, text: str) -> list[str]:
        """`text` as symbols before lookup: its units, NFD-decomposed into code points (an MMS
        voice: the characters its ids stand for)."""
        if self._mms is not None:
            return self._mms.symbols_of(text)
        return [symbol for sentence in self._sentences(text) for symbol in sentence]

    def _sentences(self, text: str) -> list[list[str]]:
        if self._piper is not None:
            return self._piper.sentences(text)
        return [list(unicodedata.normalize("NFD", "".join(self._frontend.units_of(text))))]

    def encode(self, text: str) -> list[int]:
        """Ids for `text` as Piper's trainer makes them: each sentence framed (`^ _ s1 _ s2 _ ...
        $`), joined; an empty list when no symbol is known. An MMS voice's ids are
        VitsTokenizer's (`vits.mms_symbols`)."""
        return [i for ids in self.encode_sentences(text) for i in ids]

    def encode_sentences(self, text: str) -> list[list[int]]:
        """Each sentence's framed ids, as Piper's runtime speaks them one by one; none when no
        symbol of `text` is known. Piper frames every sentence, even one with no symbol; other front
        ends leave such sentences out."""
        if self._mms is not None:
            ids = self._mms.encode(text)
            return [ids] if ids else []
        framed = [self._frame(sentence) for sentence in self._sentences(text)]
        if not any(inner for inner in framed):
            return []
        return [self._framing(inner) for inner in framed if inner or self._piper is not None]

    def _frame(self, symbols: list[str]) -> list[int]:
        """The ids of `symbols`, each followed by padding (unknown symbols left out and counted)."""
        inner: list[int] = []
        pad = self.id_map[PAD]
        for symbol in symbols:
            ids = self.id_map.get(symbol)
            if ids is None:
                self.missing[symbol] += 1
                continue
            inner += [*ids, *pad]
        return inner

    def _framing(self, inner: list[int]) -> list[int]:
        return [*self.id_map[BOS], *self.id_map[PAD], *inner, *self.id_map[EOS]]

    def vocabulary(self) -> list[str | None]:
        """The symbol of each embedding row (None for rows no symbol uses):
        what a row means, for moving rows."""
        rows: list[str | None] = [None] * self.num_symbols
        for symbol, ids in self.id_map.items():
            for index in ids:
                rows[index] = symbol
        return rows

    def state_dict(self) -> dict[str, Any]:
        mms = {"mms": self.mms.state()} if self.mms is not None else {}
        return mms | {
            "id_map": {symbol: list(ids) for symbol, ids in self.id_map.items()},
            "num_symbols": self.num_symbols,
            "units": self.units,
            "lowercase": self.lowercase,
            "espeak_voice": self.espeak_voice,
            "espeak_backend": self._frontend.backend or "",
            "espeak_version": self._frontend.espeak_version,
            "frontend": self.frontend,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> SymbolTable:
        try:
            id_map = {
                str(symbol): [int(i) for i in ids] for symbol, ids in dict(state["id_map"]).items()
            }
            return cls(
                id_map,
                int(state["num_symbols"]),
                str(state["units"]),
                bool(state["lowercase"]),
                str(state["espeak_voice"]),
                str(state.get("espeak_backend") or "auto"),
                mms=MmsTokenizer.from_state(state["mms"]) if state.get("mms") else None,
                # voices made before Piper's front end: ""
                frontend=str(state.get("frontend") or ""),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ProfileError(
                f"the voice's symbol map is incomplete ({exc}); export the model again"
            ) from exc


def mms_id_map(tokenizer: MmsTokenizer) -> dict[str, list[int]]:
    """An MMS vocabulary as a symbol map (one id per symbol, the file's order)."""
    return {symbol: [index] for symbol, index in tokenizer.vocab.items()}


def _rows(id_map: Mapping[str, Sequence[int]]) -> int:
    return 1 + max(i for ids in id_map.values() for i in ids)
