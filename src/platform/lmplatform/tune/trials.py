"""Function trainables: trials that need no training run.

`knn_classification` scores a KNN classifier on frozen encoder embeddings
(tuning k and the vote weighting); `knn_relations` scores KNN NER and relation
extraction on an ADE fold (tuning k for each). Embeddings are cached on disk, so
every trial after the first skips the encoder. `rerank_depth` scores two-stage
retrieval (bi-encoder, then a cross-encoder over the top N) for a re-rank depth N.
`quadratic` is a known-optimum function for smoke tests and for measuring Tune's
per-trial overhead.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

from lmplatform.data.readers import BadRow, detect_format, read_rows
from lmplatform.evaluation.retrieval_validation import attach_first_stage, build_retrieval_set, evaluate_model, summarize
from lmplatform.graph.data import read_ade, read_folds, split_fold
from lmplatform.models.resolve import resolve_model_path
from lmplatform.retrieval.settings import RetrievalValidationConfig
from lmplatform.runtime import project_root
from lmplatform.tune.space import resolve_project_path


def quadratic(x: float, y: float = 0.0, steps: int = 1, sleep_s: float = 0.0,
              log_dir: Optional[str] = None) -> Iterator[dict[str, float]]:
    """score = (x-1)^2 + (y+2)^2, minimum 0 at (1, -2); reports `steps` times (a noisy-free learning curve)."""
    if log_dir:
        # One line per start: lets a test prove that a restored study did not rerun finished trials.
        with open(Path(log_dir) / "starts.log", "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"x": x, "y": y}) + "\n")
    final = (x - 1.0) ** 2 + (y + 2.0) ** 2
    for step in range(1, steps + 1):
        if sleep_s:
            time.sleep(sleep_s)
        yield {"score": final * (1.0 + 1.0 / step), "final_score": final}


def _read_labelled(path: Path, text_field: str, label_field: str, limit: Optional[int]) -> tuple[list[str], list[str]]:
    texts, labels = [], []
    for row in read_rows(str(path), detect_format(path, "auto")):
        if isinstance(row, BadRow):
            continue
        text, label = row.fields.get(text_field), row.fields.get(label_field)
        if isinstance(text, str) and text.strip() and label is not None:
            texts.append(text)
            labels.append(str(label))
        if limit and len(texts) >= limit:
            break
    if len(set(labels)) < 2:
        raise ValueError(f"{path}: need at least 2 classes in {label_field!r}, found {sorted(set(labels))}")
    return texts, labels


def _cache_file(cache_dir: Optional[str], name: str, key: list) -> tuple[Path, Path]:
    """(the cache file for `key`, a unique temporary name beside it): write the temporary, then
    rename it, so concurrent trials never read half a file."""
    folder = Path(cache_dir) if cache_dir else project_root() / "outputs" / "embedding-cache"
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:20]
    stem, suffix = name.rsplit(".", 1)
    return folder / f"{stem}{digest}.{suffix}", folder / f"{stem}{digest}.{time.time_ns()}.tmp.{suffix}"


def cached_embeddings(model: str, texts: list[str], max_seq_length: int, cache_dir: Optional[str] = None) -> np.ndarray:
    """Encode once per (model, texts, length); later trials read the .npy file."""
    from lmplatform.models.encoder import Encoder

    resolved = str(resolve_model_path(model))
    path, tmp = _cache_file(cache_dir, ".npy", [resolved, max_seq_length, texts])
    if path.is_file():
        return np.load(path)
    encoder = Encoder.from_pretrained(resolved, max_seq_length=max_seq_length)
    vectors = encoder.encode(texts, batch_size=32, normalize=True)
    np.save(tmp, vectors)
    tmp.replace(path)
    return vectors


def knn_classification(k: int, data: str, weights: str = "uniform", model: str = "default",
                       text_field: str = "text", label_field: str = "label", folds: int = 5,
                       max_seq_length: int = 128, limit: Optional[int] = None, seed: int = 13,
                       cache_dir: Optional[str] = None) -> dict[str, float]:
    """Stratified k-fold macro-F1 and accuracy of a cosine KNN classifier on frozen embeddings."""
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.neighbors import KNeighborsClassifier

    texts, labels = _read_labelled(resolve_project_path(data), text_field, label_field, limit)
    vectors = cached_embeddings(model, texts, max_seq_length, cache_dir)
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    predicted = cross_val_predict(KNeighborsClassifier(n_neighbors=int(k), weights=weights, metric="cosine"),
                                  vectors, labels, cv=splitter)
    return {
        "val_macro_f1": float(f1_score(labels, predicted, average="macro")),
        "val_accuracy": float(accuracy_score(labels, predicted)),
        "documents": float(len(texts)),
    }


def _cached_word_vectors(model: str, data: str, fold: int, sentences: list, max_seq_length: int,
                         cache_dir: Optional[str]) -> list[np.ndarray]:
    """Per-word vectors of a fold's training sentences, encoded once per (model, data, fold, length)."""
    from lmplatform.evaluation.relations import load_backbone
    from lmplatform.graph.knn import encode_words

    key = [str(resolve_model_path(model)), str(Path(data).resolve()), fold, max_seq_length, [s.id for s in sentences]]
    path, tmp = _cache_file(cache_dir, "words-.npz", key)
    if path.is_file():
        with np.load(path) as stored:
            return [stored[f"s{i}"] for i in range(len(sentences))]
    backbone, tokenizer = load_backbone(model)
    vectors = encode_words(backbone, tokenizer, sentences, "first", max_seq_length)
    np.savez(tmp, **{f"s{i}": v for i, v in enumerate(vectors)})
    tmp.replace(path)
    return vectors


def knn_relations(k_ner: int, k_re: int, data: str, folds_file: str, fold: int = 0, model: str = "default",
                  validation_fraction: float = 0.1, entity_pooling: str = "last", max_seq_length: int = 128,
                  limit: Optional[int] = None, seed: int = 13, cache_dir: Optional[str] = None) -> dict[str, float]:
    """Strict NER and RE macro-F1 of the KNN extractor on a validation split of one ADE fold's training
    sentences (the fold's test sentences stay unseen: they are for the final evaluation)."""
    from lmplatform.graph.knn import KNNExtractor, score_extraction, split_validation

    data_path, folds_path = resolve_project_path(data), resolve_project_path(folds_file)
    sentences, _ = read_ade(str(data_path), limit=limit)
    train, _ = split_fold(sentences, read_folds(folds_path), fold)
    if len(train) < 2:
        raise ValueError(f"fold {fold} of {folds_path}: {len(train)} training sentences, need at least 2")
    vectors = dict(zip((s.id for s in train),
                       _cached_word_vectors(model, str(data_path), fold, train, max_seq_length, cache_dir)))
    fit_part, val_part = split_validation(train, validation_fraction, seed)
    fit_vectors, val_vectors = [vectors[s.id] for s in fit_part], [vectors[s.id] for s in val_part]
    extractor = KNNExtractor.fit(fit_part, fit_vectors, fit_vectors, entity_pooling)  # type: ignore[arg-type]
    entities = extractor.predict_entities(val_part, val_vectors, int(k_ner), int(k_ner))
    relations = extractor.predict_relations(val_part, val_vectors, entities, int(k_re), int(k_re))
    scores = score_extraction(val_part, entities, relations)
    return {"val_ner_macro_f1": scores["ner_macro_f1"], "val_re_macro_f1": scores["re_macro_f1"],
            "val_re_minus_macro_f1": scores["re_minus_macro_f1"], "sentences": float(len(val_part))}


def rerank_depth(candidates: int, retrieval: dict[str, Any], reranker: str) -> dict[str, float]:
    """Corpus-level metrics (`ir_*`) of two-stage retrieval: the first stage's top `candidates` re-ranked
    by the cross-encoder `reranker`, then the rest of the first stage's ranking.

    `retrieval` is a `retrieval_validation` section: the pairs (their validation side, or a file kept for
    validation with split: all; never the test split), distractors, and the first stage ('bm25' or a
    bi-encoder).
    """
    from lmplatform.models.cross_encoder import CrossEncoder

    cfg = RetrievalValidationConfig.model_validate({**retrieval, "candidates": int(candidates)})
    if cfg.pairs is None:
        raise ValueError("rerank_depth: retrieval.pairs is required (the validation pairs to rank)")
    rset = attach_first_stage(build_retrieval_set(cfg), cfg)
    return summarize(evaluate_model(CrossEncoder.from_pretrained(reranker), rset, cfg), rset)
