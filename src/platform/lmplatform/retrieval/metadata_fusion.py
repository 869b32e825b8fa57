"""Learned fusion of first-stage scores with the documents' metadata: a logistic regression over features.

Duplicate bug reports share more than words: they name the same product and component, and they are filed close in
time. Each candidate of a query's pool (the union of the dense and BM25 top `pool`) gets one feature row:

    dense_norm    (s_dense(q, c) - min_pool s_dense) / (max_pool s_dense - min_pool s_dense)
    bm25_norm     the same for BM25 (0 for a candidate that shares no term with the query)
    dense         s_dense(q, c), the cosine itself
    same_<field>  1 if q and c share a non-empty value of <field>, else 0              (one per `match_fields`;
                  a list the importer joined, "fs, test", shares each of its items)
    log_days      log(1 + |t_c - t_q| / 1 day), 0 when either time is unknown         (with a `time_field`)
    earlier       1 if t_c < t_q, else 0                                               (with a `time_field`)
    time_unknown  1 if either time is unknown, else 0                                  (with a `time_field`)

score(q, c) = w · features(q, c) + b, with w and b fitted by L2-regularised logistic regression (scikit-learn) on the
pools of training queries, a row labelled 1 when the candidate is relevant. Ranking a pool by score needs no
probability calibration, so the regularisation `regularization` (scikit-learn's C) is the one setting to choose on dev.

A query's time that does not parse is an error naming the field (the client's to mend); a candidate's counts as
unknown, so one bad stored value never fails a search. The config (`MetadataFusionConfig`) and a fitted fusion as
data (`MetadataFusionWeights`, what a model version's search settings carry to the service) are in
`retrieval.settings`, which loads no numpy; times are read by `data.fields.parse_time`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from lmplatform.data.fields import LIST_SEPARATOR, SECONDS_PER_DAY, parse_time
from lmplatform.data.readers import DataError
from lmplatform.retrieval.settings import MetadataFusionConfig, MetadataFusionWeights, feature_names


def _stored_time(value: Any) -> Optional[float]:
    """A candidate's time; one that does not parse is unknown (see the module doc)."""
    try:
        return parse_time(value, "")
    except DataError:
        return None


def shares_value(wanted: Any, value: Any) -> bool:
    """True when both values are non-empty and equal, or share an item of the lists joined into them ("fs, test"
    and "fs": a report filed under two components matches one filed under either)."""
    if not wanted or not value:
        return False
    if value == wanted:
        return True
    if isinstance(wanted, str) and isinstance(value, str) and (LIST_SEPARATOR in wanted or LIST_SEPARATOR in value):
        return not _items(wanted).isdisjoint(_items(value))
    return False


def _items(value: str) -> set[str]:
    return {item.strip() for item in value.split(LIST_SEPARATOR) if item.strip()}


def candidate_pool(dense: np.ndarray, bm25: np.ndarray, size: int, excluded: Sequence[int] = ()) -> np.ndarray:
    """Indices of a query's pool: the union of the `size` best by dense and by BM25 score over all documents
    ([documents] each), less `excluded` (the query itself) and BM25's non-matches; ascending."""
    dense, bm25 = np.asarray(dense, dtype=np.float64).copy(), np.asarray(bm25, dtype=np.float64).copy()
    dense[list(excluded)], bm25[list(excluded)] = -np.inf, -np.inf
    k = min(size, len(dense))
    best_dense = np.argpartition(-dense, k - 1)[:k] if k < len(dense) else np.arange(len(dense))
    best_bm25 = np.argpartition(-bm25, k - 1)[:k] if k < len(bm25) else np.arange(len(bm25))
    pool = np.union1d(best_dense[np.isfinite(dense[best_dense])], best_bm25[bm25[best_bm25] > 0])
    return pool.astype(np.int64)


def _normalised(scores: np.ndarray) -> np.ndarray:
    low, high = float(scores.min()), float(scores.max())
    return (scores - low) / (high - low) if high > low else np.zeros_like(scores)


def fusion_features(dense: np.ndarray, bm25: np.ndarray, query: Mapping[str, Any], candidates: Sequence[Mapping[str, Any]],
                    cfg: MetadataFusionConfig) -> np.ndarray:
    """Feature rows [len(candidates), len(feature_names(cfg))] of one query's pool (see the module doc).

    dense, bm25: [len(candidates)] first-stage scores of the pool's candidates; query, candidates: their metadata."""
    dense, bm25 = np.asarray(dense, dtype=np.float64), np.asarray(bm25, dtype=np.float64)
    if not (len(dense) == len(bm25) == len(candidates)):
        raise ValueError(f"{len(dense)} dense scores, {len(bm25)} BM25 scores and {len(candidates)} candidates")
    if not len(candidates):
        return np.zeros((0, len(feature_names(cfg))))
    columns = [_normalised(dense), _normalised(bm25), dense]
    for field in cfg.match_fields:
        wanted = query.get(field)
        columns.append(np.array([float(shares_value(wanted, c.get(field))) for c in candidates]))
    if cfg.time_field:
        at = parse_time(query.get(cfg.time_field), cfg.time_field)
        times = np.array([np.nan if (t := _stored_time(c.get(cfg.time_field))) is None or at is None
                          else t - at for c in candidates])
        unknown = np.isnan(times)
        days = np.where(unknown, 0.0, times) / SECONDS_PER_DAY
        columns += [np.log1p(np.abs(days)), (days < 0).astype(np.float64), unknown.astype(np.float64)]
    return np.stack(columns, axis=1)


@dataclass
class MetadataFusion:
    """A fitted fusion: `score(features)` ranks a pool (higher first)."""

    config: MetadataFusionConfig
    weights: np.ndarray  # [features]
    bias: float

    @classmethod
    def fit(cls, features: Sequence[np.ndarray], labels: Sequence[np.ndarray], cfg: MetadataFusionConfig) -> "MetadataFusion":
        """Fit on the pools of training queries: features[i] [pool_i, f], labels[i] [pool_i] (1: relevant)."""
        from sklearn.linear_model import LogisticRegression

        x, y = np.concatenate(list(features)), np.concatenate(list(labels)).astype(int)
        if x.shape[1] != len(feature_names(cfg)):
            raise ValueError(f"features have {x.shape[1]} columns; the config makes {len(feature_names(cfg))}")
        if len(set(y.tolist())) < 2:
            raise ValueError("fitting the fusion needs relevant and irrelevant candidates in the training pools")
        model = LogisticRegression(C=cfg.regularization, max_iter=5000).fit(x, y)
        return cls(cfg, model.coef_[0].astype(np.float64), float(model.intercept_[0]))

    def score(self, features: np.ndarray) -> np.ndarray:
        """[pool] scores of a query's feature rows."""
        return np.asarray(features, dtype=np.float64) @ self.weights + self.bias

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.model_dump(), "bias": self.bias,
                "weights": dict(zip(feature_names(self.config), self.weights.tolist()))}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any] | MetadataFusionWeights) -> "MetadataFusion":
        fitted = payload if isinstance(payload, MetadataFusionWeights) else MetadataFusionWeights.model_validate(payload)
        names = feature_names(fitted.config)
        return cls(fitted.config, np.array([fitted.weights[n] for n in names], dtype=np.float64), fitted.bias)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=2))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "MetadataFusion":
        return cls.from_dict(json.loads(Path(path).read_text()))
