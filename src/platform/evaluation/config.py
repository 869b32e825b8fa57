"""`EvaluationConfig`: what to evaluate, on which data, with which models (its own YAML, `configs/eval/`).

An evaluation config holds one or more tasks, each selected by its `task`
discriminator. This module defines the `retrieval` task. Other tasks (sts,
classification, behavioural) add their own config class to `TaskConfig` below
and a runner to `lmplatform.evaluation.runner.TASK_RUNNERS`; nothing else changes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Iterable, Literal, Optional, Union

from pydantic import Field, model_validator

from lmplatform.config.base import Section
from lmplatform.config.loader import apply_overrides, parse_config, read_yaml


class RetrievalDataset(Section):
    """Where reports and duplicate relations are, and how to read them.

    `format: pairs` — one row per (query report, target report), e.g. OpenOffice
    `pairs.jsonl` (duplicate_id → master_id) or the demo `duplicates.jsonl`.
    `format: links` — undirected duplicate links (Hadoop, SeaMonkey): the end whose
    resolution says duplicate is the query; if neither or both do, both ends are queries.
    """

    name: str = Field(..., min_length=1, description="Label in reports.")
    format: Literal["pairs", "links"] = "pairs"
    corpus: str = Field(..., description="JSONL of reports (one object per line).")
    relations: str = Field(..., description="JSONL of duplicate pairs or links.")
    id_field: str = "id"
    query_id_field: str = Field("duplicate_id", description="pairs: the duplicate's id; links: the first end (id_a).")
    target_id_field: str = Field("master_id", description="pairs: the primary's id; links: the second end (id_b).")
    resolution_fields: Optional[tuple[str, str]] = Field(
        None, description="links: the resolution field of each end, e.g. [resolution_a, resolution_b]."
    )
    split_field: Optional[str] = Field("split", description="Field of the relation rows naming the split; null: no split.")
    split: Optional[str] = Field("test", description="Keep relations of this split; null: all.")
    query_text_source: Literal["corpus", "relations"] = Field(
        "corpus", description="corpus: query texts come from the query's report; relations: from the relation row "
        "(the demo's duplicates.jsonl holds query_title/query_text)."
    )
    relevance: Literal["target", "group"] = Field(
        "group", description="target: only the related report is relevant; group: every other report in the same "
        "duplicate group (connected component of all relations, all splits) is relevant."
    )
    limit_queries: Optional[int] = Field(None, ge=1, description="Evaluate only the first N queries (smoke runs).")


class RetrievalScenario(Section):
    """Which fields form the query text and which form the documents searched."""

    name: str = Field(..., min_length=1)
    query_fields: list[str] = Field(["title", "description"], min_length=1, description="Joined with '. '.")
    corpus_fields: list[str] = Field(["title", "description"], min_length=1)
    corpus_scope: Literal["all", "targets"] = Field(
        "all", description="all: every report (minus the query itself); targets: only reports that are a target "
        "of some relation, i.e. the primaries."
    )
    exclude_query: bool = Field(True, description="Remove the query's own report from its results.")


class RetrieverSpec(Section):
    name: str = Field(..., min_length=1, description="Label in reports and metric names.")
    kind: Literal["dense", "bm25", "two_stage"]
    model: Optional[str] = Field(None, description="dense / two_stage first stage: 'default', a folder, or models:/name@alias.")
    quantize: Optional[Literal["int8"]] = None
    index: Literal["flat", "hnsw", "ivf", "ivfpq", "auto"] = "flat"
    first_stage: Literal["dense", "bm25"] = "dense"
    reranker: Optional[str] = Field(None, description="two_stage: a cross-encoder / sequence-classification folder.")
    candidates: int = Field(20, ge=1, description="two_stage: first-stage candidates re-ranked.")
    batch_size: int = Field(64, ge=1)
    max_seq_length: Optional[int] = Field(None, ge=8)

    @model_validator(mode="after")
    def _needs(self) -> "RetrieverSpec":
        if self.kind == "dense" and not self.model:
            raise ValueError(f"retriever {self.name!r}: kind=dense needs model")
        if self.kind == "two_stage":
            if not self.reranker:
                raise ValueError(f"retriever {self.name!r}: kind=two_stage needs reranker")
            if self.first_stage == "dense" and not self.model:
                raise ValueError(f"retriever {self.name!r}: two_stage with first_stage=dense needs model")
        return self


class RetrievalTask(Section):
    task: Literal["retrieval"] = "retrieval"
    datasets: list[RetrievalDataset] = Field(..., min_length=1)
    scenarios: list[RetrievalScenario] = Field(default_factory=lambda: [RetrievalScenario(name="observation_to_observation")])
    retrievers: list[RetrieverSpec] = Field(..., min_length=1)
    ks: list[int] = Field([1, 3, 5, 10, 15, 20], min_length=1)
    mrr_ks: list[int] = Field([5, 15], min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> "RetrievalTask":
        for what, items in (("retriever", self.retrievers), ("scenario", self.scenarios), ("dataset", self.datasets)):
            names = [i.name for i in items]
            if len(set(names)) != len(names):
                raise ValueError(f"{what} names must be unique, got {names}")
        if min(self.ks + self.mrr_ks) <= 0:
            raise ValueError(f"ks and mrr_ks must be positive, got {self.ks} / {self.mrr_ks}")
        return self


# Extension point: add e.g. `StsTask` / `ClassificationTask` here (each with `task: Literal[...]`).
TaskConfig = Annotated[Union[RetrievalTask], Field(discriminator="task")]


class EvaluationTracking(Section):
    tracking_uri: Optional[str] = Field(None, description="Default: $MLFLOW_TRACKING_URI, else sqlite under <project>/mlruns.")
    experiment: str = Field("lmplatform-eval", min_length=1)
    run_id: Optional[str] = Field(
        None, description="Log into this existing MLflow run (the run of the model evaluated). Default: the run of "
        "the first models:/ model evaluated, else a new run."
    )
    run_name: Optional[str] = None
    enabled: bool = True


class EvaluationConfig(Section):
    name: str = Field("evaluation", min_length=1)
    output_dir: str = Field("runs/eval", description="Report folder: report.json, report.md, PNGs.")
    tasks: list[TaskConfig] = Field(..., min_length=1)
    tracking: EvaluationTracking = Field(default_factory=EvaluationTracking)


def load_evaluation_config(path: str | Path | None, overrides: Iterable[str] = (), base: Optional[dict[str, Any]] = None) -> EvaluationConfig:
    """Read the YAML (or `base`), apply `--set a.b=c` overrides, validate; raises ConfigError naming the field."""
    import copy

    data = read_yaml(path) if path is not None else copy.deepcopy(base or {})
    data = apply_overrides(data, overrides)
    return parse_config(data, EvaluationConfig, source=str(path) if path else "overrides")
