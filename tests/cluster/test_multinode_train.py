"""Ray Train on a real three-node cluster: placement across nodes, shared checkpoints, node failure.

The driver is the production entry point (`ray_jobs/train.py`) run as a subprocess that
joins the cluster, so the same job and config are exercised unchanged.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml

from lmplatform.testing.local_cluster import LocalCluster
from tests.cluster.conftest import ROOT, WORKER_NODES, last_json, run_driver
from tests.conftest import committed_checkpoint_steps, write_corpus

TRAIN_WORKER = "RayTrainWorker"


def _job(tmp_path: Path, tiny_bert: Path, mlflow_uri: str, **overrides: object) -> Path:
    """A run config for two workers that may not share a node, checkpointing to shared storage."""
    # Large enough that a run stays in its first epoch: every epoch re-runs the Ray Data
    # read across nodes, which costs seconds on a loaded 2-core machine.
    corpus = write_corpus(tmp_path / "corpus.jsonl", n=1500)
    cfg = {
        "model": {"name_or_path": str(tiny_bert), "max_seq_length": 32},
        "data": {"train_paths": [str(corpus)], "validation_fraction": 0.2},
        "objective": {"name": "mlm", "pseudo_perplexity_sentences": 2},
        "optim": {"batch_size": 8, "lr": 1e-3, "max_steps": 6},
        "scaling": {"num_workers": 2, "cpus_per_worker": 1, "placement_strategy": "STRICT_SPREAD"},
        # One folder every node sees: a stand-in for NFS or S3 on a real cluster.
        "checkpoint": {"storage_path": str(tmp_path / "shared"), "every_n_steps": 3},
        "tracking": {"tracking_uri": mlflow_uri, "experiment": "multinode", "register_model": False,
                     "log_every_n_steps": 1},
    }
    for dotted, value in overrides.items():
        section, key = dotted.split("__")
        cfg[section][key] = value
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _train_workers(cluster: LocalCluster, exclude: set[str]) -> list[dict]:
    return [a for a in cluster.state_actors(TRAIN_WORKER) if a["actor_id"] not in exclude]


def _history(mlflow_uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    from mlflow.tracking import MlflowClient

    return [(m.step, m.value) for m in MlflowClient(mlflow_uri).get_metric_history(run_id, key)]


def _node_names(cluster: LocalCluster, actors: list[dict]) -> list[str]:
    return [cluster.node_by_id(a["node_id"]).name for a in actors]


@pytest.mark.slow
def test_two_workers_on_two_nodes_checkpoint_to_shared_storage_and_recover_from_a_killed_node(
    local_cluster, tiny_bert, mlflow_uri, tmp_path
) -> None:
    # 10 checkpoints: the kill must land after the controller has committed one and before the run ends, and the
    # controller's commits lag the workers' steps by seconds when the machine is loaded.
    every, max_steps = 10, 100
    before = {a["actor_id"] for a in local_cluster.state_actors(TRAIN_WORKER)}
    job = _job(tmp_path, tiny_bert, mlflow_uri, optim__max_steps=max_steps,
               checkpoint__every_n_steps=every, checkpoint__max_failures=2, tracking__log_every_n_steps=every)
    killed: dict[str, object] = {}

    def kill_a_worker_node_after_first_checkpoint() -> None:
        # "Committed" = listed in the Train controller's checkpoint manager snapshot, the
        # record a restarted worker group resumes from. A worker's report returns once the
        # files are written, before the controller registers them; a kill in that window
        # loses the checkpoint, so the worker's own log is not proof enough.
        # The workers stay where they were placed until a failure, so their nodes are looked up once (a State API
        # call takes seconds on a loaded machine) and the commit is then polled from the snapshot file alone.
        deadline = time.time() + 600
        alive: list[dict] = []
        while len(alive) < 2 and time.time() < deadline:
            alive = [a for a in _train_workers(local_cluster, before) if a["state"] == "ALIVE"]
            time.sleep(0.1)
        victims = [n for n in _node_names(local_cluster, alive) if n in WORKER_NODES]
        while victims and time.time() < deadline:
            committed = committed_checkpoint_steps(tmp_path / "shared")
            if committed and max(committed) < max_steps:
                killed.update(node=victims[0], pid=local_cluster.kill_node(victims[0]),
                              committed_step=max(committed), workers=alive)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_a_worker_node_after_first_checkpoint, daemon=True)
    killer.start()
    try:
        done = run_driver(local_cluster, ["ray_jobs/train.py", "--config", str(job)], cwd=ROOT)
        killer.join(timeout=5)
        assert killed, "no worker node was killed during training"
        assert not local_cluster.nodes[killed["node"]].alive()
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        result = last_json(done.stdout)
        assert result["metrics"]["step"] == max_steps
        assert _history(mlflow_uri, result["mlflow_run_id"], "loss")[-1][0] == max_steps
        assert len(set(_node_names(local_cluster, killed["workers"]))) == 2  # STRICT_SPREAD held across nodes
        # Checkpoints were written by the workers to the shared folder, not to a node-local path.
        checkpoints = sorted((tmp_path / "shared" / result["run_name"]).glob("checkpoint_*"))
        assert checkpoints, f"no checkpoint under {tmp_path / 'shared' / result['run_name']}"
        assert (checkpoints[-1] / "training_state.pt").is_file() and (checkpoints[-1] / "progress.json").is_file()
        assert (checkpoints[-1] / "model" / "config.json").is_file()  # the final export travels with it

        resumed = _history(mlflow_uri, result["mlflow_run_id"], "resumed_from_step")
        assert len(resumed) == 1, f"expected one recovery, got {resumed}"
        step = int(resumed[0][1])
        # Resumed from a real checkpoint taken no earlier than the one committed before the kill.
        assert step % every == 0 and step >= every
        assert step >= killed["committed_step"], f"resumed at {step}, before the checkpoint committed at the kill: {killed}"
        # The restarted worker group ran only on the nodes still alive.
        restarted = [a for a in _train_workers(local_cluster, before)
                     if a["actor_id"] not in {w["actor_id"] for w in killed["workers"]}]
        assert len(restarted) == 2
        assert killed["node"] not in _node_names(local_cluster, restarted)
        assert len(set(_node_names(local_cluster, restarted))) == 2
    finally:
        if killed:
            local_cluster.restart_node(str(killed["node"]))  # later tests get the full cluster back
