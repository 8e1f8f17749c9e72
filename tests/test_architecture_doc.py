"""docs/architecture.md cannot drift from the code, and nothing in the repository points outside it.

- Every event type of trainer_core/contract/protocol.py is named (as `type`) in the document's protocol table.
- Every run-folder name of trainer_core/contract/rundir.py appears in its run folder table.
- No tracked text file refers to places outside the repository: the design note the project started
  from (`DESIGN.md`, "DESIGN §"), a sibling `../shared` folder, or this build machine's `/work/` paths.
  Recorded run fixtures (tests/fixtures/) and snapshots keep the paths of the machine that recorded them:
  they are data, not references, and are left out.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from trainer_core.contract import protocol, rundir

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "architecture.md"
OUTSIDE = re.compile(r"DESIGN\.md|DESIGN §|\.\./shared\b|shared folder|(?<![\w.])/work/")
RECORDED = ("tests/fixtures/", "tests/__snapshots__/")


def event_types() -> set[str]:
    return {
        model.model_fields["type"].default
        for model in protocol.Event.__subclasses__()
        if isinstance(model.model_fields["type"].default, str)
    }


def test_every_event_type_is_in_the_protocol_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    table = text.partition("## The event protocol")[2].partition("## The run folder")[0]
    types = event_types()
    assert len(types) >= 25
    missing = sorted(t for t in types if f"`{t}`" not in table)
    assert not missing, f"docs/architecture.md does not describe these event types: {missing}"


def test_every_run_folder_name_is_in_the_layout_table() -> None:
    table = DOC.read_text(encoding="utf-8").partition("## The run folder")[2].partition("## Package layout")[0]
    views = ("MEL_VIEW", "ALIGNMENT_VIEW")
    names = [
        getattr(rundir, n)
        for n in (
            "EVENTS",
            "PROFILE",
            "SESSION",
            "LOG",
            "SOCKET",
            "CHECKPOINTS",
            "SAMPLES",
            "EXPORT",
            "REPORT",
            "ONNX",
            *views,
        )
    ]
    assert not [n for n in names if n not in table]


def test_no_tracked_file_refers_outside_the_repository() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in files:
        if name.startswith(RECORDED) or name == "tests/test_architecture_doc.py":
            continue
        try:
            text = (REPO / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary files (audio) and files deleted in the working tree
        found += [f"{name}:{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert not found, "references outside the repository:\n" + "\n".join(found)


def test_the_outside_reference_rule_catches_what_it_should() -> None:
    """The guard's negative control: each kind of outside reference is caught, ordinary paths are not."""
    for bad in ("see DESIGN.md in the shared folder", "(DESIGN §4)", "cat ../shared/tools/x", "/work/main/runs"):
        assert OUTSIDE.search(bad), bad
    for fine in ('runs_dir = "../runs"', "samples/step-00000060/01.wav", "the shared memory", "bench/work/x"):
        assert not OUTSIDE.search(fine), fine
