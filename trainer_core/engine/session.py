"""session.json: a run's summary for people and tools that do not want to replay the event log."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from trainer_core.contract import rundir
from trainer_core.plan import TrainPlan


def write_session(
    run_dir: Path, plan: TrainPlan, status: str, started: float, seconds: float, summary: dict
) -> None:
    data = {
        "run_dir": str(run_dir),
        "name": plan.profile.run.name,
        "status": status,
        "profile": str(plan.profile_path),
        "compute_mode": plan.profile.compute.mode,
        "device": plan.device.device,
        "device_reason": plan.device.reason,
        "data_mode": plan.data.mode,
        "data_path": str(plan.data.path),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "seconds": seconds,
        "summary": summary,
    }
    target = run_dir / rundir.SESSION
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, target)
