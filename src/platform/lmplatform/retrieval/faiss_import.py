"""`import_faiss`: faiss with exact batch search on BLAS, for every caller in the library.

faiss 1.15 scans exact (flat) inner products per query with SIMD until a call's queries hold
`distance_compute_blas_threshold` floats (default 128,000: 333 MiniLM queries), and only then
uses one BLAS matrix product. Measured on one core against 100k x 384 vectors: 32 queries take
218 ms on the scan and 36 ms with BLAS; one query 7 ms on the scan and 16 ms with BLAS. So
batching saved no search work in serving, KNN evaluation or hard-negative mining until batches
were switched to BLAS.
"""
from __future__ import annotations

import logging
from types import ModuleType

import numpy as np

# faiss takes the scan while queries x dimension < this value, so calls of three or more 384-d
# queries use BLAS and one or two stay on the scan. Measured at 100k vectors on one core: 1, 2 and
# 3 queries take 7, 14 and 22 ms on the scan (BLAS: 16 ms for any of them); 32 queries take 38 ms
# with BLAS (218 ms on the scan).
BLAS_MIN_QUERY_FLOATS = 2 * 384 + 1


def import_faiss() -> ModuleType:
    # faiss's loader logs at INFO each SIMD build it tried and could not load; Ray workers show INFO.
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    import faiss

    faiss.cvar.distance_compute_blas_threshold = BLAS_MIN_QUERY_FLOATS
    return faiss


def exact_search(queries: np.ndarray, candidates: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores [q, k], candidate rows [q, k]) of the k highest inner products of each query among the
    candidates, best first (FAISS flat); queries [q, d], candidates [n, d]. Rows past n are -1."""
    faiss = import_faiss()
    index = faiss.IndexFlatIP(candidates.shape[1])
    index.add(np.ascontiguousarray(candidates, dtype=np.float32))
    return index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
