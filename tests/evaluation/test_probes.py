"""The linear probe separates what is separable and scores chance as chance; GLUE files are read as documented."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lmplatform.evaluation.probes import linear_probe, read_glue_probe


def test_linear_probe_scores_separable_features_high_and_noise_near_zero_mcc() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400)
    signal = rng.normal(size=(400, 8)) + 3.0 * y[:, None]
    good = linear_probe(signal[:300], y[:300], signal[300:], y[300:])
    assert good["accuracy"] > 0.95 and good["matthews_corr"] > 0.9 and good["dev"] == 100
    noise = rng.normal(size=(400, 8))
    bad = linear_probe(noise[:300], y[:300], noise[300:], y[300:])
    assert abs(bad["matthews_corr"]) < 0.3


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
