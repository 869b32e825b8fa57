"""Ray Data and Serve on a real three-node cluster: work lands on several nodes and still adds up (Tune's trials on
several nodes: test_multinode_study.py).

Every node of the `local_cluster` has exactly one CPU, so work that asks for one CPU per
encoder actor or replica cannot share a node: when it runs at the same time it must
spread, and the tests check from the State API that it did. The drivers are the production
entry points (`ray_jobs/build_index.py`, `ray_jobs/serve.py --detach`)
run as subprocesses that join the cluster, as `ray job submit` would run them.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from lmplatform.serving.launch import DEFAULT_CONFIG
from lmplatform.testing.local_cluster import LocalCluster, free_port
from tests.cluster.conftest import ROOT, last_json, run_driver
from tests.conftest import write_corpus
from tests.serving.servable import QUICK_STOP

# Ray Data names a map_batches pool's actor class after its operator: MapWorker(MapBatches(EncodeBatch)...)
ENCODER_ACTOR = "MapWorker(MapBatches(EncodeBatch)"
APP = "lmp-multinode"
RETRIEVER_REPLICA = f"ServeReplica:{APP}:RetrieverDeployment"
SERVE_ACTORS = ("ServeController", "ProxyActor", "ServeReplica:")


def _actors(cluster: LocalCluster, class_prefix: str) -> list[dict]:
    return [a for a in cluster.state_actors() if a["class_name"].startswith(class_prefix)]


def _new_actors(cluster: LocalCluster, class_prefix: str, before: set[str]) -> list[dict]:
    return [a for a in _actors(cluster, class_prefix) if a["actor_id"] not in before]


def _actor_ids(cluster: LocalCluster, class_prefix: str) -> set[str]:
    return {a["actor_id"] for a in _actors(cluster, class_prefix)}


def _node_names(cluster: LocalCluster, actors: list[dict]) -> list[str]:
    return [cluster.node_by_id(a["node_id"]).name for a in actors]


def _failed(done: subprocess.CompletedProcess) -> str:
    return f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-4000:]}"


@dataclass
class EncodedCorpus:
    out: Path
    ids: list[str]
    result: dict
    actors: list[dict]


@pytest.fixture(scope="module")
def encoded_corpus(local_cluster, tiny_bert, tmp_path_factory) -> EncodedCorpus:
    """ray_jobs/build_index.py with two one-CPU encoder actors: shards, FAISS index, document store."""
    tmp = tmp_path_factory.mktemp("encode")
    corpus = write_corpus(tmp / "corpus.jsonl", n=48)
    ids = [json.loads(line)["id"] for line in corpus.read_text().splitlines()]
    before = _actor_ids(local_cluster, ENCODER_ACTOR)
    done = run_driver(local_cluster, [
        "ray_jobs/build_index.py", "--corpus", str(corpus), "--out", str(tmp / "built"), "--model", str(tiny_bert),
        "--fields", "text", "--actors", "2", "--cpus-per-actor", "1", "--batch-size", "16", "--kind", "flat",
    ], cwd=ROOT, LMP_HOME=str(tmp))
    assert done.returncode == 0, _failed(done)
    return EncodedCorpus(tmp / "built", ids, last_json(done.stdout), _new_actors(local_cluster, ENCODER_ACTOR, before))


def test_ray_data_encoder_actors_on_two_nodes_encode_every_document(local_cluster, encoded_corpus) -> None:
    import pyarrow.parquet as pq

    actors = encoded_corpus.actors
    assert len(actors) == 2, actors
    nodes = _node_names(local_cluster, actors)
    assert len(set(nodes)) == 2, f"both encoder actors ran on {nodes[0]}"

    # Every document made it, once, through the actors into the shards, the index and the store.
    shards = sorted((encoded_corpus.out / "shards").glob("*.parquet"))
    shard_ids = [i for s in shards for i in pq.read_table(s, columns=["id"]).column("id").to_pylist()]
    assert sorted(shard_ids) == sorted(encoded_corpus.ids)
    index_dir = encoded_corpus.out / "index"
    assert sorted(json.loads((index_dir / "ids.json").read_text())) == sorted(encoded_corpus.ids)
    stored = [json.loads(line)["id"] for line in (index_dir / "documents.jsonl").read_text().splitlines()]
    assert sorted(stored) == sorted(encoded_corpus.ids)
    assert encoded_corpus.result["rows"] == encoded_corpus.result["documents"] == len(encoded_corpus.ids)
    assert encoded_corpus.result["bm25"]["documents"] == len(encoded_corpus.ids)  # hybrid search's BM25, by default
    assert (index_dir / "bm25" / "bm25_meta.json").is_file()


def _serve_config(tmp: Path, port: int) -> Path:
    """The shipped serve/config.yaml with two one-CPU retriever replicas (one node each) on a free port."""
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    raw["http_options"]["port"] = port
    (app,) = raw["applications"]
    app.update(name=APP, logging_config={"log_level": "WARNING", "enable_access_log": False})
    # The ingress and classifier take no CPU: a fraction on a node would leave it less than the
    # one CPU a retriever replica needs, and with one-CPU nodes a replica would never place.
    app["deployments"] = [
        {"name": "ServeIngress", "num_replicas": 1, "ray_actor_options": {"num_cpus": 0}, **QUICK_STOP},
        {"name": "RetrieverDeployment", "num_replicas": 2, "ray_actor_options": {"num_cpus": 1}, **QUICK_STOP},
        {"name": "ClassifierDeployment", "num_replicas": 1, "ray_actor_options": {"num_cpus": 0}, **QUICK_STOP},
    ]
    path = tmp / "serve.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _serve_actors_alive(cluster: LocalCluster) -> list[str]:
    return [a["class_name"] for a in cluster.state_actors() if a["state"] in ("ALIVE", "PENDING_CREATION", "RESTARTING")
            and a["class_name"].startswith(SERVE_ACTORS)]


def test_serve_replicas_on_two_nodes_answer_over_http(local_cluster, encoded_corpus, tiny_bert, tmp_path) -> None:
    port = free_port()
    config = _serve_config(tmp_path, port)
    before = _actor_ids(local_cluster, RETRIEVER_REPLICA)
    done = run_driver(local_cluster, [
        "ray_jobs/serve.py", "--config", str(config), "--model", str(tiny_bert), "--index",
        str(encoded_corpus.out / "index"), "--address", local_cluster.address, "--detach",
    ], cwd=ROOT, LMP_HOME=str(tmp_path))
    try:
        assert done.returncode == 0, _failed(done)
        assert last_json(done.stdout)["url"] == f"http://127.0.0.1:{port}"

        replicas = [a for a in _new_actors(local_cluster, RETRIEVER_REPLICA, before) if a["state"] == "ALIVE"]
        assert len(replicas) == 2, replicas
        nodes = _node_names(local_cluster, replicas)
        assert len(set(nodes)) == 2, f"both retriever replicas run on {nodes[0]}"
        proxies = [a for a in local_cluster.state_actors("ProxyActor") if a["state"] == "ALIVE"]
        assert _node_names(local_cluster, proxies) == ["head"]  # the config's proxy_location: HeadOnly

        # Real HTTP through the head's proxy: each document's own text finds it first.
        texts = {json.loads(line)["id"]: json.loads(line)["text"]
                 for line in (encoded_corpus.out / "index" / "documents.jsonl").read_text().splitlines()}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            for doc_id in encoded_corpus.ids[:8]:
                response = client.post("/v1/search", json={"query": texts[doc_id], "k": 3})
                assert response.status_code == 200, response.text
                hits = response.json()["hits"]
                assert len(hits) == 3 and hits[0]["id"] == doc_id, hits
    finally:
        # Ray's own CLI, as a user stops a detached app: Serve's controller, proxy and replicas go.
        stopped = subprocess.run([sys.executable, "-m", "ray.serve.scripts", "shutdown", "--address",
                                  local_cluster.dashboard_url, "--yes"], env=local_cluster.driver_env(),
                                 capture_output=True, text=True, check=False)
        deadline = time.time() + 120  # a safety net for a stuck shutdown, not a timing assertion
        while _serve_actors_alive(local_cluster) and time.time() < deadline:
            time.sleep(0.5)
    assert stopped.returncode == 0, _failed(stopped)
    assert not _serve_actors_alive(local_cluster), _serve_actors_alive(local_cluster)
    # Later tests get a full, idle cluster: nothing holds a CPU any more.
    local_cluster.wait_until_idle()
