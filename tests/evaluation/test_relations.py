"""Real Ray: a graph_cl run on Ray Train, then the fold-parallel KNN evaluation logged to MLflow."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from lmplatform.jobs.train_run import run_training
from lmplatform.objectives.run_config import load_run_config
from tests.graph.synthetic import write_synthetic_ade


def test_ray_train_run_then_fold_parallel_evaluation(ray_session, tiny_bert, mlflow_uri, tmp_path) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.cli import app

    data, folds = write_synthetic_ade(tmp_path / "ade.jsonl", n=80)
    cfg = load_run_config(None, [
        f"model.name_or_path={tiny_bert}", "model.max_seq_length=32", f"data.train_paths={data}",
        "data.validation_fraction=0.2", "objective.name=graph_cl", "objective.variant=clgs",
        f"objective.folds_file={folds}", "objective.fold=0", "optim.batch_size=8", "optim.lr=1e-3", "optim.max_steps=4",
        "scaling.cpus_per_worker=1", f"checkpoint.storage_path={tmp_path / 'runs'}", f"tracking.tracking_uri={mlflow_uri}",
        "tracking.experiment=tests", "tracking.register_model=false", "tracking.log_every_n_steps=2",
    ])
    result = run_training(cfg)
    assert result.metrics["step"] == 4
    assert 0.0 <= result.metrics["val_clgs_accuracy"] <= 1.0 and result.metrics["val_clgs_loss"] > 0
    assert (result.model_dir / "graph_cl_head.pt").is_file() and (result.model_dir / "lmplatform_encoder.json").is_file()
    run = MlflowClient(mlflow_uri).get_run(result.mlflow_run_id)
    assert run.data.tags["lmp.objective"] == "graph_cl" and run.data.metrics["data/sentences"] == 80

    eval_yaml = tmp_path / "eval.yaml"
    eval_yaml.write_text(json.dumps({
        "data_path": str(data), "folds_file": str(folds), "ner_model": str(tiny_bert), "re_model": str(result.model_dir),
        "clgs_model": str(result.model_dir), "base_model": str(tiny_bert),
        "probe_models": {"baseline": str(tiny_bert), "clgs": str(result.model_dir)},
        "max_seq_length": 32, "k_candidates": [1, 3], "tsne_points": 60,
    }))
    out = CliRunner().invoke(app, ["graph", "evaluate", "-c", str(eval_yaml), "--output", str(tmp_path / "eval"),
                                   "--tracking-uri", mlflow_uri, "--experiment", "tests"])
    assert out.exit_code == 0, out.output
    summary = json.loads((tmp_path / "eval" / "relation_eval.json").read_text())
    assert [fold["fold"] for fold in summary["per_fold"]] == [0, 1]  # both folds, each a Ray task
    assert set(summary["probe"]) == {"baseline", "clgs"}
    for key in ("ner_macro_f1", "re_macro_f1", "re_minus_macro_f1"):
        assert 0.0 <= summary["knn"][key]["mean"] <= 1.0 and summary["knn"][key]["std"] >= 0.0
    # k is chosen per fold on that fold's validation split: recompute the NER curve and check the choice
    for fold in summary["per_fold"]:
        curve = _validation_ner_curve(data, folds, fold["fold"], tiny_bert, k_candidates=(1, 3))
        best = max(curve.values())
        assert fold["knn"]["k_ner"] == min(k for k, f1 in curve.items() if f1 == best)
        assert fold["knn"]["val_ner_macro_f1"] == pytest.approx(best)
    per_fold_k = [fold["knn"]["k_ner"] for fold in summary["per_fold"]]
    assert summary["knn"]["k_ner"]["mean"] == pytest.approx(sum(per_fold_k) / len(per_fold_k))
    assert 0.0 <= summary["clgs_accuracy"]["mean"] <= 1.0
    client = MlflowClient(mlflow_uri)
    (eval_run,) = client.search_runs([client.get_experiment_by_name("tests").experiment_id],
                                     "tags.`lmp.task` = 'relation-extraction'")
    assert "knn_re_macro_f1_mean" in eval_run.data.metrics
    plots = {a.path for a in client.list_artifacts(eval_run.info.run_id, "plots")}
    assert plots == {"plots/tsne_relations.png", "plots/tsne_entities.png"}
    assert (tmp_path / "eval" / "tsne_relations.png").read_bytes()[:4] == b"\x89PNG"


def _validation_ner_curve(data, folds, fold: int, model, k_candidates: tuple[int, ...]) -> dict[int, float]:
    """NER macro F1 of each k on the fold's validation split, from the same components, outside Ray."""
    from lmplatform.evaluation.relations import RelationEvalConfig, load_backbone
    from lmplatform.graph.data import read_ade, read_folds, split_fold
    from lmplatform.graph.knn import KNNExtractor, encode_words, score_extraction, split_validation

    cfg = RelationEvalConfig(data_path=str(data), folds_file=str(folds), max_seq_length=32, k_candidates=list(k_candidates))
    train, _ = split_fold(read_ade(cfg.data_path)[0], read_folds(cfg.folds_file), fold)
    fit, validation = split_validation(train, cfg.validation_fraction, cfg.seed)
    backbone, tokenizer = load_backbone(str(model))

    def words(sentences):
        return encode_words(backbone, tokenizer, sentences, cfg.word_pooling, cfg.max_seq_length, cfg.batch_size)

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(int(cfg.cpus_per_fold))  # as the fold's Ray task does: the same float sums, the same neighbours
    try:
        extractor = KNNExtractor.fit(fit, words(fit), words(fit), cfg.entity_pooling)
        vectors = words(validation)
    finally:
        torch.set_num_threads(threads)
    return {k: score_extraction(validation, extractor.predict_entities(validation, vectors, k, max(k_candidates)),
                                [])["ner_macro_f1"]
            for k in k_candidates}


def test_bad_evaluation_config_fails_before_ray_with_the_field(tmp_path) -> None:
    from lmplatform.cli import app

    bad = tmp_path / "eval.yaml"
    bad.write_text("data_path: x.jsonl\nfolds_file: f.json\nentity_pooling: first\n")
    out = CliRunner().invoke(app, ["graph", "evaluate", "-c", str(bad)])
    assert out.exit_code == 2 and "entity_pooling" in out.output and "last" in out.output
