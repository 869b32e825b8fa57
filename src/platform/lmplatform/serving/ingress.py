"""The FastAPI ingress: the handlers of the routes `routes.ROUTES` declares, and JSON errors for every bad request.

Error contract: every 4xx body is `{"error": message, "field": name, "details": [...]}`.
Parsing errors (non-JSON, wrong types, unknown or missing fields, text that is not valid
Unicode) are 400/422, limits are 413/422, a missing or wrong token is 401 (`http_guard`,
with the body size). Nothing a client sends reaches a model unless it passed these checks,
so bad input cannot take a replica down; and should a model call still fail, the batch is
retried member by member (`batch_isolation`), so only the request that caused it fails.
"""
# No `from __future__ import annotations`: FastAPI reads these annotations in the replica,
# from a pickled copy of the app, where string annotations cannot be resolved.
import asyncio
import base64
import inspect
import logging
import time
from typing import Any, Callable, Optional, TypeVar

import numpy as np
from fastapi import FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from ray import serve
from starlette.exceptions import HTTPException

from lmplatform.data.fields import join_fields
from lmplatform.retrieval.fusion import combine_rerank
from lmplatform.serving.http_errors import error_response
from lmplatform.serving.http_guard import RequestGuard
from lmplatform.serving.metrics import RequestMetrics
from lmplatform.serving.release import Release
from lmplatform.serving.responses import model_json, vectors_json
from lmplatform.serving.routes import PAGES, route_named
from lmplatform.serving.schemas import (
    ClassifyResponse,
    DeletedResponse,
    DocumentIn,
    DocumentResponse,
    DocumentsRequest,
    DocumentsResponse,
    DuplicatesRequest,
    DuplicatesResponse,
    EmbeddingsRequest,
    EmbeddingsResponse,
    EmbedResponse,
    HealthResponse,
    Hit,
    ModelInfo,
    RequestLimitError,
    SearchPlan,
    SearchRequest,
    SearchResponse,
    ServeLimits,
    SimilarityRequest,
    SimilarityResponse,
    TextsRequest,
    check_time,
    encodable,
    plan_search,
    report_window,
    snippet,
)

logger = logging.getLogger("ray.serve")
Handler = TypeVar("Handler", bound=Callable[..., Any])

api = FastAPI(
    **PAGES,
    title="lmplatform serving",
    version="1",
    description="Search, classify, embed and compare texts with the champion encoder. Errors are JSON: "
                "`{error, field, details}`. When a token is configured, /v1/* needs `Authorization: Bearer <token>`.",
)
# Body size, bearer token and JSON bodies whatever their Content-Type, before FastAPI reads a byte.
api.add_middleware(RequestGuard)
# Added last, so outermost: every answer is counted and timed, the guard's refusals included.
api.add_middleware(RequestMetrics)


@api.exception_handler(RequestValidationError)
async def _invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    details = []
    for error in exc.errors():
        loc = [str(p) for p in error.get("loc", ())]
        loc = loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc
        details.append({"field": ".".join(loc) or "body", "message": error.get("msg", ""), "type": error.get("type", "")})
    invalid = [e for e in exc.errors() if e.get("type") == "json_invalid"]
    if invalid:
        reason = (invalid[0].get("ctx") or {}).get("error", "")
        message = "the request body is not valid JSON" + (f": {reason}" if reason else "")
        return error_response(400, message, "body", details)
    first = details[0] if details else {"field": "body", "message": "invalid request"}
    return error_response(422, f"{first['field']}: {first['message']}", first["field"], details)


@api.exception_handler(HTTPException)
async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    # FastAPI's own 400 for a body its JSON parser raised on with something other than a syntax
    # error (not UTF-8, nesting beyond Python's recursion limit, an integer of over 4300 digits);
    # 404/405 for unknown routes.
    if exc.status_code == 400:
        cause = exc.__cause__
        reason = f": {type(cause).__name__}: {str(cause)[:160]}" if cause is not None else ""
        return error_response(400, f"the request body could not be parsed as JSON{reason}", "body")
    return error_response(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))


@api.exception_handler(RequestLimitError)
async def _over_limit(request: Request, exc: RequestLimitError) -> JSONResponse:
    return error_response(exc.status, str(exc), exc.field)


@api.exception_handler(Exception)
async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error on %s", request.url.path)
    return error_response(500, f"internal error: {type(exc).__name__}")


def _find_cause(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> Optional[BaseException]:
    """The first exception of `kinds` in a chain of Ray task errors (a call through two deployments nests two)."""
    seen = 0
    current: Optional[BaseException] = exc
    while current is not None and seen < 8:
        if isinstance(current, kinds):
            return current
        current, seen = getattr(current, "cause", None), seen + 1
    return None


REPLICA_RETRIES = 3  # tries of a call whose replica died under it (a search, an upsert: all safe to send again)
# Until the model deployments have answered once (a first load of 10^6 documents takes minutes), each request asks
# them for at most this long, then gets a 503: a request held open through the load would outlive any client. Long
# enough for a replica that has loaded but is busy on a small machine.
MODEL_PROBE_S = 5.0


def _model_tags(release: Release) -> dict[str, Optional[str]]:
    return {"registered_name": release.registered_name, "model_version": release.version, "alias": release.alias,
            "release": release.id}


def _raise_refusal(exc: Exception) -> None:
    """Raise the 4xx/503 that a backend's refusal in `exc` stands for; return for any other error."""
    from lmplatform.serving.deployments import NotAvailable, NotCaughtUp, ReleaseNotLoaded

    cause = _find_cause(exc, (NotAvailable, ReleaseNotLoaded, NotCaughtUp))
    if isinstance(cause, NotAvailable):  # a request field asked for it: 422 naming the field; else 404
        raise _Refused(404 if cause.field is None else 422, str(cause).splitlines()[-1], cause.field) from exc
    if isinstance(cause, NotCaughtUp):
        raise _Refused(cause.status, str(cause).splitlines()[-1], cause.field) from exc
    if isinstance(cause, ReleaseNotLoaded):
        raise _Refused(503, f"the model is being reloaded, retry: {str(cause).splitlines()[-1]}") from exc


def _cancel(call: Any) -> None:
    """Withdraw a deployment call already sent (a DeploymentResponse); a function not yet called sent nothing."""
    if not callable(call) and hasattr(call, "cancel"):
        call.cancel()


def encodable_path(doc_id: str) -> str:
    """A path's id when it is valid Unicode, else a 422 naming `id` (as a body's text would be refused)."""
    try:
        return encodable(doc_id)
    except ValueError as exc:
        raise RequestLimitError("id", str(exc)) from None


class _Refused(Exception):
    """A backend's refusal (404: cannot answer this kind of request; 422: not with this field's value;
    503: release not loaded)."""

    def __init__(self, status: int, message: str, field: Optional[str] = None):
        super().__init__(message)
        self.status, self.field = status, field


@api.exception_handler(_Refused)
async def _refused(request: Request, exc: _Refused) -> JSONResponse:
    headers = {"Retry-After": "1"} if exc.status == 503 else None
    return error_response(exc.status, str(exc), exc.field, headers=headers)


def declared_route(handler: Handler) -> Handler:
    """Register `handler` as the route of its name in `routes.ROUTES` (path, method, models, tag, errors).

    Refused here, when the module is imported, if it takes a body other than the declared request model."""
    route = route_named(handler.__name__)
    bodies = [p.annotation for p in inspect.signature(handler, eval_str=True).parameters.values()
              if isinstance(p.annotation, type) and issubclass(p.annotation, BaseModel)]
    if bodies != ([route.request] if route.request else []):
        raise TypeError(f"{handler.__qualname__} takes a body of {[b.__name__ for b in bodies]}; routes.py declares "
                        f"{route.method} {route.path} with {route.request.__name__ if route.request else 'no body'}")
    return api.api_route(route.path, methods=[route.method], response_model=route.response, responses=route.errors,
                         tags=[route.tag])(handler)


# Everything the routes below use must be defined above them: serve.ingress pickles
# the app (with the route functions and the globals they name) when the class is defined.
@serve.deployment(ray_actor_options={"num_cpus": 0.25}, max_ongoing_requests=256)
@serve.ingress(api)
class ServeIngress:
    def __init__(self, retriever: Any, classifier: Any, reranker: Any = None,
                 limits: Optional[dict[str, Any]] = None, token_sha256: Optional[str] = None, writer: Any = None,
                 live_fields: Optional[list[str]] = None, write_wait_s: float = 30.0,
                 model_probe_s: float = MODEL_PROBE_S):
        self.retriever, self.classifier, self.reranker = retriever, classifier, reranker
        self.writer, self.live_fields = writer, list(live_fields or ["title", "text"])
        self.write_wait_s = write_wait_s
        self.limits = ServeLimits.model_validate(limits or {})
        # Imported here, not referenced as a global: Serve pickles this class by value, which
        # would give it a private copy of the guard's settings that the middleware never sees.
        from lmplatform.serving.access_log import keep_access_log_off_console
        from lmplatform.serving.http_guard import configure_guard

        keep_access_log_off_console()
        configure_guard(token_sha256, self.limits.max_body_bytes)
        self.active: Optional[Release] = None
        self.switched_at = ""
        self.models_answered, self.model_probe_s = False, model_probe_s

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Route new requests to `active` (the model deployments already hold it: see control.reload)."""
        from lmplatform.serving.metrics import record_model

        self.active = Release.model_validate(user_config["active"])
        self.switched_at = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
        record_model(_model_tags(self.active))

    def _release(self) -> Release:
        if self.active is None:
            raise RuntimeError("no release configured: the ingress needs user_config.active")
        return self.active

    async def _models_ready(self) -> bool:
        """Whether the retriever and classifier have answered since this ingress started; until they have, each call
        asks them again for at most `model_probe_s` (an answer that is an error counts: the replica is up)."""
        if self.models_answered or self.active is None:
            return self.models_answered
        release_id = self.active.id

        async def ask() -> None:
            await self.retriever.info.remote(release_id)
            await self.classifier.method.remote(release_id)

        try:
            await asyncio.wait_for(ask(), self.model_probe_s)
        except asyncio.TimeoutError:
            return False
        except Exception:  # answered, if with an error: the call itself will say which
            pass
        self.models_answered = True
        return True

    async def _call(self, call: Any) -> Any:
        """Await a deployment call, its refusals as 4xx/503. `call`: the call, or a function making it: then it is
        sent again (up to REPLICA_RETRIES times) when the replica answering it died (e.g. killed, its node lost).
        Before the model deployments first answer: a 503 (they are loading)."""
        from ray.exceptions import RayActorError

        if not await self._models_ready():
            _cancel(call)
            raise _Refused(503, "the model is still loading its release: retry")
        tries = REPLICA_RETRIES if callable(call) else 1
        for attempt in range(1, tries + 1):
            try:
                return await (call() if callable(call) else call)
            except Exception as exc:
                if attempt < tries and _find_cause(exc, (RayActorError,)) is not None:
                    logger.warning("a replica died under a call (try %d of %d): %s", attempt, tries, str(exc).splitlines()[0])
                    await asyncio.sleep(0.2 * attempt)  # the router learns of the death meanwhile
                    continue
                _raise_refusal(exc)
                raise

    @declared_route
    async def healthz(self) -> Any:
        """'ok' once the model deployments answer; before: 503 'starting' (a load balancer sends nothing yet)."""
        if await self._models_ready():
            return HealthResponse(status="ok")
        return JSONResponse(HealthResponse(status="starting").model_dump(), status_code=503,
                            headers={"Retry-After": "1"})

    @declared_route
    async def model(self) -> ModelInfo:
        release = self._release()
        info = await self._call(self.retriever.info.remote(release.id))
        method = await self._call(self.classifier.method.remote(release.id))
        reranker = await self.reranker.describe.remote() if self.reranker is not None else None
        return ModelInfo(
            registered_name=release.registered_name, version=release.version, alias=release.alias,
            mlflow_run_id=release.run_id, model_uri=release.model_uri, release_id=release.id,
            index_size=info["index_size"], index_kind=info["index_kind"], index_built_at=info["index_built_at"],
            index_build_seconds=info["index_build_seconds"], dim=info["dim"], encoder_backend=info["encoder_backend"],
            encoder_choice=info["encoder_choice"],
            loaded_at=self.switched_at,
            reranker=reranker, classifier=method if method == "head" or info["labels"] else "unavailable",
            hybrid=info["hybrid"], search=release.search.model_dump() if release.search else None,
            live_seq=info["live_seq"], metadata_unknown=info["metadata_unknown"],
        )

    @declared_route
    async def search(self, body: SearchRequest) -> SearchResponse:
        self.limits.check_search(body)
        release = self._release()
        plan = plan_search(body, release.search, self.reranker is not None, self.limits.rerank_candidates)
        return model_json(SearchResponse(**await self._search(release, body, plan)))

    async def _search(self, release: Release, body: SearchRequest, plan: SearchPlan) -> dict[str, Any]:
        """The fields of the SearchResponse that answers `body` by `plan` (/v1/search's and /v1/duplicates')."""
        from lmplatform.serving.metrics import record_search

        depth = max(body.k, plan.rerank_depth) if plan.rerank else body.k
        # Only the snippet travels back, unless the re-ranker needs the whole text.
        text_chars = -1 if plan.rerank else self.limits.snippet_chars + 1
        answer = await self._call(lambda: self.retriever.search.remote(
            release.id, [body.query], depth, text_chars, plan.fusion, body.exclude_ids, plan.metadata_fusion,
            [body.metadata], plan.window, body.min_seq or 0))
        (hits,) = answer.hits
        if plan.rerank and hits:
            top = hits[: plan.rerank_depth]
            documents = [join_fields(h, ["title", "text"]) for h in top]
            scores = await self._call(self.reranker.score.remote(body.query, documents))
            for hit, score in zip(top, scores):
                hit["retrieval_score"], hit["rerank_score"] = hit["score"], float(score)
            by_id = {h["id"]: h for h in hits}
            order = combine_rerank([(h["id"], h["score"]) for h in hits], scores, plan.rerank_weight)
            hits = [{**by_id[doc_id], "score": score} for doc_id, score in order[: body.k]]
        record_search(plan.mode, plan.rerank)
        convex = plan.fusion is not None and plan.fusion.fusion == "convex"
        return {"hits": [Hit(id=h["id"], score=h["score"], title=h["title"],
                             snippet=snippet(h["text"], self.limits.snippet_chars),
                             retrieval_score=h.get("retrieval_score"), rerank_score=h.get("rerank_score")) for h in hits],
                "model_version": release.id, "reranked": plan.rerank, "mode": plan.mode,
                "fusion": plan.fusion.fusion if plan.fusion else None,
                "bm25_weight": plan.fusion.bm25_weight if convex else None,
                "as_of_seq": answer.as_of_seq, "caught_up": answer.caught_up}

    @declared_route
    async def duplicates(self, body: DuplicatesRequest) -> DuplicatesResponse:
        """The duplicates of a report: /v1/search's answer for its title and text joined as the index joins them, its
        metadata, its id excluded. add: the report is then upserted, as POST /v1/documents would (after the search,
        so it never finds itself)."""
        from lmplatform.serving.live import document_text

        self.limits.check_duplicates(body)
        if body.add and self.writer is None:
            raise _Refused(422, "add: live updates are off, this service's index is read-only (set live.dir in the serve "
                                "settings); send add: false", "add")
        release = self._release()
        report = body.report
        fusion = release.search.metadata_fusion if release.search else None
        if body.add:  # as an upsert's: refused before anything is searched or stored
            check_time("report.metadata", report.metadata, fusion)
        search = SearchRequest(query=document_text(report.model_dump(), self.live_fields), k=body.k, mode=body.mode,
                               metadata=report.metadata, exclude_ids=[report.id] if report.id is not None else [],
                               min_seq=body.min_seq)
        window = report_window(body, release.search)
        if window is not None:
            search = search.model_copy(update={"filed_after": window.after, "filed_before": window.before})
        plan = plan_search(search, release.search, self.reranker is not None, self.limits.rerank_candidates,
                           metadata_field="report.metadata")
        found = await self._search(release, search, plan)
        seq = None
        if body.add:
            document = DocumentIn(id=report.id, title=report.title, text=report.text, metadata=report.metadata)
            seq = (await self._upsert(release, [document]))[-1]
        return model_json(DuplicatesResponse(**found, seq=seq))

    def _live_writer(self) -> Any:
        if self.writer is None:
            raise _Refused(404, "live updates are off: this service's index is read-only (set live.dir in the serve "
                                "settings to add and remove documents while serving)")
        return self.writer

    @declared_route
    async def upsert_documents(self, body: DocumentsRequest) -> DocumentsResponse:
        """Add or replace documents: encoded by the served model, durable in the change log before this answer, and
        found by every search that starts after it, on every replica."""
        self._live_writer()
        self.limits.check_documents(body)
        release = self._release()
        for i, doc in enumerate(body.documents):  # a time the version's fusion could not read is refused now
            check_time(f"documents[{i}].metadata", doc.metadata, release.search.metadata_fusion if release.search else None)
        seqs = await self._upsert(release, body.documents)
        return DocumentsResponse(upserted=len(seqs), seq=seqs[-1], model_version=release.id)

    async def _upsert(self, release: Release, documents: list[DocumentIn]) -> list[int]:
        """Encode checked documents with the release's model and append them to the change log; their seqs."""
        from lmplatform.serving.changelog import Change, vector_bytes
        from lmplatform.serving.live import document_text
        from lmplatform.serving.metrics import record_documents

        self._live_writer()
        texts = [document_text(doc.model_dump(), self.live_fields) for doc in documents]
        model, vectors = await self._call(lambda: self.retriever.embed_documents.remote(release.id, texts))
        changes = [Change("upsert", doc.id, doc.title, doc.text, doc.label, model, vector_bytes(vector),
                          metadata=doc.metadata or None) for doc, vector in zip(documents, vectors)]
        seqs = await self._write(changes)
        record_documents("upsert", len(changes))
        return seqs

    async def _write(self, changes: list[Any]) -> list[int]:
        """Append to the change log: their seqs, or a 503 (with Retry-After) when the writer does not answer within
        live.write_wait_s, has died under the call, or cannot write its log; reads go on meanwhile."""
        writer = self._live_writer()
        try:
            return await asyncio.wait_for(self._call(lambda: writer.append.remote(changes)), self.write_wait_s)
        except _Refused:
            raise
        except Exception as exc:  # a writer restarting (log replay, its lock), gone, or with a failing disk
            if isinstance(exc, asyncio.TimeoutError):
                why = f"did not answer within live.write_wait_s ({self.write_wait_s:g} s)"
            else:
                why = f"failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            logger.warning("a write got 503: the change-log writer %s", why)
            raise _Refused(503, f"the change-log writer {why}; retry (an upsert sent again is harmless, and the "
                                "change may have been applied)") from exc

    async def _document(self, doc_id: str) -> tuple[Release, dict[str, Any]]:
        self._live_writer()
        self.limits.check_id("id", doc_id)
        release = self._release()
        found = await self._call(lambda: self.retriever.document.remote(release.id, doc_id))
        if found is None:
            raise _Refused(404, f"no document with id {doc_id!r}", "id")
        return release, found

    @declared_route
    async def get_document(self, doc_id: str = Path(..., description="The document's id.")) -> DocumentResponse:
        release, found = await self._document(encodable_path(doc_id))
        return DocumentResponse(**found, model_version=release.id)

    @declared_route
    async def delete_document(self, doc_id: str = Path(..., description="The document's id.")) -> DeletedResponse:
        """Remove a document: durable before this answer; no search that starts after it returns the document, and
        no replay brings it back."""
        from lmplatform.serving.changelog import Change
        from lmplatform.serving.metrics import record_documents

        _, found = await self._document(encodable_path(doc_id))
        (seq,) = await self._write([Change("delete", found["id"])])
        record_documents("delete", 1)
        return DeletedResponse(id=found["id"], seq=seq)

    @declared_route
    async def classify(self, body: TextsRequest) -> ClassifyResponse:
        self.limits.check_texts("texts", body.texts)
        release = self._release()
        result = await self._call(self.classifier.classify.remote(release.id, body.texts))
        return ClassifyResponse(predictions=result["predictions"], method=result["method"], model_version=release.id)

    @declared_route
    async def embed(self, body: TextsRequest) -> EmbedResponse:
        self.limits.check_texts("texts", body.texts)
        release = self._release()
        vectors = await self._call(self.retriever.embed.remote(release.id, body.texts))
        return vectors_json({"vectors": vectors, "dim": int(vectors.shape[1]), "model_version": release.id})

    @declared_route
    async def embeddings(self, body: EmbeddingsRequest) -> EmbeddingsResponse:
        """OpenAI-compatible embeddings: the limits, batching and errors of /v1/embed, OpenAI's shapes."""
        self.limits.check_texts("input", body.input)
        if body.dimensions is not None and body.dimensions < 1:
            raise RequestLimitError("dimensions", f"must be positive, got {body.dimensions}")
        release = self._release()
        vectors, tokens = await self._call(self.retriever.embed_counted.remote(release.id, body.input))
        if body.dimensions is not None and body.dimensions != vectors.shape[1]:
            raise RequestLimitError("dimensions", f"this model's vectors have {vectors.shape[1]} dimensions, "
                                    f"not {body.dimensions} (vectors are not shortened)")
        if body.encoding_format == "base64":
            # What OpenAI sends: the float32 array's bytes, little-endian.
            encoded: Any = [base64.b64encode(row.astype("<f4").tobytes()).decode("ascii") for row in vectors]
        else:
            encoded = vectors
        # EmbeddingsResponse's shape, written by orjson from the array (responses.py).
        return vectors_json({"object": "list", "data": [{"object": "embedding", "index": i, "embedding": e}
                                                        for i, e in enumerate(encoded)],
                             "model": release.id, "usage": {"prompt_tokens": sum(tokens), "total_tokens": sum(tokens)}})

    @declared_route
    async def similarity(self, body: SimilarityRequest) -> SimilarityResponse:
        self.limits.check_text("a", body.a)
        self.limits.check_text("b", body.b)
        release = self._release()
        vectors = await self._call(self.retriever.embed.remote(release.id, [body.a, body.b]))
        cosine = float(np.clip(np.dot(vectors[0], vectors[1]), -1.0, 1.0))
        return SimilarityResponse(cosine=cosine, model_version=release.id)
