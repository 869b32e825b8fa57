"""The document change log of a live index: append-only, fsynced before a change is acknowledged, snapshotted.

A folder (`live.dir`: a local folder on one machine, shared storage on a cluster) holds one collection's changes:

    collection.json                    {"collection": <id>}: which log an index built from it belongs to
    LOCK                               held (flock) by the one process that appends
    log-<first seq>.jsonl              the changes since the last snapshot, one JSON object per line
    snapshot-<seq>.jsonl               the last change of every document changed up to <seq>

A change is `{"seq", "op": "upsert"|"delete", "id", ...}`; an upsert carries the document (title, text, label, metadata)
and its vector as the served model encoded it (`model`, `vector`: base64 of little-endian float32), so that
replaying the log gives every replica the same vectors. Sequence numbers start at 1, with no gap. Each line ends
with `"crc"`, the CRC-32 of the line without it: a record damaged on disk is found, never read as another change.

`append` writes a group of changes, flushes and fsyncs, and only then makes them visible to `changes_since`:
what a caller is told was appended survives a crash of the process or the machine. A crash in the middle of a
write leaves a torn last line, never acknowledged, which `ChangeLog` cuts off when it opens the folder again. A
write that fails (a full disk, an I/O error) is taken back before `append` raises, so no later change is written
after a fragment; if it cannot be taken back, appends are refused until the log is opened again. A damaged line
anywhere but at the end is an error naming its file and byte offset: opening stops there, and nothing is dropped.
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
import logging
import os
import threading
import uuid
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, Optional

import numpy as np

logger = logging.getLogger(__name__)

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
        """One JSON object and a line end; its last member, "crc", is the CRC-32 of the object written without it."""
        record = {k: v for k, v in asdict(self).items() if v is not None}
        if self.vector is not None:
            record["vector"] = base64.b64encode(self.vector).decode("ascii")
        body = json.dumps(record, ensure_ascii=False)
        return f'{body[:-1]}{CRC_MEMBER}{_crc(body)}"}}\n'

    @classmethod
    def from_line(cls, line: str) -> "Change":
        """A change from its line; a ValueError when the line is not one, or fails its checksum (a line without a
        "crc", as logs written before checksums were, is read unchecked)."""
        at = line.rfind(CRC_MEMBER)
        if at >= 0:
            stored = line[at + len(CRC_MEMBER):].rstrip("\n")
            if stored != f'{_crc(line[:at] + "}")}"}}':
                raise ValueError("the change fails its checksum (the bytes on disk are not those written)")
        record = json.loads(line)
        record.pop("crc", None)
        if "vector" in record:
            record["vector"] = base64.b64decode(record["vector"])
        return cls(**record)


CRC_MEMBER = ', "crc": "'


def _crc(body: str) -> str:
    return f"{zlib.crc32(body.encode('utf-8')):08x}"


def vector_bytes(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


def _write_all(handle: int, data: bytes) -> None:
    """Write every byte of `data` (os.write may write fewer than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(handle, view):]


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
        with staging.open("w", encoding="utf-8") as handle:  # durable before it is linked: never an empty id
            handle.write(json.dumps({"collection": uuid.uuid4().hex[:16]}))
            handle.flush()
            os.fsync(handle.fileno())
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
        self._broken: Optional[str] = None  # why writes are refused (a failed write that could not be taken back)
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

    def _open_segment(self, path: Optional[Path] = None) -> int:
        """A descriptor appending to `path` (default: the last log file, else a new one). Unbuffered: what `append`
        wrote is in the file or it raised, and nothing is left in a buffer to reach the file later."""
        if path is None:
            segments = self._files(LOG_PREFIX)
            path = segments[-1] if segments else self.folder / f"{LOG_PREFIX}{self.committed + 1:020d}.jsonl"
        handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _fsync_folder(self.folder)
        except OSError:
            os.close(handle)
            raise
        return handle

    def _remember(self, change: Change) -> None:
        self.latest[change.id] = change
        self._seqs.append(change.seq)
        self._ids.append(change.id)

    # ------------------------------------------------------------------ writing
    def append(self, changes: list[Change]) -> list[int]:
        """Durably append `changes` in order; returns their sequence numbers (visible to readers only now).

        A write or fsync that fails is taken back (the file cut to where the group began) and raises: none of the
        group is acknowledged, and no later change is written after a fragment of it. When even the taking back
        fails, every later append raises until the log is opened again (which cuts a torn last line)."""
        if not changes:
            return []
        with self._write:
            if self._broken is not None:
                raise ChangeLogError(f"the change log in {self.folder} refuses writes: {self._broken}; restart the "
                                     "writer (opening the log cuts the unacknowledged fragment)")
            first = self.committed + 1
            for n, change in enumerate(changes):
                change.seq = first + n
            data = "".join(change.to_line() for change in changes).encode("utf-8")
            try:
                end = os.lseek(self._segment, 0, os.SEEK_END)
            except OSError as exc:
                raise ChangeLogError(f"cannot write the change log in {self.folder}: {exc}") from exc
            try:
                _write_all(self._segment, data)
                os.fsync(self._segment)
            except OSError as exc:
                self._take_back(end, exc)
                raise ChangeLogError(f"cannot write the change log in {self.folder}: {exc}") from exc
            with self._state:
                for change in changes:
                    self._remember(change)
                self.committed = changes[-1].seq
            if self.committed - self.snapshot_seq >= self.snapshot_every:
                try:
                    self._snapshot()
                except OSError as exc:  # the changes are durable: a compaction that failed is tried again later
                    logger.warning("change log %s: snapshot at change %d failed, the log keeps growing until one "
                                   "succeeds: %s", self.folder, self.committed, exc)
        return [change.seq for change in changes]

    @property
    def refusing_writes(self) -> Optional[str]:
        """Why appends are refused until the log is opened again (None: they are not)."""
        return self._broken

    def _take_back(self, end: int, cause: OSError) -> None:
        """Cut the current log file back to `end` bytes after a failed write; if that fails too, refuse writes."""
        try:
            os.ftruncate(self._segment, end)
            os.fsync(self._segment)
        except OSError as exc:
            self._broken = f"a failed write ({cause}) could not be taken back ({exc})"
            logger.error("change log %s: %s", self.folder, self._broken)

    def _snapshot(self) -> None:
        """Compact the log into snapshot-<committed>.jsonl, start a new log file, remove the older files.

        Each step is durable before the next, and the current log file is swapped only once its successor is
        open: a failure at any step leaves a log that appends go on writing to, and that opens whole."""
        seq = self.committed
        with self._state:
            kept = sorted(self.latest.values(), key=lambda change: change.seq)
        staging = self.folder / f"{SNAPSHOT_PREFIX}{seq:020d}.jsonl.tmp"
        try:
            with staging.open("w", encoding="utf-8") as handle:
                handle.writelines(change.to_line() for change in kept)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(staging, self.folder / f"{SNAPSHOT_PREFIX}{seq:020d}.jsonl")
        finally:
            staging.unlink(missing_ok=True)
        successor = self._open_segment(self.folder / f"{LOG_PREFIX}{seq + 1:020d}.jsonl")
        previous, self._segment = self._segment, successor
        os.close(previous)
        with self._state:
            self._seqs = [change.seq for change in kept]
            self._ids = [change.id for change in kept]
            self.snapshot_seq = seq
        for old in self._files(LOG_PREFIX)[:-1] + self._files(SNAPSHOT_PREFIX)[:-1]:
            old.unlink()

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
        os.close(self._segment)
        self._lock_handle.close()
