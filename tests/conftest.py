"""Shared fixtures: one local Ray per session, a tiny random BERT, MLflow on sqlite in tmp."""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import pytest

# Before anything imports ray: keep every port on 127.0.0.1 and auth off (see runtime.py).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.pop("RAY_ADDRESS", None)
os.environ.pop("MLFLOW_TRACKING_URI", None)
# Like an activated venv: Ray workers and `ray job submit` entrypoints that call `python`
# must get the interpreter lmplatform is installed in.
os.environ["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"

import lmplatform  # noqa: E402,F401  (applies the remaining runtime defaults)

TOKEN_WORDS = (
    "printer database login timeout crash server disk memory network error user report failed restart "
    "payment gateway invoice mobile app screen button certificate expired vpn tunnel backup queue"
).split()


def write_tiny_bert(folder: Path, hidden: int = 32, layers: int = 2) -> Path:
    """A randomly initialised BERT with the packaged MiniLM tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from lmplatform.models.resolve import packaged_model_path

    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_path()))
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=256,
    )
    import torch

    torch.manual_seed(0)
    BertForMaskedLM(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def write_corpus(path: Path, n: int = 120, seed: int = 0) -> Path:
    import random

    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            words = [rng.choice(TOKEN_WORDS) for _ in range(rng.randint(6, 24))]
            handle.write(json.dumps({"id": f"d{i}", "text": " ".join(words)}) + "\n")
    return path


@pytest.fixture
def corpus_file(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus.jsonl")


@pytest.fixture
def mlflow_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"


@pytest.fixture
def project_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from a fresh project folder so runs/ and mlruns/ land in tmp."""
    monkeypatch.setenv("LMP_HOME", str(tmp_path))
    (tmp_path / "mlruns").mkdir(exist_ok=True)
    return tmp_path


@pytest.fixture(scope="session")
def ray_session(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """One local Ray for the whole session (start-up costs seconds)."""
    import ray

    from lmplatform.ray_runtime import ensure_ray

    # Its own session folder (short: socket paths have a length limit), so no other Ray on
    # this machine is ever mistaken for it.
    temp_dir = tempfile.mkdtemp(prefix="lmpray-", dir="/tmp")
    ensure_ray(num_cpus=2, temp_dir=temp_dir)
    yield ray
    ray.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_dashboard_url(ray_session) -> str:  # noqa: ANN001
    """The session Ray's dashboard, where `ray job submit` and the State API connect."""
    from ray._private.worker import global_worker

    return f"http://{global_worker.node.address_info['webui_url']}"


class TrainWorkerKiller(threading.Thread):
    """SIGKILLs one Ray Train worker of the run under test once `ready()` holds.

    Workers already alive when the killer is made belong to an earlier test (Ray may not
    have reaped them yet) and are never touched: killing one would leave the run under
    test uninterrupted.
    """

    def __init__(self, gcs_address: str, ready: Callable[[], bool], timeout_s: float = 300) -> None:
        super().__init__(daemon=True)
        self.gcs_address, self.ready, self.timeout_s = gcs_address, ready, timeout_s
        self.earlier = {actor.actor_id for actor in self._alive_workers()}
        self.killed_pid: Optional[int] = None

    def _alive_workers(self) -> list:
        from ray.util.state import list_actors

        alive = [("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")]
        return list_actors(address=self.gcs_address, filters=alive)

    def run(self) -> None:
        deadline = time.time() + self.timeout_s  # a safety net against a hung run, not a timing assertion
        while time.time() < deadline:
            if self.ready():
                for actor in self._alive_workers():
                    if actor.pid and actor.actor_id not in self.earlier:
                        os.kill(actor.pid, signal.SIGKILL)
                        self.killed_pid = actor.pid
                        return
            time.sleep(0.1)
