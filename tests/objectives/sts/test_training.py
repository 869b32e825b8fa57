"""One real Ray Train run of the STS objective on two workers: Spearman over the whole validation split."""
from __future__ import annotations

import json
import random

import pytest

from lmplatform.jobs.train_run import run_training
from lmplatform.objectives.run_config import load_run_config

WORDS = "printer database login timeout crash server disk memory network error vpn backup".split()


def test_sts_on_two_workers_reports_global_spearman(ray_session, tiny_bert, mlflow_uri, tmp_path) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.data.sts_pairs import STSPairs
    from lmplatform.evaluation.tasks.sts.task import score_sts
    from lmplatform.models.encoder import Encoder

    rng = random.Random(0)
    rows = []
    for i in range(80):
        a = [rng.choice(WORDS) for _ in range(6)]
        keep = rng.randint(0, 6)  # gold similarity = share of words kept
        b = a[:keep] + [rng.choice(WORDS) for _ in range(6 - keep)]
        rows.append({"sentence1": " ".join(a), "sentence2": " ".join(b), "score": 5.0 * keep / 6,
                     "split": "dev" if i % 4 == 0 else "train"})
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n" + json.dumps({"sentence1": "x", "score": 1}) + "\n")
    cfg = load_run_config(None, [
        f"model.name_or_path={tiny_bert}", "model.max_seq_length=16", f"data.train_paths={path}",
        "objective.name=sts", "objective.split_field=split", "optim.batch_size=8", "optim.lr=1e-3", "optim.max_steps=6",
        "scaling.num_workers=2", "scaling.cpus_per_worker=1", f"checkpoint.storage_path={tmp_path / 'runs'}",
        f"tracking.tracking_uri={mlflow_uri}", "tracking.experiment=tests", "tracking.register_model=false",
    ])
    result = run_training(cfg)

    run = MlflowClient(mlflow_uri).get_run(result.mlflow_run_id)
    assert run.data.metrics["data/bad_rows"] == 1 and run.data.metrics["data/validation_documents"] == 20
    # the 20 validation pairs are sharded over 2 workers; the reported value is the Spearman of all 20
    dev = [r for r in rows if r["split"] == "dev"]
    pairs = STSPairs("dev", [r["sentence1"] for r in dev], [r["sentence2"] for r in dev],
                     __import__("numpy").array([r["score"] for r in dev]), (0.0, 5.0))
    expected = score_sts(Encoder.from_pretrained(result.model_dir), pairs)[0]["spearman"]
    assert result.metrics["val_spearman"] == pytest.approx(expected, abs=1e-3)
    assert "val_spearman_initial" in result.metrics and "val_pearson" in result.metrics
