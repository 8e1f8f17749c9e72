"""What a Piper voice checkpoint is, without torch: its voice config and its pickled metadata.

A Piper voice is a Lightning checkpoint (`*.ckpt`) and the voice config Piper writes beside the
ONNX model (`*.onnx.json`: sample rate, phoneme map, speakers). `find_voice_config` finds that JSON
for a checkpoint, `read_voice_config` reads it, and `read_checkpoint_metadata` reads the
checkpoint's hyperparameters and the name and shape of every tensor from the zip's `data.pkl`
without reading any tensor bytes.

The pickle is read as data, never unpickled freely: `find_class` answers only from
`PICKLE_ALLOW_LIST`, which maps each allowed global to a harmless stand-in (tensors become shapes,
paths become strings, Lightning's and argparse's attribute dicts become dicts); any other global is
refused with its name. The torch loader (`models.vits.piper_checkpoint`) passes the same table to
torch's weights-only loader, so both readers accept exactly the same files. Published Piper
checkpoints were saved by Lightning 1.x and hold `pathlib` paths and an `AttributeDict` among their
hyperparameters, hence those entries.
"""

from __future__ import annotations

import io
import json
import pickle
import struct
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from trainer_core.contract.errors import ProfileError

VOICE_CONFIG_SUFFIX = ".onnx.json"
VOICE_CONFIG_NAME = "config.json"
# Piper's inference defaults when a voice config has no "inference" section.
DEFAULT_NOISE_SCALE = 0.667
DEFAULT_LENGTH_SCALE = 1.0
DEFAULT_NOISE_W = 0.8
# Fixed part of a zip local file header, before the name and the extra field.
_LOCAL_HEADER_SIZE = 30


class PiperCheckpointError(ProfileError):
    """A Piper checkpoint or its voice config is missing, unreadable or holds the unexpected.

    A ProfileError (the CLI prints it and exits 2); not an InitSourceError, because init_sources
    imports this module.
    """


# -------------------------------------------------------------------------------------- allow-list


@dataclass(frozen=True)
class TensorInfo:
    """A tensor's shape and element type, as the pickle describes it."""

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class StorageStandIn:
    """Where a tensor's bytes would be: its element type (the bytes are never read)."""

    dtype: str
    numel: int = 0


@dataclass(frozen=True)
class StorageKind:
    """Stand-in for one of torch's typed storage classes (`torch.FloatStorage`, ...)."""

    dtype: str


class PickledNamespace(dict[str, Any]):
    """Stand-in for `argparse.Namespace`, whose pickle sets attributes: they become items."""

    def __setstate__(self, state: Mapping[str, Any] | None) -> None:
        if state:
            self.update(state)


def _posix_path_text(*parts: str) -> str:
    return str(PurePosixPath(*parts))


def _windows_path_text(*parts: str) -> str:
    return str(PureWindowsPath(*parts))


def _rebuild_tensor(store: StorageStandIn, _: int, size: tuple[int, ...], *_s: Any) -> TensorInfo:
    return TensorInfo(tuple(int(s) for s in size), store.dtype)


def _rebuild_parameter(data: TensorInfo, *rest: Any) -> TensorInfo:
    return data


@dataclass(frozen=True)
class AllowedGlobal:
    """One global a checkpoint's pickle may name, and what stands in for it when read as data."""

    stand_in: object
    """What `find_class` returns: a function or class to call, or a storage kind."""
    torch_native: bool = False
    """True when torch's weights-only loader allows it already (tensor rebuilding, storages)."""


_STORAGE_TYPES = {
    "FloatStorage": "float32",
    "DoubleStorage": "float64",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
}


def _native(stand_in: object) -> AllowedGlobal:
    return AllowedGlobal(stand_in, torch_native=True)


# Dict subclasses pickled as a dict's items: a plain dict stands in (torch's weights-only loader
# fills no other mapping type).
_ATTRIBUTE_DICTS = (
    "pytorch_lightning.utilities.parsing.AttributeDict",
    "lightning.fabric.utilities.data.AttributeDict",
    "lightning_fabric.utilities.data.AttributeDict",
    "lightning.pytorch.utilities.parsing.AttributeDict",
)
_PATHS: dict[str, Callable[..., str]] = {
    "pathlib.PosixPath": _posix_path_text,
    "pathlib.PurePosixPath": _posix_path_text,
    "pathlib.Path": _posix_path_text,
    "pathlib.WindowsPath": _windows_path_text,
    "pathlib.PureWindowsPath": _windows_path_text,
}

PICKLE_ALLOW_LIST: dict[str, AllowedGlobal] = {
    "torch._utils._rebuild_tensor_v2": _native(_rebuild_tensor),
    "torch._utils._rebuild_parameter": _native(_rebuild_parameter),
    "torch._utils._rebuild_parameter_with_state": _native(_rebuild_parameter),
    **{f"torch.{name}": _native(StorageKind(dtype)) for name, dtype in _STORAGE_TYPES.items()},
    "collections.OrderedDict": _native(OrderedDict),
    **{name: AllowedGlobal(text) for name, text in _PATHS.items()},
    **{name: AllowedGlobal(dict) for name in _ATTRIBUTE_DICTS},
    "argparse.Namespace": AllowedGlobal(PickledNamespace),
}
"""Every global a Piper checkpoint may name -> its stand-in; one table for both readers."""


def refusal(global_name: str, path: Path) -> PiperCheckpointError:
    """The error for a global outside the allow-list."""
    return PiperCheckpointError(
        f"checkpoint {path} holds {global_name}, which is not on Vega's allow-list of what a "
        "Piper checkpoint may contain (it is read as data, never unpickled freely)"
    )


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles a checkpoint's data.pkl into plain data and stand-ins, naming no other class."""

    def __init__(self, data: bytes, path: Path) -> None:
        super().__init__(io.BytesIO(data))
        self._path = path

    def find_class(self, module: str, name: str) -> Any:
        allowed = PICKLE_ALLOW_LIST.get(f"{module}.{name}")
        if allowed is None:
            raise refusal(f"{module}.{name}", self._path)
        return allowed.stand_in

    def persistent_load(self, pid: Any) -> Any:
        # ('storage', storage kind, key, location, numel): the bytes stay in the zip, unread.
        if isinstance(pid, tuple) and len(pid) >= 2 and isinstance(pid[1], StorageKind):
            numel = int(pid[4]) if len(pid) > 4 else 0
            return StorageStandIn(pid[1].dtype, numel)
        raise PiperCheckpointError(f"checkpoint {self._path}: unexpected storage record {pid!r}")


# -------------------------------------------------------------------------------------- checkpoint


@dataclass(frozen=True)
class PiperCheckpointFacts:
    """A Piper checkpoint's metadata, read without torch."""

    path: Path
    hyperparameters: dict[str, Any]
    """Plain data: ints, floats, strings, None, lists, tuples, dicts (paths as strings)."""
    tensors: dict[str, TensorInfo]
    """Every state_dict tensor under its name in the file (Piper's names, `model_g.` ...)."""
    lightning_version: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Other top-level scalars (epoch, global_step)."""


def plain(value: Any) -> Any:
    """Stand-ins and containers turned into plain JSON-like data (tuples stay tuples)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    return value


def _member_bytes(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> bytes:
    """One zip member's bytes. Stored (uncompressed) members are read raw: torch can save without
    CRCs (`compute_crc32 = False`), which zipfile's checked read would refuse."""
    if info.compress_type != zipfile.ZIP_STORED:
        return archive.read(info)
    with path.open("rb") as handle:
        handle.seek(info.header_offset)
        header = handle.read(_LOCAL_HEADER_SIZE)
        if len(header) != _LOCAL_HEADER_SIZE or header[:4] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"bad local header for {info.filename}")
        name_length, extra_length = struct.unpack("<HH", header[26:30])
        handle.seek(info.header_offset + _LOCAL_HEADER_SIZE + name_length + extra_length)
        return handle.read(info.file_size)


def _pickle_bytes(path: Path) -> bytes:
    try:
        with zipfile.ZipFile(path) as archive:
            infos = [i for i in archive.infolist() if i.filename.rsplit("/", 1)[-1] == "data.pkl"]
            if len(infos) != 1:
                raise PiperCheckpointError(
                    f"checkpoint {path} is not a torch checkpoint (no single data.pkl in the zip)"
                )
            return _member_bytes(archive, infos[0], path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise PiperCheckpointError(f"cannot read checkpoint {path}: {exc}") from exc


def read_pickled_document(path: Path) -> Any:
    """The whole pickled document of a torch zip checkpoint, read as data: containers and plain
    values as they are, tensors as `TensorInfo`, paths as strings, attribute dicts as dicts; any
    global outside `PICKLE_ALLOW_LIST` is refused with its name."""
    path = Path(path)
    try:
        return _MetadataUnpickler(_pickle_bytes(path), path).load()
    except PiperCheckpointError:
        raise
    except Exception as exc:  # a damaged pickle raises anything from its opcodes
        raise PiperCheckpointError(f"cannot read checkpoint {path}: {exc}") from exc


def read_checkpoint_metadata(path: Path) -> PiperCheckpointFacts:
    """Hyperparameters and tensor shapes of a Piper (Lightning) checkpoint; no tensor is read."""
    path = Path(path)
    content = read_pickled_document(path)
    if not isinstance(content, Mapping):
        raise PiperCheckpointError(f"checkpoint {path} holds {type(content).__name__}, not a dict")
    state = content.get("state_dict")
    if not isinstance(state, Mapping):
        problem = "has no state_dict: is it a Piper (Lightning) checkpoint?"
        raise PiperCheckpointError(f"checkpoint {path} {problem}")
    tensors = {str(k): v for k, v in state.items() if isinstance(v, TensorInfo)}
    hyper = content.get("hyper_parameters") or {}
    version = content.get("pytorch-lightning_version")
    extra = {k: content[k] for k in ("epoch", "global_step") if isinstance(content.get(k), int)}
    return PiperCheckpointFacts(
        path=path,
        hyperparameters=plain(hyper) if isinstance(hyper, Mapping) else {},
        tensors=tensors,
        lightning_version=str(version) if version is not None else None,
        extra=extra,
    )


# ------------------------------------------------------------------------------------------- audio


@dataclass(frozen=True)
class PiperAudioSettings:
    """The audio features a Piper voice was trained on (Piper's hyperparameter names)."""

    sample_rate: int
    filter_length: int = 1024
    hop_length: int = 256
    win_length: int = 1024
    mel_channels: int = 80
    mel_fmin: float = 0.0
    mel_fmax: float | None = None

    def audio_section(self) -> dict[str, Any]:
        """The same settings as a profile's [audio] values (an unset
        mel_fmax is the Nyquist frequency)."""
        return {
            "sample_rate": self.sample_rate,
            "n_fft": self.filter_length,
            "hop_length": self.hop_length,
            "win_length": self.win_length,
            "n_mels": self.mel_channels,
            "f_min": self.mel_fmin,
            "f_max": self.mel_fmax if self.mel_fmax is not None else self.sample_rate / 2,
        }


def audio_settings(hparams: Mapping[str, Any], voice: PiperVoiceConfig) -> PiperAudioSettings:
    """The checkpoint's audio settings (Piper's defaults where it names none); the sample rate is
    the hyperparameters' and the voice config's, which must agree."""
    path = voice.path
    rate = hparams.get("sample_rate") or voice.sample_rate
    if rate != voice.sample_rate:
        raise PiperCheckpointError(
            f"the checkpoint was trained at sample_rate {rate} but its voice config {path} says "
            f"{voice.sample_rate}: pass --init-config naming this voice's own .onnx.json"
        )
    defaults = PiperAudioSettings(sample_rate=int(rate))
    values: dict[str, Any] = {"sample_rate": int(rate)}
    for name in ("filter_length", "hop_length", "win_length", "mel_channels"):
        values[name] = int(hparams.get(name) or getattr(defaults, name))
    values["mel_fmin"] = float(hparams.get("mel_fmin") or 0.0)
    fmax = hparams.get("mel_fmax")
    values["mel_fmax"] = float(fmax) if fmax is not None else None
    return PiperAudioSettings(**values)


# ------------------------------------------------------------------------------------ voice config


@dataclass(frozen=True)
class PiperVoiceConfig:
    """A Piper voice config (`*.onnx.json`)."""

    path: Path
    sample_rate: int
    quality: str | None
    """audio.quality ("x_low", "low", "medium", "high"), when the file says it."""
    espeak_voice: str
    phoneme_type: str
    num_symbols: int
    num_speakers: int
    phoneme_id_map: dict[str, list[int]]
    speaker_id_map: dict[str, int]
    noise_scale: float = DEFAULT_NOISE_SCALE
    length_scale: float = DEFAULT_LENGTH_SCALE
    noise_w: float = DEFAULT_NOISE_W
    hop_length: int | None = None
    dataset: str | None = None
    language: dict[str, str] = field(default_factory=dict)
    piper_version: str | None = None
    default_speaker_id: int = 0
    """The speaker a multi-speaker voice speaks as when none is named (Piper 1.5 and later)."""


def find_voice_config(ckpt: Path, given: Path | None) -> Path:
    """The voice config of checkpoint `ckpt`: `given` (--init-config) when set, else the first of
    `<ckpt>.onnx.json`, `<ckpt stem>.onnx.json` and `config.json` beside it, else the only
    `*.onnx.json` there."""
    ckpt = Path(ckpt)
    if given is not None:
        if not Path(given).is_file():
            raise PiperCheckpointError(f"--init-config {given}: no such file")
        return Path(given)
    folder = ckpt.parent
    candidates = [
        folder / f"{ckpt.name}{VOICE_CONFIG_SUFFIX}",
        folder / f"{ckpt.stem}{VOICE_CONFIG_SUFFIX}",
        folder / VOICE_CONFIG_NAME,
    ]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    others = sorted(folder.glob(f"*{VOICE_CONFIG_SUFFIX}")) if folder.is_dir() else []
    if len(others) == 1:
        return others[0]
    tried = ", ".join(c.name for c in candidates) + f", *{VOICE_CONFIG_SUFFIX}"
    found = f" (found several: {', '.join(o.name for o in others)})" if others else ""
    raise PiperCheckpointError(
        f"no Piper voice config for checkpoint {ckpt}: tried {tried} in {folder}{found}; "
        "pass --init-config FILE naming the voice's .onnx.json"
    )


def _config_error(path: Path, problem: str) -> PiperCheckpointError:
    return PiperCheckpointError(f"Piper voice config {path}: {problem}")


def _field(data: Mapping[str, Any], name: str, path: Path, kind: type, default: Any = ...) -> Any:
    """The value at dotted `name` (audio.sample_rate), of type `kind`; `default` if absent/null."""
    value: Any = data
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            if default is not ...:
                return default
            raise _config_error(path, f"missing field {name}")
        value = value[part]
    if value is None and default is not ...:
        return default
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        expected = kind.__name__
        raise _config_error(path, f"field {name} must be {expected}, got {value!r}")
    return value


def _id_map(raw: Mapping[str, Any], path: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for symbol, ids in raw.items():
        listed = ids if isinstance(ids, list) else [ids]
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in listed):
            where = f"phoneme_id_map[{symbol!r}]"
            raise _config_error(path, f"field {where} must be integer ids, got {ids!r}")
        out[str(symbol)] = [int(i) for i in listed]
    return out


def read_voice_config(path: Path) -> PiperVoiceConfig:
    """Read a Piper voice config; a bad file or a missing field is an error naming both."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PiperCheckpointError(f"cannot read Piper voice config {path}: {exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PiperCheckpointError(f"Piper voice config {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise PiperCheckpointError(f"Piper voice config {path} must hold a JSON object")
    speakers = _field(data, "speaker_id_map", path, dict, {})
    bad = [k for k, v in speakers.items() if not isinstance(v, int) or isinstance(v, bool)]
    if bad:
        field_name = f"speaker_id_map[{bad[0]!r}]"
        raise _config_error(path, f"field {field_name} must be an integer id")
    language = _field(data, "language", path, dict, {})
    quality = _field(data, "audio.quality", path, str, None)
    return PiperVoiceConfig(
        path=path,
        sample_rate=_field(data, "audio.sample_rate", path, int),
        quality=quality.replace("-", "_") if quality else None,
        espeak_voice=_field(data, "espeak.voice", path, str),
        phoneme_type=_field(data, "phoneme_type", path, str, "espeak"),
        num_symbols=_field(data, "num_symbols", path, int),
        num_speakers=_field(data, "num_speakers", path, int),
        phoneme_id_map=_id_map(_field(data, "phoneme_id_map", path, dict), path),
        speaker_id_map={str(k): int(v) for k, v in speakers.items()},
        noise_scale=_field(data, "inference.noise_scale", path, float, DEFAULT_NOISE_SCALE),
        length_scale=_field(data, "inference.length_scale", path, float, DEFAULT_LENGTH_SCALE),
        noise_w=_field(data, "inference.noise_w", path, float, DEFAULT_NOISE_W),
        hop_length=_field(data, "hop_length", path, int, None),
        dataset=_field(data, "dataset", path, str, None),
        language={str(k): str(v) for k, v in language.items()},
        piper_version=_field(data, "piper_version", path, str, None),
        default_speaker_id=_field(data, "default_speaker_id", path, int, 0),
    )
