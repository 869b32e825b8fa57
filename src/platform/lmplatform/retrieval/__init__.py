"""Retrieval: FAISS vector indexes, dense / BM25 / two-stage retrievers."""
