"""Encoding throughput: our `Encoder.encode` (PyTorch fp32 and int8, ONNX Runtime fp32 and int8) vs
`SentenceTransformer.encode`, same MiniLM, and sentence-transformers' own ONNX backend where it can run.

Same texts (title + description of real OpenOffice bug reports: mixed lengths), same batch size, same max
length, same threads, in one process. Quality cost of int8: Spearman of cosine similarity on STS-B.
The ONNX int8 graph's choice of Linear layers kept in fp32 is made on STS-B **dev** (the fewest kept
layers whose dev drop is within the target; else the smallest drop), and its drop is reported on **test**.
Targets: fp32 ratio >= 1.0, PyTorch int8 ratio >= 1.8, ONNX int8 ratio >= 3.0 (all against
sentence-transformers fp32), STS-B test Spearman drop (fp32 - int8) <= 0.01.

sentence-transformers' ONNX backend runs through optimum's ONNX Runtime models; the row is skipped, with
the reason, where optimum cannot be imported (optimum-onnx 0.1 requires transformers < 4.58; this project
pins transformers 5).

    python bench/encode_throughput.py [--limit 1024] [--sts-limit 0] [--batch-size 32] [--repeats 2] [--results-name NAME]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, check, write_result  # noqa: E402

CORPUS = Path("duplicate_bug_reports") / "openoffice" / "corpus.jsonl"  # under --data
STS = Path("stsbenchmark")
DROP_TARGET = 0.01
# Candidate sets of Linear layers the ONNX int8 graph keeps in fp32, fewest first; chosen on STS-B dev.
KEEP_CANDIDATES: tuple[tuple[str, ...], ...] = (
    (),
    ("encoder.layer.0.output.dense",),
    ("encoder.layer.0.output.dense", "encoder.layer.5.output.dense"),
)


def real_texts(data: Path, limit: int) -> list[str]:
    rows = [json.loads(line) for line in (data / CORPUS).read_text().splitlines()[:limit]]
    return [f"{r['title']}. {r['description']}" for r in rows]


def timed(encode, texts: list[str], repeats: int) -> float:  # noqa: ANN001
    encode(texts[:64])  # warm-up: allocator, kernels
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        encode(texts)
        best = min(best, time.perf_counter() - start)
    return len(texts) / best


def sts_spearman(encode, data: Path, limit: int, split: str = "test") -> float:  # noqa: ANN001
    import numpy as np
    from scipy.stats import spearmanr

    rows = [json.loads(line) for line in (data / STS / f"sts-{split}.jsonl").read_text().splitlines()]
    if limit:
        rows = rows[:limit]
    a = encode([r["sentence1"] for r in rows])
    b = encode([r["sentence2"] for r in rows])
    cosine = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(spearmanr(cosine, [r["score"] for r in rows]).statistic)


def choose_keep_fp32(fp32_folder: Path, work: Path, score_dev: Callable[[Path], float], fp32_dev: float,
                     ) -> tuple[Path, tuple[str, ...], dict[str, float]]:
    """Quantize with each candidate keep set; the chosen folder and set, and every candidate's dev drop."""
    from lmplatform.models.onnx_backend import quantize_onnx

    drops: dict[str, float] = {}
    folders: dict[tuple[str, ...], Path] = {}
    for n, keep in enumerate(KEEP_CANDIDATES):
        folders[keep] = work / f"int8-{n}"
        quantize_onnx(fp32_folder, keep, folders[keep])
        drops[", ".join(keep) or "(none)"] = fp32_dev - score_dev(folders[keep])
        print(f"  int8 keeping {', '.join(keep) or 'no layer'} in fp32: STS-B dev drop {drops[', '.join(keep) or '(none)']:+.4f}")
    within = [keep for keep in KEEP_CANDIDATES if drops[", ".join(keep) or "(none)"] <= DROP_TARGET]
    chosen = within[0] if within else min(KEEP_CANDIDATES, key=lambda k: drops[", ".join(k) or "(none)"])
    return folders[chosen], chosen, drops


def st_onnx_backend(model_dir: Path, work: Path, max_seq_length: int) -> tuple[Optional[Any], str]:
    """sentence-transformers with backend='onnx' on the same model, or None and why it cannot run here."""
    try:
        import optimum.onnxruntime  # noqa: F401 - what sentence-transformers' ONNX backend runs on
    except Exception as exc:  # noqa: BLE001 - any failure to import means the backend cannot run
        return None, f"optimum.onnxruntime cannot be imported ({type(exc).__name__}: {str(exc)[:160]})"
    import shutil

    from sentence_transformers import SentenceTransformer

    local = work / "st-onnx"
    shutil.copytree(model_dir, local)  # it writes onnx/model.onnx beside the model
    model = SentenceTransformer(str(local), device="cpu", backend="onnx")
    model.max_seq_length = max_seq_length
    return model, "sentence-transformers backend='onnx' (optimum export)"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="The shared data folder (OpenOffice reports, STS-B).")
    parser.add_argument("--limit", type=int, default=1024, help="Texts encoded for throughput.")
    parser.add_argument("--sts-limit", type=int, default=0, help="STS-B dev and test pairs (0: all 1,500 and 1,379).")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--results-name", default="encode_throughput", help="bench/results/<name>.json (smoke runs: another name).")
    args = parser.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    from lmplatform.models.encoder import Encoder
    from lmplatform.models.onnx_backend import export_onnx
    from lmplatform.models.resolve import packaged_model_path

    threads = torch.get_num_threads()
    texts = real_texts(args.data, args.limit)
    work = Path(tempfile.mkdtemp(prefix="lmp-encode-bench-"))
    st = SentenceTransformer(str(packaged_model_path()), device="cpu")
    st.max_seq_length = args.max_seq_length
    fp32 = Encoder.from_pretrained("default", max_seq_length=args.max_seq_length)
    int8 = Encoder.from_pretrained("default", max_seq_length=args.max_seq_length, quantize="int8")
    export_onnx(fp32, work / "fp32")
    onnx_fp32 = Encoder.from_pretrained(work / "fp32", backend="onnx")

    def st_encode(model: Any) -> Callable[[list[str]], Any]:
        return lambda t: model.encode(t, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True)

    def ours(encoder: Encoder) -> Callable[[list[str]], Any]:
        return lambda t: encoder.encode(t, batch_size=args.batch_size, num_threads=threads)

    print("choosing the ONNX int8 layers kept in fp32 on STS-B dev")
    fp32_dev = sts_spearman(ours(onnx_fp32), args.data, args.sts_limit, "dev")
    chosen_folder, kept, dev_drops = choose_keep_fp32(
        work / "fp32", work, lambda folder: sts_spearman(ours(Encoder.from_pretrained(folder, backend="onnx")),
                                                         args.data, args.sts_limit, "dev"), fp32_dev)
    onnx_int8 = Encoder.from_pretrained(chosen_folder, backend="onnx")
    print(f"  chosen: {', '.join(kept) or 'no layer'} kept in fp32")

    encoders: dict[str, Callable[[list[str]], Any]] = {
        "sentence_transformers": st_encode(st), "ours_fp32": ours(fp32), "ours_int8": ours(int8),
        "ours_onnx_fp32": ours(onnx_fp32), "ours_onnx_int8": ours(onnx_int8),
    }
    st_onnx, st_onnx_note = st_onnx_backend(packaged_model_path(), work, args.max_seq_length)
    if st_onnx is not None:
        encoders["sentence_transformers_onnx"] = st_encode(st_onnx)
    else:
        print(f"sentence_transformers_onnx: skipped, {st_onnx_note}")

    speeds = {name: timed(encode, texts, args.repeats) for name, encode in encoders.items()}
    for name, value in speeds.items():
        print(f"{name:>28}: {value:8.1f} sentences/s ({value / speeds['sentence_transformers']:.2f}x)")
    spearman = {name: sts_spearman(encode, args.data, args.sts_limit) for name, encode in encoders.items()}
    for name, value in spearman.items():
        print(f"{name:>28}: STS-B test Spearman {value:.4f}")
    base = speeds["sentence_transformers"]
    checks = {
        "fp32_ratio": check("fp32 ours / sentence-transformers", speeds["ours_fp32"] / base, 1.0),
        "int8_ratio": check("int8 ours / sentence-transformers", speeds["ours_int8"] / base, 1.8),
        "int8_spearman_drop": check("STS-B test Spearman drop fp32 -> int8", spearman["ours_fp32"] - spearman["ours_int8"],
                                    DROP_TARGET, higher_is_better=False),
        "onnx_int8_ratio": check("ONNX int8 ours / sentence-transformers fp32", speeds["ours_onnx_int8"] / base, 3.0),
        "onnx_int8_spearman_drop": check("STS-B test Spearman drop fp32 -> ONNX int8 (choice made on dev)",
                                         spearman["ours_fp32"] - spearman["ours_onnx_int8"], DROP_TARGET,
                                         higher_is_better=False),
    }
    write_result(args.results_name, {
        "texts": len(texts), "corpus": str(args.data / CORPUS), "batch_size": args.batch_size,
        "max_seq_length": args.max_seq_length, "threads": threads, "sts_pairs": args.sts_limit or "all",
        "sentences_per_second": speeds, "ratio_to_sentence_transformers": {k: v / base for k, v in speeds.items()},
        "sts_spearman": spearman,
        "onnx_int8": {"kept_fp32": list(kept), "chosen_on": "STS-B dev", "dev_spearman_fp32": fp32_dev,
                      "dev_drop_by_kept": dev_drops, "fused": True, "per_channel": True},
        "sentence_transformers_onnx": st_onnx_note, "checks": checks,
        "toy_run": args.limit < 512 or bool(args.sts_limit),
    })


if __name__ == "__main__":
    main()
