"""GLUE probe sets (SST-2, CoLA): a train sample and the dev split of sentences with a 0/1 label.

Unlike the other evaluation readers, a bad row is not skipped: it stops the read with a ValueError
naming its file and line.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# probe -> (train file, dev file, metric)
GLUE_FILES = {"sst2": ("train_10k.jsonl", "dev.jsonl", "accuracy"), "cola": ("train.jsonl", "dev.jsonl", "matthews_corr")}


@dataclass
class ProbeData:
    name: str
    metric: str
    train_texts: list[str]
    train_labels: list[int]
    dev_texts: list[str]
    dev_labels: list[int]


def _read(path: Path) -> tuple[list[str], list[int]]:
    texts, labels = [], []
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if not isinstance(row.get("sentence"), str) or row.get("label") not in (0, 1):
                raise ValueError(f"{path}:{line_no}: needs a 'sentence' text and a 0/1 'label'")
            texts.append(row["sentence"])
            labels.append(int(row["label"]))
    return texts, labels


def read_glue_probe(name: str, root: Path, train_limit: Optional[int] = None,
                    dev_limit: Optional[int] = None, seed: int = 13) -> ProbeData:
    """A GLUE probe's train (a seeded sample of `train_limit` rows) and dev split (the first `dev_limit`);
    `root` holds one folder per probe (e.g. the shared data's glue_probes/)."""
    if name not in GLUE_FILES:
        raise ValueError(f"unknown probe {name!r}; available: {', '.join(sorted(GLUE_FILES))}")
    train_file, dev_file, metric = GLUE_FILES[name]
    train_texts, train_labels = _read(root / name / train_file)
    if train_limit and train_limit < len(train_texts):
        keep = sorted(random.Random(seed).sample(range(len(train_texts)), train_limit))
        train_texts, train_labels = [train_texts[i] for i in keep], [train_labels[i] for i in keep]
    dev_texts, dev_labels = _read(root / name / dev_file)
    return ProbeData(name, metric, train_texts, train_labels, dev_texts[:dev_limit], dev_labels[:dev_limit])
