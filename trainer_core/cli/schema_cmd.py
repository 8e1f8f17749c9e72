"""`trainer-core schema`: the event protocol, or one of the CLI's JSON documents, as JSON Schema.

By default `trainer_core.contract.event_schema.event_json_schema()`: its root validates one event
line and `$defs` holds every model plus `Envelope`, `Command` and `CommandReply`. `--plan`,
`--check-data` and `--resources` print the schema of `train --dry-run --json`, `check-data --json`
and `resources --json` (`trainer_core.contract.report_schema`). Torch-free.
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
            "RUN/events.jsonl), including the control commands and their replies under $defs; or, "
            "with one of the options, of a command's --json document."
        ),
    )
    which = parser.add_mutually_exclusive_group()
    documents = {
        "plan": "train --dry-run --json",
        "check-data": "check-data --json",
        "resources": "resources --json",
    }
    for name, command in documents.items():
        which.add_argument(
            f"--{name}",
            dest="document",
            action="store_const",
            const=name,
            help=f"the document `trainer-core {command}` prints",
        )
    parser.set_defaults(handler=run, document=None)


def run(args: argparse.Namespace) -> int:
    if args.document is None:
        from trainer_core.contract.event_schema import event_json_schema

        print_json(event_json_schema())
    else:
        from trainer_core.contract.report_schema import report_json_schema

        print_json(report_json_schema(args.document))
    return 0
