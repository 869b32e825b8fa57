"""Synthetic ADE-style sentences whose relation is decided by context, not by the words themselves."""
from __future__ import annotations

import json
import random
from pathlib import Path

DRUGS = "aspirin ibuprofen warfarin heparin insulin morphine lithium digoxin".split()
EFFECTS = "rash nausea bleeding headache fever dizziness seizure cough".split()
FILLER = "the patient was then observed during week two of therapy and".split()


def synthetic_sentence(rng: random.Random, index: int) -> dict:
    """`<drug1> caused <effect> while <drug2> was continued` (or the mirrored order): only drug1 is related."""
    cause, other = rng.sample(DRUGS, 2)
    effect = rng.choice(EFFECTS)
    prefix = rng.sample(FILLER, rng.randint(0, 3))
    if rng.random() < 0.5:
        body = [cause, "caused", effect, "while", other, "was", "continued"]
        spans = {"cause": 0, "effect": 2, "other": 4}
    else:
        body = [other, "was", "continued", "while", cause, "caused", effect]
        spans = {"cause": 4, "effect": 6, "other": 0}
    tokens = prefix + body + ["."]
    shift = len(prefix)
    entities = [
        {"type": "Adverse-Effect", "start": spans["effect"] + shift, "end": spans["effect"] + shift + 1},
        {"type": "Drug", "start": spans["cause"] + shift, "end": spans["cause"] + shift + 1},
        {"type": "Drug", "start": spans["other"] + shift, "end": spans["other"] + shift + 1},
    ]
    return {"id": index, "tokens": tokens, "entities": entities,
            "relations": [{"type": "Adverse-Effect", "head": 0, "tail": 1}]}


def write_synthetic_ade(path: Path, n: int = 120, seed: int = 0, folds: int = 2) -> tuple[Path, Path]:
    """The sentences as JSONL and a folds.json in the ADE layout."""
    rng = random.Random(seed)
    rows = [synthetic_sentence(rng, i) for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    split = {}
    for k in range(folds):
        test = [r["id"] for r in rows if r["id"] % folds == k]
        split[f"split_{k}"] = {"train": [r["id"] for r in rows if r["id"] % folds != k], "test": test}
    folds_path = path.with_name("folds.json")
    folds_path.write_text(json.dumps(split))
    return path, folds_path
