"""The document change log of a live index: append-only, fsynced before a change is acknowledged, snapshotted.

A folder (`live.dir`: a local folder on one machine, shared storage on a cluster) holds one collection's changes:

    collection.json                    {"collection": <id>}: which log an index built from it belongs to
    LOCK                               held (flock) by the one process that appends
    log-<first seq>.jsonl              the changes since the last snapshot, one JSON object per line
    snapshot-<seq>.jsonl               the last change of every document changed up to <seq>

A change is `{"seq", "op": "upsert"|"delete", "id", ...}`; an upsert carries the document (title, text, label, metadata)
and its vector as the served model encoded it (`model`, `vector`: base64 of little-endian float32), so that
replaying the log gives every replica the same vectors. Sequence numbers start at 1, with no gap.

`append` writes a group of changes, flushes and fsyncs, and only then makes them visible to `changes_since`:
what a caller is told was appended survives a crash of the process or the machine. A crash in the middle of a
write leaves a torn last line, never acknowledged, which `ChangeLog` cuts off when it opens the folder again.
Every `snapshot_every` changes the log is compacted into a snapshot (written beside, fsynced, renamed into
place), a new log file starts and the older files go, so opening the folder reads at most one change per
document plus `snapshot_every` lines. A delete stays in the snapshot: a document of the base corpus that was
deleted must stay deleted whatever index the changes are replayed onto.
"""
from __future__ import annotations

import base64
import bisect
import fcntl
import json
import os
import threading
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, Optional

import numpy as np

COLLECTION_FILE = "collection.json"
LOCK_FILE = "LOCK"
LOG_PREFIX, SNAPSHOT_PREFIX = "log-", "snapshot-"
Op = Literal["upsert", "delete"]


class ChangeLogError(RuntimeError):
    """The change log cannot be opened or written (the message names the file and why)."""


@dataclass
class Change:
    op: Op
    id: str
    title: str = ""
    text: str = ""
    label: Optional[str] = None
    model: Optional[str] = None  # the model (URI) `vector` was encoded with
    vector: Optional[bytes] = None  # float32, little-endian
    seq: int = 0  # given by `append`
    metadata: Optional[dict[str, Any]] = None  # what a metadata fusion reads (None: none)

    def vector_array(self) -> np.ndarray:
        if self.vector is None:
            raise ValueError(f"change {self.seq} ({self.op} {self.id!r}) carries no vector")
        return np.frombuffer(self.vector, dtype="<f4")

    def to_line(self) -> str:
        record = {k: v for k, v in asdict(self).items() if v is not None}
        if self.vector is not None:
            record["vector"] = base64.b64encode(self.vector).decode("ascii")
        return json.dumps(record, ensure_ascii=False) + "\n"

    @classmethod
    def from_line(cls, line: str) -> "Change":
        record = json.loads(line)
        if "vector" in record:
            record["vector"] = base64.b64decode(record["vector"])
        return cls(**record)


def vector_bytes(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


def _fsync_folder(folder: Path) -> None:
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _seq_of(path: Path, prefix: str) -> int:
    return int(path.stem[len(prefix):])


def ensure_collection(folder: str | Path) -> str:
    """The collection id of a change-log folder, made (once, whoever asks first) when it has none yet."""
    folder = Path(folder)
    path = folder / COLLECTION_FILE
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        staging = folder / f"{COLLECTION_FILE}.{uuid.uuid4().hex}.tmp"
        staging.write_text(json.dumps({"collection": uuid.uuid4().hex[:16]}))
        try:
            os.link(staging, path)  # atomic, and fails if another process made it first
            _fsync_folder(folder)
        except FileExistsError:
            pass
        finally:
            staging.unlink()
    return str(json.loads(path.read_text())["collection"])


class ChangeLog:
    """One collection's changes, opened by the single process that appends to them (see the module doc)."""

    def __init__(self, folder: str | Path, snapshot_every: int = 10_000):
        if snapshot_every < 1:
            raise ValueError(f"snapshot_every must be positive, got {snapshot_every}")
        self.folder = Path(folder)
        self.snapshot_every = snapshot_every
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._lock_handle = open(self.folder / LOCK_FILE, "a")
        except OSError as exc:
            raise ChangeLogError(f"live.dir: cannot write to {self.folder}: {exc}") from exc
        try:
            fcntl.flock(self._lock_handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock_handle.close()
            raise ChangeLogError(f"live.dir: {self.folder} is held by another writer (one application per folder, "
                                 "one writer replica)") from None
        self.collection = ensure_collection(self.folder)
        self._write = threading.Lock()  # one append or snapshot at a time
        self._state = threading.Lock()  # what readers see: swapped only after a write is durable
        self.latest: dict[str, Change] = {}  # id -> its last change
        self._seqs: list[int] = []  # changes in seq order (seq, id), for `changes_since`
        self._ids: list[str] = []
        self.committed = 0
        self.snapshot_seq = 0
        self.torn_bytes = 0  # cut from the end of the log when it was opened
        self._recover()
        self._segment = self._open_segment()

    # ------------------------------------------------------------------ opening
    def _files(self, prefix: str) -> list[Path]:
        return sorted((p for p in self.folder.glob(f"{prefix}*.jsonl")), key=lambda p: _seq_of(p, prefix))

    def _recover(self) -> None:
        for stale in self.folder.glob("*.tmp"):
            stale.unlink()
        snapshots = self._files(SNAPSHOT_PREFIX)
        if snapshots:
            self.snapshot_seq = _seq_of(snapshots[-1], SNAPSHOT_PREFIX)
            for change in self._read(snapshots[-1], repair=False):
                self._remember(change)
            self.committed = self.snapshot_seq
        segments = self._files(LOG_PREFIX)
        for n, segment in enumerate(segments):
            for change in self._read(segment, repair=n == len(segments) - 1):
                if change.seq <= self.committed:
                    continue  # compacted into the snapshot before the older files could be removed
                if change.seq != self.committed + 1:
                    raise ChangeLogError(f"{segment}: change {change.seq} follows change {self.committed}; "
                                         "the log is missing changes")
                self._remember(change)
                self.committed = change.seq

    def _read(self, path: Path, repair: bool) -> Iterator[Change]:
        """The changes of a file; with `repair`, a torn last line (a write cut short) is cut off the file."""
        good = 0
        with path.open("rb") as handle:
            data = handle.read()
        for line in data.splitlines(keepends=True):
            try:
                if not line.endswith(b"\n"):
                    raise ValueError("no line end")
                change = Change.from_line(line.decode("utf-8"))
            except (ValueError, TypeError) as exc:
                if repair and good + len(line) == len(data):
                    self.torn_bytes = len(line)
                    with path.open("r+b") as handle:
                        handle.truncate(good)
                        os.fsync(handle.fileno())
                    return
                raise ChangeLogError(f"{path}: unreadable change at byte {good}: {exc}") from None
            good += len(line)
            yield change

    def _open_segment(self) -> Any:
        segments = self._files(LOG_PREFIX)
        path = segments[-1] if segments else self.folder / f"{LOG_PREFIX}{self.committed + 1:020d}.jsonl"
        handle = path.open("a", encoding="utf-8")
        _fsync_folder(self.folder)
        return handle

    def _remember(self, change: Change) -> None:
        self.latest[change.id] = change
        self._seqs.append(change.seq)
        self._ids.append(change.id)

    # ------------------------------------------------------------------ writing
    def append(self, changes: list[Change]) -> list[int]:
        """Durably append `changes` in order; returns their sequence numbers (visible to readers only now)."""
        if not changes:
            return []
        with self._write:
            first = self.committed + 1
            for n, change in enumerate(changes):
                change.seq = first + n
            end = self._segment.tell()
            try:
                self._segment.write("".join(change.to_line() for change in changes))
                self._segment.flush()
                os.fsync(self._segment.fileno())
            except OSError as exc:
                try:  # none of the group is acknowledged: take back whatever part of it reached the file
                    self._segment.close()
                    os.truncate(self._segment.name, end)
                finally:
                    self._segment = self._open_segment()
                raise ChangeLogError(f"cannot write the change log in {self.folder}: {exc}") from exc
            with self._state:
                for change in changes:
                    self._remember(change)
                self.committed = changes[-1].seq
            if self.committed - self.snapshot_seq >= self.snapshot_every:
                self._snapshot()
        return [change.seq for change in changes]

    def _snapshot(self) -> None:
        """Compact the log into snapshot-<committed>.jsonl, start a new log file, remove the older files."""
        seq = self.committed
        with self._state:
            kept = sorted(self.latest.values(), key=lambda change: change.seq)
        staging = self.folder / f"{SNAPSHOT_PREFIX}{seq:020d}.jsonl.tmp"
        with staging.open("w", encoding="utf-8") as handle:
            handle.writelines(change.to_line() for change in kept)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staging, self.folder / f"{SNAPSHOT_PREFIX}{seq:020d}.jsonl")
        self._segment.close()
        self._segment = (self.folder / f"{LOG_PREFIX}{seq + 1:020d}.jsonl").open("a", encoding="utf-8")
        _fsync_folder(self.folder)
        for old in self._files(LOG_PREFIX)[:-1] + self._files(SNAPSHOT_PREFIX)[:-1]:
            old.unlink()
        with self._state:
            self._seqs = [change.seq for change in kept]
            self._ids = [change.id for change in kept]
            self.snapshot_seq = seq

    # ------------------------------------------------------------------ reading
    def changes_since(self, seq: int) -> tuple[int, list[Change]]:
        """(committed, the last change of each document changed after `seq`, in seq order)."""
        with self._state:
            committed = self.committed
            if seq >= committed:
                return committed, []
            start = bisect.bisect_right(self._seqs, seq)
            changes = [self.latest[doc_id] for s, doc_id in zip(self._seqs[start:], self._ids[start:])
                       if self.latest[doc_id].seq == s]
        return committed, changes

    def describe(self) -> dict[str, Any]:
        sizes = sum(p.stat().st_size for p in self._files(LOG_PREFIX) + self._files(SNAPSHOT_PREFIX))
        with self._state:
            return {"collection": self.collection, "committed": self.committed, "snapshot_seq": self.snapshot_seq,
                    "documents_changed": len(self.latest), "bytes": sizes, "torn_bytes": self.torn_bytes}

    def close(self) -> None:
        self._segment.close()
        self._lock_handle.close()
