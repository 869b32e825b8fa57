"""Partial rerun of bench/openoffice_system.py after its process was lost: the finished study read back from the
bench's MLflow; rows zero-shot, peer, recipe (the models this run trained), champion dense / hybrid, and the served
system replayed over HTTP. No re-ranker rows."""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, write_result
from openoffice_recipe import pair_files
from openoffice_retrieval import BUDGET, METRICS, TestSet, interval, paired
from openoffice_system import PEER, champion_system, run_or_find_study, serve_and_replay, test_index

p = argparse.ArgumentParser()
p.add_argument("--study", required=True)
p.add_argument("--out", type=Path, default=Path("runs/bench/openoffice_system"))
args = p.parse_args()
import ray

from lmplatform.evaluation.system import load_scorer
from lmplatform.retrieval.settings import SearchSettings
from lmplatform.runtime import apply_runtime_defaults

apply_runtime_defaults()
tracking_uri = f"sqlite:///{(args.out / 'mlflow.db').resolve()}"
files = pair_files(SHARED_DATA, args.out / "pairs", None)
test = TestSet(files, None, split="test")
recipe = sorted(args.out.glob("pipelines/openoffice_recipe-*/biencoder-*/model"))[-1]
per_query = {"MiniLM zero-shot": test.score("default", BUDGET["max_seq_length"])["per_query"],
             PEER: test.score(str(args.out / "peer-model"), BUDGET["max_seq_length"])["per_query"],
             "shipped recipe": test.score(str(recipe), BUDGET["max_seq_length"])["per_query"]}
print("[rows] baselines scored", flush=True)
study = run_or_find_study(argparse.Namespace(study=args.study, out=args.out, toy=False, trials=4), tracking_uri)
model, settings = champion_system(study, tracking_uri)
scorer = load_scorer(model, test.rset, test.cfg, None, BUDGET["max_seq_length"])
per_query["champion, dense"] = scorer.per_query(SearchSettings(mode="dense"))
per_query["champion + hybrid"] = scorer.per_query(settings.model_copy(update={"reranker": None}))
print("[rows] champion scored", flush=True)
ray.shutdown()
served = serve_and_replay(f"models:/{study['registered_model']}/{study['version']}", tracking_uri,
                          test_index(scorer, args.out / "test-index"), test.rset, test.cfg, 8765)
per_query["served system (HTTP)"] = served["as registered"]["per_query"]
rows = {n: {"metrics": {m: interval(s[m]) for m in METRICS}} for n, s in per_query.items()}
minus_peer = {n: {m: paired(s[m], per_query[PEER][m]) for m in METRICS} for n, s in per_query.items() if n != PEER}
served_vs_offline = {m: abs(rows["served system (HTTP)"]["metrics"][m][0] - rows["champion + hybrid"]["metrics"][m][0])
                     for m in METRICS}
latency = {k: {"p50_ms": v["p50_ms"], "p99_ms": v["p99_ms"]} for k, v in served.items()}
gain = minus_peer["served system (HTTP)"]
payload = {"split": "test", "scored_set": test.rset.counts, "budget": BUDGET, "rows": rows, "minus_peer": minus_peer,
           "study": study, "settings": settings.model_dump(mode="json") | {"reranker": bool(settings.reranker)},
           "served": {"latency_c1": latency, "metrics_minus_offline": served_vs_offline},
           "note": "rows re-scored from the models and study of one bench run whose process was lost during its "
                   "re-ranker rows (bench/openoffice_system_rows.py); no re-ranker row",
           "targets": {
               "served_mrr_at_10_at_least_peer_plus_0.05": rows["served system (HTTP)"]["metrics"]["ir_mrr_at_10"][0]
               >= rows[PEER]["metrics"]["ir_mrr_at_10"][0] + 0.05,
               "mrr_at_10_gain_interval_above_0": gain["ir_mrr_at_10"][1] > 0,
               "recall_at_10_gain_interval_above_0": gain["ir_recall_at_10"][1] > 0,
               "served_equals_offline_to_3_decimals": all(d < 5e-4 for d in served_vs_offline.values()),
               "hybrid_p50_at_most_1.3x_dense": latency["hybrid"]["p50_ms"] <= 1.3 * latency["dense"]["p50_ms"],
               "study_at_most_90_minutes_with_12_trials": study["seconds"] <= 5400 and len(study["trials"]) >= 12}}
write_result("openoffice_system", payload)
print("[rows] done", json.dumps(payload["targets"]), flush=True)
