"""The CLI's JSON documents are typed: a real dry run, check-data and resources parse into their models,
a renamed key fails with the command and the field named, and `trainer-core schema` validates them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from textual.message import Message

from conftest import TEST_VOICE
from trainer_core.cli import main
from trainer_core.contract.data_report import CheckDataReport, VoiceItemEntry
from trainer_core.contract.plan_report import LaunchInfo, PlanReport
from trainer_core.contract.report_model import ReportError, ReportModel, read_report
from trainer_core.contract.resources_report import ModeChoice, ResourcesReport
from trainer_core.tiny_profiles import tiny_profile
from vega_tui import runner
from vega_tui.screens.launch_messages import PlanReady
from vega_tui.screens.launch_selection import detection_text
from vega_tui.screens.launch_state import LaunchFlow, Phase
from vega_tui.screens.launch_workers import run_check
from vega_tui.widgets.preflight import plan_rows


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """What the three commands print, run once in process on the test voice (no machine file)."""
    tmp = tmp_path_factory.mktemp("typed")
    profile = tmp / "tiny.toml"
    profile.write_text(tiny_profile("tts", data={"cache_dir": str(tmp / "cache")}), encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VEGA_CONFIG_DIR", str(tmp))
        commands = {
            "plan": ["train", "--profile", str(profile), "--data", str(TEST_VOICE), "--dry-run", "--json"],
            "check-data": ["check-data", str(TEST_VOICE), "--json", "--items", "--cache-dir", str(tmp / "cache")],
            "resources": ["resources", "--json", "--no-torch", "--compute-mode", "cpu"],
            "two nodes": [
                "train",
                "--profile",
                str(profile),
                "--data",
                str(TEST_VOICE),
                "--dry-run",
                "--json",
                "--compute-mode",
                "cpu",
                "--nproc-per-node",
                "2",
                "--nnodes",
                "2",
                "--node-rank",
                "1",
                "--master-addr",
                "10.0.0.7",
            ],
        }
        return {name: _printed(argv) for name, argv in commands.items()}


def _printed(argv: list[str]) -> str:
    from contextlib import redirect_stdout
    from io import StringIO

    out = StringIO()
    with redirect_stdout(out):
        assert main(argv) == 0, argv
    return out.getvalue()


def _schema(name: str) -> dict[str, Any]:
    return json.loads(_printed(["schema", f"--{name}"]))


def test_a_real_dry_run_parses_into_the_plan_the_preflight_shows(documents: dict[str, str]) -> None:
    plan = read_report(PlanReport, documents["plan"])
    assert plan.data.mode == "voice" and plan.data.usable == 40 and plan.device.device == "cpu"
    assert plan.model.kind == "tts" and plan.model.vits is None and plan.validation is not None
    printed = json.loads(documents["plan"])
    assert "vits" not in printed["model"] and "vocoder" not in printed["model"]  # written only for their kinds
    assert printed["distributed"] is None and printed["init_from"] is None  # keys kept, as before
    rows = dict(plan_rows(plan))
    assert str(rows["data"]).startswith("voice · 40 usable, 0 skipped")
    assert str(rows["model"]).startswith(f"tts, hidden {plan.model.hidden}, {plan.model.layers} layer")


def test_a_launch_on_two_nodes_is_in_the_plan_with_its_rendezvous(documents: dict[str, str]) -> None:
    launch = read_report(PlanReport, documents["two nodes"]).distributed
    assert isinstance(launch, LaunchInfo) and launch.nproc_per_node == 2 and launch.device_kind == "cpu"
    assert launch.nodes is not None and (launch.nodes.node_rank, launch.nodes.master_addr) == (1, "10.0.0.7")


def test_real_check_data_and_resources_parse_into_their_models(documents: dict[str, str]) -> None:
    report = read_report(CheckDataReport, documents["check-data"])
    assert report.summary.voice.usable == 40 and report.items is not None and len(report.items) == 40
    assert all(isinstance(item, VoiceItemEntry) for item in report.items) and report.tokenizer is None
    assert detection_text(report) == f"→ {report.reason}"
    machine = read_report(ResourcesReport, documents["resources"])
    assert machine.cpu.logical >= 1 and set(machine.modes) == {"gpu", "cpu", "mixed"}
    assert isinstance(machine.selected, ModeChoice) and machine.selected.device == "cpu"


@pytest.mark.parametrize(
    ("name", "model", "path"),
    [
        ("plan", PlanReport, ("data", "usable")),
        ("check-data", CheckDataReport, ("summary", "voice", "hours_usable")),
        ("resources", ResourcesReport, ("ram", "total_bytes")),
    ],
)
def test_a_renamed_key_fails_naming_the_command_and_the_field(
    documents: dict[str, str], name: str, model: type[ReportModel], path: tuple[str, ...]
) -> None:
    document = json.loads(documents[name])
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1] + "_renamed"] = parent.pop(path[-1])
    with pytest.raises(ReportError) as failed:
        read_report(model, json.dumps(document))
    message = str(failed.value)
    assert message.startswith(f"`{model.command}` printed a document that does not fit {model.__name__}")
    assert f"{'.'.join(path)}: Field required" in message
    assert f"{'.'.join(path)}_renamed: Extra inputs are not permitted" in message
    # The published schema refuses it too, and takes the document as the command printed it.
    schema = _schema(name)
    jsonschema.validate(json.loads(documents[name]), schema)
    assert not jsonschema.Draft202012Validator(schema).is_valid(document)


def test_the_dashboard_gets_an_error_not_a_crash_from_a_document_it_cannot_read() -> None:
    printing = [sys.executable, "-c", 'print(\'{"path": "/x", "mode": "speech"}\')']
    with pytest.raises(ReportError) as failed:
        runner.run_report(printing, CheckDataReport, timeout=30)
    message = str(failed.value)  # the launch screen shows it where the detection goes
    assert (
        message.startswith("`trainer-core check-data --json` printed a document that does not fit")
        and "mode: Input should be 'voice' or 'text'" in message
    )
    assert "reason: Field required" in message and "and 2 more" in message  # problems, warnings: counted


def test_the_launch_screens_check_parses_the_plan_and_blocks_on_one_that_does_not_fit(
    documents: dict[str, str], tmp_path: Path
) -> None:
    printed = tmp_path / "plan.json"
    cat = [sys.executable, "-c", f"print(open({str(printed)!r}).read())"]
    posted: list[Message] = []
    flow = LaunchFlow()
    flow.profiles_read()
    for source, phase in ((documents["plan"], Phase.READY), ('{"profile": "x"}', Phase.BLOCKED)):
        printed.write_text(source, encoding="utf-8")
        flow.choices_changed(None, data_changed=False)
        run_check(PlanReady, flow.plan.generation, cat, posted.append)
        answer = posted[-1]
        assert isinstance(answer, PlanReady)
        assert flow.planned(answer.generation, answer.result, answer.error) and flow.phase is phase
    first = posted[0]
    assert isinstance(first, PlanReady) and isinstance(first.result, PlanReport)
    assert first.result.data.usable == 40 and flow.plan.result is None  # an error on screen, no crash
    assert flow.reason is not None and "does not fit PlanReport" in flow.reason


def test_the_event_schema_is_still_the_default() -> None:
    schema = json.loads(_printed(["schema"]))
    assert schema["title"] == "Vega trainer event protocol" and "Command" in schema["$defs"]
