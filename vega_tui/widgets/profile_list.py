"""The profile picker: shipped and user profiles, each shown valid or with its validation errors.

`scan_profiles()` is plain Python (run it in a worker thread); `ProfileList` only displays the
result. Validation is the trainer's own
(`trainer_core.contract.profile_loader.resolve_profile`, torch-free), with the machine file and
the dashboard's `--set` overrides applied, so what shows as valid here starts there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trainer_core.contract.errors import VegaError
from vega_tui.widgets.choice_list import Choice, ChoiceList

if TYPE_CHECKING:
    from trainer_core.contract.profile import Profile

DEMO_PROFILE = "demo"


@dataclass(frozen=True)
class ProfileEntry:
    """One profile file: its validated profile, or the error lines that stop it from starting."""

    name: str
    path: Path
    origin: str  # "shipped" or "user"
    profile: Profile | None
    errors: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return self.profile is not None

    @property
    def error_text(self) -> str:
        return "\n".join(self.errors)


def scan_profiles(overrides: Sequence[str] = ()) -> list[ProfileEntry]:
    """Every profile available by name, validated (blocking: call it from a worker thread)."""
    # Imported here, off the first frame's path: the profile schema builds
    # pydantic models at import.
    from trainer_core.contract.profile_loader import list_profiles, repo_profiles_dir

    shipped = repo_profiles_dir().resolve()
    return [_entry(path, shipped, overrides) for path in list_profiles()]


def _entry(path: Path, shipped: Path, overrides: Sequence[str]) -> ProfileEntry:
    from trainer_core.contract.profile_loader import display_path, resolve_profile

    origin = "shipped" if path.resolve().parent == shipped else "user"
    try:
        profile = resolve_profile(path, overrides).profile
    except VegaError as exc:
        return ProfileEntry(
            path.stem, path, origin, None, _error_lines(str(exc), display_path(path))
        )
    return ProfileEntry(path.stem, path, origin, profile)


def _error_lines(message: str, label: str) -> tuple[str, ...]:
    """A ProfileError's problems one per line, without the header and without the file's own name
    (the list already names it); problems from other files (a parent, the
    machine file) keep theirs."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("invalid profile"):
        lines = lines[1:]
    return tuple(line.removeprefix(f"{label}: ") for line in lines)


def default_profile_name(entries: Sequence[ProfileEntry]) -> str | None:
    """The demo profile when present (a new user presses one key), else the first valid one."""
    names = [entry.name for entry in entries]
    if DEMO_PROFILE in names:
        return DEMO_PROFILE
    valid = [entry.name for entry in entries if entry.valid]
    return valid[0] if valid else (names[0] if names else None)


class ProfileList(ChoiceList):
    """The profile picker. Invalid profiles stay selectable so their errors
    can be read and fixed."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.entries: dict[str, ProfileEntry] = {}

    def show_entries(self, entries: Sequence[ProfileEntry], value: str | None = None) -> None:
        self.entries = {entry.name: entry for entry in entries}
        self.set_choices((_choice(entry) for entry in entries), value)

    @property
    def selected_entry(self) -> ProfileEntry | None:
        return self.entries.get(self.value or "")


def _choice(entry: ProfileEntry) -> Choice:
    where = "" if entry.origin == "shipped" else " (yours)"
    if entry.valid:
        return Choice(entry.name, entry.name + where, "✓ valid", style="bold")
    first = entry.errors[0] if entry.errors else "invalid"
    more = f" (+{len(entry.errors) - 1} more)" if len(entry.errors) > 1 else ""
    return Choice(entry.name, entry.name + where, f"✗ {first}{more}", style="bold red")
