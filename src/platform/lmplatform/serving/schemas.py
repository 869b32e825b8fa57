"""HTTP request and response models, and the limits every request is checked against.

Types are strict (a number where text is expected is an error, never coerced) and
unknown fields are rejected, so a typo in a client surfaces at once. Every text field
is `Text`: a string that is valid Unicode, so it can be encoded for the tokenizer. Size limits
are configurable per deployment, so they are checked by `ServeLimits.check_*`
after parsing rather than baked into the models; every violation names its field.
"""
from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
    StrictStr,
)

from lmplatform.config.base import Section
from lmplatform.data.fields import parse_time
from lmplatform.data.readers import DataError
from lmplatform.retrieval.settings import FusionSettings, MetadataFusionWeights, Mode, SearchSettings
from lmplatform.retrieval.window import TimeWindow


class RequestLimitError(ValueError):
    """A request that parsed but breaks a limit; `status` is 413 for size, 422 for values."""

    def __init__(self, field: str, message: str, status: int = 422):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status


class ServeLimits(Section):
    """Limits on one request. A request beyond them is refused with a 4xx naming the field."""

    # Real bug reports run to 100,000 characters (stack traces, logs): they are taken whole, and the encoder's
    # tokenizer cuts them at the model's max_seq_length, as in training (docs/serving.md#long-texts).
    max_query_chars: int = Field(200_000, ge=1, description="Longest /v1/search query (characters).")
    max_k: int = Field(100, ge=1, le=10_000, description="Largest k for /v1/search.")
    max_texts: int = Field(32, ge=1, description="Most texts in one /v1/embed or /v1/classify request "
                           "(at most batching.max_batch_size: one request never exceeds a batch).")
    max_text_chars: int = Field(200_000, ge=1, description="Longest text in /v1/embed, /v1/embeddings, /v1/classify and "
                                "/v1/similarity (characters).")
    max_document_chars: int = Field(200_000, ge=1, description="Longest text, and longest title, of a document in "
                                    "POST /v1/documents and of a report in /v1/duplicates (characters).")
    # 32 documents of 200,000 ASCII characters are 6.4 MB of JSON: a full batch of maximal documents fits. Text beyond
    # ASCII takes up to 3 bytes a character (6 as a JSON \u escape), so there the body limit speaks first.
    max_body_bytes: int = Field(8_000_000, ge=1024, description="Largest request body; larger bodies get 413 naming "
                                "`body`.")
    snippet_chars: int = Field(240, ge=0, description="Characters of document text returned with each hit.")
    rerank_candidates: int = Field(20, ge=1, le=1000, description="Hits from the index that the re-ranker re-scores, "
                                   "unless the model version's search settings set rerank_depth.")
    max_exclude_ids: int = Field(100, ge=0, le=10_000, description="Most ids in one /v1/search exclude_ids.")
    max_documents: int = Field(32, ge=1, description="Most documents in one POST /v1/documents (at most "
                               "batching.max_batch_size: they are encoded in one batch).")
    max_id_chars: int = Field(256, ge=1, le=10_000, description="Longest document id (and label, and metadata string "
                              "value), in characters.")

    def check_text(self, field: str, text: str, limit: Optional[int] = None) -> None:
        """A non-blank text of at most `limit` characters (default: max_text_chars)."""
        limit = self.max_text_chars if limit is None else limit
        if not text.strip():
            raise RequestLimitError(field, "must not be empty or whitespace only")
        if len(text) > limit:
            raise RequestLimitError(field, f"has {len(text)} characters; the limit is {limit}", 413)

    def check_texts(self, field: str, texts: list[str]) -> None:
        if not texts:
            raise RequestLimitError(field, "must hold at least one text")
        if len(texts) > self.max_texts:
            raise RequestLimitError(field, f"has {len(texts)} texts; the limit is {self.max_texts} per request", 413)
        for i, text in enumerate(texts):
            self.check_text(f"{field}[{i}]", text)

    def check_search(self, request: "SearchRequest") -> None:
        self.check_text("query", request.query, self.max_query_chars)
        self.check_k(request.k)
        self.check_min_seq(request.min_seq)
        if len(request.exclude_ids) > self.max_exclude_ids:
            raise RequestLimitError("exclude_ids", f"has {len(request.exclude_ids)} ids; the limit is {self.max_exclude_ids}",
                                    413)
        self.check_metadata("metadata", request.metadata)

    def check_min_seq(self, min_seq: Optional[int]) -> None:
        if min_seq is not None and min_seq < 0:
            raise RequestLimitError("min_seq", f"must be 0 or more (a seq a write returned), got {min_seq}")

    def check_k(self, k: int) -> None:
        if k <= 0 or k > self.max_k:
            raise RequestLimitError("k", f"must be between 1 and {self.max_k}, got {k}")

    def check_metadata(self, field: str, metadata: dict[str, Any]) -> None:
        if len(metadata) > MAX_METADATA_FIELDS:
            raise RequestLimitError(field, f"has {len(metadata)} fields; the limit is {MAX_METADATA_FIELDS}", 413)
        for name, value in metadata.items():
            if isinstance(value, str) and len(value) > self.max_id_chars:
                raise RequestLimitError(f"{field}.{name}", f"has {len(value)} characters; the limit is {self.max_id_chars}",
                                        413)

    def check_id(self, field: str, doc_id: str) -> None:
        if not doc_id.strip():
            raise RequestLimitError(field, "must not be empty or whitespace only")
        control = first_control_character(doc_id)
        if control is not None:
            raise RequestLimitError(field, f"holds the control character U+{ord(doc_id[control]):04X} at {control}: an id "
                                    "is addressed in a URL path (GET and DELETE /v1/documents/{id}), where none can be")
        if len(doc_id) > self.max_id_chars:
            raise RequestLimitError(field, f"has {len(doc_id)} characters; the limit is {self.max_id_chars}", 413)

    def check_documents(self, request: "DocumentsRequest") -> None:
        documents = request.documents
        if not documents:
            raise RequestLimitError("documents", "must hold at least one document")
        if len(documents) > self.max_documents:
            raise RequestLimitError("documents", f"has {len(documents)} documents; the limit is {self.max_documents} "
                                    "per request", 413)
        seen: dict[str, int] = {}
        for i, doc in enumerate(documents):
            self.check_id(f"documents[{i}].id", doc.id)
            if doc.id in seen:
                raise RequestLimitError(f"documents[{i}].id", f"repeats documents[{seen[doc.id]}].id {doc.id!r}: "
                                        "one change per document and request")
            seen[doc.id] = i
            self._check_document(f"documents[{i}]", doc)
            if doc.label is not None:
                self.check_id(f"documents[{i}].label", doc.label)

    def _check_document(self, field: str, doc: "DocumentIn | ReportIn") -> None:
        self.check_text(f"{field}.text", doc.text, self.max_document_chars)
        if len(doc.title) > self.max_document_chars:
            raise RequestLimitError(f"{field}.title", f"has {len(doc.title)} characters; the limit is "
                                    f"{self.max_document_chars}", 413)
        self.check_metadata(f"{field}.metadata", doc.metadata)

    def check_duplicates(self, request: "DuplicatesRequest") -> None:
        """The report as a document (its text and title by max_document_chars, also when it is not added), k as
        /v1/search's; `add` needs the report's id."""
        report = request.report
        if report.id is not None:
            self.check_id("report.id", report.id)
        elif request.add:
            raise RequestLimitError("report.id", "add: true needs the report's id (the id it is stored under)")
        self._check_document("report", report)
        self.check_k(request.k)
        self.check_min_seq(request.min_seq)


@dataclass(frozen=True)
class SearchPlan:
    """How one /v1/search request is answered: its first stage, whether and how it is re-ranked."""

    mode: Mode
    fusion: Optional[FusionSettings]  # mode 'hybrid' only
    metadata_fusion: Optional[MetadataFusionWeights]  # mode 'metadata' only
    rerank: bool
    rerank_depth: int
    rerank_weight: float
    window: Optional[TimeWindow] = None  # only documents filed inside it


DEFAULT_TIME_FIELD = "created"


def window_field(requested: Optional[str], registered: Optional[SearchSettings]) -> str:
    """The metadata field a time window reads: the request's, else the version's metadata fusion's time field, else
    DEFAULT_TIME_FIELD."""
    fusion = registered.metadata_fusion if registered is not None else None
    return requested or (fusion.config.time_field if fusion is not None else None) or DEFAULT_TIME_FIELD


def _window_end(field: str, value: Any) -> Optional[float]:
    try:
        return parse_time(value, field)
    except DataError as exc:
        raise RequestLimitError(field, str(exc).removeprefix(f"{field}: ")) from None


def search_window(request: "SearchRequest", registered: Optional[SearchSettings]) -> Optional[TimeWindow]:
    """The window of `filed_after`/`filed_before` (None when neither is set); a time that does not parse, or a window
    that ends before it starts, is a RequestLimitError naming the field."""
    after, before = _window_end("filed_after", request.filed_after), _window_end("filed_before", request.filed_before)
    if after is None and before is None:
        return None
    if after is not None and before is not None and after > before:
        raise RequestLimitError("filed_before", "is earlier than filed_after: the window would hold nothing")
    return TimeWindow(window_field(request.time_field, registered), after, before)


def report_window(request: "DuplicatesRequest", registered: Optional[SearchSettings]) -> Optional[TimeWindow]:
    """The `window_days` up to the report's own time (None without window_days); a report time that is missing or
    does not parse is a RequestLimitError naming it."""
    if request.window_days is None:
        return None
    field = window_field(None, registered)
    name = f"report.metadata.{field}"
    filed = _window_end(name, request.report.metadata.get(field))
    if filed is None:
        raise RequestLimitError(name, "window_days counts back from the report's own time, and the report has none; "
                                "send it or leave window_days out")
    return TimeWindow.days_before(field, filed, request.window_days)


def check_time(field: str, metadata: dict[str, Any], fusion: Optional[MetadataFusionWeights]) -> None:
    """A RequestLimitError naming `<field>.<time field>` when `metadata` holds a time the fusion cannot read."""
    time_field = fusion.config.time_field if fusion is not None else None
    if time_field:
        try:
            parse_time(metadata.get(time_field), time_field)
        except DataError as exc:
            raise RequestLimitError(f"{field}.{time_field}", str(exc).removeprefix(f"{time_field}: ")) from None


def plan_search(request: "SearchRequest", registered: Optional[SearchSettings], reranker_deployed: bool,
                default_rerank_depth: int, metadata_field: str = "metadata") -> SearchPlan:
    """The request's own choices over the version's registered settings (or the defaults: dense, no re-ranking,
    `default_rerank_depth`). A choice that cannot apply is a RequestLimitError naming its field (the metadata's as
    `metadata_field`: where the client sent it)."""
    settings = registered or SearchSettings()
    mode = request.mode or settings.mode
    if mode == "metadata" and settings.metadata_fusion is None:
        raise RequestLimitError("mode", "this model version has no metadata fusion registered with its search settings; "
                                "send mode 'dense' or 'hybrid'")
    metadata_fusion = settings.metadata_fusion if mode == "metadata" else None
    check_time(metadata_field, request.metadata, metadata_fusion)
    fusion = settings.fusion_settings() if mode == "hybrid" else None
    if request.bm25_weight is not None:
        if fusion is None:
            raise RequestLimitError("bm25_weight", "applies to mode 'hybrid' only; send mode 'hybrid' or leave it out")
        if fusion.fusion != "convex":
            raise RequestLimitError("bm25_weight", f"this model version fuses by {fusion.fusion}, which has no BM25 weight")
        fusion = fusion.model_copy(update={"bm25_weight": request.bm25_weight})
    rerank = request.rerank if request.rerank is not None else settings.reranker is not None and reranker_deployed
    if rerank and not reranker_deployed:
        raise RequestLimitError("rerank", "no re-ranker is deployed; send rerank=false")
    depth = settings.rerank_depth if registered is not None else default_rerank_depth
    return SearchPlan(mode, fusion, metadata_fusion, rerank, depth, settings.rerank_weight,
                      search_window(request, registered))


def first_control_character(text: str) -> Optional[int]:
    """The position of the first control character (Unicode category Cc: C0, DEL, C1) in `text`, None if none."""
    return next((i for i, c in enumerate(text) if unicodedata.category(c) == "Cc"), None)


def encodable(text: str) -> str:
    """`text` unchanged if it is valid Unicode; else a ValueError saying where it is not.

    JSON lets a client write any UTF-16 code unit as an escape, so `"vpn \\ud800 down"` parses to a
    Python string holding a lone surrogate. Python keeps it, but the fast tokenizers (Rust strings)
    refuse it with a TypeError, which inside a batch would fail every request batched with it.
    Surrogates are the only code points a JSON string can hold that UTF-8 cannot encode.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"is not valid Unicode text: lone surrogate U+{ord(text[exc.start]):04X} at character "
                         f"{exc.start} (a JSON \\uD800-\\uDBFF escape must be followed by a \\uDC00-\\uDFFF one)") from None
    return text


# Every text a request carries to a model: strict (no coercion) and encodable.
Text = Annotated[StrictStr, AfterValidator(encodable)]


def metadata_value(value: Any) -> Any:
    """A metadata value as sent: a JSON scalar (text valid Unicode, a finite number); a ValueError otherwise."""
    if value is None or isinstance(value, (bool, int)) or (isinstance(value, float) and math.isfinite(value)):
        return value
    if isinstance(value, str):
        return encodable(value)
    raise ValueError("must be a string, a finite number, a boolean or null")


# A metadata value is compared for equality, or read as a time; a list or an object is refused.
Scalar = Annotated[Union[str, int, float, bool, None], PlainValidator(metadata_value)]
Metadata = dict[Text, Scalar]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


# A weight in [0, 1]: a JSON number (an integer too), never a bool, a string, NaN or an infinity.
UnitInterval = Annotated[float, Field(strict=True, ge=0.0, le=1.0, allow_inf_nan=False)]
# A span of days: a positive JSON number.
Days = Annotated[float, Field(strict=True, gt=0.0, allow_inf_nan=False)]
MAX_METADATA_FIELDS = 64


class SearchRequest(_Request):
    query: Text = Field(..., description="Search text (non-empty, at most limits.max_query_chars).")
    k: StrictInt = Field(10, description="Number of hits (1..limits.max_k).")
    rerank: Optional[StrictBool] = Field(None, description="Re-score the top candidates with the cross-encoder (if one is "
                                         "deployed). Default: the model version's search settings "
                                         "(re-rank when they name a re-ranker).")
    mode: Optional[Mode] = Field(None, description="'dense' (bi-encoder), 'hybrid' (BM25 fused with it; the index must "
                                 "have a BM25 index) or 'metadata' (the dense and BM25 candidates ranked by the version's "
                                 "fitted metadata fusion, with `metadata` and the documents'). "
                                 "Default: the version's search settings, else dense.")
    metadata: Metadata = Field(default_factory=dict, description="mode 'metadata': the query's own metadata, e.g. "
                               "{\"product\": \"Writer\", \"component\": \"ui\", \"created\": \"2001-01-10T09:30:00Z\"} "
                               "(the fields the fusion reads; a missing one matches nothing). Ignored in other modes.")
    bm25_weight: Optional[UnitInterval] = Field(None, description="mode 'hybrid': the BM25 weight w of the convex mix "
                                                "(1-w)·minmax(dense) + w·minmax(bm25). Default: the version's search settings.")
    exclude_ids: list[Text] = Field(default_factory=list, description="Document ids never to return, left out before the "
                                    "top k is taken (and before fusion and re-ranking): e.g. the report a duplicate is "
                                    "searched for, when it is in the index itself. At most limits.max_exclude_ids.")
    filed_after: Scalar = Field(None, description="Only documents filed at or after this time (their metadata's "
                                "`time_field`): ISO 8601, Jira's dd/MMM/yy HH:mm, RFC 2822 or epoch seconds or "
                                "milliseconds. A windowed search leaves out the documents without a readable time.")
    filed_before: Scalar = Field(None, description="Only documents filed at or before this time (as filed_after).")
    time_field: Optional[Text] = Field(None, description="The metadata field filed_after and filed_before read. Default: "
                                       "the version's metadata fusion's time field, else 'created'.")
    min_seq: Optional[StrictInt] = Field(None, description="Live updates: answer only from an index that has applied "
                                         "the change of this seq (what POST /v1/documents returned), so a client reads "
                                         "its own writes on any replica; 503 when the writer does not bring it within "
                                         "live.read_wait_s.")


class TextsRequest(_Request):
    texts: list[Text] = Field(..., description="1..limits.max_texts non-empty texts.")


class SimilarityRequest(_Request):
    a: Text
    b: Text


def _one_text_is_a_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


class EmbeddingsRequest(_Request):
    """OpenAI's embeddings request (`POST /v1/embeddings`), as its SDKs and gateways send it.

    `model` is required, as OpenAI requires it, and answered with the served model: one service
    serves one model. Token-id inputs (lists of integers) are refused: the texts are tokenized here.
    """

    input: Annotated[list[Text], BeforeValidator(_one_text_is_a_list)] = Field(
        ..., description="One text, or 1..limits.max_texts texts (each non-empty, at most limits.max_text_chars).")
    model: Text = Field(..., description="Any name; the response names the model that answered.")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="'base64': each vector as little-endian float32 bytes, base64-encoded "
        "(what the OpenAI SDK asks for).")
    dimensions: Optional[StrictInt] = Field(None, description="If set, must equal the model's dimension (vectors are not cut).")
    user: Optional[Text] = Field(None, description="Accepted and ignored.")


class DocumentIn(_Request):
    id: Text = Field(..., description="The document's id (at most limits.max_id_chars); an id already held is replaced.")
    title: Text = Field("", description="Shown with hits; encoded with the text when live.fields names it.")
    text: Text = Field(..., description="Non-empty, at most limits.max_document_chars.")
    label: Optional[Text] = Field(None, description="A class label (KNN classification votes with it).")
    metadata: Metadata = Field(default_factory=dict, description="What a metadata fusion reads of the document "
                               "(product, component, created...): JSON scalars by field name.")


class ReportIn(_Request):
    id: Optional[Text] = Field(None, description="The report's id, if it has one: never returned among its duplicates "
                               "(exclude_ids), and what `add` stores it under (at most limits.max_id_chars).")
    title: Text = Field("", description="Searched with the text, joined as the index joins them (live.fields).")
    text: Text = Field(..., description="Non-empty, at most limits.max_document_chars.")
    metadata: Metadata = Field(default_factory=dict, description="The report's own metadata (product, component, "
                               "created...): what mode 'metadata' matches the documents' with, and what `add` stores.")


class DuplicatesRequest(_Request):
    """`POST /v1/duplicates`: the search /v1/search answers for this report's title and text, its metadata, and its
    id excluded; with `add`, the report then joins the live index (after the search: it never finds itself)."""

    report: ReportIn
    k: StrictInt = Field(10, description="Number of hits (1..limits.max_k).")
    mode: Optional[Mode] = Field(None, description="As /v1/search's mode. Default: the version's search settings, "
                                 "else dense.")
    add: StrictBool = Field(False, description="Also upsert the report into the live index (needs live updates on and "
                            "the report's id); the answer's `seq` is that change's.")
    window_days: Optional[Days] = Field(None, description="Only reports filed in the window_days up to the report's own "
                                        "time (its metadata's time field, as /v1/search's time_field, which must then "
                                        "be set): the duplicate-detection literature ranks against the 365 days before "
                                        "a report. Reports without a readable time are left out.")
    min_seq: Optional[StrictInt] = Field(None, description="As /v1/search's min_seq.")


class DocumentsRequest(_Request):
    documents: list[DocumentIn] = Field(..., description="1..limits.max_documents documents, each id once.")


class DocumentsResponse(BaseModel):
    upserted: int
    seq: int = Field(..., description="The change log's sequence number of the last document: every search that "
                     "starts after this answer sees the documents.")
    model_version: str = Field(..., description="The release whose model encoded them.")


class DocumentResponse(BaseModel):
    id: str
    title: str
    text: str
    label: Optional[str] = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    model_version: str


class DeletedResponse(BaseModel):
    id: str
    seq: int


class Hit(BaseModel):
    id: str
    score: float = Field(..., description="What the hits are ordered by: the cosine (dense), the fused score (hybrid), "
                         "the fusion's logit (metadata), or, for a re-ranked hit, its mix with the re-ranker.")
    title: str = ""
    snippet: str = ""
    retrieval_score: Optional[float] = Field(
        None, description="The first stage's score (cosine or fused) when the hit was re-ranked.")
    rerank_score: Optional[float] = Field(None, description="The cross-encoder's score when the hit was re-ranked.")


class SearchResponse(BaseModel):
    hits: list[Hit]
    model_version: str
    reranked: bool
    mode: Mode = Field(..., description="The first stage that answered.")
    fusion: Optional[Literal["convex", "rrf"]] = Field(None, description="mode 'hybrid': how BM25 and the vectors were fused.")
    bm25_weight: Optional[float] = Field(None, description="fusion 'convex': the BM25 weight used.")
    as_of_seq: Optional[int] = Field(None, description="Live updates: the change-log seq the index answered at; "
                                     "every change acknowledged with a seq up to it is in the answer.")
    caught_up: Optional[bool] = Field(None, description="Live updates: false when the change-log writer did not answer "
                                      "within live.read_wait_s, so changes after as_of_seq may be missing.")


class DuplicatesResponse(SearchResponse):
    seq: Optional[int] = Field(None, description="add: the change log's sequence number of the report's upsert "
                               "(every search that starts after this answer finds it); else null.")


class Prediction(BaseModel):
    label: str
    probabilities: dict[str, float]


class ClassifyResponse(BaseModel):
    predictions: list[Prediction]
    method: str = Field(..., description="'head' (the model's trained MLP head) or 'knn' (labelled documents of the index).")
    model_version: str


class EmbedResponse(BaseModel):
    vectors: list[list[float]]
    dim: int
    model_version: str


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: Union[list[float], str]


class EmbeddingsUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingsUsage


class SimilarityResponse(BaseModel):
    cosine: float
    model_version: str


class HealthResponse(BaseModel):
    status: Literal["ok", "starting"] = Field(..., description="'starting' (HTTP 503) until the model deployments have "
                                              "answered once: a first load of a large index takes minutes.")


class ModelInfo(BaseModel):
    registered_name: Optional[str]
    version: Optional[str]
    alias: Optional[str]
    mlflow_run_id: Optional[str]
    model_uri: str
    release_id: str
    index_size: int
    index_kind: str
    index_built_at: Optional[str] = Field(None, description="When the index files were written (UTC, ISO 8601).")
    index_build_seconds: Optional[float] = None
    dim: int
    encoder_backend: str = Field(
        "torch", description="How the bi-encoder runs: torch, torch-int8, onnx, onnx-int8, openvino or openvino-int8.")
    encoder_choice: Optional[dict[str, Any]] = Field(None, description="encoder.backend 'auto': the path chosen, the "
                                                     "host class, whether from the cache, and each candidate's ms per "
                                                     "batch; null: the backend was set.")
    loaded_at: str
    reranker: Optional[str] = None
    classifier: str
    hybrid: bool = Field(False, description="Whether the index has a BM25 index beside it, so /v1/search answers mode 'hybrid'.")
    search: Optional[dict[str, Any]] = Field(None, description="The search settings registered with the model version "
                                             "(how /v1/search answers by default); null: dense, no re-ranker.")
    live_seq: Optional[int] = Field(None, description="Live updates on: the change log sequence number the index "
                                    "answering this request is at (null: a read-only index).")
    metadata_unknown: Optional[dict[str, int]] = Field(None, description="Per field the version's metadata fusion "
                                                       "reads, the documents of the index as loaded without a value "
                                                       "(missing, or a time that does not parse); null: no fusion.")


class ErrorResponse(BaseModel):
    error: str
    field: Optional[str] = None
    details: list[dict] = Field(default_factory=list)


def snippet(text: str, limit: int) -> str:
    """The start of `text`, cut at a word boundary when one is near the limit."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit * 0.6 else cut).rstrip() + "…"
