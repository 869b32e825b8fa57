"""Retrieval settings as data: how a model version searches (dense or hybrid, fusion, re-ranking).

Torch-free, so configs, the registry and the serving ingress can validate them without loading a model.
`FusionSettings` is what fusing BM25 with dense retrieval needs (offline evaluation, corpus-level
validation, the served `/v1/search`); `SearchSettings` adds the mode and the re-ranker, and is what a
model version carries in the MLflow registry (`tracking.registry.register_search_settings`).
The formulas are in `retrieval.fusion`.
"""
from __future__ import annotations

from typing import Any, Literal, Mapping, Optional

from pydantic import Field, ValidationError

from lmplatform.config.base import Section

Mode = Literal["dense", "hybrid"]
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


class SearchSettings(FusionSettings):
    """The retrieval a model version is meant to be served (and evaluated) with."""

    mode: Mode = Field("dense", description="First stage: 'dense' (bi-encoder + FAISS) or 'hybrid' (BM25 fused with it).")
    reranker: Optional[str] = Field(None, min_length=1, description="Cross-encoder (models:/ URI or folder) re-ranking "
                                    "the first stage's top rerank_depth; null: none.")
    rerank_depth: int = Field(20, ge=1, le=1000, description="First-stage hits the re-ranker re-scores; the rest keep "
                              "their first-stage order below them.")
    rerank_weight: float = Field(1.0, ge=0.0, le=1.0, allow_inf_nan=False, description="v in (1-v)·minmax(first stage) "
                                 "+ v·minmax(re-ranker) over the re-ranked hits; 1: the re-ranker's order alone.")

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
