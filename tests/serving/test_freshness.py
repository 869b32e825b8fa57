"""A replica's catch-up with the change-log writer before a read, and the breaker that keeps reads from waiting on a
writer that is down (lmplatform/serving/freshness.py), without Ray."""
from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from lmplatform.serving.freshness import WriterBreaker, catch_up


def test_a_read_waits_for_the_writer_only_up_to_its_bound() -> None:
    """`catch_up` applies what the writer answers; a writer that does not answer in time, or fails, leaves the
    replica answering from what it has applied (False), never waiting longer or failing the read."""
    applied: list[tuple[int, list]] = []

    async def apply(committed: int, changes: list) -> None:
        applied.append((committed, changes))

    async def answering(seq: int) -> tuple[int, list]:
        return seq + 2, ["a", "b"]

    async def silent(seq: int) -> tuple[int, list]:
        await asyncio.sleep(60)
        return seq, []

    async def failing(seq: int) -> tuple[int, list]:
        raise RuntimeError("ActorUnavailableError: the writer is restarting")

    live = SimpleNamespace(seq=3)
    assert asyncio.run(catch_up(live, answering, apply, 0.5)) is True and applied == [(5, ["a", "b"])]
    start = time.monotonic()
    assert asyncio.run(catch_up(live, silent, apply, 0.2)) is False
    assert time.monotonic() - start < 5 and len(applied) == 1
    assert asyncio.run(catch_up(live, failing, apply, 0.2)) is False and len(applied) == 1
    assert asyncio.run(catch_up(live, answering, apply, None)) is True and len(applied) == 2  # None: no bound


class FakeWriter:
    """A catch-up of release "r" against a writer that is up or down (then it answers after `wait` more reads have
    started, as one that times out); counts the calls that reached it."""

    def __init__(self, breaker: WriterBreaker):
        self.breaker, self.up, self.calls = breaker, True, 0
        self.released = asyncio.Event()

    async def attempt(self) -> dict[str, bool]:
        self.calls += 1
        if not self.up:
            await self.released.wait()  # the read's bound, ended by the test
        answered = {"r": self.up}
        self.breaker.record(answered)
        return answered


def test_while_the_writer_is_down_one_read_per_period_asks_it_and_the_others_do_not_wait() -> None:
    now = [100.0]
    breaker = WriterBreaker(retry_s=1.0, clock=lambda: now[0])
    writer = FakeWriter(breaker)

    async def read() -> dict[str, bool]:
        return dict(await breaker.call(writer.attempt, ["r"]))

    async def scenario() -> None:
        assert await read() == {"r": True} and writer.calls == 1 and not breaker.open
        writer.up = False
        writer.released.set()
        assert await read() == {"r": False} and writer.calls == 2 and breaker.open  # this read paid the bound
        for _ in range(5):  # the rest answer at once, without a call
            assert await read() == {"r": False}
        assert writer.calls == 2
        now[0] += 1.0  # a period later one read asks again; reads meanwhile do not wait for it
        writer.released.clear()
        asking = asyncio.ensure_future(read())
        await asyncio.sleep(0)
        assert writer.calls == 3 and await read() == {"r": False} and writer.calls == 3
        writer.released.set()
        assert await asking == {"r": False} and breaker.open  # still down: open for another period
        writer.up = True
        assert await read() == {"r": False} and writer.calls == 3  # not yet a period since that try ended
        now[0] += 1.0
        assert await read() == {"r": True} and writer.calls == 4 and not breaker.open  # the writer is back
        assert await read() == {"r": True} and writer.calls == 5  # every read asks again

    asyncio.run(scenario())


def test_one_release_not_answered_opens_the_breaker_and_a_full_answer_closes_it() -> None:
    breaker = WriterBreaker(retry_s=5.0, clock=lambda: 0.0)
    breaker.record({"a": True, "b": False})
    assert breaker.open
    breaker.record({"a": True, "b": True})  # e.g. a release loaded now, which waits for the writer however long
    assert not breaker.open
