"""Placeholder entry point until the dashboard exists."""


def main() -> int:
    return 0
