"""Every shipped single-objective config that validates, trained a few steps on one device with its validation.

The loop is driven in this process (`Trainer` with a `FolderReporter`, no Ray), so the check runs where
Ray is not installed, as on a lent GPU machine. Each config's rows are read as its `prepare_data` would
hand them to Ray Data (corpus files through the same planner, pairs through `read_pairs`), then trained
for `--steps` steps with in-batch validation before and after, and corpus-level retrieval validation
where the config sets it. A config that raises is reported with its traceback and the others still run.

    python bench/gpu_smoke.py [--device cuda] [--steps 3] [--configs mlm declutr ...]

Writes bench/results/gpu_smoke.json (device, and per config: ok, validation metrics or the error).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import write_result  # noqa: E402
from gpu_train import epoch_batches  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ("mlm", "declutr", "biencoder", "cross_encoder")


def split_rows(cfg: Any) -> dict[str, list[dict[str, Any]]]:
    """{'train', 'validation'} rows, as the objective's Ray datasets would yield them."""
    name = cfg.objective.name
    if name in ("mlm", "declutr"):
        from lmplatform.data.corpus import local_documents, scan_corpus

        corpus = scan_corpus(cfg.data, use_ray=False)
        rows = {split: [{"text": text} for text in local_documents(corpus, split)] for split in ("train", "validation")}
        if name == "declutr":
            from lmplatform.models.resolve import resolve_model_path
            from lmplatform.objectives.declutr.objective import keep_sampleable
            from lmplatform.objectives.declutr.spans import count_sampleable

            needed = count_sampleable([], cfg.objective.num_anchors, cfg.objective.max_span).min_tokens
            path = str(resolve_model_path(cfg.model.name_or_path))
            for split, items in rows.items():
                if items:
                    kept = keep_sampleable({"text": np.array([r["text"] for r in items], dtype=object)}, path, needed)
                    rows[split] = [{"text": t} for t in kept["text"]]
        return rows
    if name in ("biencoder", "cross_encoder"):
        from lmplatform.data.pairs import read_pairs

        pairs = read_pairs(cfg.data)
        if name == "biencoder":
            return {split: pairs.rows(split) for split in ("train", "validation")}
        from lmplatform.objectives.cross_encoder.objective import choose_negatives, negative_groups

        rng, out = np.random.default_rng(cfg.objective.seed), {}
        for split, split_pairs in (("train", pairs.train), ("validation", pairs.validation)):
            negatives = choose_negatives(split_pairs, cfg.objective.negatives_per_positive, rng,
                                         cfg.objective.use_hard_negatives)
            out[split] = negative_groups(split_pairs, negatives)
        return out
    raise ValueError(f"no Ray-free reader for objective {name!r}")


def smoke(config: str, device: str, steps: int, work: Path) -> dict[str, Any]:
    import torch

    from lmplatform.config import load_run_config
    from lmplatform.train.ingest import resume_batches
    from lmplatform.train.loop import FolderReporter
    from lmplatform.train.worker import build_trainer

    cfg = load_run_config(ROOT / "configs" / f"{config}.yaml", overrides=[
        f"optim.max_steps={steps}", f"scaling.use_gpu={str(device == 'cuda').lower()}",
        "checkpoint.every_n_steps=1000000", "tracking.log_every_n_steps=1"])
    rows = split_rows(cfg)
    batch_size = cfg.optim.batch_size
    trainer = build_trainer(cfg, steps, torch.device(device), 0, reporter=FolderReporter(work / config))
    if cfg.retrieval_validation is not None and trainer.recipe.retrieval_view is not None:
        from lmplatform.evaluation.retrieval_validation import CorpusRetrievalValidator, prepare_retrieval_set

        trainer.corpus_validator = CorpusRetrievalValidator(prepare_retrieval_set(cfg), cfg.retrieval_validation,
                                                            trainer.recipe.retrieval_view)
    trainer.begin(None)
    collate = trainer.recipe.collate

    def train_batches(epoch: int, skip: int) -> Iterator[Any]:
        return resume_batches(epoch_batches(rows["train"], batch_size, epoch), collate, skip)

    def validation_batches() -> Optional[Iterator[Any]]:
        if not rows.get("validation"):
            return None
        return (collate(b) for b in epoch_batches(rows["validation"], batch_size, 0))

    start = time.perf_counter()
    final = trainer.fit(train_batches, validation_batches)
    return {"ok": True, "seconds": round(time.perf_counter() - start, 1),
            "train_rows": len(rows["train"]), "validation_rows": len(rows.get("validation") or []),
            "initial": trainer.progress.initial_metrics, "final": final}


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), help="names under configs/")
    args = parser.parse_args(argv)

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lmp-gpu-smoke-") as tmp:
        for config in args.configs:
            try:
                results[config] = smoke(config, device, args.steps, Path(tmp))
            except Exception as error:  # noqa: BLE001 - one config's failure is a result; the rest still run
                results[config] = {"ok": False, "error": repr(error), "traceback": traceback.format_exc()}
                print(results[config]["traceback"], flush=True)
            print(f"[smoke] {config}: {'ok' if results[config]['ok'] else results[config]['error']}", flush=True)
    write_result("gpu_smoke", {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "steps": args.steps, "results": results,
    })


if __name__ == "__main__":
    main()
