"""A retrieval system scored as it is served, and its settings chosen on a dev set.

The system is a bi-encoder searched as its `SearchSettings` say: a first stage (dense, BM25 fused with
it, or both ranked by a metadata fusion with the texts' metadata) and, optionally, a cross-encoder that
re-scores the first stage's top `rerank_depth`, mixed with it by `rerank_weight`. Every step is the function
the served `/v1/search` runs (`retrieval.fusion`, `retrieval.metadata_fusion`), so a ranking measured here is
the ranking a client gets.

`SystemScorer` encodes a `RetrievalSet` once, indexes it for BM25 once and keeps every re-ranker score it
has computed, so scoring many settings on one set (choosing the BM25 weight, the re-rank depth and the
re-rank weight on dev) costs one encoding and one re-ranker pass per (query, candidate) pair.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from lmplatform.data.fields import join_fields
from lmplatform.data.readers import BadRow, detect_format, read_rows
from lmplatform.evaluation.retrieval_validation import (
    RetrievalSet,
    hybrid_hits,
    rank_against_query,
    score_rankings,
    summarize,
)
from lmplatform.retrieval.fusion import combine_rerank
from lmplatform.retrieval.metadata_fusion import MetadataFusion, candidate_pool, fusion_features
from lmplatform.retrieval.settings import (
    MetadataFusionConfig,
    MetadataFusionWeights,
    RetrievalValidationConfig,
    SearchSettings,
)
from lmplatform.retrieval.store import scalar_fields

Hits = list[tuple[int, float]]


@dataclass
class SystemChoice:
    """`SystemScorer.choose`'s answer: the chosen settings, and the mean metrics of every setting tried."""

    settings: SearchSettings
    metric: str
    tried: list[dict[str, Any]] = field(default_factory=list)  # {"bm25_weight"|"rerank_depth"|..., "metrics": {...}}


@dataclass
class SetMetadata:
    """The metadata of a set's texts, per query and per candidate (an empty mapping for a text without any)."""

    queries: list[Mapping[str, Any]]
    candidates: list[Mapping[str, Any]]

    @classmethod
    def of(cls, rset: RetrievalSet, by_text: Mapping[str, Mapping[str, Any]]) -> "SetMetadata":
        return cls([by_text.get(t, {}) for t in rset.query_texts], [by_text.get(t, {}) for t in rset.candidate_texts])


def text_metadata(corpus: Sequence[str | Path], fields: Sequence[str], keep: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each document's `keep` fields that hold a scalar, by its text (`fields` joined with '. ', as pairs files and
    distractors join them); the first document of a text wins."""
    out: dict[str, dict[str, Any]] = {}
    for path in corpus:
        for row in read_rows(str(path), detect_format(path)):
            if not isinstance(row, BadRow):
                out.setdefault(join_fields(row.fields, list(fields)), scalar_fields(row.fields, keep))
    return out


class EncodedOnce:
    """An encoder that encodes each distinct text once and keeps its vector: a second set over the same corpus (the
    metadata fusion's training queries beside the select set) encodes only its own queries."""

    def __init__(self, encoder: Any):
        self.encoder = encoder
        self.vectors: dict[str, np.ndarray] = {}

    def encode(self, texts: Sequence[str], batch_size: int = 64, **kwargs: Any) -> np.ndarray:
        if not texts:
            return self.encoder.encode([], batch_size=batch_size, **kwargs)
        missing = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if missing:
            self.vectors.update(zip(missing, self.encoder.encode(missing, batch_size=batch_size, **kwargs)))
        return np.stack([self.vectors[t] for t in texts])


class SystemScorer:
    """Rankings and per-query metrics of one bi-encoder (and optionally one re-ranker) under any settings."""

    def __init__(self, encoder: Any, rset: RetrievalSet, cfg: RetrievalValidationConfig,
                 reranker: Any = None, batch_size: int = 64, metadata: Optional[SetMetadata] = None):
        """encoder, reranker: the models as the service runs them (fp32), so scores match the served ones.
        metadata: the texts' metadata, for mode 'metadata'."""
        self.encoder, self.rset, self.cfg, self.reranker = encoder, rset, cfg, reranker
        self.batch_size, self.metadata = batch_size, metadata
        vectors = encoder.encode([*rset.query_texts, *rset.candidate_texts], batch_size=batch_size)
        self.candidate_vectors = vectors[len(rset.query_texts):]  # [n, dim], for an index of the set (a served replay)
        self.dense = vectors[: len(rset.query_texts)] @ self.candidate_vectors.T  # [q, n] every query with every candidate
        self._pair_scores: dict[tuple[int, int], float] = {}
        self._pools: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}

    def pools(self, cfg: MetadataFusionConfig) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query, its metadata-fusion pool (candidate indices, `candidate_pool`) and their feature rows."""
        if self.metadata is None:
            raise ValueError("mode 'metadata' needs the set's metadata, and the scorer was given none")
        key = cfg.model_dump_json(exclude={"regularization"})
        if key not in self._pools:
            bm25 = self.rset.bm25().query_scores(self.rset.query_texts)
            out = []
            for row, dense in enumerate(self.dense):
                lexical = np.asarray(bm25[row], dtype=np.float64)
                pool = candidate_pool(dense, lexical, cfg.pool, excluded=sorted(self.rset.excluded[row]))
                out.append((pool, fusion_features(dense[pool], lexical[pool], self.metadata.queries[row],
                                                  [self.metadata.candidates[i] for i in pool], cfg)))
            self._pools[key] = out
        return self._pools[key]

    def fit_metadata_fusion(self, cfg: MetadataFusionConfig) -> MetadataFusion:
        """A fusion fitted on this set's pools (a training set: a candidate is labelled by its relevance)."""
        pools = self.pools(cfg)
        labels = [np.isin(pool, list(self.rset.relevant[row])) for row, (pool, _) in enumerate(pools)]
        return MetadataFusion.fit([features for _, features in pools], labels, cfg)

    # -- rankings -------------------------------------------------------------------------------------
    def first_stage(self, settings: SearchSettings, depth: int) -> list[Hits]:
        """Per query, (candidate, score) best first: dense search, BM25 fused with it (`hybrid_hits`), or the metadata
        fusion's ranking of the pool (`metadata_search`'s)."""
        if settings.mode == "hybrid":
            return hybrid_hits(self.dense, self.rset.bm25(), self.rset, depth, settings.fusion_settings())
        if settings.mode == "metadata":
            assert settings.metadata_fusion is not None
            fusion = MetadataFusion.from_dict(settings.metadata_fusion)
            hits = []
            for row, (pool, features) in enumerate(self.pools(fusion.config)):
                scores = dict(zip(pool.tolist(), fusion.score(features).tolist()))
                ids = rank_against_query(list(scores), list(scores.values()), self.rset.relevant[row], complete=True)
                hits.append([(i, scores[i]) for i in ids[:depth]])
            return hits
        out = []
        for row, scores in enumerate(self.dense):
            excluded = self.rset.excluded[row]
            top = min(len(scores), depth + len(excluded))
            nearest = [int(i) for i in np.argpartition(-scores, top - 1)[:top] if int(i) not in excluded]
            ids = rank_against_query(nearest, scores[nearest].tolist(), self.rset.relevant[row], complete=True)
            out.append([(i, float(scores[i])) for i in ids[:depth]])
        return out

    def hits(self, settings: SearchSettings) -> list[Hits]:
        """Per query, the system's final (candidate, score) list, at least `cfg.depth()` deep where it can be."""
        depth = max(self.cfg.depth(), settings.rerank_depth)
        first = self.first_stage(settings, depth)
        if settings.reranker is None:
            return first
        if self.reranker is None:
            raise ValueError("these settings re-rank, but the scorer was given no re-ranker")
        self._score_pairs([(row, i) for row, hits in enumerate(first) for i, _ in hits[: settings.rerank_depth]])
        out = []
        for row, hits in enumerate(first):
            top = hits[: settings.rerank_depth]
            scores = [self._pair_scores[(row, i)] for i, _ in top]
            mixed = [(int(d), s) for d, s in combine_rerank([(str(i), s) for i, s in hits], scores, settings.rerank_weight)]
            # The re-ranked hits by their mixed score, ties against the query; the rest below them in first-stage order
            # (their scores are the first stage's, not comparable with the mixed ones).
            reranked = dict(mixed[: len(top)])
            ids = rank_against_query(list(reranked), list(reranked.values()), self.rset.relevant[row], complete=True)
            out.append([(i, reranked[i]) for i in ids] + mixed[len(top):])
        return out

    def _score_pairs(self, pairs: Sequence[tuple[int, int]]) -> None:
        """Re-ranker scores of the (query row, candidate) pairs not scored yet, in one batched pass."""
        todo = [pair for pair in dict.fromkeys(pairs) if pair not in self._pair_scores]
        if not todo:
            return
        queries = [self.rset.query_texts[row] for row, _ in todo]
        documents = [self.rset.candidate_texts[i] for _, i in todo]
        scores = self.reranker.score(queries, documents, batch_size=self.batch_size)
        self._pair_scores.update(zip(todo, (float(s) for s in scores)))

    # -- metrics --------------------------------------------------------------------------------------
    def per_query(self, settings: SearchSettings) -> dict[str, np.ndarray]:
        """Per-query metrics [queries] of the system (`score_rankings`)."""
        rankings = [[i for i, _ in hits[: self.cfg.depth()]] for hits in self.hits(settings)]
        return score_rankings(rankings, self.rset, self.cfg)

    def means(self, settings: SearchSettings) -> dict[str, float]:
        return summarize(self.per_query(settings), self.rset)

    def choose(self, base: SearchSettings, bm25_weights: Sequence[float] = (), rerank_depths: Sequence[int] = (),
               rerank_weights: Sequence[float] = (), metric: str = "ir_mrr_at_10",
               metadata_fusions: Sequence[MetadataFusionWeights] = ()) -> SystemChoice:
        """Settings from `base` with the values that score best on `metric` over this set (a dev set): first the
        BM25 weight of the hybrid first stage (when `base.mode` is hybrid); then, of `metadata_fusions` (fitted on
        training queries), the best is kept as `metadata_fusion` and becomes the mode when it beats that first stage;
        then the re-rank depth and weight together (when `base.reranker` is set; a weight of 0 drops the re-ranker).
        An empty list keeps `base`'s value. Ties go to the earlier value."""
        if metric not in self.cfg.ranking_metric_names():
            raise ValueError(f"metric {metric!r} is not scored; choose one of {', '.join(self.cfg.ranking_metric_names())}")
        tried: list[dict[str, Any]] = []

        def best(candidates: list[dict[str, Any]], settings: SearchSettings) -> SearchSettings:
            scored = []
            for values in candidates:
                trial = settings.model_copy(update=values)
                scored.append((trial, self.means(trial)))
                tried.append({**values, "metrics": scored[-1][1]})
            return max(scored, key=lambda pair: pair[1][metric])[0]  # max keeps the first of equals

        settings = base
        if base.mode == "hybrid" and bm25_weights:
            first_stage = settings.model_copy(update={"reranker": None})
            weight = best([{"bm25_weight": float(w)} for w in bm25_weights], first_stage).bm25_weight
            settings = settings.model_copy(update={"bm25_weight": weight})
        if metadata_fusions:
            first_stage = settings.model_copy(update={"reranker": None})
            current = self.means(first_stage)[metric]
            scored = []
            for fusion in metadata_fusions:
                scored.append((fusion, self.means(first_stage.model_copy(update={"mode": "metadata",
                                                                                 "metadata_fusion": fusion}))))
                tried.append({"metadata_regularization": fusion.config.regularization, "metrics": scored[-1][1]})
            fusion, means = max(scored, key=lambda pair: pair[1][metric])
            settings = settings.model_copy(update={"metadata_fusion": fusion, "mode": "metadata"}
                                           if means[metric] > current else {"metadata_fusion": fusion})
        if base.reranker is not None and (rerank_depths or rerank_weights):
            grid = [{"rerank_depth": int(d), "rerank_weight": float(v)}
                    for d in (rerank_depths or [base.rerank_depth]) for v in (rerank_weights or [base.rerank_weight])]
            settings = best(grid, settings)
            if settings.rerank_weight == 0.0:  # dev gives the re-ranker no say: serving it would cost time for nothing
                settings = settings.model_copy(update={"reranker": None})
        return SystemChoice(settings, metric, tried)


def load_scorer(model: str, rset: RetrievalSet, cfg: RetrievalValidationConfig, reranker: Optional[str] = None,
                max_seq_length: Optional[int] = None, metadata: Optional[SetMetadata] = None) -> SystemScorer:
    """A scorer for a bi-encoder folder (or 'default', models:/...) and an optional cross-encoder folder."""
    from lmplatform.models.encoder import Encoder

    encoder = EncodedOnce(Encoder.from_pretrained(model, max_seq_length=max_seq_length))
    cross = None
    if reranker is not None:
        from lmplatform.models.cross_encoder import CrossEncoder

        cross = CrossEncoder.from_pretrained(reranker)
    return SystemScorer(encoder, rset, cfg, cross, cfg.batch_size, metadata)
