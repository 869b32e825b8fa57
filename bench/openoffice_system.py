"""The OpenOffice duplicate finder as a system: the study's winner (recipe, BM25 fusion, re-ranker) against the peer,
scored on test in bench/openoffice_recipe.py's protocol, and served over HTTP as it was measured.

Rows, every one on the test split (498 duplicates, each ranked against the whole corpus; its relevant reports are
the rest of its group), all in one run:
  - zero-shot MiniLM; the sentence-transformers trainer (the peer, at the recipe's budget); the shipped recipe
    (configs/pipelines/openoffice_duplicates.yaml);
  - the study's champion (tune_spaces/openoffice_system.yaml: each trial the whole pipeline
    configs/pipelines/openoffice_system.yaml, its system chosen on dev_select, the winner confirmed on dev_confirm by
    the gate): dense; with BM25 fusion; with its metadata fusion (product, component, filing time; fitted on the
    train pairs by the system stage) when it registered one;
  - the champion with a cross-encoder re-ranker trained here on the train pairs, with negatives the champion mines
    (listwise loss; RERANKER_RUN), its depth and weight chosen on the winning trial's dev_select; and that re-ranker
    alone over the hybrid top 10;
  - the served system: `lmp serve run` with the champion's registered version and settings over an index of the test
    set's candidates (with their metadata); every test query replayed over HTTP with its metadata (its own report left
    out with exclude_ids), in each mode,
    one at a time (c=1), p50/p99 latency per mode; its rankings scored as the offline rows are.
Quality: R@1/10/20, MRR@10, nDCG@10, MAP@100 with 95% bootstrap intervals; each row minus the peer as a paired
bootstrap interval. Time: the peer's `trainer.train()`, the recipe's pipeline, the whole study (its trials, and how
many stages were reused), each on this machine.

    python bench/openoffice_system.py [--data ../shared/data] [--study NAME [--reuse]] [--trials 12] [--toy]
    python bench/openoffice_system.py --study-only [--study NAME]   # the study alone: its time, trials and gate

Writes bench/results/openoffice_system.json (openoffice_system_toy.json with --toy; openoffice_system_study.json with
--study-only).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, lmp_serve, write_result
from openoffice_recipe import pair_files, pipeline_spec, run_recipe
from openoffice_retrieval import BUDGET, METRICS, TestSet, interval, paired, table, train_peer

ROOT = Path(__file__).resolve().parents[1]
SPACE = ROOT / "tune_spaces" / "openoffice_system.yaml"
PEER = "sentence-transformers trainer"
# "as registered": no mode or rerank in the request, so the version's registered settings answer (the served system);
# "metadata" is replayed when the version registers a metadata fusion. Every request carries the query's metadata.
SERVED_MODES = {"dense": {"mode": "dense", "rerank": False}, "hybrid": {"mode": "hybrid", "rerank": False},
                "metadata": {"mode": "metadata", "rerank": False}, "as registered": {}}
METADATA_FIELDS = ["product", "component", "created"]  # what the shipped pipeline's metadata fusion reads
# The re-ranker's recipe (docs/benchmarks.md: the best of the variants tried on dev): listwise loss over the positive
# and 3 negatives mined with the bi-encoder it re-ranks, the head at its own rate, 128 tokens, one epoch.
RERANKER_RUN = {
    "model": {"max_seq_length": 128},
    "data": {"train_paths": ["stage:reranker_negatives"], "hard_negative_field": "hard_negatives", "group_field": "group",
             "validation_fraction": 0.0},
    "objective": {"name": "cross_encoder", "loss": "listwise", "head_lr": 1.0e-3, "negatives_per_positive": 3},
    "optim": {"lr": 2.0e-5, "batch_size": 4, "epochs": 1, "warmup_ratio": 0.1, "precision": "auto"},
    "scaling": {"num_workers": 1, "cpus_per_worker": 2},
    "checkpoint": {"every_n_steps": 10_000},
    "tracking": {"log_every_n_steps": 20, "register_model": False},
}
K = 100  # every cut-off of METRICS, and the service's limits.max_k
FIRST_STAGE_ROWS = {"dense": "champion, dense", "hybrid": "champion + hybrid", "metadata": "champion + metadata fusion"}


# -- the study ---------------------------------------------------------------------------------------------
def study_overrides(tracking_uri: str, toy: bool, trials: int) -> list[str]:
    sets = [f"tracking.tracking_uri={tracking_uri}", f"num_samples={trials}"]
    if toy:  # a few pairs and steps, a sample of the corpus: checks the script, measures nothing
        sets += ["stages.data.pairs.limit=40", "stages.biencoder.run.optim.max_steps=3",
                 "stages.negatives.mine.distractors.max_documents=200",
                 "stages.biencoder.run.retrieval_validation.distractors.max_documents=100",
                 "stages.system.system.select.distractors.max_documents=200",
                 "stages.system.system.metadata.fit.distractors.max_documents=200", "scheduler.grace_period=1"]
    return sets


def run_or_find_study(args: argparse.Namespace, tracking_uri: str) -> dict[str, Any]:
    """The study (run now, unless --study names one run earlier with this bench's MLflow): its trials, the stages they
    reused, its wall time (its MLflow run's start to end) and its registered winner."""
    from mlflow.tracking import MlflowClient

    from lmplatform.tune import STUDY_TAG, run_study

    name = args.study
    if name is None:
        name = run_study(SPACE, study_overrides(tracking_uri, args.toy, args.trials), verbose=1).study_name
    client = MlflowClient(tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, filter_string=f"tags.`{STUDY_TAG}` = '{name}'")
    (parent,) = [run for run in runs if "mlflow.parentRunId" not in run.data.tags]
    tags = parent.data.tags
    rows = json.loads(Path(client.download_artifacts(parent.info.run_id, "trials.json", str(args.out))).read_text())
    trials = [{"trial_id": t["trial_id"], "status": t["status"], "params": t["params"],
               "system_mrr_at_10": t["metrics"].get("system/ir_mrr_at_10"), "stages_reused": t["metrics"].get("stages_reused"),
               "seconds": t["metrics"].get("time_total_s")} for t in rows]
    if "lmp.registered_version" not in tags:
        raise SystemExit(f"study {name} registered no winner: {[t['status'] for t in trials]}")
    return {"name": name, "seconds": (parent.info.end_time - parent.info.start_time) / 1000, "trials": trials,
            "best_trial": tags.get("lmp.best_trial"),
            "completed": sum(t["status"] == "TERMINATED" for t in trials),
            "stages_reused": sum(t["stages_reused"] or 0 for t in trials),
            "registered_model": tags["lmp.registered_model"], "version": tags["lmp.registered_version"],
            "gate": {"moved": tags.get("lmp.champion_moved"), "reason": tags.get("lmp.champion_reason")}}


def champion_system(study: dict[str, Any], tracking_uri: str) -> tuple[str, Any]:
    """(the winner's bi-encoder folder, its registered settings with the re-ranker as a local folder)."""
    from lmplatform import read_search_settings
    from lmplatform.models import download_model

    name, version = study["registered_model"], study["version"]
    model = str(download_model(f"models:/{name}/{version}", tracking_uri))
    settings = read_search_settings(tracking_uri, name, version)
    if settings is None:
        raise SystemExit(f"models:/{name}/{version} has no search settings: the study's system stage registered none")
    local = settings.model_copy(update={"reranker": str(download_model(settings.reranker, tracking_uri))}) \
        if settings.reranker else settings
    return model, local


def study_target(study: dict[str, Any]) -> bool:
    return study["seconds"] <= 5400 and len(study["trials"]) >= 12


def report_study(study: dict[str, Any], toy: bool) -> None:
    """The study on its own: what its time target reads, without the test rows."""
    print(f"[bench] study {study['name']}: {len(study['trials'])} trials ({study['completed']} completed), "
          f"{study['stages_reused']} stages reused, {study['seconds'] / 60:.1f} min; gate: {study['gate']}", flush=True)
    write_result("openoffice_system_study" + ("_toy" if toy else ""), {
        "space": str(SPACE.relative_to(ROOT)), "study": study,
        "targets": {"study_at_most_90_minutes_with_12_trials": study_target(study)}})


# -- the re-ranker ------------------------------------------------------------------------------------------
def train_reranker(files: dict[str, Path], out: Path, tracking_uri: str, champion: str, corpus: Path,
                   max_steps: Optional[int], max_distractors: Optional[int]) -> dict[str, Any]:
    """A cross-encoder trained on the train pairs with negatives mined by the champion bi-encoder (the hits it will
    re-rank), as a two-stage pipeline; its folder and the pipeline's wall time."""
    from lmplatform.pipeline import pipeline_config_from_dict, run_pipeline

    run = json.loads(json.dumps(RERANKER_RUN)) | (
        {"optim": {**RERANKER_RUN["optim"], "max_steps": max_steps}} if max_steps else {})
    spec = {"name": "openoffice_reranker", "storage_path": str(out / "pipelines"),
            "tracking": {"tracking_uri": tracking_uri, "experiment": "openoffice-system-bench"},
            "stages": [
                {"name": "reranker_negatives", "init_from": champion, "mine": {
                    "pairs": {"train_paths": [str(files["train"])], "group_field": "group"},
                    "distractors": {"paths": [str(corpus)], "fields": ["title", "description"], "max_documents": max_distractors},
                    "num_negatives": 3, "range_min": 5, "range_max": 50, "max_seq_length": 128, "precision": "auto",
                    "cpus_per_actor": 2}},
                {"name": "reranker", "init_from": "default", "run": run}]}
    start = time.perf_counter()
    result = run_pipeline(pipeline_config_from_dict(spec, out))
    return {"model": result.state.stages["reranker"].model_dir, "seconds": time.perf_counter() - start}


def newest(out: Path, pattern: str) -> Path:
    """The model folder of the newest pipeline run under out/pipelines whose stage folder matches `pattern`."""
    found = sorted((out / "pipelines").glob(f"{pattern}/model"))
    if not found:
        raise SystemExit(f"--reuse: no {pattern}/model under {out / 'pipelines'}: run the bench without --reuse first")
    return found[-1]


def dev_select(study: dict[str, Any]) -> Path:
    """The dev_select pairs of the study's best trial: where its system's settings were chosen."""
    from lmplatform.pipeline import PipelineState
    from lmplatform.runtime import resolve_storage_path

    folder = Path(resolve_storage_path("runs/pipelines")) / f"{study['name']}.{study['best_trial']}"
    return Path(PipelineState.load(folder).stages["data"].outputs["dev_select"])


def choose_reranking(model: str, reranker: str, settings: Any, select: Path, corpus: Path,
                     max_distractors: Optional[int], by_text: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    """The re-rank depth and weight for the champion's first stage, chosen on dev_select as the system stage chooses."""
    from lmplatform.evaluation import SetMetadata, build_retrieval_set, load_scorer
    from lmplatform.retrieval import RetrievalValidationConfig

    cfg = RetrievalValidationConfig.model_validate({
        "pairs": {"train_paths": [str(select)], "validation_fraction": 0.0}, "split": "all",
        "distractors": {"paths": [str(corpus)], "fields": ["title", "description"], "max_documents": max_distractors}})
    rset = build_retrieval_set(cfg)
    scorer = load_scorer(model, rset, cfg, reranker, BUDGET["max_seq_length"], SetMetadata.of(rset, by_text))
    choice = scorer.choose(settings.model_copy(update={"reranker": reranker}), rerank_depths=[10, 20],
                           rerank_weights=[round(0.1 * i, 1) for i in range(11)])
    return choice.settings, choice.tried


# -- the served replay --------------------------------------------------------------------------------------
def test_index(scorer: Any, folder: Path, by_text: dict[str, Any]) -> Path:
    """An index folder of the test set's candidates (ids 0..n-1, as the offline rows number them): FAISS over the
    scorer's own vectors, BM25 and the document store with each report's metadata."""
    from lmplatform.retrieval import BM25_DIR, BM25Retriever, VectorIndex

    ids = [str(i) for i in range(len(scorer.rset.candidate_texts))]
    VectorIndex.build(ids, scorer.candidate_vectors, kind="flat").save(folder)
    bm25 = BM25Retriever()
    bm25.index(ids, scorer.rset.candidate_texts)
    bm25.save(folder / BM25_DIR)
    with (folder / "documents.jsonl").open("w", encoding="utf-8") as handle:
        for doc_id, text in zip(ids, scorer.rset.candidate_texts):
            record = {"id": doc_id, "title": "", "text": text, "metadata": by_text.get(text, {})}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return folder


def replay(url: str, rset: Any, cfg: Any, by_text: dict[str, Any], modes: dict[str, Any]) -> dict[str, Any]:
    """Every test query (with its metadata) in every mode, one request at a time: per-query metrics and latencies."""
    import httpx
    import numpy as np

    from lmplatform.evaluation import score_rankings

    out: dict[str, Any] = {}
    with httpx.Client(base_url=url, timeout=120) as client:
        for label, mode in modes.items():
            rankings, latencies = [], []
            for query, excluded in zip(rset.query_texts, rset.excluded):
                body = {"query": query, "k": K, "exclude_ids": [str(i) for i in excluded], **mode,
                        "metadata": by_text.get(query, {})}
                start = time.perf_counter()
                response = client.post("/v1/search", json=body)
                latencies.append(time.perf_counter() - start)
                response.raise_for_status()
                rankings.append([int(hit["id"]) for hit in response.json()["hits"]])
            out[label] = {"per_query": score_rankings(rankings, rset, cfg),
                          "p50_ms": float(np.percentile(latencies, 50) * 1000),
                          "p99_ms": float(np.percentile(latencies, 99) * 1000)}
            print(f"[bench] served {label}: p50 {out[label]['p50_ms']:.1f} ms, p99 {out[label]['p99_ms']:.1f} ms", flush=True)
    return out


def serve_and_replay(model_uri: str, tracking_uri: str, index: Path, rset: Any, cfg: Any, port: int,
                     by_text: dict[str, Any], modes: dict[str, Any]) -> dict[str, Any]:
    """`lmp serve run` with the registered version over `index`, replayed, then stopped."""
    with lmp_serve(model_uri, tracking_uri, index, port, ["replica_cpus=0.5", "limits.max_query_chars=100000",
                                                          f"limits.rerank_candidates={K}"]) as url:
        return replay(url, rset, cfg, by_text, modes)


# -- the bench ----------------------------------------------------------------------------------------------
def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="The shared data folder.")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench" / "openoffice_system")
    parser.add_argument("--study", default=None, help="Score a study this bench already ran (its name) instead of running one.")
    parser.add_argument("--reuse", action="store_true",
                        help="With --study: score the peer, recipe and re-ranker models an earlier run left in --out "
                             "instead of training them again (the rows are the same; the timing is the earlier run's).")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--toy", action="store_true", help="A few pairs and steps: checks the script, measures nothing.")
    parser.add_argument("--study-only", action="store_true",
                        help="Run (or, with --study, find) the study and report its time, trials and gate; no test rows.")
    args = parser.parse_args(argv)
    if args.reuse and args.study is None:
        parser.error("--reuse needs --study: the study whose run left the models in --out")

    import ray

    from lmplatform import SearchSettings
    from lmplatform.evaluation import SetMetadata, load_scorer, text_metadata
    from lmplatform.runtime import apply_runtime_defaults

    apply_runtime_defaults()
    args.out.mkdir(parents=True, exist_ok=True)
    tracking_uri = f"sqlite:///{(args.out / 'mlflow.db').resolve()}"
    if args.study_only:
        report_study(run_or_find_study(args, tracking_uri), args.toy)
        return
    limit, max_steps, max_distractors = (40, 3, 200) if args.toy else (None, None, None)
    if args.toy:
        args.trials = 2
    files = pair_files(args.data, args.out / "pairs", limit)
    test = TestSet(files, max_distractors, split="test")
    print(f"[bench] test: {test.rset.summary()}", flush=True)

    per_query: dict[str, dict[str, Any]] = {}
    timing: dict[str, Any] = {}
    per_query["MiniLM zero-shot"] = test.score("default", BUDGET["max_seq_length"])["per_query"]
    if args.reuse:
        peer = {"model": str(args.out / "peer-model")}
        recipe = {"model": str(newest(args.out, "openoffice_recipe-*/biencoder-*"))}
    else:
        peer = train_peer(files, args.out, max_steps)
        timing[PEER] = {"seconds": peer["train_seconds"]}
        recipe = run_recipe(pipeline_spec(files, args.out, tracking_uri, "recipe", max_steps, max_distractors), args.out)
        timing["shipped recipe"] = {"seconds": recipe["pipeline_seconds"]}
    per_query[PEER] = test.score(peer["model"], BUDGET["max_seq_length"])["per_query"]
    per_query["shipped recipe"] = test.score(recipe["model"], BUDGET["max_seq_length"])["per_query"]

    study = run_or_find_study(args, tracking_uri)
    timing["study"] = {"seconds": study["seconds"], "trials": len(study["trials"]), "stages_reused": study["stages_reused"]}
    model, settings = champion_system(study, tracking_uri)
    corpus = files["corpus"]
    by_text = text_metadata([corpus], ["title", "description"], METADATA_FIELDS)
    metadata = SetMetadata.of(test.rset, by_text)
    if args.reuse:
        reranker = {"model": str(newest(args.out, "openoffice_reranker-*/cross_encoder-*"))}
    else:
        reranker = train_reranker(files, args.out, tracking_uri, model, corpus, max_steps, max_distractors)
        timing["re-ranker"] = {"seconds": reranker["seconds"]}
    reranking, reranking_tried = choose_reranking(model, reranker["model"], settings, dev_select(study), corpus,
                                                  max_distractors, by_text)
    scorer = load_scorer(model, test.rset, test.cfg, reranker["model"], BUDGET["max_seq_length"], metadata)
    first = FIRST_STAGE_ROWS[settings.mode]
    offline = {"champion, dense": SearchSettings(mode="dense"),
               "champion + hybrid": settings.model_copy(update={"reranker": None, "mode": "hybrid"}),
               **({"champion + metadata fusion": settings.model_copy(update={"reranker": None, "mode": "metadata"})}
                  if settings.metadata_fusion else {}),
               f"{first} + re-ranker (chosen on dev)": reranking,
               f"{first}, re-ranker alone over the top 10": settings.model_copy(update={
                   "reranker": reranker["model"], "rerank_depth": 10, "rerank_weight": 1.0})}
    for name, searched in offline.items():
        per_query[name] = scorer.per_query(searched)
    ray.shutdown()  # the service starts its own Ray

    modes = {label: mode for label, mode in SERVED_MODES.items() if label != "metadata" or settings.metadata_fusion}
    served = serve_and_replay(f"models:/{study['registered_model']}/{study['version']}", tracking_uri,
                              test_index(scorer, args.out / "test-index", by_text), test.rset, test.cfg, args.port,
                              by_text, modes)
    # The registered system: what the study's system stage chose (its own re-ranker when it trained one).
    system_row = f"{first} + re-ranker (as registered)" if settings.reranker else first
    if settings.reranker:
        per_query[system_row] = load_scorer(model, test.rset, test.cfg, settings.reranker, BUDGET["max_seq_length"],
                                            metadata).per_query(settings)
    served_row = "served system (HTTP)"
    per_query[served_row] = served["as registered"]["per_query"]

    rows = {name: {"metrics": {m: interval(scores[m]) for m in METRICS}} for name, scores in per_query.items()}
    minus_peer = {name: {m: paired(scores[m], per_query[PEER][m]) for m in METRICS}
                  for name, scores in per_query.items() if name != PEER}
    served_vs_offline = {m: abs(rows[served_row]["metrics"][m][0] - rows[system_row]["metrics"][m][0]) for m in METRICS}
    latency = {label: {"p50_ms": v["p50_ms"], "p99_ms": v["p99_ms"]} for label, v in served.items()}
    gain = minus_peer[served_row]
    payload: dict[str, Any] = {
        "split": "test", "scored_set": test.rset.counts, "budget": BUDGET, "rows": rows, "minus_peer": minus_peer,
        "timing": timing, "study": study, "settings": settings.model_dump(mode="json") | {"reranker": bool(settings.reranker)},
        "reranking_chosen_on_dev": reranking.model_dump(mode="json") | {"reranker": bool(reranking.reranker)},
        "reranking_tried_on_dev": reranking_tried,
        "served": {"latency_c1": latency, "metrics_minus_offline": served_vs_offline},
        "targets": {
            "served_mrr_at_10_at_least_peer_plus_0.05": rows[served_row]["metrics"]["ir_mrr_at_10"][0]
            >= rows[PEER]["metrics"]["ir_mrr_at_10"][0] + 0.05,
            "mrr_at_10_gain_interval_above_0": gain["ir_mrr_at_10"][1] > 0,
            "recall_at_10_gain_interval_above_0": gain["ir_recall_at_10"][1] > 0,
            "served_equals_offline_to_3_decimals": all(d < 5e-4 for d in served_vs_offline.values()),
            "hybrid_p50_at_most_1.3x_dense": latency["hybrid"]["p50_ms"] <= 1.3 * latency["dense"]["p50_ms"],
            "study_at_most_90_minutes_with_12_trials": study_target(study),
        },
    }
    if args.reuse:
        payload["note"] = (f"the peer, recipe and re-ranker models were trained by an earlier run of this bench and scored "
                           f"here (--study {study['name']} --reuse): timing has the study only")
    print(table(rows), flush=True)
    for name, diff in minus_peer.items():
        print(f"[bench] {name} - peer: " + ", ".join(f"{m[3:]} {d:+.3f} [{lo:+.3f}, {hi:+.3f}]"
                                                     for m, (d, lo, hi) in diff.items()
                                                     if m in ("ir_recall_at_10", "ir_mrr_at_10")))
    print(f"[bench] study {study['name']}: {len(study['trials'])} trials, {study['stages_reused']} stages reused, "
          f"{study['seconds'] / 60:.0f} min; targets {payload['targets']}", flush=True)
    write_result("openoffice_system" + ("_toy" if args.toy else ""), payload)


if __name__ == "__main__":
    main()
