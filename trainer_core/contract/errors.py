"""User-facing errors: the CLI prints their message and exits with status 2, no traceback."""

from __future__ import annotations


class VegaError(Exception):
    """A problem the user can fix: the message names the file, field or value and what to do."""

    exit_code = 2


class ProfileError(VegaError):
    """A profile file, an override or a `--set` value is invalid."""


class DataError(VegaError):
    """The data folder is missing, empty or holds nothing usable."""


class DeviceError(VegaError):
    """The requested compute mode or device cannot be satisfied on this machine."""


class InitSourceError(ProfileError):
    """The model to start from (train.init_from) is missing, unreadable or does not fit this run."""
