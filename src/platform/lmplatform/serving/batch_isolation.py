"""One bad member of a `@serve.batch` call fails only itself.

A batch is computed in one call (one tokenizer call, one forward pass, one FAISS search),
and Serve gives an exception raised by a batch function to every member of the batch. The
ingress checks every input before it reaches a replica, but should one still make the
computation raise, `BatchIsolation` computes the members again one by one, and hands the
failing one its own exception as its result; `unwrap` then raises it in that request alone.
Retrying costs one computation per member, only for a batch that failed.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Sequence, TypeVar

logger = logging.getLogger("ray.serve")
Item = TypeVar("Item")


class MemberFailed:
    """A batch member's own error, carried as its result (Serve would fail the whole batch on a raise)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


def unwrap(result: Any) -> Any:
    """The member's result, or its own error raised."""
    if isinstance(result, MemberFailed):
        raise result.error
    return result


class BatchIsolation:
    """Runs a batch computation; when it raises, runs each member alone. Counts the batches split so."""

    def __init__(self, what: str):
        self.what = what
        self.batches_split = 0
        self._lock = threading.Lock()  # batches compute in worker threads

    def __call__(self, compute: Callable[[list[Item]], Sequence[Any]], items: list[Item]) -> list[Any]:
        """`compute(items)`, one result per item; a failing batch of several is retried item by item."""
        try:
            return list(compute(items))
        except Exception as exc:
            if len(items) == 1:
                return [MemberFailed(exc)]
            with self._lock:
                self.batches_split += 1
            logger.warning("%s: a batch of %d failed (%s: %s); computing its members one by one",
                           self.what, len(items), type(exc).__name__, exc)
        out: list[Any] = []
        for item in items:
            try:
                (result,) = compute([item])
            except Exception as exc:
                result = MemberFailed(exc)
            out.append(result)
        return out
