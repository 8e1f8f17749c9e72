"""Export: safetensors + config.json round trip, tied weights, atomic files, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from torch import nn

import trainer_core
from trainer_core.engine.export import ExportError, export_model, load_exported


class TiedByteLM(nn.Module):
    """A minimal byte-level LM whose output layer shares the embedding weight (weight tying)."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(256, width)
        self.mix = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 256, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(torch.tanh(self.mix(self.embed(tokens)))))


MODEL_CONFIG = {"kind": "lm", "width": 16, "vocab": {"type": "bytes", "size": 256}}


def test_round_trip_with_tied_weights(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = TiedByteLM()
    weights_path, config_path = export_model(model, MODEL_CONFIG, tmp_path / "export")
    assert weights_path == tmp_path / "export" / "model.safetensors" and config_path.name == "config.json"
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == ["config.json", "model.safetensors"]

    state, config = load_exported(tmp_path / "export")
    assert set(state) == set(model.state_dict())
    for name, tensor in model.state_dict().items():
        assert torch.equal(state[name], tensor), name
    assert config["model"] == MODEL_CONFIG
    assert config["vega_version"] == trainer_core.__version__ and config["created"].endswith("+00:00")
    assert config["tied_parameters"] == [["embed.weight", "head.weight"]]
    assert config["num_parameters"] == sum(p.numel() for p in model.parameters())  # the tie counts once

    torch.manual_seed(99)
    restored = TiedByteLM()
    restored.load_state_dict(state)
    assert restored.head.weight is restored.embed.weight  # the tie survives loading
    tokens = torch.randint(0, 256, (2, 7))
    assert torch.equal(restored(tokens), model(tokens))


def test_file_is_plain_safetensors(tmp_path: Path) -> None:
    weights_path, _ = export_model(TiedByteLM(), MODEL_CONFIG, tmp_path)
    with safe_open(str(weights_path), framework="pt") as handle:
        assert "head.weight" in handle.keys() and handle.get_tensor("mix.bias").shape == (16,)  # noqa: SIM118 - safe_open has no __contains__


def test_export_replaces_a_previous_export(tmp_path: Path) -> None:
    export_model(TiedByteLM(width=8), {**MODEL_CONFIG, "width": 8}, tmp_path)
    export_model(TiedByteLM(width=16), MODEL_CONFIG, tmp_path)
    state, config = load_exported(tmp_path)
    assert config["model"]["width"] == 16 and state["mix.weight"].shape == (16, 16)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_unserialisable_config_is_refused_before_writing(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="cannot be written as JSON"):
        export_model(TiedByteLM(), {"path": Path("/x")}, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"model\.safetensors does not exist"):
        load_exported(tmp_path)
    export_model(TiedByteLM(), MODEL_CONFIG, tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 32)
    with pytest.raises(ExportError, match=r"model\.safetensors is not a readable safetensors file"):
        load_exported(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(ExportError, match="not a Vega export config"):
        load_exported(tmp_path)
