"""A pipeline stage's evaluations: registered evaluations that score one model, run by name (the `retrieval` one: a
pairs file scored as corpus-level retrieval, the score R holds is MRR@k)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmplatform.config import ConfigError
from lmplatform.evaluation.registry import evaluation_spec
from lmplatform.evaluation.stage_evaluation import StageEvaluationConfig
from tests.conftest import write_corpus


def _pairs(path: Path, corpus: Path, shuffled: bool) -> Path:
    """Each text paired with itself plus a suffix (an easy match for any encoder), or with another text."""
    texts = [json.loads(line)["text"] for line in corpus.read_text().splitlines()]
    documents = texts[1:] + texts[:1] if shuffled else texts
    path.write_text("".join(json.dumps({"query": q, "document": d + " again"}) + "\n" for q, d in zip(texts, documents)))
    return path


def test_retrieval_evaluation_ranks_every_query_against_the_pool(tiny_bert: Path, tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl", n=40)
    scores = {}
    for shuffled in (False, True):
        cfg = StageEvaluationConfig.model_validate({
            "name": "retrieval", "task": "pairs", "max_seq_length": 32,
            "data": {"train_paths": [str(_pairs(tmp_path / f"pairs_{shuffled}.jsonl", corpus, shuffled))]},
            "retrieval": {"split": "all", "distractors": {"paths": [str(corpus)], "fields": ["text"]}, "mrr_k": 5}})
        result = evaluation_spec(cfg.name).evaluate_model(str(tiny_bert), cfg, None)
        # 40 queries against their 40 documents and the 40 corpus texts; a query's own text is never a candidate
        assert result.metrics["ir_queries"] == 40 and result.metrics["ir_candidates"] == 80
        assert result.score == result.metrics["ir_mrr_at_5"]
        scores[shuffled] = result.score
    assert scores[False] > 0.9 > scores[True]  # near-copies are found; unrelated documents are not


def test_retrieval_settings_belong_to_the_retrieval_evaluation(tmp_path: Path) -> None:
    with pytest.raises((ConfigError, ValueError), match="apply to evaluation 'retrieval' only"):
        StageEvaluationConfig.model_validate({"name": "old_domain_mlm_loss", "data": {"train_paths": [str(tmp_path)]},
                                              "retrieval": {"split": "all"}})
    with pytest.raises((ConfigError, ValueError), match="`mlm_head_from` settings apply to evaluation 'old_domain_mlm_loss'"):
        StageEvaluationConfig.model_validate({"name": "retrieval", "data": {"train_paths": [str(tmp_path)]},
                                              "mlm_head_from": "default"})


def test_a_stage_evaluation_names_a_registered_evaluation_that_scores_one_model(tmp_path: Path) -> None:
    data = {"train_paths": [str(tmp_path)]}
    with pytest.raises((ConfigError, ValueError), match="unknown evaluation 'sts'; available: old_domain_mlm_loss, retrieval"):
        StageEvaluationConfig.model_validate({"name": "sts", "data": data})  # an lmp evaluate task only
    with pytest.raises(ValueError, match="does not score one model"):
        evaluation_spec("sts").evaluate_model(str(tmp_path), StageEvaluationConfig(name="retrieval", data=data), None)
