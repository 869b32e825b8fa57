"""The old_domain_mlm_loss evaluation (a pipeline stage's, one model at a time): forgetting measured as a loss, the
masked-LM loss of a model on held-out text of an earlier stage with fixed masks, measured before and after a stage
(the trouble-report study's "loss before fine-tuning / without EWC / with EWC").
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from lmplatform.data.sampling import sample_texts
from lmplatform.evaluation.stage_evaluation import StageEvaluationConfig, StageEvaluationResult
from lmplatform.models.quiet import quiet_transformers
from lmplatform.models.resolve import resolve_model_path

if TYPE_CHECKING:
    from lmplatform.models.masked_lm import MaskedLanguageModel

logger = logging.getLogger(__name__)


def load_mlm_for_evaluation(model_dir: str | Path,
                            mlm_head_from: Optional[str | Path] = None) -> tuple["MaskedLanguageModel", str]:
    """A `MaskedLanguageModel` of `model_dir`, borrowing an MLM head when the folder has none, and where its
    head came from ("own", or "head from <path>").

    A stage that exports only a backbone (a bi-encoder's AutoModel folder) cannot
    predict tokens. We then put its backbone weights into the MLM model of
    `mlm_head_from` (the stage's starting model or the domain model), i.e. we
    measure how well the *new* backbone still serves the *old* head. Without
    `mlm_head_from` such a folder is an error rather than a loss from a random head.
    """
    from transformers import AutoModel, AutoModelForMaskedLM

    from lmplatform.models.masked_lm import MaskedLanguageModel
    path = resolve_model_path(str(model_dir))
    with quiet_transformers():
        mlm, info = AutoModelForMaskedLM.from_pretrained(str(path), output_loading_info=True)
        prefix = mlm.base_model_prefix + "."
        head_missing = [k for k in info.get("missing_keys", ()) if not k.startswith(prefix)]
        if not head_missing:
            return MaskedLanguageModel(mlm), "own"
        if mlm_head_from is None:
            raise ValueError(f"{path} has no MLM head ({len(head_missing)} head tensors missing); "
                             "pass mlm_head_from (the model whose head to borrow)")
        head_path = resolve_model_path(str(mlm_head_from))
        mlm = AutoModelForMaskedLM.from_pretrained(str(head_path))
        backbone = AutoModel.from_pretrained(str(path))
    state = {k: v for k, v in backbone.state_dict().items() if not k.startswith("pooler.")}  # the MLM model has no pooler
    missing, unexpected = mlm.base_model.load_state_dict(state, strict=False)
    if missing:
        raise ValueError(f"{path}: its backbone does not fit the head model {head_path} (missing {missing[:3]}...)")
    return MaskedLanguageModel(mlm), f"head from {head_path}"


def old_domain_mlm_loss(
    model_dir: str | Path,
    texts: Sequence[str],
    mlm_head_from: Optional[str | Path] = None,
    batch_size: int = 16,
    max_seq_length: int = 128,
    mask_seed: int = 1234,
    mask_probability: float = 0.15,
) -> dict[str, float]:
    """Held-out MLM loss of `model_dir` on `texts` with masks fixed by `mask_seed`.

    The same texts and seed give the same masks for every model, so values from
    before and after a stage are directly comparable. Returns mlm_loss (mean per
    masked token), mlm_accuracy, perplexity, the number of texts and masked tokens.
    """
    import torch

    from lmplatform.models.encoder import load_tokenizer
    from lmplatform.objectives.masking import DynamicMasker
    from lmplatform.objectives.mlm.objective import MLMEvaluator
    from lmplatform.train.collate import TextCollator

    if not texts:
        raise ValueError("old_domain_mlm_loss: no texts to evaluate on")
    model, head = load_mlm_for_evaluation(model_dir, mlm_head_from)
    tokenizer = load_tokenizer(resolve_model_path(str(model_dir)))
    collate = TextCollator(tokenizer, max_seq_length)
    evaluator = MLMEvaluator(DynamicMasker(tokenizer, mask_probability=mask_probability), seed=mask_seed, pppl_sentences=0)
    batches = (collate.encode(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size))
    with torch.no_grad():
        sums = evaluator(model, batches)
    metrics = MLMEvaluator.summarize({k: s / w for k, (s, w) in sums.items() if w > 0})
    metrics["texts"] = float(len(texts))
    metrics["masked_tokens"] = float(sums["mlm_loss"][1])
    logger.info("old-domain MLM loss of %s (%s): %.4f", model_dir, head, metrics["mlm_loss"])
    return metrics


def evaluate_model(model_dir: str, cfg: StageEvaluationConfig, head_from: Optional[str]) -> StageEvaluationResult:
    """MLM loss on held-out text of `cfg.data` with fixed masks; the score for R is the masked-token accuracy."""
    texts = sample_texts(cfg.data, cfg.max_texts, seed=cfg.mask_seed, split=cfg.split)
    if not texts:
        raise ValueError(f"evaluation {cfg.key!r}: no {cfg.split} documents in {', '.join(cfg.data.train_paths)} "
                         "(is data.validation_fraction 0?)")
    metrics = old_domain_mlm_loss(model_dir, texts, mlm_head_from=head_from, batch_size=cfg.batch_size,
                                  max_seq_length=cfg.max_seq_length, mask_seed=cfg.mask_seed)
    return StageEvaluationResult(metrics, score=metrics["mlm_accuracy"])
