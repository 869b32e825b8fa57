"""Configs as data: the one base of every config model (`base`), the sections of a run config (`schema`) and
YAML loading with `--set` overrides (`loader`). The run config itself, which holds one of the registered
objectives' sections, is assembled above the objectives: `lmplatform.objectives.run_config`."""
from lmplatform.config.loader import ConfigError, apply_overrides, parse_config, read_yaml
from lmplatform.config.schema import DataConfig

__all__ = ["ConfigError", "DataConfig", "apply_overrides", "parse_config", "read_yaml"]
