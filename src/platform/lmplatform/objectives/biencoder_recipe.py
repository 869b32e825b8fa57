"""Wiring of the bi-encoder objective: pairs on the driver, Encoder recipe on the worker."""
from __future__ import annotations

from pathlib import Path

from lmplatform.config.schema import RunConfig
from lmplatform.data.pairs import PairSet, pair_datasets, read_pairs
from lmplatform.models.encoder import Encoder
from lmplatform.objectives.biencoder import BiencoderObjective, InBatchRetrievalEvaluator, PairCollator, count_pair_tokens
from lmplatform.objectives.infonce import Temperature, temperature_learning_rates
from lmplatform.train.recipe import PreparedData, TrainingRecipe


def prepared_pairs(pairs: PairSet, datasets: dict, examples: int, extra_metrics: dict[str, float] | None = None,
                   extra_summary: str = "") -> PreparedData:
    report = pairs.report
    return PreparedData(
        datasets=datasets,
        train_examples=examples,
        metrics=report.metrics() | {"data/train_pairs": float(len(pairs.train)), "data/validation_pairs": float(len(pairs.validation))}
        | (extra_metrics or {}),
        summary=report.summary().replace("documents", "pairs", 1) + extra_summary,
        fingerprint=report.fingerprint,
        report=report.__dict__ | {"bad_total": report.bad_total},
    )


def prepare_biencoder_pairs(cfg: RunConfig) -> PreparedData:
    pairs = read_pairs(cfg.data)
    return prepared_pairs(pairs, pair_datasets(pairs), len(pairs.train))


def temperature_of(objective) -> Temperature:  # noqa: ANN001 - any config with the temperature fields
    return Temperature(objective.temperature, objective.learnable_temperature,
                       objective.min_temperature, objective.max_temperature)


def build_biencoder_recipe(cfg: RunConfig) -> TrainingRecipe:
    objective_cfg = cfg.objective
    model = Encoder.from_pretrained(cfg.model.name_or_path, cfg.model.pooling, cfg.model.max_seq_length)
    temperature = temperature_of(objective_cfg)

    def export(trained: Encoder, folder: Path) -> None:
        trained.save_pretrained(folder)

    objective = BiencoderObjective(
        temperature, objective_cfg.symmetric, objective_cfg.gather_across_workers,
        uses_hard_negatives=cfg.data.hard_negative_field is not None and objective_cfg.max_hard_negatives > 0,
    )
    return TrainingRecipe(
        model=model,
        objective=objective,
        collate=PairCollator(model.tokenizer, cfg.model.max_seq_length, objective_cfg.max_hard_negatives),
        export=export,
        evaluate=InBatchRetrievalEvaluator(temperature),
        count_tokens=count_pair_tokens,
        retrieval_view=lambda trained: trained,
        learning_rates=temperature_learning_rates(objective, temperature, objective_cfg.temperature_lr),
    )
