"""Graph contrastive learning of relation structure in token embeddings (CLGS, CLDR, CLNER).

- CLGS (eq. 4): the pooled sentence embedding must pick its relation graph (GCN + tanh over the frozen
  encoder's entity vectors, mean/max pooled) among its hard-negative graphs (and, optionally, the other
  sentences' graphs in the batch).
- CLDR (eq. 5, summed over a sentence's relations): the concatenated token pair of a relation from the
  trained encoder must pick the relation's 2-node graph (adjacency [[λ, 1-λ], [1-λ, λ]], ReLU) over the
  graphs of its hard negatives; symmetrically the graph must pick its own pair over the negative pairs,
  which is what pushes negative token pairs away in the space the KNN later reads.
- CLNER (eq. 6): supervised contrastive loss over a tag-balanced sample of words in the batch.

Node features of the graphs come from a frozen copy of the pretrained encoder; only the text encoder
(above its first `frozen_layers`), the GCN and the optional projection learn. The driver reads the
ADE sentences (`prepare_data`); each worker builds the recipe (`build_recipe`).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable, Literal, Optional

import torch
import torch.nn.functional as F
from torch import nn

from lmplatform.config.loader import ConfigError
from lmplatform.data.readers import DataError
from lmplatform.graph.batch import GraphCollator, gather_nodes
from lmplatform.graph.data import AdeReport, Sentence, read_ade, read_folds, split_fold
from lmplatform.graph.gcn import GCNLayer, edge_adjacency, normalized_adjacency, pair_adjacency
from lmplatform.models.encoder import Encoder
from lmplatform.models.pooling import pool
from lmplatform.models.quiet import quiet_transformers
from lmplatform.models.resolve import resolve_model_path
from lmplatform.objectives.run_config import RunConfig
from lmplatform.train.recipe import PreparedData, TrainingRecipe

Variant = Literal["clgs", "cldr", "clner"]
HEAD_FILE = "graph_cl_head.pt"
HEAD_CONFIG = "graph_cl_head.json"


def candidate_info_nce(anchors: torch.Tensor, candidates: torch.Tensor, valid: torch.Tensor, temperature: float) -> torch.Tensor:
    """InfoNCE of each anchor against its own candidate list, the positive first; per anchor, not averaged.

    loss_i = -log( exp(cos(a_i, c_i0) / τ) / Σ_{j valid} exp(cos(a_i, c_ij) / τ) )

    anchors [n, d], candidates [n, c, d], valid [n, c] (column 0 must be True) -> [n].
    Unlike `objectives.infonce.info_nce` (every other key of the batch is a negative), each anchor
    here has explicit candidates: its hard-negative graphs or pairs.
    """
    sims = F.cosine_similarity(anchors.unsqueeze(1), candidates, dim=-1) / temperature
    sims = sims.masked_fill(~valid, float("-inf"))
    return -F.log_softmax(sims, dim=1)[:, 0]


def supervised_contrastive(vectors: torch.Tensor, labels: torch.Tensor, temperature: float) -> torch.Tensor:
    """Khosla et al. (2020) L_out over L2-normalised vectors; anchors without a positive are left out."""
    z = F.normalize(vectors, dim=-1)
    sims = z @ z.T / temperature
    n = len(labels)
    self_mask = torch.eye(n, dtype=torch.bool, device=z.device)
    log_prob = sims.masked_fill(self_mask, float("-inf")).log_softmax(dim=1)
    positives = (labels.unsqueeze(0) == labels.unsqueeze(1)) & ~self_mask
    counts = positives.sum(1)
    has = counts > 0
    if not bool(has.any()):
        return vectors.sum() * 0.0
    per_anchor = -(log_prob.masked_fill(~positives, 0.0).sum(1)[has] / counts[has])
    return per_anchor.mean()


def freeze_lower_layers(backbone: nn.Module, frozen_layers: int) -> int:
    """Freeze the embeddings and the first `frozen_layers` transformer layers; returns the layer count."""
    layers = _transformer_layers(backbone)
    if frozen_layers > len(layers):
        raise ValueError(f"objective.frozen_layers={frozen_layers} but the encoder has {len(layers)} layers")
    if frozen_layers > 0:
        embeddings = getattr(backbone, "embeddings", None)
        for module in [embeddings, *layers[:frozen_layers]]:
            if module is not None:
                for param in module.parameters():
                    param.requires_grad_(False)
    return len(layers)


def _transformer_layers(backbone: nn.Module) -> nn.ModuleList:
    count = getattr(backbone.config, "num_hidden_layers", None)
    for module in backbone.modules():
        if isinstance(module, nn.ModuleList) and len(module) == count:
            return module
    raise ValueError(f"cannot find the {count} transformer layers of {type(backbone).__name__}")


class GraphHead(nn.Module):
    """The learned graph side: one GCN layer and an optional projection of the text side."""

    def __init__(self, dim: int, variant: Variant, projection: bool, graph_pooling: str, pair_self_weight: float):
        super().__init__()
        self.variant = variant
        self.graph_pooling = graph_pooling
        self.pair_self_weight = pair_self_weight
        self.gcn = GCNLayer(dim, dim, activation=torch.relu if variant == "cldr" else torch.tanh)
        width = 2 * dim if variant == "cldr" else dim
        self.projection = nn.Linear(width, width) if projection else None
        self.settings = {"dim": dim, "variant": variant, "projection": projection, "graph_pooling": graph_pooling,
                         "pair_self_weight": pair_self_weight}

    def project(self, text: torch.Tensor) -> torch.Tensor:
        return self.projection(text) if self.projection is not None else text

    def sentence_graph(self, features: torch.Tensor, edges: list[tuple[int, int]]) -> torch.Tensor:
        """Pooled GCN output of one graph given by node-table edges; features [nodes, d]."""
        ids = sorted({n for edge in edges for n in edge})
        local = {n: i for i, n in enumerate(ids)}
        adjacency = normalized_adjacency(edge_adjacency(len(ids), [(local[a], local[b]) for a, b in edges], features.device))
        out = self.gcn(adjacency, features[ids])
        return out.mean(0) if self.graph_pooling == "mean" else out.max(0).values

    def relation_graphs(self, pairs: torch.Tensor) -> torch.Tensor:
        """[..., 2, d] node pairs -> [..., 2d] concatenated outputs of the 2-node CLDR graph."""
        out = self.gcn(pair_adjacency(self.pair_self_weight, pairs.device).to(pairs.dtype), pairs)
        return out.flatten(-2)

    def save(self, folder: Path) -> None:
        torch.save(self.state_dict(), folder / HEAD_FILE)
        (folder / HEAD_CONFIG).write_text(json.dumps(self.settings, indent=2))

    @classmethod
    def load(cls, folder: str | Path) -> Optional["GraphHead"]:
        folder = Path(folder)
        if not (folder / HEAD_FILE).is_file():
            return None
        head = cls(**json.loads((folder / HEAD_CONFIG).read_text()))
        head.load_state_dict(torch.load(folder / HEAD_FILE, map_location="cpu"))
        return head


class GraphContrastiveObjective(nn.Module):
    def __init__(
        self,
        node_encoder: nn.Module,
        head: GraphHead,
        temperature: float = 0.1,
        sentence_pooling: str = "mean",
        in_batch_negatives: bool = True,
    ):
        super().__init__()
        self.node_encoder = node_encoder.eval()
        for param in self.node_encoder.parameters():
            param.requires_grad_(False)
        self.head = head
        self.temperature = temperature
        self.sentence_pooling = sentence_pooling
        self.in_batch_negatives = in_batch_negatives

    @property
    def variant(self) -> Variant:
        return self.head.variant  # type: ignore[return-value]

    def train(self, mode: bool = True) -> "GraphContrastiveObjective":
        super().train(mode)
        self.node_encoder.eval()  # frozen features: no dropout
        return self

    def node_features(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            hidden = self.node_encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
            return gather_nodes(hidden, batch["node_index"], batch["node_weight"])

    def forward(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, Any]]:
        loss, correct, scored, _ = self.scores(model, batch)
        metrics: dict[str, Any] = {f"{self.variant}_loss": loss.detach()}  # read by the loop at logging time
        if scored:  # a host count (see `_positive_beats_hard`), so no read here
            metrics[f"{self.variant}_accuracy"] = correct / scored
        return loss, metrics

    def scores(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Any, int, int]:
        """(loss, anchors whose positive won (a 0-dim tensor or 0.0), anchors scored, anchors left unscored).

        An anchor none of whose hard negatives is valid has nothing to be told apart from: counting it
        as identified would inflate the accuracy (its positive beats an empty set), and counting it as
        wrong would blame the encoder for the sampler. It is left out of the accuracy and counted.
        """
        tokens = model.token_embeddings(batch["input_ids"], batch["attention_mask"])
        if self.variant == "clner":
            words = self.head.project(gather_nodes(tokens, batch["word_index"], batch["word_weight"]))
            return supervised_contrastive(words, batch["word_label"], self.temperature), 0.0, 0, 0
        if len(batch["rel_nodes"]) == 0:
            return tokens.sum() * 0.0, 0.0, 0, 0
        features = self.node_features(batch)
        if self.variant == "clgs":
            return self._clgs(tokens, batch, features)
        return self._cldr(tokens, batch, features)

    def _clgs(self, tokens: torch.Tensor, batch: dict[str, torch.Tensor],
              features: torch.Tensor) -> tuple[torch.Tensor, float, int, int]:
        rel_sentence = batch["rel_sentence"]
        sentences = sorted(set(rel_sentence.tolist()))
        z = batch["neg_nodes"].shape[1]
        positives, negatives, neg_valid = [], [], []
        for b in sentences:
            rows = (rel_sentence == b).nonzero().flatten()
            positives.append(self.head.sentence_graph(features, [tuple(e) for e in batch["rel_nodes"][rows].tolist()]))
            for k in range(z):
                edges = [tuple(e) for e in batch["neg_nodes"][rows, k].tolist()]
                negatives.append(self.head.sentence_graph(features, edges))
                neg_valid.append(bool(batch["neg_valid"][rows, k].any()))
        graphs = torch.stack(positives)  # [S, d]
        hard = torch.stack(negatives).reshape(len(sentences), z, -1)
        valid_hard = torch.tensor(neg_valid, device=graphs.device).reshape(len(sentences), z)
        text = self.head.project(pool(tokens, batch["attention_mask"], self.sentence_pooling))[sentences]
        candidates = [graphs.unsqueeze(1), hard]
        valid = [torch.ones(len(sentences), 1, dtype=torch.bool, device=graphs.device), valid_hard]
        if self.in_batch_negatives and len(sentences) > 1:
            others = ~torch.eye(len(sentences), dtype=torch.bool, device=graphs.device)
            index = (torch.arange(len(sentences), device=graphs.device).repeat(len(sentences), 1)[others]
                     .reshape(len(sentences), -1))
            candidates.append(graphs[index])
            valid.append(torch.ones_like(index, dtype=torch.bool))
        losses = candidate_info_nce(text, torch.cat(candidates, 1), torch.cat(valid, 1), self.temperature)
        correct, scored = _positive_beats_hard(text, graphs, hard, valid_hard)
        return losses.mean(), correct, scored, len(sentences) - scored

    def _cldr(self, tokens: torch.Tensor, batch: dict[str, torch.Tensor],
              features: torch.Tensor) -> tuple[torch.Tensor, float, int, int]:
        text_nodes = gather_nodes(tokens, batch["node_index"], batch["node_weight"])
        rel, neg, valid_hard = batch["rel_nodes"], batch["neg_nodes"], batch["neg_valid"]
        graph_pos = self.head.relation_graphs(features[rel])  # [R, 2d]
        graph_neg = self.head.relation_graphs(features[neg])  # [R, Z, 2d]
        text_pos = self.head.project(text_nodes[rel].flatten(-2))
        text_neg = self.head.project(text_nodes[neg].flatten(-2))
        always = torch.ones(len(rel), 1, dtype=torch.bool, device=rel.device)
        valid = torch.cat([always, valid_hard], 1)
        # text -> graphs and graph -> texts, each with the same hard negatives
        to_graph = candidate_info_nce(text_pos, torch.cat([graph_pos.unsqueeze(1), graph_neg], 1), valid, self.temperature)
        to_text = candidate_info_nce(graph_pos, torch.cat([text_pos.unsqueeze(1), text_neg], 1), valid, self.temperature)
        per_relation = to_graph + to_text
        sentences = int(batch["rel_sentence"].unique().numel())
        loss = per_relation.sum() / max(sentences, 1)  # eq. 5: summed over a sentence's relations
        correct, scored = _positive_beats_hard(text_pos, graph_pos, graph_neg, valid_hard)
        return loss, correct, scored, len(rel) - scored


def _positive_beats_hard(anchor: torch.Tensor, positive: torch.Tensor, hard: torch.Tensor,
                         valid: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(anchors whose positive beats every valid hard negative: a 0-dim float tensor, left unread; anchors with
    at least one valid hard negative: an int).

    The scored count is read from the device (a sync per training micro-step), on purpose: a batch with no
    scorable anchor reports no accuracy, rather than a 0 that would pull the window's mean down. graph_cl's
    forward reads the batch anyway (clgs: its sentences, cldr: its sentence count), so this read adds little.
    """
    with torch.no_grad():
        pos = F.cosine_similarity(anchor, positive, dim=-1)
        neg = F.cosine_similarity(anchor.unsqueeze(1), hard, dim=-1).masked_fill(~valid, float("-inf"))
        scorable = valid.any(1)
        return ((pos > neg.max(1).values) & scorable).sum().float(), int(scorable.sum())


class GraphContrastiveEvaluator:
    """Validation loss, identification accuracy (positive beats every valid hard negative, over the anchors that
    have one) and the share of anchors left unscored for want of a valid negative, as weighted sums.
    The caller sets eval and inference mode and places the batches (the training loop does)."""

    def __init__(self, objective: GraphContrastiveObjective):
        self.objective = objective

    def __call__(self, model: nn.Module, batches: Iterable[dict[str, torch.Tensor]], rank: int) -> dict[str, tuple[float, float]]:
        variant = self.objective.variant
        loss_sum = loss_n = correct = scored = unscored = 0.0
        for batch in batches:
            loss, right, n, left_out = self.objective.scores(model, batch)
            loss_sum += float(loss)
            loss_n += 1
            correct += float(right)
            scored += n
            unscored += left_out
        out = {f"{variant}_loss": (loss_sum, loss_n)}
        if scored:
            out[f"{variant}_accuracy"] = (correct, scored)
        if scored + unscored:
            out[f"{variant}_unscored_share"] = (unscored, scored + unscored)
        return out


# -- wiring: ADE sentences on the driver, the recipe on the worker --------------

def _in_validation(sentence_id: str, fraction: float, seed: int) -> bool:
    digest = hashlib.sha1(f"{seed}:{sentence_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def load_sentences(cfg: RunConfig) -> tuple[list[Sentence], list[Sentence], AdeReport]:
    """(train, validation, report) honouring folds, explicit validation files or a stable hash split."""
    objective, data = cfg.objective, cfg.data
    sentences, report = read_ade(data.train_paths, data.on_bad_row, data.max_documents)
    if objective.folds_file is not None:
        sentences, _ = split_fold(sentences, read_folds(objective.folds_file), objective.fold)
    if data.validation_paths:
        validation, extra = read_ade(data.validation_paths, data.on_bad_row)
        report.bad_rows += extra.bad_rows
        report.bad_examples += extra.bad_examples
        return sentences, validation, report
    validation = [s for s in sentences if _in_validation(s.id, data.validation_fraction, data.seed)]
    train = [s for s in sentences if not _in_validation(s.id, data.validation_fraction, data.seed)]
    return train, validation, report


def sentence_rows(sentences: list[Sentence]) -> list[dict[str, Any]]:
    return [{"sentence": s.to_json()} for s in sentences]


def rows(cfg: RunConfig) -> dict[str, list[dict[str, Any]]]:
    """The sentences per split, read in this process."""
    train, validation, _ = load_sentences(cfg)
    return {"train": sentence_rows(train), "validation": sentence_rows(validation)}


def prepare_data(cfg: RunConfig) -> PreparedData:
    import ray.data

    train, validation, report = load_sentences(cfg)
    if not train:
        raise DataError("no training sentences left after the fold and validation split")
    _check_frozen_layers(cfg)
    datasets = {"train": ray.data.from_items(sentence_rows(train))}
    if validation:
        datasets["validation"] = ray.data.from_items(sentence_rows(validation))
    fingerprint = hashlib.sha1("\n".join(s.id for s in train).encode()).hexdigest()[:16]
    metrics = report.metrics() | {"data/train_sentences": len(train), "data/validation_sentences": len(validation)}
    return PreparedData(
        datasets=datasets,
        train_examples=len(train),
        metrics=metrics,
        summary=f"{report.summary()}; train {len(train)}, validation {len(validation)}",
        fingerprint=fingerprint,
        report=report.__dict__,
    )


def _check_frozen_layers(cfg: RunConfig) -> None:
    """Fail on the driver, before any worker starts, when frozen_layers exceeds the model's depth."""
    from transformers import AutoConfig

    frozen = cfg.objective.frozen_layers
    if frozen is None:
        return
    layers = AutoConfig.from_pretrained(str(resolve_model_path(cfg.model.name_or_path))).num_hidden_layers
    if frozen > layers:
        raise ConfigError(f"objective.frozen_layers={frozen}: the model has {layers} layers (allowed 0..{layers})")


def build_recipe(cfg: RunConfig) -> TrainingRecipe:
    from transformers import AutoModel

    objective_cfg = cfg.objective
    path = resolve_model_path(cfg.model.name_or_path)
    with quiet_transformers():  # an MLM checkpoint loads into AutoModel
        encoder = Encoder.from_pretrained(path, pooling=cfg.model.pooling, max_seq_length=cfg.model.max_seq_length)
        node_encoder = AutoModel.from_pretrained(str(path))
    layers = encoder.backbone.config.num_hidden_layers
    frozen = layers // 2 if objective_cfg.frozen_layers is None else objective_cfg.frozen_layers
    freeze_lower_layers(encoder.backbone, frozen)
    head = GraphHead(encoder.dim, objective_cfg.variant, objective_cfg.projection, objective_cfg.graph_pooling,
                     objective_cfg.pair_self_weight)
    objective = GraphContrastiveObjective(
        node_encoder,
        head,
        temperature=objective_cfg.temperature,
        sentence_pooling=objective_cfg.sentence_pooling,
        in_batch_negatives=objective_cfg.in_batch_negatives,
    )
    collate = GraphCollator(
        encoder.tokenizer,
        cfg.model.max_seq_length,
        negatives_per_sentence=objective_cfg.negatives_per_sentence,
        entity_pooling=objective_cfg.entity_pooling,
        word_pooling=objective_cfg.word_pooling,
        samples_per_tag=objective_cfg.samples_per_tag,
        with_words=objective_cfg.variant == "clner",
    )

    def export(trained: Encoder, folder: Path) -> None:
        trained.save_pretrained(folder)
        objective.head.save(Path(folder))  # the GCN is needed to score graph identification later

    return TrainingRecipe(
        model=encoder,
        objective=objective,
        collate=collate,
        export=export,
        evaluate=GraphContrastiveEvaluator(objective),
    )
