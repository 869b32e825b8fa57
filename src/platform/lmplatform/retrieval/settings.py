"""Retrieval settings as data: how a model version searches (dense or hybrid, fusion, re-ranking).

Torch-free, so configs, the registry and the serving ingress can validate them without loading a model.
`FusionSettings` is what fusing BM25 with dense retrieval needs (offline evaluation, corpus-level
validation, the served `/v1/search`); `MetadataFusionConfig` and `MetadataFusionWeights` are a metadata
fusion's config and fitted weights (the maths: `retrieval.metadata_fusion`); `SearchSettings` adds the mode,
the fitted fusion and the re-ranker, and is what a model version carries in the MLflow registry
(`tracking.registry.register_search_settings`).
The formulas are in `retrieval.fusion`. `RetrievalValidationConfig` is a run's corpus-level retrieval
validation (the `retrieval_validation` section; `evaluation.retrieval_validation` runs it).
"""
from __future__ import annotations

import math
from typing import Any, Literal, Mapping, Optional, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lmplatform.config.base import Section
from lmplatform.config.schema import DataConfig

Mode = Literal["dense", "hybrid", "metadata"]
# The FAISS index kinds a `VectorIndex` builds (what each is: retrieval/index.py).
IndexKind = Literal["flat", "flat_fp16", "hnsw", "ivf", "ivfpq", "auto"]
INDEX_KINDS: tuple[str, ...] = get_args(IndexKind)
Fusion = Literal["convex", "rrf"]


class SearchSettingsError(ValueError):
    """Invalid retrieval settings (the message names each bad field)."""


class FusionSettings(Section):
    """How BM25 and dense results are fused (see `retrieval.fusion`)."""

    fusion: Fusion = Field("convex", description="'convex': (1-w)·minmax(dense) + w·minmax(bm25) over the candidate "
                           "pool; 'rrf': Σ 1/(rrf_k + rank) over the two rankings (bm25_weight unused).")
    bm25_weight: float = Field(0.2, ge=0.0, le=1.0, allow_inf_nan=False, description="w of the convex mix: 0 is the "
                               "dense ranking, 1 BM25's. Choose it on a dev split (`choose_bm25_weight`); the default is a "
                               "prior: for zero-shot MiniLM on the OpenOffice duplicates dev chooses 0.1 to 0.2.")
    rrf_k: int = Field(60, ge=1, le=100_000, description="k of reciprocal rank fusion.")
    hybrid_candidates: int = Field(100, ge=1, le=10_000, description="Top-N of each retriever pooled for fusion; every "
                                   "pool member gets its exact score from both retrievers.")


class MetadataFusionConfig(BaseModel):
    """Which metadata the fusion reads, how many candidates each first stage adds to a pool, and its regularisation."""

    model_config = ConfigDict(extra="forbid")

    match_fields: list[str] = Field(default_factory=lambda: ["product", "component"],
                                    description="Fields whose equality between query and candidate is a feature.")
    time_field: Optional[str] = Field("created", description="A timestamp field (ISO 8601 or epoch seconds); "
                                      "its distance between query and candidate is a feature. None: no time features.")
    pool: int = Field(100, ge=1, description="Candidates each first stage (dense, BM25) adds to a query's pool.")
    regularization: float = Field(1.0, gt=0, description="Inverse L2 strength of the logistic regression (C).")

    def read_fields(self) -> list[str]:
        """The metadata fields the fusion reads (what a document store must keep for it)."""
        return [*self.match_fields, *([self.time_field] if self.time_field else [])]


def feature_names(cfg: MetadataFusionConfig) -> list[str]:
    """The fusion's features in their column order (formulas: `retrieval.metadata_fusion`)."""
    names = ["dense_norm", "bm25_norm", "dense", *(f"same_{f}" for f in cfg.match_fields)]
    return names + (["log_days", "earlier", "time_unknown"] if cfg.time_field else [])


class MetadataFusionWeights(BaseModel):
    """A fitted fusion as data (`MetadataFusion.to_dict`): its config, bias and one weight per feature name."""

    model_config = ConfigDict(extra="forbid")

    config: MetadataFusionConfig
    bias: float = Field(..., allow_inf_nan=False)
    weights: dict[str, float] = Field(..., description="One finite weight per feature of `config` (`feature_names`).")

    @model_validator(mode="after")
    def _one_weight_per_feature(self) -> "MetadataFusionWeights":
        names = feature_names(self.config)
        if sorted(self.weights) != sorted(names):
            raise ValueError(f"weights name {sorted(self.weights)}; the config's features are {names}")
        if not all(math.isfinite(w) for w in self.weights.values()):
            raise ValueError("every weight must be a finite number")
        return self


class SearchSettings(FusionSettings):
    """The retrieval a model version is meant to be served (and evaluated) with."""

    mode: Mode = Field("dense", description="First stage: 'dense' (bi-encoder + FAISS), 'hybrid' (BM25 fused with it) or "
                       "'metadata' (the dense and BM25 candidates ranked by `metadata_fusion`, with the documents' metadata).")
    metadata_fusion: Optional[MetadataFusionWeights] = Field(
        None, description="The fitted metadata fusion (retrieval.metadata_fusion: its config, bias and weights) that mode "
        "'metadata' ranks with; null: none.")
    reranker: Optional[str] = Field(None, min_length=1, description="Cross-encoder (models:/ URI or folder) re-ranking "
                                    "the first stage's top rerank_depth; null: none.")
    rerank_depth: int = Field(20, ge=1, le=1000, description="First-stage hits the re-ranker re-scores; the rest keep "
                              "their first-stage order below them.")
    rerank_weight: float = Field(1.0, ge=0.0, le=1.0, allow_inf_nan=False, description="v in (1-v)·minmax(first stage) "
                                 "+ v·minmax(re-ranker) over the re-ranked hits; 1: the re-ranker's order alone.")

    @model_validator(mode="after")
    def _metadata_mode_has_a_fusion(self) -> "SearchSettings":
        if self.mode == "metadata" and self.metadata_fusion is None:
            raise ValueError("mode 'metadata' needs metadata_fusion (a fitted fusion: MetadataFusion.to_dict())")
        return self

    def fusion_settings(self) -> FusionSettings:
        return FusionSettings.model_validate(self.model_dump(include=set(FusionSettings.model_fields)))


def parse_search_settings(data: Mapping[str, Any], where: str = "search settings") -> SearchSettings:
    """`SearchSettings` from a plain mapping, or a `SearchSettingsError` naming each bad field and value."""
    try:
        return SearchSettings.model_validate(dict(data))
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = ".".join(str(p) for p in error["loc"]) or "(settings)"
            problems.append(f"{field}: {error['msg']} (got {error.get('input')!r})")
        raise SearchSettingsError(f"invalid {where}: " + "; ".join(problems)) from None


class DistractorConfig(Section):
    """Extra candidates for corpus-level validation: every text of these files (a sample of them when
    `max_documents` is set) joins the pool each validation query is ranked against."""

    paths: list[str] = Field(..., min_length=1, description="JSONL/CSV/Parquet/text files (or folders) of documents.")
    fields: list[str] = Field(
        ["text"], min_length=1, description="Fields joined with '. ' into one document text (jsonl/csv/parquet).")
    max_documents: Optional[int] = Field(None, ge=1, description="A seeded random sample of this many documents.")
    seed: int = Field(13, description="Seeds the sample.")

    @field_validator("paths", mode="before")
    @classmethod
    def _one_path_is_a_list(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value


def hybrid_metric_name(name: str) -> str:
    """ir_mrr_at_10 -> ir_hybrid_mrr_at_10: the metric of the BM25-fused ranking (`RetrievalValidationConfig.hybrid`)."""
    return "ir_hybrid_" + name.removeprefix("ir_")


class RetrievalValidationConfig(Section):
    """Corpus-level retrieval validation (docs/tuning.md#selection-metrics): each validation query is ranked
    against the whole candidate pool (validation documents plus distractors) and scored with Recall@k,
    MRR@k, nDCG@k and MAP@k. Ties count against the query. Logged as `val_ir_*`.

    With `protocol: online` each query is ranked in the duplicate-detection field's online protocol
    (`evaluation.online_validation`): only against the texts filed before it within `window_days`, a duplicate
    group counting once (a bucket), scored `ir_rr_at_<k>`, `ir_mrr_at_<mrr_k>` and `ir_map_at_<map_k>`."""

    pairs: Optional[DataConfig] = Field(
        None, description="Where the validation pairs come from; the run's own `data` when empty (pair objectives). "
        "DeCLUTR needs it. Its split rule (validation_paths, or validation_fraction and seed) picks the queries.")
    split: Literal["validation", "all"] = Field(
        "validation", description="'validation': the validation side of `pairs`; 'all': every pair (a file kept apart for this).")
    relevance: Literal["group", "pair"] = Field(
        "group", description="'group': every other text of the query's duplicate group (linked through any pair, "
        "train or validation) is relevant; 'pair': only the query's own documents.")
    distractors: Optional[DistractorConfig] = Field(None, description="Documents added to the candidate pool.")
    max_queries: Optional[int] = Field(None, ge=1, description="A stable hash sample of this many queries.")
    recall_ks: list[int] = Field([1, 10, 20], min_length=1, description="Cut-offs of val_ir_recall_at_<k> "
                                 "(protocol online: of val_ir_rr_at_<k>, the recall rate).")
    mrr_k: int = Field(10, ge=1, description="Cut-off of val_ir_mrr_at_<k>.")
    ndcg_k: int = Field(10, ge=1, description="Cut-off of val_ir_ndcg_at_<k> (protocol corpus only).")
    map_k: int = Field(100, ge=1, description="Cut-off of val_ir_map_at_<k> (average precision over the top k).")
    batch_size: int = Field(64, ge=1, description="Texts (or cross-encoder pairs) per forward pass.")
    first_stage: str = Field(
        "bm25", description="cross_encoder only: the retriever whose top `candidates` are re-ranked: 'bm25', or a "
        "bi-encoder ('default', a folder, models:/name@alias).")
    candidates: int = Field(20, ge=1, description="cross_encoder only: depth N of the first stage that is re-ranked.")
    hybrid: Optional[FusionSettings] = Field(
        None, description="Bi-encoders only: also rank every query by BM25 fused with the model (retrieval.fusion) "
        "and report those metrics as val_ir_hybrid_*, e.g. {bm25_weight: 0.2, fusion: convex}.")
    protocol: Literal["corpus", "online"] = Field(
        "corpus", description="corpus: each query ranks the whole pool; val_ir_recall_at_<k>, val_ir_mrr_at_<mrr_k>, "
        "val_ir_ndcg_at_<ndcg_k>, val_ir_map_at_<map_k>. online: the field's protocol (Sun et al. 2011; "
        "evaluation.online): the texts get their filing time from the distractor files' `time_field`; a query is "
        "the later-filed end of a pair that duplicates an earlier text, ranked against the pool's texts filed before "
        "it within `window_days`, a duplicate group counting once (its best candidate); a query whose group has no "
        "earlier candidate in the window (or none in the top max(k) ranked) is a miss; texts of unknown time are "
        "neither queries nor candidates. Metrics: val_ir_rr_at_<k> (recall rate: the group in the top k, for "
        "recall_ks), val_ir_mrr_at_<mrr_k> and val_ir_map_at_<map_k> (1/rank of the group, 0 beyond the cut-off), "
        "so a study or the system stage choosing on ir_mrr_at_10 keeps its metric name; no nDCG.")
    time_field: str = Field("created", min_length=1, description="online: the distractor rows' filing time (ISO 8601 "
                            "or epoch seconds; `data.fields.parse_time`); a text without one (or with junk) is neither "
                            "query nor candidate, and is counted.")
    window_days: Optional[float] = Field(365.0, gt=0, allow_inf_nan=False, description="online: candidates were filed "
                                         "at most this many days before the query; null: no window.")

    @model_validator(mode="after")
    def _online_needs_times_and_groups(self) -> "RetrievalValidationConfig":
        if self.protocol == "online":
            if self.distractors is None:
                raise ValueError("protocol 'online' needs distractors: the reports file whose `time_field` "
                                 f"({self.time_field!r}) times the texts (allowed protocols: 'corpus', 'online')")
            if self.relevance != "group":
                raise ValueError("protocol 'online' ranks duplicate groups: relevance must be 'group' "
                                 f"(got {self.relevance!r}; allowed: 'group', 'pair' with protocol 'corpus')")
        return self

    @field_validator("recall_ks")
    @classmethod
    def _positive_ks(cls, value: list[int]) -> list[int]:
        if any(k < 1 for k in value):
            raise ValueError(f"every k must be >= 1, got {value}")
        return sorted(set(value))

    def depth(self) -> int:
        """How many candidates a ranking must hold for every metric."""
        return max(*self.recall_ks, self.mrr_k, self.ndcg_k, self.map_k)

    def ranking_metric_names(self) -> tuple[str, ...]:
        """The `ir_*` metrics of one ranking of every query (`score_rankings`)."""
        if self.protocol == "online":
            return (*(f"ir_rr_at_{k}" for k in self.recall_ks), f"ir_mrr_at_{self.mrr_k}", f"ir_map_at_{self.map_k}")
        return (*(f"ir_recall_at_{k}" for k in self.recall_ks), f"ir_mrr_at_{self.mrr_k}",
                f"ir_ndcg_at_{self.ndcg_k}", f"ir_map_at_{self.map_k}")

    def per_query_metric_names(self) -> tuple[str, ...]:
        """The `ir_*` metrics scored query by query (the gate can compare models on any of them), with the
        `ir_hybrid_*` twins of the fused ranking when `hybrid` is set."""
        names = self.ranking_metric_names()
        return (*names, *(hybrid_metric_name(n) for n in names)) if self.hybrid is not None else names

    def metric_names(self) -> tuple[str, ...]:
        """Every `ir_*` metric name (without the `val_` prefix) a validation reports: the per-query ones and the set's size."""
        return (*self.per_query_metric_names(), "ir_queries", "ir_candidates")
