"""`ChangeLogWriter`: the one replica that orders document changes and makes them durable (`changelog.ChangeLog`).

Why one writer: a single process numbering the changes gives them one order that every replica applies
alike, with no coordination between replicas; the log it appends to is what a restarted replica, a reload or
a redeployed application replays. Concurrent upserts are grouped (`@serve.batch`): one write and one fsync
per group, so the disk's sync latency is paid once for many requests, and each is acknowledged only after it.

Serve restarts the replica if it dies, or fails its health check (a log that refuses writes after a failed write
it could not take back); it opens the folder again (cutting off a torn, unacknowledged last line) and goes on from
the last durable change. A replica of an earlier deployment of the application may
still hold the folder's lock while it stops: the new one waits for it (`LOCK_WAIT_S`).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

from ray import serve

from lmplatform.serving.access_log import keep_access_log_off_console
from lmplatform.serving.changelog import Change, ChangeLog, ChangeLogError

LOCK_WAIT_S = 60.0


def open_log(folder: str, snapshot_every: int, wait_s: float = LOCK_WAIT_S) -> ChangeLog:
    """The folder's change log, waiting up to `wait_s` for another writer to let go of it."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return ChangeLog(folder, snapshot_every)
        except ChangeLogError as exc:
            if "held by another writer" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0.1}, max_ongoing_requests=1024)
class ChangeLogWriter:
    def __init__(self, folder: str, snapshot_every: int):
        keep_access_log_off_console()
        self.log = open_log(folder, snapshot_every)

    async def append(self, changes: list[Change]) -> list[int]:
        """Append one request's changes durably; returns their sequence numbers."""
        return await self._append_batched(changes)

    @serve.batch(max_batch_size=256, batch_wait_timeout_s=0.0)
    async def _append_batched(self, groups: list[list[Change]]) -> list[list[int]]:
        from lmplatform.serving.metrics import record_committed

        seqs = await asyncio.to_thread(self.log.append, [change for group in groups for change in group])
        record_committed(self.log.committed)
        out, start = [], 0
        for group in groups:
            out.append(seqs[start:start + len(group)])
            start += len(group)
        return out

    def check_health(self) -> None:
        """Serve's periodic health check. A log that refuses writes (a failed write it could not take back) fails it,
        so Serve restarts this replica, and opening the log again cuts the unacknowledged fragment."""
        if self.log.refusing_writes is not None:
            raise ChangeLogError(f"change log {self.log.folder}: {self.log.refusing_writes}")

    def changes_since(self, seq: int) -> tuple[int, list[Change]]:
        """(committed seq, the last change of each document changed after `seq`)."""
        return self.log.changes_since(seq)

    def describe(self) -> dict[str, Any]:
        return self.log.describe()

    def record_routing_stats(self) -> dict[str, Any]:
        """The log's state (collection, committed seq, snapshot), for `replicas.ask_each`."""
        return self.log.describe()
