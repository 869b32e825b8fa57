"""The retrieval evaluation's config: datasets of reports and duplicate relations, scenarios (which fields are
queried and searched) and retrievers (dense, BM25, hybrid, two-stage), every combination scored."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from lmplatform.config.base import Section
from lmplatform.data.fields import parse_time
from lmplatform.evaluation.tasks.common import unique_names
from lmplatform.retrieval.settings import FusionSettings, IndexKind


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
    protocol: Literal["corpus", "online"] = Field(
        "corpus", description="corpus: each query ranks the whole corpus (recall@k, MRR, MAP over reports). online: the "
        "field's protocol (Sun et al. 2011; `evaluation.online`): a query ranks the buckets (duplicate groups) of the "
        "reports filed before it within window_days; reported as rr@k (the ks), mrr@k (mrr_ks and 10) and map."
    )
    time_field: str = Field("created", description="online: the reports' filing time (ISO 8601 or epoch seconds); "
                            "a report without one (or with junk) is neither query nor candidate, and is counted.")
    window_days: Optional[float] = Field(365.0, gt=0, description="online: candidates were filed at most this many days "
                                         "before the query; null: no window.")
    period_start: Optional[str | float] = Field(None, description="online: only queries filed at or after this time "
                                                "(ISO 8601 or epoch seconds).")
    period_end: Optional[str | float] = Field(None, description="online: only queries filed before this time.")
    online_depth: int = Field(1000, ge=1, description="online, retrievers without a score for every report (hybrid, "
                              "two_stage): the top N searched per query; the reports below count as scoring -inf.")

    @model_validator(mode="after")
    def _online(self) -> "RetrievalDataset":
        if self.protocol == "online":
            if self.query_text_source != "corpus":
                raise ValueError(f"dataset {self.name!r}: protocol=online needs query_text_source=corpus (a query is a report)")
            for name in ("period_start", "period_end"):
                parse_time(getattr(self, name), name)  # a DataError (a ValueError) names the field
        return self


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
    kind: Literal["dense", "bm25", "hybrid", "two_stage"]
    model: Optional[str] = Field(
        None, description="dense / hybrid / two_stage first stage: 'default', a folder, or models:/name@alias.")
    quantize: Optional[Literal["int8"]] = None
    index: IndexKind = "flat"
    first_stage: Literal["dense", "bm25", "hybrid"] = "dense"
    hybrid: FusionSettings = Field(default_factory=FusionSettings, description="hybrid (and two_stage over it): how BM25 "
                                   "and the model are fused (retrieval.fusion).")
    bm25_weights: Optional[list[float]] = Field(None, min_length=1, description="hybrid: one row per weight, named "
                                                "<name>-w<weight>, in place of hybrid.bm25_weight (the corpus is indexed once).")
    reranker: Optional[str] = Field(None, description="two_stage: a cross-encoder / sequence-classification folder.")
    candidates: int = Field(20, ge=1, description="two_stage: first-stage candidates re-ranked.")
    rerank_weight: float = Field(1.0, ge=0.0, le=1.0, description="two_stage: v in (1-v)·minmax(first stage) + "
                                 "v·minmax(re-ranker) over the re-ranked candidates; 1: the re-ranker's order.")
    batch_size: int = Field(64, ge=1)
    max_seq_length: Optional[int] = Field(None, ge=8)

    @model_validator(mode="after")
    def _needs(self) -> "RetrieverSpec":
        if self.kind in ("dense", "hybrid") and not self.model:
            raise ValueError(f"retriever {self.name!r}: kind={self.kind} needs model")
        if self.kind == "two_stage":
            if not self.reranker:
                raise ValueError(f"retriever {self.name!r}: kind=two_stage needs reranker")
            if self.first_stage != "bm25" and not self.model:
                raise ValueError(f"retriever {self.name!r}: two_stage with first_stage={self.first_stage} needs model")
        if self.bm25_weights is not None:
            if "hybrid" not in (self.kind, self.first_stage if self.kind == "two_stage" else None):
                raise ValueError(f"retriever {self.name!r}: bm25_weights applies to a hybrid first stage only")
            if any(not 0.0 <= w <= 1.0 for w in self.bm25_weights) or len(set(self.bm25_weights)) != len(self.bm25_weights):
                raise ValueError(f"retriever {self.name!r}: bm25_weights must be distinct values in [0, 1], "
                                 f"got {self.bm25_weights}")
        return self

    def variants(self) -> list[tuple[str, FusionSettings]]:
        """(row name, fusion settings) of each row this retriever makes: one per bm25_weights entry, else one."""
        if self.bm25_weights is None:
            return [(self.name, self.hybrid)]
        return [(f"{self.name}-w{w:g}", self.hybrid.model_copy(update={"bm25_weight": w})) for w in self.bm25_weights]


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
            unique_names(what, items)
        rows = [name for spec in self.retrievers for name, _ in spec.variants()]
        if len(set(rows)) != len(rows):
            raise ValueError(f"retriever rows (a bm25_weights list makes <name>-w<weight>) must be unique, got {rows}")
        if min(self.ks + self.mrr_ks) <= 0:
            raise ValueError(f"ks and mrr_ks must be positive, got {self.ks} / {self.mrr_ks}")
        for ds in self.datasets:
            if ds.protocol == "online" and ds.online_depth < max(self.ks + self.mrr_ks + [10]):
                raise ValueError(f"dataset {ds.name!r}: online_depth {ds.online_depth} is below the largest k")
        return self
