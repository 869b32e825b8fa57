"""Function trainables: the KNN classifier, KNN relation-extraction and re-rank depth scores, and the smoke function."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmplatform.tune.trials import knn_classification, knn_relations, quadratic, rerank_depth
from tests.graph.synthetic import write_synthetic_ade


def test_knn_classification_scores_and_caches_embeddings(tiny_bert: Path, tmp_path: Path) -> None:
    data = tmp_path / "labelled.jsonl"
    rows = [{"text": f"{word} issue number {i}", "label": word} for i in range(6) for word in ("printer", "vpn", "invoice")]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cache = tmp_path / "cache"
    first = knn_classification(k=3, data=str(data), model=str(tiny_bert), folds=3, max_seq_length=16, cache_dir=str(cache))
    assert first["documents"] == 18 and 0.0 <= first["val_macro_f1"] <= 1.0 and 0.0 <= first["val_accuracy"] <= 1.0
    assert len(list(cache.glob("*.npy"))) == 1
    again = knn_classification(k=3, data=str(data), model=str(tiny_bert), folds=3, max_seq_length=16, cache_dir=str(cache))
    assert again == first and len(list(cache.glob("*.npy"))) == 1  # the second trial read the cache


def test_quadratic_reports_a_learning_curve_towards_its_known_optimum() -> None:
    reports = list(quadratic(x=1.0, y=-2.0, steps=3))
    assert [r["final_score"] for r in reports] == [0.0, 0.0, 0.0]
    far = [r["score"] for r in quadratic(x=0.0, y=0.0, steps=3)]
    assert far == sorted(far, reverse=True) and far[-1] > 5.0


def test_knn_relations_scores_a_validation_split_of_the_fold_and_caches_word_vectors(tiny_bert: Path, tmp_path: Path) -> None:
    data, folds = write_synthetic_ade(tmp_path / "ade.jsonl", n=80)
    cache = tmp_path / "cache"
    args = dict(data=str(data), folds_file=str(folds), fold=0, model=str(tiny_bert), max_seq_length=32, cache_dir=str(cache))
    first = knn_relations(k_ner=1, k_re=3, **args)
    train = len(json.loads(folds.read_text())["split_0"]["train"])
    assert first["sentences"] == round(0.1 * train)  # a share of the fold's train part; its test part is never read
    # Entity words recur across sentences, so even a random tiny encoder tags most of them right.
    assert first["val_ner_macro_f1"] > 0.5
    assert 0.0 <= first["val_re_macro_f1"] <= first["val_re_minus_macro_f1"] <= 1.0
    assert len(list(cache.glob("words-*.npz"))) == 1
    assert knn_relations(k_ner=1, k_re=3, **args) == first and len(list(cache.glob("words-*.npz"))) == 1
    assert knn_relations(k_ner=25, k_re=3, **args)["val_ner_macro_f1"] != first["val_ner_macro_f1"]


def test_rerank_depth_reorders_only_inside_its_candidates(tiny_bert: Path) -> None:
    # The shipped demo duplicates (a validation split of them) against every report, BM25 first, then
    # a random tiny cross-encoder re-ranks the top N.
    retrieval = {"pairs": {"train_paths": ["data/demo/pairs.jsonl"], "validation_fraction": 0.3}, "recall_ks": [1, 20],
                 "distractors": {"paths": ["data/demo/reports.jsonl"], "fields": ["title", "text"]}}
    one, twenty = (rerank_depth(candidates=n, retrieval=retrieval, reranker=str(tiny_bert)) for n in (1, 20))
    assert {"ir_mrr_at_10", "ir_ndcg_at_10", "ir_recall_at_20", "ir_queries"} <= set(one)
    assert all(0.0 <= v <= 1.0 for k, v in one.items() if k.startswith("ir_") and k not in ("ir_queries", "ir_candidates"))
    # Re-ranking the top 20 reorders them but keeps the set: recall@20 cannot move, MRR does.
    assert twenty["ir_recall_at_20"] == one["ir_recall_at_20"]
    assert twenty["ir_mrr_at_10"] != one["ir_mrr_at_10"]


def test_relation_and_rerank_trials_refuse_data_they_cannot_score(tiny_bert: Path, tmp_path: Path) -> None:
    data, folds = write_synthetic_ade(tmp_path / "ade.jsonl", n=80)
    with pytest.raises(ValueError, match=r"fold 0 of .*folds.json: 0 training sentences, need at least 2"):
        knn_relations(k_ner=1, k_re=1, data=str(data), folds_file=str(folds), fold=0, model=str(tiny_bert), limit=1)
    with pytest.raises(ValueError, match=r"rerank_depth: retrieval.pairs is required"):
        rerank_depth(candidates=5, retrieval={}, reranker=str(tiny_bert))
