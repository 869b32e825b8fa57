"""Shared fixtures: one local Ray per session, a tiny random BERT, MLflow on sqlite in tmp."""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional

import pytest

if TYPE_CHECKING:
    import random

    import numpy as np

    from lmplatform.testing.local_cluster import LocalCluster

# Before anything imports ray: keep every port on 127.0.0.1 and auth off (see runtime.py).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# Ray Train's controller notices a finished or failed worker at its next poll (2 s by default): a second per run, on
# average, in a suite of tiny runs.
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")
# A watcher actor per Train run for spot-node preemption notices, which a local test cluster never gets.
os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
os.environ.pop("RAY_ADDRESS", None)
os.environ.pop("MLFLOW_TRACKING_URI", None)
# Like an activated venv: Ray workers and `ray job submit` entrypoints that call `python`
# must get the interpreter lmplatform is installed in.
os.environ["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"

from lmplatform.runtime import apply_runtime_defaults

apply_runtime_defaults()  # the remaining defaults, as the `lmp` command line applies them

# A test that uses one of these fixtures needs a live Ray: it is marked `ray` here, not by hand
# (`make test-fast` deselects them). readme_head: the job-submission test's own `ray start` head.
RAY_FIXTURES = frozenset({"ray_session", "ray_cluster", "local_cluster", "readme_head"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if RAY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.ray)
    # `make test` hands whole files to two processes in collection order (--no-loadscope-reorder): heaviest first,
    # by each file's seconds in the last `make test-results`.
    from tests.suite_results import heaviest_files_first

    suite = Path(__file__).resolve().parents[1] / "bench" / "results" / "test_suite.json"
    file_seconds = json.loads(suite.read_text()).get("file_seconds", {}) if suite.is_file() else {}
    position = {nodeid: n for n, nodeid in enumerate(heaviest_files_first([i.nodeid for i in items], file_seconds))}
    items.sort(key=lambda item: position[item.nodeid])


# The public data sets beside the repository (../shared/data), where this machine has them: tests that
# read them are skipped elsewhere. Library code never names this folder; callers pass it.
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

TOKEN_WORDS = (
    "printer database login timeout crash server disk memory network error user report failed restart "
    "payment gateway invoice mobile app screen button certificate expired vpn tunnel backup queue"
).split()


def text_batches(rng: "random.Random", count: int, rows: int, words: tuple[int, int]) -> list[dict[str, "np.ndarray"]]:
    """`count` Ray Data numpy batches of `rows` texts of TOKEN_WORDS, each words[0] to words[1] words long."""
    import numpy as np

    batches = []
    for _ in range(count):
        column = np.empty(rows, dtype=object)
        column[:] = [" ".join(rng.choice(TOKEN_WORDS) for _ in range(rng.randint(*words))) for _ in range(rows)]
        batches.append({"text": column})
    return batches


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


@pytest.fixture
def mlm_parts(tiny_bert: Path):
    """(tokenizer, MaskedLanguageModel, DynamicMasker) of the tiny BERT, fresh for each test."""
    from transformers import AutoTokenizer

    from lmplatform.models.masked_lm import MaskedLanguageModel
    from lmplatform.objectives.masking import DynamicMasker

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert))
    return tokenizer, MaskedLanguageModel.from_pretrained(tiny_bert), DynamicMasker(tokenizer)


def write_corpus(path: Path, n: int = 120, seed: int = 0) -> Path:
    import random

    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            words = [rng.choice(TOKEN_WORDS) for _ in range(rng.randint(6, 24))]
            handle.write(json.dumps({"id": f"d{i}", "text": " ".join(words)}) + "\n")
    return path


def write_duplicate_reports(folder: Path, groups: int = 24, seed: int = 0) -> tuple[Path, Path]:
    """(corpus.jsonl, relations.jsonl) in OpenOffice's layout: reports {id, title, description, product, component,
    created} and duplicate pairs {duplicate_id, master_id, split}; each group is a master and one or two duplicates
    sharing its key words, product and component and filed within days of it, its split (train / dev / test, 2:1:1)
    drawn by group; 20 unrelated reports join the corpus."""
    import random

    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    reports, relations = [], []
    for group in range(groups):
        key = rng.sample(TOKEN_WORDS, 4)
        split = ("train", "train", "dev", "test")[group % 4]
        ids = [f"r{group}-{n}" for n in range(1 + 1 + group % 2)]
        for report_id in ids:
            words = key + rng.sample(TOKEN_WORDS, 3)
            rng.shuffle(words)
            reports.append({"id": report_id, "title": " ".join(words[:3]), "description": " ".join(words[3:])})
        relations += [{"duplicate_id": d, "master_id": ids[0], "split": split} for d in ids[1:]]
    reports += [{"id": f"x{n}", "title": " ".join(rng.sample(TOKEN_WORDS, 3)),
                 "description": " ".join(rng.sample(TOKEN_WORDS, 5))}
                for n in range(20)]
    filed = random.Random(seed + 1)  # its own draws: the texts stay those of `seed`
    for report in reports:
        group = report["id"].split("-")[0]
        report |= {"product": f"p{int(group[1:]) % 3}", "component": f"{group}-part",
                   "created": (int(group[1:]) * 30 + filed.randint(0, 3)) * 86_400} if group.startswith("r") else \
            {"product": f"p{filed.randint(0, 2)}", "component": f"x-part{filed.randint(0, 3)}",
             "created": filed.randint(0, 800) * 86_400}
    corpus, links = folder / "corpus.jsonl", folder / "relations.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in reports))
    links.write_text("".join(json.dumps(r) + "\n" for r in relations))
    return corpus, links


@pytest.fixture
def corpus_file(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "corpus.jsonl")


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty MLflow sqlite store with its schema made. Making one runs MLflow's migrations (a second or more),
    so each test's store starts as a copy of this one: `new_mlflow_store`."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


def new_mlflow_store(template: Path, folder: Path) -> str:
    """A fresh, empty MLflow store at `folder`/mlflow.db (a copy of `template`); its tracking URI."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, folder / "mlflow.db")
    return f"sqlite:///{folder / 'mlflow.db'}"


@pytest.fixture
def mlflow_uri(tmp_path: Path, mlflow_template: Path) -> str:
    return new_mlflow_store(mlflow_template, tmp_path / "mlruns")


@pytest.fixture
def project_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_template: Path) -> Path:
    """Run from a fresh project folder so runs/ and mlruns/ land in tmp."""
    monkeypatch.setenv("LMP_HOME", str(tmp_path))
    new_mlflow_store(mlflow_template, tmp_path / "mlruns")  # the project's default store
    return tmp_path


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator["LocalCluster"]:
    """One local Ray for the whole session (start-up costs seconds), in its own processes and
    session folder, so no other Ray on this machine is ever mistaken for it. `make test` runs two pytest
    processes (see the Makefile): each that reaches a Ray test starts its own."""
    from lmplatform.testing.local_cluster import LocalCluster

    # No dashboard and no log monitor: no test here uses the State API or reads a worker's output on the driver's
    # console, and the two poll all session long (about a tenth of a core in all, more as worker logs pile up).
    cluster = LocalCluster(head_cpus=2, dashboard=False, log_monitor=False).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def ray_worker_env() -> dict[str, str]:
    """Environment variables of this module's Ray workers, beyond lmplatform's own (a folder's conftest.py may add)."""
    return {}


@pytest.fixture(scope="module")
def ray_session(ray_cluster, ray_worker_env: dict[str, str]):
    """This test module's driver connection to the session's Ray.

    Each module gets a fresh driver (a new Ray job): a driver that lives through dozens of
    Train runs has been seen to miss an actor's ALIVE notification and wait forever on
    the next run's controller; and a job's leftover actors die with it.
    """
    import logging

    import ray

    from lmplatform.ray_runtime import embedded_runtime_env, quiet_ray_data

    runtime_env = embedded_runtime_env()
    runtime_env["env_vars"] = {**runtime_env["env_vars"], **ray_worker_env}
    ray.init(address=ray_cluster.address, logging_level=logging.WARNING, runtime_env=runtime_env)
    quiet_ray_data()
    yield ray
    ray.shutdown()


def committed_checkpoint_steps(storage: Path) -> list[int]:
    """Steps of the checkpoints Ray Train's controller has registered under `storage` (its
    snapshot files): a checkpoint folder on disk is not yet one a restarted run resumes from."""
    steps = []
    for snapshot in storage.rglob("checkpoint_manager_snapshot.json"):
        try:
            results = json.loads(snapshot.read_text())["checkpoint_results"]
        except (OSError, ValueError, KeyError):  # being rewritten
            continue
        steps += [int(r["metrics"]["step"]) for r in results]
    return steps


class TrainWorkerKiller(threading.Thread):
    """SIGKILLs one Ray Train worker of the run under test once `ready()` holds.

    Workers already alive when the killer is made belong to an earlier test (Ray may not
    have reaped them yet) and are never touched: killing one would leave the run under
    test uninterrupted.
    """

    def __init__(self, ready: Callable[[], bool], timeout_s: float = 300) -> None:
        super().__init__(daemon=True)
        self.ready, self.timeout_s = ready, timeout_s
        self.earlier = set(self._alive_workers())
        self.killed_pid: Optional[int] = None

    @staticmethod
    def _alive_workers() -> dict[str, int]:
        """{actor id: pid} of the alive Train workers, from the GCS's actor table through this driver's connection
        (the session Ray runs no dashboard, so no State API)."""
        from ray._private.state import actors

        return {actor_id: info["Pid"] for actor_id, info in actors(actor_state_name="ALIVE").items()
                if info["ActorClassName"] == "RayTrainWorker"}

    def run(self) -> None:
        deadline = time.time() + self.timeout_s  # a safety net against a hung run, not a timing assertion
        while time.time() < deadline:
            if self.ready():
                for actor_id, pid in self._alive_workers().items():
                    if pid and actor_id not in self.earlier:
                        os.kill(pid, signal.SIGKILL)
                        self.killed_pid = pid
                        return
            time.sleep(0.1)
