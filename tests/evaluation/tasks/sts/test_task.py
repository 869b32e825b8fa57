"""The sts task: cosine scoring, Spearman and EDRM computed by hand, the scale inferred."""
import json
from math import sqrt
from pathlib import Path

import numpy as np
import pytest

from lmplatform.data.sts_pairs import STSPairs
from lmplatform.evaluation.tasks.sts.config import StsDataset, StsTask
from lmplatform.evaluation.tasks.sts.task import cosine_scores, read_sts_dataset, run, score_sts
from lmplatform.metrics.sts import spearman

# Two identical pairs (cosine 1) with gold 5, two different pairs (cosine < 1) with gold 2, scale 1-5.
# The identical pairs share one sentence so that their cosines tie exactly (1 +- float rounding otherwise).
PAIRS = [
    {"a": "the printer jams every morning", "b": "the printer jams every morning", "gold": 5.0},
    {"a": "the printer jams every morning", "b": "the printer jams every morning", "gold": 5.0},
    {"a": "payment gateway invoice timeout", "b": "mobile app screen button", "gold": 2.0},
    {"a": "disk memory backup queue", "b": "certificate expired login", "gold": 2.0},
]


def write_pairs(path: Path, rows: list[dict], extra_lines: tuple[str, ...] = ()) -> str:
    path.write_text("\n".join([json.dumps(r) for r in rows] + list(extra_lines)) + "\n")
    return str(path)


def test_sts_task_spearman_and_edrm_by_hand(tiny_bert: Path, tmp_path: Path) -> None:
    path = write_pairs(tmp_path / "pairs.jsonl", PAIRS, extra_lines=('{"a": "x", "b": "y", "gold": 9}', "{broken"))
    task = StsTask(task="sts", datasets=[StsDataset(name="toy", path=path, sentence1_field="a", sentence2_field="b",
                                                    score_field="gold", scale=(1.0, 5.0), fit_path=path)],
                   encoders=[{"name": "tiny", "model": str(tiny_bert), "max_seq_length": 32}],
                   # any cosine below 0.9999 maps to the scale's low end (1), an identical pair's cosine 1 to 5
                   cosine_range=(0.9999, 1.0))
    result = run(task, tmp_path / "out")
    row = result.details["results"][0]
    metrics = row["metrics"]
    # off-scale gold 9 and the broken line, counted in the scored file and again in the fit file (the same file here)
    assert row["pairs"] == 4 and row["bad_rows"] == 4
    # Ranks centred on 2.5: gold (1, 1, -1, -1); predicted (1, 1, and -1.5, -0.5 in some order).
    # Spearman = (1 + 1 + 1.5 + 0.5) / (2 * sqrt(1 + 1 + 2.25 + 0.25)) = 2 / sqrt(4.5), whatever the order.
    assert metrics["spearman"] == pytest.approx(2 / sqrt(4.5))
    assert 0 < metrics["pearson"] <= 1
    # EDRM: identical pairs exact (1 each); different pairs predicted 1 for gold 2, dmax = max(2-1, 5-2) = 3 -> 2/3 each.
    assert metrics["edrm"] == pytest.approx((1 + 1 + 2 / 3 + 2 / 3) / 4)
    # Isotonic map fitted on the same pairs sends the two cosine levels to 2 and 5 exactly.
    assert metrics["edrm_isotonic"] == pytest.approx(1.0)
    assert result.metrics["toy.tiny.spearman"] == metrics["spearman"]
    assert "| toy | tiny | 4 | 1–5 | 0.9428 |" in result.markdown
    assert (tmp_path / "out" / "sts_scatter_toy.png").stat().st_size > 1000


def test_sts_scale_is_inferred_from_gold(tmp_path: Path) -> None:
    rows = [{"sentence1": "a", "sentence2": "b", "score": s} for s in (0.5, 3.0, 4.0)]
    pairs, fit = read_sts_dataset(StsDataset(name="x", path=write_pairs(tmp_path / "p.jsonl", rows)))
    assert pairs.scale == (0.5, 4.0) and fit is None


def test_cosine_scores_and_score_sts_with_a_tiny_encoder(tiny_bert: Path) -> None:
    from lmplatform.models.encoder import Encoder

    encoder = Encoder.from_pretrained(tiny_bert)
    s1 = ["disk full on server", "vpn tunnel down", "disk full on server"]
    s2 = ["disk full on server", "printer jam", "memory error"]
    cos = cosine_scores(encoder, s1, s2)
    vectors = encoder.encode(s1 + s2)
    expected = np.sum(vectors[:3] * vectors[3:], axis=1)
    assert cos == pytest.approx(expected, abs=1e-5) and cos[0] == pytest.approx(1.0, abs=1e-5)
    pairs = STSPairs("toy", s1, s2, np.array([5.0, 0.0, 1.0]), (0.0, 5.0))
    metrics, cosines = score_sts(encoder, pairs)
    assert cosines == pytest.approx(cos)
    assert set(metrics) == {"spearman", "pearson", "edrm", "pairs"} and metrics["pairs"] == 3
    assert metrics["spearman"] == pytest.approx(spearman(cos, [5.0, 0.0, 1.0]))
