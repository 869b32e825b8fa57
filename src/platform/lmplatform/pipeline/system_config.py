"""The `system` stage kind: a retrieval system assembled from the pipeline's models, its settings chosen on dev,
indexed and registered; runs in `pipeline/system.py`."""
from __future__ import annotations

from typing import Optional

from pydantic import Field, model_validator

from lmplatform.config.base import Section
from lmplatform.pipeline.spec import StageSpec
from lmplatform.retrieval.settings import IndexKind, MetadataFusionConfig, RetrievalValidationConfig, SearchSettings


class SystemChoiceConfig(Section):
    """Values to try on the `select` set; the best on `metric` is kept (an empty list keeps `search`'s value)."""

    bm25_weights: list[float] = Field(default_factory=list, description="BM25 weights of the hybrid first stage, e.g. "
                                      "[0, 0.1, ..., 0.5].")
    rerank_depths: list[int] = Field(default_factory=list, description="First-stage hits the re-ranker re-scores.")
    rerank_weights: list[float] = Field(default_factory=list, description="Weights of the re-ranker's score in the mix "
                                        "with the first stage's (1: the re-ranker's order alone).")
    metric: str = Field("ir_mrr_at_10", description="The per-query metric of `select` that decides.")

    @model_validator(mode="after")
    def _in_range(self) -> "SystemChoiceConfig":
        for name in ("bm25_weights", "rerank_weights"):
            if any(not 0.0 <= w <= 1.0 for w in getattr(self, name)):
                raise ValueError(f"choose.{name} must be values in [0, 1], got {getattr(self, name)}")
        if any(d < 1 for d in self.rerank_depths):
            raise ValueError(f"choose.rerank_depths must be >= 1, got {self.rerank_depths}")
        return self


class SystemIndexConfig(Section):
    """The index the registered system is served from: FAISS and BM25 over a corpus, with its document store."""

    corpus: str = Field(..., min_length=1, description="JSONL of the documents to serve (e.g. every report).")
    fields: list[str] = Field(["title", "text"], min_length=1, description="Fields joined with '. ' into the text "
                              "that is encoded and BM25-indexed (as the select set's distractors join them).")
    id_field: str = "id"
    kind: IndexKind = Field("auto", description="The FAISS index (retrieval/index.py): 'auto' picks by corpus size; "
                            "'flat_fp16' is exhaustive in half of flat's memory.")
    cpus_per_actor: float = Field(1.0, gt=0.0, description="The encoding actor's CPUs.")
    metadata_fields: list[str] = Field(default_factory=list, description="Fields kept as each document's metadata in "
                                       "the store (what a metadata fusion reads: product, component, created...).")


class SystemMetadataConfig(Section):
    """A metadata fusion for the system (lmplatform/retrieval/metadata_fusion.py): fitted on `fit`'s queries once per
    `regularizations` value, the best on `select` kept with the settings, and the mode when it beats the first stage
    chosen before it. The texts' metadata is read from `corpus`, each document found by its text."""

    corpus: list[str] = Field(..., min_length=1, description="JSONL of documents with the metadata fields (e.g. every "
                              "report), the same documents the pairs and distractors were made from.")
    fields: list[str] = Field(["title", "text"], min_length=1, description="Fields joined with '. ' into a document's "
                              "text, as the pairs' texts and the distractors join them (how a text finds its metadata).")
    fit: RetrievalValidationConfig = Field(..., description="The training queries the fusion is fitted on: pairs "
                                           "(e.g. the train split) ranked against their documents and distractors.")
    fusion: MetadataFusionConfig = Field(default_factory=MetadataFusionConfig)
    regularizations: list[float] = Field([0.1, 1.0, 10.0], min_length=1, description="Values of the fusion's "
                                         "regularization (C) fitted and tried on `select`.")

    @model_validator(mode="after")
    def _positive_regularizations(self) -> "SystemMetadataConfig":
        if any(c <= 0 for c in self.regularizations):
            raise ValueError(f"metadata.regularizations must be > 0, got {self.regularizations}")
        return self


class SystemRegisterConfig(Section):
    """Where the chosen system is registered: the retriever's version carries the settings, the index and a link to
    the re-ranker's own version."""

    name: str = Field(..., min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                      description="Registered model of the retriever.")
    reranker_name: Optional[str] = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                                         description="Registered model of the re-ranker (default: <name>-reranker).")


class SystemConfig(Section):
    """A `system` stage: the retrieval system a pipeline ends with, its settings chosen on a dev set, measured as it
    is served (lmplatform/evaluation/system.py), then indexed and registered."""

    retriever: str = Field(..., min_length=1, description="The bi-encoder: stage:<name>, a folder, 'default' or models:/...")
    reranker: Optional[str] = Field(None, min_length=1, description="A cross-encoder re-ranking the first stage's top "
                                    "hits: stage:<name>, a folder or models:/...; null: none.")
    select: RetrievalValidationConfig = Field(..., description="Where settings are chosen and the stage's metrics "
                                              "measured: dev pairs ranked against the corpus (pairs, split, distractors).")
    search: SearchSettings = Field(default_factory=SearchSettings, description="The settings; `choose` replaces the "
                                   "values it tries. Its `reranker` is set from `reranker` above.")
    choose: SystemChoiceConfig = Field(default_factory=SystemChoiceConfig)
    metadata: Optional[SystemMetadataConfig] = Field(None, description="Fit a metadata fusion and choose it on `select` "
                                                     "like the other settings; null: dense and BM25 only.")
    max_seq_length: Optional[int] = Field(None, ge=8, description="Encoder length; default: the model's.")
    cpus: float = Field(1.0, gt=0.0, description="CPUs of the Ray task that measures the system (its encoder and "
                        "re-ranker run there, one thread per CPU).")
    index: Optional[SystemIndexConfig] = Field(None, description="Build the served index (when the system is registered).")
    register_as: Optional[SystemRegisterConfig] = Field(None, description="Register the system (skipped in study trials: "
                                                     "the study registers its winner).")

    @model_validator(mode="after")
    def _pairs_and_index(self) -> "SystemConfig":
        if self.select.pairs is None:
            raise ValueError("system.select.pairs is required: the dev pairs the settings are chosen on")
        if self.search.mode == "metadata" or self.search.metadata_fusion is not None:
            raise ValueError("system.search: mode 'metadata' and its metadata_fusion are chosen by the stage: set "
                             "system.metadata (the fusion is fitted on its queries) and search.mode 'dense' or 'hybrid'")
        if self.register_as is not None and self.index is None:
            raise ValueError("system.register_as needs system.index: a registered system is served from its index")
        if self.choose.rerank_depths or self.choose.rerank_weights:
            if self.reranker is None:
                raise ValueError("system.choose tries re-rank settings, but system.reranker is not set")
        return self


def system_metric_names(cfg: SystemConfig) -> list[str]:
    """Every metric a system stage reports (see `pipeline.system.measure_system`)."""
    names = list(cfg.select.per_query_metric_names())
    out = [*names, "ir_queries", "ir_candidates", *(f"dense_{n}" for n in names),
           "bm25_weight", "rerank_depth", "rerank_weight"]
    return out + ([f"first_stage_{n}" for n in names] if cfg.reranker else [])


SPEC = StageSpec(
    name="system",
    section=SystemConfig,
    description="The retrieval system: a trained bi-encoder (and re-ranker) with BM25 fusion and re-rank settings "
                "chosen on dev, indexed and registered.",
    implementation="lmplatform.pipeline.system",
    makes="nothing",
    registers=True,
    model_fields=("retriever", "reranker"),
    study_overrides=("system.register_as=null",),
)
