"""Cross-encoder re-ranker training: each query with its positive and its negatives, scored by BCE.

A training row is one group: a query, its positive document and its negatives,
chosen once on the driver (`prepare_data`: the pairs' own hard negatives first, then
random documents or ones mined with a bi-encoder). The collator expands a group into
1 + k (query, document) sequences labelled 1, 0, ..., 0.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lmplatform.config.schema import RunConfig
from lmplatform.data.corpus import TRAIN, VALIDATION
from lmplatform.data.pairs import Pair, pair_datasets, read_pairs
from lmplatform.models.cross_encoder import CrossEncoder
from lmplatform.objectives.biencoder.objective import prepared_pairs
from lmplatform.train.recipe import Batch, PreparedData, TrainingRecipe, WeightedMetrics

_NOT_FEATURES = ("labels", "group_ids")


class GroupCollator:
    """Groups {query, document, negatives} -> tokenised pairs with `labels` and `group_ids`."""

    def __init__(self, model: CrossEncoder):
        self.model = model

    def __call__(self, batch: dict[str, np.ndarray]) -> Batch:
        queries: list[str] = []
        documents: list[str] = []
        labels: list[float] = []
        groups: list[int] = []
        for index, (query, positive, negatives) in enumerate(zip(batch["query"], batch["document"], batch["negatives"])):
            for document, label in [(positive, 1.0)] + [(n, 0.0) for n in list(negatives)]:
                queries.append(str(query))
                documents.append(str(document))
                labels.append(label)
                groups.append(index)
        features = dict(self.model.tokenize(queries, documents))
        return features | {"labels": torch.tensor(labels), "group_ids": torch.tensor(groups)}


def logits_of(model: CrossEncoder, batch: Batch) -> torch.Tensor:
    return model(**{k: v for k, v in batch.items() if k not in _NOT_FEATURES})


class CrossEncoderObjective(nn.Module):
    def forward(self, model: CrossEncoder, batch: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        logits = logits_of(model, batch).float()
        loss = F.binary_cross_entropy_with_logits(logits, batch["labels"])
        # detached 0-dim tensors: the loop reads them at logging time, not every micro-step
        accuracy = ((logits.detach() > 0).float() == batch["labels"]).float().mean()
        return loss, {"bce_loss": loss.detach(), "accuracy": accuracy}


class RerankEvaluator:
    """BCE and accuracy per pair; per group (the query's positive and its drawn negatives) the share of
    negatives the positive outscores and its reciprocal rank, ties against it: in-batch diagnostics.
    The caller sets eval and inference mode and places the batches (the training loop does)."""

    def __call__(self, model: CrossEncoder, batches: Iterable[Batch], rank: int = 0) -> WeightedMetrics:
        bce = correct = pairs = wins = comparisons = reciprocal = groups = 0.0
        for batch in batches:
            logits = logits_of(model, batch).float()
            labels, group_ids = batch["labels"], batch["group_ids"]
            bce += float(F.binary_cross_entropy_with_logits(logits, labels, reduction="sum"))
            correct += float(((logits > 0).float() == labels).sum())
            pairs += len(labels)
            for group in group_ids.unique():
                members = group_ids == group
                scores, is_positive = logits[members], labels[members] > 0.5
                positive = scores[is_positive].max()
                negatives = scores[~is_positive]
                wins += float((positive > negatives).sum())
                comparisons += len(negatives)
                reciprocal += 1.0 / (1.0 + float((negatives >= positive).sum()))
                groups += 1
        return {
            "bce_loss": (bce, pairs),
            "accuracy": (correct, pairs),
            "inbatch_pairwise_accuracy": (wins, comparisons),
            "inbatch_mrr": (reciprocal, groups),
        }


# -- negatives, chosen once on the driver ------------------------------------

def _positives_by_query(pairs: Sequence[Pair]) -> dict[str, set[str]]:
    positives: dict[str, set[str]] = {}
    for pair in pairs:
        positives.setdefault(pair.query, set()).add(pair.document)
    return positives


def mine_candidates(pairs: Sequence[Pair], documents: list[str], miner_model: str, top_k: int) -> list[list[int]]:
    """Per pair, the indices of the top_k + (its positives) documents under the bi-encoder, best first."""
    from lmplatform.models.encoder import Encoder
    from lmplatform.retrieval.faiss_import import exact_search

    encoder = Encoder.from_pretrained(miner_model)
    queries = sorted({p.query for p in pairs})
    document_vectors = encoder.encode(documents, show_progress=len(documents) > 1000)
    positives = _positives_by_query(pairs)
    depth = min(len(documents), top_k + max(len(v) for v in positives.values()))
    _, found = exact_search(encoder.encode(queries, show_progress=len(queries) > 1000), document_vectors, depth)
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


def negative_groups(pairs: Sequence[Pair], negatives: list[list[str]]) -> list[dict[str, Any]]:
    """Training rows of the cross-encoder: each pair with its negatives (a pair that got none is left out)."""
    return [{"query": p.query, "document": p.document, "negatives": n} for p, n in zip(pairs, negatives) if n]


def prepare_data(cfg: RunConfig) -> PreparedData:
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
        rows[split] = negative_groups(split_pairs, negatives)
    summary = (f"\ndata: {objective.negatives} negatives, {objective.negatives_per_positive} per positive"
               + (f"; {short} pair(s) got fewer (too few other documents)" if short else ""))
    return prepared_pairs(pairs, pair_datasets(pairs, rows), len(rows[TRAIN]),
                          {"data/pairs_with_fewer_negatives": float(short)}, summary)


def build_recipe(cfg: RunConfig) -> TrainingRecipe:
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
