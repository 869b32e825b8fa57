"""The evaluations a pipeline runs before and after a stage: their config, their result, and a Ray task that runs one.

Each is a registered evaluation that scores one model (`EvaluationSpec.scores_one_model`): its
`evaluate_model(model folder, config, the model to borrow an MLM head from)` returns metrics and one `score`
where higher is better (for the task-score matrix R).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from pydantic import Field, model_validator

from lmplatform.config.base import Section
from lmplatform.config.schema import DataConfig
from lmplatform.evaluation import registry
from lmplatform.retrieval.settings import RetrievalValidationConfig


def stage_evaluation_names() -> tuple[str, ...]:
    """The registered evaluations a pipeline stage may run: those that score one model."""
    return tuple(spec.name for spec in registry.evaluation_specs() if spec.scores_one_model)


class StageEvaluationConfig(Section):
    """An evaluation run after a stage (and on the stage's starting model, for 'before')."""

    name: str = Field(..., description="Which evaluation: a registered one that scores one model "
                      f"({', '.join(stage_evaluation_names())}).")
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
        if self.name not in stage_evaluation_names():
            raise ValueError(f"unknown evaluation {self.name!r}; available: {', '.join(sorted(stage_evaluation_names()))}")
        for spec in registry.evaluation_specs():
            for setting in spec.stage_settings:
                if spec.name != self.name and getattr(self, setting) is not None:
                    raise ValueError(f"evaluation {self.key!r}: `{setting}` settings apply to evaluation "
                                     f"{spec.name!r} only")
        return self

    @property
    def key(self) -> str:
        return self.label or self.name


@dataclass
class StageEvaluationResult:
    metrics: dict[str, float]
    score: float


def run_stage_evaluation(model_dir: str, cfg: StageEvaluationConfig, head_from: Optional[str] = None) -> StageEvaluationResult:
    """Run one evaluation as a Ray task (one CPU), so it runs wherever the cluster has room."""
    import ray

    def _run(model_dir: str, cfg: StageEvaluationConfig, head_from: Optional[str]) -> StageEvaluationResult:
        import torch

        torch.set_num_threads(1)
        return registry.evaluation_spec(cfg.name).evaluate_model(model_dir, cfg, head_from)

    try:
        return ray.get(ray.remote(num_cpus=1)(_run).remote(model_dir, cfg, head_from))
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, (ValueError, FileNotFoundError)):
            raise exc.cause from None
        raise
