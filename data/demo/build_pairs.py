"""Build data/demo/pairs.jsonl from the shipped duplicates and reports (deterministic).

Each line is {"id", "query", "document", "hard_negatives"}: the duplicate report's
title and text as the query, the original report it duplicates as the document,
and as hard negatives up to 2 other reports of the same component (the first ones
by id, so the file is identical on every run).

    python data/demo/build_pairs.py            # writes data/demo/pairs.jsonl
"""
from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def report_text(report: dict) -> str:
    return f"{report['title']}. {report['text']}"


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
        })
    return pairs


def main() -> None:
    pairs = build(HERE / "reports.jsonl", HERE / "duplicates.jsonl")
    out = HERE / "pairs.jsonl"
    out.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs), encoding="utf-8")
    print(f"wrote {len(pairs)} pairs to {out}")


if __name__ == "__main__":
    main()
