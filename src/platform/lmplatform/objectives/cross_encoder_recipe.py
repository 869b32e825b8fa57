"""Wiring of the cross-encoder: pairs and their negatives on the driver, the recipe on the worker."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from lmplatform.config.schema import RunConfig
from lmplatform.data.corpus import TRAIN, VALIDATION
from lmplatform.data.pairs import Pair, pair_datasets, read_pairs
from lmplatform.models.cross_encoder import CrossEncoder
from lmplatform.objectives.biencoder_recipe import prepared_pairs
from lmplatform.objectives.cross_encoder_objective import CrossEncoderObjective, GroupCollator, RerankEvaluator
from lmplatform.train.recipe import PreparedData, TrainingRecipe


def _positives_by_query(pairs: Sequence[Pair]) -> dict[str, set[str]]:
    positives: dict[str, set[str]] = {}
    for pair in pairs:
        positives.setdefault(pair.query, set()).add(pair.document)
    return positives


def mine_candidates(pairs: Sequence[Pair], documents: list[str], miner_model: str, top_k: int) -> list[list[int]]:
    """Per pair, the indices of the top_k + (its positives) documents under the bi-encoder, best first."""
    from lmplatform.models.encoder import Encoder
    from lmplatform.retrieval.faiss_import import import_faiss

    faiss = import_faiss()

    encoder = Encoder.from_pretrained(miner_model)
    queries = sorted({p.query for p in pairs})
    index = faiss.IndexFlatIP(encoder.dim)
    index.add(encoder.encode(documents, show_progress=len(documents) > 1000))
    positives = _positives_by_query(pairs)
    depth = min(len(documents), top_k + max(len(v) for v in positives.values()))
    _, found = index.search(encoder.encode(queries, show_progress=len(queries) > 1000), depth)
    ranked = dict(zip(queries, found.tolist()))
    return [ranked[p.query] for p in pairs]


def choose_negatives(
    pairs: Sequence[Pair], k: int, rng: np.random.Generator, use_hard_negatives: bool = True,
    mined: Optional[list[list[int]]] = None, documents: Optional[list[str]] = None, top_k: int = 10,
) -> list[list[str]]:
    """k negatives per pair: its own hard negatives first, then mined (top_k non-positives) or random documents."""
    documents = documents if documents is not None else sorted({p.document for p in pairs})
    positives = _positives_by_query(pairs)
    out = []
    for index, pair in enumerate(pairs):
        own = positives[pair.query]
        chosen = [n for n in pair.hard_negatives if n not in own][:k] if use_hard_negatives else []
        if mined is not None:
            pool = [documents[i] for i in mined[index] if i >= 0 and documents[i] not in own and documents[i] not in chosen][:top_k]
            need = min(k - len(chosen), len(pool))
            if need > 0:
                chosen += [pool[i] for i in sorted(rng.choice(len(pool), size=need, replace=False))]  # keep rank order
        else:
            # A random permutation, read until enough non-positives: no O(documents) pool per pair.
            for i in rng.permutation(len(documents)):
                if len(chosen) >= k:
                    break
                if documents[i] not in own and documents[i] not in chosen:
                    chosen.append(documents[i])
        out.append(chosen)
    return out


def _groups(pairs: Sequence[Pair], negatives: list[list[str]]) -> list[dict[str, Any]]:
    return [{"query": p.query, "document": p.document, "negatives": n} for p, n in zip(pairs, negatives) if n]


def prepare_cross_encoder_pairs(cfg: RunConfig) -> PreparedData:
    objective = cfg.objective
    pairs = read_pairs(cfg.data)
    rng = np.random.default_rng(objective.seed)
    rows: dict[str, list[dict[str, Any]]] = {}
    short = 0
    for split, split_pairs in ((TRAIN, pairs.train), (VALIDATION, pairs.validation)):
        if not split_pairs:
            continue
        documents = sorted({p.document for p in split_pairs})
        mined = None
        if objective.negatives == "mined":
            print(f"[lmp] mining {split} negatives with {objective.miner_model} over {len(documents)} documents", flush=True)
            mined = mine_candidates(split_pairs, documents, objective.miner_model, objective.mining_top_k)
        negatives = choose_negatives(split_pairs, objective.negatives_per_positive, rng, objective.use_hard_negatives,
                                     mined, documents, objective.mining_top_k)
        short += sum(len(n) < objective.negatives_per_positive for n in negatives)
        rows[split] = _groups(split_pairs, negatives)
    summary = (f"\ndata: {objective.negatives} negatives, {objective.negatives_per_positive} per positive"
               + (f"; {short} pair(s) got fewer (too few other documents)" if short else ""))
    return prepared_pairs(pairs, pair_datasets(pairs, rows), len(rows[TRAIN]),
                          {"data/pairs_with_fewer_negatives": float(short)}, summary)


def build_cross_encoder_recipe(cfg: RunConfig) -> TrainingRecipe:
    model = CrossEncoder.from_pretrained(cfg.model.name_or_path, max_seq_length=cfg.model.max_seq_length)

    def export(trained: CrossEncoder, folder: Path) -> None:
        trained.save_pretrained(folder)

    return TrainingRecipe(
        model=model,
        objective=CrossEncoderObjective(),
        collate=GroupCollator(model),
        export=export,
        evaluate=RerankEvaluator(),
        retrieval_view=lambda trained: trained,
    )
