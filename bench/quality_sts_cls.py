"""Zero-shot STS and frozen-encoder classification quality of an encoder (default: the packaged MiniLM).

STS: Spearman / Pearson of cosine vs gold, and EDRM (linear cosine [0,1] -> scale, and an
isotonic map fitted on the train split where one exists) on STS-B test, SICK test, BIOSSES (all 100).
Classification: frozen encoder + MLP head (depth 2) trained in-process on cached embeddings
(best dev epoch), plus a KNN (k=5) baseline, on medical_abstracts_tc and asrs_nmac_reports
(primary_problem), reported on the test split with accuracy, ROC-AUC, weighted/macro F1/P/R,
and a confusion-matrix PNG per model.

    python bench/quality_sts_cls.py [--model default] [--limit N] [--max-seq-length 128]

`--limit` caps every split (toy runs); full size encodes about 26k sentences and 4k documents.
`sts_quality` and `classification_quality` can be called from bench/quality.py.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).parent))
from common import RESULTS, write_result  # noqa: E402


def sts_quality(encoder: Any, limit: Optional[int] = None) -> list[dict[str, Any]]:
    from lmplatform.evaluation.sts import CosineToScale, cosine_scores, read_biosses, read_sick, read_stsb, sts_metrics

    sets = [(read_stsb("test", limit=limit), read_stsb("train", limit=limit)),
            (read_sick("test", limit=limit), read_sick("train", limit=limit)),
            (read_biosses(limit=limit), None)]
    rows = []
    for test, train in sets:
        start = time.perf_counter()
        cos = cosine_scores(encoder, test.sentence1, test.sentence2)
        row: dict[str, Any] = {"dataset": test.name, **sts_metrics(cos, test)}
        if train is not None:
            mapping = CosineToScale(test.scale, "isotonic").fit(cosine_scores(encoder, train.sentence1, train.sentence2), train.scores)
            row["edrm_isotonic"] = sts_metrics(cos, test, mapping)["edrm"]
        row["seconds"] = round(time.perf_counter() - start, 1)
        print(f"{test.name}: spearman {row['spearman']:.4f} pearson {row['pearson']:.4f} edrm {row['edrm']:.4f} "
              f"({len(test)} pairs, {row['seconds']} s)", flush=True)
        rows.append(row)
    return rows


def classification_quality(encoder: Any, limit: Optional[int] = None, out_dir: Path = RESULTS / "classification") -> list[dict[str, Any]]:
    import numpy as np
    import torch

    from lmplatform.evaluation.classification import (
        classification_metrics,
        confusion_matrix_png,
        read_asrs,
        read_medical_abstracts,
        train_frozen_head,
    )
    from lmplatform.models.classifier import KNNClassifier

    rows = []
    for data in (read_medical_abstracts(), read_asrs()):
        splits = {name: data.split(name) for name in ("train", "dev", "test")}
        if limit:
            splits = {name: (texts[:limit], labels[:limit]) for name, (texts, labels) in splits.items()}
        start = time.perf_counter()
        cached = {name: encoder.encode(texts, 32, normalize=False, show_progress=True) for name, (texts, _) in splits.items()}
        encode_s = time.perf_counter() - start
        head, info = train_frozen_head(encoder, *splits["train"], *splits["dev"], embeddings=cached)
        test_texts, test_labels = splits["test"]
        # score the test split from cached vectors: the head sees exactly what TextClassifier would compute
        with torch.no_grad():
            proba = torch.softmax(head.model.head(torch.as_tensor(cached["test"])), -1).numpy()
        known = [i for i, y in enumerate(test_labels) if y in head.labels]
        metrics = classification_metrics([test_labels[i] for i in known], proba[known], head.labels)
        confusion_matrix_png([test_labels[i] for i in known], [head.labels[j] for j in proba[known].argmax(1)], head.labels,
                             out_dir / f"{data.name}_frozen_mlp.png", title=f"{data.name} frozen + MLP")
        rows.append({"dataset": data.name, "model": "frozen encoder + MLP head", **metrics, **info,
                     "train": len(splits["train"][0]), "test": len(known), "encode_seconds": round(encode_s, 1)})
        normalised = {k: v / np.linalg.norm(v, axis=1, keepdims=True) for k, v in cached.items()}
        knn = KNNClassifier(encoder, k=5).fit(splits["train"][0], splits["train"][1], embeddings=normalised["train"])
        knn_proba = knn.predict_proba(None, embeddings=normalised["test"])
        rows.append({"dataset": data.name, "model": "KNN (k=5) on embeddings",
                     **classification_metrics([test_labels[i] for i in known], knn_proba[known], knn.labels),
                     "train": len(splits["train"][0]), "test": len(known)})
        for row in rows[-2:]:
            print(f"{data.name} / {row['model']}: accuracy {row['accuracy']:.4f} roc_auc {row['roc_auc']:.4f} "
                  f"f1_macro {row['f1_macro']:.4f} f1_weighted {row['f1_weighted']:.4f}", flush=True)
    return rows


def markdown(sts: list[dict[str, Any]], cls: list[dict[str, Any]]) -> str:
    lines = ["| STS set | pairs | Spearman | Pearson | EDRM (linear) | EDRM (isotonic) |", "|---|---|---|---|---|---|"]
    for r in sts:
        iso = f"{r['edrm_isotonic']:.4f}" if "edrm_isotonic" in r else "n/a"
        lines.append(f"| {r['dataset']} | {int(r['pairs'])} | {r['spearman']:.4f} | {r['pearson']:.4f} | {r['edrm']:.4f} | {iso} |")
    lines += ["", "| dataset | model | accuracy | ROC-AUC | F1 w | P w | R w | F1 macro | P macro | R macro |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in cls:
        lines.append(f"| {r['dataset']} | {r['model']} | " + " | ".join(f"{r[k]:.4f}" for k in (
            "accuracy", "roc_auc", "f1_weighted", "precision_weighted", "recall_weighted", "f1_macro", "precision_macro", "recall_macro")) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--limit", type=int, default=None, help="Cap every split (toy runs).")
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    from lmplatform.models.encoder import Encoder

    torch.set_num_threads(args.threads)
    encoder = Encoder.from_pretrained(args.model, max_seq_length=args.max_seq_length)
    start = time.perf_counter()
    sts = sts_quality(encoder, args.limit)
    cls = classification_quality(encoder, args.limit)
    table = markdown(sts, cls)
    print(table)
    name = "quality_sts_cls" + (f"_limit{args.limit}" if args.limit else "")
    write_result(name, {"model": args.model, "limit": args.limit, "max_seq_length": args.max_seq_length,
                        "seconds": round(time.perf_counter() - start, 1), "sts": sts, "classification": cls, "markdown": table})


if __name__ == "__main__":
    main()
