"""Training throughput on one device: our loop against the sentence-transformers trainer, and our MLM.

Both train a bi-encoder on the OpenOffice train pairs (MultipleNegativesRankingLoss at scale 20 for
the peer, our `biencoder` at τ = 0.05, no hard negatives, max length 128) at each batch size, in fp32
and in mixed precision (fp16 on a GPU, bf16 on CPU; the same for both). Our loop is the `Trainer`
driven in this process (`FolderReporter`, no Ray: this bench must run where Ray is not installed), with
its defaults for the device (prefetching on a GPU). Each run takes `--warmup` steps first (allocator,
kernels, cuDNN autotuning), then times `--steps` steps between two points where the device is idle.
The MLM row reports our tokens/s (real tokens, padding excluded) and the share of the FLOP-bound rate:
6 x parameters x tokens per second against `--peak-tflops` (default: an H100 SXM's dense bf16 peak).

    python bench/gpu_train.py [--data ../shared/data] [--device cuda] [--steps 50] [--warmup 10]
    python bench/gpu_train.py --device cpu --steps 2 --toy      # smoke check: tiny random BERT, few pairs

The loop as it was before a change is measured on the same machine by running the older commit's own copy of
this file with the older package first on PYTHONPATH (`--precisions fp32 --skip-peer --results-name
gpu_train_before`; the package's layout changes between commits), then this one with `--before <that result>`
(ours_vs_before per row).

Writes bench/results/gpu_train.json on a GPU, gpu_train_cpu.json on CPU (gpu_train_toy.json with --toy), or
--results-name.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, write_result

H100_BF16_DENSE_TFLOPS = 989.4
TEMPERATURE, MAX_LENGTH, LR = 0.05, 128, 2e-5


# -- data ----------------------------------------------------------------------------------------------
def openoffice_train_pairs(data: Path, limit: Optional[int]) -> list[dict[str, str]]:
    """The OpenOffice train split's (query, document) texts, as bench/openoffice_retrieval.py builds them."""
    from openoffice_retrieval import report_text

    oo = data / "duplicate_bug_reports" / "openoffice"
    reports = {r["id"]: r for r in map(json.loads, (oo / "corpus.jsonl").read_text(encoding="utf-8").splitlines()) if r}
    pairs = []
    for line in (oo / "pairs.jsonl").read_text(encoding="utf-8").splitlines():
        pair = json.loads(line) if line.strip() else None
        if not pair or pair["split"] != "train":
            continue
        query, document = reports.get(pair["duplicate_id"]), reports.get(pair["master_id"])
        if query and document and report_text(query) and report_text(document):
            pairs.append({"query": report_text(query), "document": report_text(document)})
    return pairs[:limit] if limit else pairs


def _column(values: list[Any]) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column


def epoch_batches(rows: list[dict[str, str]], batch_size: int, epoch: int) -> Iterator[dict[str, np.ndarray]]:
    """One epoch of full batches in a seeded order, as Ray Data's numpy batches (the peer drops the last too)."""
    order = np.random.default_rng([42, epoch]).permutation(len(rows))
    for start in range(0, len(rows) - batch_size + 1, batch_size):
        chosen = [rows[i] for i in order[start:start + batch_size]]
        yield {name: _column([row[name] for row in chosen]) for name in chosen[0]}


def tiny_bert(folder: Path) -> Path:
    """A randomly initialised 2-layer BERT with the packaged tokenizer (the --toy model)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from lmplatform.models import packaged_model_path

    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_path()))
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=256)
    torch.manual_seed(0)
    BertForMaskedLM(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


# -- timing -------------------------------------------------------------------------------------------
class Clock:
    """The loop's tracker: the time and token count at each logging step (logging reads the device, so the
    device is idle at each of those points)."""

    def __init__(self) -> None:
        self.trainer: Any = None
        self.marks: dict[int, tuple[float, int]] = {}

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        if "loss" in metrics:
            self.marks[step] = (time.perf_counter(), self.trainer.progress.tokens)


def timed(seconds: float, steps: int, batch_size: int, tokens: Optional[int] = None) -> dict[str, float]:
    out = {"step_ms": round(1000 * seconds / steps, 2), "samples_per_s": round(steps * batch_size / seconds, 1)}
    if tokens is not None:
        out["tokens_per_s"] = round(tokens / seconds, 1)
    return out


def run_ours(objective: dict[str, Any], rows: list[dict[str, str]], model: str, batch_size: int, precision: str,
             device: str, warmup: int, steps: int, work: Path) -> dict[str, Any]:
    import torch

    from lmplatform.objectives import build_trainer, load_run_config
    from lmplatform.train import FolderReporter, resume_batches

    cfg = load_run_config(None, base={
        "model": {"name_or_path": model, "max_seq_length": MAX_LENGTH},
        "data": {"train_paths": ["unused.jsonl"]},
        "objective": objective,
        # fp32 is the default, left unset so that the loop from before optim.precision existed reads this too
        "optim": {"lr": LR, "batch_size": batch_size, "warmup_steps": 0, "max_steps": warmup + steps, "seed": 42}
        | ({} if precision == "fp32" else {"precision": precision}),
        "scaling": {"use_gpu": device == "cuda"},
        "checkpoint": {"every_n_steps": 1_000_000},
        "tracking": {"log_every_n_steps": warmup},
    })
    clock = Clock()
    trainer = build_trainer(cfg, warmup + steps, torch.device(device), 0, tracker=clock,
                            reporter=FolderReporter(work / "ours"))
    clock.trainer = trainer
    trainer.begin(None)
    collate = trainer.recipe.collate

    def train_batches(epoch: int, skip: int) -> Iterator[dict[str, Any]]:
        return resume_batches(epoch_batches(rows, batch_size, epoch), collate, skip)

    trainer.fit(train_batches, lambda: None)
    (start, tokens_start), (end, tokens_end) = clock.marks[warmup], clock.marks[warmup + steps]
    params = sum(p.numel() for p in trainer.params)
    return {**timed(end - start, steps, batch_size, tokens_end - tokens_start), "params": params,
            "prefetch": getattr(trainer, "prefetch", False)}


def run_peer(rows: list[dict[str, str]], model: str, batch_size: int, precision: str, device: str, warmup: int,
             steps: int, work: Path) -> dict[str, Any]:
    """sentence-transformers' own trainer, as bench/openoffice_retrieval.py `train_peer` sets it up, reading the
    same batches as our loop in the same order (its rows laid out in `epoch_batches` order, read in sequence)."""
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.base.sampler import DefaultBatchSampler
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from torch.utils.data import SequentialSampler
    from transformers import TrainerCallback

    marks: dict[int, float] = {}

    class Marks(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step in (warmup, warmup + steps):
                if device == "cuda":
                    torch.cuda.synchronize()
                marks[state.global_step] = time.perf_counter()

    ordered, epoch = [], 0
    while len(ordered) < (warmup + steps) * batch_size:
        ordered += [{"anchor": q, "positive": d} for batch in epoch_batches(rows, batch_size, epoch)
                    for q, d in zip(batch["query"], batch["document"])]
        epoch += 1
    dataset = Dataset.from_list(ordered)
    st_model = SentenceTransformer(model, device=device)
    st_model.max_seq_length = MAX_LENGTH
    args = SentenceTransformerTrainingArguments(
        output_dir=str(work / "peer"), max_steps=warmup + steps, per_device_train_batch_size=batch_size,
        learning_rate=LR, warmup_steps=0, save_strategy="no", logging_steps=1_000_000, report_to="none", seed=42,
        dataloader_drop_last=True, use_cpu=device == "cpu",
        batch_sampler=lambda dataset, **kwargs: DefaultBatchSampler(SequentialSampler(dataset), **kwargs),
        fp16=precision == "fp16", bf16=precision == "bf16",
    )
    trainer = SentenceTransformerTrainer(model=st_model, args=args, train_dataset=dataset,
                                         loss=MultipleNegativesRankingLoss(st_model, scale=1 / TEMPERATURE),
                                         callbacks=[Marks()])
    trainer.train()
    return timed(marks[warmup + steps] - marks[warmup], steps, batch_size)


def with_before(row: dict[str, Any], earlier: Optional[dict[str, Any]], rate: str) -> dict[str, Any]:
    """The row, with the earlier loop's figures and ours ÷ its `rate` where that run has the same row."""
    if not earlier:
        return row
    return row | {"before": earlier["ours"], "ours_vs_before": round(row["ours"][rate] / earlier["ours"][rate], 3)}


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=SHARED_DATA)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--steps", type=int, default=50, help="timed steps of each run")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps before them")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--peak-tflops", type=float, default=H100_BF16_DENSE_TFLOPS,
                        help="the device's dense peak for the MLM row's FLOP-bound share (default: H100 SXM bf16)")
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "mixed", "bf16"], default=["fp32", "mixed"],
                        help="mixed: fp16 on a GPU, bf16 on CPU (the MLM row runs fp32, and bf16 when any other is asked)")
    parser.add_argument("--results-name", default=None, help="bench/results/<name>.json (default gpu_train)")
    parser.add_argument("--before", type=Path, default=None,
                        help="an earlier loop's results from this run (e.g. the code before a change, run with "
                             "--results-name on the same GPU): adds ours ÷ its samples/s as ours_vs_before")
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--skip-mlm", action="store_true")
    parser.add_argument("--toy", action="store_true", help="tiny random BERT, 64 pairs, batches of 4 and 8")
    args = parser.parse_args(argv)

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    mixed = "fp16" if device == "cuda" else "bf16"
    precisions = list(dict.fromkeys(mixed if p == "mixed" else p for p in args.precisions))
    before = json.loads(args.before.read_text())["results"] if args.before else {}
    device_name = torch.cuda.get_device_name(0) if device == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    batch_sizes = [4, 8] if args.toy else args.batch_sizes
    warmup = 1 if args.toy else args.warmup
    rows = openoffice_train_pairs(args.data, limit=64 if args.toy else None)
    with tempfile.TemporaryDirectory(prefix="lmp-gpu-train-") as tmp:
        work = Path(tmp)
        if args.toy:
            model = str(tiny_bert(work / "tiny-bert"))
        else:
            from lmplatform.models import packaged_model_path

            model = str(packaged_model_path())
        biencoder = {"name": "biencoder", "temperature": TEMPERATURE, "learnable_temperature": False,
                     "symmetric": False, "max_hard_negatives": 0}
        results: dict[str, Any] = {}
        for batch_size in batch_sizes:
            for precision in precisions:
                key = f"biencoder_b{batch_size}_{precision}"
                ours = run_ours(biencoder, rows, model, batch_size, precision, device, warmup, args.steps, work / key)
                row: dict[str, Any] = {"ours": ours}
                if not args.skip_peer:
                    peer = run_peer(rows, model, batch_size, precision, device, warmup, args.steps, work / key)
                    row |= {"peer": peer, "ratio": round(ours["samples_per_s"] / peer["samples_per_s"], 3)}
                results[key] = with_before(row, before.get(key), "samples_per_s")
                print(f"{key}: {json.dumps(results[key])}", flush=True)
        texts = [{"text": t} for r in rows for t in (r["query"], r["document"])]
        mlm_precisions = ["fp32"] + (["bf16"] if precisions != ["fp32"] else [])  # the peak is a bf16 one
        for precision in () if args.skip_mlm else mlm_precisions:
            key = f"mlm_b{batch_sizes[0]}_{precision}"
            ours = run_ours({"name": "mlm"}, texts, model, batch_sizes[0], precision, device, warmup, args.steps, work / key)
            achieved = 6 * ours["params"] * ours["tokens_per_s"] / 1e12
            results[key] = with_before({"ours": ours | {"model_tflops": float(f"{achieved:.4g}"),
                                                        "share_of_peak": float(f"{achieved / args.peak_tflops:.3g}")}},
                                       before.get(key), "tokens_per_s")
            print(f"{key}: {json.dumps(results[key])}", flush=True)
    default_name = "gpu_train_toy" if args.toy else ("gpu_train" if device == "cuda" else "gpu_train_cpu")
    write_result(args.results_name or default_name, {
        "device": device_name, "steps": args.steps, "warmup_steps": warmup, "peak_tflops": args.peak_tflops,
        "pairs": len(rows), "max_seq_length": MAX_LENGTH, "results": results,
    })


if __name__ == "__main__":
    main()
