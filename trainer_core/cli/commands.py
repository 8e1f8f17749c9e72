"""The sub-commands of `trainer-core`: name, module and one-line summary, known
without importing any of them.

`trainer-core --help` lists them from here; only the command being run is
imported (`trainer_core.cli`).
"""

from __future__ import annotations

# Sub-command name -> module under trainer_core.cli that registers it.
MODULES: dict[str, str] = {
    "train": "train_cmd",
    "profile": "profile_cmd",
    "schema": "schema_cmd",
    "resources": "resources_cmd",
    "check-data": "check_data_cmd",
    "ctl": "ctl_cmd",
    "synth": "synth_cmd",
    "evaluate": "evaluate_cmd",
    "vocode": "vocode_cmd",
    "export": "export_cmd",
}

# Sub-command name -> the summary its parser and the command list show.
SUMMARIES: dict[str, str] = {
    "train": "train a model from a profile (--dry-run prints the plan without training)",
    "profile": "validate, show or list training profiles",
    "schema": "print the event protocol (or a --json document) as JSON Schema",
    "resources": "show CPU, RAM, GPUs and what each compute mode would use",
    "check-data": "scan a data folder: counts, hours, formats and every problem file",
    "ctl": "send a command (pause, resume, save, evaluate, stop) to a running trainer",
    "synth": "synthesise speech from text with a trained TTS checkpoint or export",
    "evaluate": (
        "score a voice (run, checkpoint or export) on held-out sentences of a voice folder,"
        " free-running"
    ),
    "vocode": (
        "re-synthesise a recording through a trained vocoder or Griffin-Lim, to judge the vocoder"
        " by ear"
    ),
    "export": (
        "export a trained voice as ONNX (onnxruntime, no torch), or a vits voice as a transformers"
        " folder or a Piper voice"
    ),
}
