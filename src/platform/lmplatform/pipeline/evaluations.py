"""Evaluations a pipeline runs before and after a stage; register new ones in EVALUATIONS.

An evaluation takes (model folder, its config, the model to borrow an MLM head
from) and returns metrics plus one `score` where higher is better (for the
task-score matrix R).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from lmplatform.pipeline.config import StageEvaluationConfig


@dataclass
class StageEvaluationResult:
    metrics: dict[str, float]
    score: float


def old_domain_mlm_loss_evaluation(model_dir: str, cfg: "StageEvaluationConfig", head_from: Optional[str]) -> StageEvaluationResult:
    """MLM loss on held-out text with fixed masks; the score for R is the masked-token accuracy."""
    from lmplatform.data.sampling import sample_texts
    from lmplatform.evaluation.old_domain_mlm import old_domain_mlm_loss

    texts = sample_texts(cfg.data, cfg.max_texts, seed=cfg.mask_seed, split=cfg.split)
    if not texts:
        raise ValueError(f"evaluation {cfg.key!r}: no {cfg.split} documents in {', '.join(cfg.data.train_paths)} "
                         "(is data.validation_fraction 0?)")
    metrics = old_domain_mlm_loss(model_dir, texts, mlm_head_from=head_from, batch_size=cfg.batch_size,
                                  max_seq_length=cfg.max_seq_length, mask_seed=cfg.mask_seed)
    return StageEvaluationResult(metrics, score=metrics["mlm_accuracy"])


def retrieval_evaluation(model_dir: str, cfg: "StageEvaluationConfig", head_from: Optional[str]) -> StageEvaluationResult:
    """The model as a bi-encoder: each query of `data`'s pairs ranked against the pool (retrieval_validation's
    rules: group relevance, ties against the query, distractors); the score for R is MRR@mrr_k."""
    from lmplatform.evaluation.retrieval_validation import build_retrieval_set, evaluate_model, summarize
    from lmplatform.models.encoder import Encoder
    from lmplatform.retrieval.settings import RetrievalValidationConfig

    settings = cfg.retrieval or RetrievalValidationConfig()
    rset = build_retrieval_set(settings, cfg.data)
    encoder = Encoder.from_pretrained(model_dir, max_seq_length=cfg.max_seq_length)
    metrics = summarize(evaluate_model(encoder, rset, settings), rset)
    return StageEvaluationResult(metrics, score=metrics[f"ir_mrr_at_{settings.mrr_k}"])


EVALUATIONS: dict[str, Callable[[str, "StageEvaluationConfig", Optional[str]], StageEvaluationResult]] = {
    "old_domain_mlm_loss": old_domain_mlm_loss_evaluation,
    "retrieval": retrieval_evaluation,
}


def run_stage_evaluation(model_dir: str, cfg: "StageEvaluationConfig", head_from: Optional[str] = None) -> StageEvaluationResult:
    """Run one evaluation as a Ray task (one CPU), so it runs wherever the cluster has room."""
    import ray

    def _run(model_dir: str, cfg: "StageEvaluationConfig", head_from: Optional[str]) -> StageEvaluationResult:
        import torch

        torch.set_num_threads(1)
        return EVALUATIONS[cfg.name](model_dir, cfg, head_from)

    try:
        return ray.get(ray.remote(num_cpus=1)(_run).remote(model_dir, cfg, head_from))
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, (ValueError, FileNotFoundError)):
            raise exc.cause from None
        raise
