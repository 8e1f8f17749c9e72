"""An MMS voice's own text front end: text to ids exactly as transformers'
`VitsTokenizer` makes them.

The steps, in VitsTokenizer's order (settings from `contract.mms_tokenizer.MmsTokenizer`):
1. `normalize`: each character is lowercased unless the text holds a vocabulary
   entry (or added token) at that
   point, which is kept as written (so an upper-case symbol the vocabulary has stays upper case).
2. `language = "ron"`: t with comma below becomes t with cedilla, the letter
   MMS's Romanian voice knows.
3. `is_uroman`, when the text has a character outside ASCII: romanised with the `uroman` package.
4. `normalize`: characters outside the vocabulary are dropped (and counted),
   then whitespace at both ends.
5. The text is cut at its whole tokens (added tokens, and the special tokens
   the vocabulary holds, e.g. the
   blank's own letter): each such token is one id, with no blanks around it; every other piece
   becomes one id per character, with `add_blank` putting id 0 between them and at both ends of the
   piece. Without `normalize`, a character outside the vocabulary becomes the unknown token (counted
   too).
No Unicode normalisation is applied: decomposed accents (NFD) are separate
characters, as in VitsTokenizer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from trainer_core.contract.errors import ProfileError
from trainer_core.contract.mms_tokenizer import MmsTokenizer

BLANK_ID = 0
ROMANIAN = "ron"
INSTALL_HINT = "pip install 'vega[hf]'"
_romanizer: Any = None


def romanizer(tokenizer: MmsTokenizer) -> Any:
    """The process's uroman romaniser (built once: it takes seconds), or a
    clear error naming the voice."""
    global _romanizer
    if _romanizer is None:
        try:
            import uroman
        except ImportError as exc:
            raise ProfileError(
                f"voice {tokenizer.name}: its tokenizer_config.json sets is_uroman = true (text in"
                " other scripts is romanised before it is spoken), which needs the uroman package:"
                f" {INSTALL_HINT}"
            ) from exc
        _romanizer = uroman.Uroman()
    return _romanizer


def require_romanizer(tokenizer: MmsTokenizer) -> None:
    """Fails now, not at the first sentence, when the voice romanises and uroman is missing."""
    if tokenizer.is_uroman:
        romanizer(tokenizer)


class MmsText:
    """Text -> ids for one MMS tokenizer; `missing` counts the characters
    dropped or unknown so far."""

    def __init__(self, tokenizer: MmsTokenizer) -> None:
        self.tokenizer = tokenizer
        self.missing: Counter[str] = Counter()
        self._whole = tokenizer.whole_tokens()
        self._lookup = {**tokenizer.vocab, **self._whole}
        # Entries kept as written when normalising, by first character, in VitsTokenizer's order.
        self._entries: dict[str, list[str]] = {}
        for entry in [*tokenizer.vocab, *sorted(tokenizer.added, key=tokenizer.added.__getitem__)]:
            self._entries.setdefault(entry[0], []).append(entry)
        self._whole_by_first: dict[str, list[str]] = {}
        for token in sorted(self._whole, key=len, reverse=True):
            self._whole_by_first.setdefault(token[0], []).append(token)

    def check_ready(self) -> None:
        require_romanizer(self.tokenizer)

    def prepare(self, text: str) -> tuple[str, list[str]]:
        """(the text the ids are made from, the characters dropped from it)."""
        t = self.tokenizer
        if t.normalize:
            text = self._lower_outside_vocabulary(text)
        if t.language == ROMANIAN:
            text = text.replace("\u021b", "\u0163")
        if t.is_uroman and not text.isascii():
            text = str(romanizer(t).romanize_string(text))
        if not t.normalize:
            return text, []
        kept = "".join(char for char in text if char in t.vocab)
        return kept.strip(), [char for char in text if char not in t.vocab]

    def symbols_of(self, text: str) -> list[str]:
        """The characters of `text` the ids stand for (whole tokens as one), blanks left out."""
        symbols: list[str] = []
        for piece, whole in self._pieces(self.prepare(text)[0]):
            symbols += [piece] if whole else list(piece)
        return symbols

    def encode(self, text: str) -> list[int]:
        prepared, dropped = self.prepare(text)
        self.missing.update(dropped)
        ids: list[int] = []
        for piece, whole in self._pieces(prepared):
            if whole:
                ids.append(self._whole[piece])
                continue
            inner = [self._id_of(char) for char in piece]
            if self.tokenizer.add_blank:
                inner = [i for index in inner for i in (BLANK_ID, index)] + [BLANK_ID]
            ids += inner
        return ids

    def _id_of(self, char: str) -> int:
        found = self._lookup.get(char)
        if found is None:
            self.missing[char] += 1
            return self.tokenizer.unk_id
        return found

    def _lower_outside_vocabulary(self, text: str) -> str:
        out: list[str] = []
        at = 0
        while at < len(text):
            entry = next(
                (e for e in self._entries.get(text[at], ()) if text.startswith(e, at)), None
            )
            if entry is None:
                out.append(text[at].lower())
                at += 1
            else:
                out.append(entry)
                at += len(entry)
        return "".join(out)

    def _pieces(self, text: str) -> Iterator[tuple[str, bool]]:
        """`text` cut at its whole tokens (longest first at each point):
        (piece, is a whole token)."""
        start = at = 0
        while at < len(text):
            token = next(
                (w for w in self._whole_by_first.get(text[at], ()) if text.startswith(w, at)), None
            )
            if token is None:
                at += 1
                continue
            if at > start:
                yield text[start:at], False
            yield token, True
            at += len(token)
            start = at
        if start < len(text):
            yield text[start:], False


def dropped_characters(tokenizer: MmsTokenizer, texts: Iterable[str]) -> Counter[str]:
    """The characters the voice's front end drops (or, without
    normalisation, makes unknown) in `texts`."""
    encoder = MmsText(tokenizer)
    encoder.check_ready()
    for text in texts:
        encoder.encode(text)
    return encoder.missing
