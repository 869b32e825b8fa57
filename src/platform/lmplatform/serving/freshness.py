"""How fresh a replica's reads are: before a read, the replica applies the changes the change-log writer committed
since its last one (`catch_up`), waiting for the writer at most `live.read_wait_s`.

While the writer is down (restarting, its node gone) that bound would be paid by every read. `WriterBreaker` pays
it once per `live.read_retry_s`: after the writer failed to answer, reads answer at once from the changes already
applied (and say so: `caught_up: false`), but for one read per period, which asks the writer again while the others
go on without waiting for it; the first that finds the writer answering lets every read ask again.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Mapping, Optional

logger = logging.getLogger("ray.serve")

Answered = Mapping[str, bool]  # per release id: whether the writer answered its catch-up


async def catch_up(live: Any, changes_since: Callable[[int], Awaitable[tuple[int, list[Any]]]],
                   apply: Callable[[int, list[Any]], Awaitable[None]], wait_s: Optional[float]) -> bool:
    """Apply the changes the writer committed after `live.seq` (`changes_since(seq)` -> (committed, changes)).

    True when the writer answered within `wait_s` (None: however long it takes); False when it did not, or failed
    (restarting, gone): the read then answers from the changes already applied, and says so."""
    try:
        committed, changes = await asyncio.wait_for(changes_since(live.seq), wait_s)
    except Exception as exc:  # a read never waits on the writer beyond its bound, nor fails with it
        _log_behind(live.seq, exc)
        return False
    if committed > live.seq:
        await apply(committed, changes)
    return True


_BEHIND = {"logged_at": 0.0}


def _log_behind(seq: int, exc: BaseException) -> None:
    """One line per 10 s at most: a writer down would otherwise log once per read."""
    now = time.monotonic()
    if now - _BEHIND["logged_at"] >= 10.0:
        _BEHIND["logged_at"] = now
        logger.warning("reads answer from change %d: the change-log writer did not answer (%s: %s)", seq,
                       type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "no answer within the bound")


class WriterBreaker:
    """Whether reads ask the writer for its changes: closed (they do) until a catch-up finds the writer not
    answering, then open: one read in `retry_s` asks, the others do not, until one finds the writer answering."""

    def __init__(self, retry_s: float, clock: Callable[[], float] = time.monotonic):
        self.retry_s, self._clock = retry_s, clock
        self._next_try: Optional[float] = None  # None: closed
        self._trying = False

    @property
    def open(self) -> bool:
        return self._next_try is not None

    def record(self, answered: Answered) -> None:
        """The outcome of a catch-up of every release asked for: any release not answered opens the breaker (the
        next try `retry_s` from now); all answered closes it."""
        self._next_try = None if all(answered.values()) else self._clock() + self.retry_s

    async def call(self, attempt: Callable[[], Awaitable[Answered]], release_ids: list[str]) -> Answered:
        """`attempt()` (a catch-up of `release_ids`, which records its outcome here) while closed, and for one read
        once `retry_s` has passed while open; every other read while open: not answered, at once."""
        if self.open and (self._trying or self._clock() < self._next_try):
            return {release_id: False for release_id in release_ids}
        self._trying = self.open
        try:
            return await attempt()
        finally:
            self._trying = False
