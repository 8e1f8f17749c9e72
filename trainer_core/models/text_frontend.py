"""Text front end for TTS: transcripts to integer ids, by characters or by espeak-ng phonemes.

Characters (the default) work for any language with no extra tools: text is NFKC-normalised,
optionally lowercased, and whitespace runs become one space. The vocabulary is a fixed base set
(ASCII letters, digits, punctuation, space) plus every symbol seen in the training transcripts,
so a Cyrillic or Japanese corpus gets its own letters. Id 0 is padding, id 1 stands for any
symbol the vocabulary does not hold (an unseen character at inference).

`tts.text_units = "auto"` picks phonemes when an espeak-ng backend works, else
characters; the choice is recorded in the encoder state (and in the model's
`text_phonemes` buffer), never re-decided later.

Phonemes come from espeak-ng, through one of two backends (`tts.espeak_backend`):
- "library": libespeak-ng and its voice data from the `espeakng-loader` wheel, called in-process
  (`trainer_core.models.espeak_library`). A plain `pip install` provides it, so it is the default.
- "binary": the `espeak-ng` program (`-q --ipa -v <voice>`), for platforms the
  wheel does not cover. The text
  goes to it on stdin, never through a shell or the argument list, so no transcript can be read as
  an option.
"auto" takes the library when it loads, else the binary. Both print IPA one clause at a time (stress
and length marks are symbols of their own); clauses are joined by one space. With the same voice
data both give the same phonemes (tested); espeak-ng releases differ in a few dictionary words, so
the encoder state records the backend and espeak-ng version that made a voice's vocabulary.

`state_dict()` holds only plain types; it goes into checkpoints (via the model) and config.json.
"""

from __future__ import annotations

import re
import shutil
import string
import subprocess
import unicodedata
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from trainer_core.contract.errors import ProfileError, VegaError
from trainer_core.models.espeak_library import EspeakLibraryError, library_or_reason

TextUnits = Literal["chars", "phonemes"]

PAD_ID = 0
UNK_ID = 1
SPECIAL_SYMBOLS = ("<pad>", "<unk>")
BASE_SYMBOLS = string.ascii_letters + string.digits + string.punctuation + " "
ESPEAK_TIMEOUT_S = 60.0
# espeak-ng starts a process per transcript; a few at a time keeps a large corpus quick to prepare.
ESPEAK_PARALLEL = 4
_WHITESPACE = re.compile(r"\s+")


class EspeakError(VegaError):
    """espeak-ng is missing or failed on a piece of text."""


def normalize_text(text: str, lowercase: bool) -> str:
    """NFKC, optional lowercase, whitespace runs to one space, trimmed."""
    text = unicodedata.normalize("NFKC", text)
    if lowercase:
        text = text.lower()
    return _WHITESPACE.sub(" ", text).strip()


EspeakBackend = Literal["library", "binary"]
INSTALL_HINT = (
    "pip install espeakng-loader (the library and voice data as a wheel), or the espeak-ng program "
    "(Debian/Ubuntu: apt install espeak-ng; macOS: brew install espeak-ng)"
)


def espeak_path() -> str:
    """The espeak-ng executable, or a clear error saying how to get it."""
    path = shutil.which("espeak-ng")
    if path is None:
        raise EspeakError(
            'tts.espeak_backend = "binary" needs the espeak-ng program, which is not on PATH '
            "(Debian/Ubuntu: apt install espeak-ng; macOS: brew install espeak-ng), "
            'or use tts.espeak_backend = "library" (pip install espeakng-loader)'
        )
    return path


def espeak_backend(preference: str = "auto") -> EspeakBackend:
    """The backend to phonemize with for a `tts.espeak_backend` setting, or
    EspeakError saying what to install."""
    if preference not in ("auto", "library", "binary"):
        raise ProfileError(
            f'tts.espeak_backend = {preference!r}: expected "auto", "library" or "binary"'
        )
    if preference in ("auto", "library"):
        library, why_not = library_or_reason()
        if library is not None:
            return "library"
        if preference == "library":
            raise EspeakError(f'tts.espeak_backend = "library": {why_not}')
    if preference == "binary" or shutil.which("espeak-ng"):
        espeak_path()
        return "binary"
    raise EspeakError(
        f'tts.text_units = "phonemes" needs espeak-ng: {INSTALL_HINT}; or set tts.text_units ='
        ' "chars"'
    )


def espeak_version(backend: EspeakBackend) -> str:
    """The espeak-ng release behind `backend` ("unknown" when the program does not say)."""
    if backend == "library":
        library, _ = library_or_reason()
        return library.version if library is not None else "unknown"
    try:
        out = subprocess.run(
            [espeak_path(), "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    found = re.search(r"(\d+\.\d+(?:\.\d+)?)", out.stdout)
    return found.group(1) if found else "unknown"


def resolve_units(requested: str, backend: str = "auto") -> TextUnits:
    """The units for a `tts.text_units` setting: "auto" is phonemes when an
    espeak-ng backend works."""
    if requested == "auto":
        try:
            espeak_backend(backend)
        except EspeakError:
            return "chars"
        return "phonemes"
    if requested not in ("chars", "phonemes"):
        raise ProfileError(
            f'tts.text_units = {requested!r}: expected "chars", "phonemes" or "auto"'
        )
    return requested  # type: ignore[return-value]


def phonemize(
    text: str, voice: str, backend: EspeakBackend = "library", data_path: str | None = None
) -> str:
    """IPA for `text` in `voice`; clauses joined by a space. `data_path` points
    the binary at other voice data."""
    clauses = (
        _library_clauses(text, voice)
        if backend == "library"
        else _binary_clauses(text, voice, data_path)
    )
    return _WHITESPACE.sub(" ", " ".join(clauses)).strip()


def _library_clauses(text: str, voice: str) -> list[str]:
    library, why_not = library_or_reason()
    if library is None:
        raise EspeakError(f"the espeak-ng library is not available: {why_not}")
    try:
        return library.phonemize(text, voice)
    except EspeakLibraryError as exc:
        raise EspeakError(
            f"espeak-ng failed with voice {voice!r} (tts.espeak_voice) on {text[:60]!r}: {exc}"
        ) from exc


def _binary_clauses(text: str, voice: str, data_path: str | None) -> list[str]:
    argv = [
        espeak_path(),
        "-q",
        "--ipa",
        "-v",
        voice,
        *([f"--path={data_path}"] if data_path else []),
    ]
    try:
        result = subprocess.run(
            argv,
            input=text,
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=ESPEAK_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise EspeakError(
            f"espeak-ng took longer than {ESPEAK_TIMEOUT_S:.0f} s on {text[:60]!r}"
        ) from exc
    except OSError as exc:
        raise EspeakError(f"espeak-ng could not be started: {exc.strerror or exc}") from exc
    if result.returncode != 0:
        detail = result.stderr.strip() or f"exit status {result.returncode}"
        raise EspeakError(
            f"espeak-ng failed with voice {voice!r} (tts.espeak_voice) on {text[:60]!r}: {detail}"
        )
    return result.stdout.splitlines()


class TextEncoder:
    """Transcript -> ids and back, with a vocabulary fixed when the encoder is built."""

    def __init__(
        self,
        symbols: Iterable[str],
        units: TextUnits = "chars",
        lowercase: bool = True,
        espeak_voice: str = "en-us",
        espeak_backend_choice: str = "auto",
    ) -> None:
        if units not in ("chars", "phonemes"):
            raise ValueError(
                f'units must be "chars" or "phonemes" (resolve "auto" first), got {units!r}'
            )
        self.units: TextUnits = units
        self.lowercase = lowercase
        self.espeak_voice = espeak_voice
        ordinary = [s for s in dict.fromkeys(symbols) if s not in SPECIAL_SYMBOLS]
        self.symbols: list[str] = [*SPECIAL_SYMBOLS, *ordinary]
        self._ids = {symbol: index for index, symbol in enumerate(self.symbols)}
        self._phoneme_cache: dict[str, str] = {}
        self.backend: EspeakBackend | None = None
        self.espeak_version = ""
        if units == "phonemes":
            # Decided now, with the install hint on failure, rather than at the first sample.
            self.backend = espeak_backend(espeak_backend_choice)
            self.espeak_version = espeak_version(self.backend)

    @classmethod
    def build(
        cls,
        transcripts: Iterable[str],
        units: str = "chars",
        lowercase: bool = True,
        espeak_voice: str = "en-us",
        espeak_backend_choice: str = "auto",
    ) -> TextEncoder:
        """An encoder whose vocabulary is the base set plus every symbol of
        `transcripts` ("auto" units allowed)."""
        units = resolve_units(units, espeak_backend_choice)
        encoder = cls([], units, lowercase, espeak_voice, espeak_backend_choice)
        transcripts = list(transcripts)
        encoder.prepare(transcripts)
        seen = {symbol for text in transcripts for symbol in encoder.units_of(text)}
        base = BASE_SYMBOLS if units == "chars" else " "
        extra = sorted(seen - set(base))
        built = cls([*base, *extra], units, lowercase, espeak_voice, encoder.backend or "auto")
        # phonemized once, reused by the dataset's encode calls
        built._phoneme_cache = encoder._phoneme_cache
        return built

    @classmethod
    def from_profile(cls, transcripts: Iterable[str], tts: Any) -> TextEncoder:
        """`build` with the profile's `[tts]` settings."""
        return cls.build(
            transcripts, tts.text_units, tts.lowercase, tts.espeak_voice, tts.espeak_backend
        )

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    def prepare(self, texts: Iterable[str]) -> None:
        """Phonemize many texts in parallel ahead of `encode` (nothing to do for characters)."""
        if self.units != "phonemes":
            return
        todo = [t for t in dict.fromkeys(texts) if t not in self._phoneme_cache]
        # The library is in-process and serialised by its lock; only the binary
        # gains from parallel processes.
        workers = ESPEAK_PARALLEL if self.backend == "binary" else 1
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for text, ipa in zip(todo, pool.map(self._phonemize_normalized, todo), strict=True):
                self._phoneme_cache[text] = ipa

    def _phonemize_normalized(self, text: str) -> str:
        # espeak-ng does its own casing; only Unicode and whitespace are normalised first.
        return phonemize(
            normalize_text(text, lowercase=False), self.espeak_voice, self.backend or "library"
        )

    def units_of(self, text: str) -> list[str]:
        """The symbols `text` is made of, before lookup in the vocabulary."""
        if self.units == "chars":
            return list(normalize_text(text, self.lowercase))
        if text not in self._phoneme_cache:
            self._phoneme_cache[text] = self._phonemize_normalized(text)
        return list(self._phoneme_cache[text])

    def encode(self, text: str) -> list[int]:
        """Ids for `text` (never 0; unknown symbols map to UNK_ID). Empty
        text gives an empty list."""
        return [self._ids.get(symbol, UNK_ID) for symbol in self.units_of(text)]

    def decode(self, ids: Iterable[int]) -> str:
        """Symbols for `ids`, padding dropped and unknown ids shown as <unk>."""
        parts = []
        for index in ids:
            index = int(index)
            if index == PAD_ID:
                continue
            parts.append(
                self.symbols[index] if 0 <= index < len(self.symbols) else SPECIAL_SYMBOLS[UNK_ID]
            )
        return "".join(parts)

    def state_dict(self) -> dict[str, Any]:
        """Plain-typed description (JSON and weights-only safe) that
        `from_state` turns back into an encoder."""
        return {
            "units": self.units,
            "lowercase": self.lowercase,
            "espeak_voice": self.espeak_voice,
            "symbols": list(self.symbols),
            # What made the phonemes (empty for characters): releases differ
            # in a few dictionary words.
            "espeak_backend": self.backend or "",
            "espeak_version": self.espeak_version,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> TextEncoder:
        """Rebuild an encoder from `state_dict()` output; a malformed state is a clear error."""
        try:
            symbols, units = list(state["symbols"]), state["units"]
            lowercase, voice = bool(state["lowercase"]), str(state["espeak_voice"])
        except (KeyError, TypeError) as exc:
            raise ProfileError(
                f"text encoder state is incomplete (missing {exc}); re-export the model"
            ) from exc
        if units not in ("chars", "phonemes") or symbols[: len(SPECIAL_SYMBOLS)] != list(
            SPECIAL_SYMBOLS
        ):
            shown = f"units {units!r}, symbols {state['symbols']!r:.40}"
            state_is = f"text encoder state is not one Vega writes ({shown})"
            raise ProfileError(f"{state_is}; re-export the model")
        return cls(
            symbols, units, lowercase, voice, _usable_backend(state.get("espeak_backend") or "auto")
        )

    # -------------------------------------------------------------- vocabulary as code points

    def symbol_codes(self) -> list[int]:
        """The vocabulary as one code point per id (-1 for the specials):
        storable as a tensor buffer."""
        return [-1] * len(SPECIAL_SYMBOLS) + [ord(s) for s in self.symbols[len(SPECIAL_SYMBOLS) :]]

    @classmethod
    def from_symbol_codes(
        cls,
        codes: Iterable[int],
        units: TextUnits,
        lowercase: bool,
        espeak_voice: str,
        espeak_backend_choice: str = "auto",
    ) -> TextEncoder:
        """Inverse of `symbol_codes`, with the settings from the profile."""
        codes = [int(c) for c in codes]
        if (
            codes[: len(SPECIAL_SYMBOLS)] != [-1] * len(SPECIAL_SYMBOLS)
            or min(codes[2:], default=0) < 0
        ):
            raise ProfileError(
                "the checkpoint's text vocabulary is damaged (bad special symbols); use another one"
            )
        return cls(
            [chr(c) for c in codes[len(SPECIAL_SYMBOLS) :]],
            units,
            lowercase,
            espeak_voice,
            espeak_backend_choice,
        )


def _usable_backend(recorded: str) -> str:
    """The backend a saved voice was made with when it works here, else
    whichever does (older states: "auto")."""
    if recorded in ("library", "binary"):
        try:
            return espeak_backend(recorded)
        except EspeakError:
            pass
    return "auto"
