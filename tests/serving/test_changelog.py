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


def _segment_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("log-*"))


def test_a_write_that_fails_mid_record_loses_no_acknowledged_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Half a record reaches the file, then the disk is full: the half is taken back, so the next acknowledged
    change is never written after a fragment (which a reopening would cut, and its sequence number with it)."""
    log = ChangeLog(tmp_path)
    log.append([_upsert("a", 1.0)])
    size = _segment_size(tmp_path)
    real_write, calls = os.write, []

    def half_then_full(handle: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(handle, bytes(data[: len(data) // 2]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(ChangeLogError, match="No space left"):
        log.append([_upsert("b", 1.0), _upsert("c", 1.0)])
    monkeypatch.undo()
    assert _segment_size(tmp_path) == size and log.committed == 1
    assert log.append([_upsert("d", 1.0)]) == [2]
    assert log.append([_upsert("e", 1.0)]) == [3]
    log.close()
    reopened = ChangeLog(tmp_path)
    assert reopened.torn_bytes == 0 and _state(reopened) == [(1, "upsert", "a"), (2, "upsert", "d"), (3, "upsert", "e")]


def test_when_a_failed_write_cannot_be_taken_back_writes_stop_until_reopening(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    log = ChangeLog(tmp_path)
    log.append([_upsert("a", 1.0)])
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda handle, data: real_write(handle, bytes(data[:10])) and (_ for _ in ()).throw(
        OSError(5, "Input/output error")))
    monkeypatch.setattr(os, "ftruncate", lambda handle, size: (_ for _ in ()).throw(OSError(5, "Input/output error")))
    with pytest.raises(ChangeLogError, match="Input/output error"):
        log.append([_upsert("b", 1.0)])
    monkeypatch.undo()
    with pytest.raises(ChangeLogError, match="refuses writes.*restart the writer"):  # never acknowledged on a fragment
        log.append([_upsert("c", 1.0)])
    assert log.committed == 1
    log.close()
    reopened = ChangeLog(tmp_path)  # the fragment is the torn last line: cut
    assert reopened.torn_bytes == 10 and reopened.committed == 1
    assert reopened.append([_upsert("c", 1.0)]) == [2]
    assert _state(reopened) == [(1, "upsert", "a"), (2, "upsert", "c")]


@pytest.mark.parametrize("failing", ["replace", "successor"])
def test_a_snapshot_that_fails_keeps_the_write_acknowledged_and_the_log_writable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    """A snapshot fails before its commit (the rename) or after it (the next log file cannot be opened): the append
    that set it off is durable and answered, appends go on into the current file, and the log opens whole."""
    log = ChangeLog(tmp_path, snapshot_every=2)
    real_replace, real_open = os.replace, os.open

    def replace(src, dst, *args, **kwargs):
        if failing == "replace":
            raise OSError(28, "No space left on device")
        return real_replace(src, dst, *args, **kwargs)

    def open_(path, flags, *args, **kwargs):
        if failing == "successor" and not os.path.exists(path):  # no new log file can be made
            raise OSError(24, "Too many open files")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "open", open_)
    assert log.append([_upsert("a", 1.0), _upsert("b", 1.0)]) == [1, 2]  # set off a snapshot, which failed
    assert log.append([Change("delete", "a")]) == [3]  # tried again: fails again, answered all the same
    monkeypatch.undo()
    assert not list(tmp_path.glob("*.tmp")) and log.snapshot_seq == 0
    assert log.append([_upsert("c", 1.0)]) == [4]  # and now it succeeds
    assert log.snapshot_seq == 4 and _state(log) == [(2, "upsert", "b"), (3, "delete", "a"), (4, "upsert", "c")]
    log.close()
    assert _state(ChangeLog(tmp_path)) == [(2, "upsert", "b"), (3, "delete", "a"), (4, "upsert", "c")]


def test_a_damaged_record_is_reported_with_its_position_never_dropped(tmp_path: Path) -> None:
    log = ChangeLog(tmp_path)
    log.append([_upsert("a", 1.0), _upsert("b", 1.0), _upsert("c", 1.0)])
    log.close()
    segment = next(tmp_path.glob("log-*.jsonl"))
    lines = segment.read_bytes().splitlines(keepends=True)
    assert all(b'"crc": "' in line for line in lines)
    damaged = lines[1].replace(b'"text"', b'"texT"').replace(b'"b"', b'"B"')  # still JSON, not the bytes written
    segment.write_bytes(lines[0] + damaged + lines[2])
    with pytest.raises(ChangeLogError, match=rf"{segment.name}: unreadable change at byte {len(lines[0])}: .*checksum"):
        ChangeLog(tmp_path)
    assert segment.read_bytes() == lines[0] + damaged + lines[2]  # nothing cut or rewritten


def test_a_log_written_before_checksums_still_opens(tmp_path: Path) -> None:
    (tmp_path / f"log-{1:020d}.jsonl").write_text('{"op": "upsert", "id": "a", "text": "t", "seq": 1}\n'
                                                  '{"op": "delete", "id": "a", "seq": 2}\n')
    assert _state(ChangeLog(tmp_path)) == [(2, "delete", "a")]


def test_the_collection_file_is_durable_before_it_is_linked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real_fsync, real_link = os.fsync, os.link

    def fsync(handle: int) -> None:
        events.append(f"fsync {os.readlink(f'/proc/self/fd/{handle}')}")
        real_fsync(handle)

    def link(src, dst, *args, **kwargs) -> None:
        events.append(f"link {src}")
        real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    ensure_collection(tmp_path)
    staging = next(e.split(" ", 1)[1] for e in events if e.startswith("link "))
    assert events.index(f"fsync {staging}") < events.index(f"link {staging}")


def test_the_writers_health_check_fails_while_its_log_refuses_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Serve restarts a writer whose health check fails, and the restart's reopening cuts the fragment."""
    from lmplatform.serving.writer import ChangeLogWriter

    writer = ChangeLogWriter.func_or_class(str(tmp_path), 100)
    writer.check_health()
    monkeypatch.setattr(os, "write", lambda handle, data: (_ for _ in ()).throw(OSError(5, "Input/output error")))
    monkeypatch.setattr(os, "ftruncate", lambda handle, size: (_ for _ in ()).throw(OSError(5, "Input/output error")))
    with pytest.raises(ChangeLogError):
        writer.log.append([_upsert("a", 1.0)])
    monkeypatch.undo()
    with pytest.raises(ChangeLogError, match="could not be taken back"):
        writer.check_health()
    writer.log.close()
