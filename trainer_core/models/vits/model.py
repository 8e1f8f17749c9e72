"""`VitsModel`: a VITS voice's generator (`model_g`) and discriminator (`model_d`) under one
module.

The two attribute names are Piper's Lightning module's, so `VitsModel.state_dict()` is keyed as a
Piper checkpoint's `state_dict` is (once weight-norm names are mapped, `piper_names`), and each
part can get its own optimizer.
"""

from __future__ import annotations

from torch import nn

from trainer_core.models.vits.config import VitsConfig
from trainer_core.models.vits.discriminator import MultiPeriodDiscriminator
from trainer_core.models.vits.synthesizer import Synthesizer


class VitsModel(nn.Module):
    """Generator and multi-period discriminator built from one `VitsConfig` (kept as `config`)."""

    model_g: Synthesizer
    model_d: MultiPeriodDiscriminator

    def __init__(self, config: VitsConfig | None = None) -> None:
        super().__init__()
        self.config = config or VitsConfig()
        self.model_g = Synthesizer(self.config)
        self.model_d = MultiPeriodDiscriminator(self.config.discriminator_channels)
