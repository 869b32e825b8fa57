"""A study of pipeline trials on the real three-node cluster: two trials train at the same time on different nodes;
one loses its node mid-training, and the study, restored, finishes it from its last checkpoint without redoing
its finished stages. The driver is the production entry point (`ray_jobs/tune.py`) run as a subprocess."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import yaml

from lmplatform.testing.local_cluster import LocalCluster
from tests.cluster.conftest import ROOT, WORKER_NODES, run_driver
from tests.conftest import committed_checkpoint_steps, write_duplicate_reports

TRAIN_WORKER = "RayTrainWorker"


def _space(tmp_path: Path, tiny_bert: Path, mlflow_uri: str) -> Path:
    corpus, relations = write_duplicate_reports(tmp_path / "data", groups=120)
    pipeline = {
        "name": "cluster-study",
        "tracking": {"tracking_uri": mlflow_uri, "experiment": "cluster-study"},
        "storage_path": str(tmp_path / "shared"),  # one folder every node sees, as NFS or S3 would be
        "stages": [
            {"name": "data", "pairs": {"corpus": str(corpus), "relations": str(relations)}},
            {"name": "train", "init_from": str(tiny_bert), "run": {
                "model": {"max_seq_length": 32},
                "data": {"train_paths": ["stage:data/train"], "validation_paths": ["stage:data/dev"]},
                "objective": {"name": "biencoder"},
                # Long enough that both trials train at once whatever the skew of their start-ups (seconds apart on
                # a loaded machine): at 40 steps the first could finish before the second's first checkpoint.
                "optim": {"batch_size": 4, "max_steps": 160, "lr": 1e-3},
                "scaling": {"cpus_per_worker": 1},
                "checkpoint": {"every_n_steps": 10, "max_failures": 0},  # a lost node fails the trial
                "tracking": {"log_every_n_steps": 10, "eval_every_n_steps": 80}}},
        ],
    }
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(pipeline))
    space = {
        "study": "cluster-study", "trial": "pipeline", "base_pipeline": str(tmp_path / "pipeline.yaml"),
        "parameters": {"stages.train.run.optim.lr": {"distribution": "loguniform", "low": 1e-4, "high": 1e-2}},
        "metric": "train/val_inbatch_mrr", "mode": "max", "num_samples": 2, "max_concurrent": "auto",
        "scheduler": {"name": "fifo"}, "storage_path": str(tmp_path / "tune"), "champion": {"register_best": False},
    }
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    return path


def _alive_workers(cluster: LocalCluster, exclude: set[str]) -> list[dict]:
    return [a for a in cluster.state_actors(TRAIN_WORKER) if a["actor_id"] not in exclude and a["state"] == "ALIVE"]


def test_two_pipeline_trials_overlap_on_two_nodes_and_a_lost_node_is_finished_after_restore(
    local_cluster, tiny_bert, mlflow_uri, tmp_path
) -> None:
    from mlflow.tracking import MlflowClient

    from lmplatform.pipeline.state import FINISHED, PipelineState

    space = _space(tmp_path, tiny_bert, mlflow_uri)
    before = {a["actor_id"] for a in local_cluster.state_actors(TRAIN_WORKER)}
    seen: dict[str, object] = {}

    def kill_one_trial_node_while_both_train() -> None:
        deadline = time.time() + 400
        shared = tmp_path / "shared"
        while time.time() < deadline:
            # Each trial has a checkpoint its restart can resume from, whichever of the two loses its node. Checked
            # first: reading the snapshot files is cheap, a State API call takes seconds on a loaded machine.
            trials_with_a_checkpoint = [p for p in shared.iterdir() if committed_checkpoint_steps(p)] if shared.is_dir() else []
            if len(trials_with_a_checkpoint) < 2:
                time.sleep(0.05)
                continue
            workers = _alive_workers(local_cluster, before)
            nodes = [local_cluster.node_by_id(w["node_id"]).name for w in workers]
            if len(workers) == 2:
                seen["overlap_nodes"] = nodes  # two trials' workers alive at once
                victim = next((n for n in nodes if n in WORKER_NODES), None)
                if victim is not None:
                    seen["killed"] = victim
                    local_cluster.kill_node(victim)
                    return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_one_trial_node_while_both_train, daemon=True)
    killer.start()
    try:
        first = run_driver(local_cluster, ["ray_jobs/tune.py", "--space", str(space)], cwd=ROOT, LMP_HOME=str(tmp_path))
        killer.join(timeout=5)
        assert "killed" in seen, f"the two trials never trained at the same time: {seen}\n{first.stdout[-3000:]}"
        assert len(set(seen["overlap_nodes"])) == 2, seen  # on different nodes
    finally:
        if "killed" in seen:
            local_cluster.restart_node(str(seen["killed"]))
    (study,) = [p for p in (tmp_path / "tune").iterdir() if p.is_dir()]
    pipelines = sorted((tmp_path / "shared").glob(f"{study.name}.*"))
    assert len(pipelines) == 2
    states = {p.name: PipelineState.load(p) for p in pipelines}
    lost = [name for name, state in states.items() if state.stages["train"].status != FINISHED]
    assert lost, {n: s.stages["train"].status for n, s in states.items()}  # the trial on the killed node

    resumed = run_driver(local_cluster, ["ray_jobs/tune.py", "--space", str(space), "--resume", study.name], cwd=ROOT,
                         LMP_HOME=str(tmp_path))
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    client = MlflowClient(mlflow_uri)
    runs = client.search_runs([client.get_experiment_by_name("cluster-study").experiment_id],
                              filter_string=f"tags.`lmp.tune_study` = '{study.name}'")
    (parent,) = [run for run in runs if "mlflow.parentRunId" not in run.data.tags]  # the study's own run
    rows = json.loads(Path(client.download_artifacts(parent.info.run_id, "trials.json", str(tmp_path))).read_text())
    assert [row["status"] for row in rows] == ["TERMINATED", "TERMINATED"]
    for name in lost:
        after = PipelineState.load(tmp_path / "shared" / name)
        train, data = after.stages["train"], after.stages["data"]
        assert train.status == FINISHED and train.attempts == 2, (  # the lost attempt, then the one that finished it
            f"{name}: {train}\n{first.stdout[-4000:]}\n--- resumed:\n{resumed.stdout[-6000:]}")
        assert data.status == FINISHED and data == states[name].stages["data"]  # its pairs stage was not run again
        resumed_from = client.get_metric_history(train.mlflow_run_id, "resumed_from_step")
        assert resumed_from and resumed_from[0].value >= 10  # from a checkpoint taken before the node died
