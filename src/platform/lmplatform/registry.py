"""`Registry`: the things of one kind by name (objectives, evaluations): the built-in ones, those registered at run
time, and callbacks that rebuild what is derived from them (a config union).

A spec defined outside the package can also be named by its import path, `package.module:ATTRIBUTE` (its `name`
must be that path): the first lookup of the name imports it and registers it, in whichever process looks it up. A
config naming it so works in Ray workers too, where the package is importable, with no `register` call there.
"""
from __future__ import annotations

import importlib
from typing import Callable, Generic, Iterable, Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


SpecT = TypeVar("SpecT", bound=Named)


class Registry(Generic[SpecT]):
    """Specs of one `kind` by their `name`, in order: the built-in ones first, then those registered."""

    def __init__(self, kind: str, builtin: Iterable[SpecT]):
        self.kind = kind
        self._builtin = tuple(builtin)
        self._specs: dict[str, SpecT] = {spec.name: spec for spec in self._builtin}
        self._on_change: list[Callable[[], None]] = []

    def specs(self) -> tuple[SpecT, ...]:
        return tuple(self._specs.values())

    def names(self) -> tuple[str, ...]:
        return tuple(self._specs)

    def get(self, name: str) -> SpecT:
        if name not in self._specs and is_import_path(name):
            self.register(self.imported(name))
        if name not in self._specs:
            raise KeyError(f"unknown {self.kind} {name!r}; available: {', '.join(sorted(self._specs))}, or "
                           "package.module:ATTRIBUTE of one defined outside the package")
        return self._specs[name]

    def imported(self, path: str) -> SpecT:
        """The spec at import path `package.module:ATTRIBUTE`, checked to carry that path as its name."""
        module_name, _, attribute = path.partition(":")
        try:
            spec = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise KeyError(f"{self.kind} {path!r}: cannot import it ({type(exc).__name__}: {exc})") from None
        if getattr(spec, "name", None) != path:
            raise KeyError(f"{self.kind} {path!r}: the spec there is named {getattr(spec, 'name', None)!r}; a spec "
                           f"named by its import path carries that path as its name")
        return spec

    def register(self, spec: SpecT) -> None:
        """Add a spec defined outside the package; what is derived from the registry follows (`on_change`).

        Call it in a module that every process imports before it validates a config (Ray workers validate the
        configs they receive).
        """
        if spec.name in self._specs:
            raise ValueError(f"{self.kind} {spec.name!r} is registered already")
        self._specs[spec.name] = spec
        self._changed()

    def unregister(self, name: str) -> None:
        """Remove a spec added by `register` (tests)."""
        if any(spec.name == name for spec in self._builtin):
            raise ValueError(f"{self.kind} {name!r} is built in")
        del self._specs[name]
        self._changed()

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call `callback` after every `register` and `unregister` (a config union is rebuilt)."""
        self._on_change.append(callback)

    def _changed(self) -> None:
        for callback in self._on_change:
            callback()


def is_import_path(name: str) -> bool:
    """Whether `name` reads as `package.module:ATTRIBUTE`."""
    module_name, sep, attribute = name.partition(":")
    return bool(sep and attribute.isidentifier() and all(part.isidentifier() for part in module_name.split(".")))
