"""The model deployments behind the ingress: retriever (encoder + index), re-ranker and classifier.

Hot reload: every model deployment receives, in its Serve `user_config`, the list
of releases it must hold (`{"releases": [...]}`, at most the current and the next).
`reconfigure` loads the ones it lacks and drops the rest in one reference swap,
so requests keep being answered while a new model loads. Each request names the
release it belongs to, so the embedding and the index search of one request always
use the same model, even while replicas are half-way through a reload.

Each deployment answers `record_routing_stats` (Serve's per-replica hook) with what its
replica holds; `replicas.ask_each` calls it on every replica by id, which is how a reload
knows that every replica, not just the ones a handle happened to reach, has a release.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from contextlib import nullcontext
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, Iterator, Mapping, NamedTuple, Optional, Sequence, TypeVar

import numpy as np
from ray import serve

from lmplatform.models.encode_path import choose_path, default_cache
from lmplatform.retrieval.metadata_fusion import MetadataFusion
from lmplatform.retrieval.retrievers import admitted_dense_hits, hybrid_search, metadata_search
from lmplatform.retrieval.settings import FusionSettings, MetadataFusionWeights
from lmplatform.retrieval.store import DocumentStore, unknown_metadata
from lmplatform.retrieval.window import TimeWindow
from lmplatform.runtime import trim_heap
from lmplatform.serving.access_log import keep_access_log_off_console
from lmplatform.serving.batch_isolation import BatchIsolation, MemberFailed, unwrap
from lmplatform.serving.freshness import WriterBreaker, catch_up
from lmplatform.serving.live import LiveIndex, index_seq
from lmplatform.serving.metrics import record_applied, record_batch, record_index_sizes
from lmplatform.serving.release import Release, ReleaseError, fetch, has_bm25, load_bm25, load_index_and_store

logger = logging.getLogger("ray.serve")
T = TypeVar("T")


class Refusal(LookupError):
    """A request this replica refuses: the ingress answers it with a 4xx or 503 naming why, and Serve's traceback of
    it stays off the console (access_log.py reads `refusal`)."""

    refusal = True


class ReleaseNotLoaded(Refusal):
    """A request named a release this replica does not hold (the reload order was not respected)."""


class NotAvailable(Refusal):
    """The deployed model cannot answer this kind of request (e.g. no labels for classification).

    `field`: the request field that asked for what is missing, if one did (the answer is then a 422 naming it).
    """

    field: Optional[str] = None


class NotCaughtUp(Refusal):
    """A read's `min_seq` lies beyond the changes its replica has applied: `status` 503 when the writer did not
    answer within live.read_wait_s (retry), 422 when it did and has committed no such change."""

    field = "min_seq"

    def __init__(self, message: str, status: int):
        super().__init__(message, status)  # both in args: Ray pickles the exception back to the ingress
        self.status = status

    def __str__(self) -> str:
        return str(self.args[0])


class SearchAnswer(NamedTuple):
    """A search's hits per text, and how fresh the index that answered was (both None without live updates)."""

    hits: list[list[dict[str, Any]]]
    as_of_seq: Optional[int]  # every change acknowledged with a seq up to it is in the answer
    caught_up: Optional[bool]  # whether the replica reached the writer's last change before it read


class NoSeqs(NotAvailable):
    """A read asked for a `min_seq` of a service whose index is read-only: no change has a seq."""

    field = "min_seq"


class HybridNotAvailable(NotAvailable):
    """Hybrid (or metadata) search asked of a release whose index has no BM25 index beside it."""

    field = "mode"


class SearchItem(NamedTuple):
    """One search call's queries and how to answer them (a member of a `@serve.batch`)."""

    release_id: str
    texts: list[str]
    k: int
    text_chars: int
    fusion: Optional[FusionSettings]  # hybrid
    exclude: frozenset[str]
    metadata_fusion: Optional[MetadataFusionWeights]  # metadata
    query_metadata: Sequence[Mapping[str, Any]]  # one per text (metadata)
    window: Optional[TimeWindow]  # only documents filed inside it
    min_seq: int = 0  # answered only once the replica has applied the change of this seq


class ReleaseSlots(Generic[T]):
    """What one replica has loaded, per release id; replaced atomically on reconfigure."""

    def __init__(self, load: Callable[[Release], T], what: str):
        self._load, self._what = load, what
        self._loaded: dict[str, T] = {}
        self.failures: dict[str, str] = {}
        self._resolved_at: dict[str, float] = {}
        self._lock = threading.Lock()  # one reconfigure at a time; readers never wait

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Hold exactly the listed releases. A release that fails to load is recorded in `failures`
        and skipped, so the replica keeps serving what it has (the reload then rolls back);
        only a replica left with nothing to serve raises."""
        releases = [Release.model_validate(r) for r in user_config.get("releases", [])]
        if not releases:
            raise ReleaseError(f"{self._what}: user_config has no releases")
        with self._lock:
            current = self._loaded
            updated: dict[str, T] = {}
            for release in releases:
                if release.id in current:
                    updated[release.id] = current[release.id]
                    continue
                start = time.perf_counter()
                try:
                    updated[release.id] = self._load(release)
                    self._resolved_at[release.id] = release.resolved_at
                except Exception as exc:
                    self.failures[release.id] = f"{type(exc).__name__}: {exc}"
                    logger.exception("%s: cannot load release %s", self._what, release.id)
                    continue
                self.failures.pop(release.id, None)
                logger.info("%s: loaded release %s in %.1fs", self._what, release.id, time.perf_counter() - start)
            if not updated:
                raise ReleaseError(f"{self._what}: no release could be loaded: {self.failures}")
            self._loaded = updated  # requests in flight keep the dict they already read

    def holds(self, release_id: str) -> Optional[str]:
        """None when `release_id` is loaded, else why not."""
        if release_id in self._loaded:
            return None
        return self.failures.get(release_id, "not loaded")

    def get(self, release_id: str) -> T:
        try:
            return self._loaded[release_id]
        except KeyError:
            raise ReleaseNotLoaded(f"{self._what} holds releases {sorted(self._loaded)}, not {release_id!r}") from None

    def ids(self) -> list[str]:
        return list(self._loaded)

    def newest(self) -> str:
        """The id of the release resolved last (after a reload's first step: the one the ingress moves to)."""
        return max(self._loaded, key=lambda rid: self._resolved_at[rid])

    def status(self) -> dict[str, Any]:
        """The releases held, and why the others listed since the start could not be loaded."""
        return {"releases": self.ids(), "failures": dict(self.failures)}


def _texts_in(items: list[tuple[Any, ...]]) -> int:
    return sum(len(item[1]) for item in items)


class _LoadedRetriever:
    """One release in a replica: the bi-encoder, its FAISS index, the BM25 index beside it if any, the document store;
    with live updates on, all of them kept at the change log's sequence number by `live` (a `LiveIndex`)."""

    def __init__(self, release: Release, cache_dir: Optional[str], encoder: Optional[dict[str, Any]] = None,
                 live_fields: Optional[list[str]] = None):
        folder = fetch(release.model_uri, release.tracking_uri, cache_dir)
        self.encoder, self.encoder_choice = load_encoder(folder, encoder or {}, cache_dir)
        self.index, self.store, folder = load_index_and_store(release, cache_dir)
        self.metadata_unknown = audit_fusion_metadata(release, self.store)
        self.vector_model = vector_model(release, self.encoder)
        self.live: Optional[LiveIndex] = None
        if live_fields is None:
            self.bm25 = load_bm25(folder, self.index)
        else:
            self.live = LiveIndex.from_base(self.index, self.store, has_bm25(folder), index_seq(folder)[1],
                                            self.vector_model, live_fields)
            self.bm25 = self.live.bm25
        trim_heap()  # the live BM25's build held every text at once: about 800 MB at 10^6 reports
        built = (folder / "index.faiss").stat().st_mtime
        self.built_at = datetime.fromtimestamp(built, timezone.utc).isoformat(timespec="seconds")
        self.loaded_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self._static_labels = self.store.labels

    @property
    def labels(self) -> list[str]:
        return self.live.labels if self.live is not None else self._static_labels

    def reading(self) -> Any:
        """Held while the index, BM25 or store is read: a change is never applied half-way through a read."""
        return self.live.lock if self.live is not None else nullcontext()


MOSTLY_UNKNOWN = 0.5  # share of a store's documents without a readable time that is worth a warning at load


def audit_fusion_metadata(release: Release, store: DocumentStore) -> Optional[dict[str, int]]:
    """Per field the release's metadata fusion reads, the documents of the store it sees without a value (None: no
    fusion). A time field unknown for most documents is said in one log line: a fusion that never sees a time is
    silently worse than the one that was evaluated."""
    fusion = release.search.metadata_fusion if release.search else None
    if fusion is None:
        return None
    config = fusion.config
    unknown = unknown_metadata(store, config.read_fields(), config.time_field)
    if config.time_field and len(store) and unknown[config.time_field]["unknown"] > MOSTLY_UNKNOWN * len(store):
        counted = unknown[config.time_field]
        logger.warning("release %s: its metadata fusion reads time field %r, unknown for %d of %d documents (missing, "
                       "or not a time: e.g. %s)", release.id, config.time_field, counted["unknown"], len(store),
                       "; ".join(counted["examples"]) or "none unreadable, all missing")
    return {name: counted["unknown"] for name, counted in unknown.items()}


def load_encoder(folder: Path, settings: dict[str, Any], cache_dir: Optional[str]) -> tuple[Any, Optional[dict[str, Any]]]:
    """The replica's encoder as `EncoderSettings` (a dict) say, and with backend 'auto' what it chose and why."""
    from lmplatform.models.encoder import Encoder

    settings = dict(settings)
    auto_int8 = settings.pop("auto_int8", True)
    if settings.get("backend", "torch") != "auto":
        return Encoder.from_pretrained(folder, **settings).eval(), None
    cache = Path(cache_dir) / "encode_paths.json" if cache_dir else default_cache()
    choice, encoder = choose_path(folder, int8=auto_int8, cache=cache)
    logger.info("encoder.backend auto on this %s host: %s (%s)", choice.host, choice.path.label,
                "cached" if choice.cached else ", ".join(f"{k} {v:.1f} ms" for k, v in
                                                          choice.summary()["ms_per_batch"].items()))
    return encoder, choice.summary()


def vector_model(release: Release, encoder: Any) -> str:
    """What made a vector: the model, and int8 quantization when on (it moves vectors; the backend does not)."""
    return release.model_uri + ("+int8" if encoder.quantized else "")


def _by_release(items: list[tuple[Any, ...]]) -> dict[str, list[int]]:
    """Batch members grouped by release (two groups only while a reload is under way)."""
    groups: dict[str, list[int]] = {}
    for n, item in enumerate(items):
        groups.setdefault(item[0], []).append(n)
    return groups


def _per_member(rows: Sequence[T], items: list[tuple[Any, ...]], members: list[int]) -> Iterator[tuple[int, Sequence[T]]]:
    """Split rows computed for the members' texts, concatenated in order, back into each member's share."""
    start = 0
    for n in members:
        count = len(items[n][1])
        yield n, rows[start:start + count]
        start += count


def _admit(loaded: "_LoadedRetriever", item: SearchItem) -> Optional[Callable[[str], bool]]:
    """Whether a document may be a hit of `item` (its exclusions and window), for a search that takes any filter;
    None when nothing is left out by the window (exclusions alone are applied by the searches themselves)."""
    window = item.window
    if window is None:
        return None
    return lambda doc_id: doc_id not in item.exclude and window.contains(loaded.store[doc_id].time(window.field))


@serve.deployment(ray_actor_options={"num_cpus": 1}, max_ongoing_requests=64)
class RetrieverDeployment:
    """The bi-encoder next to its FAISS index and document store: a search is one call, one replica.

    Embedding and searching in the same replica saves a hop and the transfer of query
    vectors per search; the price is one copy of the index per replica (4 bytes x dim
    per document for a flat index: 1.5 GB for 1M MiniLM vectors). With batching on,
    concurrent requests share one forward pass and one FAISS call (`@serve.batch`),
    so a flat index scores all queries of a batch in one matrix product. A batch computes in a
    worker thread: the replica's event loop keeps taking requests meanwhile and queues them for
    the next batch, also when user code shares the request loop (direct ingress).
    """

    def __init__(self, batching: dict[str, Any], num_threads: Optional[int] = None, cache_dir: Optional[str] = None,
                 encoder: Optional[dict[str, Any]] = None, writer: Any = None, live_fields: Optional[list[str]] = None,
                 read_wait_s: float = 2.0, read_retry_s: float = 1.0):
        """encoder: `EncoderSettings` as a dict (backend, quantize), for every release this replica loads.
        writer: the `ChangeLogWriter` handle when live updates are on (then `live_fields`: `LiveSettings.fields`,
        `read_wait_s` and `read_retry_s`: `LiveSettings`' own)."""
        import torch

        keep_access_log_off_console()

        if num_threads:
            torch.set_num_threads(num_threads)
        self.batching = bool(batching.get("enabled", True))
        self.max_batch_size = int(batching.get("max_batch_size", 32))
        for method in (self._embed_batched, self._search_batched):
            method.set_max_batch_size(self.max_batch_size)
            method.set_batch_wait_timeout_s(float(batching.get("batch_wait_timeout_s", 0.0)))
        self.writer, self.read_wait_s, self.breaker = writer, read_wait_s, WriterBreaker(read_retry_s)
        self.releases: ReleaseSlots[_LoadedRetriever] = ReleaseSlots(
            lambda r: _LoadedRetriever(r, cache_dir, encoder, live_fields if writer is not None else None), "retriever")
        self.isolate_embed, self.isolate_search = BatchIsolation("retriever embed"), BatchIsolation("retriever search")

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Hold the listed releases; with live updates on, a release loaded now replays the change log before the
        replica reports it held (a restarted replica, a reload, a redeployed application). The load runs in a
        thread: a new release's index takes minutes at 10^6 documents, and the held releases answer meanwhile."""
        await asyncio.to_thread(self.releases.reconfigure, user_config)
        await self._catch_up(self.releases.ids(), bounded=False)
        record_index_sizes({rid: len(self.releases.get(rid).index) for rid in self.releases.ids()})

    async def record_routing_stats(self) -> dict[str, Any]:
        """This replica's releases and batches split by a failure (see the module doc); with live updates on, where
        the index of each release stands (`LiveIndex.summary`) after the newest release caught up with the log."""
        split = {"embed": self.isolate_embed.batches_split, "search": self.isolate_search.batches_split}
        stats = {**self.releases.status(), "batches_split": split}
        if self.writer is not None and self.releases.ids():
            newest = self.releases.newest()
            await self._catch_up([newest], bounded=False)
            stats["live"] = {rid: self.releases.get(rid).live.summary() for rid in self.releases.ids()}
            stats["newest"] = newest
        return stats

    async def _catch_up(self, release_ids: Iterable[str], bounded: bool = True) -> Mapping[str, bool]:
        """Apply the changes committed after each release's seq (the writer answers them in one call per release),
        waiting for the writer at most live.read_wait_s (`bounded`), else however long it takes (a release being
        loaded). Called before every read of an index, so a read that starts after a change's acknowledgement sees
        it, unless the writer did not answer in time; per release, whether it answered (`catch_up`). A bounded
        catch-up goes through the breaker: while the writer is down, reads do not wait for it (`freshness`)."""
        if self.writer is None:
            return {}
        ids = list(dict.fromkeys(release_ids))
        if not bounded:
            return await self._catch_up_now(ids, None)
        return await self.breaker.call(partial(self._catch_up_now, ids, self.read_wait_s), ids)

    async def _catch_up_now(self, ids: list[str], bound: Optional[float]) -> dict[str, bool]:
        caught = {}
        for release_id in ids:
            loaded = self.releases.get(release_id)

            async def apply(committed: int, changes: list[Any], release_id: str = release_id,
                            loaded: _LoadedRetriever = loaded) -> None:
                await asyncio.to_thread(self._apply, release_id, loaded, committed, changes)

            caught[release_id] = await catch_up(loaded.live, self.writer.changes_since.remote, apply, bound)
        self.breaker.record(caught)
        return caught

    def _behind(self, item: SearchItem, caught: Mapping[str, bool]) -> Optional[NotCaughtUp]:
        """Why `item` cannot be answered yet (its min_seq not applied), or None."""
        live = self.releases.get(item.release_id).live
        if item.min_seq <= 0 or live is None or live.seq >= item.min_seq:
            return None
        if caught.get(item.release_id):
            return NotCaughtUp(f"min_seq: {item.min_seq} is beyond the last change the writer committed "
                               f"({live.seq}); send a seq a write of this service returned", 422)
        return NotCaughtUp(f"min_seq: this replica has applied the changes up to {live.seq} and the change-log writer "
                           f"did not answer within live.read_wait_s ({self.read_wait_s:g} s) or is down: retry", 503)

    def _apply(self, release_id: str, loaded: _LoadedRetriever, committed: int, changes: list[Any]) -> None:
        loaded.live.apply(committed, changes, lambda texts: loaded.encoder.encode(texts, batch_size=self.max_batch_size))
        record_applied({rid: self.releases.get(rid).live.seq for rid in self.releases.ids()})

    def _encode(self, release_id: str, texts: list[str]) -> np.ndarray:
        return self.releases.get(release_id).encoder.encode(texts, batch_size=self.max_batch_size)

    async def embed(self, release_id: str, texts: list[str]) -> np.ndarray:
        """L2-normalised float32 vectors [len(texts), dim]."""
        self.releases.get(release_id)  # fail fast, before queueing in a batch
        if not self.batching:
            return self._encode(release_id, texts)
        return unwrap(await self._embed_batched((release_id, texts)))

    async def embed_counted(self, release_id: str, texts: list[str]) -> tuple[np.ndarray, list[int]]:
        """`embed`, and the tokens each text was encoded with (the usage an OpenAI-style answer reports)."""
        vectors = await self.embed(release_id, texts)
        return vectors, self.releases.get(release_id).encoder.token_counts(texts)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.0, batch_size_fn=_texts_in)
    async def _embed_batched(self, items: list[tuple[str, list[str]]]) -> list[Any]:
        return await asyncio.to_thread(self.isolate_embed, self._embed_items, items)

    def _embed_items(self, items: list[tuple[str, list[str]]]) -> list[np.ndarray]:
        record_batch("embed", len(items), _texts_in(items))
        out: list[Any] = [None] * len(items)
        for release_id, members in _by_release(items).items():
            vectors = self._encode(release_id, [t for n in members for t in items[n][1]])
            for n, share in _per_member(vectors, items, members):
                out[n] = share
        return out

    async def search(self, release_id: str, texts: list[str], k: int, text_chars: int = -1,
                     fusion: Optional[FusionSettings] = None, exclude: Sequence[str] = (),
                     metadata_fusion: Optional[MetadataFusionWeights] = None,
                     query_metadata: Sequence[Mapping[str, Any]] = (),
                     window: Optional[TimeWindow] = None, min_seq: int = 0) -> SearchAnswer:
        """Top-k hits per query text with title, label and text (cut to `text_chars` unless it is -1), and the change
        the index answered at (`SearchAnswer`).

        fusion: hybrid search fusing BM25 with the vectors so (`hybrid_search`, the function `HybridRetriever`
        searches with); metadata_fusion: the pool of both ranked by it with `query_metadata` (one mapping per text)
        and the documents' metadata (`metadata_search`); neither: dense. Both are refused when the release's index
        has no BM25 index. exclude: ids left out of every query's hits before its top k (and its pool) is taken;
        window: only the documents filed inside it are searched (`retrieval.window`); min_seq: answered only once
        the replica has applied that change (`NotCaughtUp` when the writer does not bring it in time).
        """
        if (fusion is not None or metadata_fusion is not None) and self.releases.get(release_id).bm25 is None:
            mode = "hybrid" if fusion is not None else "metadata"
            raise HybridNotAvailable(f"mode: '{mode}' needs a BM25 index beside the vector index, and this release's "
                                     "index has none (ray_jobs/build_index.py builds one unless --no-bm25); send mode 'dense'")
        query_metadata = list(query_metadata) or [{}] * len(texts)
        if min_seq > 0 and self.releases.get(release_id).live is None:
            raise NoSeqs("min_seq: live updates are off (live.dir is not set), so no change has a seq; leave it out")
        item = SearchItem(release_id, texts, k, text_chars, fusion, frozenset(exclude), metadata_fusion, query_metadata,
                          window, min_seq)
        if not self.batching:
            return unwrap(self._answers([item], await self._catch_up([release_id]), self._find)[0])
        return unwrap(await self._search_batched(item))

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.0, batch_size_fn=_texts_in)
    async def _search_batched(self, items: list[SearchItem]) -> list[Any]:
        caught = await self._catch_up(item.release_id for item in items)
        return await asyncio.to_thread(self._answers, items, caught, partial(self.isolate_search, self._search_items))

    def _answers(self, items: list[SearchItem], caught: Mapping[str, bool],
                 find: Callable[[list[SearchItem]], list[Any]]) -> list[Any]:
        """One `SearchAnswer` per item, or its own error: an item whose min_seq is not applied fails alone."""
        behind = [self._behind(item, caught) for item in items]
        ready = [item for item, why in zip(items, behind) if why is None]
        found = iter(find(ready) if ready else [])
        out: list[Any] = []
        for item, why in zip(items, behind):
            result = MemberFailed(why) if why is not None else next(found)
            if not isinstance(result, MemberFailed):
                hits, seq = result
                result = SearchAnswer(hits, seq, caught.get(item.release_id) if seq is not None else None)
            out.append(result)
        return out

    def _search_items(self, items: list[SearchItem]) -> list[tuple[list[list[dict[str, Any]]], Optional[int]]]:
        record_batch("search", len(items), _texts_in(items))
        return self._find(items)

    def _find(self, items: list[SearchItem]) -> list[tuple[list[list[dict[str, Any]]], Optional[int]]]:
        """(Hits, the seq the index was at) of the items: one forward pass per release, one FAISS call for every
        dense member of it, one fusion per hybrid or metadata query."""
        out: list[Any] = [None] * len(items)
        for release_id, members in _by_release(items).items():
            loaded = self.releases.get(release_id)
            vectors = self._encode(release_id, [t for n in members for t in items[n].texts])
            shares = dict(_per_member(vectors, items, members))
            with loaded.reading():
                self._find_in(loaded, items, members, shares, out)
                seq = loaded.live.seq if loaded.live is not None else None
            for n in members:
                out[n] = (out[n], seq)
        return out

    def _find_in(self, loaded: _LoadedRetriever, items: list[SearchItem], members: list[int],
                 shares: dict[int, Any], out: list[Any]) -> None:
        dense = [n for n in members if items[n].fusion is None and items[n].metadata_fusion is None]
        batched = [n for n in dense if items[n].window is None]
        if batched:
            depth = max(items[n].k + len(items[n].exclude) for n in batched)
            found = loaded.index.search(np.concatenate([shares[n] for n in batched]), depth)
            for n, rows in _per_member(found, items, batched):
                out[n] = [[hit for hit in hits if hit[0] not in items[n].exclude][: items[n].k] for hits in rows]
        for n in members:
            item = items[n]
            excluded = [set(item.exclude)] * len(item.texts)
            admit = _admit(loaded, item)
            if item.fusion is not None:
                out[n] = hybrid_search(loaded.index, loaded.bm25, shares[n], item.texts, item.k, item.fusion, excluded, admit)
            elif item.metadata_fusion is not None:
                out[n] = metadata_search(loaded.index, loaded.bm25, lambda doc_id: loaded.store[doc_id].metadata,
                                         shares[n], item.texts, item.query_metadata, item.k,
                                         MetadataFusion.from_dict(item.metadata_fusion), excluded, admit)
            elif admit is not None:  # a dense search in a window: deeper until k documents of it are found
                out[n] = [admitted_dense_hits(loaded.index, vector, item.k, admit) for vector in shares[n]]
            out[n] = [[self._hit(loaded, doc_id, score, item.text_chars) for doc_id, score in hits] for hits in out[n]]

    @staticmethod
    def _hit(loaded: _LoadedRetriever, doc_id: str, score: float, text_chars: int) -> dict[str, Any]:
        doc = loaded.store[doc_id]
        text = doc.text if text_chars < 0 else doc.text[:text_chars]
        return {"id": doc_id, "score": score, "title": doc.title, "text": text, "label": doc.label}

    async def knn_proba(self, release_id: str, texts: list[str], k: int) -> tuple[list[str], np.ndarray]:
        """Class probabilities from the labels of the k nearest documents (similarity-weighted votes)."""
        loaded = self.releases.get(release_id)
        await self._catch_up([release_id])
        if not loaded.labels:
            raise NotAvailable("the model has no classifier head and the document store has no labels to vote with")
        vectors = await self.embed(release_id, texts)
        with loaded.reading():
            labels = loaded.labels
            column = {label: i for i, label in enumerate(labels)}
            proba = np.zeros((len(vectors), len(column)), dtype=np.float64)
            for row, hits in enumerate(loaded.index.search(vectors, k)):
                for doc_id, score in hits:
                    label = loaded.store[doc_id].label
                    if label is not None:
                        proba[row, column[label]] += max(score, 0.0) + 1e-6
                total = proba[row].sum()
                proba[row] = proba[row] / total if total > 0 else 1.0 / len(column)
        return labels, proba

    async def embed_documents(self, release_id: str, texts: list[str]) -> tuple[str, np.ndarray]:
        """(what made the vectors: `vector_model`, the vectors): an upsert's vectors, stored in the change log."""
        vectors = await self.embed(release_id, texts)
        return self.releases.get(release_id).vector_model, vectors

    async def document(self, release_id: str, doc_id: str) -> Optional[dict[str, Any]]:
        """A document as the index holds it now (None when it holds none of that id)."""
        loaded = self.releases.get(release_id)
        if loaded.live is None:
            raise NotAvailable("live updates are off (live.dir is not set): this service has no document routes")
        await self._catch_up([release_id])
        return loaded.live.document(doc_id)

    async def info(self, release_id: str) -> dict[str, Any]:
        loaded = self.releases.get(release_id)
        await self._catch_up([release_id])
        return {"index_size": len(loaded.index), "index_kind": loaded.index.kind, "dim": loaded.index.dim,
                "encoder_backend": loaded.encoder.backend + ("-int8" if loaded.encoder.quantized else ""),
                "encoder_choice": loaded.encoder_choice,
                "index_built_at": loaded.built_at, "index_build_seconds": loaded.index.stats.build_seconds,
                "loaded_at": loaded.loaded_at, "labels": loaded.labels, "hybrid": loaded.bm25 is not None,
                "live_seq": loaded.live.seq if loaded.live is not None else None,
                "metadata_unknown": loaded.metadata_unknown}


def _pairs_in(items: list[tuple[str, list[str]]]) -> int:
    return sum(len(documents) for _, documents in items)


@serve.deployment(ray_actor_options={"num_cpus": 1}, max_ongoing_requests=64)
class RerankerDeployment:
    """A cross-encoder re-scoring (query, document) pairs, batched across requests by pair count."""

    def __init__(self, model: str, tracking_uri: Optional[str], max_batch_size: int, batch_wait_timeout_s: float,
                 num_threads: Optional[int] = None, cache_dir: Optional[str] = None):
        import torch

        from lmplatform.models.cross_encoder import CrossEncoder

        keep_access_log_off_console()

        if num_threads:
            torch.set_num_threads(num_threads)
        folder = fetch(model, tracking_uri, cache_dir) if model.startswith(("models:/", "runs:/")) else model
        self.model = CrossEncoder.from_pretrained(folder).eval()
        self.name = model
        self.max_batch_size = max_batch_size
        self._score_batched.set_max_batch_size(max_batch_size)
        self._score_batched.set_batch_wait_timeout_s(batch_wait_timeout_s)
        self.isolate = BatchIsolation("reranker")

    async def score(self, query: str, documents: list[str]) -> list[float]:
        if len(documents) > self.max_batch_size:
            # A re-rank deeper than a batch (k above the batch size): Serve refuses an item larger
            # than max_batch_size outright, so it is scored alone, still max_batch_size pairs per pass.
            return (await asyncio.to_thread(self._score_items, [(query, documents)]))[0]
        return unwrap(await self._score_batched((query, documents)))

    @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.0, batch_size_fn=_pairs_in)
    async def _score_batched(self, items: list[tuple[str, list[str]]]) -> list[Any]:
        return await asyncio.to_thread(self.isolate, self._score_items, items)

    def _score_items(self, items: list[tuple[str, list[str]]]) -> list[list[float]]:
        record_batch("score", len(items), _pairs_in(items))
        queries = [q for q, documents in items for _ in documents]
        documents = [d for _, docs in items for d in docs]
        scores = self.model.score(queries, documents, batch_size=self.max_batch_size).tolist()
        return [share for _, share in _per_member(scores, items, list(range(len(items))))]

    def describe(self) -> str:
        return self.name

    def record_routing_stats(self) -> dict[str, Any]:
        """Batches split by a failure on this replica (see the module doc)."""
        return {"batches_split": {"score": self.isolate.batches_split}}


def _load_head(release: Release, cache_dir: Optional[str]) -> Optional[Any]:
    from lmplatform.models.classifier import HEAD_FILE, LABELS_FILE, TextClassifier

    folder = fetch(release.model_uri, release.tracking_uri, cache_dir)
    if (folder / HEAD_FILE).is_file() and (folder / LABELS_FILE).is_file():
        return TextClassifier.from_pretrained(folder)
    return None  # no trained head: classify by the labels of the nearest indexed documents


@serve.deployment(ray_actor_options={"num_cpus": 1}, max_ongoing_requests=64)
class ClassifierDeployment:
    """The model's trained MLP head when it has one, else KNN over the labelled documents of the index."""

    def __init__(self, retriever: Any, knn_k: int = 10, cache_dir: Optional[str] = None):
        keep_access_log_off_console()
        self.retriever, self.knn_k = retriever, knn_k
        self.heads: ReleaseSlots[Optional[Any]] = ReleaseSlots(lambda r: _load_head(r, cache_dir), "classifier")

    async def reconfigure(self, user_config: dict[str, Any]) -> None:
        await asyncio.to_thread(self.heads.reconfigure, user_config)  # classifications go on while a head loads

    def record_routing_stats(self) -> dict[str, Any]:
        """This replica's releases (see the module doc)."""
        return self.heads.status()

    def method(self, release_id: str) -> str:
        return "head" if self.heads.get(release_id) is not None else "knn"

    async def classify(self, release_id: str, texts: list[str]) -> dict[str, Any]:
        head = self.heads.get(release_id)
        if head is not None:
            proba = head.predict_proba(texts)
            labels, method = head.labels, "head"
        else:
            labels, proba = await self.retriever.knn_proba.remote(release_id, texts, self.knn_k)
            method = "knn"
        predictions = [{"label": labels[int(np.argmax(row))],
                        "probabilities": {label: round(float(p), 6) for label, p in zip(labels, row)}} for row in proba]
        return {"predictions": predictions, "method": method}
