"""The `pairs` pipeline stage: per-split pairs files from a report corpus and its duplicate relations.

It is `lmp data pairs` as a stage, so that a whole retrieval recipe (data, mining, training, index,
registration) is one pipeline: `<folder>/<split>.jsonl` per split, each row `query`, `document` and the
duplicate `group` over all splits. With `holdout`, one split is cut in two by group (e.g. dev into a part
that selects and a part that confirms), so no group is on both sides.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from lmplatform.evaluation.tasks.retrieval.config import RetrievalDataset
from lmplatform.evaluation.tasks.retrieval.data import write_split_pairs
from lmplatform.pipeline.config import PipelineConfig, StageConfig
from lmplatform.pipeline.pairs_config import HoldoutConfig, PairsConfig
from lmplatform.pipeline.preflight import Problem, file_problem
from lmplatform.pipeline.spec import StageCheck, StageContext
from lmplatform.pipeline.stage_run import run_untrained, section_content, stage_tracking
from lmplatform.tracking.mlflow_tracking import TrackedRun, flatten

ARTIFACT_DIR = "pairs"


@dataclass
class PairsResult:
    files: dict[str, Path]
    metrics: dict[str, float]
    mlflow_run_id: str
    bad_rows: list[str]

    @property
    def summary(self) -> str:
        parts = ", ".join(f"{name} {int(self.metrics[f'pairs/{name}_pairs'])}" for name in self.files)
        skipped = f"; {len(self.bad_rows)} bad row(s) skipped, e.g. {self.bad_rows[0]}" if self.bad_rows else ""
        return f"pairs per file: {parts}{skipped}"


def holdout_part(group: Any, holdout: HoldoutConfig) -> int:
    """0 or 1: which part of the held-out split a duplicate group goes to (a stable hash of the group and seed)."""
    digest = hashlib.sha256(f"{holdout.seed}:{group}".encode()).digest()
    return int(int.from_bytes(digest[:8], "big") / 2**64 < holdout.fraction)


def split_by_group(path: Path, holdout: HoldoutConfig) -> dict[str, Path]:
    """Cut a pairs file in two by `holdout` into `<name>.jsonl` files beside it; the source file is removed."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    parts: list[list[str]] = [[], []]
    for row in rows:
        parts[holdout_part(row["group"], holdout)].append(json.dumps(row, ensure_ascii=False) + "\n")
    files = {}
    for name, lines in zip(holdout.into, parts):
        files[name] = path.with_name(f"{name}.jsonl")
        files[name].write_text("".join(lines), encoding="utf-8")
    path.unlink()
    return files


def write_pairs(cfg: PairsConfig, folder: Path) -> tuple[dict[str, Path], dict[str, float], list[str]]:
    """The stage's files by output name, the counts (`pairs/...`) and the skipped rows (file:line: why)."""
    dataset = RetrievalDataset(name="pairs", format=cfg.format, corpus=cfg.corpus, relations=cfg.relations,
                               id_field=cfg.id_field, query_id_field=cfg.query_id_field,
                               target_id_field=cfg.target_id_field, split_field=cfg.split_field)
    written = write_split_pairs(dataset, folder, cfg.fields, cfg.splits, cfg.limit)
    files = {split: pairs.path for split, pairs in written.items()}
    if cfg.holdout is not None:
        parts = split_by_group(files.pop(cfg.holdout.split), cfg.holdout)
        files = {name: path for split in cfg.splits
                 for name, path in (parts.items() if split == cfg.holdout.split else [(split, files[split])])}
    metrics: dict[str, float] = {}
    for name, path in files.items():
        groups = [json.loads(line)["group"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        metrics |= {f"pairs/{name}_pairs": float(len(groups)), f"pairs/{name}_groups": float(len(set(groups)))}
    metrics["pairs/empty_text"] = float(sum(pairs.empty for pairs in written.values()))
    bad_rows = list(dict.fromkeys(row for pairs in written.values() for row in pairs.bad_rows))
    metrics["pairs/bad_rows"] = float(len(bad_rows))
    return files, metrics, bad_rows


def run_pairs_stage(cfg: PairsConfig, folder: Path, tracking_uri: str, experiment: str, run_name: str,
                    parent_run_id: str, tags: Mapping[str, str]) -> PairsResult:
    """Write the files under `folder` and log them (artifacts `pairs/`), the counts and the config in a new MLflow
    run nested under `parent_run_id`."""
    folder.mkdir(parents=True, exist_ok=True)
    tracker = TrackedRun.start(tracking_uri, experiment, run_name, {**tags, "lmp.stage_kind": "pairs"}, parent_run_id)
    try:
        tracker.log_params(flatten({"pairs": cfg.model_dump(mode="json")}))
        files, metrics, bad_rows = write_pairs(cfg, folder)
        tracker.log_metrics(metrics, step=0)
        if bad_rows:
            tracker.log_dict({"bad_rows": bad_rows}, "pairs_bad_rows.json")
        for path in files.values():
            tracker.log_artifact(path, ARTIFACT_DIR)
    except BaseException:
        tracker.finish("FAILED")
        raise
    tracker.finish()
    return PairsResult(files, metrics, tracker.run_id, bad_rows)


# -- the stage kind (pipeline/spec.py) -------------------------------------------------------------------------
def run(ctx: StageContext) -> None:
    def work() -> PairsResult:
        print(f"[lmp] {ctx.label}: pairs files from {ctx.section.relations}", flush=True)
        result = run_pairs_stage(ctx.section, ctx.folder / ctx.stage.name, *stage_tracking(ctx))
        ctx.record.outputs = {name: str(path) for name, path in result.files.items()}
        return result

    run_untrained(ctx, work)


def problems(ctx: StageCheck) -> list[Problem]:
    return (file_problem(ctx.section.corpus, "pairs.corpus", ctx.where)
            + file_problem(ctx.section.relations, "pairs.relations", ctx.where))


reuse_content = section_content


def cpus(pipeline: PipelineConfig, stage: StageConfig) -> float:
    return 0.0  # it reads and writes files in the driver


def metric_names(pipeline: PipelineConfig, stage: StageConfig) -> set[str]:
    return set()
