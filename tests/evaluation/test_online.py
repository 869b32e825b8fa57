"""The online protocol (Sun et al. 2011) checked by hand on small timelines."""
import json
import time
from pathlib import Path

import numpy as np
import pytest

from lmplatform.evaluation.online import (
    Timeline,
    bucket_rank,
    bucket_ranking,
    candidate_mask,
    evaluate_online,
    metric_interval,
    online_queries,
    paired_difference,
    split_queries,
    timeline_from_files,
)

DAY = 86400.0
# id, filing day, group: G1 = a c e h, G2 = d g u (u: unknown time), b and f in no group
REPORTS = [("a", 0, "G1"), ("b", 2, None), ("c", 4, "G1"), ("d", 6, "G2"), ("e", 8, "G1"), ("f", 10, None),
           ("g", 12, "G2"), ("h", 15, "G1"), ("u", None, "G2")]
IDS = [r[0] for r in REPORTS]
# each query's score of every report (0 where not named); later reports and u score high but are never candidates
SCORES = {
    "c": {"a": 0.3, "b": 0.3, "d": 9, "e": 9, "f": 9, "g": 9, "h": 9, "u": 9},  # G1 ties with b: ranked 2nd
    "e": {"a": 0.1, "c": 0.45, "b": 0.5, "d": 0.4, "f": 9, "g": 9, "h": 9},  # b .5, G1 .45, G2 .4: 2nd
    "g": {"h": 100, "u": 50, "a": 0.9, "b": 0.8, "d": 0.7, "c": 0.1, "e": 0.2, "f": 0.3},  # G1, b, G2: 3rd
    "h": {"a": 0.9, "c": 0.8, "e": 0.7, "g": 0.65, "b": 0.6, "d": 0.5, "f": 0.1, "u": 5},  # G1 (a, c, e): 1st
}


def make_timeline() -> Timeline:
    return Timeline(IDS, [None if day is None else day * DAY for _, day, _ in REPORTS], [g for _, _, g in REPORTS])


def score_fn(timeline: Timeline, table: dict = SCORES):
    calls = []

    def scores(batch: np.ndarray) -> np.ndarray:
        calls.append(len(batch))
        return np.array([[table[timeline.ids[q]].get(doc, 0.0) for doc in timeline.ids] for q in batch])

    scores.calls = calls  # type: ignore[attr-defined]
    return scores


def ids_of(timeline: Timeline, indices) -> list[str]:
    return [timeline.ids[i] for i in indices]


def test_queries_are_later_members_of_known_time() -> None:
    t = make_timeline()
    assert ids_of(t, online_queries(t)) == ["c", "e", "g", "h"]  # a, d: earliest; b, f: no group; u: unknown time
    assert ids_of(t, online_queries(t, start=5 * DAY, end=12 * DAY)) == ["e"]  # [start, end): g (day 12) is out
    assert t.unknown_time == 1 and t.counts["reports"] == 9


def test_candidates_are_earlier_reports_within_the_window() -> None:
    t = make_timeline()
    g = IDS.index("g")
    assert ids_of(t, np.flatnonzero(candidate_mask(t, g, 365.0))) == ["a", "b", "c", "d", "e", "f"]  # not h, u, g
    assert ids_of(t, np.flatnonzero(candidate_mask(t, g, 4.0))) == ["e", "f"]  # day 8 is exactly 4 days earlier: in
    assert ids_of(t, np.flatnonzero(candidate_mask(t, g, None))) == ["a", "b", "c", "d", "e", "f"]
    with pytest.raises(ValueError, match="no known time"):
        candidate_mask(t, IDS.index("u"), 365.0)


def test_a_bucket_takes_one_place() -> None:
    t = make_timeline()
    h = IDS.index("h")
    scores = np.array([SCORES["h"].get(doc, 0.0) for doc in IDS])
    buckets, best = bucket_ranking(scores, candidate_mask(t, h), t.bucket_of)
    # G1 (a, c, e score 1st, 2nd and 3rd) is one bucket; G2 = {d, g} scores g's .65 and comes 2nd
    assert buckets.tolist() == [t.bucket_of[0], t.bucket_of[IDS.index("d")], t.bucket_of[1], t.bucket_of[5]]
    assert best.tolist() == [0.9, 0.65, 0.6, 0.1]
    assert bucket_rank(scores, candidate_mask(t, h), t.bucket_of, t.bucket_of[IDS.index("g")]) == 2


def test_metrics_by_hand() -> None:
    t = make_timeline()
    scores = score_fn(t)
    report = evaluate_online(t, online_queries(t), scores, batch_size=3)
    assert scores.calls == [3, 1]  # batched
    assert report.query_ids == ["c", "e", "g", "h"] and report.ranks == [2, 2, 3, 1]
    assert report.metrics == pytest.approx({"rr@1": 0.25, "rr@5": 1.0, "rr@10": 1.0, "rr@20": 1.0,
                                            "mrr@10": (1 / 2 + 1 / 2 + 1 / 3 + 1) / 4, "map": 7 / 12})
    assert report.counts == {"queries": 4, "misses_outside_window": 0, "unknown_time": 1, "reports": 9}
    assert report.to_dict(per_query=True)["ranks"] == {"c": 2, "e": 2, "g": 3, "h": 1}
    # a 4-day window: g's master d (day 6) and h's a, c, e are out: misses, still counted; e now meets c at .45
    narrow = evaluate_online(t, online_queries(t), score_fn(t), ks=(1, 5), window_days=4.0)
    assert narrow.ranks == [2, 1, None, None] and narrow.counts["misses_outside_window"] == 2
    assert narrow.metrics == pytest.approx({"rr@1": 0.25, "rr@5": 0.5, "mrr@10": (0.5 + 1) / 4, "map": 0.375})
    assert narrow.values("mrr@10").tolist() == [0.5, 1.0, 0.0, 0.0]


def test_unknown_time_is_neither_query_nor_candidate() -> None:
    t = make_timeline()
    with pytest.raises(ValueError, match="not queries"):
        evaluate_online(t, [IDS.index("u")], score_fn(t))
    with pytest.raises(ValueError, match="not queries"):
        evaluate_online(t, [IDS.index("a")], score_fn(t))  # the earliest of its group
    assert not any(candidate_mask(t, q, None)[IDS.index("u")] for q in online_queries(t))


def test_a_master_outside_the_window_is_a_counted_miss() -> None:
    # m (day 1) and dup (day 401) are one group, x (day 35) and dup2 (day 400) another, y (day 399) alone
    t = Timeline(["m", "x", "y", "dup2", "dup"], [1 * DAY, 35 * DAY, 399 * DAY, 400 * DAY, 401 * DAY],
                 ["G", "H", None, "H", "G"])
    flat = {"m": 1.0, "x": 0.9, "y": 0.5}
    table = {"dup": flat, "dup2": flat}
    report = evaluate_online(t, online_queries(t), score_fn(t, table))
    # dup2's x lies exactly 365 days earlier (a candidate); dup's m lies 400 days earlier
    assert report.query_ids == ["dup2", "dup"] and report.ranks == [1, None]
    assert report.metrics["rr@20"] == 0.5 and report.counts["misses_outside_window"] == 1
    unbounded = evaluate_online(t, online_queries(t), score_fn(t, table), window_days=None)
    # without a window dup finds m, and m (1.0) now outscores x for dup2
    assert unbounded.ranks == [2, 1] and unbounded.metrics["rr@1"] == 0.5 and unbounded.metrics["rr@5"] == 1.0


def test_equal_times_follow_the_given_order() -> None:
    t = Timeline(["p", "q"], [5.0, 5.0], ["G", "G"])
    assert online_queries(t) == [1] and candidate_mask(t, 1).tolist() == [True, False]
    swapped = Timeline(["q", "p"], [5.0, 5.0], ["G", "G"])
    assert ids_of(swapped, online_queries(swapped)) == ["p"]


def test_bootstrap_intervals() -> None:
    t = make_timeline()
    report = evaluate_online(t, online_queries(t), score_fn(t))
    same = paired_difference(report, report, "mrr@10")
    assert (same.value, same.low, same.high) == (0.0, 0.0, 0.0) and same.queries == 4
    rr1 = metric_interval(report, "rr@1")
    assert rr1.value == 0.25 and 0.0 <= rr1.low <= 0.25 <= rr1.high <= 1.0
    assert metric_interval(report, "rr@5").to_dict()["low"] == 1.0
    other = evaluate_online(t, online_queries(t)[:3], score_fn(t))
    with pytest.raises(ValueError, match="same queries"):
        paired_difference(report, other, "rr@1")
    with pytest.raises(ValueError, match="unknown metric"):
        report.values("recall@5")


def test_a_query_against_100k_reports_takes_milliseconds() -> None:
    rng = np.random.default_rng(0)
    n = 100_000
    groups = [None if g < 0 else int(g) for g in rng.integers(-3, 20_000, n)]
    t = Timeline([str(i) for i in range(n)], np.sort(rng.uniform(0, 3 * 365 * DAY, n)).tolist(), groups)
    query = online_queries(t)[-1]
    scores = rng.normal(size=n)
    start = time.perf_counter()
    for _ in range(5):
        bucket_rank(scores, candidate_mask(t, query, 365.0), t.bucket_of, int(t.bucket_of[query]))
    assert (time.perf_counter() - start) / 5 < 0.1  # ~ a few ms; a Python loop over reports would take far longer


def test_timeline_from_files(tmp_path: Path) -> None:
    reports = [{"id": 1, "created": "2020-01-01 00:00:00 +0000"}, {"id": 2, "created": "2020-01-03T00:00:00"},
               {"id": 3, "created": "yesterday"}, {"id": 4}, {"id": 5, "created": 1577923200},
               {"id": 6, "created": "2020-01-05"}, {"id": 7, "created": "2020-01-02T12:00:00+00:00"},
               {"id": 8, "created": "2020-01-01T12:00:00+00:00"}]
    pairs = [{"duplicate_id": 2, "master_id": 1, "split": "test"}, {"duplicate_id": 5, "master_id": 1, "split": "train"},
             {"duplicate_id": 6, "master_id": 3, "split": "test"},  # 3 has no time: 6 is its group's earliest
             {"duplicate_id": 8, "master_id": 7, "split": "test"},  # filed before its master: 7 is the query
             {"duplicate_id": 9, "master_id": 1, "split": "test"}]  # 9 is not a report
    (tmp_path / "reports.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reports) + "{bad\n")
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pairs))
    t = timeline_from_files(tmp_path / "reports.jsonl", tmp_path / "pairs.jsonl")
    assert t.ids == [str(i) for i in range(1, 9)]
    assert t.unknown_time == 2 and t.counts["junk_time"] == 1 and t.counts["bad_rows"] == 1
    assert t.counts["pairs_unknown_report"] == 1
    group = dict(zip(t.ids, t.group.tolist()))
    assert group["1"] == group["2"] == group["5"] != group["3"] == group["6"] and group["4"] == -1
    assert ids_of(t, online_queries(t)) == ["5", "7", "2"]  # by time: 1, 8, 5, 7, 2, 6
    assert ids_of(t, split_queries(t, tmp_path / "pairs.jsonl", "test")) == ["7", "2"]
    # rows naming the same group are one group
    (tmp_path / "named.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"duplicate_id": 2, "master_id": 1, "group": "A"}, {"duplicate_id": 6, "master_id": 5, "group": "A"}]))
    named = timeline_from_files(tmp_path / "reports.jsonl", tmp_path / "named.jsonl")
    assert len(set(named.group[[0, 1, 4, 5]].tolist())) == 1 and named.group[6] == -1
