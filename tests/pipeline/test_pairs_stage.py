"""The pairs stage writes what `lmp data pairs` writes, per split, and cuts a split in two by duplicate group."""
from __future__ import annotations

import json
from pathlib import Path

from lmplatform.pipeline.pairs import holdout_part, write_pairs
from lmplatform.pipeline.pairs_config import HoldoutConfig, PairsConfig
from tests.conftest import write_duplicate_reports


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_pairs_per_split_with_a_held_out_half_of_dev_by_group(tmp_path: Path) -> None:
    corpus, relations = write_duplicate_reports(tmp_path / "data", groups=40)
    with relations.open("a") as handle:
        handle.write("{not json\n")
    holdout = HoldoutConfig(split="dev", into=("dev_select", "dev_confirm"), fraction=0.5)
    cfg = PairsConfig(corpus=str(corpus), relations=str(relations), holdout=holdout)
    files, metrics, bad = write_pairs(cfg, tmp_path / "out")

    assert list(files) == ["train", "dev_select", "dev_confirm", "test"] and not (tmp_path / "out" / "dev.jsonl").exists()
    assert len(bad) == 1 and bad[0].startswith(f"{relations}:") and metrics["pairs/bad_rows"] == 1
    select, confirm = _rows(files["dev_select"]), _rows(files["dev_confirm"])
    assert select and confirm  # 10 dev groups, split about half and half
    assert not {r["group"] for r in select} & {r["group"] for r in confirm}  # a group is on one side only
    assert all(holdout_part(r["group"], holdout) == 0 for r in select)
    assert all(holdout_part(r["group"], holdout) == 1 for r in confirm)
    reports = {json.loads(line)["id"]: json.loads(line) for line in corpus.read_text().splitlines()}
    dev_links = [json.loads(line) for line in relations.read_text().splitlines()[:-1] if '"dev"' in line]
    assert len(select) + len(confirm) == len(dev_links)  # every dev relation, once
    first = dev_links[0]
    expected = f"{reports[first['duplicate_id']]['title']}. {reports[first['duplicate_id']]['description']}"
    assert expected in {r["query"] for r in select + confirm}  # title and description joined as the readers join them
    for name, path in files.items():
        rows = _rows(path)
        assert metrics[f"pairs/{name}_pairs"] == len(rows) and metrics[f"pairs/{name}_groups"] == len({r["group"] for r in rows})


def test_without_holdout_every_split_is_one_file(tmp_path: Path) -> None:
    corpus, relations = write_duplicate_reports(tmp_path / "data")
    files, _, bad = write_pairs(PairsConfig(corpus=str(corpus), relations=str(relations), limit=3), tmp_path / "out")
    assert list(files) == ["train", "dev", "test"] and not bad
    assert [len(_rows(path)) for path in files.values()] == [3, 3, 3]
