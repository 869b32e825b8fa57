"""Wiring of the MLM objective: corpus datasets on the driver, recipe on the worker."""
from __future__ import annotations

from pathlib import Path

from lmplatform.config.schema import RunConfig
from lmplatform.data.corpus import corpus_datasets, scan_corpus
from lmplatform.models.encoder import load_tokenizer
from lmplatform.models.resolve import resolve_model_path
from lmplatform.objectives.masking import DynamicMasker
from lmplatform.objectives.mlm import MaskedLanguageModel, MLMEvaluator, MLMObjective
from lmplatform.train.collate import TextCollator
from lmplatform.train.recipe import PreparedData, TrainingRecipe


def prepare_corpus(cfg: RunConfig) -> PreparedData:
    corpus = scan_corpus(cfg.data)
    report = corpus.report
    return PreparedData(
        datasets=corpus_datasets(corpus),
        train_examples=report.train_documents,
        metrics=report.metrics(),
        summary=report.summary(),
        fingerprint=report.fingerprint,
        report=report.__dict__ | {"bad_total": report.bad_total},
    )


def build_masker(cfg: RunConfig, tokenizer) -> DynamicMasker:  # noqa: ANN001 - any HF tokenizer
    objective = cfg.objective
    return DynamicMasker(
        tokenizer,
        mask_probability=objective.mask_probability,
        replace_with_mask=objective.replace_with_mask,
        replace_with_random=objective.replace_with_random,
        whole_word=objective.whole_word,
    )


def build_mlm_recipe(cfg: RunConfig) -> TrainingRecipe:
    path = resolve_model_path(cfg.model.name_or_path)
    tokenizer = load_tokenizer(path)
    model = MaskedLanguageModel.from_pretrained(path, projection=cfg.objective.projection)
    masker = build_masker(cfg, tokenizer)
    evaluator = MLMEvaluator(masker, pppl_sentences=cfg.objective.pseudo_perplexity_sentences)

    def export(trained: MaskedLanguageModel, folder: Path) -> None:
        trained.save_pretrained(folder, tokenizer, cfg.model.pooling, cfg.model.max_seq_length)

    return TrainingRecipe(
        model=model,
        objective=MLMObjective(masker),
        collate=TextCollator(tokenizer, cfg.model.max_seq_length, with_word_ids=cfg.objective.whole_word),
        export=export,
        evaluate=evaluator,
        summarize=MLMEvaluator.summarize,
    )
