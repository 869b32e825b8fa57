"""Build general paraphrase pairs for the pipeline presets (deterministic).

Each line written is {"query", "document", "source"}: a sentence pair scored at least
MIN_SCORE (4 = "mostly equivalent") on the STS scale, its first sentence as the query and
its second as the document.

    python data/general/build_pairs.py
        writes data/general/paraphrase_pairs.jsonl from the shipped sts_pairs.jsonl only
        (the committed file; the presets' general stage trains on it).

    python data/general/build_pairs.py --data ../shared/data --out /somewhere/general_pairs.jsonl
        the shipped pairs, then STS-B train pairs scored >= 4 and SICK train pairs that are
        ENTAILMENT or have relatedness >= 4 (a few thousand pairs, for bigger runs). Public data
        keeps its own license, so this file must be written outside the repository:
        point a preset at it with --set stages.general.data.train_paths=[/somewhere/general_pairs.jsonl].

Rows are read and written in file order; a pair whose two sentences are the same text, or
that repeats an earlier (query, document), is left out, so the output is identical on every run.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Iterable, Iterator, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SHIPPED = HERE / "sts_pairs.jsonl"
DEFAULT_OUT = HERE / "paraphrase_pairs.jsonl"
MIN_SCORE = 4.0
# Paths inside the shared data folder (see its README.md).
STSB_TRAIN = Path("stsbenchmark") / "sts-train.jsonl"
SICK = Path("sick") / "sick.jsonl"


def _rows(path: Path) -> Iterator[tuple[int, dict]]:
    if not path.is_file():
        raise SystemExit(f"{path}: not found")
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SystemExit(f"{path}:{number}: not valid JSON ({exc.msg})") from None
            yield number, row


def _fields(path: Path, number: int, row: dict, *names: str) -> list:
    missing = [name for name in names if name not in row]
    if missing:
        raise SystemExit(f"{path}:{number}: missing field(s) {', '.join(missing)}")
    return [row[name] for name in names]


def shipped_pairs(path: Path = SHIPPED) -> Iterator[dict]:
    for number, row in _rows(path):
        s1, s2, score, pair_id = _fields(path, number, row, "sentence1", "sentence2", "score", "id")
        if float(score) >= MIN_SCORE:
            yield {"query": s1, "document": s2, "source": f"general:{pair_id}"}


def stsb_train_pairs(data: Path) -> Iterator[dict]:
    path = data / STSB_TRAIN
    for number, row in _rows(path):
        s1, s2, score = _fields(path, number, row, "sentence1", "sentence2", "score")
        if float(score) >= MIN_SCORE:
            # sid repeats across the sub-datasets; the source file and year make it unique
            yield {"query": s1, "document": s2, "source": f"stsb-train:{row.get('source_file')}/{row.get('year')}/{row.get('sid')}"}


def sick_train_pairs(data: Path) -> Iterator[dict]:
    path = data / SICK
    for number, row in _rows(path):
        split, s1, s2, relatedness, label = _fields(
            path, number, row, "split", "sentence1", "sentence2", "relatedness_score", "entailment_label")
        if split == "train" and (label == "ENTAILMENT" or float(relatedness) >= MIN_SCORE):
            yield {"query": s1, "document": s2, "source": f"sick-train:{row.get('pair_id')}"}


def unique(pairs: Iterable[dict]) -> Iterator[dict]:
    """Drop pairs of one text with itself (nothing to learn) and repeats of an earlier pair."""
    seen: set[tuple[str, str]] = set()
    for pair in pairs:
        key = (pair["query"].strip(), pair["document"].strip())
        if key[0] == key[1] or key in seen:
            continue
        seen.add(key)
        yield pair


def build(data: Optional[Path] = None) -> list[dict]:
    sources: list[Iterable[dict]] = [shipped_pairs()]
    if data is not None:
        sources += [stsb_train_pairs(data), sick_train_pairs(data)]
    return list(unique(pair for source in sources for pair in source))


def _inside_repo(path: Path) -> bool:
    return path.resolve().is_relative_to(REPO)


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None,
                        help="the shared data folder (holding stsbenchmark/ and sick/): add STS-B and SICK train pairs")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"output JSONL (default: {DEFAULT_OUT.relative_to(REPO)}; with --data: required, outside the repository)")
    args = parser.parse_args(argv)
    if args.data is not None:
        if args.out is None:
            parser.error("--data needs --out: pairs from public data sets are written outside the repository")
        if _inside_repo(args.out):
            parser.error(f"--out {args.out} is inside the repository ({REPO}); STS-B/SICK text must not be committed")
        if not args.data.is_dir():
            parser.error(f"--data {args.data}: not a folder")
    out = args.out or DEFAULT_OUT
    pairs = build(args.data)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs), encoding="utf-8")
    counts: dict[str, int] = {}
    for pair in pairs:
        name = pair["source"].split(":", 1)[0]
        counts[name] = counts.get(name, 0) + 1
    print(f"wrote {len(pairs)} pairs to {out} ({', '.join(f'{k} {v}' for k, v in counts.items())})")


if __name__ == "__main__":
    main()
