"""A real mine stage of a `mine -> train` pipeline on the demo pairs with a tiny BERT: it encodes on Ray actors,
searches exactly, writes and logs the pairs file, which the next stage's run config reads with group-aware batches.
And `mine_pairs` where the queries are corpus documents too: each text is encoded once and the negatives stay right."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from lmplatform.data.groups import group_texts
from lmplatform.data.pairs import Pair

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo"


def test_a_mine_stage_writes_the_pairs_the_next_stage_reads_in_group_aware_batches(
    ray_session, tiny_bert, mlflow_uri, tmp_path
) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.evaluation.retrieval_validation import read_distractors
    from lmplatform.objectives.registry import objective_spec
    from lmplatform.pipeline.config import build_stage_config, load_pipeline_config
    from lmplatform.pipeline.runner import STAGE_TAG, run_pipeline, stage_outputs
    from lmplatform.pipeline.state import FINISHED
    from lmplatform.retrieval.settings import DistractorConfig

    spec = {
        "name": "mine-train",
        "tracking": {"tracking_uri": mlflow_uri, "experiment": "pipelines"},
        "storage_path": str(tmp_path / "pipelines"),
        "stages": [
            {"name": "mined", "init_from": str(tiny_bert), "mine": {
                "pairs": {"train_paths": [str(DEMO / "pairs_train.jsonl")]},
                "distractors": {"paths": [str(DEMO / "reports.jsonl")], "fields": ["title", "text"]},
                "num_negatives": 2, "range_min": 1, "range_max": 20, "relative_margin": None,
                "max_seq_length": 32, "batch_size": 32, "precision": "bf16"}},
            {"name": "train", "init_from": str(tiny_bert), "run": {
                "model": {"max_seq_length": 32},
                "data": {"train_paths": ["stage:mined"], "hard_negative_field": "hard_negatives", "validation_fraction": 0.2},
                "objective": {"name": "biencoder", "group_aware_batches": True, "max_hard_negatives": 1},
                "optim": {"batch_size": 8, "max_steps": 2, "lr": 1e-3},
                "scaling": {"cpus_per_worker": 1},
                "tracking": {"log_every_n_steps": 1, "register_model": False}}},
        ],
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(spec))
    cfg = load_pipeline_config(path)
    # The mine stage alone: a bi-encoder stage's Ray Train run on a mine stage's pairs (with their hard negatives) is
    # tests/tune/test_pipeline_trials.py's; group-aware batches on Train workers, test_group_batches_on_workers.py's.
    result = run_pipeline(cfg.model_copy(update={"stages": [cfg.stage("mined")]}))

    mined = result.state.stages["mined"]
    assert mined.status == FINISHED and mined.model_dir is None
    rows = [json.loads(line) for line in Path(mined.output_path).read_text().splitlines()]
    assert len(rows) == 108 and all(len(row["hard_negatives"]) == 2 for row in rows)
    pairs = [Pair(row["query"], row["document"]) for row in rows]
    for row, group in zip(rows, group_texts(pairs)):
        assert not set(row["hard_negatives"]) & group  # never the query's duplicate group, its query or positive

    client = MlflowClient(mlflow_uri)
    run = client.get_run(mined.mlflow_run_id)
    assert run.data.tags[STAGE_TAG] == "mined" and run.data.tags["mlflow.parentRunId"] == result.parent_run_id
    assert run.data.metrics["mine/pairs"] == 108 and run.data.metrics["mine/distractors"] == 320
    assert run.data.metrics["mine/candidates"] == 320  # every document of the pairs is one of the reports
    assert run.data.metrics["mine/negatives"] == sum(len(row["hard_negatives"]) for row in rows)
    distractors = read_distractors(DistractorConfig.model_validate(spec["stages"][0]["mine"]["distractors"]), True)[0]
    candidates = {row["document"] for row in rows} | set(distractors)
    assert run.data.metrics["mine/encoded_texts"] == len(candidates | {row["query"] for row in rows})  # each text once
    assert [a.path for a in client.list_artifacts(mined.mlflow_run_id, "mined")] == ["mined/pairs.jsonl"]

    # The train stage's run config, as the pipeline builds it once the mine stage has finished: `stage:mined` is the
    # mined file, which the bi-encoder's data preparation reads into group-aware batches with the hard negatives.
    run_cfg = build_stage_config(cfg, cfg.stage("train"), str(tiny_bert), str(tmp_path / "runs"), "train",
                                 stage_outputs=stage_outputs(result.state))
    assert run_cfg.data.train_paths == [mined.output_path]
    prepared = objective_spec(run_cfg.objective.name).prepare_data(run_cfg)
    assert prepared.metrics["data/group_batches_epochs"] >= 1 and prepared.metrics["data/train_groups"] > 0
    assert prepared.metrics["data/rows_read"] == len(rows) and prepared.metrics["data/bad_rows"] == 0


# Every query is also a corpus document except the last; the two printer queries share their document,
# so each is in the other's duplicate group.
REPORTS = ["printer jams on floor two", "paper jam in the floor two printer", "printer jam again on floor two",
           "vpn drops after the certificate expired", "vpn disconnects every hour", "mail server disk is full",
           "login fails after password reset", "backup job queue is stuck", "mobile app screen stays blank",
           "database restart failed overnight", "invoice payment gateway times out"]
MINED = [("paper jam in the floor two printer", "printer jams on floor two"),
         ("printer jam again on floor two", "printer jams on floor two"),
         ("vpn disconnects every hour", "vpn drops after the certificate expired"),
         ("the mail server disk filled up again", "mail server disk is full")]
GROUPS = {"paper jam in the floor two printer": set(REPORTS[:3]), "printer jam again on floor two": set(REPORTS[:3]),
          "vpn disconnects every hour": set(REPORTS[3:5]),
          "the mail server disk filled up again": {"the mail server disk filled up again", REPORTS[5]}}


def test_queries_that_are_corpus_documents_are_encoded_once_and_never_their_own_negatives(
    ray_session, tiny_bert, tmp_path, monkeypatch
) -> None:
    from lmplatform.pipeline import mine
    from lmplatform.pipeline.mine_config import MineConfig

    (tmp_path / "reports.jsonl").write_text("".join(json.dumps({"text": text}) + "\n" for text in REPORTS))
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps({"query": q, "document": d}) + "\n" for q, d in MINED))
    cfg = MineConfig.model_validate({
        "pairs": {"train_paths": [str(tmp_path / "pairs.jsonl")]},
        "distractors": {"paths": [str(tmp_path / "reports.jsonl")]},
        "num_negatives": 3, "range_min": 0, "range_max": 20, "relative_margin": None, "max_seq_length": 32})
    encoded: dict[str, np.ndarray] = {}
    real_encode = mine.encode_texts

    def spy(texts, model, cfg, work_dir):
        vectors = real_encode(texts, model, cfg, work_dir)
        assert not encoded and len(set(texts)) == len(texts), "one encoder call, each text once"
        encoded.update(zip(texts, vectors))
        return vectors

    monkeypatch.setattr(mine, "encode_texts", spy)
    work = tmp_path / "work"
    work.mkdir()
    pairs, selections, metrics = mine.mine_pairs(cfg, str(tiny_bert), work)

    assert set(encoded) == set(REPORTS) | {query for query, _ in MINED}  # 11 reports and the one query that is none
    assert metrics["mine/encoded_texts"] == len(encoded) == 12 and metrics["mine/candidates"] == 11
    assert len(pairs) == len(selections) == 4
    for pair, selection in zip(pairs, selections):
        # the reference ranking, from the vectors each text was encoded to: a query given another text's
        # vector, or a candidate, would rank differently
        score = {text: float(encoded[pair.query] @ encoded[text]) for text in REPORTS if text not in GROUPS[pair.query]}
        expected = sorted(score, key=score.get, reverse=True)[:3]
        assert selection.negatives == expected, pair.query
        assert selection.scores == pytest.approx([score[text] for text in expected], abs=1e-4)
        # the query itself is a candidate (when a report) and the top hit; it and its group are set aside
        assert selection.excluded == len(GROUPS[pair.query] & set(REPORTS))
