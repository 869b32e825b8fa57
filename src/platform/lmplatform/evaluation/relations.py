"""10-fold evaluation of relation-structured encoders: KNN NER / RE / RE-, linear probes, CLGS accuracy, t-SNE.

With `baseline_model` set, the untrained encoder goes through the same KNN protocol on the same folds (same
validation split for k), and the per-fold differences trained - baseline are summarised: a trained score
alone cannot show that training moved the space.

Each fold is one Ray task (`evaluate_fold`), so folds run in parallel on a cluster; the driver averages
them (mean and std over folds) and logs metrics and plots to MLflow. Model paths may contain `{fold}`
so that every fold is scored with the encoder trained on that fold's training ids only.
"""
from __future__ import annotations

import io
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

import numpy as np
from pydantic import Field

from lmplatform.config.base import Section
from lmplatform.graph.batch import GraphCollator
from lmplatform.graph.data import Sentence, bio_tags, read_ade, read_folds, split_fold
from lmplatform.graph.knn import (
    KNNExtractor,
    choose_k,
    encode_words,
    linear_probe,
    probe_set,
    score_extraction,
    split_validation,
)
from lmplatform.models.encoder import Encoder
from lmplatform.models.quiet import quiet_transformers
from lmplatform.models.resolve import resolve_model_path
from lmplatform.objectives.graph_cl.objective import GraphContrastiveObjective, GraphHead
from lmplatform.ray_runtime import ensure_ray
from lmplatform.tracking.mlflow_tracking import TrackedRun, flatten


class RelationEvalConfig(Section):
    """What `lmp graph evaluate` / ray_jobs/evaluate_relations.py scores, and how."""

    data_path: str = Field(..., description="ADE-format JSONL (or a SpERT JSON array).")
    folds_file: str = Field(..., description="folds.json: {split_k: {train: [ids], test: [ids]}}.")
    folds: Optional[list[int]] = Field(None, description="Fold numbers to run; default all in the file.")
    ner_model: str = Field("default", description="Encoder whose word space the KNN NER reads; may contain {fold}.")
    re_model: Optional[str] = Field(
        None, description="Encoder for KNN relation extraction (default: ner_model); may contain {fold}.")
    baseline_model: Optional[str] = Field(
        None, description="Untrained encoder scored with the same KNN protocol on every fold (NER and RE from its one "
        "space); the summary then holds knn_baseline and knn_gain (trained minus baseline, per fold).",
    )
    probe_models: dict[str, str] = Field(
        default_factory=dict, description="name -> encoder for the linear-probe table (e.g. baseline, clgs, cldr).")
    clgs_model: Optional[str] = Field(
        None, description="CLGS-trained folder (with graph_cl_head.pt) for graph identification accuracy.")
    base_model: str = Field("default", description="Frozen encoder giving the graph node features (the one CLGS started from).")
    k_candidates: list[int] = Field([1, 3, 5, 7, 9, 15], min_length=1, description="k values tried on the validation split.")
    validation_fraction: float = Field(0.1, gt=0.0, lt=1.0, description="Share of each fold's train set used to choose k.")
    gold_entities: bool = Field(
        False, description="RE-only evaluation: classify the candidate pairs of the gold entities instead of the KNN NER "
        "output, so the score measures the relation space alone (NER is still scored and reported).",
    )
    entity_pooling: Literal["last", "mean"] = "last"
    word_pooling: Literal["first", "mean"] = "first"
    negatives_per_sentence: int = Field(3, ge=1, description="Hard-negative graphs per sentence for CLGS accuracy.")
    max_seq_length: int = Field(128, ge=8)
    batch_size: int = Field(32, ge=1)
    limit: Optional[int] = Field(None, ge=1, description="Read at most this many sentences (smoke runs).")
    seed: int = 13
    tsne: bool = Field(True, description="t-SNE plots of the relation and entity spaces (first fold only).")
    tsne_points: int = Field(1500, ge=10)
    cpus_per_fold: float = Field(1.0, gt=0.0)
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where the encoders embed the words: auto takes a GPU when the process sees one (a Ray "
        "task sees none unless it asks for one), else the CPU.",
    )


def _fold_path(template: Optional[str], fold: int) -> Optional[str]:
    return template.replace("{fold}", str(fold)) if template else template


def load_backbone(name_or_path: str, device: str = "cpu") -> tuple[Any, Any]:
    from transformers import AutoModel, AutoTokenizer

    path = resolve_model_path(name_or_path)
    with quiet_transformers():  # an MLM checkpoint loads into AutoModel
        return AutoModel.from_pretrained(str(path)).to(device).eval(), AutoTokenizer.from_pretrained(str(path))


def resolve_device(setting: str) -> str:
    import torch

    return ("cuda" if torch.cuda.is_available() else "cpu") if setting == "auto" else setting


class _Encoders:
    """Each distinct model folder is loaded and each (model, split) encoded once per fold."""

    def __init__(self, cfg: RelationEvalConfig):
        self.cfg = cfg
        self.device = resolve_device(cfg.device)
        self.models: dict[str, tuple[Any, Any]] = {}
        self.cache: dict[tuple[str, int], list[np.ndarray]] = {}

    def words(self, model: str, sentences: Sequence[Sentence]) -> list[np.ndarray]:
        key = (model, id(sentences))
        if key not in self.cache:
            if model not in self.models:
                self.models[model] = load_backbone(model, self.device)
            backbone, tokenizer = self.models[model]
            self.cache[key] = encode_words(backbone, tokenizer, sentences, self.cfg.word_pooling,
                                           self.cfg.max_seq_length, self.cfg.batch_size)
        return self.cache[key]


def knn_extraction(cfg: RelationEvalConfig, encoders: _Encoders, ner_model: str, re_model: str,
                   train: list[Sentence], test: list[Sentence]) -> dict[str, float]:
    """Choose k for NER and RE on a validation split of train, refit on all of train, score the test fold.

    RE classifies the candidate pairs of the predicted entities (a pipeline), or of the gold entities when
    `cfg.gold_entities` is set (RE-only evaluation of the relation space).
    """
    fit_part, val_part = split_validation(train, cfg.validation_fraction, cfg.seed)
    max_k = max(cfg.k_candidates)
    extractor = KNNExtractor.fit(fit_part, encoders.words(ner_model, fit_part), encoders.words(re_model, fit_part),
                                 cfg.entity_pooling)
    val_ner, val_re = encoders.words(ner_model, val_part), encoders.words(re_model, val_part)
    entity_cache: dict[int, list] = {}

    def ner_score(k: int) -> float:
        entity_cache[k] = extractor.predict_entities(val_part, val_ner, k, max_k)
        return score_extraction(val_part, entity_cache[k], [])["ner_macro_f1"]

    k_ner, ner_curve = choose_k(ner_score, cfg.k_candidates)

    def re_candidates(sentences: Sequence[Sentence], predicted: list) -> list:
        return [s.entities for s in sentences] if cfg.gold_entities else predicted

    def re_score(k: int) -> float:
        relations = extractor.predict_relations(val_part, val_re, re_candidates(val_part, entity_cache[k_ner]), k, max_k)
        return score_extraction(val_part, entity_cache[k_ner], relations)["re_macro_f1"]

    k_re, re_curve = choose_k(re_score, cfg.k_candidates)
    final = KNNExtractor.fit(train, encoders.words(ner_model, train), encoders.words(re_model, train), cfg.entity_pooling)
    test_ner, test_re = encoders.words(ner_model, test), encoders.words(re_model, test)
    entities = final.predict_entities(test, test_ner, k_ner, max_k)
    relations = final.predict_relations(test, test_re, re_candidates(test, entities), k_re, max_k)
    scores = score_extraction(test, entities, relations)
    return {**scores, "k_ner": float(k_ner), "k_re": float(k_re),
            "val_ner_macro_f1": ner_curve[k_ner], "val_re_macro_f1": re_curve[k_re]}


def graph_identification_accuracy(cfg: RelationEvalConfig, clgs_model: str,
                                  sentences: Sequence[Sentence]) -> Optional[dict[str, Any]]:
    """{"accuracy", "scored", "unscored"}: the share of sentences whose pooled embedding is closer to their own
    graph than to every valid hard negative, over the sentences that have one; sentences without any valid
    negative are not scored (an empty comparison is no identification) and are counted. None without a CLGS head."""
    import torch

    folder = resolve_model_path(clgs_model)
    head = GraphHead.load(folder)
    if head is None or head.variant != "clgs":
        return None
    encoder = Encoder.from_pretrained(folder, max_seq_length=cfg.max_seq_length).eval()
    node_encoder, _ = load_backbone(cfg.base_model)
    objective = GraphContrastiveObjective(node_encoder, head.eval(), sentence_pooling=encoder.pooling, in_batch_negatives=False)
    collate = GraphCollator(encoder.tokenizer, cfg.max_seq_length, cfg.negatives_per_sentence, cfg.entity_pooling,
                            cfg.word_pooling, seed=cfg.seed)
    correct, scored, unscored = 0.0, 0, 0
    with torch.inference_mode():
        for start in range(0, len(sentences), cfg.batch_size):
            batch = collate.collate(sentences[start : start + cfg.batch_size])
            _, right, n, left_out = objective.scores(encoder, batch)
            correct, scored, unscored = correct + float(right), scored + n, unscored + left_out
    return {"accuracy": correct / scored if scored else None, "scored": scored, "unscored": unscored}


def probe_table(cfg: RelationEvalConfig, encoders: _Encoders, models: dict[str, str], train: list[Sentence],
                test: list[Sentence]) -> dict[str, dict[str, float]]:
    table = {}
    for name, model in models.items():
        train_set = probe_set(train, encoders.words(model, train), cfg.entity_pooling, cfg.seed)
        test_set = probe_set(test, encoders.words(model, test), cfg.entity_pooling, cfg.seed + 1)
        table[name] = linear_probe(train_set, test_set, cfg.seed)
    return table


def tsne_plots(cfg: RelationEvalConfig, encoders: _Encoders, re_model: str, ner_model: str,
               test: list[Sentence]) -> dict[str, bytes]:
    """PNG bytes of the relation space (gold vs hard-negative pairs) and the entity space (words by BIO tag)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.manifold import TSNE

    def plot(points: np.ndarray, labels: list[str], title: str) -> bytes:
        rng = np.random.default_rng(cfg.seed)
        if len(points) > cfg.tsne_points:
            keep = rng.choice(len(points), cfg.tsne_points, replace=False)
            points, labels = points[keep], [labels[i] for i in keep]
        perplexity = float(min(30, max(2, len(points) // 4)))
        xy = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=cfg.seed).fit_transform(np.nan_to_num(points))
        fig, ax = plt.subplots(figsize=(7, 6))
        for label in sorted(set(labels)):
            mask = np.array([lab == label for lab in labels])
            ax.scatter(xy[mask, 0], xy[mask, 1], s=6, alpha=0.7, label=f"{label} ({int(mask.sum())})")
        ax.set_title(title)
        ax.legend(markerscale=3, fontsize=8)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        return buffer.getvalue()

    x, y = probe_set(test, encoders.words(re_model, test), cfg.entity_pooling, cfg.seed + 1)
    relation_png = plot(x, ["relation" if v else "hard negative" for v in y], f"relation space ({Path(re_model).name})")
    words, tags = [], []
    for sentence, vectors in zip(test, encoders.words(ner_model, test)):
        for vector, tag in zip(vectors, bio_tags(sentence)):
            if not np.isnan(vector).any():
                words.append(vector)
                tags.append(tag)
    entity_png = plot(np.stack(words), tags, f"entity space by BIO tag ({Path(ner_model).name})")
    return {"tsne_relations.png": relation_png, "tsne_entities.png": entity_png}


def evaluate_fold(cfg_dict: dict[str, Any], fold: int, with_plots: bool) -> dict[str, Any]:
    """Everything for one fold; runs as a Ray task (reads the data itself, returns metrics and PNG bytes)."""
    import torch

    cfg = RelationEvalConfig.model_validate(cfg_dict)
    torch.set_num_threads(max(1, int(cfg.cpus_per_fold)))
    started = time.perf_counter()
    sentences, report = read_ade(cfg.data_path, limit=cfg.limit)
    train, test = split_fold(sentences, read_folds(cfg.folds_file), fold)
    if not train or not test:
        raise ValueError(f"fold {fold}: {len(train)} train and {len(test)} test sentences; nothing to evaluate")
    ner_model = _fold_path(cfg.ner_model, fold)
    re_model = _fold_path(cfg.re_model, fold) or ner_model
    encoders = _Encoders(cfg)
    result: dict[str, Any] = {"fold": fold, "train_sentences": len(train), "test_sentences": len(test),
                              "bad_rows": report.bad_rows}
    result["knn"] = knn_extraction(cfg, encoders, ner_model, re_model, train, test)
    if cfg.baseline_model:
        result["knn_baseline"] = knn_extraction(cfg, encoders, cfg.baseline_model, cfg.baseline_model, train, test)
    probes = {name: _fold_path(path, fold) for name, path in cfg.probe_models.items()}
    result["probe"] = probe_table(cfg, encoders, probes, train, test)
    if cfg.clgs_model:
        identification = graph_identification_accuracy(cfg, _fold_path(cfg.clgs_model, fold), test)
        if identification is not None:
            result["clgs_accuracy"] = identification["accuracy"]
            result["clgs_unscored"] = identification["unscored"]
    if with_plots and cfg.tsne:
        result["plots"] = tsne_plots(cfg, encoders, re_model, ner_model, test)
    result["seconds"] = time.perf_counter() - started
    return result


def _mean_std(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}


GAIN_KEYS = ("ner_macro_f1", "re_macro_f1", "re_minus_macro_f1")


def summarize_folds(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and std over folds of every KNN metric, probe score and CLGS accuracy; with a baseline, the
    baseline's KNN scores and the per-fold gains over it (std of the differences, not of either side)."""
    if not results:
        raise ValueError("no folds were evaluated")
    summary: dict[str, Any] = {"folds": [r["fold"] for r in results]}
    summary["knn"] = {key: _mean_std([r["knn"][key] for r in results]) for key in results[0]["knn"]}
    if "knn_baseline" in results[0]:
        summary["knn_baseline"] = {key: _mean_std([r["knn_baseline"][key] for r in results])
                                   for key in results[0]["knn_baseline"]}
        summary["knn_gain"] = {key: _mean_std([r["knn"][key] - r["knn_baseline"][key] for r in results]) for key in GAIN_KEYS}
    summary["probe"] = {
        name: {key: _mean_std([r["probe"][name][key] for r in results]) for key in results[0]["probe"][name]}
        for name in results[0]["probe"]
    }
    accuracies = [r["clgs_accuracy"] for r in results if r.get("clgs_accuracy") is not None]
    if accuracies:
        summary["clgs_accuracy"] = _mean_std(accuracies)
    if any("clgs_unscored" in r for r in results):
        summary["clgs_unscored"] = sum(r.get("clgs_unscored", 0) for r in results)  # test sentences left out, all folds
    return summary


def flat_metrics(summary: dict[str, Any]) -> dict[str, float]:
    out = {}
    for section in ("knn", "knn_baseline", "knn_gain"):
        for key, stats in summary.get(section, {}).items():
            out[f"{section}_{key}_mean"], out[f"{section}_{key}_std"] = stats["mean"], stats["std"]
    for name, table in summary["probe"].items():
        for key, stats in table.items():
            out[f"probe_{name}_{key}_mean"], out[f"probe_{name}_{key}_std"] = stats["mean"], stats["std"]
    if "clgs_accuracy" in summary:
        out["clgs_accuracy_mean"], out["clgs_accuracy_std"] = summary["clgs_accuracy"]["mean"], summary["clgs_accuracy"]["std"]
    if "clgs_unscored" in summary:
        out["clgs_unscored"] = float(summary["clgs_unscored"])
    return out


def run_cross_validation(cfg: RelationEvalConfig, output_dir: Optional[Path] = None, tracking_uri: Optional[str] = None,
                         experiment: str = "lmplatform-graph", run_name: Optional[str] = None,
                         parallel: bool = True) -> dict[str, Any]:
    """One Ray task per fold (or in-process when parallel=False); summary, plots and an MLflow run."""
    folds = cfg.folds if cfg.folds is not None else sorted(int(name.split("_")[-1]) for name in read_folds(cfg.folds_file))
    started = time.perf_counter()
    payload = cfg.model_dump()
    if parallel:
        import ray

        ensure_ray()
        task = ray.remote(num_cpus=cfg.cpus_per_fold)(evaluate_fold)
        refs = [task.remote(payload, fold, index == 0) for index, fold in enumerate(folds)]
        results = _gather_with_progress(refs)
    else:
        results = []
        for index, fold in enumerate(folds):
            results.append(evaluate_fold(payload, fold, index == 0))
            print(f"[lmp] fold {fold} done ({index + 1}/{len(folds)})", flush=True)
    plots = {}
    for result in results:
        plots |= result.pop("plots", {})
    summary = summarize_folds(results) | {"seconds": time.perf_counter() - started, "per_fold": results}
    if output_dir is not None:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "relation_eval.json").write_text(json.dumps(summary, indent=2))
        for name, data in plots.items():
            (output_dir / name).write_bytes(data)
        summary["plots"] = [str(output_dir / name) for name in plots]
    if tracking_uri is not None:
        summary["mlflow_run_id"] = _log_to_mlflow(cfg, summary, plots, tracking_uri, experiment, run_name)
    return summary


def _gather_with_progress(refs: list) -> list[dict[str, Any]]:
    import ray

    pending, done = list(refs), {}
    started = time.perf_counter()
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        for ref in ready:
            done[ref] = ray.get(ref)
            elapsed = time.perf_counter() - started
            eta = elapsed / len(done) * len(pending)
            print(f"[lmp] fold {done[ref]['fold']} done ({len(done)}/{len(refs)}) "
                  f"NER {done[ref]['knn']['ner_macro_f1']:.3f} RE {done[ref]['knn']['re_macro_f1']:.3f} "
                  f"elapsed {elapsed:.0f}s ETA {eta:.0f}s", flush=True)
    return [done[ref] for ref in refs]


def _log_to_mlflow(cfg: RelationEvalConfig, summary: dict[str, Any], plots: dict[str, bytes], tracking_uri: str,
                   experiment: str, run_name: Optional[str]) -> str:
    run = TrackedRun.start(tracking_uri, experiment, run_name or f"relation-eval-{time.strftime('%Y%m%d-%H%M%S')}",
                           tags={"lmp.task": "relation-extraction"})
    run.log_params(flatten(cfg.model_dump()))
    run.log_metrics(flat_metrics(summary))
    run.log_dict({k: v for k, v in summary.items() if k != "plots"}, "relation_eval.json")
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in plots.items():
            (Path(tmp) / name).write_bytes(data)
        if plots:
            run.log_artifacts(tmp, "plots")
    run.finish()
    return run.run_id
