"""Encoding throughput: our `Encoder.encode` (fp32 and int8) vs `SentenceTransformer.encode`, same MiniLM.

Same texts (title + description of real OpenOffice bug reports: mixed lengths),
same batch size, same max length, same threads, in one process. Quality cost of
int8: Spearman of cosine similarity on STS-B test (scipy).
Targets: fp32 ratio >= 1.0, int8 ratio >= 1.8, STS-B Spearman drop (fp32 - int8) <= 0.01.

    python bench/encode_throughput.py [--limit 1024] [--sts-limit 0] [--batch-size 32] [--repeats 2]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, check, write_result  # noqa: E402

CORPUS = Path("duplicate_bug_reports") / "openoffice" / "corpus.jsonl"  # under --data
STS = Path("stsbenchmark") / "sts-test.jsonl"


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


def sts_spearman(encode, data: Path, limit: int) -> float:  # noqa: ANN001
    import numpy as np
    from scipy.stats import spearmanr

    rows = [json.loads(line) for line in (data / STS).read_text().splitlines()]
    if limit:
        rows = rows[:limit]
    a = encode([r["sentence1"] for r in rows])
    b = encode([r["sentence2"] for r in rows])
    cosine = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(spearmanr(cosine, [r["score"] for r in rows]).statistic)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="The shared data folder (OpenOffice reports, STS-B).")
    parser.add_argument("--limit", type=int, default=1024, help="Texts encoded for throughput.")
    parser.add_argument("--sts-limit", type=int, default=0, help="STS-B test pairs (0: all 1,379).")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    from lmplatform.models.encoder import Encoder
    from lmplatform.models.resolve import packaged_model_path

    threads = torch.get_num_threads()
    texts = real_texts(args.data, args.limit)
    st = SentenceTransformer(str(packaged_model_path()), device="cpu")
    st.max_seq_length = args.max_seq_length
    fp32 = Encoder.from_pretrained("default", max_seq_length=args.max_seq_length)
    int8 = Encoder.from_pretrained("default", max_seq_length=args.max_seq_length, quantize="int8")

    def st_encode(t: list[str]):  # noqa: ANN202
        return st.encode(t, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True)

    def ours(encoder: Encoder):  # noqa: ANN202
        return lambda t: encoder.encode(t, batch_size=args.batch_size, num_threads=threads)

    speeds = {
        "sentence_transformers": timed(st_encode, texts, args.repeats),
        "ours_fp32": timed(ours(fp32), texts, args.repeats),
        "ours_int8": timed(ours(int8), texts, args.repeats),
    }
    for name, value in speeds.items():
        print(f"{name:>22}: {value:8.1f} sentences/s")
    spearman = {
        "sentence_transformers": sts_spearman(st_encode, args.data, args.sts_limit),
        "ours_fp32": sts_spearman(ours(fp32), args.data, args.sts_limit),
        "ours_int8": sts_spearman(ours(int8), args.data, args.sts_limit),
    }
    for name, value in spearman.items():
        print(f"{name:>22}: STS-B test Spearman {value:.4f}")
    ratio_fp32 = speeds["ours_fp32"] / speeds["sentence_transformers"]
    ratio_int8 = speeds["ours_int8"] / speeds["sentence_transformers"]
    drop = spearman["ours_fp32"] - spearman["ours_int8"]
    checks = {
        "fp32_ratio": check("fp32 ours / sentence-transformers", ratio_fp32, 1.0),
        "int8_ratio": check("int8 ours / sentence-transformers", ratio_int8, 1.8),
        "int8_spearman_drop": check("STS-B Spearman drop fp32 -> int8", drop, 0.01, higher_is_better=False),
    }
    write_result("encode_throughput", {
        "texts": len(texts), "corpus": str(args.data / CORPUS), "batch_size": args.batch_size, "max_seq_length": args.max_seq_length,
        "threads": threads, "sts_pairs": args.sts_limit or "all", "sentences_per_second": speeds,
        "sts_spearman": spearman, "checks": checks, "toy_run": args.limit < 512 or bool(args.sts_limit),
    })


if __name__ == "__main__":
    main()
