"""The change log without Ray: what is acknowledged survives reopening, a torn write is cut off, snapshots compact
without losing a delete, one writer per folder."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from lmplatform.serving.changelog import Change, ChangeLog, ChangeLogError, ensure_collection, vector_bytes


def _upsert(doc_id: str, value: float, text: str = "text") -> Change:
    return Change("upsert", doc_id, title="t", text=text, label="l", model="models:/m/1",
                  vector=vector_bytes(np.full(4, value, dtype=np.float32)))


def _state(log: ChangeLog, since: int = 0) -> list[tuple[int, str, str]]:
    return [(c.seq, c.op, c.id) for c in log.changes_since(since)[1]]


def test_changes_are_numbered_durable_and_read_back_compacted(tmp_path: Path) -> None:
    log = ChangeLog(tmp_path, snapshot_every=100)
    assert log.append([_upsert("a", 1.0), _upsert("b", 2.0)]) == [1, 2]
    assert log.append([Change("delete", "a")]) == [3]
    assert log.append([_upsert("b", 3.0, "again")]) == [4]
    assert _state(log) == [(3, "delete", "a"), (4, "upsert", "b")]  # the last change of each document
    assert _state(log, 3) == [(4, "upsert", "b")] and log.changes_since(4) == (4, [])
    log.close()

    reopened = ChangeLog(tmp_path, snapshot_every=100)
    assert reopened.committed == 4 and _state(reopened) == [(3, "delete", "a"), (4, "upsert", "b")]
    again = reopened.latest["b"]
    assert (again.text, again.label, again.model) == ("again", "l", "models:/m/1")
    assert again.vector_array().tolist() == [3.0] * 4  # the vector's float32 bytes, exactly
    assert reopened.collection == ensure_collection(tmp_path)
    assert reopened.append([_upsert("c", 1.0)]) == [5]


def test_one_writer_per_folder(tmp_path: Path) -> None:
    log = ChangeLog(tmp_path)
    with pytest.raises(ChangeLogError, match="held by another writer"):
        ChangeLog(tmp_path)
    log.close()
    ChangeLog(tmp_path).close()


def test_a_torn_last_line_is_cut_off_and_a_torn_middle_is_an_error(tmp_path: Path) -> None:
    log = ChangeLog(tmp_path)
    log.append([_upsert("a", 1.0), _upsert("b", 1.0)])
    log.close()
    segment = next(tmp_path.glob("log-*.jsonl"))
    intact = segment.stat().st_size
    with segment.open("a") as handle:
        handle.write('{"op": "upsert", "id": "c", "te')  # a write cut short: never acknowledged
    reopened = ChangeLog(tmp_path)
    assert reopened.committed == 2 and reopened.torn_bytes > 0 and segment.stat().st_size == intact
    assert reopened.append([_upsert("c", 1.0)]) == [3]
    reopened.close()
    assert ChangeLog(tmp_path).committed == 3  # the repaired file reads whole

    lines = segment.read_text().splitlines(keepends=True)
    segment.write_text(lines[0] + "not json\n" + "".join(lines[1:]))
    with pytest.raises(ChangeLogError, match="unreadable change"):
        ChangeLog(tmp_path)


def test_snapshots_compact_the_log_and_keep_deletes(tmp_path: Path) -> None:
    log = ChangeLog(tmp_path, snapshot_every=4)
    log.append([_upsert("a", 1.0), _upsert("b", 1.0), _upsert("a", 2.0)])
    log.append([Change("delete", "b")])  # the 4th change: a snapshot
    snapshots = sorted(p.name for p in tmp_path.glob("snapshot-*"))
    assert snapshots == [f"snapshot-{4:020d}.jsonl"] and len(list(tmp_path.glob("log-*"))) == 1
    assert len((tmp_path / snapshots[0]).read_text().splitlines()) == 2  # a (seq 3), b deleted
    log.append([_upsert("c", 1.0)])
    log.close()
    reopened = ChangeLog(tmp_path, snapshot_every=4)
    assert reopened.committed == 5 and reopened.snapshot_seq == 4
    assert _state(reopened) == [(3, "upsert", "a"), (4, "delete", "b"), (5, "upsert", "c")]
    assert _state(reopened, 4) == [(5, "upsert", "c")]
    assert reopened.describe()["documents_changed"] == 3


def test_a_failed_write_is_taken_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = ChangeLog(tmp_path)
    log.append([_upsert("a", 1.0)])
    size = next(tmp_path.glob("log-*")).stat().st_size

    real_fsync, failures = os.fsync, [OSError(28, "No space left on device")]

    def no_space_once(handle: int) -> None:
        if failures:
            raise failures.pop()
        real_fsync(handle)

    monkeypatch.setattr(os, "fsync", no_space_once)
    with pytest.raises(ChangeLogError, match="No space left"):
        log.append([_upsert("b", 1.0)])
    monkeypatch.undo()
    assert log.committed == 1 and _state(log) == [(1, "upsert", "a")] and next(tmp_path.glob("log-*")).stat().st_size == size
    assert log.append([_upsert("b", 1.0)]) == [2]
    log.close()
    assert _state(ChangeLog(tmp_path)) == [(1, "upsert", "a"), (2, "upsert", "b")]
