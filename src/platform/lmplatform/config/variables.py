"""Config variables and inheritance: one recipe file serves many data sets.

A recipe names its inputs once, as `vars`, and uses them anywhere in its strings as `${name}`:

    vars: {data_root: null}              # null: required, `--set vars.data_root=runs/data/mytracker`
    stages:
      - name: data
        pairs: {corpus: "${data_root}/reports.jsonl", relations: "${data_root}/pairs.jsonl"}

A string that is exactly `${name}` takes the variable's value with its type (a number stays a number); inside a
longer string the value is written as text. An instance of a recipe is a file that `extends` it: its top-level keys
replace the recipe's, except `vars`, which are merged (the instance's win), so an instance is usually a name and a
data root. Substitution happens after `--set` overrides, so `--set vars.x=...` reaches every use of x.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from lmplatform.config.loader import ConfigError

VARS_KEY = "vars"
EXTENDS_KEY = "extends"
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def extend(data: dict[str, Any], path: Path, read: Callable[[Path], dict[str, Any]],
           seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """`data` (read from `path`) over the file its `extends` names (relative to `path`'s folder), recursively: its
    top-level keys replace the base's, its `vars` are merged into the base's. Without `extends`, `data` itself."""
    base_name = data.get(EXTENDS_KEY)
    if base_name is None:
        return data
    if not isinstance(base_name, str) or not base_name.strip():
        raise ConfigError(f"{path}: {EXTENDS_KEY} must name a config file, got {base_name!r}")
    base_path = (path.parent / base_name).resolve()
    if base_path in seen or base_path == path.resolve():
        raise ConfigError(f"{path}: {EXTENDS_KEY} {base_name!r} leads back to itself "
                          f"({' -> '.join(str(p) for p in (*seen, path.resolve(), base_path))})")
    base = extend(read(base_path), base_path, read, (*seen, path.resolve()))
    own_vars, base_vars = data.get(VARS_KEY) or {}, base.get(VARS_KEY) or {}
    for where, found in ((path, own_vars), (base_path, base_vars)):
        if not isinstance(found, dict):
            raise ConfigError(f"{where}: {VARS_KEY} must be a mapping of names to values, got {found!r}")
    merged = {**base, **{k: v for k, v in data.items() if k != EXTENDS_KEY}}
    if base_vars or own_vars:
        merged[VARS_KEY] = {**base_vars, **own_vars}
    return merged


def substitute(data: dict[str, Any], source: str) -> dict[str, Any]:
    """A copy of `data` without its `vars`, every `${name}` in its strings replaced by the variable's value.

    A name that no variable defines, a variable left null that is used, or a value that is not a scalar is a
    ConfigError naming it, the variables defined and how to set one."""
    variables = data.get(VARS_KEY) or {}
    if not isinstance(variables, dict):
        raise ConfigError(f"{source}: {VARS_KEY} must be a mapping of names to values, got {variables!r}")
    for name, value in variables.items():
        if not isinstance(value, (str, int, float, bool)) and value is not None:
            raise ConfigError(f"{source}: {VARS_KEY}.{name} must be a string, a number or a boolean, got {value!r}")

    def value_of(name: str, where: str) -> Any:
        if name not in variables:
            defined = ", ".join(sorted(variables)) or "none"
            raise ConfigError(f"{source}: {where} uses ${{{name}}}, which no variable defines "
                              f"(variables: {defined}; add it under {VARS_KEY})")
        if variables[name] is None:
            raise ConfigError(f"{source}: {where} needs the variable {name!r}, which is not set: "
                              f"--set {VARS_KEY}.{name}=VALUE (or set it under {VARS_KEY} in the config)")
        return variables[name]

    def walk(node: Any, where: str) -> Any:
        if isinstance(node, dict):
            return {key: walk(value, f"{where}.{key}" if where else str(key)) for key, value in node.items()}
        if isinstance(node, list):
            return [walk(item, f"{where}[{i}]") for i, item in enumerate(node)]
        if not isinstance(node, str):
            return node
        whole = _REFERENCE.fullmatch(node)
        if whole:
            return value_of(whole.group(1), where)
        return _REFERENCE.sub(lambda m: str(value_of(m.group(1), where)), node)

    return walk({k: v for k, v in data.items() if k != VARS_KEY}, "")
