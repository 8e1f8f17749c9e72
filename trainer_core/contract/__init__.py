"""What the dashboard and the trainer agree on: the only part of trainer_core that vega_tui imports.

Torch-free by rule (import-linter contracts in pyproject.toml): the event protocol, the profile
model and its loader, the event log, the control wire, the run-folder layout, errors, resource
probing and the size/duration formats both sides print.
"""
