"""Masked-language-model continued pretraining: RoBERTa-style dynamic masking, loss on the masked tokens.

The driver reads the corpus (`prepare_data`); each worker builds the recipe (`build_recipe`):
a `MaskedLanguageModel` (lmplatform.models.masked_lm), masks re-drawn for every batch, and
held-out masked-LM loss plus pseudo-perplexity as validation. With `objective.freeze_encoder` only the
MLM head is trained (a head warm-up: configs/mlm_head_warmup.yaml).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from lmplatform.data.corpus import TRAIN, VALIDATION, corpus_datasets, local_documents, scan_corpus
from lmplatform.models.encoder import load_tokenizer
from lmplatform.models.masked_lm import IGNORE_INDEX, MaskedLanguageModel
from lmplatform.models.resolve import resolve_model_path
from lmplatform.objectives.masking import DynamicMasker
from lmplatform.objectives.run_config import RunConfig
from lmplatform.train.collate import TextCollator
from lmplatform.train.recipe import PreparedData, TrainingRecipe


class MLMObjective(nn.Module):
    """Mask the batch, predict the masked tokens; loss only on masked positions."""

    def __init__(self, masker: DynamicMasker):
        super().__init__()
        self.masker = masker

    def forward(self, model: MaskedLanguageModel, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        inputs, labels = self.masker(batch["input_ids"], batch["attention_mask"], batch.get("word_ids"))
        out = model(input_ids=inputs, attention_mask=batch["attention_mask"], labels=labels)
        return out["loss"], mlm_metrics(out)


def mlm_metrics(out: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`mlm_loss` and `mlm_accuracy` of a `MaskedLanguageModel` output, as detached 0-dim tensors on its
    device: the training loop reads them at logging time, so a micro-step does not wait for the device."""
    correct = out["correct"].detach().float()
    n_masked = out["n_masked"].to(correct.device).clamp(min=1)
    return {"mlm_loss": out["loss"].detach(), "mlm_accuracy": correct / n_masked}


class MLMEvaluator:
    """Held-out masked-LM loss with a fixed masking seed, plus pseudo-perplexity.

    Returns weighted sums {name: (sum, weight)} so distributed workers can be reduced.
    The caller sets eval and inference mode and places the batches (the training loop does).
    Pseudo-perplexity (Salazar et al., 2020) masks each token of a sentence in turn;
    it costs one forward per token, so it runs on the first `pppl_sentences` only.
    """

    def __init__(self, masker: DynamicMasker, seed: int = 1234, pppl_sentences: int = 16, pppl_chunk: int = 64):
        self.masker = masker
        self.seed = seed
        self.pppl_sentences = pppl_sentences
        self.pppl_chunk = pppl_chunk

    def __call__(self, model: MaskedLanguageModel, batches: Iterable[dict[str, torch.Tensor]],
                 rank: int = 0) -> dict[str, tuple[float, float]]:
        generator = torch.Generator().manual_seed(self.seed + rank)
        loss_sum = correct = masked = 0.0
        pppl_nll = pppl_tokens = 0.0
        pppl_left = self.pppl_sentences
        for batch in batches:
            inputs, labels = self.masker(batch["input_ids"], batch["attention_mask"], batch.get("word_ids"), generator)
            out = model(input_ids=inputs, attention_mask=batch["attention_mask"], labels=labels)
            n = float(out["n_masked"])
            loss_sum += float(out["loss"]) * n
            correct += float(out["correct"])
            masked += n
            if pppl_left > 0:
                take = min(pppl_left, batch["input_ids"].shape[0])
                nll, tokens = self._pseudo_log_likelihood(model, batch["input_ids"][:take], batch["attention_mask"][:take])
                pppl_nll += nll
                pppl_tokens += tokens
                pppl_left -= take
        metrics = {"mlm_loss": (loss_sum, masked), "mlm_accuracy": (correct, masked)}
        if self.pppl_sentences:
            metrics["pseudo_log_likelihood"] = (pppl_nll, pppl_tokens)
        return metrics

    def _pseudo_log_likelihood(self, model: MaskedLanguageModel, input_ids: torch.Tensor,
                               attention_mask: torch.Tensor) -> tuple[float, float]:
        nll, tokens = 0.0, 0
        allowed = self.masker.maskable(input_ids, attention_mask)
        for row in range(input_ids.shape[0]):
            positions = allowed[row].nonzero().squeeze(1)
            length = int(attention_mask[row].sum())
            ids = input_ids[row, :length]
            for start in range(0, len(positions), self.pppl_chunk):
                chunk = positions[start : start + self.pppl_chunk]
                copies = ids.unsqueeze(0).repeat(len(chunk), 1)
                labels = torch.full_like(copies, IGNORE_INDEX)
                rows = torch.arange(len(chunk), device=copies.device)
                labels[rows, chunk] = copies[rows, chunk]
                copies[rows, chunk] = self.masker.mask_token_id
                logits, targets = model.masked_logits(copies, torch.ones_like(copies), labels)
                nll += float(F.cross_entropy(logits.float(), targets, reduction="sum"))
                tokens += len(chunk)
        return nll, float(tokens)

    @staticmethod
    def summarize(metrics: dict[str, float]) -> dict[str, float]:
        out = dict(metrics)
        if "mlm_loss" in out:
            out["perplexity"] = math.exp(min(out["mlm_loss"], 50.0))
        if "pseudo_log_likelihood" in out:
            out["pseudo_perplexity"] = math.exp(min(out.pop("pseudo_log_likelihood"), 50.0))
        return out


def prepare_data(cfg: RunConfig) -> PreparedData:
    """The corpus, scanned on the driver (bad rows, dedup, hash split) and read lazily by Ray Data."""
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


def rows(cfg: RunConfig) -> dict[str, list[dict[str, Any]]]:
    """The corpus's texts per split, read in this process (`prepare_data`'s datasets read them lazily)."""
    corpus = scan_corpus(cfg.data, use_ray=False)
    return {split: [{"text": text} for text in local_documents(corpus, split)] for split in (TRAIN, VALIDATION)}


def build_masker(cfg: RunConfig, tokenizer: Any) -> DynamicMasker:
    objective = cfg.objective
    return DynamicMasker(
        tokenizer,
        mask_probability=objective.mask_probability,
        replace_with_mask=objective.replace_with_mask,
        replace_with_random=objective.replace_with_random,
        whole_word=objective.whole_word,
    )


def build_recipe(cfg: RunConfig) -> TrainingRecipe:
    path = resolve_model_path(cfg.model.name_or_path)
    tokenizer = load_tokenizer(path)
    model = MaskedLanguageModel.from_pretrained(path, projection=cfg.objective.projection)
    if cfg.objective.freeze_encoder:
        trained = model.freeze_encoder()
        n_trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
        print(f"[lmp] mlm: encoder frozen, training the head alone: {n_trained:,} of "
              f"{sum(p.numel() for p in model.parameters()):,} parameters ({len(trained)} tensors)", flush=True)
    masker = build_masker(cfg, tokenizer)

    def export(trained: MaskedLanguageModel, folder: Path) -> None:
        trained.save_pretrained(folder, tokenizer, cfg.model.pooling, cfg.model.max_seq_length)

    return TrainingRecipe(
        model=model,
        objective=MLMObjective(masker),
        collate=TextCollator(tokenizer, cfg.model.max_seq_length, with_word_ids=cfg.objective.whole_word),
        export=export,
        evaluate=MLMEvaluator(masker, pppl_sentences=cfg.objective.pseudo_perplexity_sentences),
        summarize=MLMEvaluator.summarize,
    )
