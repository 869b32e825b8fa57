"""How collated training batches reach the step: counted on the host, placed on the device, optionally ahead.

Everything the loop wants to know about a batch (tokens, samples, padding) is read from the collated
CPU tensors before they move, so the training thread never waits on the device for a count. With
`data.prefetch`, a background thread runs the collate (tokenization), the counts and the copy to the
device for the next batches while the current step runs: on CUDA from pinned memory with a
non-blocking copy on a stream of its own, which the step's stream waits for before using the batch.

The order is the source's order: one thread reads the source, and a bounded queue hands its items on
in turn. A collator that draws at random (DeCLUTR's spans) is ahead of the training step by the
batches in the queue, so each item carries the collator's state right after its own collate: a
checkpoint saves the state of the last batch handed to the step, as without prefetching. The loop
pauses the thread (`Prefetcher.paused`) while it validates: validation collates with the same
tokenizer and collator, which are not safe to share between threads.
"""
from __future__ import annotations

import contextlib
import copy
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

import torch

from lmplatform.train.recipe import Batch
from lmplatform.train.state import Stateful

PREFETCH_DEPTH = 2  # batches ready ahead of the step: one being copied while one waits


def place(batch: Batch, device: torch.device) -> Batch:
    """The batch's tensors on `device`: the one place batches move, for training and validation alike."""
    return {k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}


def padding_counts(batch: Batch) -> tuple[int, int]:
    """(real tokens, token slots) over the batch's attention masks (`attention_mask`, `*_attention_mask`)."""
    real = slots = 0
    for key, value in batch.items():
        if torch.is_tensor(value) and (key == "attention_mask" or key.endswith("_attention_mask")):
            real += int(value.sum())
            slots += value.numel()
    return real, slots


@dataclass
class FedBatch:
    """A training micro-batch on the device, with what the loop counts about it (read on the host)."""

    batch: Batch
    tokens: int
    samples: int
    real_tokens: int = 0  # over the attention masks: real / slots is 1 - the padding ratio
    token_slots: int = 0
    parts_state: Optional[dict[str, Any]] = None  # the stateful recipe parts' state after this batch's collate
    ready: Optional[Any] = field(default=None, repr=False)  # a CUDA event: the copy to the device is done

    def wait(self) -> Batch:
        """The batch, once usable on the current stream (after an asynchronous copy on another stream)."""
        if self.ready is not None:
            stream = torch.cuda.current_stream()
            stream.wait_event(self.ready)
            for value in self.batch.values():
                if torch.is_tensor(value):
                    value.record_stream(stream)  # its memory is not reused before this stream is done with it
            self.ready = None
        return self.batch


class Feeder:
    """Turns collated host batches into `FedBatch`es on `device` (counts first, then the copy)."""

    def __init__(self, device: torch.device, count_tokens: Callable[[Batch], int],
                 parts: Optional[Mapping[str, Stateful]] = None, asynchronous: bool = False):
        self.device = device
        self.count_tokens = count_tokens
        self.parts = dict(parts or {})
        # A copy stream only where copies can overlap compute: CUDA, from a background thread.
        self.stream = torch.cuda.Stream(device) if asynchronous and device.type == "cuda" else None

    def __call__(self, batch: Batch) -> FedBatch:
        parts_state = {name: copy.deepcopy(part.state_dict()) for name, part in self.parts.items()} or None
        tokens = int(self.count_tokens(batch))
        samples = int(next(iter(batch.values())).shape[0])
        real, slots = padding_counts(batch)
        if self.stream is None:
            return FedBatch(place(batch, self.device), tokens, samples, real, slots, parts_state)
        pinned = {k: v.pin_memory() if torch.is_tensor(v) else v for k, v in batch.items()}
        with torch.cuda.stream(self.stream):
            placed = place(pinned, self.device)
            ready = torch.cuda.Event()
            ready.record(self.stream)
        return FedBatch(placed, tokens, samples, real, slots, parts_state, ready)

    def feed(self, batches: Iterable[Batch]) -> Iterator[FedBatch]:
        return (self(batch) for batch in batches)


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


_END = object()


class Prefetcher:
    """`produce(item)` for each item of `source`, run `depth` items ahead in a background thread.

    Iterating yields the results in the source's order; an exception raised in the thread is raised
    again here, in the consumer. `close()` (also on leaving a `with` block, or when the consumer
    stops early) stops the thread and waits for it; the thread also ends after the source's last item.
    """

    def __init__(self, source: Iterable[Any], produce: Callable[[Any], Any], depth: int = PREFETCH_DEPTH):
        self._source = iter(source)
        self._produce = produce
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._lock = threading.Lock()  # held while an item is produced: `paused` waits for it
        self._done = False
        self._thread = threading.Thread(target=self._run, name="lmp-prefetch", daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with self._lock:
                    if self._stop.is_set():
                        return
                    item = next(self._source, _END)
                    out = _END if item is _END else self._produce(item)
                if not self._put(out) or out is _END:
                    return
        except BaseException as error:  # handed to the consumer, which raises it
            self._put(_Failed(error))

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        item = self._queue.get()
        if item is _END or isinstance(item, _Failed):
            self._done = True
            self._thread.join()
            if isinstance(item, _Failed):
                raise item.error
            raise StopIteration
        return item

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No item is produced inside the block (the thread finishes the one it is on first)."""
        with self._lock:
            yield

    def close(self) -> None:
        self._stop.set()
        self._done = True
        while self._thread.is_alive():
            try:  # free a thread blocked on a full queue
                self._queue.get(timeout=0.05)
            except queue.Empty:
                pass
        self._thread.join()

    def __enter__(self) -> "Prefetcher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
