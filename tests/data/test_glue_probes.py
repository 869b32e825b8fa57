"""GLUE probe files are read as documented: a seeded train sample, the first dev rows, a bad row named."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmplatform.data.glue_probes import read_glue_probe


def test_read_glue_probe_samples_train_and_rejects_bad_rows(tmp_path: Path) -> None:
    (tmp_path / "cola").mkdir()
    rows = [{"sentence": f"s{i}", "label": i % 2} for i in range(20)]
    (tmp_path / "cola" / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "cola" / "dev.jsonl").write_text("\n".join(json.dumps(r) for r in rows[:6]) + "\n")
    probe = read_glue_probe("cola", tmp_path, train_limit=5, dev_limit=4)
    assert probe.metric == "matthews_corr" and len(probe.train_texts) == 5 and len(set(probe.train_texts)) == 5
    assert probe.dev_texts == ["s0", "s1", "s2", "s3"] and probe.dev_labels == [0, 1, 0, 1]
    assert read_glue_probe("cola", tmp_path, train_limit=5).train_texts == probe.train_texts  # seeded
    (tmp_path / "cola" / "dev.jsonl").write_text(json.dumps({"sentence": "x", "label": "yes"}) + "\n")
    with pytest.raises(ValueError, match=r"dev\.jsonl:1"):
        read_glue_probe("cola", tmp_path)
    with pytest.raises(ValueError, match="unknown probe 'mnli'"):
        read_glue_probe("mnli", tmp_path)
