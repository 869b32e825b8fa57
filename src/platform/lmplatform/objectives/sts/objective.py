"""STS fine-tuning: CoSENT or cosine-MSE over scored sentence pairs, Spearman on validation.

Spearman is a rank statistic and does not reduce by sums, so the evaluator
all-gathers every worker's (cosine, gold) lists with `torch.distributed`, each
worker computes the global Spearman, and returns it weighted by its local pair
count: the weighted reduction then gives back exactly the global value.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lmplatform.data.fields import scored_pair
from lmplatform.data.labelled import LabelledData, labelled_datasets, labelled_rows, read_labelled
from lmplatform.metrics.sts import pearson, spearman
from lmplatform.models.encoder import Encoder
from lmplatform.objectives.run_config import RunConfig
from lmplatform.train import distributed as D
from lmplatform.train.collate import TextCollator
from lmplatform.train.recipe import PreparedData, TrainingRecipe

_SIDES = ("a", "b")


def cosent_loss(cosines: torch.Tensor, gold: torch.Tensor, scale: float = 20.0) -> torch.Tensor:
    """log(1 + sum over (i, j) with gold_i > gold_j of exp(scale * (cos_j - cos_i)))."""
    diff = scale * (cosines[None, :] - cosines[:, None])  # [i, j] = scale * (cos_j - cos_i)
    ordered = gold[:, None] > gold[None, :]
    terms = diff[ordered]
    return torch.logsumexp(torch.cat([terms.new_zeros(1), terms]), dim=0)


def cosine_mse_loss(cosines: torch.Tensor, gold: torch.Tensor, scale: tuple[float, float]) -> torch.Tensor:
    target = (gold - scale[0]) / (scale[1] - scale[0])
    return F.mse_loss(cosines, target)


def pair_cosines(model: Encoder, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    a = model(batch["input_ids_a"], batch["attention_mask_a"])
    b = model(batch["input_ids_b"], batch["attention_mask_b"])
    return F.cosine_similarity(a, b, dim=-1)


class STSObjective(nn.Module):
    def __init__(self, loss: str = "cosent", cosent_scale: float = 20.0, scale: tuple[float, float] = (0.0, 5.0)):
        super().__init__()
        if loss not in ("cosent", "cosine_mse"):
            raise ValueError(f"unknown STS loss {loss!r}; allowed: cosent, cosine_mse")
        self.loss, self.cosent_scale, self.scale = loss, cosent_scale, scale

    def forward(self, model: Encoder, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        cosines = pair_cosines(model, batch)
        gold = batch["scores"].to(cosines.dtype)
        if self.loss == "cosent":
            loss = cosent_loss(cosines, gold, self.cosent_scale)
        else:
            loss = cosine_mse_loss(cosines, gold, self.scale)
        return loss, {"mean_cosine": cosines.detach().mean()}  # read by the loop at logging time


class STSEvaluator:
    """Spearman and Pearson of cosine vs gold over the whole validation split (all workers).
    The caller sets eval and inference mode and places the batches (the training loop does)."""

    def __call__(self, model: Encoder, batches: Iterable[dict[str, torch.Tensor]],
                 rank: int = 0) -> dict[str, tuple[float, float]]:
        cos: list[float] = []
        gold: list[float] = []
        for batch in batches:
            cos.extend(pair_cosines(model, batch).float().cpu().tolist())
            gold.extend(batch["scores"].float().cpu().tolist())
        all_cos, all_gold = _gather(cos), _gather(gold)
        if len(all_cos) < 2:
            return {}
        weight = float(len(cos))
        return {
            "spearman": (spearman(all_cos, all_gold) * weight, weight),
            "pearson": (pearson(all_cos, all_gold) * weight, weight),
        }


def _gather(values: list[float]) -> list[float]:
    if not D.is_distributed():
        return values
    import torch.distributed as dist

    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, values)
    return [v for part in parts for v in part]


class ScoredPairCollator:
    """Scored sentence pairs -> input_ids_a/attention_mask_a, input_ids_b/attention_mask_b and `scores`."""

    def __init__(self, tokenizer: Any, max_length: int):
        self.text = TextCollator(tokenizer, max_length)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for side, column in zip(_SIDES, ("sentence1", "sentence2")):
            features = self.text.encode([str(t) for t in batch[column]])
            out[f"input_ids_{side}"] = features["input_ids"]
            out[f"attention_mask_{side}"] = features["attention_mask"]
        out["scores"] = torch.as_tensor(np.asarray(batch["score"], dtype=np.float32))
        return out


def read_sts_data(cfg: RunConfig) -> LabelledData:
    """Scored pairs of the run's files; rows without both texts or with a score off the scale are bad rows."""
    objective = cfg.objective

    def extract(fields: dict[str, Any]) -> Union[dict[str, Any], str]:
        pair = scored_pair(fields, objective.sentence1_field, objective.sentence2_field, objective.score_field,
                           tuple(objective.scale), cfg.data.clean)
        if isinstance(pair, str):
            return pair
        sentence1, sentence2, score = pair
        return {"sentence1": sentence1, "sentence2": sentence2, "score": score, "text": sentence1 + "\n" + sentence2}

    return read_labelled(cfg.data, extract, objective.split_field)


COLUMNS = ["sentence1", "sentence2", "score"]


def rows(cfg: RunConfig) -> dict[str, list[dict[str, Any]]]:
    """The scored pairs per split, read in this process."""
    return labelled_rows(read_sts_data(cfg), COLUMNS)


def prepare_data(cfg: RunConfig) -> PreparedData:
    data = read_sts_data(cfg)
    return PreparedData(
        datasets=labelled_datasets(data, COLUMNS),
        train_examples=len(data.train),
        metrics=data.metrics(),
        summary=data.summary(),
        fingerprint=data.fingerprint,
        report=data.report(),
    )


def build_recipe(cfg: RunConfig) -> TrainingRecipe:
    objective = cfg.objective
    encoder = Encoder.from_pretrained(cfg.model.name_or_path, pooling=cfg.model.pooling, max_seq_length=cfg.model.max_seq_length)

    def export(trained: Encoder, folder: Path) -> None:
        trained.save_pretrained(folder)

    return TrainingRecipe(
        model=encoder,
        objective=STSObjective(objective.loss, objective.cosent_scale, tuple(objective.scale)),
        collate=ScoredPairCollator(encoder.tokenizer, cfg.model.max_seq_length),
        export=export,
        evaluate=STSEvaluator(),
        count_tokens=lambda batch: int(batch["attention_mask_a"].sum() + batch["attention_mask_b"].sum()),
    )
