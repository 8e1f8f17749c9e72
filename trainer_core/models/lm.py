"""Byte-level language model: a small decoder-only transformer over raw
UTF-8 bytes (vocabulary 256).

No tokenizer and nothing to download: any text trains as it is. Architecture: byte embedding plus a
learned positional embedding (up to `data.context_bytes` positions), pre-LayerNorm blocks of causal
self-attention (torch's scaled_dot_product_attention, which picks a fused kernel where there is one)
and a GELU feed-forward, a final LayerNorm, and an output layer tied to the byte embedding.
Initialisation follows GPT-2: N(0, 0.02), with residual output projections
scaled by 1/sqrt(2 * layers).

`LmTask` binds the model to a `TextCorpus` and implements the engine's `Task` protocol.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from trainer_core.atomic import write_whole
from trainer_core.data.text import TextCorpus
from trainer_core.models.base import Batch, SampleResult, Task, count_parameters, unwrap_model
from trainer_core.models.registry import TaskRequest, register_task

if TYPE_CHECKING:
    from trainer_core.contract.profile import Profile
    from trainer_core.data.scan_report import DataReport

VOCAB_SIZE = 256
INIT_STD = 0.02
# An empty prompt still needs one byte to condition on: a paragraph break, as between documents.
EMPTY_PROMPT = b"\n"


@dataclass(frozen=True)
class LmConfig:
    """Everything needed to rebuild the model (also written to the export's config.json)."""

    context_bytes: int
    hidden: int
    layers: int
    heads: int
    ffn_mult: int
    dropout: float
    vocab_size: int = VOCAB_SIZE

    @classmethod
    def from_profile(cls, profile: Profile) -> LmConfig:
        m = profile.model
        return cls(
            profile.data.context_bytes, m.hidden, m.encoder_layers, m.heads, m.ffn_mult, m.dropout
        )


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where each position sees only itself and earlier positions."""

    def __init__(self, config: LmConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.dropout = config.dropout
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden)
        self.proj = nn.Linear(config.hidden, config.hidden)
        self.proj.residual_projection = True  # type: ignore[assignment]  # marks it for scaled init
        self.resid_drop = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        q, k, v = self.qkv(x).split(hidden, dim=2)
        q, k, v = (
            t.view(batch, length, self.heads, hidden // self.heads).transpose(1, 2)
            for t in (q, k, v)
        )
        drop = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, is_causal=True)
        y = y.transpose(1, 2).reshape(batch, length, hidden)
        return self.resid_drop(self.proj(y))


class FeedForward(nn.Module):
    def __init__(self, config: LmConfig) -> None:
        super().__init__()
        inner = config.ffn_mult * config.hidden
        self.up = nn.Linear(config.hidden, inner)
        self.down = nn.Linear(inner, config.hidden)
        self.down.residual_projection = True  # type: ignore[assignment]
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.down(F.gelu(self.up(x))))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + ffn(ln(x))."""

    def __init__(self, config: LmConfig) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(config.hidden)
        self.attn = CausalSelfAttention(config)
        self.ln_ffn = nn.LayerNorm(config.hidden)
        self.ffn = FeedForward(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_attn(x))
        return x + self.ffn(self.ln_ffn(x))


class ByteLM(nn.Module):
    """Decoder-only transformer: (B, T) int64 bytes -> (B, T, 256) next-byte logits."""

    def __init__(self, config: LmConfig) -> None:
        super().__init__()
        self.config = config
        self.byte_emb = nn.Embedding(config.vocab_size, config.hidden)
        self.pos_emb = nn.Embedding(config.context_bytes, config.hidden)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln_out = nn.LayerNorm(config.hidden)
        self.head = nn.Linear(config.hidden, config.vocab_size, bias=False)
        self.head.weight = self.byte_emb.weight  # Tied: one matrix reads and writes bytes.
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            # Residual projections are scaled down so that the residual stream's
            # variance does not grow with depth.
            scale = (
                math.sqrt(2 * self.config.layers)
                if getattr(module, "residual_projection", False)
                else 1.0
            )
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD / scale)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)

    def forward(self, input_bytes: torch.Tensor) -> torch.Tensor:
        length = input_bytes.shape[1]
        if length > self.config.context_bytes:
            raise ValueError(
                f"sequence of {length} bytes exceeds the context of {self.config.context_bytes}"
            )
        positions = torch.arange(length, device=input_bytes.device)
        x = self.drop(self.byte_emb(input_bytes) + self.pos_emb(positions))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_out(x))


def build_model(config: LmConfig, seed: int) -> ByteLM:
    """A freshly initialised model whose weights depend only on `config` and `seed`."""
    # fork_rng: building the model must not advance the global generator the
    # engine seeds and checkpoints.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ByteLM(config)


@torch.no_grad()
def generate(
    model: nn.Module,
    prompt_bytes: bytes,
    max_new: int,
    temperature: float,
    generator: torch.Generator,
) -> bytes:
    """Sample `max_new` bytes after `prompt_bytes`; the model sees at most
    its context (the latest bytes).

    `generator` must live on the model's device. The caller chooses
    train/eval mode (eval for samples).
    """
    inner = unwrap_model(model)
    if not isinstance(inner, ByteLM):
        raise TypeError(f"generate needs a ByteLM, got {type(inner).__name__}")
    device = next(inner.parameters()).device
    context = inner.config.context_bytes
    sequence = torch.tensor(list(prompt_bytes or EMPTY_PROMPT), dtype=torch.long, device=device)
    new: list[torch.Tensor] = []
    for _ in range(max_new):
        window = sequence[-context:].unsqueeze(0)
        logits = inner(window)[0, -1].float() / temperature
        next_byte = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
        sequence = torch.cat([sequence, next_byte])
        new.append(next_byte)
    return bytes(torch.cat(new).tolist()) if new else b""


def _format_samples(prompts: list[str], continuations: list[bytes]) -> str:
    parts = []
    for number, (prompt, continuation) in enumerate(
        zip(prompts, continuations, strict=True), start=1
    ):
        text = prompt + continuation.decode("utf-8", errors="replace")
        parts.append(f"--- prompt {number}: {prompt!r}\n{text}\n")
    return "\n".join(parts)


class LmTask(Task):
    """The byte-level LM bound to its text corpus: the engine's `Task` for text mode."""

    def __init__(self, profile: Profile, corpus: TextCorpus, device: torch.device) -> None:
        self.profile = profile
        self.corpus = corpus
        self.device = device
        self.config = LmConfig.from_profile(profile)
        self.model = build_model(self.config, profile.run.seed).to(device)
        corpus.pin_memory = device.type == "cuda"

    @classmethod
    def from_report(cls, profile: Profile, report: DataReport, device: torch.device) -> LmTask:
        data = profile.data
        files = [item.path for item in report.items]
        corpus = TextCorpus.from_files(
            files,
            report.path,
            data.context_bytes,
            data.val_fraction,
            profile.run.seed,
            data.val_max_items,
        )
        return cls(profile, corpus, device)

    def train_items(self) -> int:
        return self.corpus.train_items()

    def train_batches(
        self, epoch: int, batch_size: int, start_item: int = 0
    ) -> Iterator[tuple[Batch, int]]:
        return self.corpus.train_batches(epoch, batch_size, start_item)

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        return self.corpus.val_batches(batch_size)

    def compute_losses(self, model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
        logits = model(batch["input"])
        # float(): under fp16/bf16 autocast the softmax over 256 bytes is computed in fp32.
        ce = F.cross_entropy(logits.float().reshape(-1, VOCAB_SIZE), batch["target"].reshape(-1))
        return {"total": ce, "ce": ce.detach()}

    def val_metrics(self, losses_mean: dict[str, float]) -> dict[str, float]:
        ce = losses_mean.get("ce", losses_mean.get("total"))
        return {} if ce is None else {"bits_per_byte": ce / math.log(2)}

    def make_samples(self, model: nn.Module, out_dir: Path, step: int) -> list[SampleResult]:
        """Continue every `sample.prompts` entry; write them all to
        `out_dir/step-<step, 8 digits>.txt`."""
        sample = self.profile.sample
        inner = unwrap_model(model)
        device = next(inner.parameters()).device
        generator = torch.Generator(device=device).manual_seed(self.profile.run.seed)
        was_training = inner.training
        inner.eval()
        try:
            continuations = [
                generate(
                    inner, p.encode("utf-8"), sample.max_new_bytes, sample.temperature, generator
                )
                for p in sample.prompts
            ]
        finally:
            inner.train(was_training)
        text = _format_samples(sample.prompts, continuations)
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"step-{step:08d}.txt"
        # Bytes: generated text (a stray \r included) is written exactly as sampled, atomically.
        write_whole(path, text.encode("utf-8"), "sample_write")
        return [SampleResult(kind="text", path=path, text=text)]

    def shard(self, rank: int, world_size: int) -> None:
        self.corpus.shard(rank, world_size)

    def model_config(self) -> dict[str, Any]:
        return {
            "kind": "lm",
            "architecture": "byte-transformer",
            "tied_embeddings": True,
            **asdict(self.config),
        }

    def describe(self) -> dict[str, Any]:
        return {
            "task": "lm",
            "vocab_size": VOCAB_SIZE,
            "parameters": count_parameters(self.model),
            "items": self.train_items(),
            **self.corpus.describe(),
            "warnings": self.corpus.warnings(),
        }


def _lm_task(request: TaskRequest) -> LmTask:
    return LmTask.from_report(request.profile, request.report, request.device)


register_task("text", _lm_task)
