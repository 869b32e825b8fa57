"""Cross-encoder re-ranker training: each query with its positive and its negatives, scored by BCE or per group.

A training row is one group: a query, its positive document and its negatives,
chosen once on the driver (`prepare_data`: the pairs' own hard negatives first, then
random documents or ones mined with a bi-encoder; never a text of the query's duplicate
group). The collator expands a group into 1 + k (query, document) sequences labelled
1, 0, ..., 0; `loss` scores them one by one (`bce`) or as a list (`listwise`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lmplatform.data.corpus import TRAIN, VALIDATION
from lmplatform.data.groups import group_texts
from lmplatform.data.pairs import Pair, PairSet, pair_datasets, read_pairs
from lmplatform.models.cross_encoder import CrossEncoder
from lmplatform.models.encoder import Encoder
from lmplatform.objectives.pair_data import prepared_pairs
from lmplatform.objectives.run_config import RunConfig
from lmplatform.retrieval.faiss_import import exact_search
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


def listwise_softmax_loss(logits: torch.Tensor, labels: torch.Tensor, group_ids: torch.Tensor,
                          reduction: str = "mean") -> torch.Tensor:
    """Softmax cross-entropy of each group's positive among its group (FlagEmbedding's reranker loss).

    logits [n] relevance logits s_i; labels [n] 1 for the one positive of its group, 0 otherwise;
    group_ids [n] the group of each sequence (any integers; members need not be adjacent). Per group g
    with positive p:  l_g = log sum_{i in g} exp(s_i) - s_p  (>= 0; 0 only when the positive takes all
    the mass). Returns the mean over groups (reduction 'mean') or the sum ('sum'), a 0-dim tensor.
    Unlike BCE it only asks the positive to outscore its own negatives, not to cross a fixed threshold.
    """
    _, group = torch.unique(group_ids, return_inverse=True)
    count = int(group.max()) + 1 if len(group) else 0
    top = torch.full((count,), float("-inf"), dtype=logits.dtype, device=logits.device)
    top = top.scatter_reduce(0, group, logits.detach(), reduce="amax")  # per-group max, for a stable logsumexp
    mass = torch.zeros(count, dtype=logits.dtype, device=logits.device).index_add(0, group, torch.exp(logits - top[group]))
    positive = torch.zeros(count, dtype=logits.dtype, device=logits.device).index_add(0, group, logits * labels)
    per_group = torch.log(mass) + top - positive
    return per_group.mean() if reduction == "mean" else per_group.sum()


class CrossEncoderObjective(nn.Module):
    """`loss` 'bce' (pointwise) or 'listwise' (`listwise_softmax_loss` per group)."""

    def __init__(self, loss: str = "bce"):
        super().__init__()
        self.loss = loss

    def forward(self, model: CrossEncoder, batch: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        logits = logits_of(model, batch).float()
        labels = batch["labels"]
        # detached 0-dim tensors: the loop reads them at logging time, not every micro-step
        if self.loss == "listwise":
            loss = listwise_softmax_loss(logits, labels, batch["group_ids"])
            return loss, {"listwise_loss": loss.detach()}
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        # logit > 0 means "relevant" only for a BCE-trained model: a listwise one's logits have no fixed threshold
        accuracy = ((logits.detach() > 0).float() == labels).float().mean()
        return loss, {"bce_loss": loss.detach(), "accuracy": accuracy}


class RerankEvaluator:
    """BCE and accuracy per pair; per group (the query's positive and its drawn negatives) the listwise loss,
    the share of negatives the positive outscores and its reciprocal rank, ties against it: in-batch
    diagnostics, whichever loss trains. The caller sets eval and inference mode and places the batches
    (the training loop does)."""

    def __call__(self, model: CrossEncoder, batches: Iterable[Batch], rank: int = 0) -> WeightedMetrics:
        bce = listwise = correct = pairs = wins = comparisons = reciprocal = groups = 0.0
        for batch in batches:
            logits = logits_of(model, batch).float()
            labels, group_ids = batch["labels"], batch["group_ids"]
            bce += float(F.binary_cross_entropy_with_logits(logits, labels, reduction="sum"))
            listwise += float(listwise_softmax_loss(logits, labels, group_ids, reduction="sum"))
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
            "listwise_loss": (listwise, groups),
            "inbatch_pairwise_accuracy": (wins, comparisons),
            "inbatch_mrr": (reciprocal, groups),
        }


# -- negatives, chosen once on the driver ------------------------------------

def mine_candidates(pairs: Sequence[Pair], documents: list[str], miner_model: str, top_k: int) -> list[list[int]]:
    """Per pair, the indices of the top_k + (its duplicate group's size) documents under the bi-encoder, best first."""
    encoder = Encoder.from_pretrained(miner_model)
    queries = sorted({p.query for p in pairs})
    document_vectors = encoder.encode(documents, show_progress=len(documents) > 1000)
    depth = min(len(documents), top_k + max(len(group) for group in group_texts(pairs)))
    _, found = exact_search(encoder.encode(queries, show_progress=len(queries) > 1000), document_vectors, depth)
    ranked = dict(zip(queries, found.tolist()))
    return [ranked[p.query] for p in pairs]


def choose_negatives(
    pairs: Sequence[Pair], k: int, rng: np.random.Generator, use_hard_negatives: bool = True,
    mined: Optional[list[list[int]]] = None, documents: Optional[list[str]] = None, top_k: int = 10,
) -> list[list[str]]:
    """k negatives per pair: its own hard negatives first, then mined (top_k non-positives) or random documents.

    No text of the pair's duplicate group (`data.group_field`, or the texts linked through the pairs) is ever a
    negative: another duplicate of the query is a positive that no pair happens to name.
    """
    documents = documents if documents is not None else sorted({p.document for p in pairs})
    out = []
    for index, (pair, own) in enumerate(zip(pairs, group_texts(pairs))):
        chosen = [n for n in pair.hard_negatives if n not in own][:k] if use_hard_negatives else []
        if mined is not None:
            pool = [documents[i] for i in mined[index]
                    if i >= 0 and documents[i] not in own and documents[i] not in chosen][:top_k]
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


def group_rows(cfg: RunConfig, pairs: PairSet) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """({split: `negative_groups` rows} of the splits that have pairs, how many pairs got fewer negatives than asked)."""
    objective = cfg.objective
    rng = np.random.default_rng(objective.seed)
    groups: dict[str, list[dict[str, Any]]] = {}
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
        groups[split] = negative_groups(split_pairs, negatives)
    return groups, short


def rows(cfg: RunConfig) -> dict[str, list[dict[str, Any]]]:
    """The groups (a pair and its negatives) per split, made in this process."""
    groups, _ = group_rows(cfg, read_pairs(cfg.data))
    return {split: groups.get(split, []) for split in (TRAIN, VALIDATION)}


def prepare_data(cfg: RunConfig) -> PreparedData:
    objective = cfg.objective
    pairs = read_pairs(cfg.data)
    groups, short = group_rows(cfg, pairs)
    summary = (f"\ndata: {objective.negatives} negatives, {objective.negatives_per_positive} per positive"
               + (f"; {short} pair(s) got fewer (too few other documents)" if short else ""))
    return prepared_pairs(pairs, pair_datasets(pairs, groups), len(groups[TRAIN]),
                          {"data/pairs_with_fewer_negatives": float(short)}, summary)


def build_recipe(cfg: RunConfig) -> TrainingRecipe:
    model = CrossEncoder.from_pretrained(cfg.model.name_or_path, max_seq_length=cfg.model.max_seq_length)

    def export(trained: CrossEncoder, folder: Path) -> None:
        trained.save_pretrained(folder)

    return TrainingRecipe(
        model=model,
        objective=CrossEncoderObjective(cfg.objective.loss),
        collate=GroupCollator(model),
        export=export,
        evaluate=RerankEvaluator(),
        retrieval_view=lambda trained: trained,
        learning_rates={name: cfg.objective.head_lr for name in model.head_parameter_names()} if cfg.objective.head_lr else {},
    )
