"""A VITS voice's text as Piper's runtime reads it: sentences of espeak-ng phonemes, clause marks
kept (`models.piper_phonemes`), each sentence framed on its own; and the id
map Piper gives a new voice.

Piper's trainer joins a transcript's framed sentences into one sequence; its runtime speaks each
sentence apart. `PiperText` keeps what it phonemized, so a corpus is phonemized once per table.
"""

from __future__ import annotations

from trainer_core.models.piper_phonemes import PiperPhonemizer

# Piper's id map for a new voice: one id per symbol, in this order (ids 0 to 165).
_SINGLE = (
    "_^$ !'(),-.:;?abcdefhijklmnopqrstuvwxyz"
    "\xe6\xe7\xf0\xf8\u0127\u014b\u0153\u01c0\u01c1\u01c2\u01c3"
    "\u0250\u0251\u0252\u0253\u0254\u0255\u0256\u0257\u0258\u0259\u025a\u025b\u025c\u025e\u025f\u0260"
    "\u0261\u0262\u0263\u0264\u0265\u0266\u0267\u0268\u026a\u026b\u026c\u026d\u026e\u026f\u0270\u0271"
    "\u0272\u0273\u0274\u0275\u0276\u0278\u0279\u027a\u027b\u027d\u027e\u0280\u0281\u0282\u0283\u0284"
    "\u0288\u0289\u028a\u028b\u028c\u028d\u028e\u028f\u0290\u0291\u0292\u0294\u0295\u0298\u0299\u029b"
    "\u029c\u029d\u029f\u02a1\u02a2\u02b2\u02c8\u02cc\u02d0\u02d1\u02de\u03b2\u03b8\u03c7\u1d7b\u2c71"
    '0123456789\u0327\u0303\u032a\u032f\u0329\u02b0\u02e4\u03b5\u2193#"\u2191\u033a\u033bg\u02a6X'
    "\u031d\u030a\u025d\u02b7"
)
# Vowel clusters a voice may merge into one symbol (Piper's `vowel_clusters`), after the singles.
_CLUSTERS = ("a\u026a", "a\u028a", "\u0254\u026a", "e\u026a", "o\u028a")
PIPER_SYMBOLS: tuple[str, ...] = (*_SINGLE, *_CLUSTERS)


def piper_id_map() -> dict[str, list[int]]:
    """A new voice's symbol -> ids, as Piper numbers a new voice."""
    return {symbol: [index] for index, symbol in enumerate(PIPER_SYMBOLS)}


class PiperText:
    """Transcripts -> sentences of Piper's symbols in one espeak-ng voice, remembered per text."""

    def __init__(self, voice: str) -> None:
        self.voice = voice
        self._phonemizer: PiperPhonemizer | None = None
        self._seen: dict[str, list[list[str]]] = {}

    def sentences(self, text: str) -> list[list[str]]:
        found = self._seen.get(text)
        if found is None:
            if self._phonemizer is None:
                self._phonemizer = PiperPhonemizer()
            found = self._seen[text] = self._phonemizer.sentences(text, self.voice)
        return found
