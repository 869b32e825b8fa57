"""Evaluations a pipeline runs before and after a stage, and their config; register new ones in EVALUATIONS.

An evaluation takes (model folder, its config, the model to borrow an MLM head
from) and returns metrics plus one `score` where higher is better (for the
task-score matrix R).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Optional

from pydantic import Field, model_validator

from lmplatform.config.base import Section
from lmplatform.config.schema import DataConfig
from lmplatform.retrieval.settings import RetrievalValidationConfig


class StageEvaluationConfig(Section):
    """An evaluation run after a stage (and on the stage's starting model, for 'before')."""

    name: str = Field(..., description="Which evaluation; see lmplatform.pipeline.evaluations.EVALUATIONS.")
    label: Optional[str] = Field(None, description="Name in the forgetting table; default: the evaluation name.")
    data: DataConfig = Field(..., description="The texts to evaluate on (e.g. the previous stage's data).")
    split: Literal["train", "validation"] = Field(
        "validation", description="Which split of `data` (same hash split as training): validation is held out."
    )
    max_texts: int = Field(200, ge=1, description="A seeded sample of at most this many texts.")
    batch_size: int = Field(16, ge=1)
    max_seq_length: int = Field(128, ge=8)
    mask_seed: int = Field(1234, description="Fixes the masks, so before/after values are comparable.")
    mlm_head_from: Optional[str] = Field(
        None, description="For models exported without an MLM head: borrow it from this model "
        "(stage:<name>, a path or models:/...). Default: the stage's starting model.",
    )
    task: Optional[str] = Field(None, description="Column of the task-score matrix R this evaluation fills.")
    retrieval: Optional[RetrievalValidationConfig] = Field(
        None, description="Evaluation 'retrieval': the queries, candidate pool and cut-offs, by the rules of a run's "
        "retrieval_validation; its pairs default to `data`, and `retrieval.split` (not `split`) picks the queries. "
        "The score for R is MRR@mrr_k.")

    @model_validator(mode="after")
    def _known(self) -> "StageEvaluationConfig":
        if self.name not in EVALUATIONS:
            raise ValueError(f"unknown evaluation {self.name!r}; available: {', '.join(sorted(EVALUATIONS))}")
        if self.retrieval is not None and self.name != "retrieval":
            raise ValueError(f"evaluation {self.key!r}: `retrieval` settings apply to evaluation 'retrieval' only")
        return self

    @property
    def key(self) -> str:
        return self.label or self.name


@dataclass
class StageEvaluationResult:
    metrics: dict[str, float]
    score: float


def old_domain_mlm_loss_evaluation(model_dir: str, cfg: StageEvaluationConfig, head_from: Optional[str]) -> StageEvaluationResult:
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


def retrieval_evaluation(model_dir: str, cfg: StageEvaluationConfig, head_from: Optional[str]) -> StageEvaluationResult:
    """The model as a bi-encoder: each query of `data`'s pairs ranked against the pool (retrieval_validation's
    rules: group relevance, ties against the query, distractors); the score for R is MRR@mrr_k."""
    from lmplatform.evaluation.retrieval_validation import build_retrieval_set, evaluate_model, summarize
    from lmplatform.models.encoder import Encoder

    settings = cfg.retrieval or RetrievalValidationConfig()
    rset = build_retrieval_set(settings, cfg.data)
    encoder = Encoder.from_pretrained(model_dir, max_seq_length=cfg.max_seq_length)
    metrics = summarize(evaluate_model(encoder, rset, settings), rset)
    return StageEvaluationResult(metrics, score=metrics[f"ir_mrr_at_{settings.mrr_k}"])


EVALUATIONS: dict[str, Callable[[str, StageEvaluationConfig, Optional[str]], StageEvaluationResult]] = {
    "old_domain_mlm_loss": old_domain_mlm_loss_evaluation,
    "retrieval": retrieval_evaluation,
}


def run_stage_evaluation(model_dir: str, cfg: StageEvaluationConfig, head_from: Optional[str] = None) -> StageEvaluationResult:
    """Run one evaluation as a Ray task (one CPU), so it runs wherever the cluster has room."""
    import ray

    def _run(model_dir: str, cfg: StageEvaluationConfig, head_from: Optional[str]) -> StageEvaluationResult:
        import torch

        torch.set_num_threads(1)
        return EVALUATIONS[cfg.name](model_dir, cfg, head_from)

    try:
        return ray.get(ray.remote(num_cpus=1)(_run).remote(model_dir, cfg, head_from))
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, (ValueError, FileNotFoundError)):
            raise exc.cause from None
        raise
