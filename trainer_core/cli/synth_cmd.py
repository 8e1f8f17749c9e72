"""Placeholder: this sub-command is being written."""


def register(sub) -> None:
    pass
