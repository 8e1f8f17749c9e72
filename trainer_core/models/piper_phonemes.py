"""Piper's text front end on the stock espeak-ng library: phonemes per sentence, clause marks kept.

Piper's runtime phonemizes with an espeak-ng that also returns the mark that ended each clause, and
keeps it as a symbol: `, : ;` are followed by a space, `. ? !` end a sentence, and each sentence is
framed and spoken on its own. The library Vega ships returns only the phonemes, so the mark is
recovered from the text the library read for the clause: the last clause mark in it (the library
reads a few characters past a clause, never past the next clause's mark), the first mark of that run
(`?!` counts as `?`), `..` or `…` as a pause that ends neither clause nor sentence. The final clause
takes the mark the text ends with; with none it ends its sentence unmarked. Language switches
(`(en)`) are dropped and each phoneme string is split into NFD code points, as Piper's runtime does.

Piper's espeak-ng is a later release than the library's 1.52.0. In Spanish it writes a palatal
glide `ʲ` after /i/ before a vowel (`día` -> `dˈiʲa`), also across a space; Vega adds it there
(`GLIDE_LANGUAGES`). English has glides too, in contexts IPA alone cannot tell apart
(docs/architecture.md lists the sentences that differ); other languages are taken as they come.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from trainer_core.models.espeak_library import EspeakLibrary, load_espeak_library

# A clause mark in any script -> the mark Piper keeps; espeak-ng's dashes pause like a semicolon.
CLAUSE_MARKS = {
    ".": ".",
    "?": "?",
    "!": "!",
    ",": ",",
    ":": ":",
    ";": ";",
    "\u2013": ";",
    "\u2014": ";",  # en and em dash
    "\u3002": ".",
    "\uff0e": ".",
    "\u0964": ".",
    "\u06d4": ".",
    "\u0589": ".",
    "\u1362": ".",
    "\uff1f": "?",
    "\u061f": "?",
    "\u037e": "?",
    "\u055e": "?",
    "\uff01": "!",
    "\u055c": "!",
    "\uff0c": ",",
    "\u3001": ",",
    "\u060c": ",",
    "\u055d": ",",
    "\uff1a": ":",
    "\uff1b": ";",
    "\u061b": ";",
    "\u0387": ";",
}
ELLIPSIS = "\u2026"
SENTENCE_MARKS = frozenset(".?!")
SPACED_MARKS = frozenset(",:;")
_LANGUAGE_SWITCH = re.compile(r"\([^)]+\)")
GLIDE_LANGUAGES = frozenset({"es"})
_GLIDE = re.compile(r"(i[ːˑ]?)(?= ?[ˈˌ]?[aeouɐɑɒæɛəɜɪʊʌɔøœɯɤɨʉyɚɝ])")


@dataclass(frozen=True)
class Clause:
    """One clause as Piper's runtime sees it: its phonemes, the mark kept after them, and whether
    the clause ends a sentence."""

    phonemes: str
    mark: str
    ends_sentence: bool


def clause_mark(read: str, last: bool) -> tuple[str, bool]:
    """(the mark Piper keeps, ends a sentence) for a clause whose library read ended at `read`
    (the text from the clause's start to where the library stopped)."""
    found = _last_mark(read, whole=last)
    if found is None:
        return "", last
    if found == ELLIPSIS:
        return "", False
    return found, found in SENTENCE_MARKS


def _last_mark(text: str, whole: bool) -> str | None:
    """The mark of the last run of clause marks in `text` (for the final clause: only a run at the
    very end, closing quotes and brackets aside); `..`/`…` give ELLIPSIS."""
    end = len(text)
    if whole:
        while end and (text[end - 1] in "\"')]}\u00bb\u201d\u2019" or text[end - 1].isspace()):
            end -= 1
        if not end or not _is_mark(text[end - 1]):
            return None
    else:
        while end and not _is_mark(text[end - 1]):
            end -= 1
        if not end:
            return None
    start = end
    while start and _is_mark(text[start - 1]):
        start -= 1
    run = text[start:end]
    if run.startswith("..") or run[0] == ELLIPSIS:
        return ELLIPSIS
    return CLAUSE_MARKS[run[0]]


def _is_mark(char: str) -> bool:
    return char in CLAUSE_MARKS or char == ELLIPSIS


class PiperPhonemizer:
    """Text -> Piper's phoneme symbols, sentence by sentence, through the espeak-ng library."""

    def __init__(self, library: EspeakLibrary | None = None) -> None:
        self.library = library or load_espeak_library()

    def clauses(self, text: str, voice: str) -> list[Clause]:
        found = self.library.clauses(text, voice)
        clauses, done = [], 0
        for index, (ipa, read) in enumerate(found):
            last = index == len(found) - 1
            mark, ends = clause_mark(read[done:], last)
            phonemes = _LANGUAGE_SWITCH.sub("", ipa)
            if voice.split("-")[0].lower() in GLIDE_LANGUAGES:
                phonemes = _GLIDE.sub("\\1ʲ", phonemes)
            clauses.append(Clause(phonemes, mark, ends))
            done = _after_mark(read, done)
        return clauses

    def sentences(self, text: str, voice: str) -> list[list[str]]:
        """Each sentence's symbols (NFD code points, marks included), as Piper's runtime has them
        (an empty one too: a closing quote after the last mark makes one, and Piper frames it)."""
        sentences: list[list[str]] = []
        current: list[str] = []
        for clause in self.clauses(text, voice):
            spoken = clause.phonemes + clause.mark + (" " if clause.mark in SPACED_MARKS else "")
            current += list(unicodedata.normalize("NFD", spoken))
            if clause.ends_sentence:
                sentences.append(current)
                current = []
        if current:
            sentences.append(current)
        return sentences


def _after_mark(read: str, done: int) -> int:
    """Where the next clause's text starts: just after this clause's last
    mark (else where it began)."""
    end = len(read)
    while end > done and not _is_mark(read[end - 1]):
        end -= 1
    return end
