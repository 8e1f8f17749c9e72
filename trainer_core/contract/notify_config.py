"""Where the trainer's notifications go: a webhook from the machine file's
`[notify]` table or the environment.

    [notify]
    url = "https://ntfy.sh/vega-7f3c9a"   # a secret: whoever knows it can read or post
    format = "ntfy"                       # ntfy, slack, discord or json; unset: guessed from the
                                          host

`VEGA_NOTIFY_URL` (and `VEGA_NOTIFY_FORMAT`) in the environment win over the machine file. A profile
can never set it: profiles travel between machines and get shared, a webhook URL is a secret. The
URL never appears in events, logs or the frozen profile; messages name its host only. Torch-free.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from trainer_core.contract.errors import ProfileError, VegaError

NOTIFY_TABLE = "notify"
URL_ENV = "VEGA_NOTIFY_URL"
FORMAT_ENV = "VEGA_NOTIFY_FORMAT"
Format = Literal["ntfy", "slack", "discord", "json"]
FORMATS: tuple[Format, ...] = ("ntfy", "slack", "discord", "json")
EXAMPLE = f'[{NOTIFY_TABLE}] url = "https://ntfy.sh/your-secret-topic"'


@dataclass(frozen=True)
class NotifyConfig:
    """A webhook and its payload shape; `repr` and `where` never show the URL (it is a secret)."""

    url: str = field(repr=False)
    format: Format
    source: str  # where it was set: "machine file PATH" or the environment variable's name

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "?"

    def where(self) -> str:
        """`ntfy payloads to host ntfy.sh (from VEGA_NOTIFY_URL)`: what a log line may say."""
        return f"{self.format} payloads to host {self.host} (from {self.source})"


def guess_format(url: str) -> Format:
    """Slack and Discord by their webhook hosts; anything else is taken as an
    ntfy-style plain-text endpoint."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if host == "hooks.slack.com":
        return "slack"
    if host.endswith(("discord.com", "discordapp.com")) and parts.path.startswith("/api/webhooks"):
        return "discord"
    return "ntfy"


def _checked(
    url: Any, fmt: Any, label: str, error: type[VegaError], fmt_label: str | None = None
) -> NotifyConfig:
    if not isinstance(url, str) or not url.strip():
        raise error(f"{label}: the notification url must be a text, for example {EXAMPLE}")
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        # The value itself is not shown: it may be a secret pasted into the wrong place.
        raise error(
            f"{label}: the notification url must start with http:// or https:// and name a host"
        )
    if fmt is None or fmt == "auto":
        fmt = guess_format(url)
    if fmt not in FORMATS:
        where = fmt_label or label
        raise error(
            f"{where}: notification format {fmt!r} is not one of auto, {', '.join(FORMATS)}"
        )
    return NotifyConfig(url, cast(Format, fmt), label)


def notify_table_config(table: Any, label: str) -> NotifyConfig | None:
    """The machine file's [notify] table checked (None: no table); a bad one
    is an error naming the key."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ProfileError(f"{label}: {NOTIFY_TABLE} must be a table, for example {EXAMPLE}")
    unknown = sorted(set(table) - {"url", "format"})
    if unknown:
        raise ProfileError(
            f"{label}: unknown key {NOTIFY_TABLE}.{unknown[0]}: [notify] holds url and format"
        )
    return _checked(
        table.get("url"), table.get("format"), f"{label} [{NOTIFY_TABLE}]", ProfileError
    )


def read_notify_config(
    machine_file: Path, environ: Mapping[str, str] | None = None
) -> NotifyConfig | None:
    """The environment's webhook, else the machine file's, else None (no notifications)."""
    env = os.environ if environ is None else environ
    url = env.get(URL_ENV, "").strip()
    if url:
        return _checked(url, env.get(FORMAT_ENV) or None, URL_ENV, VegaError, FORMAT_ENV)
    if not machine_file.is_file():
        return None
    try:
        data = tomllib.loads(machine_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(f"machine file {machine_file}: cannot read it: {exc}") from None
    config = notify_table_config(data.get(NOTIFY_TABLE), f"machine file {machine_file}")
    if config is not None and env.get(FORMAT_ENV):
        return _checked(
            config.url, env[FORMAT_ENV], f"{config.source} and {FORMAT_ENV}", VegaError, FORMAT_ENV
        )
    return config
