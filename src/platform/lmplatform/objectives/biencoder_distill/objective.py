"""Cross-encoder -> bi-encoder distillation on (query, positive, hard negatives) rows.

The driver (`prepare_data`) keeps the pairs that have at least `max_hard_negatives` hard negatives and
uses exactly that many of each. A pair with fewer is left out and counted (data/distill_skipped_rows)
rather than padded: every row then has 1 + N candidates, so scores stack into [B, 1 + N] tensors
with no mask to carry through the losses. The teacher cross-encoder scores every (query, candidate)
once, in a Ray task, and its logits are cached on disk (`teacher_scores`); they ride along with each
row as `teacher_scores` (positive first).

On the workers the student, an `Encoder` used with normalised vectors (as `Encoder.encode`, the
indexes and the server use it), scores the same candidates with cos(q, d) / student_temperature and
learns the teacher's margins (`margin_mse`) or its softmax over the candidates (`listwise_kl`).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lmplatform.config.loader import ConfigError
from lmplatform.data.corpus import TRAIN, VALIDATION
from lmplatform.data.pairs import Pair, PairSet, pair_datasets, read_pairs
from lmplatform.data.readers import DataError
from lmplatform.models.cross_encoder import CrossEncoder
from lmplatform.models.encoder import Encoder
from lmplatform.models.resolve import model_version_source, resolve_model_path
from lmplatform.objectives.biencoder.objective import InBatchRetrievalEvaluator, QueryDocumentCollator, embed, pair_encoder_recipe
from lmplatform.objectives.infonce import Temperature, info_nce
from lmplatform.objectives.pair_data import prepared_pairs
from lmplatform.objectives.run_config import RunConfig
from lmplatform.runtime import project_root, resolve_storage_path, resolve_tracking_uri
from lmplatform.train.recipe import Batch, PreparedData, TrainingRecipe, WeightedMetrics

TEACHER_SCORES = "teacher_scores"
STAGE_PREFIX = "stage:"  # as pipeline/config.py's; not imported: that module is the pipeline's, not a run's
_CACHE_FORMAT = 1  # bump when what a cached file holds changes


# -- the losses ----------------------------------------------------------------

def margin_mse(student_pos: torch.Tensor, student_neg: torch.Tensor, teacher_pos: torch.Tensor,
               teacher_neg: torch.Tensor) -> torch.Tensor:
    """MarginMSE (Hofstaetter et al. 2020, sentence-transformers' MarginMSELoss): the student's score
    margins regress onto the teacher's.

        loss = mean over (b, n) of ((s+_b - s-_bn) - (t+_b - t-_bn))^2

    student_pos, teacher_pos: [B]; student_neg, teacher_neg: [B, N]; returns a scalar. Only margins
    count, so a constant added to all of one query's student scores changes nothing.
    """
    student_margin = student_pos[:, None] - student_neg
    teacher_margin = teacher_pos[:, None] - teacher_neg
    return F.mse_loss(student_margin, teacher_margin)


def listwise_kl(student: torch.Tensor, teacher: torch.Tensor, student_temperature: float = 1.0,
                teacher_temperature: float = 1.0) -> torch.Tensor:
    """KL(p_t || p_s) of each query's distributions over its candidates, averaged over queries.

        p_s = softmax(student / student_temperature),  p_t = softmax(teacher / teacher_temperature)  (over dim 1)
        loss = (1/B) sum_b sum_j p_t[b, j] (log p_t[b, j] - log p_s[b, j])

    student, teacher: [B, 1 + N] (the positive first, though the order does not matter); returns a
    scalar, 0 when the distributions match. No temperature-squared factor: student_temperature sets
    the student's scale, it does not soften one shared set of logits.
    """
    log_student = F.log_softmax(student / student_temperature, dim=1)
    log_teacher = F.log_softmax(teacher / teacher_temperature, dim=1)
    return F.kl_div(log_student, log_teacher, log_target=True, reduction="batchmean")


def distillation_loss(loss: str, cosines: torch.Tensor, teacher: torch.Tensor, student_temperature: float,
                      kl_temperature: float) -> torch.Tensor:
    """The configured loss of the student's cosines [B, 1 + N] against the teacher's logits [B, 1 + N]."""
    if loss == "margin_mse":
        student = cosines / student_temperature
        return margin_mse(student[:, 0], student[:, 1:], teacher[:, 0], teacher[:, 1:])
    if loss == "kl":
        return listwise_kl(cosines, teacher, student_temperature, kl_temperature)
    raise ValueError(f"objective.loss {loss!r} is not one of: margin_mse, kl")


def margin_agreement(cosines: torch.Tensor, teacher: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(count, total) of (query, negative) whose positive-minus-negative margin has the teacher's sign:
    the count a 0-dim tensor on the device (unread), the total a shape."""
    student_ahead = cosines.detach()[:, :1] > cosines.detach()[:, 1:]
    teacher_ahead = teacher[:, :1] > teacher[:, 1:]
    return (student_ahead == teacher_ahead).sum(), student_ahead.numel()


# -- the worker side -------------------------------------------------------------

class DistillCollator(QueryDocumentCollator):
    """Rows -> query_*, document_*, negative_* (B x N texts, row by row) and `teacher_scores` [B, 1 + N]."""

    def __call__(self, batch: dict[str, np.ndarray]) -> Batch:
        out = super().__call__(batch)
        out[TEACHER_SCORES] = torch.as_tensor(np.stack([np.asarray(row, dtype=np.float32) for row in batch[TEACHER_SCORES]]))
        return out


def student_embeddings(model: Encoder, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Un-normalised query [B, d], positive [B, d] and negative [B * N, d] vectors."""
    return embed(model, batch, "query"), embed(model, batch, "document"), embed(model, batch, "negative")


def student_cosines(queries: torch.Tensor, positives: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
    """cos(q_b, candidate_bj) [B, 1 + N], the positive first; negatives [B * N, d] are row b's N in order."""
    q = F.normalize(queries.float(), dim=-1)
    candidates = torch.cat([positives[:, None, :], negatives.reshape(len(queries), -1, negatives.shape[-1])], dim=1)
    return torch.einsum("bd,bjd->bj", q, F.normalize(candidates.float(), dim=-1))


class BiencoderDistillObjective(nn.Module):
    """The distillation loss, plus `in_batch_weight` times the bi-encoder's in-batch InfoNCE (hard negatives
    included, gathered across workers) when that weight is above 0."""

    def __init__(self, loss: str, student_temperature: float, kl_temperature: float = 1.0, in_batch_weight: float = 0.0):
        super().__init__()
        if loss not in ("margin_mse", "kl"):
            raise ValueError(f"objective.loss {loss!r} is not one of: margin_mse, kl")
        self.loss = loss
        self.student_temperature = student_temperature
        self.kl_temperature = kl_temperature
        self.in_batch_weight = in_batch_weight

    def forward(self, model: Encoder, batch: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        queries, positives, negatives = student_embeddings(model, batch)
        cosines = student_cosines(queries, positives, negatives)
        teacher = batch[TEACHER_SCORES].float()
        loss = distillation_loss(self.loss, cosines, teacher, self.student_temperature, self.kl_temperature)
        agree, total = margin_agreement(cosines, teacher)
        # detached 0-dim tensors: the loop reads them at logging time, not every micro-step
        metrics = {"distill_loss": loss.detach(), "margin_agreement": agree.float() / max(total, 1)}
        if self.in_batch_weight > 0:
            ranking = info_nce(queries, positives, self.student_temperature, hard_negatives=negatives)
            metrics |= {"ranking_loss": ranking.loss.detach(), "inbatch_accuracy": ranking.accuracy}
            loss = loss + self.in_batch_weight * ranking.loss
        return loss, metrics


class DistillEvaluator:
    """Distillation loss and margin agreement per query on validation rows, plus the bi-encoder's in-batch
    retrieval diagnostics (`InBatchRetrievalEvaluator`) at the student's temperature. The caller sets eval
    and inference mode and places the batches."""

    def __init__(self, objective: BiencoderDistillObjective):
        self.objective = objective
        self.inbatch = InBatchRetrievalEvaluator(Temperature(objective.student_temperature, learnable=False))

    def __call__(self, model: Encoder, batches: Iterable[Batch], rank: int = 0) -> WeightedMetrics:
        sums: dict[str, list[float]] = {"distill_loss": [0.0, 0.0], "margin_agreement": [0.0, 0.0]}
        objective = self.objective
        for batch in batches:
            queries, positives, negatives = student_embeddings(model, batch)
            cosines = student_cosines(queries, positives, negatives)
            teacher = batch[TEACHER_SCORES].float()
            loss = distillation_loss(objective.loss, cosines, teacher, objective.student_temperature, objective.kl_temperature)
            sums["distill_loss"][0] += float(loss) * len(queries)
            sums["distill_loss"][1] += len(queries)
            agree, total = margin_agreement(cosines, teacher)
            sums["margin_agreement"][0] += float(agree)
            sums["margin_agreement"][1] += total
            for name, (value, weight) in self.inbatch(model, [batch], rank).items():
                sums.setdefault(name, [0.0, 0.0])
                sums[name][0] += value
                sums[name][1] += weight
        return {name: (value, weight) for name, (value, weight) in sums.items()}


# -- teacher scores, once on the driver ------------------------------------------

def teacher_reference(reference: str) -> str:
    """The teacher as a Ray task can load it: a local folder made absolute (tasks run in their own
    working directories); a stage:<name> outside a pipeline is refused."""
    if reference.startswith(STAGE_PREFIX):
        raise ConfigError(f"objective.teacher = {reference!r} names a pipeline stage, which only a pipeline resolves "
                          "(it replaces it with that stage's model folder); in a run config name a folder or "
                          "models:/<name>/<version>")
    local = Path(reference).expanduser()
    return str(local.resolve()) if local.is_dir() else reference


def folder_digest(folder: Path) -> str:
    """sha256 of every file's relative name and bytes: the same weights in another folder give the same digest."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def teacher_fingerprint(reference: str) -> str:
    """What identifies the teacher's weights: a registry version's artifact source (a version never changes,
    so nothing is downloaded to name it), else the digest of the model folder's files."""
    if reference.startswith("models:/"):
        from mlflow.tracking import MlflowClient

        return "mlflow:" + model_version_source(MlflowClient(resolve_tracking_uri(None)), reference)
    if reference.startswith("runs:/"):
        return reference

    return "sha256:" + folder_digest(resolve_model_path(reference))


def rows_digest(rows: Sequence[dict[str, Any]]) -> str:
    """sha256 of the scored texts, row by row in order: every data setting that changes them changes it."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(json.dumps([row["query"], row["document"], row["hard_negatives"]], ensure_ascii=False).encode() + b"\n")
    return digest.hexdigest()


def cache_key(teacher: str, texts: str, max_hard_negatives: int, max_seq_length: int) -> str:
    payload = {"format": _CACHE_FORMAT, "teacher": teacher, "texts": texts, "max_hard_negatives": max_hard_negatives,
               "max_seq_length": max_seq_length}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def score_pairs_with_teacher(reference: str, queries: list[str], documents: list[str], max_seq_length: int,
                             batch_size: int, threads: int) -> np.ndarray:
    """The teacher's logits [len(queries)] for aligned (query, document) pairs (the body of the Ray task)."""
    torch.set_num_threads(threads)
    model = CrossEncoder.from_pretrained(reference, max_seq_length=max_seq_length)
    if torch.cuda.is_available():
        model = model.cuda()
    return model.logits(queries, documents, batch_size)


def cache_folder(cfg: RunConfig) -> Path:
    if cfg.objective.teacher_cache_dir:
        return Path(cfg.objective.teacher_cache_dir).expanduser().resolve()
    storage = resolve_storage_path(cfg.checkpoint.storage_path)
    return (project_root() if "://" in storage else Path(storage)) / "teacher_scores"


def teacher_scores(cfg: RunConfig, reference: str, rows: Sequence[dict[str, Any]]) -> tuple[np.ndarray, bool, Path]:
    """Scores [len(rows), 1 + N] (positive first) of every row, from the cache or a Ray task; (scores, cached, file)."""
    objective = cfg.objective
    width = 1 + objective.max_hard_negatives
    key = cache_key(teacher_fingerprint(reference), rows_digest(rows), objective.max_hard_negatives,
                    objective.teacher_max_seq_length)
    path = cache_folder(cfg) / f"{key}.npy"
    if path.is_file():
        scores = np.load(path)
        if scores.shape == (len(rows), width):
            return scores, True, path
    import ray

    threads = max(1, math.ceil(cfg.scaling.cpus_per_worker))
    resources: dict[str, Any] = {"num_cpus": cfg.scaling.cpus_per_worker}
    if cfg.scaling.use_gpu:
        resources["num_gpus"] = cfg.scaling.gpus_per_worker
    queries = [str(row["query"]) for row in rows for _ in range(width)]
    documents = [str(text) for row in rows for text in [row["document"], *row["hard_negatives"]]]
    task = ray.remote(**resources)(score_pairs_with_teacher)
    flat = ray.get(task.remote(reference, queries, documents, objective.teacher_max_seq_length,
                               objective.teacher_batch_size, threads))
    scores = np.asarray(flat, dtype=np.float32).reshape(len(rows), width)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.npy")  # a killed run leaves no half-written cache
    np.save(partial, scores)
    os.replace(partial, path)
    path.with_suffix(".json").write_text(json.dumps({
        "teacher": objective.teacher, "rows": len(rows), "scores_per_row": width,
        "max_seq_length": objective.teacher_max_seq_length, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }, indent=1))
    return scores, False, path


def distill_rows(pairs: Sequence[Pair], max_hard_negatives: int) -> list[dict[str, Any]]:
    """The pairs with at least `max_hard_negatives` hard negatives, each with exactly that many."""
    return [{"query": p.query, "document": p.document, "hard_negatives": list(p.hard_negatives[:max_hard_negatives])}
            for p in pairs if len(p.hard_negatives) >= max_hard_negatives]


def scored_rows(cfg: RunConfig, pairs: PairSet) -> tuple[dict[str, list[dict[str, Any]]], int, bool, str]:
    """({split: `distill_rows` with the teacher's scores}, pairs left out for too few hard negatives, whether the
    scores came from the cache, how they came)."""
    objective = cfg.objective
    reference = teacher_reference(objective.teacher)
    wanted = objective.max_hard_negatives
    scored = {split: distill_rows(split_pairs, wanted)
              for split, split_pairs in ((TRAIN, pairs.train), (VALIDATION, pairs.validation))}
    skipped = len(pairs.train) + len(pairs.validation) - len(scored[TRAIN]) - len(scored[VALIDATION])
    if not scored[TRAIN]:
        with_any = sum(bool(p.hard_negatives) for p in pairs.train)
        raise DataError(
            f"objective biencoder_distill: none of the {len(pairs.train)} training pairs in {', '.join(cfg.data.train_paths)} "
            f"has {wanted} hard negative(s) in data.hard_negative_field={cfg.data.hard_negative_field!r} "
            f"({with_any} have any). Distillation scores each pair's hard negatives: name the right field, use a mine "
            "stage's pairs.jsonl (its `hard_negatives`), or lower objective.max_hard_negatives")
    ordered = scored[TRAIN] + scored[VALIDATION]
    start = time.perf_counter()
    scores, cached, path = teacher_scores(cfg, reference, ordered)
    for row, row_scores in zip(ordered, scores):
        row[TEACHER_SCORES] = row_scores.tolist()
    how = "cached" if cached else f"computed in {time.perf_counter() - start:.1f} s"
    print(f"[lmp] teacher scores: {how}: {len(ordered)} rows x {1 + wanted} scores ({len(scored[TRAIN])} train, "
          f"{len(scored[VALIDATION])} validation) from {objective.teacher}; {path}", flush=True)
    return scored, skipped, cached, how


def rows(cfg: RunConfig) -> dict[str, list[dict[str, Any]]]:
    """The scored rows per split, made in this process."""
    return scored_rows(cfg, read_pairs(cfg.data))[0]


def prepare_data(cfg: RunConfig) -> PreparedData:
    wanted = cfg.objective.max_hard_negatives
    pairs = read_pairs(cfg.data)
    scored, skipped, cached, how = scored_rows(cfg, pairs)
    ordered = scored[TRAIN] + scored[VALIDATION]
    metrics = {"data/distill_rows": float(len(ordered)), "data/distill_skipped_rows": float(skipped),
               "data/teacher_scores_cached": float(cached)}
    summary = (f"\ndata: {len(ordered)} pairs with {wanted} hard negative(s) each, teacher scores {how}"
               + (f"; {skipped} pair(s) with fewer hard negatives left out" if skipped else ""))
    datasets = pair_datasets(pairs, {split: split_rows for split, split_rows in scored.items() if split_rows})
    return prepared_pairs(pairs, datasets, len(scored[TRAIN]), metrics, summary)


def build_recipe(cfg: RunConfig) -> TrainingRecipe:
    objective_cfg = cfg.objective
    objective = BiencoderDistillObjective(objective_cfg.loss, objective_cfg.student_temperature,
                                          objective_cfg.kl_temperature, objective_cfg.in_batch_weight)
    return pair_encoder_recipe(cfg, objective, DistillEvaluator(objective), DistillCollator)
