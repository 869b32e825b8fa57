"""DeCLUTR span sampling: the length distributions, where positives fall, and which documents can be sampled."""
from __future__ import annotations

import numpy as np
import pytest

from lmplatform.objectives.declutr.spans import DeclutrSpanSampler, count_sampleable


def test_span_lengths_follow_the_beta_distributions() -> None:
    sampler = DeclutrSpanSampler(num_anchors=2, num_positives=1, min_span=10, max_span=100)
    rng = np.random.default_rng(0)
    anchors = np.array([sampler.anchor_length(rng) for _ in range(20_000)])
    positives = np.array([sampler.positive_length(rng) for _ in range(20_000)])
    assert anchors.min() >= 10 and anchors.max() <= 100 and positives.min() >= 10 and positives.max() <= 100
    # Beta(4,2) has mean 2/3 and Beta(2,4) mean 1/3 of the way from min_span to max_span (+0.5 from flooring 91 bins)
    width = 100 - 10 + 1
    assert anchors.mean() == pytest.approx(10 + width * 2 / 3 - 0.5, abs=1.0)
    assert positives.mean() == pytest.approx(10 + width / 3 - 0.5, abs=1.0)
    assert positives.mean() < anchors.mean()


def test_positives_touch_their_anchor_in_every_allowed_way() -> None:
    sampler = DeclutrSpanSampler(num_anchors=2, num_positives=3, min_span=4, max_span=16)
    rng = np.random.default_rng(1)
    kinds = set()
    for _ in range(2000):
        spans = sampler.sample(200, rng)
        assert len(spans.anchors) == 2 and all(len(p) == 3 for p in spans.positives)
        for (a0, a1), own in zip(spans.anchors, spans.positives):
            assert 0 <= a0 < a1 <= 200
            for p0, p1 in own:
                assert 0 <= p0 < p1 <= 200
                assert p1 >= a0 and p0 <= a1, "a positive is never apart from its anchor"
                if p0 >= a0 and p1 <= a1:
                    kinds.add("subsumed")
                elif p1 == a0 or p0 == a1:
                    kinds.add("adjacent")
                else:
                    kinds.add("overlapping")
    assert kinds == {"subsumed", "adjacent", "overlapping"}


def test_short_documents_cannot_be_sampled_and_are_counted_exactly() -> None:
    sampler = DeclutrSpanSampler(num_anchors=2, max_span=8, min_span=2)
    assert sampler.min_document_tokens == 32
    assert sampler.can_sample(32) and not sampler.can_sample(31)
    with pytest.raises(ValueError, match="under the minimum of 32"):
        sampler.sample(31, np.random.default_rng(0))
    counts = count_sampleable([31, 32, 5, 100, 0], num_anchors=2, max_span=8)
    assert (counts.min_tokens, counts.kept, counts.dropped) == (32, 2, 3)
    assert counts.dropped_fraction == pytest.approx(0.6)
    counts = count_sampleable([31, 32, 5, 100, 0], num_anchors=1, max_span=4)
    assert (counts.kept, counts.dropped) == (3, 2)


def test_the_ray_data_filter_drops_short_texts_and_unpickles_without_torch(tiny_bert) -> None:
    """Ray Data's split coordinators and dataset manager unpickle a dataset's plan, and with it this map, by
    reference, without ever calling it: its module must not import torch and transformers (seconds per process)."""
    import subprocess
    import sys

    from ray import cloudpickle

    from lmplatform.objectives.declutr.spans import keep_sampleable

    texts = np.array(["printer crash", "printer crash after the update on the server", "disk"], dtype=object)
    kept = keep_sampleable({"text": texts, "source": np.arange(3)}, str(tiny_bert), 3)
    assert list(kept["text"]) == [texts[1]] and list(kept["source"]) == [1]

    probe = ("import pickle, sys; pickle.loads(sys.stdin.buffer.read()); "
             "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], input=cloudpickle.dumps(keep_sampleable),
                            capture_output=True, check=True)
    assert loaded.stdout.decode().split() == ["[]"]
