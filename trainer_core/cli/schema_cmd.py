"""`trainer-core schema`: print the event protocol as JSON Schema (events, commands, replies).

The document comes from `trainer_core.contract.event_schema.event_json_schema()`; its root validates one event line and
`$defs` holds every model plus `Envelope`, `Command` and `CommandReply`. Torch-free.
"""

from __future__ import annotations

import argparse

from trainer_core.cli.commands import SUMMARIES
from trainer_core.cli.common import print_json


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "schema",
        help=SUMMARIES["schema"],
        description=(
            "Print the JSON Schema of the trainer's event protocol (one JSON object per line in "
            "RUN/events.jsonl), including the control commands and their replies under $defs."
        ),
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from trainer_core.contract.event_schema import event_json_schema

    print_json(event_json_schema())
    return 0
