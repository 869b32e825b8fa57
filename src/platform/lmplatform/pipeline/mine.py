"""The `mine` pipeline stage: a pairs file with hard negatives, mined with a bi-encoder.

1. Read every pair of `mine.pairs` (cleaned as training reads them) and the distractors.
2. Encode the distinct queries and candidates (the pairs' documents plus the distractors) on Ray
   actors with the index builder's pipeline (`retrieval.build.encode_corpus_to_shards`; up to its
   `IN_PROCESS_ROWS` texts with one actor, in this process).
3. Exact inner-product search (FAISS flat) of every query against the candidates, deep enough that
   `range_max` candidates remain once the query's group is set aside.
4. Per pair, `retrieval.mining.select_negatives` picks the negatives (window, margin, and the
   optional cross-encoder check).
5. Write `pairs.jsonl` (query, document, hard_negatives, and the group id under `data.group_field`'s
   name when the pairs have one) and log it with the counts to the stage's MLflow run.
"""
from __future__ import annotations

import hashlib
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from lmplatform.data.groups import group_texts
from lmplatform.data.pairs import Pair, read_pairs
from lmplatform.evaluation.retrieval_validation import read_distractors
from lmplatform.models.resolve import resolve_model_path
from lmplatform.pipeline.cache import fingerprint_path
from lmplatform.pipeline.config import PipelineConfig, StageConfig
from lmplatform.pipeline.mine_config import MineConfig
from lmplatform.pipeline.preflight import Problem, data_config_problems, model_problems
from lmplatform.pipeline.spec import StageCheck, StageContext
from lmplatform.pipeline.stage_run import cache_folder, run_untrained, section_content, stage_tracking
from lmplatform.retrieval.build import encode_corpus_to_shards, iter_shards
from lmplatform.retrieval.faiss_import import exact_search
from lmplatform.retrieval.mining import MiningRules, ScorePairs, Selection, select_negatives
from lmplatform.tracking.mlflow_tracking import TrackedRun, flatten

PAIRS_FILE = "pairs.jsonl"
ARTIFACT_DIR = "mined"


@dataclass
class MineResult:
    path: Path
    metrics: dict[str, float]
    mlflow_run_id: str

    @property
    def summary(self) -> str:
        m = self.metrics
        return (f"{int(m['mine/negatives'])} negatives for {int(m['mine/pairs'])} pairs from {int(m['mine/candidates'])} "
                f"candidates ({int(m['mine/pairs_short'])} pair(s) with fewer than asked; skipped: "
                f"{int(m['mine/skipped_group'])} of the query's group, {int(m['mine/skipped_margin'])} within the margin, "
                f"{int(m['mine/skipped_cross_encoder'])} by the cross-encoder); pairs file {self.path}")


def encode_texts(texts: Sequence[str], model: str, cfg: MineConfig, work_dir: Path) -> np.ndarray:
    """Vectors [len(texts), dim] in the order of `texts`, encoded on Ray actors (a few texts with one actor: in this
    process) through parquet shards."""
    source = work_dir / "texts.jsonl"
    with source.open("w", encoding="utf-8") as handle:
        for index, text in enumerate(texts):
            handle.write(json.dumps({"id": str(index), "text": text}, ensure_ascii=False) + "\n")
    shards = work_dir / "shards"
    encode_corpus_to_shards(str(source), shards, model=model, text_fields=["text"], id_field="id", actors=cfg.actors,
                            cpus_per_actor=cfg.cpus_per_actor, batch_size=cfg.batch_size, max_seq_length=cfg.max_seq_length,
                            precision=cfg.precision)
    vectors: Optional[np.ndarray] = None
    for ids, block in iter_shards(shards):
        if vectors is None:
            vectors = np.zeros((len(texts), block.shape[1]), dtype=np.float32)
        vectors[[int(i) for i in ids]] = block
    if vectors is None:
        raise ValueError("the encoder returned no vectors")
    return vectors


def cross_encoder_scorer(reference: str, batch_size: int) -> Callable[[str], ScorePairs]:
    """query -> a function scoring that query's candidates with the cross-encoder (relevance probabilities)."""
    from lmplatform.models.cross_encoder import CrossEncoder

    model = CrossEncoder.from_pretrained(reference)
    return lambda query: (lambda texts: model.score([query] * len(texts), list(texts), batch_size))


def cached_vectors(texts: Sequence[str], model: str, cfg: MineConfig, work_dir: Path,
                   vector_cache: Optional[Path]) -> np.ndarray:
    """`encode_texts`, kept in `vector_cache` under a key of the model's content, the texts and how they are
    encoded: mining the same texts with the same model again (another window or count of negatives, as a study's
    trials try) skips the encoding."""
    if vector_cache is None:
        return encode_texts(texts, model, cfg, work_dir)

    digest = hashlib.sha256(json.dumps([fingerprint_path(Path(model)), cfg.max_seq_length, cfg.precision,
                                        list(texts)]).encode()).hexdigest()[:24]
    path = vector_cache / f"mine-{digest}.npy"
    if path.is_file():
        return np.load(path)
    vectors = encode_texts(texts, model, cfg, work_dir)
    vector_cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{time.time_ns()}.tmp.npy")
    np.save(tmp, vectors)
    tmp.replace(path)
    return vectors


def mine_pairs(cfg: MineConfig, model: str, work_dir: Path, vector_cache: Optional[Path] = None,
               ) -> tuple[list[Pair], list[Selection], dict[str, float]]:
    """The pairs of `cfg.pairs`, one `Selection` per pair, and the counts (`mine/...`)."""
    # every pair is mined: the training stage splits the file as its own config says
    read = read_pairs(cfg.pairs.model_copy(update={"validation_fraction": 0.0}))
    pairs = read.train + read.validation
    distractors = read_distractors(cfg.distractors, cfg.pairs.clean)[0] if cfg.distractors else []
    candidates = list(dict.fromkeys([p.document for p in pairs] + distractors))
    queries = list(dict.fromkeys(p.query for p in pairs))
    # A duplicate report is usually a candidate too (the distractors are the whole corpus): encode each text once.
    texts = list(dict.fromkeys(queries + candidates))
    start = time.perf_counter()
    vectors = cached_vectors(texts, model, cfg, work_dir, vector_cache)
    encode_seconds = time.perf_counter() - start
    text_row = {text: i for i, text in enumerate(texts)}
    query_vectors = vectors[[text_row[text] for text in queries]]
    candidate_vectors = vectors[[text_row[text] for text in candidates]]

    excluded = group_texts(pairs)
    # the query's group can hold candidates ranked above the window: search past them
    depth = min(len(candidates), cfg.range_max + max(len(texts) for texts in excluded))
    scores, found = exact_search(query_vectors, candidate_vectors, depth)
    query_row = {text: i for i, text in enumerate(queries)}
    candidate_row = {text: i for i, text in enumerate(candidates)}

    rules = MiningRules(cfg.num_negatives, cfg.range_min, cfg.range_max, cfg.relative_margin, cfg.max_cross_encoder_score)
    scorer = cross_encoder_scorer(cfg.cross_encoder, cfg.batch_size) if cfg.cross_encoder else None
    selections = []
    positive_scores = []
    for pair, never in zip(pairs, excluded):
        q = query_row[pair.query]
        positive = float(query_vectors[q] @ candidate_vectors[candidate_row[pair.document]])
        ranked = [(candidates[j], float(s)) for j, s in zip(found[q], scores[q]) if j >= 0]
        selections.append(select_negatives(ranked, positive, never, rules, scorer(pair.query) if scorer else None))
        positive_scores.append(positive)
    negative_scores = [s for selection in selections for s in selection.scores]
    metrics = {
        "mine/pairs": float(len(pairs)),
        "mine/queries": float(len(queries)),
        "mine/candidates": float(len(candidates)),
        "mine/distractors": float(len(distractors)),
        "mine/negatives": float(len(negative_scores)),
        "mine/pairs_short": float(sum(len(s.negatives) < cfg.num_negatives for s in selections)),
        "mine/skipped_group": float(sum(s.excluded for s in selections)),
        "mine/skipped_window": float(sum(s.outside_window for s in selections)),
        "mine/skipped_margin": float(sum(s.margin for s in selections)),
        "mine/skipped_cross_encoder": float(sum(s.cross_encoder for s in selections)),
        "mine/mean_positive_score": float(np.mean(positive_scores)),
        "mine/mean_negative_score": float(np.mean(negative_scores)) if negative_scores else float("nan"),
        "mine/encoded_texts": float(len(texts)),
        "mine/encode_seconds": encode_seconds,
    }
    return pairs, selections, metrics


def write_mined_pairs(path: Path, pairs: Sequence[Pair], selections: Sequence[Selection], group_field: Optional[str]) -> None:
    """One JSON line per pair: query, document, hard_negatives (and the group id when the pairs name one)."""
    with path.open("w", encoding="utf-8") as handle:
        for pair, selection in zip(pairs, selections):
            row = {"query": pair.query, "document": pair.document, "hard_negatives": selection.negatives}
            if group_field is not None:
                row[group_field] = pair.group
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def run_mine_stage(cfg: MineConfig, model: str, folder: Path, tracking_uri: str, experiment: str, run_name: str,
                   parent_run_id: str, tags: Mapping[str, str], vector_cache: Optional[Path] = None) -> MineResult:
    """Mine, write `folder/pairs.jsonl` and log it (artifact `mined/pairs.jsonl`), the counts and the config
    in a new MLflow run nested under `parent_run_id`; `vector_cache` keeps the encodings for a later mining of the
    same texts with the same model (`cached_vectors`)."""
    model_path = str(resolve_model_path(model))
    folder.mkdir(parents=True, exist_ok=True)
    tracker = TrackedRun.start(tracking_uri, experiment, run_name, {**tags, "lmp.stage_kind": "mine", "lmp.model_source": model},
                               parent_run_id)
    try:
        tracker.log_params(flatten({"mine": cfg.model_dump(mode="json")}) | {"model": model})
        with tempfile.TemporaryDirectory(prefix="lmp-mine-", dir=folder) as tmp:
            pairs, selections, metrics = mine_pairs(cfg, model_path, Path(tmp), vector_cache)
        path = folder / PAIRS_FILE
        write_mined_pairs(path, pairs, selections, cfg.pairs.group_field)
        tracker.log_metrics(metrics, step=0)
        tracker.log_artifact(path, ARTIFACT_DIR)
    except BaseException:
        tracker.finish("FAILED")
        raise
    tracker.finish()
    return MineResult(path, metrics, tracker.run_id)


# -- the stage kind (pipeline/spec.py) -------------------------------------------------------------------------
def run(ctx: StageContext) -> None:
    def work() -> MineResult:
        print(f"[lmp] {ctx.label}: mining hard negatives with {ctx.init}", flush=True)
        vectors = cache_folder(ctx.pipeline, ctx.folder) / "vectors" if ctx.pipeline.reuse.enabled else None
        result = run_mine_stage(ctx.section, ctx.init, ctx.folder / ctx.stage.name, *stage_tracking(ctx),
                                vector_cache=vectors)
        ctx.record.output_path = str(result.path)
        return result

    run_untrained(ctx, work)


def problems(ctx: StageCheck) -> list[Problem]:
    found = [Problem(p.where, f"mine.{p.field}", p.message, p.path) for p in data_config_problems(ctx.section, ctx.where)]
    found += model_problems(ctx.stage.init_from, "init_from", ctx.where, ctx.will_run, ctx.finished)
    return found + model_problems(ctx.section.cross_encoder, "mine.cross_encoder", ctx.where)


reuse_content = section_content


def cpus(pipeline: PipelineConfig, stage: StageConfig) -> float:
    return stage.section.actors * stage.section.cpus_per_actor


def metric_names(pipeline: PipelineConfig, stage: StageConfig) -> set[str]:
    return set()
