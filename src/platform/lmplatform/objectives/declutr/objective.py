"""DeCLUTR: contrastive learning of text representations from spans of the same document.

Spans are drawn per document by `DeclutrSpanSampler` (spans.py) on the worker, with a
seeded generator the checkpoint keeps. The loss is a symmetric InfoNCE over the batch
(every other span's key is a negative) plus MLM on the anchors, both through the same
`MaskedLanguageModel` backbone (Giorgi et al., 2021). The driver drops the documents
too short to sample (`prepare_data`); each worker builds the recipe (`build_recipe`).
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from lmplatform.config.loader import ConfigError
from lmplatform.data.corpus import TRAIN, VALIDATION, corpus_datasets, local_documents, scan_corpus
from lmplatform.data.readers import DataError
from lmplatform.models.encoder import Encoder, load_tokenizer
from lmplatform.models.masked_lm import MaskedLanguageModel
from lmplatform.models.pooling import pool
from lmplatform.models.resolve import resolve_model_path
from lmplatform.objectives.declutr.spans import (
    DeclutrSpanSampler,
    cached_tokenizer,
    count_sampleable,
    keep_sampleable,
    span_report,
)
from lmplatform.objectives.infonce import (
    InfoNCEOutput,
    Temperature,
    info_nce,
    temperature_from_config,
    temperature_learning_rates,
)
from lmplatform.objectives.masking import DynamicMasker
from lmplatform.objectives.mlm.objective import MLMEvaluator, mlm_metrics
from lmplatform.objectives.run_config import RunConfig
from lmplatform.train.collate import pad_multiple
from lmplatform.train.recipe import Batch, PreparedData, TrainingRecipe, WeightedMetrics


class DeclutrCollator:
    """Texts -> anchor and positive spans as model inputs, sampled with a seeded RNG on the worker.

    Output: `input_ids`/`attention_mask` [n_anchors + n_anchors*P, L] with every
    anchor first, then the positives grouped by anchor; each span is wrapped in the
    tokenizer's special tokens. Documents too short to sample are skipped and
    counted in `dropped` (prepare_data already filtered them; this guards the rest).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, sampler: DeclutrSpanSampler, seed: int = 0, column: str = "text"):
        self.tokenizer = tokenizer
        self.sampler = sampler
        self.seed = seed
        self.column = column
        self.dropped = 0
        # The special tokens the tokenizer puts around one text ([CLS] ... [SEP], <s> ... </s>).
        around = tokenizer("", add_special_tokens=True)["input_ids"]
        self.prefix, self.suffix = list(around[:1]), list(around[1:])
        self._rng: Optional[np.random.Generator] = None

    @property
    def rng(self) -> np.random.Generator:
        if self._rng is None:
            # Created on first use, on the worker, so each rank draws different spans.
            import torch.distributed as dist

            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
            self._rng = np.random.default_rng([self.seed, rank])
        return self._rng

    def state_dict(self) -> dict[str, Any]:
        """The span sampler's generator, checkpointed per rank: a resumed run draws the spans the
        uninterrupted run would have drawn for the same batches."""
        return {"rng": self.rng.bit_generator.state, "dropped": self.dropped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rng = np.random.default_rng()
        rng.bit_generator.state = state["rng"]  # default_rng's PCG64, as in `rng`
        self._rng = rng
        self.dropped = int(state["dropped"])

    @contextlib.contextmanager
    def fixed_spans(self, seed: int) -> Iterator[None]:
        """Draw from a fresh RNG with this seed inside the block (the same validation spans every time)."""
        saved = self.rng
        self._rng = np.random.default_rng([self.seed, seed, 7])
        try:
            yield
        finally:
            self._rng = saved

    def __call__(self, batch: dict[str, np.ndarray]) -> Batch:
        return self.collate_texts([str(t) for t in batch[self.column]])

    def collate_texts(self, texts: Sequence[str]) -> Batch:
        ids = self.tokenizer(list(texts), add_special_tokens=False, truncation=False)["input_ids"]
        anchors: list[list[int]] = []
        positives: list[list[int]] = []
        for doc in ids:
            if not self.sampler.can_sample(len(doc)):
                self.dropped += 1
                continue
            spans = self.sampler.sample(len(doc), self.rng)
            anchors.extend(doc[s:e] for s, e in spans.anchors)
            positives.extend(doc[s:e] for own in spans.positives for s, e in own)
        if not anchors:
            raise ValueError(f"no document in this batch of {len(texts)} has {self.sampler.min_document_tokens}+ tokens")
        wrapped = [self.prefix + list(span) + self.suffix for span in anchors + positives]
        padded = self.tokenizer.pad({"input_ids": wrapped}, padding=True, pad_to_multiple_of=pad_multiple(), return_tensors="pt")
        return {"input_ids": padded["input_ids"], "attention_mask": padded["attention_mask"]}


class DeclutrObjective(nn.Module):
    """mlm_weight · MLM(anchors) + contrastive_weight · symmetric InfoNCE(anchors, mean of their positives)."""

    def __init__(self, masker: DynamicMasker, temperature: Temperature, num_positives: int = 1,
                 mlm_weight: float = 1.0, contrastive_weight: float = 1.0):
        super().__init__()
        self.masker = masker
        self.temperature = temperature
        self.num_positives = num_positives
        self.mlm_weight = mlm_weight
        self.contrastive_weight = contrastive_weight

    def split(self, batch: Batch) -> int:
        rows = batch["input_ids"].shape[0]
        if rows % (1 + self.num_positives):
            raise ValueError(f"{rows} spans is not anchors x (1 + {self.num_positives} positives)")
        return rows // (1 + self.num_positives)

    def contrastive(self, model: MaskedLanguageModel, batch: Batch, gather: bool = True) -> InfoNCEOutput:
        n_anchors = self.split(batch)
        mask = batch["attention_mask"]
        vectors = pool(model.hidden_states(batch["input_ids"], mask), mask, "mean")
        anchors = vectors[:n_anchors]
        keys = vectors[n_anchors:].view(n_anchors, self.num_positives, -1).mean(1)
        return info_nce(anchors, keys, self.temperature(), symmetric=True, gather=gather)

    def mlm(self, model: MaskedLanguageModel, batch: Batch,
            generator: Optional[torch.Generator] = None) -> dict[str, torch.Tensor]:
        n_anchors = self.split(batch)
        ids, mask = batch["input_ids"][:n_anchors], batch["attention_mask"][:n_anchors]
        inputs, labels = self.masker(ids, mask, None, generator)
        return model(input_ids=inputs, attention_mask=mask, labels=labels)

    def forward(self, model: MaskedLanguageModel, batch: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        nce = self.contrastive(model, batch)
        loss = self.contrastive_weight * nce.loss
        # Detached 0-dim tensors: the loop reads them at logging time, not every micro-step.
        metrics = {
            "contrastive_loss": nce.loss.detach(),
            "inbatch_accuracy": nce.accuracy.detach(),
            "temperature": self.temperature().detach(),
        }
        if self.mlm_weight > 0:
            out = self.mlm(model, batch)
            loss = loss + self.mlm_weight * out["loss"]
            metrics |= mlm_metrics(out)
        return loss, metrics


class DeclutrEvaluator:
    """Held-out contrastive loss/accuracy and anchor MLM loss, on fixed spans and a fixed masking seed.

    The batches are collated lazily inside `fixed_spans`, so they must be a lazy iterable of this
    collator's output (the loop's validation batches are). The loop sets eval and inference mode.
    """

    def __init__(self, objective: DeclutrObjective, collator: DeclutrCollator, seed: int = 1234):
        self.objective = objective
        self.collator = collator
        self.seed = seed

    def __call__(self, model: MaskedLanguageModel, batches: Iterable[Batch], rank: int = 0) -> WeightedMetrics:
        generator = torch.Generator().manual_seed(self.seed + rank)
        sums = {"contrastive_loss": 0.0, "inbatch_accuracy": 0.0, "mlm_loss": 0.0, "mlm_accuracy": 0.0}
        anchors = masked = 0.0
        with self.collator.fixed_spans(self.seed + rank):
            for batch in batches:
                n = float(self.objective.split(batch))
                nce = self.objective.contrastive(model, batch, gather=False)
                sums["contrastive_loss"] += float(nce.loss) * n
                sums["inbatch_accuracy"] += float(nce.accuracy) * n
                anchors += n
                out = self.objective.mlm(model, batch, generator)
                k = float(out["n_masked"])
                sums["mlm_loss"] += float(out["loss"]) * k
                sums["mlm_accuracy"] += float(out["correct"])
                masked += k
        weights = {"contrastive_loss": anchors, "inbatch_accuracy": anchors, "mlm_loss": masked, "mlm_accuracy": masked}
        return {name: (value, weights[name]) for name, value in sums.items()}


# -- wiring: documents too short to sample are dropped on the driver ----------

def check_span_fits(cfg: RunConfig) -> None:
    objective = cfg.objective
    if objective.max_span + 2 > cfg.model.max_seq_length:
        raise ConfigError(
            f"objective.max_span={objective.max_span} does not fit model.max_seq_length={cfg.model.max_seq_length} "
            f"(a span plus 2 special tokens); lower max_span or raise max_seq_length"
        )


def prepare_data(cfg: RunConfig) -> PreparedData:
    check_span_fits(cfg)
    objective = cfg.objective
    corpus = scan_corpus(cfg.data)
    model_path = str(resolve_model_path(cfg.model.name_or_path))
    tokenizer = cached_tokenizer(model_path)
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


def rows(cfg: RunConfig) -> dict[str, list[dict[str, Any]]]:
    """The corpus's texts long enough for the spans, per split, read in this process (as `prepare_data`'s
    datasets keep them)."""
    check_span_fits(cfg)
    corpus = scan_corpus(cfg.data, use_ray=False)
    model_path = str(resolve_model_path(cfg.model.name_or_path))
    needed = count_sampleable([], cfg.objective.num_anchors, cfg.objective.max_span).min_tokens
    out: dict[str, list[dict[str, Any]]] = {}
    for split in (TRAIN, VALIDATION):
        texts = list(local_documents(corpus, split))
        kept = keep_sampleable({"text": np.array(texts, dtype=object)}, model_path, needed)["text"] if texts else []
        out[split] = [{"text": text} for text in kept]
    return out


def build_recipe(cfg: RunConfig) -> TrainingRecipe:
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
    temperature = temperature_from_config(objective_cfg)
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
