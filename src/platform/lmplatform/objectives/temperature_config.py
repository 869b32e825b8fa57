"""Config fields of a learnable InfoNCE temperature, shared by the biencoder and DeCLUTR configs (torch-free).

The `Temperature` module they configure is in infonce.py (`temperature_from_config`).
"""
from __future__ import annotations

from pydantic import Field

LEARNABLE_DESCRIPTION = "Learn log(temperature), clamped to [min_temperature, max_temperature]."
MIN_TEMPERATURE = Field(0.01, gt=0.0, le=1.0)
MAX_TEMPERATURE = Field(1.0, gt=0.0, le=1.0)
TEMPERATURE_LR = Field(
    1e-2, gt=0.0, le=1.0,
    description="Learning rate of log(temperature) when learnable (its own AdamW group, no weight decay, the run's schedule). "
                "Adam moves a parameter by about its lr per step whatever the gradient's scale, so this is log tau's "
                "relative change per step: 1e-2 lets tau travel ~e-fold over a few hundred steps; at the encoder's lr "
                "(2e-5) it would move under 1%.",
)


def check_temperature_range(temperature: float, min_temperature: float, max_temperature: float) -> None:
    """The initial temperature must lie within its clamp range."""
    if not min_temperature <= temperature <= max_temperature:
        raise ValueError(
            f"temperature {temperature} must lie in [min_temperature, max_temperature] "
            f"= [{min_temperature}, {max_temperature}]"
        )
