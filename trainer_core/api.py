"""The task API: everything a model from outside Vega needs to train under
Vega's engine and dashboard.

Import this module, not Vega's internals: its names are the documented, versioned surface for task
authors (docs/custom-tasks.md). A task is a `Task` subclass built by a factory that takes a
`TaskRequest`; a profile names the factory with `model.task = "package.module:factory"` (or
`trainer-core train --task ...`).

`API_VERSION` is "MAJOR.MINOR": MINOR grows when names are added, MAJOR when one is removed or
changes meaning. `tests/test_task_api.py` pins the exact set of names (`tests/task_api_names.txt`):
removing one fails it. Everything here is re-exported from where it lives; nothing is copied.

- The Task interface: `Task`, `Batch`, `Carry`, `SampleKind`, `SampleResult`,
  optimizer groups (`GroupSpec`), and
  the helpers `batch_to`, `count_parameters`, `unwrap_model`; the registry: `TaskRequest`,
  `TaskFactory`, `register_task`; the profile a task reads (`Profile`, `AudioSection`) and the
  errors it raises for bad input.
- Data: the data-folder scan (`scan_data`, `DataReport`, `VoiceItem`),
  preloading recordings as mel features
  (`preload_voice`, `VoiceFeatures`) or as samples (`preload_waves`, `Waves`) into RAM or the disk
  cache (`choose_where`), mel features (`MelExtractor`), text windows (`TextCorpus`), the stable
  train/validation split (`split_items`), length-bucketed voice batches (`VoiceDataset`),
  fixed-length audio segments (`SegmentDataset`), and the deterministic, resumable epoch order they
  share (`epoch_seed`, `segment_offset`; `check_shard` for DDP).
- Text front end: `TextEncoder` (characters or espeak-ng phonemes), `normalize_text`, `phonemize`.
- Samples: `samples_folder` (samples/step-<8 digits>/) and `write_wav`.
"""

from trainer_core.contract.errors import DataError, ProfileError, VegaError
from trainer_core.contract.profile import Profile
from trainer_core.contract.profile_audio import AudioSection
from trainer_core.data.mel import MelExtractor
from trainer_core.data.preload import PreloadWhere, ProgressCallback, VoiceFeatures, preload_voice
from trainer_core.data.scan import scan_data
from trainer_core.data.scan_report import DataReport, VoiceItem
from trainer_core.data.segment_dataset import SegmentDataset, segment_offset
from trainer_core.data.sharding import check_shard
from trainer_core.data.text import TextCorpus
from trainer_core.data.voice_dataset import VoiceDataset, epoch_seed, split_items
from trainer_core.data.wave_preload import Waves, preload_waves
from trainer_core.models.base import (
    Batch,
    Carry,
    GroupSpec,
    SampleKind,
    SampleResult,
    Task,
    batch_to,
    count_parameters,
    unwrap_model,
)
from trainer_core.models.griffin_lim import write_wav
from trainer_core.models.registry import TaskFactory, TaskRequest, register_task
from trainer_core.models.text_frontend import TextEncoder, normalize_text, phonemize
from trainer_core.models.voice_task import choose_where, samples_folder

API_VERSION = "1.0"

__all__ = [
    "API_VERSION",
    "AudioSection",
    "Batch",
    "Carry",
    "DataError",
    "DataReport",
    "GroupSpec",
    "MelExtractor",
    "PreloadWhere",
    "Profile",
    "ProfileError",
    "ProgressCallback",
    "SampleKind",
    "SampleResult",
    "SegmentDataset",
    "Task",
    "TaskFactory",
    "TaskRequest",
    "TextCorpus",
    "TextEncoder",
    "VegaError",
    "VoiceDataset",
    "VoiceFeatures",
    "VoiceItem",
    "Waves",
    "batch_to",
    "check_shard",
    "choose_where",
    "count_parameters",
    "epoch_seed",
    "normalize_text",
    "phonemize",
    "preload_voice",
    "preload_waves",
    "register_task",
    "samples_folder",
    "scan_data",
    "segment_offset",
    "split_items",
    "unwrap_model",
    "write_wav",
]
