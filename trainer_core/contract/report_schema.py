"""The CLI's JSON documents as JSON Schema (`trainer-core schema --plan|--check-data|--resources`).

One schema per document, from the pydantic models the commands print and the dashboard reads
(`plan_report`, `data_report`, `resources_report`): additional keys are refused, as the models do.
"""

from __future__ import annotations

from typing import Any

from trainer_core.contract.data_report import CheckDataReport
from trainer_core.contract.event_schema import SCHEMA_DIALECT
from trainer_core.contract.plan_report import PlanReport
from trainer_core.contract.report_model import ReportModel
from trainer_core.contract.resources_report import ResourcesReport

# Document name (`trainer-core schema --NAME`) -> its model.
REPORTS: dict[str, type[ReportModel]] = {
    "plan": PlanReport,
    "check-data": CheckDataReport,
    "resources": ResourcesReport,
}


def report_json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of one document in `REPORTS`: its root validates what the command prints."""
    model = REPORTS[name]
    return {
        "$schema": SCHEMA_DIALECT,
        **model.model_json_schema(),
        "title": f"Vega {name} document",
        "description": f"What `{model.command}` prints: one JSON object. Unknown keys are refused.",
    }
