"""MLM training and Ray Data encoding: one node with 2 CPUs against two nodes with 1 CPU each, on this machine.

Both layouts run the same two jobs through the real entry points, as drivers joined to a
LocalCluster (every node on 127.0.0.1):
  - ray_jobs/train.py: MLM, 2 Ray Train workers x 1 CPU, the same data, model and steps;
  - ray_jobs/build_index.py: a corpus encoded by 2 encoder actors x 1 CPU (Ray Data map_batches).
  A. 1 node x 2 CPUs (head only);
  B. 2 nodes x 1 CPU (a head with 0 CPUs + 2 worker nodes; training STRICT_SPREAD).
Reported: training tokens/s (median of the logged windows after the first), encoding documents/s,
the nodes each job ran on, and B/A for both.

A 2-core machine cannot show speed-up from more nodes: both layouts share the same two
cores. The ratio measures only the overhead of several raylets/object stores and shows that
the multi-node run is correct, not scaling.

    python bench/cluster_throughput.py [--model default] [--steps 24] [--seq 128] [--batch 8]
        [--corpus FILE --fields title,description]
    # toy size:
    python bench/cluster_throughput.py --steps 6 --seq 32 --log-every 2 --corpus data/demo/reports.jsonl --fields title,text
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from common import write_result

from lmplatform import LocalCluster

ROOT = Path(__file__).resolve().parents[1]
OPENOFFICE = ROOT.parent / "shared" / "data" / "duplicate_bug_reports" / "openoffice" / "corpus.jsonl"
ENCODER_ACTOR = "MapWorker(MapBatches(EncodeBatch)"  # Ray Data names a pool's actors after its operator
NOTE = ("2-core machine: both layouts share the same 2 cores, so B/A shows multi-node overhead "
        "and correctness only, never speed-up.")


def job_config(args: argparse.Namespace, work: Path, strategy: str) -> Path:
    cfg = {
        "model": {"name_or_path": args.model, "max_seq_length": args.seq},
        "data": {"train_paths": [str(args.data.resolve())], "validation_fraction": 0.0},
        "objective": {"name": "mlm", "pseudo_perplexity_sentences": 0},
        "optim": {"batch_size": args.batch, "max_steps": args.steps, "lr": 5e-5},
        "scaling": {"num_workers": 2, "cpus_per_worker": 1, "placement_strategy": strategy},
        "checkpoint": {"storage_path": str(work / "runs"), "every_n_steps": 10_000},
        "tracking": {"tracking_uri": f"sqlite:///{work / 'mlflow.db'}", "experiment": "cluster-bench",
                     "register_model": False, "log_every_n_steps": args.log_every},
    }
    path = work / f"job-{strategy}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_layout(args: argparse.Namespace, name: str, head_cpus: int, worker_nodes: int, strategy: str) -> dict[str, Any]:
    from mlflow.tracking import MlflowClient

    work = Path(tempfile.mkdtemp(prefix=f"lmp-cluster-bench-{strategy.lower()}-"))
    started = time.perf_counter()
    with LocalCluster(head_cpus=head_cpus) as cluster:
        for i in range(worker_nodes):
            cluster.add_node(f"node_{chr(ord('a') + i)}", num_cpus=1)
        up = time.perf_counter() - started
        job = job_config(args, work, strategy)
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "ray_jobs/train.py", "--config", str(job)], cwd=ROOT,
                              env=cluster.driver_env(), capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(f"layout {name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        workers = [a for a in cluster.state_actors("RayTrainWorker")]
        nodes = sorted({cluster.node_by_id(a["node_id"]).name for a in workers})
        encoding = run_encoding(args, cluster, work)
    result = json.loads(done.stdout[done.stdout.rfind("\n{") + 1:])
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    speeds = [m.value for m in sorted(client.get_metric_history(result["mlflow_run_id"], "tokens_per_s"),
                                      key=lambda m: m.step)]
    shutil.rmtree(work, ignore_errors=True)
    steady = speeds[1:] or speeds  # the first window includes start-up and the first batches
    row = {
        "layout": name, "nodes_with_workers": nodes, "cluster_start_s": round(up, 1),
        "job_wall_s": round(wall, 1), "tokens_per_s": round(statistics.median(steady), 1),
        "tokens_per_s_windows": [round(s, 1) for s in speeds], "steps": int(result["metrics"]["step"]),
        "encoding": encoding,
    }
    print(json.dumps(row))
    return row


def run_encoding(args: argparse.Namespace, cluster: LocalCluster, work: Path) -> dict[str, Any]:
    """ray_jobs/build_index.py with 2 encoder actors x 1 CPU on this layout; documents/s and the actors' nodes."""
    done = subprocess.run(
        [sys.executable, "ray_jobs/build_index.py", "--corpus", str(args.corpus), "--out", str(work / "index"),
         "--model", args.model, "--fields", args.fields, "--actors", "2", "--cpus-per-actor", "1", "--kind", "flat"],
        cwd=ROOT, env=cluster.driver_env(), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"encoding failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout[done.stdout.rfind("\n{") + 1:])
    actors = [a for a in cluster.state_actors() if a["class_name"].startswith(ENCODER_ACTOR)]
    return {"documents": result["rows"], "encode_seconds": result["encode_seconds"],
            "documents_per_s": result["rows_per_second"],
            "nodes_with_encoders": sorted({cluster.node_by_id(a["node_id"]).name for a in actors})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default", help="'default' (packaged MiniLM) or a model folder")
    parser.add_argument("--data", type=Path, default=ROOT / "data/demo/reports.jsonl")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8, help="per worker")
    parser.add_argument("--log-every", type=int, default=4)
    parser.add_argument("--corpus", type=Path, default=OPENOFFICE if OPENOFFICE.is_file() else ROOT / "data/demo/reports.jsonl",
                        help="Corpus for the encoding job (default: the OpenOffice bug reports, 4,548 documents).")
    parser.add_argument("--fields", default="title,description" if OPENOFFICE.is_file() else "title,text")
    args = parser.parse_args()
    print(NOTE)
    one = run_layout(args, "1 node x 2 CPUs", head_cpus=2, worker_nodes=0, strategy="PACK")
    two = run_layout(args, "2 nodes x 1 CPU", head_cpus=0, worker_nodes=2, strategy="STRICT_SPREAD")
    if len(two["nodes_with_workers"]) != 2:
        raise RuntimeError(f"layout B ran on {two['nodes_with_workers']}, not on 2 nodes")
    if len(two["encoding"]["nodes_with_encoders"]) != 2:
        raise RuntimeError(f"layout B encoded on {two['encoding']['nodes_with_encoders']}, not on 2 nodes")
    ratio = two["tokens_per_s"] / one["tokens_per_s"]
    encode_ratio = two["encoding"]["documents_per_s"] / one["encoding"]["documents_per_s"]
    print(f"training tokens/s: 1x2 {one['tokens_per_s']:.0f}  2x1 {two['tokens_per_s']:.0f}  ratio (2x1)/(1x2) {ratio:.2f}")
    print(f"encoding documents/s: 1x2 {one['encoding']['documents_per_s']:.1f}  2x1 {two['encoding']['documents_per_s']:.1f}  "
          f"ratio (2x1)/(1x2) {encode_ratio:.2f}")
    print(NOTE)
    write_result("cluster_throughput", {
        "config": {"model": args.model, "steps": args.steps, "seq": args.seq, "batch_per_worker": args.batch,
                   "workers": 2, "cpus_per_worker": 1},
        "one_node_two_cpus": one, "two_nodes_one_cpu": two,
        "ratio_two_nodes_over_one": round(ratio, 3), "encoding_ratio_two_nodes_over_one": round(encode_ratio, 3),
        "corpus": str(args.corpus), "note": NOTE,
    })


if __name__ == "__main__":
    main()
