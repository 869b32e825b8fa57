"""Wiring of the graph contrastive objective: ADE sentences on the driver, recipe on the worker."""
from __future__ import annotations

import hashlib
from pathlib import Path

from lmplatform.config.schema import RunConfig
from lmplatform.graph.batch import GraphCollator
from lmplatform.graph.data import AdeReport, Sentence, read_ade, read_folds, split_fold
from lmplatform.models.encoder import Encoder
from lmplatform.models.resolve import resolve_model_path
from lmplatform.objectives.graph_cl import (
    GraphContrastiveEvaluator,
    GraphContrastiveObjective,
    GraphHead,
    freeze_lower_layers,
)
from lmplatform.train.recipe import PreparedData, TrainingRecipe


def _in_validation(sentence_id: str, fraction: float, seed: int) -> bool:
    digest = hashlib.sha1(f"{seed}:{sentence_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def load_sentences(cfg: RunConfig) -> tuple[list[Sentence], list[Sentence], AdeReport]:
    """(train, validation, report) honouring folds, explicit validation files or a stable hash split."""
    objective, data = cfg.objective, cfg.data
    sentences, report = read_ade(data.train_paths, data.on_bad_row, data.max_documents)
    if objective.folds_file is not None:
        sentences, _ = split_fold(sentences, read_folds(objective.folds_file), objective.fold)
    if data.validation_paths:
        validation, extra = read_ade(data.validation_paths, data.on_bad_row)
        report.bad_rows += extra.bad_rows
        report.bad_examples += extra.bad_examples
        return sentences, validation, report
    validation = [s for s in sentences if _in_validation(s.id, data.validation_fraction, data.seed)]
    train = [s for s in sentences if not _in_validation(s.id, data.validation_fraction, data.seed)]
    return train, validation, report


def prepare_sentences(cfg: RunConfig) -> PreparedData:
    import ray.data

    train, validation, report = load_sentences(cfg)
    if not train:
        from lmplatform.data.readers import DataError

        raise DataError("no training sentences left after the fold and validation split")
    _check_frozen_layers(cfg)
    datasets = {"train": ray.data.from_items([{"sentence": s.to_json()} for s in train])}
    if validation:
        datasets["validation"] = ray.data.from_items([{"sentence": s.to_json()} for s in validation])
    fingerprint = hashlib.sha1("\n".join(s.id for s in train).encode()).hexdigest()[:16]
    metrics = report.metrics() | {"data/train_sentences": len(train), "data/validation_sentences": len(validation)}
    return PreparedData(
        datasets=datasets,
        train_examples=len(train),
        metrics=metrics,
        summary=f"{report.summary()}; train {len(train)}, validation {len(validation)}",
        fingerprint=fingerprint,
        report=report.__dict__,
    )


def _check_frozen_layers(cfg: RunConfig) -> None:
    """Fail on the driver, before any worker starts, when frozen_layers exceeds the model's depth."""
    from transformers import AutoConfig

    from lmplatform.config.loader import ConfigError

    frozen = cfg.objective.frozen_layers
    if frozen is None:
        return
    layers = AutoConfig.from_pretrained(str(resolve_model_path(cfg.model.name_or_path))).num_hidden_layers
    if frozen > layers:
        raise ConfigError(f"objective.frozen_layers={frozen}: the model has {layers} layers (allowed 0..{layers})")


def build_graph_cl_recipe(cfg: RunConfig) -> TrainingRecipe:
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    objective_cfg = cfg.objective
    path = resolve_model_path(cfg.model.name_or_path)
    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # an MLM checkpoint loads into AutoModel with a long, expected report
    try:
        encoder = Encoder.from_pretrained(path, pooling=cfg.model.pooling, max_seq_length=cfg.model.max_seq_length)
        node_encoder = AutoModel.from_pretrained(str(path))
    finally:
        hf_logging.set_verbosity(previous)
    layers = encoder.backbone.config.num_hidden_layers
    frozen = layers // 2 if objective_cfg.frozen_layers is None else objective_cfg.frozen_layers
    freeze_lower_layers(encoder.backbone, frozen)
    head = GraphHead(encoder.dim, objective_cfg.variant, objective_cfg.projection, objective_cfg.graph_pooling,
                     objective_cfg.pair_self_weight)
    objective = GraphContrastiveObjective(
        node_encoder,
        head,
        temperature=objective_cfg.temperature,
        sentence_pooling=objective_cfg.sentence_pooling,
        in_batch_negatives=objective_cfg.in_batch_negatives,
    )
    collate = GraphCollator(
        encoder.tokenizer,
        cfg.model.max_seq_length,
        negatives_per_sentence=objective_cfg.negatives_per_sentence,
        entity_pooling=objective_cfg.entity_pooling,
        word_pooling=objective_cfg.word_pooling,
        samples_per_tag=objective_cfg.samples_per_tag,
        with_words=objective_cfg.variant == "clner",
    )

    def export(trained: Encoder, folder: Path) -> None:
        trained.save_pretrained(folder)
        objective.head.save(Path(folder))  # the GCN is needed to score graph identification later

    return TrainingRecipe(
        model=encoder,
        objective=objective,
        collate=collate,
        export=export,
        evaluate=GraphContrastiveEvaluator(objective),
    )
