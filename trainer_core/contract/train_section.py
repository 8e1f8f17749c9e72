"""The profile's [train] section: optimisation, schedule, run length, evaluation and checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from trainer_core.contract.profile_section import Section


class TrainSection(Section):
    batch_size: int = Field(
        default=8, ge=1, le=65536, description="Micro-batch size (items per forward pass)."
    )
    grad_accum: int = Field(
        default=1, ge=1, le=4096, description="Micro-batches accumulated per optimizer step."
    )
    lr: float = Field(default=3e-4, gt=0.0, le=1.0, description="Peak learning rate (AdamW).")
    weight_decay: float = Field(default=0.01, ge=0.0, le=1.0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field(default=(0.9, 0.99), description="AdamW beta1 and beta2.")
    schedule: Literal["cosine", "cosine_restarts", "constant"] = Field(
        default="cosine",
        description=(
            "LR schedule after warmup: cosine to zero, cosine with warm restarts, or constant."
        ),
    )
    warmup_steps: int = Field(
        default=100, ge=0, description="Linear warmup steps from 0 to the peak LR."
    )
    restart_period: int = Field(
        default=1000, ge=1, description="cosine_restarts: steps in the first cycle."
    )
    restart_mult: int = Field(
        default=1, ge=1, le=16, description="cosine_restarts: cycle length multiplier."
    )
    epochs: int = Field(
        default=10, ge=1, description="Epochs to train (unless max_steps or target_hours decide)."
    )
    max_steps: int | None = Field(
        default=None, ge=1, description="Stop after this many optimizer steps (overrides epochs)."
    )
    target_hours: float | None = Field(
        default=None,
        gt=0.0,
        le=10000.0,
        description="Time budget: plan epochs to finish in this many hours.",
    )
    grad_clip: float = Field(
        default=1.0, ge=0.0, description="Max gradient norm; 0 disables clipping."
    )
    precision: Literal["auto", "fp32", "fp16", "bf16"] = Field(
        default="auto", description="auto: bf16/fp16 mixed precision on accelerators, fp32 on CPU."
    )
    tf32: bool = Field(
        default=True,
        description=(
            "CUDA (Ampere and newer): fp32 matmuls use TF32 tensor cores; off for bit-exact fp32."
        ),
    )
    eval_every_steps: int | None = Field(
        default=None, ge=1, description="Validate every N steps (default: each epoch)."
    )
    validate_at_start: bool = Field(
        default=False,
        description="Validate once before the first step: a baseline for the validation curve.",
    )
    checkpoint_every_epochs: int = Field(
        default=1, ge=1, description="Save a checkpoint every N epochs."
    )
    checkpoint_every_steps: int | None = Field(
        default=None, ge=1, description="Also save every N steps."
    )
    keep_last: int = Field(
        default=3, ge=1, le=1000, description="Checkpoints kept besides the best one."
    )
    keep_disk_gb: float | None = Field(
        default=None,
        gt=0.0,
        le=1_000_000.0,
        description=(
            "Disk budget for this run's checkpoints, in GB (10^9 bytes): the oldest go first, never"
            " the best or the newest complete one (a warning says when those two alone are over"
            " it); unset: keep_last decides."
        ),
    )
    early_stopping_patience: int | None = Field(
        default=None,
        ge=1,
        description="Stop after N validations without improvement (off when unset).",
    )
    overtraining_evals: int = Field(
        default=3,
        ge=0,
        le=1000,
        description=(
            "Warn (event, notification, dashboard) when the validation loss rises this many"
            " validations in a row while the training loss falls, naming the best checkpoint; once"
            " until a new best. 0 turns it off."
        ),
    )
    nonfinite_patience: int = Field(
        default=3,
        ge=1,
        description="Non-finite steps in a row before falling back to a safer precision.",
    )
    free_running_every: int = Field(
        default=4,
        ge=0,
        description=(
            "Voice runs: every N validations (and at the end) speak held-out sentences without"
            " teacher forcing and score them against their recordings; 0 turns it off."
        ),
    )
    free_running_items: int = Field(
        default=8, ge=1, le=256, description="Held-out sentences in the free-running evaluation."
    )
    init_from: Path | None = Field(
        default=None,
        description=(
            "Start from a trained model of the same kind: a run folder (its export, else its best,"
            " else its newest checkpoint), a checkpoint or an export folder. Matching weights are"
            " copied, the text embedding by symbol; optimizer and schedule start fresh. A resumed"
            " run keeps its checkpoint instead."
        ),
    )
    init_config: Path | None = Field(
        default=None,
        description=(
            "A Piper checkpoint's voice config (.onnx.json / config.json) when it is not beside the"
            " checkpoint that train.init_from names."
        ),
    )
    init_discriminator: Path | None = Field(
        default=None,
        description=(
            "vits from a transformers folder (which holds no discriminator): a discriminator to"
            " start from, an original VITS checkpoint (D_*.pth, as Meta's MMS training wrote) or a"
            ' converted "-train" folder.'
        ),
    )
    init_speaker: str | None = Field(
        default=None,
        description=(
            "Starting a one-speaker voice from a multi-speaker model: the source speaker it keeps"
            " (default: the one named like this corpus's speaker, else the source's default"
            " speaker)."
        ),
    )
    finetune_lr: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description=(
            "Peak learning rate when the run starts from a trained model (train.init_from); unset:"
            " 2e-4 (Piper's) for vits, train.lr for the other kinds."
        ),
    )
    freeze: list[str] = Field(
        default_factory=list,
        description=(
            'Parts of the model that do not train (vits: "text_encoder", "posterior_encoder",'
            ' "flow", "duration_predictor", "decoder", "speaker_embedding", "discriminator").'
        ),
    )
    select_best_by: Literal["val_loss", "free_running"] = Field(
        default="val_loss",
        description=(
            "What makes a checkpoint the best: the teacher-forced validation loss, or the"
            " free-running distance of the held-out sentences (voice runs)."
        ),
    )

    @model_validator(mode="after")
    def _warmup_fits(self) -> TrainSection:
        if self.max_steps is not None and self.warmup_steps >= self.max_steps:
            raise ValueError(
                f"warmup_steps ({self.warmup_steps}) must be shorter than max_steps"
                f" ({self.max_steps})"
            )
        return self

    @model_validator(mode="after")
    def _free_running_on_when_it_selects(self) -> TrainSection:
        if self.select_best_by == "free_running" and self.free_running_every == 0:
            raise ValueError(
                'select_best_by = "free_running" needs free_running_every >= 1 (it is 0, so nothing'
                " is scored)"
            )
        return self
