"""Generate docs/config-reference.md from the pydantic models (`make docs`)."""
from __future__ import annotations

import typing

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from lmplatform.markdown import markdown_table
from lmplatform.objectives.run_config import RunConfig, objective_configs


def _type_name(annotation: object) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(repr(a) for a in typing.get_args(annotation))
    if origin is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        name = " \\| ".join(_type_name(a) for a in args)
        return f"{name} (optional)" if len(args) < len(typing.get_args(annotation)) else name
    if origin in (list, dict):
        return (getattr(annotation, "__name__", str(annotation)).replace("typing.", "") if not typing.get_args(annotation)
                else str(annotation).replace("typing.", ""))
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def _unwrap_optional(annotation: object) -> object:
    if typing.get_origin(annotation) is typing.Union:
        return next(a for a in typing.get_args(annotation) if a is not type(None))
    return annotation


def _default(field: typing.Any) -> str:
    if field.default is not PydanticUndefined:
        return f"`{field.default!r}`"
    if field.default_factory is not None:
        value = field.default_factory()
        return "" if isinstance(value, BaseModel) else f"`{value!r}`"
    return "**required**"


def _section(title: str, model: type[BaseModel]) -> list[str]:
    lines = [f"### `{title}`", ""]
    if model.__doc__:  # the docstring's first paragraph, whole: its first line alone may stop mid-sentence
        lines += [" ".join(line.strip() for line in model.__doc__.strip().split("\n\n")[0].splitlines()), ""]
    rows = []
    for name, field in model.model_fields.items():
        constraints = ", ".join(str(m) for m in field.metadata)
        description = (field.description or "") + (f" ({constraints})" if constraints else "")
        name = field.alias or name  # e.g. ewc.lambda, stored as lambda_
        rows.append([f"`{name}`", _type_name(field.annotation), _default(field), description])
    lines += markdown_table(["field", "type", "default", "description"], rows).split("\n") + [""]
    for name, field in model.model_fields.items():  # a section inside a section (optim.early_stopping) gets its own table
        nested = _unwrap_optional(field.annotation)
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            lines += _section(f"{title}.{field.alias or name}", nested)
    return lines


def objective_models() -> list[type[BaseModel]]:
    return list(objective_configs())


def render() -> str:
    lines = [
        "# Run config reference",
        "",
        "Generated from the pydantic models by `make docs`; `lmp config schema` prints the same as JSON Schema.",
        "Unknown keys are errors. Any field can be overridden with `--set section.field=value`.",
        "",
    ]
    for name, field in RunConfig.model_fields.items():
        if name == "objective":
            continue
        lines += _section(name, _unwrap_optional(field.annotation))  # type: ignore[arg-type]
    lines += ["## `objective` (one of, chosen by `name`)", ""]
    for model in objective_models():
        lines += _section(f"objective: {model.model_fields['name'].default}", model)
    return "\n".join(lines)


if __name__ == "__main__":
    print(render())
