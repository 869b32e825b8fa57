"""Encoding throughput: our `Encoder.encode` (PyTorch fp32, bf16 and int8, ONNX Runtime fp32 and int8,
OpenVINO fp32, int8 and bf16) vs `SentenceTransformer.encode`, same MiniLM, and sentence-transformers' own
ONNX backend where it can run.

Same texts (title + description of real OpenOffice bug reports: mixed lengths), same batch size, same max
length, same threads, in one process. Quality cost of each row against our fp32: Spearman of cosine
similarity on STS-B test, and MRR@10 on the OpenOffice duplicates' test split (each duplicate report ranked
against all 4,548 reports but itself, the rest of its duplicate group relevant; a 95% paired bootstrap
interval of the drop over the queries). bf16 rows run only where the CPU has bf16 in hardware.

Speeds are timed in interleaved rounds (every row once a round, in turn), so a slow spell of the host touches
every row rather than one: a row's sentences/s is its best round, and its ratio is the median over rounds of
its speed over sentence-transformers' in the same round.

Choices are made on dev, never on test:
- the ONNX int8 graph's Linear layers kept in fp32: the fewest whose STS-B dev drop is within 0.01;
- the OpenVINO int8 model's layers kept in higher precision: the fewest whose STS-B dev and OpenOffice dev
  MRR@10 drops are both within 0.005 (else the smallest worse drop). Its calibration texts are OpenOffice dev
  reports (the served domain's dev split).
Targets: fp32 ratio >= 1.0, PyTorch int8 ratio >= 1.8, ONNX int8 ratio >= 3.0, OpenVINO int8 ratio >= 4.0
(all against sentence-transformers fp32); STS-B test Spearman drop <= 0.01 (PyTorch and ONNX int8) and
<= 0.005 (OpenVINO int8), OpenOffice test MRR@10 drop <= 0.005 (OpenVINO int8).

`backend: auto` (models/encode_path.py) is a row too: the path it chooses on this host, timed afresh (an empty
cache; its OpenVINO int8 candidate calibrated on the same OpenOffice dev reports), then timed in the rounds like
every other row. Targets: its ratio >= 2.5 on an AVX2-only host and >= 4.5 on an AMX host, never more than 5%
slower than the fastest single row (of those within the drop bounds) of the same run, STS-B and OpenOffice drops
<= 0.005 each.

Results are kept per host class (`encode_path.host_class`: amx, avx512_bf16, avx512_vnni, avx2):
bench/results/encode_throughput_<class>.json.

sentence-transformers' ONNX backend runs through optimum's ONNX Runtime models; the row is skipped, with
the reason, where optimum cannot be imported (optimum-onnx 0.1 requires transformers < 4.58; this project
pins transformers 5).

    python bench/encode_throughput.py [--limit 1024] [--sts-limit 0] [--batch-size 32] [--rounds 3] [--results-name NAME]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, check, write_result

CORPUS = Path("duplicate_bug_reports") / "openoffice" / "corpus.jsonl"  # under --data
STS = Path("stsbenchmark")
OPENOFFICE = Path("duplicate_bug_reports") / "openoffice"
DROP_TARGET = 0.01
OPENVINO_DROP_TARGET = 0.005
# Candidate sets of Linear layers the ONNX int8 graph keeps in fp32, fewest first; chosen on STS-B dev.
KEEP_CANDIDATES: tuple[tuple[str, ...], ...] = (
    (),
    ("encoder.layer.0.output.dense",),
    ("encoder.layer.0.output.dense", "encoder.layer.5.output.dense"),
)


def real_texts(data: Path, limit: int) -> list[str]:
    rows = [json.loads(line) for line in (data / CORPUS).read_text().splitlines()[:limit]]
    return [f"{r['title']}. {r['description']}" for r in rows]


def interleaved_rounds(encoders: dict[str, Callable[[list[str]], Any]], texts: list[str], rounds: int) -> dict[str, list[float]]:
    """Sentences/s of every encoder in each round; within a round the encoders take turns over the same texts."""
    speeds: dict[str, list[float]] = {name: [] for name in encoders}
    for encode in encoders.values():
        encode(texts[:64])  # warm-up: allocator, kernels, a runtime's compiled model
    for n in range(rounds):
        for name, encode in encoders.items():
            start = time.perf_counter()
            encode(texts)
            speeds[name].append(len(texts) / (time.perf_counter() - start))
            print(f"[bench] round {n + 1} {name}: {speeds[name][-1]:.1f} sentences/s", flush=True)
    return speeds


def median_ratios(rounds: dict[str, list[float]], base: str) -> dict[str, float]:
    """Each row's median over rounds of its speed over `base`'s in the same round."""
    return {name: float(statistics.median(v / b for v, b in zip(values, rounds[base]))) for name, values in rounds.items()}


def sts_spearman(encode, data: Path, limit: int, split: str = "test") -> float:
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
    from lmplatform.models import quantize_onnx

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


class OpenOfficeRetrieval:
    """MRR@10 of an encoder on the OpenOffice duplicates' dev and test queries (protocol in the module doc): the
    corpus is encoded once, and each query is its own report's vector (queries are reports of the corpus)."""

    def __init__(self, data: Path, limit: int = 0):
        """limit: a smoke run's size, 0 for the protocol: that many queries per split, searched among their
        duplicate groups and `limit` x 10 other reports."""
        from lmplatform.evaluation import (
            RetrievalDataset,
            RetrievalScenario,
            ScenarioInputs,
            load_retrieval_data,
            scenario_inputs,
        )

        scenario = RetrievalScenario(name="report_to_corpus", query_fields=["title", "description"],
                                     corpus_fields=["title", "description"], corpus_scope="all")
        self.splits = {}
        for split in ("dev", "test"):
            dataset = RetrievalDataset(name=split, corpus=str(data / OPENOFFICE / "corpus.jsonl"),
                                       relations=str(data / OPENOFFICE / "pairs.jsonl"), split=split, relevance="group")
            self.splits[split] = scenario_inputs(load_retrieval_data(dataset), dataset, scenario)
        self.corpus_ids, self.corpus_texts = self.splits["test"].corpus_ids, self.splits["test"].corpus_texts
        if limit:
            for split, inputs in self.splits.items():
                self.splits[split] = ScenarioInputs(inputs.query_ids[:limit], inputs.query_texts[:limit], [], [],
                                                    {q: inputs.qrels[q] for q in inputs.query_ids[:limit]}, [])
            needed = {q for inputs in self.splits.values() for q in inputs.query_ids} | {
                d for inputs in self.splits.values() for relevant in inputs.qrels.values() for d in relevant}
            keep = [n for n, d in enumerate(self.corpus_ids) if d in needed or n < limit * 10]
            self.corpus_ids = [self.corpus_ids[n] for n in keep]
            self.corpus_texts = [self.corpus_texts[n] for n in keep]

    def dev_texts(self) -> list[str]:
        """The dev queries' reports: the calibration texts of a static int8 model."""
        return self.splits["dev"].query_texts

    def mrr(self, encode: Callable[[list[str]], Any]) -> dict[str, dict[str, float]]:
        """Per-query MRR@10 for each split."""
        import numpy as np

        from lmplatform.metrics import retrieval_report

        vectors = encode(self.corpus_texts)
        row = {doc_id: n for n, doc_id in enumerate(self.corpus_ids)}
        out = {}
        for split, inputs in self.splits.items():
            queries = vectors[[row[q] for q in inputs.query_ids]]
            scores = queries @ vectors.T
            scores[np.arange(len(queries)), [row[q] for q in inputs.query_ids]] = -np.inf  # not itself
            top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
            rankings = {q: [self.corpus_ids[i] for i in ranked] for q, ranked in zip(inputs.query_ids, top)}
            report = retrieval_report(rankings, inputs.qrels, ks=(10,), mrr_ks=(10,))
            out[split] = {q: values["mrr@10"] for q, values in report.per_query.items()}
        return out


def mean(values: dict[str, float]) -> float:
    return sum(values.values()) / len(values)


def paired_drop(reference: dict[str, float], other: dict[str, float], resamples: int = 2000, seed: int = 13
                ) -> dict[str, float]:
    """Mean of reference - other over the queries and its 95% interval, resampling queries with replacement."""
    import numpy as np

    queries = sorted(reference)
    diff = np.array([reference[q] - other[q] for q in queries])
    means = diff[np.random.default_rng(seed).integers(0, len(diff), size=(resamples, len(diff)))].mean(axis=1)
    return {"mean": round(float(diff.mean()), 4), "low": round(float(np.percentile(means, 2.5)), 4),
            "high": round(float(np.percentile(means, 97.5)), 4)}


def choose_openvino_keep(fp32_folder: Path, work: Path, calibration: list[str], dev_scores: Callable[[Path], dict[str, float]],
                         reference: dict[str, float]) -> tuple[Path, tuple[str, ...], dict[str, dict[str, float]]]:
    """Quantize the OpenVINO model with each candidate keep set; the chosen folder and set, and every candidate's
    dev drops (STS-B Spearman, OpenOffice MRR@10)."""
    from lmplatform.models import quantize_openvino

    drops: dict[str, dict[str, float]] = {}
    folders: dict[tuple[str, ...], Path] = {}
    for n, keep in enumerate(KEEP_CANDIDATES):
        folders[keep] = work / f"openvino-int8-{n}"
        quantize_openvino(fp32_folder, calibration, folders[keep], keep)
        scores = dev_scores(folders[keep])
        name = ", ".join(keep) or "(none)"
        drops[name] = {metric: reference[metric] - scores[metric] for metric in reference}
        print(f"  OpenVINO int8 keeping {', '.join(keep) or 'no layer'}: dev drops {drops[name]}", flush=True)
    worst = {keep: max(drops[", ".join(keep) or "(none)"].values()) for keep in KEEP_CANDIDATES}
    within = [keep for keep in KEEP_CANDIDATES if worst[keep] <= OPENVINO_DROP_TARGET]
    chosen = within[0] if within else min(KEEP_CANDIDATES, key=lambda k: worst[k])
    return folders[chosen], chosen, drops


def st_onnx_backend(model_dir: Path, work: Path, max_seq_length: int) -> tuple[Optional[Any], str]:
    """sentence-transformers with backend='onnx' on the same model, or None and why it cannot run here."""
    try:
        import optimum.onnxruntime  # noqa: F401 - what sentence-transformers' ONNX backend runs on
    except Exception as exc:  # any failure to import means the backend cannot run
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
    parser.add_argument("--rounds", type=int, default=3, help="Interleaved timing rounds.")
    parser.add_argument("--openoffice-limit", type=int, default=0, help="OpenOffice queries per split, searched among "
                        "their groups and 10x as many other reports (0: the protocol, all of them; smoke runs only).")
    parser.add_argument("--results-name", default=None,
                        help="bench/results/<name>.json (default: encode_throughput_<host class>; smoke runs: another name).")
    args = parser.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    from lmplatform import Encoder
    from lmplatform.models import (
        CALIBRATION_SIZE,
        choose_path,
        cpu_features,
        export_onnx,
        export_openvino,
        host_class,
        native_bf16,
        packaged_model_path,
    )

    threads = torch.get_num_threads()
    bf16 = native_bf16(torch.device("cpu"))
    texts = real_texts(args.data, args.limit)
    openoffice = OpenOfficeRetrieval(args.data, args.openoffice_limit)
    work = Path(tempfile.mkdtemp(prefix="lmp-encode-bench-"))
    st = SentenceTransformer(str(packaged_model_path()), device="cpu")
    st.max_seq_length = args.max_seq_length
    fp32 = Encoder.from_pretrained("default", max_seq_length=args.max_seq_length)
    int8 = Encoder.from_pretrained("default", max_seq_length=args.max_seq_length, quantize="int8")
    export_onnx(fp32, work / "fp32")
    onnx_fp32 = Encoder.from_pretrained(work / "fp32", backend="onnx")
    export_openvino(fp32, work / "openvino-fp32")
    openvino_fp32 = Encoder.from_pretrained(work / "openvino-fp32", backend="openvino")

    def st_encode(model: Any) -> Callable[[list[str]], Any]:
        return lambda t: model.encode(t, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True)

    def ours(encoder: Encoder, precision: str = "fp32") -> Callable[[list[str]], Any]:
        return lambda t: encoder.encode(t, batch_size=args.batch_size, num_threads=threads, precision=precision)

    print("choosing the ONNX int8 layers kept in fp32 on STS-B dev", flush=True)
    fp32_dev = sts_spearman(ours(onnx_fp32), args.data, args.sts_limit, "dev")
    chosen_folder, kept, dev_drops = choose_keep_fp32(
        work / "fp32", work, lambda folder: sts_spearman(ours(Encoder.from_pretrained(folder, backend="onnx")),
                                                         args.data, args.sts_limit, "dev"), fp32_dev)
    onnx_int8 = Encoder.from_pretrained(chosen_folder, backend="onnx")
    print(f"  chosen: {', '.join(kept) or 'no layer'} kept in fp32", flush=True)

    print("choosing the OpenVINO int8 layers kept in higher precision on STS-B dev and OpenOffice dev", flush=True)

    def dev_scores(encode: Callable[[list[str]], Any]) -> dict[str, float]:
        return {"sts_b_dev_spearman": sts_spearman(encode, args.data, args.sts_limit, "dev"),
                "openoffice_dev_mrr@10": mean(openoffice.mrr(encode)["dev"])}

    calibration = openoffice.dev_texts()
    ov_folder, ov_kept, ov_dev_drops = choose_openvino_keep(
        work / "openvino-fp32", work, calibration,
        lambda folder: dev_scores(ours(Encoder.from_pretrained(folder, backend="openvino"))), dev_scores(ours(fp32)))
    openvino_int8 = Encoder.from_pretrained(ov_folder, backend="openvino")
    print(f"  chosen: {', '.join(ov_kept) or 'no layer'} kept in higher precision", flush=True)

    print("backend auto: timing its candidates on this host", flush=True)
    host = host_class(cpu_features())
    auto_choice, auto_encoder = choose_path(packaged_model_path(), calibration=calibration,
                                            max_seq_length=args.max_seq_length, batch_size=args.batch_size,
                                            cache=work / "encode_paths.json")
    print(f"  chosen on this {host} host: {auto_choice.path.label}", flush=True)

    encoders: dict[str, Callable[[list[str]], Any]] = {
        "sentence_transformers": st_encode(st), "ours_fp32": ours(fp32), "ours_int8": ours(int8),
        "ours_onnx_fp32": ours(onnx_fp32), "ours_onnx_int8": ours(onnx_int8),
        "ours_openvino_fp32": ours(openvino_fp32), "ours_openvino_int8": ours(openvino_int8),
        "ours_auto": ours(auto_encoder, auto_choice.path.precision),
    }
    if bf16:  # emulated bf16 is slower than fp32: these rows mean something only where the CPU has it
        encoders |= {"ours_bf16": ours(fp32, "bf16"), "ours_openvino_bf16": ours(openvino_fp32, "bf16"),
                     "ours_openvino_int8_bf16": ours(openvino_int8, "bf16")}
    else:
        print("bf16 rows: skipped, this CPU has no bf16 in hardware", flush=True)
    st_onnx, st_onnx_note = st_onnx_backend(packaged_model_path(), work, args.max_seq_length)
    if st_onnx is not None:
        encoders["sentence_transformers_onnx"] = st_encode(st_onnx)
    else:
        print(f"sentence_transformers_onnx: skipped, {st_onnx_note}", flush=True)

    rounds = interleaved_rounds(encoders, texts, args.rounds)
    speeds = {name: max(values) for name, values in rounds.items()}
    ratios = median_ratios(rounds, "sentence_transformers")
    for name, value in speeds.items():
        print(f"{name:>28}: {value:8.1f} sentences/s ({ratios[name]:.2f}x sentence-transformers fp32)", flush=True)
    spearman = {name: sts_spearman(encode, args.data, args.sts_limit) for name, encode in encoders.items()}
    for name, value in spearman.items():
        print(f"{name:>28}: STS-B test Spearman {value:.4f} (drop {spearman['ours_fp32'] - value:+.4f})", flush=True)
    test_mrr = {name: openoffice.mrr(encode)["test"] for name, encode in encoders.items() if name.startswith("ours_")}
    mrr_drop = {name: paired_drop(test_mrr["ours_fp32"], values) for name, values in test_mrr.items()}
    for name, values in test_mrr.items():
        print(f"{name:>28}: OpenOffice test MRR@10 {mean(values):.4f} (drop {mrr_drop[name]})", flush=True)
    within_bounds = [name for name in speeds if name.startswith("ours_") and name != "ours_auto"
                     and spearman["ours_fp32"] - spearman[name] <= OPENVINO_DROP_TARGET
                     and mrr_drop[name]["mean"] <= OPENVINO_DROP_TARGET]
    fastest = max(within_bounds, key=lambda name: speeds[name])
    auto_target = {"avx2": 2.5, "amx": 4.5}.get(host)
    checks = {
        "auto_over_fastest": check(f"backend auto / the fastest row within the drop bounds ({fastest})",
                                   speeds["ours_auto"] / speeds[fastest], 0.95),
        "auto_spearman_drop": check("STS-B test Spearman drop fp32 -> auto", spearman["ours_fp32"] - spearman["ours_auto"],
                                    OPENVINO_DROP_TARGET, higher_is_better=False),
        "auto_mrr_drop": check("OpenOffice test MRR@10 drop fp32 -> auto", mrr_drop["ours_auto"]["mean"],
                               OPENVINO_DROP_TARGET, higher_is_better=False),
        **({"auto_ratio": check(f"auto / sentence-transformers fp32 on an {host} host", ratios["ours_auto"], auto_target)}
           if auto_target else {}),
        "fp32_ratio": check("fp32 ours / sentence-transformers", ratios["ours_fp32"], 1.0),
        "int8_ratio": check("int8 ours / sentence-transformers", ratios["ours_int8"], 1.8),
        "int8_spearman_drop": check("STS-B test Spearman drop fp32 -> int8", spearman["ours_fp32"] - spearman["ours_int8"],
                                    DROP_TARGET, higher_is_better=False),
        "onnx_int8_ratio": check("ONNX int8 ours / sentence-transformers fp32", ratios["ours_onnx_int8"], 3.0),
        "onnx_int8_spearman_drop": check("STS-B test Spearman drop fp32 -> ONNX int8 (choice made on dev)",
                                         spearman["ours_fp32"] - spearman["ours_onnx_int8"], DROP_TARGET,
                                         higher_is_better=False),
        "openvino_int8_ratio": check("OpenVINO int8 ours / sentence-transformers fp32", ratios["ours_openvino_int8"], 4.0),
        "openvino_int8_spearman_drop": check("STS-B test Spearman drop fp32 -> OpenVINO int8 (choices made on dev)",
                                             spearman["ours_fp32"] - spearman["ours_openvino_int8"], OPENVINO_DROP_TARGET,
                                             higher_is_better=False),
        "openvino_int8_mrr_drop": check("OpenOffice test MRR@10 drop fp32 -> OpenVINO int8 (choices made on dev)",
                                        mrr_drop["ours_openvino_int8"]["mean"], OPENVINO_DROP_TARGET, higher_is_better=False),
    }
    write_result(args.results_name or f"encode_throughput_{host}", {
        "host_class": host, "texts": len(texts), "corpus": str(args.data / CORPUS), "batch_size": args.batch_size,
        "max_seq_length": args.max_seq_length, "threads": threads, "sts_pairs": args.sts_limit or "all",
        "native_bf16": bf16,
        "rounds": args.rounds, "sentences_per_second_by_round": rounds, "sentences_per_second": speeds,
        "ratio_to_sentence_transformers": ratios,
        "ratio_of_best_rounds": {k: v / speeds["sentence_transformers"] for k, v in speeds.items()},
        "sts_spearman": spearman,
        "sts_spearman_drop": {k: spearman["ours_fp32"] - v for k, v in spearman.items()},
        "openoffice_test_mrr@10": {k: mean(v) for k, v in test_mrr.items()},
        "openoffice_test_mrr@10_drop": mrr_drop,
        "onnx_int8": {"kept_fp32": list(kept), "chosen_on": "STS-B dev", "dev_spearman_fp32": fp32_dev,
                      "dev_drop_by_kept": dev_drops, "fused": True, "per_channel": True},
        "openvino_int8": {"kept_higher_precision": list(ov_kept), "chosen_on": "STS-B dev and OpenOffice dev MRR@10",
                          "calibration": f"{min(len(calibration), CALIBRATION_SIZE)} OpenOffice dev reports",
                          "dev_drop_by_kept": ov_dev_drops, "quantization": "NNCF static, transformer preset"},
        "auto": auto_choice.summary() | {"fastest_row_within_bounds": fastest},
        "sentence_transformers_onnx": st_onnx_note, "checks": checks,
        "toy_run": args.limit < 512 or bool(args.sts_limit) or bool(args.openoffice_limit),
    })


if __name__ == "__main__":
    main()
