"""Objective name -> how to read its data (driver) and build its recipe (worker)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from lmplatform.config.schema import RunConfig
from lmplatform.train.recipe import PreparedData, TrainingRecipe


@dataclass(frozen=True)
class ObjectiveSpec:
    prepare_data: Callable[[RunConfig], PreparedData]
    build_recipe: Callable[[RunConfig], TrainingRecipe]


def _mlm() -> ObjectiveSpec:
    from lmplatform.objectives import mlm_recipe

    return ObjectiveSpec(mlm_recipe.prepare_corpus, mlm_recipe.build_mlm_recipe)


def _graph_cl() -> ObjectiveSpec:
    from lmplatform.objectives import graph_cl_recipe

    return ObjectiveSpec(graph_cl_recipe.prepare_sentences, graph_cl_recipe.build_graph_cl_recipe)


_SPECS: dict[str, Callable[[], ObjectiveSpec]] = {
    "mlm": _mlm,
    "graph_cl": _graph_cl,
}


def objective_spec(name: str) -> ObjectiveSpec:
    if name not in _SPECS:
        raise KeyError(f"unknown objective {name!r}; available: {', '.join(sorted(_SPECS))}")
    return _SPECS[name]()
