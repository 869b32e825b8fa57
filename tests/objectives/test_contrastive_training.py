"""Real Ray Train runs of the bi-encoder (2 workers, gathered negatives) and DeCLUTR objectives, tracked in MLflow."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from lmplatform.jobs.train_run import run_training
from lmplatform.objectives.run_config import load_run_config
from tests.conftest import TOKEN_WORDS, write_corpus


def _common(tiny_bert: Path, data: Path, mlflow_uri: str, storage: Path) -> list[str]:
    return [
        f"model.name_or_path={tiny_bert}",
        "model.max_seq_length=32",
        f"data.train_paths={data}",
        "data.validation_fraction=0.25",
        "optim.lr=1e-3",
        "optim.warmup_ratio=0",
        "scaling.cpus_per_worker=1",
        f"checkpoint.storage_path={storage}",
        f"tracking.tracking_uri={mlflow_uri}",
        "tracking.experiment=tests",
        "tracking.log_every_n_steps=2",
        "tracking.register_model=false",
    ]


def _write_pairs(path: Path, n: int = 96) -> Path:
    rng = random.Random(0)
    with path.open("w") as handle:
        for _ in range(n):
            words = rng.sample(TOKEN_WORDS, 4)
            document = words[:3] + [rng.choice(TOKEN_WORDS)]
            rng.shuffle(document)
            negative = rng.sample(TOKEN_WORDS, 4)
            handle.write(json.dumps({"q": " ".join(words), "d": " ".join(document), "neg": [" ".join(negative)]}) + "\n")
        handle.write('{"q": "a row without its document"}\n')
    return path


def test_biencoder_on_two_workers_trains_logs_and_exports(ray_session, tiny_bert, mlflow_uri, tmp_path) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.models.encoder import Encoder

    pairs = _write_pairs(tmp_path / "pairs.jsonl")
    distractors = write_corpus(tmp_path / "corpus.jsonl", n=50)
    cfg = load_run_config(None, _common(tiny_bert, pairs, mlflow_uri, tmp_path / "runs") + [
        "objective.name=biencoder", "data.query_field=q", "data.document_field=d", "data.hard_negative_field=neg",
        "objective.symmetric=true", "objective.temperature=0.1", "objective.learnable_temperature=true",
        "scaling.num_workers=2", "optim.batch_size=8", "optim.max_steps=8",
        f"retrieval_validation.distractors.paths=[{distractors}]",
    ])
    result = run_training(cfg)

    metrics = result.metrics
    assert metrics["step"] == 8
    assert metrics["val_ranking_loss"] < metrics["val_ranking_loss_initial"]
    # lexical overlap already ranks most pairs right at random init, so only sanity-check the ranks
    assert 0 < metrics["val_inbatch_accuracy"] <= metrics["val_inbatch_mrr"] <= 1
    assert metrics["val_inbatch_candidates"] > 1
    # corpus-level: every validation query against the validation documents and 50 distractors,
    # each of the 2 workers encoding half of the texts
    assert metrics["val_ir_candidates"] > 50 and metrics["val_ir_queries"] > 10
    for name in ("recall_at_1", "recall_at_10", "mrr_at_10", "ndcg_at_10", "map_at_100"):
        assert 0 <= metrics[f"val_ir_{name}_initial"] <= 1 and 0 <= metrics[f"val_ir_{name}"] <= 1
    assert metrics["val_ir_recall_at_1"] <= metrics["val_ir_mrr_at_10"] <= 1
    client = MlflowClient(mlflow_uri)
    assert [m.step for m in client.get_metric_history(result.mlflow_run_id, "val_ir_ndcg_at_10")] == [0, 8]
    run = client.get_run(result.mlflow_run_id)
    assert run.data.tags["lmp.objective"] == "biencoder"
    assert run.data.metrics["data/bad_rows"] == 1 and run.data.metrics["data/train_pairs"] > 0
    history = client.get_metric_history(result.mlflow_run_id, "ranking_loss")
    assert [m.step for m in history] == [2, 4, 6, 8]
    temperatures = [m.value for m in client.get_metric_history(result.mlflow_run_id, "temperature")]
    assert temperatures[-1] != pytest.approx(0.1)  # the learnable τ moved
    encoder = Encoder.from_pretrained(result.model_dir)
    assert encoder.encode(["printer jams"]).shape == (1, 32)
    assert {a.path for a in client.list_artifacts(result.mlflow_run_id, "model")} >= {"model/lmplatform_encoder.json"}


def test_declutr_reports_dropped_documents_and_trains(ray_session, tiny_bert, mlflow_uri, tmp_path) -> None:
    from mlflow.tracking import MlflowClient
    from transformers import AutoTokenizer

    from lmplatform.config.schema import DataConfig
    from lmplatform.data.corpus import TRAIN, local_documents, scan_corpus

    corpus = write_corpus(tmp_path / "corpus.jsonl", n=120)  # 6 to 24 words per document
    pairs = _write_pairs(tmp_path / "pairs.jsonl", n=30)
    cfg = load_run_config(None, _common(tiny_bert, corpus, mlflow_uri, tmp_path / "runs") + [
        "objective.name=declutr", "objective.min_span=2", "objective.max_span=4", "objective.temperature=0.1",
        "optim.batch_size=8", "optim.max_steps=4",
        # DeCLUTR trains on raw text; its retrieval validation names pairs of its own
        f"retrieval_validation.pairs={{train_paths: [{pairs}], query_field: q, document_field: d, validation_fraction: 0}}",
        "retrieval_validation.split=all",
    ])
    result = run_training(cfg)

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert))
    plan = scan_corpus(DataConfig(train_paths=[str(corpus)], validation_fraction=0.25), use_ray=False)
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in local_documents(plan, TRAIN)]
    dropped = sum(n < 16 for n in lengths)
    assert 0 < dropped < len(lengths)
    run = MlflowClient(mlflow_uri).get_run(result.mlflow_run_id)
    assert run.data.metrics["data/declutr_dropped"] == dropped
    assert run.data.metrics["data/declutr_dropped_fraction"] == pytest.approx(dropped / len(lengths))
    assert result.metrics["step"] == 4
    for key in ("val_contrastive_loss", "val_mlm_loss", "val_inbatch_accuracy", "val_perplexity", "val_ir_ndcg_at_10"):
        assert key in result.metrics
    assert result.metrics["val_ir_queries"] == 30
    assert {"temperature", "contrastive_loss", "mlm_loss"} <= set(run.data.metrics)


def test_cross_encoder_data_and_recipe_on_ray_datasets(ray_session, tiny_bert, tmp_path) -> None:
    """The driver mines negatives; Ray Data batches (a list column) go through the worker recipe.

    Cheaper than a TorchTrainer run: the Train loop itself is covered by the runs above.
    """
    import torch

    from lmplatform.objectives.cross_encoder.objective import build_recipe, prepare_data

    pairs = _write_pairs(tmp_path / "pairs.jsonl", n=40)
    cfg = load_run_config(None, _common(tiny_bert, pairs, "sqlite:///unused.db", tmp_path / "runs") + [
        "objective.name=cross_encoder", "data.query_field=q", "data.document_field=d", "data.hard_negative_field=neg",
        "objective.negatives=mined", f"objective.miner_model={tiny_bert}", "objective.mining_top_k=4",
        "objective.negatives_per_positive=2",
    ])
    prepared = prepare_data(cfg)
    assert prepared.train_examples == prepared.metrics["data/train_pairs"] > 0
    assert prepared.metrics["data/bad_rows"] == 1 and prepared.metrics["data/pairs_with_fewer_negatives"] == 0
    recipe = build_recipe(cfg)
    batch = recipe.collate(next(iter(prepared.datasets["train"].iter_batches(batch_size=4, batch_format="numpy"))))
    assert batch["labels"].tolist() == [1.0, 0.0, 0.0] * 4  # own hard negative + 1 mined per positive
    loss, metrics = recipe.objective(recipe.model, batch)
    assert torch.isfinite(loss) and 0 <= metrics["accuracy"] <= 1
    validation = [recipe.collate(b) for b in prepared.datasets["validation"].iter_batches(batch_size=4, batch_format="numpy")]
    sums = recipe.evaluate(recipe.model, validation, 0)
    assert sums["inbatch_pairwise_accuracy"][1] == 2 * sums["inbatch_mrr"][1] == 2 * prepared.metrics["data/validation_pairs"]
    recipe.export(recipe.model, tmp_path / "reranker")
    from lmplatform.models.cross_encoder import CrossEncoder

    assert CrossEncoder.from_pretrained(tmp_path / "reranker").rerank("printer jams", ["a", "b"]).shape == (2,)
    # corpus-level validation re-ranks BM25's top 5 of every validation query
    from lmplatform.evaluation.retrieval_validation import CorpusRetrievalValidator, prepare_retrieval_set

    cfg = load_run_config(None, base=cfg.model_dump(mode="json") | {"retrieval_validation": {"candidates": 5}})
    rset = prepare_retrieval_set(cfg)
    assert all(len(row) <= 100 for row in rset.first_stage) and rset.counts["first_stage_queries_with_a_relevant"] > 0
    ir = CorpusRetrievalValidator(rset, cfg.retrieval_validation, recipe.retrieval_view)(recipe.model)
    assert ir["ir_queries"] == len(rset.query_texts) and 0 <= ir["ir_recall_at_1"] <= ir["ir_recall_at_20"] <= 1
