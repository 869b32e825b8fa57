"""MLM head warm-up: the demo domain's held-out MLM loss through a random head and through
the warmed head, before any domain MLM, and what the warm-up costs.

1. Trains configs/mlm_head_warmup.yaml (the head alone, encoder frozen, on general English sentences from
   ../shared/data) with the generic training loop in this process, without Ray, so its CPU time is this
   process's (time.process_time, every thread); the validation curve shows whether the loss has flattened.
2. Reads the held-out tenth of data/demo/reports.jsonl, split exactly as the demo's domain stage splits it
   (dedup, validation_fraction 0.1, seed 13), with fixed masks (`old_domain_mlm_loss`, mask seed 1234), through
   (a) the packaged MiniLM with a freshly initialised head (several init seeds) and (b) the warmed head. The
   encoder is the same packaged MiniLM in both: the bench checks that the warm-up left it bit-identical.

    python bench/mlm_head_warmup.py [--set optim.max_steps=250 ...] [--random-heads 3] [--out DIR]
"""
from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).parent))
from common import write_result

REPO = Path(__file__).resolve().parents[1]


def domain_texts() -> list[str]:
    """The held-out reports of the demo's domain stage (configs/demo_mlm.yaml's data section)."""
    from lmplatform.config import DataConfig
    from lmplatform.data import VALIDATION, local_documents, scan_corpus

    cfg = DataConfig(train_paths=["data/demo/reports.jsonl"], dedup=True, validation_fraction=0.1, seed=13)
    return list(local_documents(scan_corpus(cfg, use_ray=False), VALIDATION))


def warm_up(cfg, out: Path) -> dict:
    """Train the head as the config says, in this process; returns the exported folder, curve and costs."""
    import numpy as np
    import torch

    from lmplatform.data import TRAIN, VALIDATION, local_documents, scan_corpus
    from lmplatform.objectives import objective_spec
    from lmplatform.train import FINAL_MODEL_DIR, FolderReporter, Trainer, total_optimizer_steps

    corpus = scan_corpus(cfg.data, use_ray=False)
    print(corpus.report.summary(), flush=True)
    train = list(local_documents(corpus, TRAIN))
    validation = list(local_documents(corpus, VALIDATION))
    size = cfg.optim.batch_size
    recipe = objective_spec("mlm").build_recipe(cfg)
    encoder_before = {k: v.detach().clone() for k, v in recipe.model.backbone.state_dict().items()}
    steps = total_optimizer_steps(cfg.optim, len(train), 1)
    reporter = FolderReporter(out / "checkpoints")
    trainer = Trainer(cfg, recipe, steps, torch.device("cpu"), 0, reporter=reporter)

    def column(texts: list[str]) -> dict[str, np.ndarray]:
        values = np.empty(len(texts), dtype=object)
        values[:] = texts
        return {"text": values}

    def train_batches(epoch: int, skip: int) -> Iterator[dict]:
        order = list(train)
        random.Random(cfg.optim.seed + epoch).shuffle(order)
        starts = range(0, len(order) - size + 1, size)  # full batches only
        return (recipe.collate(column(order[i : i + size])) for i in list(starts)[skip:])

    def validation_batches() -> Iterator[dict]:
        return (recipe.collate(column(validation[i : i + size])) for i in range(0, len(validation), size))

    cpu, wall = time.process_time(), time.perf_counter()
    trainer.begin(None)
    summary = trainer.fit(train_batches, validation_batches)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    encoder_after = recipe.model.backbone.state_dict()
    curve = [{"step": int(r["step"]), "val_mlm_loss": round(r["val_mlm_loss"], 4)}
             for r in reporter.reports if "val_mlm_loss" in r]
    # a checkpoint's report repeats the latest validation: one point per step
    curve = [{"step": 0, "val_mlm_loss": round(summary["val_mlm_loss_initial"], 4)}] + list(
        {c["step"]: c for c in curve if c["step"] > 0}.values())
    return {
        "folder": reporter.checkpoints[-1] / FINAL_MODEL_DIR,
        "steps": trainer.progress.step, "max_steps": steps, "early_stopped_at_step": summary.get("early_stopped_at_step"),
        "batch_size": size, "train_sentences": len(train), "validation_sentences": len(validation),
        "cpu_s": round(cpu, 1), "wall_s": round(wall, 1), "torch_threads": torch.get_num_threads(),
        "val_curve": curve, "val_mlm_loss": round(summary["val_mlm_loss"], 4),
        "val_mlm_accuracy": round(summary.get("val_mlm_accuracy", float("nan")), 4),
        "encoder_bit_identical": all(torch.equal(encoder_before[k], encoder_after[k]) for k in encoder_before),
    }


def random_head_folder(seed: int, root: Path) -> Path:
    """The packaged MiniLM with a head initialised under `seed`, saved so it is read like the warmed one."""
    import torch

    from lmplatform.models import MaskedLanguageModel, load_tokenizer, resolve_model_path

    path = resolve_model_path("default")
    torch.manual_seed(seed)
    model = MaskedLanguageModel.from_pretrained(path)
    return model.save_pretrained(root / f"random_head_{seed}", load_tokenizer(path), "mean", 128)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/mlm_head_warmup.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config override, as lmp train --set")
    parser.add_argument("--random-heads", type=int, default=3, help="init seeds of the random head")
    parser.add_argument("--out", type=Path, default=None, help="where the warmed model is kept (default: a temp folder)")
    args = parser.parse_args()

    import os

    os.chdir(REPO)  # the config's paths (../shared/data, data/demo) are relative to the repository root
    from lmplatform.evaluation import old_domain_mlm_loss
    from lmplatform.objectives import load_run_config

    cfg = load_run_config(args.config, args.overrides)
    texts = domain_texts()
    with tempfile.TemporaryDirectory(prefix="lmp-head-warmup-") as tmp:
        out = args.out or Path(tmp)
        warm = warm_up(cfg, out)
        random_losses = [old_domain_mlm_loss(random_head_folder(seed, Path(tmp)), texts)["mlm_loss"]
                         for seed in range(args.random_heads)]
        warmed = old_domain_mlm_loss(warm["folder"], texts)
    mean = statistics.mean(random_losses)
    std = statistics.stdev(random_losses) if len(random_losses) > 1 else 0.0
    rows = {
        "domain_texts": len(texts), "masked_tokens": int(warmed["masked_tokens"]),
        "random_head_mlm_loss": [round(x, 4) for x in random_losses],
        "random_head_mlm_loss_mean": round(mean, 4), "random_head_mlm_loss_std": round(std, 4),
        "random_head_perplexity": round(math.exp(mean), 1),
        "warmed_head_mlm_loss": round(warmed["mlm_loss"], 4), "warmed_head_mlm_accuracy": round(warmed["mlm_accuracy"], 4),
        "warmed_head_perplexity": round(warmed["perplexity"], 1),
    }
    warm["folder"] = str(warm["folder"]) if args.out else "(temporary)"
    print(f"warm-up: {warm['steps']} steps x {warm['batch_size']}, {warm['cpu_s']} s CPU ({warm['wall_s']} s wall), "
          f"val loss {' -> '.join(str(c['val_mlm_loss']) for c in warm['val_curve'])}; "
          f"encoder bit-identical: {warm['encoder_bit_identical']}")
    print(f"domain held-out MLM loss ({len(texts)} reports): random head {mean:.3f} ± {std:.3f} "
          f"(ppl {math.exp(mean):.0f}), warmed head {warmed['mlm_loss']:.3f} (ppl {warmed['perplexity']:.0f})")
    write_result("mlm_head_warmup", {"config": args.config, "overrides": args.overrides, "warm_up": warm, "domain": rows})


if __name__ == "__main__":
    main()
