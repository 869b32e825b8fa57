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


def _sts() -> ObjectiveSpec:
    from lmplatform.objectives import sts

    return ObjectiveSpec(sts.prepare_sts, sts.build_sts_recipe)


def _classifier() -> ObjectiveSpec:
    from lmplatform.objectives import classifier

    return ObjectiveSpec(classifier.prepare_classification, classifier.build_classifier_recipe)

def _declutr() -> ObjectiveSpec:
    from lmplatform.objectives import declutr_recipe

    return ObjectiveSpec(declutr_recipe.prepare_declutr_corpus, declutr_recipe.build_declutr_recipe)


def _biencoder() -> ObjectiveSpec:
    from lmplatform.objectives import biencoder_recipe

    return ObjectiveSpec(biencoder_recipe.prepare_biencoder_pairs, biencoder_recipe.build_biencoder_recipe)


def _cross_encoder() -> ObjectiveSpec:
    from lmplatform.objectives import cross_encoder_recipe

    return ObjectiveSpec(cross_encoder_recipe.prepare_cross_encoder_pairs, cross_encoder_recipe.build_cross_encoder_recipe)

def _graph_cl() -> ObjectiveSpec:
    from lmplatform.objectives import graph_cl_recipe

    return ObjectiveSpec(graph_cl_recipe.prepare_sentences, graph_cl_recipe.build_graph_cl_recipe)


_SPECS: dict[str, Callable[[], ObjectiveSpec]] = {
    "mlm": _mlm,
    "sts": _sts,
    "classifier": _classifier,
    "declutr": _declutr,
    "biencoder": _biencoder,
    "cross_encoder": _cross_encoder,
    "graph_cl": _graph_cl,
}


def objective_spec(name: str) -> ObjectiveSpec:
    if name not in _SPECS:
        raise KeyError(f"unknown objective {name!r}; available: {', '.join(sorted(_SPECS))}")
    return _SPECS[name]()
