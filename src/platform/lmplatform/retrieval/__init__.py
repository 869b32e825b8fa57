"""Retrieval: FAISS vector indexes, dense / BM25 / two-stage retrievers."""

from lmplatform.lazy_exports import lazy_exports

# What tools such as the benches may use (tests/test_public_surface.py); every module path below is private.
PUBLIC: dict[str, str] = {
    **dict.fromkeys(("BM25FIndex", "BM25FParams", "tune_bm25f"), "lmplatform.retrieval.bm25f"),
    **dict.fromkeys(("build_bm25_index", "build_index_folder", "build_index_from_shards", "iter_shards"),
                    "lmplatform.retrieval.build"),
    "IncrementalBM25": "lmplatform.retrieval.incremental_bm25",
    **dict.fromkeys(("INDEX_FILE", "IndexParams", "VectorIndex"), "lmplatform.retrieval.index"),
    **dict.fromkeys(("candidate_pool", "fusion_features"), "lmplatform.retrieval.metadata_fusion"),
    **dict.fromkeys(("RepIndex", "RepModel", "training_triples"), "lmplatform.retrieval.rep"),
    **dict.fromkeys(("BM25Retriever", "BM25_DIR", "DenseRetriever", "HybridRetriever", "hybrid_search"),
                    "lmplatform.retrieval.retrievers"),
    **dict.fromkeys(("FusionSettings", "INDEX_KINDS", "MetadataFusionConfig", "RetrievalValidationConfig",
                     "feature_names"), "lmplatform.retrieval.settings"),
    **dict.fromkeys(("DOCUMENTS_FILE", "DocumentStore", "write_document_store"), "lmplatform.retrieval.store"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, PUBLIC)
