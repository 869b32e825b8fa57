"""Request models and limits, without Ray: strict types, unknown fields, each limit naming its field."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from lmplatform.retrieval.settings import SearchSettings
from lmplatform.serving.schemas import (
    DocumentsRequest,
    DuplicatesRequest,
    EmbeddingsRequest,
    RequestLimitError,
    SearchPlan,
    SearchRequest,
    ServeLimits,
    SimilarityRequest,
    TextsRequest,
    plan_search,
    snippet,
)

LIMITS = ServeLimits(max_query_chars=10, max_k=5, max_texts=2, max_text_chars=8)


def _limit_error(call, field: str, status: int) -> None:
    with pytest.raises(RequestLimitError) as caught:
        call()
    assert (caught.value.field, caught.value.status) == (field, status)


def test_search_request_is_strict() -> None:
    assert SearchRequest.model_validate({"query": "vpn"}).k == 10
    for body, field in [({"query": 3}, "query"), ({"query": "a", "k": "3"}, "k"), ({"query": "a", "k": 2.0}, "k"),
                        ({"query": "a", "rerank": 1}, "rerank"), ({"query": "a", "extra": 1}, "extra"), ({}, "query")]:
        with pytest.raises(ValidationError) as caught:
            SearchRequest.model_validate(body)
        assert caught.value.errors()[0]["loc"][0] == field
    with pytest.raises(ValidationError):
        TextsRequest.model_validate({"texts": ["a", None]})
    with pytest.raises(ValidationError):
        SimilarityRequest.model_validate({"a": "x"})


def test_search_limits_name_the_field() -> None:
    LIMITS.check_search(SearchRequest(query="vpn down", k=5))
    _limit_error(lambda: LIMITS.check_search(SearchRequest(query=" \t\n", k=1)), "query", 422)
    _limit_error(lambda: LIMITS.check_search(SearchRequest(query="x" * 11, k=1)), "query", 413)
    _limit_error(lambda: LIMITS.check_search(SearchRequest(query="vpn", k=0)), "k", 422)
    _limit_error(lambda: LIMITS.check_search(SearchRequest(query="vpn", k=6)), "k", 422)


def test_search_mode_and_weight_are_strict() -> None:
    body = SearchRequest.model_validate({"query": "vpn", "mode": "hybrid", "bm25_weight": 1})
    assert (body.mode, body.bm25_weight, body.rerank) == ("hybrid", 1.0, None)
    for bad, field in [({"mode": "sparse"}, "mode"), ({"mode": None, "bm25_weight": 1.5}, "bm25_weight"),
                       ({"bm25_weight": -0.1}, "bm25_weight"), ({"bm25_weight": "0.2"}, "bm25_weight"),
                       ({"bm25_weight": True}, "bm25_weight"), ({"bm25_weight": float("nan")}, "bm25_weight"),
                       ({"bm25_weight": float("inf")}, "bm25_weight"), ({"mode": ["hybrid"]}, "mode"), ({"mode": 1}, "mode")]:
        with pytest.raises(ValidationError) as caught:
            SearchRequest.model_validate({"query": "vpn", **bad})
        assert caught.value.errors()[0]["loc"][0] == field, (bad, caught.value.errors())


def test_a_search_plan_takes_the_request_over_the_registered_settings() -> None:
    def plan(registered=None, reranker=False, **request):
        return plan_search(SearchRequest(query="vpn", **request), registered, reranker, 8)

    assert plan() == SearchPlan("dense", None, None, False, 8, 1.0)  # nothing registered: today's dense search
    hybrid = plan(mode="hybrid", bm25_weight=0.4)
    assert (hybrid.mode, hybrid.fusion.bm25_weight, hybrid.fusion.hybrid_candidates) == ("hybrid", 0.4, 100)
    registered = SearchSettings(mode="hybrid", bm25_weight=0.3, reranker="models:/ce/1", rerank_depth=12, rerank_weight=0.6)
    assert plan(registered, reranker=True) == SearchPlan("hybrid", registered.fusion_settings(), None, True, 12, 0.6)
    assert plan(registered, reranker=True, mode="dense", rerank=False) == SearchPlan("dense", None, None, False, 12, 0.6)
    assert not plan(registered).rerank  # a registered re-ranker that is not deployed: not used by default
    _limit_error(lambda: plan(bm25_weight=0.5), "bm25_weight", 422)  # the release searches dense
    _limit_error(lambda: plan(SearchSettings(mode="hybrid", fusion="rrf"), bm25_weight=0.5), "bm25_weight", 422)
    _limit_error(lambda: plan(rerank=True), "rerank", 422)


def test_a_metadata_search_plan_needs_a_registered_fusion_and_a_readable_time() -> None:
    import numpy as np

    from lmplatform.retrieval.metadata_fusion import MetadataFusion
    from lmplatform.retrieval.settings import MetadataFusionConfig, feature_names

    def plan(registered=None, **request):
        return plan_search(SearchRequest(query="vpn", **request), registered, False, 8)

    cfg = MetadataFusionConfig()
    fitted = MetadataFusion(cfg, np.ones(len(feature_names(cfg))), 0.0).to_dict()
    registered = SearchSettings(metadata_fusion=fitted)  # dense by default; mode 'metadata' on request
    assert plan(registered).metadata_fusion is None
    chosen = plan(registered, mode="metadata", metadata={"product": "Writer", "created": "2001-01-10T09:30:00Z"})
    assert (chosen.mode, chosen.fusion, chosen.metadata_fusion.weights) == ("metadata", None, fitted["weights"])
    assert plan(registered, mode="metadata").mode == "metadata"  # no metadata: nothing matches, still an answer
    assert plan(registered, metadata={"created": "soon"}).mode == "dense"  # ignored outside mode 'metadata'
    _limit_error(lambda: plan(registered, mode="metadata", metadata={"created": "soon"}), "metadata.created", 422)
    _limit_error(lambda: plan(SearchSettings(), mode="metadata"), "mode", 422)
    with pytest.raises(ValidationError, match="needs metadata_fusion"):
        SearchSettings(mode="metadata")
    for bad in ({"product": ["Writer"]}, {"product": {"name": "Writer"}}, {"created": float("nan")}, []):
        with pytest.raises(ValidationError) as caught:
            SearchRequest.model_validate({"query": "vpn", "metadata": bad})
        assert caught.value.errors()[0]["loc"][0] == "metadata"
    limits = ServeLimits(max_id_chars=5)
    _limit_error(lambda: limits.check_search(SearchRequest(query="vpn", metadata={"product": "LibreOffice"})),
                 "metadata.product", 413)
    _limit_error(lambda: limits.check_search(SearchRequest(query="vpn", metadata={f"f{i}": 1 for i in range(65)})),
                 "metadata", 413)


def test_text_limits_name_the_offending_item() -> None:
    LIMITS.check_texts("texts", ["a", "b"])
    _limit_error(lambda: LIMITS.check_texts("texts", []), "texts", 422)
    _limit_error(lambda: LIMITS.check_texts("texts", ["a", "b", "c"]), "texts", 413)
    _limit_error(lambda: LIMITS.check_texts("texts", ["a", "123456789"]), "texts[1]", 413)
    _limit_error(lambda: LIMITS.check_texts("texts", ["", "a"]), "texts[0]", 422)
    _limit_error(lambda: LIMITS.check_text("a", "   "), "a", 422)


def test_limits_themselves_are_validated() -> None:
    with pytest.raises(ValidationError):
        ServeLimits(max_k=0)
    with pytest.raises(ValidationError):
        ServeLimits(max_texts=2, unknown=1)


def test_snippet_cuts_at_a_word_boundary() -> None:
    assert snippet("short text", 50) == "short text"
    cut = snippet("alpha beta gamma delta epsilon", 14)
    assert cut == "alpha beta…" and len(cut) <= 15
    assert snippet("x" * 30, 10) == "x" * 10 + "…"


def test_every_text_field_refuses_lone_surrogates_naming_the_field() -> None:
    good = {"query": "vpn", "texts": ["vpn"], "a": "vpn", "b": "vpn", "input": "vpn", "model": "m", "user": "u"}
    cases = [(SearchRequest, {"query": "vpn \ud800 down"}, ("query",)),
             (TextsRequest, {"texts": ["fine", "\udfff"]}, ("texts", 1)),
             (SimilarityRequest, {"a": "\udbff\udbff", "b": "vpn"}, ("a",)),
             (SimilarityRequest, {"a": "vpn", "b": "x\udc00"}, ("b",)),
             (EmbeddingsRequest, {"input": "vpn \ud800", "model": "m"}, ("input", 0)),
             (EmbeddingsRequest, {"input": ["ok", "\udfff"], "model": "m"}, ("input", 1)),
             (EmbeddingsRequest, {"input": "ok", "model": "m\ud800"}, ("model",)),
             (EmbeddingsRequest, {"input": "ok", "model": "m", "user": "\udc00"}, ("user",))]
    for model, body, loc in cases:
        with pytest.raises(ValidationError) as caught:
            model.model_validate(body)
        (error,) = caught.value.errors()
        assert error["loc"] == loc and "lone surrogate" in error["msg"], error
        model.model_validate({k: good[k] for k in body})
    # A JSON surrogate *pair* is one valid character; control and private-use characters are text.
    assert SearchRequest.model_validate({"query": "vpn \U0001F600 \x00\x1b \ue000 \ufffe"}).query.startswith("vpn")


def test_embeddings_request_takes_what_the_openai_sdk_sends_and_nothing_looser() -> None:
    sdk = EmbeddingsRequest.model_validate({"input": ["a", "b"], "model": "text-embedding-3-small", "encoding_format": "base64"})
    assert sdk.input == ["a", "b"] and sdk.encoding_format == "base64"
    assert EmbeddingsRequest.model_validate({"input": "one text", "model": "m"}).input == ["one text"]
    assert EmbeddingsRequest.model_validate({"input": "x", "model": "m", "dimensions": 384, "user": "u"}).dimensions == 384
    for body, field in [({"model": "m"}, "input"), ({"input": "x"}, "model"), ({"input": [[1, 2]], "model": "m"}, "input"),
                        ({"input": [101, 2023], "model": "m"}, "input"), ({"input": 5, "model": "m"}, "input"),
                        ({"input": "x", "model": "m", "encoding_format": "int8"}, "encoding_format"),
                        ({"input": "x", "model": "m", "dimensions": "384"}, "dimensions"),
                        ({"input": "x", "model": "m", "temperature": 1}, "temperature")]:
        with pytest.raises(ValidationError) as caught:
            EmbeddingsRequest.model_validate(body)
        assert caught.value.errors()[0]["loc"][0] == field, (body, caught.value.errors())


def test_document_limits_name_the_document_and_its_field() -> None:
    limits = ServeLimits(max_documents=2, max_id_chars=5, max_document_chars=8)

    def request(*documents: dict) -> DocumentsRequest:
        return DocumentsRequest.model_validate({"documents": list(documents)})

    limits.check_documents(request({"id": "a", "text": "vpn"}, {"id": "b", "title": "t", "text": "disk", "label": "x"}))
    _limit_error(lambda: limits.check_documents(request()), "documents", 422)
    _limit_error(lambda: limits.check_documents(request(*[{"id": str(i), "text": "x"} for i in range(3)])), "documents", 413)
    _limit_error(lambda: limits.check_documents(request({"id": "abcdef", "text": "x"})), "documents[0].id", 413)
    _limit_error(lambda: limits.check_documents(request({"id": "a", "text": "x"}, {"id": "a", "text": "y"})),
                 "documents[1].id", 422)
    _limit_error(lambda: limits.check_documents(request({"id": "a", "text": " "})), "documents[0].text", 422)
    _limit_error(lambda: limits.check_documents(request({"id": "a", "text": "x", "title": "t" * 9})), "documents[0].title", 413)
    _limit_error(lambda: limits.check_documents(request({"id": "a", "text": "x", "label": "\t"})), "documents[0].label", 422)
    for body, field in [({"documents": [{"id": 1, "text": "x"}]}, "documents"), ({"documents": [{"id": "a"}]}, "documents"),
                        ({"documents": [{"id": "a", "text": "x", "more": 1}]}, "documents")]:
        with pytest.raises(ValidationError) as caught:
            DocumentsRequest.model_validate(body)
        assert caught.value.errors()[0]["loc"][0] == field


REPORT = 100_000  # characters: a real bug report with its stack trace and logs


def test_the_default_limits_take_real_bug_reports_whole() -> None:
    """A 100,000-character report is a query, a document, a report and an embedded text by default; 200,000 is the
    limit, and one character more is a 413 naming the field. A full batch of maximal documents fits in a body."""
    limits = ServeLimits()
    long, longest, over = "trace " * (REPORT // 6), "x" * 200_000, "x" * 200_001
    for text in (long, longest):
        limits.check_search(SearchRequest(query=text))
        limits.check_documents(DocumentsRequest.model_validate({"documents": [{"id": "r", "title": text, "text": text}]}))
        limits.check_duplicates(DuplicatesRequest.model_validate({"report": {"title": "t", "text": text}}))
        limits.check_texts("texts", [text])
    _limit_error(lambda: limits.check_search(SearchRequest(query=over)), "query", 413)
    _limit_error(lambda: limits.check_documents(DocumentsRequest.model_validate({"documents": [{"id": "r", "text": over}]})),
                 "documents[0].text", 413)
    _limit_error(lambda: limits.check_duplicates(DuplicatesRequest.model_validate({"report": {"text": over}})),
                 "report.text", 413)
    _limit_error(lambda: limits.check_texts("texts", ["a", over]), "texts[1]", 413)
    assert limits.max_body_bytes >= limits.max_documents * limits.max_document_chars + 1_000_000


def test_duplicates_request_is_strict_and_its_limits_name_the_report_field() -> None:
    body = DuplicatesRequest.model_validate({"report": {"id": "r1", "title": "crash", "text": "vpn down",
                                                        "metadata": {"product": "Writer", "created": 978_000_000}}})
    assert (body.k, body.mode, body.add, body.report.metadata["product"]) == (10, None, False, "Writer")
    for bad, field in [({"report": {"text": "x"}, "query": "x"}, ("query",)), ({"report": {"text": "x", "colour": 1}},
                       ("report", "colour")), ({"report": {"title": "only"}}, ("report", "text")), ({}, ("report",)),
                       ({"report": {"text": "x"}, "k": "3"}, ("k",)), ({"report": {"text": "x"}, "add": "true"}, ("add",)),
                       ({"report": {"text": "x"}, "add": 1}, ("add",)), ({"report": {"id": 7, "text": "x"}}, ("report", "id")),
                       ({"report": {"text": "x"}, "mode": "sparse"}, ("mode",)), ({"report": "vpn down"}, ("report",)),
                       ({"report": {"text": "x \ud800"}}, ("report", "text")),
                       ({"report": {"text": "x", "metadata": {"product": ["a"]}}}, ("report", "metadata", "product"))]:
        with pytest.raises(ValidationError) as caught:
            DuplicatesRequest.model_validate(bad)
        assert caught.value.errors()[0]["loc"][: len(field)] == field, (bad, caught.value.errors())

    limits = ServeLimits(max_k=12, max_id_chars=4, max_document_chars=8)

    def check(**request) -> None:
        limits.check_duplicates(DuplicatesRequest.model_validate(request))

    check(report={"id": "r1", "text": "vpn"}, add=True, k=12)
    check(report={"text": "vpn"})  # no id: nothing to exclude, nothing to add
    _limit_error(lambda: check(report={"text": "vpn"}, add=True), "report.id", 422)
    _limit_error(lambda: check(report={"id": "r12345", "text": "vpn"}), "report.id", 413)
    _limit_error(lambda: check(report={"id": " ", "text": "vpn"}), "report.id", 422)
    _limit_error(lambda: check(report={"text": " \n"}), "report.text", 422)
    _limit_error(lambda: check(report={"text": "x" * 9}), "report.text", 413)
    _limit_error(lambda: check(report={"title": "t" * 9, "text": "x"}), "report.title", 413)
    _limit_error(lambda: check(report={"text": "x", "metadata": {"product": "LibreOffice"}}), "report.metadata.product", 413)
    _limit_error(lambda: check(report={"text": "x"}, k=13), "k", 422)
    _limit_error(lambda: check(report={"text": "x"}, k=0), "k", 422)


def test_a_duplicates_plan_names_the_reports_metadata() -> None:
    import numpy as np

    from lmplatform.retrieval.metadata_fusion import MetadataFusion
    from lmplatform.retrieval.settings import MetadataFusionConfig, feature_names

    cfg = MetadataFusionConfig()
    registered = SearchSettings(metadata_fusion=MetadataFusion(cfg, np.ones(len(feature_names(cfg))), 0.0).to_dict())
    query = SearchRequest(query="vpn", mode="metadata", metadata={"created": "last tuesday"})
    _limit_error(lambda: plan_search(query, registered, False, 8, metadata_field="report.metadata"),
                 "report.metadata.created", 422)


def test_a_time_window_reads_any_tracker_time_and_names_the_field_it_cannot_read() -> None:
    plan = plan_search(SearchRequest(query="vpn", filed_after="01/Jan/70 00:10", filed_before=3600), None, False, 8)
    assert plan.window is not None and (plan.window.field, plan.window.after, plan.window.before) == ("created", 600, 3600)
    assert plan_search(SearchRequest(query="vpn", filed_before=5, time_field="opened"), None, False, 8).window.field == "opened"
    assert plan_search(SearchRequest(query="vpn"), None, False, 8).window is None
    _limit_error(lambda: plan_search(SearchRequest(query="vpn", filed_after="soon"), None, False, 8), "filed_after", 422)
    _limit_error(lambda: plan_search(SearchRequest(query="vpn", filed_before=True), None, False, 8), "filed_before", 422)
    _limit_error(lambda: plan_search(SearchRequest(query="vpn", filed_after=10, filed_before=5), None, False, 8),
                 "filed_before", 422)


def test_a_duplicates_window_counts_back_from_the_reports_own_time() -> None:
    from lmplatform.serving.schemas import report_window

    def request(**fields) -> DuplicatesRequest:
        return DuplicatesRequest.model_validate({"report": {"text": "vpn", "metadata": {"created": "2020-01-11T00:00:00Z"}},
                                                 **fields})

    window = report_window(request(window_days=10), None)
    assert (window.field, window.after, window.before) == ("created", 1577836800.0, 1578700800.0)  # 1 Jan, 11 Jan 2020
    assert report_window(request(), None) is None
    no_time = DuplicatesRequest.model_validate({"report": {"text": "vpn"}, "window_days": 365})
    _limit_error(lambda: report_window(no_time, None), "report.metadata.created", 422)
    for days in (0, -1, "365", True):
        with pytest.raises(ValidationError) as caught:
            request(window_days=days)
        assert caught.value.errors()[0]["loc"][0] == "window_days"


def test_an_id_with_a_control_character_is_refused_naming_the_field() -> None:
    for doc_id in ("x\ny", "x\r", "\x00", "tab\there", "del\x7f", "c1\x85"):
        _limit_error(lambda doc_id=doc_id: LIMITS.check_id("documents[0].id", doc_id), "documents[0].id", 422)
    LIMITS.check_id("id", "a/b c é ü\u200b")  # any other text is an id
