"""Training profiles: the validated description of a job, independent of the machine.

Torch-free by design: the dashboard imports this module to validate and describe profiles.
Every field carries a one-line `description` that the dashboard shows beside it.
Loading (TOML, `extends`, machine file, `--set`) lives in `trainer_core.contract.profile_loader`;
the audio sections (`[audio]`, `[sample]`, `[tts]`, `[vocoder]`) in `profile_audio`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from trainer_core.contract.confined_path import RunName
from trainer_core.contract.profile_audio import (
    AudioSection,
    SampleSection,
    TtsSection,
    VocoderSection,
)
from trainer_core.contract.profile_section import Section as Section
from trainer_core.contract.profile_vits import VitsSection, hop_problem
from trainer_core.contract.task_source import spec_problem
from trainer_core.contract.train_section import TrainSection as TrainSection

ComputeMode = Literal["gpu", "cpu", "mixed"]
DataMode = Literal["voice", "text", "auto"]


class RunSection(Section):
    name: RunName = Field(
        default="vega", description="Run name; run folders are <name>-<YYYYmmdd-HHMMSS>."
    )
    runs_dir: Path | None = Field(
        default=None, description="Folder where run folders are created (default: ./runs)."
    )
    seed: int = Field(
        default=1234, ge=0, description="Random seed for weights, data order and sampling."
    )


class DataSection(Section):
    path: Path | None = Field(
        default=None, description="Data folder: audio with transcripts, or text files."
    )
    mode: DataMode = Field(
        default="auto", description="voice, text, or auto (detect from the data folder)."
    )
    val_fraction: float = Field(
        default=0.05, ge=0.0, le=0.5, description="Fraction of items held out for validation."
    )
    val_max_items: int = Field(
        default=64,
        ge=0,
        description=(
            "Cap on validation items (0: no cap), the same fixed choice on every start and resume;"
            " keeps validation a few % of the time on big corpora. Voice: the rest train; text:"
            " unused windows."
        ),
    )
    min_duration_s: float = Field(
        default=0.3, ge=0.0, description="Audio shorter than this is skipped as too short."
    )
    max_duration_s: float = Field(
        default=20.0, gt=0.0, description="Audio longer than this is skipped as too long."
    )
    preload: Literal["auto", "ram", "disk"] = Field(
        default="auto",
        description="auto: RAM when the estimate fits, else disk cache; ram or disk to force.",
    )
    cache_dir: Path | None = Field(
        default=None, description="Feature cache folder (default: the user cache folder)."
    )
    num_workers: int = Field(
        default=2, ge=0, le=64, description="Parallel decode workers for preloading."
    )
    context_bytes: int = Field(
        default=256, ge=8, le=65536, description="Text mode: bytes per training sequence."
    )
    speakers: Literal["auto", "column", "folders", "none"] = Field(
        default="auto",
        description=(
            "Voice: column (metadata.csv rows id|speaker|text), folders (DATA/<speaker>/...), none"
            " (one speaker), or auto (column or folders when the data clearly has them, else none)."
        ),
    )
    # Corpora as people have them (data.corpus_layout): Common Voice releases and datasets folders.
    max_items: int = Field(
        default=0,
        ge=0,
        description=(
            "Voice: train on a fixed subset of this many items (0: all), chosen by run.seed, "
            "the same on every resume; the held-out items stay as they are."
        ),
    )
    min_up_votes: int = Field(
        default=0, ge=0, description="Common Voice: skip rows with fewer up-votes."
    )
    common_voice_train: Literal["validated", "train"] = Field(
        default="validated",
        description=(
            "Common Voice: train on validated.tsv minus dev/test (all the validated "
            "data), or on the release's smaller train.tsv."
        ),
    )
    text_column: str | None = Field(
        default=None,
        description=(
            "datasets folders: the text column (default: sentence, normalized_text, "
            "text, transcription or transcript)."
        ),
    )
    audio_column: str | None = Field(
        default=None, description="datasets folders: the audio column (default: audio)."
    )

    @model_validator(mode="after")
    def _durations_ordered(self) -> DataSection:
        if self.min_duration_s >= self.max_duration_s:
            raise ValueError(
                f"min_duration_s ({self.min_duration_s}) must be below max_duration_s"
                f" ({self.max_duration_s})"
            )
        return self


class ModelSection(Section):
    kind: Literal["auto", "tts", "lm", "vocoder", "vits"] = Field(
        default="auto",
        description=(
            "Model family; auto follows the data mode (voice: tts). vocoder: mel to waveform, a GAN"
            " trained on the same voice folders (settings in [vocoder]); vits: text to waveform end"
            " to end ([vits])."
        ),
    )
    task: str | None = Field(
        default=None,
        description=(
            'A task from an installed package, "package.module:factory" (module names only, no'
            " paths); a module outside Vega runs only when this machine's file allows it ([tasks]"
            " allowed in machine.toml)."
        ),
    )
    size: Literal["fixed", "auto"] = Field(
        default="fixed",
        description=(
            "fixed: hidden, layers and heads as set here; auto: chosen for train.target_hours from"
            " this machine's measured step time and the corpus size (about 20 training tokens per"
            " parameter)."
        ),
    )
    hidden: int = Field(
        default=256, ge=8, le=8192, description="Hidden size of the transformer layers."
    )
    encoder_layers: int = Field(
        default=4, ge=1, le=64, description="Text encoder layers (TTS) or layers (LM)."
    )
    decoder_layers: int = Field(
        default=4, ge=1, le=64, description="Mel decoder layers (TTS only)."
    )
    decoder: Literal["transformer", "conv"] = Field(
        default="transformer",
        description=(
            "TTS mel decoder: transformer blocks, or residual dilated convolutions (no attention"
            " over frames: cheaper per step on CPUs, each layer sees a wider window)."
        ),
    )
    heads: int = Field(default=2, ge=1, le=64, description="Attention heads; must divide hidden.")
    ffn_mult: int = Field(
        default=4, ge=1, le=16, description="Feed-forward width as a multiple of hidden."
    )
    dropout: float = Field(default=0.1, ge=0.0, lt=1.0, description="Dropout probability.")
    postnet_layers: int = Field(
        default=0,
        ge=0,
        le=16,
        description="TTS: convolution layers refining the decoder's mel (0: no post-net).",
    )
    pitch: bool = Field(
        default=False,
        description=(
            "TTS: predict the pitch (log F0 and voicing per frame, tracked from the recordings at"
            " preload) and condition the mel decoder on it."
        ),
    )
    attention_dropout: float | None = Field(
        default=None,
        ge=0.0,
        lt=1.0,
        description=(
            "Dropout on attention weights (TTS); unset: the same as dropout. 0 lets CPU attention"
            " use its fused kernel, about twice as fast for small models."
        ),
    )

    @field_validator("task")
    @classmethod
    def _task_is_a_module_name(cls, value: str | None) -> str | None:
        problem = spec_problem(value) if value is not None else None
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _task_chooses_the_model(self) -> ModelSection:
        if self.task is not None and self.kind != "auto":
            raise ValueError(
                f'model.task ({self.task}) chooses the model: leave model.kind "auto", not'
                f' "{self.kind}"'
            )
        if self.task is not None and self.size == "auto":
            raise ValueError(
                f'model.size = "auto" sizes Vega\'s own models; model.task ({self.task}) sizes'
                " its own"
            )
        if self.kind in ("vocoder", "vits") and self.size == "auto":
            raise ValueError(
                f'model.size = "auto" sizes the acoustic and text models; a {self.kind} takes its'
                f' shape from [{self.kind}]: leave model.size "fixed"'
            )
        return self

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> ModelSection:
        if self.hidden % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide hidden ({self.hidden})")
        return self


class ComputeSection(Section):
    mode: ComputeMode = Field(
        default="mixed", description="gpu (required), cpu (never an accelerator), or mixed."
    )
    device: str | None = Field(
        default=None, description="Explicit device (cuda:1, mps, cpu) overriding the mode's choice."
    )
    min_gpu_memory_gb: float = Field(
        default=2.0, ge=0.0, description="mixed: GPUs with less free memory are not used."
    )
    num_threads: int | None = Field(
        default=None, ge=1, le=1024, description="CPU threads for torch (default: all cores)."
    )


WANDB_PROJECT_FORBIDS = "/\\#?%:"  # characters W&B refuses in a project name


class LoggingSection(Section):
    level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="Lowest log level written."
    )
    step_interval_s: float = Field(
        default=0.5,
        ge=0.05,
        le=60.0,
        description="Step events are coalesced over this window (bounded log growth).",
    )
    profile_interval_s: float = Field(
        default=5.0, ge=0.5, le=3600.0, description="Seconds between profiler breakdowns."
    )
    tensorboard: bool = Field(
        default=False, description="Also write TensorBoard scalars to the run folder."
    )
    wandb: bool = Field(
        default=False,
        description=(
            "Also log to Weights & Biases (the `wandb` extra); the key comes from "
            "WANDB_API_KEY or `wandb login`, never from a profile."
        ),
    )
    wandb_project: str = Field(
        default="vega",
        min_length=1,
        description="The W&B project the run goes to.",
    )
    wandb_entity: str | None = Field(
        default=None,
        description="The W&B team or user (unset: the logged-in user's default).",
    )
    report: bool = Field(
        default=True, description="Write report.png (loss, LR, throughput) at the end."
    )

    @field_validator("wandb_project")
    @classmethod
    def _a_project_name_wandb_takes(cls, value: str) -> str:
        bad = sorted(set(value) & set(WANDB_PROJECT_FORBIDS))
        if bad or len(value) > 128:
            why = f"it contains {' '.join(bad)}" if bad else "it is longer than 128 characters"
            raise ValueError(
                f'W&B refuses this project name: {why}; choose a plain one like "vega"'
            )
        return value


class MemorySection(Section):
    """The trainer's memory budget and the levels (fractions of it) at which
    the memory manager acts."""

    budget_gb: float | None = Field(
        default=None,
        gt=0.0,
        description=(
            "Memory the trainer may use, in GiB: CUDA reserved, MPS allocated, else process RSS "
            "(default: 90% of the GPU's memory, or 75% of the host's RAM on CPU)."
        ),
    )
    release_at: float = Field(
        default=0.75,
        gt=0.0,
        le=1.0,
        description="Above this fraction of the budget: release caches (gc, empty_cache).",
    )
    shrink_at: float = Field(
        default=0.90,
        gt=0.0,
        le=1.0,
        description="Above this fraction: halve the micro-batch, keeping the effective batch.",
    )
    pause_at: float = Field(
        default=0.98,
        gt=0.0,
        le=1.0,
        description="Above this fraction: save a checkpoint and pause the run.",
    )
    act: bool = Field(
        default=True, description="Act on the levels; false only reports them as memory events."
    )

    @model_validator(mode="after")
    def _levels_rise(self) -> MemorySection:
        if not self.release_at < self.shrink_at < self.pause_at:
            raise ValueError(
                f"memory levels must rise: release_at ({self.release_at}) < shrink_at"
                f" ({self.shrink_at}) < pause_at ({self.pause_at})"
            )
        return self


class DebugSection(Section):
    oom_at_steps: list[int] = Field(
        default_factory=list, description="Raise a real OutOfMemoryError at these steps."
    )
    oom_in_optimizer_at_steps: list[int] = Field(
        default_factory=list,
        description=(
            "Raise OutOfMemoryError in the optimizer step of these steps, after the loss scaler"
            " unscaled."
        ),
    )
    nonfinite_at_steps: list[int] = Field(
        default_factory=list, description="Make the loss NaN at these steps."
    )
    hold_checkpoint_write_s: float = Field(
        default=0.0,
        ge=0.0,
        le=3600.0,
        description="Pause mid-way through each checkpoint write (fault tests).",
    )
    fail_at_step: int | None = Field(
        default=None, ge=0, description="Raise an error at this step (crash tests)."
    )
    fault_group: str | None = Field(
        default=None,
        description=(
            "Several optimizers: fire the step faults in this group's pass (default: the first)."
        ),
    )


class Profile(Section):
    """A whole training profile, as resolved from its file, its parents and overrides."""

    extends: str | None = Field(
        default=None, description="Parent profile file, relative to this one."
    )
    run: RunSection = Field(
        default_factory=RunSection, description="Run naming, location and seed."
    )
    data: DataSection = Field(
        default_factory=DataSection, description="Where the data is and how to read it."
    )
    model: ModelSection = Field(default_factory=ModelSection, description="Model family and size.")
    train: TrainSection = Field(
        default_factory=TrainSection, description="Optimisation and schedule."
    )
    compute: ComputeSection = Field(default_factory=ComputeSection, description="Device policy.")
    audio: AudioSection = Field(
        default_factory=AudioSection, description="Audio decoding and mel features."
    )
    sample: SampleSection = Field(default_factory=SampleSection, description="Evaluation samples.")
    tts: TtsSection = Field(
        default_factory=TtsSection, description="TTS text front end, losses and vocoder."
    )
    vocoder: VocoderSection = Field(
        default_factory=VocoderSection, description="GAN vocoder (model.kind vocoder)."
    )
    vits: VitsSection = Field(
        default_factory=VitsSection, description="End-to-end VITS voice (model.kind vits)."
    )
    logging: LoggingSection = Field(
        default_factory=LoggingSection, description="Events, reports and logs."
    )
    memory: MemorySection = Field(
        default_factory=MemorySection, description="Memory budget and what is done near it."
    )
    debug: DebugSection = Field(
        default_factory=DebugSection, description="Fault injection for tests."
    )

    @model_validator(mode="after")
    def _vits_decoder_fits_the_hop(self) -> Profile:
        problem = (
            hop_problem(self.vits, self.audio.hop_length) if self.model.kind == "vits" else None
        )
        if problem is not None:
            raise ValueError(problem)
        return self


# Fields holding filesystem paths: resolved relative to the file (or folder) that set them.
PATH_FIELDS: tuple[tuple[str, str], ...] = (
    ("run", "runs_dir"),
    ("data", "path"),
    ("data", "cache_dir"),
    ("train", "init_from"),
    ("train", "init_config"),
    ("train", "init_discriminator"),
)


def field_descriptions() -> dict[str, str]:
    """Map 'section.key' to its one-line description, for the dashboard and `profile show`."""
    out: dict[str, str] = {}
    for section_name, section_field in Profile.model_fields.items():
        section_type = section_field.annotation
        if isinstance(section_type, type) and issubclass(section_type, BaseModel):
            for key, field in section_type.model_fields.items():
                out[f"{section_name}.{key}"] = field.description or ""
    return out
