"""Stage reuse: a stage whose resolved config and inputs match one already run is not run again.

The key is derived from content, never from names or places:
- the stage's kind and its resolved config, without what only says where things go or how they are
  named (tracking URIs and run names, storage paths, registered-model names);
- a fingerprint of every local file or folder the config names, by content: the data files, the
  starting model, and the outputs of the upstream stages it reads (a mine stage's pairs, a model folder),
  so a downstream stage is reused exactly when what it reads is the same;
- the code version: a digest of lmplatform's own source files and the versions of torch and transformers, so a
  change to the code is a change to the key, while a commit that touches only docs, benches or tests (or a dirty
  working tree elsewhere) keeps every entry.

An entry is a small JSON file under `<cache>/<key>.json` naming the outputs of the run that made it (which
stay in that run's folder), its metrics and the reports it sent while it ran. Concurrent trials that reach
the same stage at the same time run it once: the first holds a lock on the key while it runs, the others
wait and then reuse it. An entry whose outputs were deleted is ignored, and so is one made under another MLflow
tracking store: the reused stage's runs (the model a later step registers from) must be in the reusing pipeline's.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Optional

import lmplatform
from lmplatform.models.resolve import model_version_source, resolve_model_path
from lmplatform.runtime import resolve_tracking_uri

# Config keys that name places, runs or registry entries: they change nothing a stage produces.
PLACEMENT_KEYS = frozenset({"tracking_uri", "experiment", "run_name", "registered_model", "register_model", "storage_path"})
MODEL_KEYS = frozenset({"init_from", "name_or_path", "anchor_model", "teacher", "miner_model", "cross_encoder", "first_stage"})
FORMAT = 1
# Libraries whose version changes what a stage produces (numerics, tokenisation).
KEYED_LIBRARIES = ("torch", "transformers")


@dataclass
class CachedStage:
    """What a finished stage left behind, as a later run reuses it."""

    key: str
    stage: str
    kind: str
    pipeline_run: str
    outputs: dict[str, Optional[str]]  # model_dir / output_path / one file per pairs output
    record: dict[str, Any]  # the StageState fields worth copying (metrics, runs, versions)
    reports: list[dict[str, Any]] = field(default_factory=list)  # what it reported while it ran, in order
    tracking_uri: str = ""  # the MLflow store holding the runs in `record`

    def outputs_exist(self) -> bool:
        return all(path is None or Path(path).exists() for path in self.outputs.values())


@lru_cache(maxsize=256)
def _content_digest(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of a file's bytes (cached by path, size and mtime: a 3.5 MB corpus is hashed once per process)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _is_content(path: Path) -> bool:
    """A file that is part of what a folder holds: not hidden, not Python bytecode (which importing writes)."""
    return path.is_file() and not path.name.startswith(".") and path.suffix != ".pyc" and "__pycache__" not in path.parts


def fingerprint_path(path: Path) -> str:
    """Content fingerprint of a file, or of a folder's files (their relative names and bytes)."""
    if path.is_file():
        stat = path.stat()
        return _content_digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    digest = hashlib.sha256()
    for child in sorted(p for p in path.rglob("*") if _is_content(p)):
        digest.update(str(child.relative_to(path)).encode() + b"\0" + fingerprint_path(child).encode() + b"\n")
    return digest.hexdigest()


def _model_fingerprint(reference: str) -> str:
    """A model reference by content: 'default' and folders by their files, registry URIs pinned to a version."""
    if reference.startswith("models:/"):  # an alias moves: pin it to the artifacts of the version it names now
        from mlflow.tracking import MlflowClient

        return model_version_source(MlflowClient(resolve_tracking_uri(None)), reference)
    if reference.startswith("runs:/"):
        return reference

    try:
        return fingerprint_path(Path(resolve_model_path(reference)))
    except FileNotFoundError:  # a Hugging Face id not on this machine: the run fails on it anyway
        return reference


def _canonical(value: Any, key: str = "") -> Any:
    """The config with placements dropped and every local path or model replaced by its fingerprint."""
    if isinstance(value, dict):
        return {k: _canonical(v, k) for k, v in sorted(value.items()) if k not in PLACEMENT_KEYS}
    if isinstance(value, (list, tuple)):
        return [_canonical(v, key) for v in value]
    if isinstance(value, str):
        if key in MODEL_KEYS and value not in ("bm25", ""):
            return {"model": _model_fingerprint(value)}
        path = Path(value).expanduser()
        if len(value) < 4096 and ("/" in value or path.suffix) and path.exists():
            return {"content": fingerprint_path(path)}
    return value


@lru_cache(maxsize=1)
def code_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "absent"

    libraries = ",".join(f"{name}={installed(name)}" for name in KEYED_LIBRARIES)
    # The package's files as `fingerprint_path` sees any folder: what its code is, wherever it was installed.
    return f"{fingerprint_path(Path(lmplatform.__file__).parent)[:16]}+{libraries}"


def stage_key(kind: str, content: dict[str, Any]) -> str:
    """The reuse key of a stage of `kind` whose resolved config is `content` (stage references already
    replaced by the upstream outputs' paths)."""
    canonical = {"format": FORMAT, "kind": kind, "code": code_version(), "config": _canonical(content)}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, default=str).encode()).hexdigest()[:24]


class StageCache:
    """Entries under one folder, shared by every pipeline (and every trial of a study) that points at it."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def _entry(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def lookup(self, key: str, tracking_uri: str) -> Optional[CachedStage]:
        """The entry of `key` made under `tracking_uri`, if its outputs are still there."""
        path = self._entry(key)
        if not path.is_file():
            return None
        try:
            cached = CachedStage(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            return None  # written by another version of this format
        return cached if cached.outputs_exist() and cached.tracking_uri == tracking_uri else None

    def store(self, cached: CachedStage) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self._entry(cached.key)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(cached), indent=2, default=str))
        os.replace(tmp, target)

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        """Exclusive while the stage of `key` runs: a second run of the same stage waits, then finds the entry."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / f"{key}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released by the kernel if this process dies
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
