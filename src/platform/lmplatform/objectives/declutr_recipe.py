"""Wiring of DeCLUTR: the corpus minus unsampleable documents on the driver, the recipe on the worker."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from lmplatform.config.loader import ConfigError
from lmplatform.config.schema import RunConfig
from lmplatform.data.corpus import TRAIN, VALIDATION, CorpusPlan, corpus_datasets, local_documents, scan_corpus
from lmplatform.data.readers import DataError
from lmplatform.models.encoder import Encoder, load_tokenizer
from lmplatform.models.resolve import resolve_model_path
from lmplatform.objectives.declutr import (
    DeclutrCollator,
    DeclutrEvaluator,
    DeclutrObjective,
    DeclutrSpanSampler,
    SpanCounts,
    count_sampleable,
)
from lmplatform.objectives.infonce import Temperature, temperature_learning_rates
from lmplatform.objectives.masking import DynamicMasker
from lmplatform.objectives.mlm import MaskedLanguageModel, MLMEvaluator
from lmplatform.train.recipe import PreparedData, TrainingRecipe

_TOKENIZE_CHUNK = 512


def token_lengths(texts: Iterable[str], tokenizer: Any) -> list[int]:  # noqa: ANN401 - any HF tokenizer
    """Tokens per text without special tokens, tokenised in chunks."""
    lengths: list[int] = []
    chunk: list[str] = []
    for text in texts:
        chunk.append(text)
        if len(chunk) == _TOKENIZE_CHUNK:
            lengths.extend(len(ids) for ids in tokenizer(chunk, add_special_tokens=False)["input_ids"])
            chunk = []
    if chunk:
        lengths.extend(len(ids) for ids in tokenizer(chunk, add_special_tokens=False)["input_ids"])
    return lengths


def span_report(corpus: CorpusPlan, tokenizer: Any, num_anchors: int, max_spans: Sequence[int]) -> dict[str, list[SpanCounts]]:  # noqa: ANN401
    """For each split and max span: documents that can / cannot be sampled."""
    report = {}
    for split in (TRAIN, VALIDATION):
        lengths = token_lengths(local_documents(corpus, split), tokenizer)
        if lengths:
            report[split] = [count_sampleable(lengths, num_anchors, span) for span in max_spans]
    return report


def check_span_fits(cfg: RunConfig) -> None:
    objective = cfg.objective
    if objective.max_span + 2 > cfg.model.max_seq_length:
        raise ConfigError(
            f"objective.max_span={objective.max_span} does not fit model.max_seq_length={cfg.model.max_seq_length} "
            f"(a span plus 2 special tokens); lower max_span or raise max_seq_length"
        )


@functools.lru_cache(maxsize=2)
def _cached_tokenizer(path: str) -> Any:  # noqa: ANN401
    return load_tokenizer(path)


def keep_sampleable(batch: dict[str, np.ndarray], tokenizer_path: str, min_tokens: int) -> dict[str, np.ndarray]:
    """Ray Data map: drop the rows whose text has fewer than min_tokens tokens."""
    tokenizer = _cached_tokenizer(tokenizer_path)
    lengths = np.array(token_lengths([str(t) for t in batch["text"]], tokenizer), dtype=np.int64)
    keep = lengths >= min_tokens
    return {name: column[keep] for name, column in batch.items()}


def prepare_declutr_corpus(cfg: RunConfig) -> PreparedData:
    check_span_fits(cfg)
    objective = cfg.objective
    corpus = scan_corpus(cfg.data)
    model_path = str(resolve_model_path(cfg.model.name_or_path))
    tokenizer = _cached_tokenizer(model_path)
    counts = {
        split: rows[0] for split, rows in span_report(corpus, tokenizer, objective.num_anchors, [objective.max_span]).items()
    }
    train = counts[TRAIN]
    if train.kept == 0:
        raise DataError(
            f"no training document has the {train.min_tokens} tokens DeCLUTR needs "
            f"(2 x num_anchors={objective.num_anchors} x max_span={objective.max_span}); all {train.dropped} dropped. "
            f"Lower objective.max_span or num_anchors (see `lmp data span-report`)"
        )
    report = corpus.report
    validation = counts.get(VALIDATION)
    datasets = {
        split: dataset.map_batches(
            keep_sampleable, fn_kwargs={"tokenizer_path": model_path, "min_tokens": train.min_tokens},
            batch_format="numpy", num_cpus=0,
        )
        for split, dataset in corpus_datasets(corpus).items()
        if split == TRAIN or (validation is not None and validation.kept > 0)
    }
    metrics = report.metrics() | {
        "data/declutr_min_tokens": float(train.min_tokens),
        "data/declutr_kept": float(train.kept),
        "data/declutr_dropped": float(train.dropped),
        "data/declutr_dropped_fraction": train.dropped_fraction,
    }
    summary = report.summary() + (
        f"\ndata: DeCLUTR needs {train.min_tokens}+ tokens per document: kept {train.kept}, "
        f"dropped {train.dropped} ({train.dropped_fraction:.1%}) training documents"
    )
    if validation is not None:
        metrics |= {
            "data/declutr_validation_dropped": float(validation.dropped),
            "data/declutr_validation_dropped_fraction": validation.dropped_fraction,
        }
        summary += f"; kept {validation.kept}, dropped {validation.dropped} validation documents"
    return PreparedData(
        datasets=datasets,
        train_examples=train.kept,
        metrics=metrics,
        summary=summary,
        fingerprint=report.fingerprint,
        report=report.__dict__ | {"bad_total": report.bad_total, "declutr": {s: c.__dict__ for s, c in counts.items()}},
    )


def build_declutr_recipe(cfg: RunConfig) -> TrainingRecipe:
    check_span_fits(cfg)
    objective_cfg = cfg.objective
    path = resolve_model_path(cfg.model.name_or_path)
    tokenizer = load_tokenizer(path)
    model = MaskedLanguageModel.from_pretrained(path, projection=objective_cfg.projection)
    masker = DynamicMasker(
        tokenizer,
        mask_probability=objective_cfg.mask_probability,
        replace_with_mask=objective_cfg.replace_with_mask,
        replace_with_random=objective_cfg.replace_with_random,
    )
    temperature = Temperature(
        objective_cfg.temperature, objective_cfg.learnable_temperature,
        objective_cfg.min_temperature, objective_cfg.max_temperature,
    )
    objective = DeclutrObjective(
        masker, temperature, objective_cfg.num_positives, objective_cfg.mlm_weight, objective_cfg.contrastive_weight
    )
    sampler = DeclutrSpanSampler(
        objective_cfg.num_anchors, objective_cfg.num_positives, objective_cfg.min_span, objective_cfg.max_span
    )
    collator = DeclutrCollator(tokenizer, sampler, seed=objective_cfg.seed)

    def export(trained: MaskedLanguageModel, folder: Path) -> None:
        trained.save_pretrained(folder, tokenizer, cfg.model.pooling, cfg.model.max_seq_length)

    return TrainingRecipe(
        model=model,
        objective=objective,
        collate=collator,
        export=export,
        evaluate=DeclutrEvaluator(objective, collator),
        summarize=MLMEvaluator.summarize,
        # The backbone as a text encoder (shared weights), pooled as the exported model will be.
        retrieval_view=lambda trained: Encoder(trained.backbone, tokenizer, cfg.model.pooling, cfg.model.max_seq_length),
        learning_rates=temperature_learning_rates(objective, temperature, objective_cfg.temperature_lr),
    )
