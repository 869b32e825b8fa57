"""Read a config from YAML, apply `--set section.field=value` overrides, validate it against a pydantic model.

Every failure is a `ConfigError` whose message names the field, the value it got
and what is allowed, so a bad config stops before Ray starts any worker.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Iterable, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

ModelT = TypeVar("ModelT", bound=BaseModel)


class ConfigError(ValueError):
    """A config that cannot be used; the message is meant for the user as is."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading `3e-5` and `1E+3` as floats, as YAML 1.2 and JSON do (YAML 1.1 wants a dot, so
    `lr: 3e-5` was the string "3e-5")."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def parse_yaml(text: str) -> Any:
    """One YAML document (a config, a `--set` value) as this project reads YAML everywhere."""
    return yaml.load(text, Loader=_Loader)


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = parse_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


# A list of sections is addressed entry by entry through these keys (`tasks.retrieval.retrievers.minilm.batch_size`).
ENTRY_KEYS = ("name", "task")


def apply_overrides(data: dict[str, Any], overrides: Iterable[str], flag: str = "--set",
                    example: str = "optim.max_steps=5") -> dict[str, Any]:
    """Return a copy of `data` with each `a.b.c=value` set; values are parsed as YAML scalars.

    In a list of sections, a part of the path names the entry whose `name` (or `task`) it equals. Errors name the
    command-line `flag` the overrides came from, and a bad one shows `example`."""
    data = copy.deepcopy(data)
    for override in overrides:
        key, sep, raw = override.partition("=")
        key = key.strip()
        said = f"{flag} {override!r}"
        if not sep or not key:
            raise ConfigError(f"{said}: expected section.field=value, e.g. {flag} {example}")
        try:
            value = parse_yaml(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"{said}: value is not valid YAML: {exc}") from exc
        node = data
        parts = key.split(".")
        for depth, part in enumerate(parts[:-1]):
            child = _entry(node, part, said, ".".join(parts[:depth])) if isinstance(node, list) else node.setdefault(part, {})
            if not isinstance(child, dict) and not _is_section_list(child):
                raise ConfigError(f"{said}: {'.'.join(parts[: depth + 1])} is a value, not a section")
            node = child
        if isinstance(node, list):
            raise ConfigError(f"{said}: {'.'.join(parts[:-1])} is a list: name one of its entries, then a field")
        node[parts[-1]] = value
    return data


def _is_section_list(node: Any) -> bool:
    return isinstance(node, list) and bool(node) and all(isinstance(item, dict) for item in node)


def _entry(entries: list[dict[str, Any]], name: str, said: str, where: str) -> dict[str, Any]:
    """The entry of a list of sections that `name` names (`said`: the override, for the error)."""
    for entry in entries:
        if any(entry.get(key) == name for key in ENTRY_KEYS):
            return entry
    names = [str(next((entry[key] for key in ENTRY_KEYS if key in entry), "?")) for entry in entries]
    raise ConfigError(f"{said}: {where} has no entry {name!r}; its entries: {', '.join(names)}")


def format_validation_error(exc: ValidationError, source: str, data: object = None) -> str:
    lines = [f"invalid config ({source}): {exc.error_count()} problem(s)"]
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in _without_union_tags(err["loc"], data)) or "<root>"
        if err["type"] == "extra_forbidden":
            lines.append(f"  {loc}: unknown key (got {_short(err.get('input'))}); check the spelling or `lmp config schema`")
        elif err["type"] == "missing":
            lines.append(f"  {loc}: required field is missing")
        else:
            lines.append(f"  {loc}: got {_short(err.get('input'))}; {err['msg']}")
    return "\n".join(lines)


def _without_union_tags(loc: tuple[int | str, ...], data: object) -> list[int | str]:
    """`loc` less the tags a discriminated union adds to it (objective.mlm.mask_prob -> objective.mask_prob).

    A tag is a part that names no key of the mapping it indexes, followed by more parts (the last part may be a
    missing field). `data` is the input validated: the location is walked through it.
    """
    kept: list[int | str] = []
    node = data
    for depth, part in enumerate(loc):
        if isinstance(node, dict) and isinstance(part, str) and part not in node and depth < len(loc) - 1:
            continue  # the tag: the same node is indexed by the next part
        kept.append(part)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and -len(node) <= part < len(node):
            node = node[part]
        else:
            node = None
    return kept


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_config(data: dict[str, Any], model: type[ModelT], source: str = "config") -> ModelT:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source, data)) from None

