"""Forgetting, measured.

Two views:

1. Continual-learning metrics over a task-score matrix R (N stages x N tasks),
   R[i, j] = score on task j after training stage i (0-based here; higher is
   better). Following Díaz-Rodríguez et al., 2018, "Don't forget, there is more
   than forgetting: new metrics for Continual Learning" (arXiv:1810.13166), and
   Lopez-Paz & Ranzato, 2017 (GEM) for the baseline-relative forward transfer.

2. `old_domain_mlm_loss`: the masked-LM loss of a model on held-out text of an
   earlier stage, with fixed masks, measured before and after a stage (the
   trouble-report study's "loss before fine-tuning / without EWC / with EWC").
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

logger = logging.getLogger(__name__)


def _matrix(R: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    matrix = np.asarray(R, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] == 0:
        raise ValueError(f"R must be a square N x N matrix (stage x task), got shape {matrix.shape}")
    return matrix


def _lower_entries(matrix: np.ndarray, strict: bool) -> np.ndarray:
    rows, cols = np.tril_indices(matrix.shape[0], k=-1 if strict else 0)
    entries = matrix[rows, cols]
    if not np.isfinite(entries).all():
        raise ValueError("R has missing (NaN) entries on or below the diagonal; every task seen so far must be scored")
    return entries


def average_accuracy(R: Sequence[Sequence[float]] | np.ndarray) -> float:
    """A = Σ_{i≥j} R[i, j] / (N(N+1)/2): the mean over every stage of the scores on the tasks seen so far.

    (Díaz-Rodríguez et al., 2018, eq. 1.) Unlike the final-row mean, it rewards a
    model that is good early as well as at the end.
    """
    return float(_lower_entries(_matrix(R), strict=False).mean())


def final_average_accuracy(R: Sequence[Sequence[float]] | np.ndarray) -> float:
    """ACC = (1/N) Σ_j R[N-1, j]: the mean score on all tasks after the last stage (Lopez-Paz & Ranzato, 2017)."""
    matrix = _matrix(R)
    return float(matrix[-1].mean())


def backward_transfer(R: Sequence[Sequence[float]] | np.ndarray) -> float:
    """BWT = Σ_{i=2}^{N} Σ_{j=1}^{i-1} (R[i, j] − R[j, j]) / (N(N−1)/2)  (1-based indices).

    The mean change of a task's score after later stages, relative to right after
    its own stage; negative is forgetting. (Díaz-Rodríguez et al., 2018, eq. 2.)
    A single task has no backward transfer: returns 0.0.
    """
    matrix = _matrix(R)
    n = matrix.shape[0]
    if n < 2:
        return 0.0
    rows, cols = np.tril_indices(n, k=-1)
    _lower_entries(matrix, strict=False)
    return float((matrix[rows, cols] - matrix[cols, cols]).mean())


def remembering(R: Sequence[Sequence[float]] | np.ndarray) -> float:
    """REM = 1 − |min(BWT, 0)|: 1 when nothing is forgotten (Díaz-Rodríguez et al., 2018, eq. 3)."""
    return 1.0 - abs(min(backward_transfer(R), 0.0))


def bwt_plus(R: Sequence[Sequence[float]] | np.ndarray) -> float:
    """BWT+ = max(BWT, 0): only the improvement on earlier tasks (Díaz-Rodríguez et al., 2018, eq. 4)."""
    return max(backward_transfer(R), 0.0)


def forward_transfer(R: Sequence[Sequence[float]] | np.ndarray, baseline: Sequence[float]) -> float:
    """FWT = (1/(N−1)) Σ_{i=2}^{N} (R[i−1, i] − b_i)  (1-based indices; Lopez-Paz & Ranzato, 2017).

    How much training on the earlier stages helps a task before it is trained on:
    the score of task i right before its stage, minus b_i, the score of the
    starting model (no training) on task i.
    """
    matrix = _matrix(R)
    n = matrix.shape[0]
    b = np.asarray(baseline, dtype=np.float64)
    if b.shape != (n,):
        raise ValueError(f"baseline must have one score per task ({n}), got shape {b.shape}")
    if n < 2:
        return 0.0
    before = np.array([matrix[i - 1, i] for i in range(1, n)])
    if not np.isfinite(before).all():
        raise ValueError("forward transfer needs R[i-1, i] (each task scored just before its stage)")
    return float((before - b[1:]).mean())


def forward_transfer_upper(R: Sequence[Sequence[float]] | np.ndarray) -> float:
    """FWT' = Σ_{i<j} R[i, j] / (N(N−1)/2): Díaz-Rodríguez et al.'s baseline-free variant (eq. 5),
    the mean score on tasks not yet trained on, over every earlier stage."""
    matrix = _matrix(R)
    n = matrix.shape[0]
    if n < 2:
        return 0.0
    rows, cols = np.triu_indices(n, k=1)
    entries = matrix[rows, cols]
    if not np.isfinite(entries).all():
        raise ValueError("FWT' needs every entry above the diagonal")
    return float(entries.mean())


def continual_metrics(R: Sequence[Sequence[float]] | np.ndarray, baseline: Optional[Sequence[float]] = None) -> dict[str, float]:
    """Every metric above that R (and the baseline, when given) defines."""
    matrix = _matrix(R)
    out = {
        "A": average_accuracy(matrix),
        "ACC_final": final_average_accuracy(matrix),
        "BWT": backward_transfer(matrix),
        "REM": remembering(matrix),
        "BWT_plus": bwt_plus(matrix),
    }
    n = matrix.shape[0]
    upper = matrix[np.triu_indices(n, k=1)]
    if n > 1 and np.isfinite(upper).all():
        out["FWT_upper"] = forward_transfer_upper(matrix)
    if baseline is not None and n > 1 and all(np.isfinite(matrix[i - 1, i]) for i in range(1, n)):
        out["FWT"] = forward_transfer(matrix, baseline)
    return out


# -- old-domain MLM loss ------------------------------------------------------
def load_mlm_for_evaluation(model_dir: str | Path, mlm_head_from: Optional[str | Path] = None):  # noqa: ANN201
    """A `MaskedLanguageModel` of `model_dir`, borrowing an MLM head when the folder has none.

    A stage that exports only a backbone (a bi-encoder's AutoModel folder) cannot
    predict tokens. We then put its backbone weights into the MLM model of
    `mlm_head_from` (the stage's starting model or the domain model), i.e. we
    measure how well the *new* backbone still serves the *old* head. Without
    `mlm_head_from` such a folder is an error rather than a loss from a random head.
    """
    from transformers import AutoModel, AutoModelForMaskedLM

    from lmplatform.models.masked_lm import MaskedLanguageModel
    from lmplatform.models.quiet import quiet_transformers
    from lmplatform.models.resolve import resolve_model_path

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
    from lmplatform.models.resolve import resolve_model_path
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
