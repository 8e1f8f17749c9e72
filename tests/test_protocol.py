"""The event protocol: every event type round-trips, readers are forward compatible, bad lines are refused,
non-finite numbers survive, commands parse, and the JSON Schema describes what the trainer writes."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainer_core.contract import protocol
from trainer_core.contract.control_protocol import COMMAND_NAMES, CommandReply, command_to_json, parse_command
from trainer_core.contract.event_lines import event_to_json, parse_event
from trainer_core.contract.event_schema import event_json_schema
from trainer_core.contract.protocol import EVENT_MODELS, EVENT_TYPES, Event, ProtocolError, StepEvent, UnknownEvent

GPU = {
    "index": 0,
    "name": "NVIDIA H100",
    "memory_total_bytes": 80 * 2**30,
    "memory_free_bytes": 79 * 2**30,
    "utilization_pct": 3.0,
    "temperature_c": 41.0,
    "power_w": 72.5,
}

# One fully populated event per type, optional fields included.
SAMPLE_FIELDS: dict[str, dict] = {
    "hello": dict(
        trainer_version="0.1.0",
        pid=4242,
        host="box",
        profile_hash="ab12cd",
        run_dir="/runs/vega-1",
        argv=["train", "--profile", "p.toml"],
        python="3.11.9",
        torch="2.13.0",
        world_size=2,
        rank=1,
    ),
    "resources": dict(cpu_cores=16, ram_total_bytes=128 * 2**30, ram_available_bytes=100 * 2**30, gpus=[GPU]),
    "device_selected": dict(mode="mixed", device="cpu", reason="no CUDA device", fallback=True, precision="fp32"),
    "data_scan": dict(
        data_mode="voice",
        reason="audio with transcripts",
        usable=120,
        skipped=2,
        total_hours=0.75,
        problems=[{"path": "a.wav", "reason": "silent"}, {"path": "b.wav", "reason": "no transcript"}],
    ),
    "preload_progress": dict(done=10, total=120, bytes=2_000_000, stage="decode"),
    "preload_done": dict(items=120, seconds=3.5, where="ram", bytes=40_000_000, reason="fits in RAM"),
    "calibration": dict(samples_per_s=812.5, planned_epochs=40, planned_steps=4000, target_hours=1.5),
    "init_from": dict(
        source="runs/lessac",
        path="runs/lessac/export",
        form="export",
        kind="tts",
        step=4000,
        loaded=52,
        mapped=[{"name": "embedding.weight", "kept": 41, "rows": 57, "by": "symbol"}],
        skipped=3,
        new=6,
        loaded_names=["encoder.blocks.0.attn.qkv.weight"],
        skipped_names=["pitch_predictor.out.weight"],
        new_names=["postnet.layers.0.weight"],
        own=["mel_mean", "mel_std", "text_symbols", "text_phonemes"],
    ),
    "task": dict(
        name="my_models.denoise:factory",
        module="my_models.denoise",
        file="/home/me/my_models/denoise.py",
        external=True,
        speaks=False,
        parameters=12345,
    ),
    "epoch_start": dict(epoch=3, steps_in_epoch=100),
    "epoch_end": dict(epoch=3, loss=0.42, seconds=61.0),
    "step": dict(
        step=1200,
        epoch=3,
        loss=0.5,
        losses={"mel": 0.3, "duration": 0.2},
        lr=3e-4,
        grad_norm=0.9,
        loss_scale=65536.0,
        samples_per_s=800.0,
        data_wait_frac=0.05,
        micro_batch=16,
        grad_accum=2,
        mem_device_bytes=3 * 2**30,
        mem_host_bytes=2**30,
        eta_s=3600.0,
        steps_in_window=7,
    ),
    "profile_breakdown": dict(data_s=0.1, transfer_s=0.02, forward_s=0.5, backward_s=0.9, optimizer_s=0.1, steps=50),
    "memory": dict(
        level="high",
        used_frac=0.92,
        action="released caches (gc + empty_cache); micro-batch 8 -> 4 x accumulation 2 (effective batch 8 kept)",
        decision="shrink",
        step=120,
        used_bytes=9_880_000_000,
        budget_bytes=10_737_418_240,
        micro_batch=4,
        grad_accum=2,
    ),
    "oom_recovered": dict(step=77, micro_batch=8, grad_accum=4, message="CUDA out of memory"),
    "nonfinite": dict(step=78, action="skipped", consecutive=2, precision="fp16"),
    "validation": dict(
        step=1200,
        epoch=3,
        loss=0.61,
        losses={"mel": 0.4},
        metric_name="bits_per_byte",
        metric_value=1.9,
    ),
    "checkpoint_saved": dict(
        step=1200,
        epoch=3,
        path="checkpoints/step-00001200.pt",
        bytes=123456,
        val_loss=0.61,
        seconds=0.8,
    ),
    "best_model": dict(step=1200, path="checkpoints/step-00001200.pt", val_loss=0.61),
    "free_running": dict(
        step=1200,
        items=2,
        distance=0.9,
        duration_ratio=1.1,
        vuv_agreement=0.8,
        acoustic_distance=0.7,
        floor_distance=0.3,
        floor_vuv_agreement=0.95,
        per_item=[{"item_id": "a", "distance": 0.8, "duration_ratio": 1.0, "vuv_agreement": 0.9}],
    ),
    "sample": dict(step=1200, kind="text", path="samples/step-00001200.txt", text="hello world"),
    "log": dict(level="warning", message="data wait is high"),
    "command_ack": dict(cmd="pause", id="c1", ok=True, detail="paused at step 1201"),
    "paused": dict(step=1201, reason="memory at 99% of its 10.0 GiB budget"),
    "resumed": dict(step=1201),
    "phase": dict(step=1200, phase="free_running", done=3, total=8),
    "warning": dict(message="no GPU, training on CPU", code="cpu_fallback"),
    "overtraining": dict(
        step=500,
        evaluations=3,
        val_losses=[1.2, 1.3, 1.4, 1.5],
        train_losses=[2.0, 1.9, 1.8, 1.7],
        best_step=200,
        best_path="/runs/r/checkpoints/step-00000200.pt",
        message="validation loss rose 3 times",
    ),
    "error": dict(
        message="compute_losses raised ValueError: boom (x.py:2 in MyTask.compute_losses)",
        traceback='Traceback (most recent call last):\n  File "x.py", line 2\nValueError: boom\n',
        code="task_failed",
        task_method="compute_losses",
        file="x.py",
        line=2,
        function="MyTask.compute_losses",
    ),
    "finished": dict(status="completed", step=4000, epoch=40, seconds=5400.0, summary={"best_val_loss": 0.5}),
}


def sample_event(kind: str, **envelope: object) -> Event:
    return EVENT_TYPES[kind](**SAMPLE_FIELDS[kind], **envelope)


def test_samples_cover_every_event_type() -> None:
    assert set(SAMPLE_FIELDS) == set(EVENT_TYPES)
    assert len(EVENT_TYPES) == len(EVENT_MODELS) == 30


@pytest.mark.parametrize("kind", sorted(SAMPLE_FIELDS))
def test_every_event_type_round_trips(kind: str) -> None:
    event = sample_event(kind, seq=17, t=1763790000.125)
    line = event_to_json(event)
    assert "\n" not in line  # one line, even for multi-line text
    assert line == json.dumps(json.loads(line), separators=(",", ":"), ensure_ascii=False)  # compact
    assert json.loads(line)["type"] == kind
    for form in (line, line.encode(), json.loads(line)):
        parsed = parse_event(form)
        assert type(parsed) is type(event)
        assert parsed == event


def test_envelope_comes_first_and_numbers_stay_numbers() -> None:
    obj = json.loads(event_to_json(sample_event("step", seq=3, t=1.5)))
    assert list(obj)[:4] == ["v", "seq", "t", "type"]
    assert obj["v"] == protocol.PROTOCOL_VERSION == 1
    assert isinstance(obj["step"], int) and isinstance(obj["loss"], float) and isinstance(obj["lr"], float)
    assert isinstance(obj["mem_device_bytes"], int)


def test_defaults_fill_envelope_and_optional_fields() -> None:
    event = StepEvent(step=1, epoch=0, loss=1.0, lr=1e-3, samples_per_s=10.0, data_wait_frac=0.0, micro_batch=4)
    assert (event.v, event.seq, event.type) == (1, 0, "step")
    assert event.t > 1.6e9
    assert event.grad_norm is None and event.steps_in_window == 1 and event.grad_accum == 1


def test_numeric_scalars_and_paths_are_converted() -> None:
    event = StepEvent(
        step=np.int64(5),
        epoch=np.int32(1),
        loss=np.float32(0.5),
        lr=np.float64(1e-3),
        samples_per_s=10,
        data_wait_frac=0,
        micro_batch=4,
        extra_count=np.int16(7),
        extra_rate=np.float32(0.25),
    )
    obj = json.loads(event_to_json(event))
    assert obj["step"] == 5 and obj["loss"] == 0.5 and obj["extra_count"] == 7 and obj["extra_rate"] == 0.25
    sample = protocol.SampleEvent(step=1, kind="audio", path=Path("samples") / "a.wav")
    assert json.loads(event_to_json(sample))["path"] == str(Path("samples") / "a.wav")
    picture = protocol.SampleEvent(step=2, kind="image", path="samples/step-00000002/mel.png", text="a caption")
    assert parse_event(event_to_json(picture)) == picture


def test_unknown_type_passes_through_with_all_fields() -> None:
    line = '{"v":1,"seq":4,"t":2.5,"type":"gpu_clock","mhz":1980,"nested":{"a":[1,2]}}'
    event = parse_event(line)
    assert isinstance(event, UnknownEvent)
    assert (event.type, event.seq, event.mhz, event.nested) == ("gpu_clock", 4, 1980, {"a": [1, 2]})
    assert json.loads(event_to_json(event)) == json.loads(line)


def test_unknown_fields_on_known_types_are_kept() -> None:
    obj = json.loads(event_to_json(sample_event("paused", seq=1, t=2.0)))
    obj["reason"] = "user"
    obj["v"] = 2  # a newer trainer
    event = parse_event(obj)
    assert isinstance(event, protocol.PausedEvent)
    assert event.reason == "user" and event.v == 2
    assert json.loads(event_to_json(event)) == obj


MALFORMED = {
    "empty": b"",
    "not json": b"step 12 loss 0.5",
    "truncated json": b'{"v":1,"seq":0,"t":1,"type":"paused","st',
    "array": b"[1, 2]",
    "string": b'"paused"',
    "not utf-8": b'{"v":1,"seq":0,"t":1,"type":"log","message":"\xff\xfe"}',
    "no type": b'{"v":1,"seq":0,"t":1}',
    "type not a string": b'{"v":1,"seq":0,"t":1,"type":5}',
    "empty type": b'{"v":1,"seq":0,"t":1,"type":""}',
    "no seq": b'{"v":1,"t":1,"type":"paused","step":1}',
    "no t": b'{"v":1,"seq":0,"type":"paused","step":1}',
    "no v": b'{"seq":0,"t":1,"type":"mystery"}',
    "version 0": b'{"v":0,"seq":0,"t":1,"type":"paused","step":1}',
    "negative seq": b'{"v":1,"seq":-3,"t":1,"type":"paused","step":1}',
    "time as string": b'{"v":1,"seq":0,"t":"1763790000","type":"paused","step":1}',
    "missing field": b'{"v":1,"seq":0,"t":1,"type":"paused"}',
    "number as string": b'{"v":1,"seq":0,"t":1,"type":"paused","step":"12"}',
    "fractional count": b'{"v":1,"seq":0,"t":1,"type":"paused","step":1.5}',
    "bad literal": b'{"v":1,"seq":0,"t":1,"type":"memory","level":"extreme","used_frac":0.9}',
    "bad nested": b'{"v":1,"seq":0,"t":1,"type":"data_scan","data_mode":"text","reason":"r","usable":1,'
    b'"skipped":0,"problems":[{"path":"a"}]}',
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_lines_are_rejected(name: str) -> None:
    with pytest.raises(ProtocolError):
        parse_event(MALFORMED[name])


def test_protocol_error_is_a_value_error_naming_the_field() -> None:
    with pytest.raises(ValueError, match="'paused' event: step"):
        parse_event(MALFORMED["number as string"])
    with pytest.raises(ProtocolError, match="envelope.*seq"):
        parse_event(MALFORMED["no seq"])
    with pytest.raises(ProtocolError, match="JSON object"):
        parse_event(42)  # type: ignore[arg-type]


def test_preformatted_strings_in_any_number_field_are_rejected() -> None:
    obj = json.loads(event_to_json(sample_event("step")))
    for field in ("loss", "lr", "samples_per_s", "micro_batch", "grad_norm", "mem_device_bytes"):
        bad = dict(obj, **{field: "0.5"})
        with pytest.raises(ProtocolError, match=field):
            parse_event(bad)
    with pytest.raises(ProtocolError, match="losses"):
        parse_event(dict(obj, losses={"mel": "0.3"}))


def strict_loads(line: str) -> dict:
    """json.loads that refuses NaN/Infinity literals, which are not JSON."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"non-JSON constant {constant} in {line}")

    return json.loads(line, parse_constant=refuse)


def test_non_finite_numbers_become_null_and_parse_back() -> None:
    event = StepEvent(
        step=9,
        epoch=0,
        loss=math.nan,
        losses={"mel": math.inf, "dur": 0.25},
        lr=math.nan,
        grad_norm=math.inf,
        loss_scale=-math.inf,
        samples_per_s=12.0,
        data_wait_frac=0.0,
        micro_batch=2,
        spike=math.nan,
    )
    line = event_to_json(event)
    obj = strict_loads(line)
    assert obj["loss"] is None and obj["grad_norm"] is None and obj["loss_scale"] is None
    assert obj["lr"] is None and obj["losses"] == {"mel": None, "dur": 0.25} and obj["spike"] is None
    back = parse_event(line)
    # Optional fields read null as "no finite value"; required ones as NaN, so the line stays valid.
    assert back.loss is None and back.grad_norm is None and back.loss_scale is None
    assert math.isnan(back.lr) and math.isnan(back.losses["mel"]) and back.losses["dur"] == 0.25


def test_non_finite_in_free_form_summary_and_numpy_values() -> None:
    event = protocol.FinishedEvent(
        status="failed",
        step=3,
        epoch=0,
        seconds=math.inf,
        summary={"best": math.nan, "np_nan": np.float32("nan"), "ok": 1.5, "nested": {"x": math.inf}},
    )
    obj = strict_loads(event_to_json(event))
    assert obj["seconds"] is None
    assert obj["summary"] == {"best": None, "np_nan": None, "ok": 1.5, "nested": {"x": None}}
    assert math.isnan(parse_event(event_to_json(event)).seconds)


def test_nan_literals_from_other_writers_are_tolerated_in_optional_fields() -> None:
    event = parse_event('{"v":1,"seq":0,"t":1,"type":"epoch_end","epoch":1,"loss":NaN,"seconds":2}')
    assert event.loss is None or math.isnan(event.loss)


# ---------------------------------------------------------------------------------------------------------------
# Commands


@pytest.mark.parametrize("name", COMMAND_NAMES)
def test_commands_parse_from_every_form(name: str) -> None:
    for form in (
        f'{{"cmd": "{name}", "id": "c-7"}}',
        f'{{"cmd": "{name}", "id": "c-7"}}\n'.encode(),
        {"cmd": name, "id": "c-7"},
    ):
        command = parse_command(form)
        assert (command.cmd, command.id) == (name, "c-7")
        assert type(command).__name__ == name.capitalize() + "Command"
    assert parse_command({"cmd": name}).id is None
    assert json.loads(command_to_json(parse_command({"cmd": name}))) == {"id": None, "cmd": name}


def test_command_names() -> None:
    assert COMMAND_NAMES == ("pause", "resume", "save", "evaluate", "stop")


def test_unknown_fields_in_commands_are_ignored() -> None:
    assert parse_command({"cmd": "stop", "after": "epoch"}).cmd == "stop"


@pytest.mark.parametrize(
    ("request_line", "message"),
    [
        ('{"cmd": "explode"}', "unknown command 'explode'; expected one of: pause, resume, save, evaluate, stop"),
        ('{"id": "x"}', "missing 'cmd'"),
        ('{"cmd": 3}', "unknown command 3"),
        ("pause", "not JSON"),
        ('["pause"]', "JSON object"),
        ('{"cmd": "pause", "id": 5}', "invalid 'pause' command: id"),
    ],
)
def test_bad_commands_are_rejected_clearly(request_line: str, message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_command(request_line)
    assert message in str(info.value)


def test_command_reply_round_trips() -> None:
    for reply in (CommandReply(ok=True, cmd="pause", id="a"), CommandReply(ok=False, error="unknown command")):
        assert CommandReply.model_validate_json(command_to_json(reply)) == reply
    assert CommandReply(ok=True).cmd is None


# ---------------------------------------------------------------------------------------------------------------
# JSON Schema


def test_schema_lists_every_event_type_and_the_commands() -> None:
    schema = json.loads(json.dumps(event_json_schema()))
    assert schema["x-protocol-version"] == 1
    assert set(schema["discriminator"]["mapping"]) == set(EVENT_TYPES)
    assert len(schema["oneOf"]) == len(EVENT_MODELS)
    defs = schema["$defs"]
    for model in EVENT_MODELS:
        assert {"v", "seq", "t", "type"} <= set(defs[model.__name__]["required"])
    assert {"Envelope", "Command", "CommandReply", "GpuInfo", "DataProblem"} <= set(defs)
    assert set(defs["Command"]["discriminator"]["mapping"]) == set(COMMAND_NAMES)
    lr = defs["StepEvent"]["properties"]["lr"]  # a required float: number, or null for non-finite
    assert {"type": "number"} in lr["anyOf"] and {"type": "null"} in lr["anyOf"]
    assert defs["StepEvent"]["properties"]["step"]["type"] == "integer"
    # A published field the trainer never sets is a promise nobody keeps (issue 31: memory.expected).
    assert "expected" not in defs["MemoryEvent"]["properties"]


def test_sample_events_validate_against_the_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema", reason='jsonschema is not installed (pip install -e ".[test]")')
    schema = event_json_schema()
    validator = jsonschema.Draft202012Validator(schema)
    for kind in SAMPLE_FIELDS:
        validator.validate(json.loads(event_to_json(sample_event(kind))))
    nan_step = StepEvent(
        step=1, epoch=0, loss=math.nan, lr=math.nan, samples_per_s=1.0, data_wait_frac=0.0, micro_batch=1
    )
    validator.validate(json.loads(event_to_json(nan_step)))
    bad = dict(json.loads(event_to_json(sample_event("step"))), loss="0.5")
    assert not validator.is_valid(bad)
    command_schema = {"$ref": "#/$defs/Command", "$defs": schema["$defs"]}
    jsonschema.validate({"cmd": "pause", "id": "x"}, command_schema)
    assert not jsonschema.Draft202012Validator(command_schema).is_valid({"cmd": "explode"})


def test_schema_command_prints_the_schema() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trainer_core", "schema"], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('{\n  "$schema"')  # indent 2
    assert json.loads(result.stdout) == json.loads(json.dumps(event_json_schema()))
