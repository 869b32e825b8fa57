"""Run configuration: pydantic models, YAML loading and `--set` overrides.

The names below are imported on first use, so that `lmplatform.config.base` (which every
objective's config imports) loads without the run config schema, which is derived from
the objectives' specs.
"""
from __future__ import annotations

from typing import Any

__all__ = ["ConfigError", "RunConfig", "apply_overrides", "load_run_config", "parse_config"]


def __getattr__(name: str) -> Any:  # noqa: ANN401 - one of __all__
    if name == "RunConfig":
        from lmplatform.config.schema import RunConfig

        return RunConfig
    if name in __all__:
        from lmplatform.config import loader

        return getattr(loader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
