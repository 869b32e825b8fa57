"""Load a run config from YAML, apply `--set section.field=value` overrides, validate.

Every failure is a `ConfigError` whose message names the field, the value it got
and what is allowed, so a bad config stops before Ray starts any worker.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterable, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from lmplatform.config.schema import RunConfig

ModelT = TypeVar("ModelT", bound=BaseModel)


class ConfigError(ValueError):
    """A config that cannot be used; the message is meant for the user as is."""


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a copy of `data` with each `a.b.c=value` set; values are parsed as YAML scalars."""
    data = copy.deepcopy(data)
    for override in overrides:
        key, sep, raw = override.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {override!r}: expected section.field=value, e.g. --set optim.max_steps=5")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {override!r}: value is not valid YAML: {exc}") from exc
        node = data
        parts = key.split(".")
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(
                    f"--set {override!r}: {'.'.join(parts[: depth + 1])} is a value, not a section"
                )
            node = child
        node[parts[-1]] = value
    return data


def format_validation_error(exc: ValidationError, source: str) -> str:
    lines = [f"invalid config ({source}): {exc.error_count()} problem(s)"]
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"] if not _is_union_tag(p)) or "<root>"
        if err["type"] == "extra_forbidden":
            lines.append(f"  {loc}: unknown key (got {_short(err.get('input'))}); check the spelling or `lmp config schema`")
        elif err["type"] == "missing":
            lines.append(f"  {loc}: required field is missing")
        else:
            lines.append(f"  {loc}: got {_short(err.get('input'))}; {err['msg']}")
    return "\n".join(lines)


def _is_union_tag(part: object) -> bool:
    # Discriminated unions add the tag ('mlm', 'declutr', ...) to the error location.
    from lmplatform.objectives.registry import objective_names

    return isinstance(part, str) and part in objective_names()


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_config(data: dict[str, Any], model: type[ModelT] = RunConfig, source: str = "config") -> ModelT:  # type: ignore[assignment]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None


def load_run_config(path: str | Path | None, overrides: Iterable[str] = (), base: dict[str, Any] | None = None) -> RunConfig:
    """Read `path` (or start from `base`), apply overrides and validate."""
    data = read_yaml(path) if path is not None else copy.deepcopy(base or {})
    data = apply_overrides(data, overrides)
    return parse_config(data, RunConfig, source=str(path) if path else "overrides")

