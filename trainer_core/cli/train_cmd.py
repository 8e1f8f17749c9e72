"""`trainer-core train`: placeholder registration, filled in by the integration step."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("train", help="train a model from a profile (or --dry-run to print the plan)")
    p.set_defaults(handler=lambda args: 0)
