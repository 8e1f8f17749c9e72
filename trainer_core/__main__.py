"""`python -m trainer_core` runs the same command line as `trainer-core`."""

from trainer_core.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
