"""`python -m trainer_core` runs the same command line as `trainer-core`."""

if __name__ == "__main__":
    from trainer_core.contract.import_path import drop_working_folder

    # First: a same-named folder in the working folder must not stand in for any
    # package imported from here on.
    drop_working_folder()
    from trainer_core.cli import main

    raise SystemExit(main())
