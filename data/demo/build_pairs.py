"""Build data/demo/pairs.jsonl and its train/dev/test files from the shipped duplicates and reports
(deterministic).

Each line is {"id", "query", "document", "hard_negatives", "split"}: the duplicate report's
title and text as the query, the original report it duplicates as the document,
and as hard negatives up to 2 other reports of the same component (the first ones
by id, so the file is identical on every run).

The split is by duplicate group (the original's id, md5 bucket: 50% train, 25% dev, 25% test), so
the two duplicates of a group and their original are never on two sides: training sees none of a
dev or test group. Train trains, dev selects (validation, tuning), test confirms and reports.

    python data/demo/build_pairs.py            # writes pairs.jsonl and pairs_{train,dev,test}.jsonl
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def report_text(report: dict) -> str:
    return f"{report['title']}. {report['text']}"


SPLITS = ("train", "dev", "test")


def group_split(original_id: str) -> str:
    bucket = int(hashlib.md5(original_id.encode("utf-8")).hexdigest(), 16) % 100
    return "train" if bucket < 50 else "dev" if bucket < 75 else "test"


def build(reports_path: Path, duplicates_path: Path, hard_negatives: int = 2) -> list[dict]:
    reports = {r["id"]: r for r in map(json.loads, reports_path.read_text(encoding="utf-8").splitlines()) if r}
    by_component: dict[str, list[str]] = {}
    for report_id in sorted(reports):
        by_component.setdefault(reports[report_id]["component"], []).append(report_id)
    pairs = []
    for line in duplicates_path.read_text(encoding="utf-8").splitlines():
        duplicate = json.loads(line)
        original = reports.get(duplicate["duplicate_of"])
        if original is None:
            raise SystemExit(f"{duplicate['query_id']}: duplicate_of {duplicate['duplicate_of']} is not in {reports_path}")
        others = [i for i in by_component[original["component"]] if i != original["id"]][:hard_negatives]
        pairs.append({
            "id": duplicate["query_id"],
            "query": f"{duplicate['query_title']}. {duplicate['query_text']}",
            "document": report_text(original),
            "hard_negatives": [report_text(reports[i]) for i in others],
            "split": group_split(original["id"]),
        })
    return pairs


def write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def main() -> None:
    pairs = build(HERE / "reports.jsonl", HERE / "duplicates.jsonl")
    write(HERE / "pairs.jsonl", pairs)
    counts = {}
    for split in SPLITS:
        rows = [p for p in pairs if p["split"] == split]
        write(HERE / f"pairs_{split}.jsonl", rows)
        counts[split] = len(rows)
    print(f"wrote {len(pairs)} pairs to {HERE / 'pairs.jsonl'}; by split: {counts}")


if __name__ == "__main__":
    main()
