"""Run configuration: pydantic models, YAML loading and `--set` overrides."""
from lmplatform.config.loader import ConfigError, apply_overrides, load_run_config, parse_config
from lmplatform.config.schema import RunConfig

__all__ = ["ConfigError", "RunConfig", "apply_overrides", "load_run_config", "parse_config"]
