"""Load training profiles: TOML files, `extends` chains, the machine file and `--set` overrides.

A profile is built from layers, applied in this order (later layers win):

1. the files of the `extends` chain, root ancestor first, ending with the profile file itself;
2. the machine overrides file (`<config dir>/machine.toml`), when it exists and is not disabled;
3. each `--set SECTION.KEY=VALUE` item, in the order given.

Layers are deep-merged (tables merge key by key, every other value replaces). Path fields
(`profile.PATH_FIELDS`) are resolved while a layer is read: relative to the folder of the file
that set them, or to the current folder for `--set`. So a parent's `data.path` stays relative
to the parent, and the resolved profile holds only absolute paths.

Validation runs on the merged result. Each pydantic error is attributed to the layer that
introduced it (the first layer after which the error is present in every merged prefix), and
every error becomes one line of a single `ProfileError` naming that layer, the dotted field,
the value and the rule (the wording is `profile_messages`'s).

The config folder is `$VEGA_CONFIG_DIR` when set, else `platformdirs.user_config_dir("vega")`.
Torch-free: the dashboard imports this module.
"""

from __future__ import annotations

import datetime
import os
import re
import tomllib
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import platformdirs
import tomli_w
from pydantic import ValidationError
from pydantic_core import ErrorDetails

import trainer_core
from trainer_core.contract.errors import ProfileError
from trainer_core.contract.notify_config import NOTIFY_TABLE, URL_ENV, notify_table_config
from trainer_core.contract.profile import PATH_FIELDS, Profile, field_descriptions
from trainer_core.contract.profile_messages import (
    describe_error,
    join_problems,
    section_models,
    show_value,
)
from trainer_core.contract.task_source import TASKS_TABLE, allowed_patterns
from trainer_core.contract.voice_dirs import VOICES_TABLE, voice_dirs_of

MachineFileArg = Path | str | None | Literal["default"]

# Longest `extends` chain followed; a deeper one is almost surely a mistake, not a design.
MAX_EXTENDS_DEPTH = 32


@dataclass(frozen=True)
class Layer:
    """One source of profile values: a file, the machine file or one `--set` item."""

    source: str  # label used in error messages: a displayed path or "--set train.lr=1e-4"
    data: dict[str, Any]  # raw values, path fields already resolved to absolute paths
    file: Path | None  # the file it came from (absolute), None for `--set`


@dataclass(frozen=True)
class LoadedProfile:
    """A validated profile together with where it came from (for `profile show` and run records)."""

    profile: Profile
    path: Path | None  # the profile file asked for (absolute); None for a profile built from a dict
    # files that made it up, in the order applied (extends chain, machine file)
    files: tuple[Path, ...]
    sources: tuple[str, ...]  # every layer's label in the order applied, `--set` items included


# ---------------------------------------------------------------- locations


def config_dir() -> Path:
    """The user's Vega config folder: $VEGA_CONFIG_DIR, else the platform's user config folder."""
    override = os.environ.get("VEGA_CONFIG_DIR")
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_config_dir("vega"))


def machine_file_path() -> Path:
    """Where the per-machine overrides file lives (it need not exist)."""
    return config_dir() / "machine.toml"


def repo_profiles_dir() -> Path:
    """The profiles shipped next to the package (present in source and editable installs)."""
    return Path(trainer_core.__file__).resolve().parent.parent / "profiles"


def user_profiles_dir() -> Path:
    """The user's own profiles folder inside the config folder."""
    return config_dir() / "profiles"


def profile_dirs() -> list[Path]:
    """Folders searched for profiles by name; the user's folder first so a
    copy can shadow a shipped one."""
    return [user_profiles_dir(), repo_profiles_dir()]


def display_path(path: Path) -> str:
    """A path as shown in messages: relative to the current folder when inside it, else absolute."""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


# ---------------------------------------------------------------- finding profiles


def list_profiles() -> list[Path]:
    """Profiles available by name, sorted by name; a user profile hides a
    shipped one of the same name."""
    found: dict[str, Path] = {}
    for folder in profile_dirs():
        if folder.is_dir():
            for path in sorted(folder.glob("*.toml")):
                found.setdefault(path.stem, path)
    return [found[name] for name in sorted(found)]


def find_profile(name_or_path: str | Path) -> Path:
    """An existing file as given, else a profile name (`demo` or
    `demo.toml`) from the profile folders."""
    given = Path(name_or_path).expanduser()
    if given.is_file():
        return given
    text = str(name_or_path)
    if given.is_dir():
        raise ProfileError(f"{text} is a folder, not a profile file (expected a .toml file)")
    if "/" in text or os.sep in text:
        raise ProfileError(f"profile file not found: {text}")
    file_name = text if text.endswith(".toml") else f"{text}.toml"
    for folder in profile_dirs():
        if (folder / file_name).is_file():
            return folder / file_name
    raise ProfileError(_not_found_message(text))


def _not_found_message(name: str) -> str:
    folders = ", ".join(str(folder) for folder in profile_dirs())
    names = ", ".join(path.stem for path in list_profiles()) or "none"
    return f"no profile file or name '{name}' (looked in: {folders}; available: {names})"


# ---------------------------------------------------------------- reading files


def read_toml(path: Path, label: str) -> dict[str, Any]:
    """Parse one TOML file; every failure becomes a ProfileError starting with `label`."""
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ProfileError(f"{label}: file not found") from None
    except IsADirectoryError:
        raise ProfileError(f"{label}: is a folder, not a profile file") from None
    except OSError as exc:
        raise ProfileError(f"{label}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{label}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{label}: {_toml_error_text(exc)}") from None


def _toml_error_text(exc: tomllib.TOMLDecodeError) -> str:
    """'line 3, column 7: invalid TOML: Invalid value' from tomllib's '...
    (at line 3, column 7)'."""
    text = str(exc)
    match = re.search(r"\s*\(at line (\d+), column (\d+)\)$", text)
    if match is None:
        return f"invalid TOML: {text}"
    reason = text[: match.start()]
    return f"line {match.group(1)}, column {match.group(2)}: invalid TOML: {reason}"


def resolve_paths(data: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """A copy of `data` with its path fields made absolute against `base_dir` (`~` expanded)."""
    out = dict(data)
    for section, key in PATH_FIELDS:
        table = out.get(section)
        if isinstance(table, dict) and isinstance(table.get(key), str):
            if table[key].startswith("hf:"):  # a Hugging Face hub id (train.init_from), not a path
                continue
            expanded = Path(os.path.expanduser(table[key]))
            out[section] = {**table, key: os.path.normpath(Path(base_dir).absolute() / expanded)}
    return out


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` merged onto `base`: tables merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


# ---------------------------------------------------------------- the extends chain


def _file_layers(path: Path) -> list[Layer]:
    """The layers of a profile file and its `extends` ancestors, root ancestor first."""
    path = Path(os.path.abspath(path))
    return _layers_from_data(read_toml(path, display_path(path)), path, path.parent, [])


def _layers_from_data(
    data: dict[str, Any],
    file: Path | None,
    base_dir: Path,
    chain: list[Path],
    label: str | None = None,
) -> list[Layer]:
    """Layers for one parsed profile (popping its `extends`), preceded by its ancestors' layers."""
    label = label or (display_path(file) if file is not None else "<profile>")
    _refuse_allow_list(data, label)
    data = dict(data)
    parent_ref = data.pop("extends", None)
    layer = Layer(label, resolve_paths(data, base_dir), file)
    if parent_ref is None:
        return [layer]
    chain = chain + [file] if file is not None else chain
    parent = _parent_file(parent_ref, label, base_dir, chain)
    parent_layers = _layers_from_data(
        read_toml(parent, display_path(parent)), parent, parent.parent, chain
    )
    return parent_layers + [layer]


def _parent_file(parent_ref: Any, label: str, base_dir: Path, chain: list[Path]) -> Path:
    """The absolute file an `extends` value names, checked for type, existence and cycles."""
    if not isinstance(parent_ref, str) or not parent_ref:
        shown = show_value(parent_ref)
        raise ProfileError(
            f"{label}: extends = {shown}: expected a file name, relative to this profile"
        )
    parent = Path(os.path.normpath(base_dir / Path(parent_ref).expanduser()))
    seen = [os.path.realpath(item) for item in chain]
    if os.path.realpath(parent) in seen:
        loop = " -> ".join(display_path(item) for item in [*chain, parent])
        raise ProfileError(f"{label}: extends cycle: {loop}")
    if not parent.is_file():
        raise ProfileError(
            f'{label}: extends = "{parent_ref}": parent file not found: {display_path(parent)}'
        )
    if len(chain) >= MAX_EXTENDS_DEPTH:
        raise ProfileError(f"{label}: extends chain deeper than {MAX_EXTENDS_DEPTH} files")
    return parent


# ---------------------------------------------------------------- machine file and --set


def _refuse_allow_list(data: dict[str, Any], label: str) -> None:
    """A profile cannot allow the code it names: the allow-list is this
    machine's, in its machine file only."""
    if VOICES_TABLE in data:
        raise ProfileError(
            f"{label}: [{VOICES_TABLE}] (dirs) describes this machine, not a job: set it in the"
            f" machine file {machine_file_path()}"
        )
    if TASKS_TABLE in data:
        raise ProfileError(
            f"{label}: [{TASKS_TABLE}] (allowed) cannot be set in a profile: profiles travel"
            " between machines, and a profile that allowed its own modules would defeat the check;"
            f" allow modules in this machine's file {machine_file_path()} instead"
        )
    if NOTIFY_TABLE in data:
        raise ProfileError(
            f"{label}: [{NOTIFY_TABLE}] (a webhook for notifications) cannot be set in a profile:"
            " profiles travel and get shared, a webhook URL is a secret; set it in this machine's"
            f" file {machine_file_path()} or in the environment ({URL_ENV})"
        )


def _machine_layer(machine_file: MachineFileArg) -> Layer | None:
    """The machine file's layer: the default location when present, an
    explicit file (must exist), or none."""
    if machine_file is None:
        return None
    explicit = machine_file != "default"
    path = Path(
        os.path.abspath(Path(machine_file).expanduser() if explicit else machine_file_path())
    )
    if not explicit and not path.exists():
        return None
    label = f"machine file {display_path(path)}"
    data = read_toml(path, label)
    if "extends" in data:
        raise ProfileError(
            f"{label}: the machine file cannot use extends; put its settings in it directly"
        )
    # [tasks] is the machine's allow-list (contract.task_source reads it), not a profile section.
    allowed_patterns(data.pop(TASKS_TABLE, None), label)
    voice_dirs_of(data.pop(VOICES_TABLE, None), label, path.parent)
    # the trainer reads it; never in the profile
    notify_table_config(data.pop(NOTIFY_TABLE, None), label)
    return Layer(label, resolve_paths(data, path.parent), path)


def parse_override(item: str) -> Layer:
    """One `--set SECTION.KEY=VALUE` item as a layer; paths in it resolve
    against the current folder."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep:
        raise ProfileError(
            f"--set {item}: expected SECTION.KEY=VALUE (for example --set train.lr=1e-4)"
        )
    parts = key.split(".")
    if len(parts) != 2 or not all(part.strip() for part in parts):
        raise ProfileError(
            f"--set {item}: '{key}' is not SECTION.KEY (for example train.batch_size)"
        )
    section, name = (part.strip() for part in parts)
    _refuse_allow_list({section: None}, f"--set {item}")
    value = parse_override_value(raw.strip(), wants_text=(section, name) in _text_fields())
    return Layer(f"--set {item}", resolve_paths({section: {name: value}}, Path.cwd()), None)


def parse_override_value(raw: str, wants_text: bool = False) -> Any:
    """A TOML value (1e-4, "text", [1, 2], true), else the raw text as a bare string."""
    try:
        parsed = tomllib.loads(f"value = {raw}")
    except tomllib.TOMLDecodeError:
        return raw
    if set(parsed) != {"value"}:
        return raw  # the text held more than one value ("1\nx = 2"): take it literally
    value = parsed["value"]
    # No field takes a TOML date, and a text field given 123 means the text "123".
    if isinstance(value, (datetime.date, datetime.time)):
        return raw
    if wants_text and isinstance(value, (int, float, bool)):
        return raw
    return value


def _text_fields() -> set[tuple[str, str]]:
    """(section, key) of fields that hold text or paths: bare `--set` values stay text for them."""
    fields: set[tuple[str, str]] = set()
    for section, model in section_models().items():
        for key, field in model.model_fields.items():
            if {str, Path} & set(typing.get_args(field.annotation) or (field.annotation,)):
                fields.add((section, key))
    return fields


# ---------------------------------------------------------------- validation


def validate_layers(layers: list[Layer], title: str) -> Profile:
    """Merge the layers and validate; errors become one ProfileError attributed to their layers.

    `title` names the whole profile in the first line when there are several problems.
    """
    prefixes: list[dict[str, Any]] = []
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = deep_merge(merged, layer.data)
        prefixes.append(merged)
    try:
        return Profile.model_validate(merged)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
    problems = [
        f"{layers[_culprit(err, prefixes)].source}: {describe_error(err)}" for err in errors
    ]
    raise ProfileError(join_problems(problems, title))


def _culprit(err: ErrorDetails, prefixes: list[dict[str, Any]]) -> int:
    """Index of the layer that introduced `err`: it is present after that
    layer and every later one."""
    key = _error_key(err)
    for index in range(len(prefixes) - 1, 0, -1):
        if key not in _error_keys(prefixes[index - 1]):
            return index
    return 0


def _error_keys(data: dict[str, Any]) -> set[tuple[Any, ...]]:
    try:
        Profile.model_validate(data)
    except ValidationError as exc:
        return {_error_key(err) for err in exc.errors(include_url=False)}
    return set()


def _error_key(err: ErrorDetails) -> tuple[Any, ...]:
    """What identifies an error across prefixes: a changed value is a new
    error, a moved table is not."""
    loc, kind = tuple(err["loc"]), err["type"]
    if kind == "extra_forbidden" or (len(loc) == 1 and kind == "value_error"):
        return (loc, kind, err["msg"])
    return (loc, kind, err["msg"], repr(err.get("input")))


# ---------------------------------------------------------------- public loading API


def resolve_profile(
    path: str | Path,
    overrides: typing.Sequence[str] = (),
    machine_file: MachineFileArg = "default",
) -> LoadedProfile:
    """Load, merge and validate a profile file with its machine file and `--set` overrides.

    `machine_file`: "default" uses `<config dir>/machine.toml` when it exists; a path uses that file
    (it must exist); None applies no machine file.
    """
    file_path = Path(os.path.abspath(Path(path).expanduser()))
    layers = _file_layers(file_path)
    machine = _machine_layer(machine_file)
    if machine is not None:
        layers.append(machine)
    layers.extend(parse_override(item) for item in overrides)
    profile = validate_layers(layers, display_path(file_path))
    files = tuple(layer.file for layer in layers if layer.file is not None)
    return LoadedProfile(profile, file_path, files, tuple(layer.source for layer in layers))


def load_profile(
    path: str | Path,
    overrides: typing.Sequence[str] = (),
    machine_file: MachineFileArg = "default",
) -> Profile:
    """The validated Profile for a file (see `resolve_profile` for the layers applied)."""
    return resolve_profile(path, overrides, machine_file).profile


def load_profile_dict(
    data: dict[str, Any],
    base_dir: Path | None = None,
    source: str = "<profile>",
    overrides: typing.Sequence[str] = (),
) -> Profile:
    """Validate a profile given as a dict (e.g. edited in the dashboard), with the same messages.

    Relative paths and `extends` resolve against `base_dir` (default: the current folder).
    No machine file is applied; pass it explicitly as overrides if wanted.
    """
    base = Path(os.path.abspath(base_dir if base_dir is not None else Path.cwd()))
    layers = _layers_from_data(data, None, base, [], label=source)
    layers.extend(parse_override(item) for item in overrides)
    return validate_layers(layers, source)


# ---------------------------------------------------------------- writing TOML


def profile_to_toml(profile: Profile, describe: bool = False) -> str:
    """The resolved profile as TOML: every section, paths as strings, unset (None) fields omitted.

    With `describe`, each field's one-line description is written as a comment above it, and
    unset fields appear as comments so that every field is listed.
    """
    data = profile.model_dump(mode="json", exclude={"extends"})
    blocks = [_section_toml(name, values, describe) for name, values in data.items()]
    return "\n\n".join(blocks) + "\n"


def _section_toml(section: str, values: dict[str, Any], describe: bool) -> str:
    descriptions = field_descriptions()
    lines = [f"# {Profile.model_fields[section].description}"] if describe else []
    lines.append(f"[{section}]")
    for key, value in values.items():
        if describe:
            lines.append(f"# {descriptions[f'{section}.{key}']}")
            lines.append(f"# {key} = (unset)" if value is None else _key_value_toml(key, value))
        elif value is not None:
            lines.append(_key_value_toml(key, value))
    return "\n".join(lines)


def _key_value_toml(key: str, value: Any) -> str:
    """'key = value'; short lists stay on one line (tomli_w spreads every list over several)."""
    if (
        isinstance(value, list)
        and value
        and not any(isinstance(item, (list, dict)) for item in value)
    ):
        items = [tomli_w.dumps({"v": item}).strip().removeprefix("v = ") for item in value]
        inline = f"{key} = [{', '.join(items)}]"
        if len(inline) <= 88:
            return inline
    return tomli_w.dumps({key: value}).rstrip("\n")
