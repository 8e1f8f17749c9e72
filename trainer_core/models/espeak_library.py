"""espeak-ng's library, loaded in-process from the `espeakng-loader` wheel:
phonemes with no system package.

The wheel ships `libespeak-ng.so` and its `espeak-ng-data` folder, so `pip install` alone gives
phonemes on a bare machine. Only three calls are bound: `espeak_Initialize` (synchronous mode, the
wheel's data folder), `espeak_SetVoiceByName` (with the program's fallback to a language match),
`espeak_TextToPhonemes` (IPA), which returns one clause per call and advances the text pointer, and
`espeak_Synth` with a callback that collects 16-bit samples (benchmarks make voice corpora with it).
The library keeps global state and is not thread-safe, so one lock guards every call.
"""

from __future__ import annotations

import ctypes
import threading
from functools import lru_cache

AUDIO_OUTPUT_SYNCHRONOUS = 2
CHARS_UTF8 = 1
PHONEMES_IPA = 0x02
END_PAUSE = 0x1000
POS_CHARACTER = 1
PARAM_RATE = 1
EE_OK = 0
# int callback(short *wav, int numsamples, espeak_EVENT *events): 0 goes on.
SYNTH_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)


class VoiceQuery(ctypes.Structure):
    """espeak_VOICE, as `espeak_SetVoiceByProperties` reads it (only `languages` is set here)."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("languages", ctypes.c_char_p),
        ("identifier", ctypes.c_char_p),
        ("gender", ctypes.c_ubyte),
        ("age", ctypes.c_ubyte),
        ("variant", ctypes.c_ubyte),
        ("xx1", ctypes.c_ubyte),
        ("score", ctypes.c_int),
        ("spare", ctypes.c_void_p),
    ]


class EspeakLibraryError(RuntimeError):
    """The library could not be loaded or initialised, or refused a voice."""


class EspeakLibrary:
    """One loaded, initialised libespeak-ng; `phonemize` is safe to call from any thread."""

    def __init__(self, library_path: str, data_path: str) -> None:
        try:
            self._lib = ctypes.CDLL(library_path)
        except OSError as exc:
            raise EspeakLibraryError(f"could not load {library_path}: {exc}") from exc
        self._bind()
        self.data_path = data_path
        self.sample_rate = self._lib.espeak_Initialize(
            AUDIO_OUTPUT_SYNCHRONOUS, 0, data_path.encode(), 0
        )
        if self.sample_rate <= 0:
            raise EspeakLibraryError(
                f"espeak-ng could not initialise with its data folder {data_path}"
            )
        self._chunks: list[bytes] = []
        # kept referenced: the library holds only a raw pointer
        self._callback = SYNTH_CALLBACK(self._collect)
        self._lib.espeak_SetSynthCallback(self._callback)
        self.version: str = (self._lib.espeak_Info(None) or b"unknown").decode()
        self._lock = threading.Lock()
        self._voice: str | None = None

    def _bind(self) -> None:
        lib = self._lib
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_Info.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
        lib.espeak_Info.restype = ctypes.c_char_p
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetVoiceByProperties.argtypes = [ctypes.POINTER(VoiceQuery)]
        lib.espeak_SetVoiceByProperties.restype = ctypes.c_int
        lib.espeak_TextToPhonemes.argtypes = [
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_int,
            ctypes.c_int,
        ]
        lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
        lib.espeak_SetSynthCallback.argtypes = [SYNTH_CALLBACK]
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        lib.espeak_Synth.restype = ctypes.c_int

    def phonemize(self, text: str, voice: str) -> list[str]:
        """IPA for `text`, one string per clause (the binary prints the same
        clauses one per line)."""
        return [ipa for ipa, _ in self.clauses(text, voice)]

    def clauses(self, text: str, voice: str) -> list[tuple[str, str]]:
        """(IPA, the text read so far) for each clause of `text`: the library reads a little past
        each clause's end, so the text read says where a clause ended, not exactly at which mark."""
        raw = text.encode("utf-8")
        buffer = ctypes.create_string_buffer(raw)
        start = ctypes.addressof(buffer)
        pointer = ctypes.c_void_p(start)
        clauses = []
        with self._lock:
            self._set_voice(voice)
            # The library sets the pointer to NULL once the whole text is read.
            while pointer.value:
                ipa = self._lib.espeak_TextToPhonemes(
                    ctypes.byref(pointer), CHARS_UTF8, PHONEMES_IPA
                )
                read = raw[: pointer.value - start] if pointer.value else raw
                clauses.append(
                    (
                        (ipa or b"").decode("utf-8", errors="replace"),
                        read.decode("utf-8", "replace"),
                    )
                )
        return clauses

    def speak(self, text: str, voice: str, words_per_minute: int = 175) -> bytes:
        """`text` spoken as 16-bit mono PCM (native byte order) at `self.sample_rate`."""
        data = text.encode("utf-8") + b"\0"
        with self._lock:
            self._set_voice(voice)
            self._lib.espeak_SetParameter(PARAM_RATE, int(words_per_minute), 0)
            self._chunks = []
            status = self._lib.espeak_Synth(
                data, len(data), 0, POS_CHARACTER, 0, CHARS_UTF8 | END_PAUSE, None, None
            )
            chunks, self._chunks = self._chunks, []
        if status != EE_OK:
            raise EspeakLibraryError(f"espeak-ng could not speak {text[:60]!r} (status {status})")
        return b"".join(chunks)

    def _collect(self, wav: ctypes._Pointer[ctypes.c_short], count: int, _events: int) -> int:
        if wav and count > 0:
            self._chunks.append(ctypes.string_at(wav, count * 2))
        return 0

    def _set_voice(self, voice: str) -> None:
        if voice == self._voice:
            return
        # As the espeak-ng program does for -v: a voice name first, else a language such as "en-gb".
        if self._lib.espeak_SetVoiceByName(voice.encode()) != EE_OK:
            query = VoiceQuery(languages=voice.encode())
            if self._lib.espeak_SetVoiceByProperties(ctypes.byref(query)) != EE_OK:
                raise EspeakLibraryError(f"espeak-ng has no voice or language {voice!r}")
        self._voice = voice


@lru_cache(maxsize=1)
def library_or_reason() -> tuple[EspeakLibrary | None, str]:
    """The loaded library, or None and why not (asked once per process: a
    failed load is not retried)."""
    try:
        return load_espeak_library(), ""
    except EspeakLibraryError as exc:
        return None, str(exc)


@lru_cache(maxsize=1)
def load_espeak_library() -> EspeakLibrary:
    """The process's one library instance (initialising twice would reset
    the global state under a user)."""
    try:
        import espeakng_loader
    except ImportError as exc:
        raise EspeakLibraryError(
            "the espeakng-loader package is not installed (pip install espeakng-loader)"
        ) from exc
    try:
        data_path = espeakng_loader.get_data_path()
    except RuntimeError as exc:
        raise EspeakLibraryError(f"espeakng-loader has no voice data: {exc}") from exc
    return EspeakLibrary(espeakng_loader.get_library_path(), data_path)
