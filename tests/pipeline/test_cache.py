"""Stage reuse keys come from content: the same config and the same input bytes give the same key wherever they
live and whatever the run is called; any change to a value or to an input's bytes gives another key."""
from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import lmplatform
from lmplatform.pipeline.cache import CachedStage, StageCache, code_version, fingerprint_path, stage_key


def _config(data: Path, lr: float = 2e-5, **placement: str) -> dict:
    return {"data": {"train_paths": [str(data)]}, "optim": {"lr": lr},
            "tracking": {"run_name": placement.get("run_name", "a"), "tracking_uri": placement.get("uri", "sqlite:///a.db")},
            "checkpoint": {"storage_path": placement.get("storage", "/runs/a")}}


def test_the_key_follows_content_not_names_or_places(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "train.jsonl", tmp_path / "b" / "copy.jsonl"
    for path in (first, second):
        path.parent.mkdir()
        path.write_text('{"query": "q", "document": "d"}\n')
    key = stage_key("train", _config(first))
    assert stage_key("train", _config(second, run_name="b", uri="sqlite:///b.db", storage="/runs/b")) == key
    assert stage_key("mine", _config(first)) != key
    assert stage_key("train", _config(first, lr=3e-5)) != key
    second.write_text('{"query": "q", "document": "other"}\n')
    assert stage_key("train", _config(second)) != key


def test_the_packaged_model_is_keyed_by_its_files() -> None:
    from lmplatform.models.resolve import packaged_model_path

    assert stage_key("mine", {"init": "default"}) == stage_key("mine", {"init": "default"})
    assert stage_key("mine", {"init_from": "default"}) == stage_key("mine", {"init_from": str(packaged_model_path())})


def test_the_code_version_is_the_package_source_not_the_checkout(tmp_path: Path) -> None:
    """A commit that changes no package file (docs, benches, a dirty tree elsewhere) keeps the key; an edit to a
    package file, or a new one, changes it; compiled bytecode does not count."""
    package = tmp_path / "lmplatform"
    shutil.copytree(Path(lmplatform.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    assert fingerprint_path(package) == fingerprint_path(Path(lmplatform.__file__).parent)
    assert code_version().startswith(fingerprint_path(package)[:16] + "+torch=")
    before = fingerprint_path(package)
    (tmp_path / "README.md").write_text("outside the package\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "cache.cpython-311.pyc").write_bytes(b"\0bytecode")
    assert fingerprint_path(package) == before
    module = package / "pipeline" / "cache.py"
    module.write_text(module.read_text() + "\n# an edit\n")
    edited = fingerprint_path(package)
    assert edited != before
    (package / "pipeline" / "extra.py").write_text("")
    assert fingerprint_path(package) not in (before, edited)


def test_an_entry_whose_outputs_are_gone_or_runs_are_elsewhere_is_not_reused(tmp_path: Path) -> None:
    cache = StageCache(tmp_path / "cache")
    output = tmp_path / "pairs.jsonl"
    output.write_text("{}\n")
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cache.store(CachedStage("k1", "mined", "mine", "run-1", {"output_path": str(output)}, {"metrics": {"mine/pairs": 1.0}},
                            tracking_uri=store))
    assert cache.lookup("k1", store).record == {"metrics": {"mine/pairs": 1.0}}
    assert cache.lookup("k2", store) is None
    # made under another MLflow store: its runs (the model a later step registers from) are not in this one
    assert cache.lookup("k1", f"sqlite:///{tmp_path / 'other.db'}") is None
    output.unlink()
    assert cache.lookup("k1", store) is None


def test_a_second_run_of_the_same_stage_waits_for_the_first(tmp_path: Path) -> None:
    cache = StageCache(tmp_path / "cache")
    order: list[str] = []
    holding = threading.Event()

    def first() -> None:
        with cache.hold("k"):
            holding.set()
            time.sleep(0.3)
            order.append("first done")

    thread = threading.Thread(target=first)
    thread.start()
    holding.wait()
    with cache.hold("k"):
        order.append("second in")
    thread.join()
    assert order == ["first done", "second in"]
