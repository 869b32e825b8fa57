import random
from pathlib import Path

import numpy as np
import pytest

from lmplatform.models.cross_encoder import CrossEncoder


def test_scores_align_with_pairs_and_rerank_matches(tiny_bert: Path) -> None:
    model = CrossEncoder.from_pretrained(tiny_bert, max_seq_length=32)
    queries = ["disk full", "login fails", "disk full"]
    documents = ["the backup disk is full", "password reset loop", "invoice totals are wrong"]
    scores = model.score(queries, documents, batch_size=2)
    assert scores.shape == (3,) and ((scores > 0) & (scores < 1)).all()
    one_by_one = np.array([model.score([q], [d])[0] for q, d in zip(queries, documents)])
    assert np.allclose(scores, one_by_one, atol=1e-5)
    assert np.allclose(model.rerank("disk full", [documents[0], documents[2]]), scores[[0, 2]], atol=1e-5)


def test_misaligned_pairs_are_rejected(tiny_bert: Path) -> None:
    with pytest.raises(ValueError, match="pairs must align"):
        CrossEncoder.from_pretrained(tiny_bert).score(["a", "b"], ["c"])


def test_save_and_reload_round_trip(tiny_bert: Path, tmp_path: Path) -> None:
    model = CrossEncoder.from_pretrained(tiny_bert, max_seq_length=32)
    model.save_pretrained(tmp_path / "ce")
    again = CrossEncoder.from_pretrained(tmp_path / "ce", max_seq_length=32)
    assert np.allclose(model.score(["q"], ["d"]), again.score(["q"], ["d"]), atol=1e-6)


def test_the_trained_pair_length_travels_with_the_folder(tiny_bert: Path, tmp_path: Path) -> None:
    model = CrossEncoder.from_pretrained(tiny_bert, max_seq_length=24)
    model.save_pretrained(tmp_path / "ce")
    assert CrossEncoder.from_pretrained(tmp_path / "ce").max_seq_length == 24  # loaded without a length: the trained one
    assert CrossEncoder.from_pretrained(tmp_path / "ce", max_seq_length=48).max_seq_length == 48  # asked for: that one
    assert CrossEncoder.from_pretrained(tiny_bert).max_seq_length == 256  # a folder that records none


def test_a_long_pair_keeps_both_texts(tiny_bert: Path) -> None:
    """Queries and documents are long bug reports: truncation must trim the longer side, not drop the document."""
    model = CrossEncoder.from_pretrained(tiny_bert, max_seq_length=32)
    ids = model.tokenize(["printer " * 100], ["scanner " * 100])["input_ids"][0].tolist()
    printer, scanner = model.tokenizer.convert_tokens_to_ids(["printer", "scanner"])
    assert len(ids) == 32 and sorted([ids.count(printer), ids.count(scanner)]) == [14, 15]  # 29 after [CLS] and two [SEP], halved


def test_cutting_long_texts_first_gives_the_pairs_the_whole_texts_give(tiny_bert: Path) -> None:
    """Pair truncation of two long texts is quadratic in the tokenizer, so each side is cut first: the ids must be
    those of the whole texts, including which side keeps the odd token when both are long (the longer one)."""
    model = CrossEncoder.from_pretrained(tiny_bert, max_seq_length=16)
    rng = random.Random(0)
    words = ["disk", "full", "printer", "scanner's", "crash", "x1y2", "é", "漢字", "don't", "backup"]

    def text() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.choice([0, 1, 6, 7, 20, 40, 41, 90])))

    cut = 0
    for _ in range(50):
        queries, documents = [text() for _ in range(6)], [text() for _ in range(6)]
        whole = model.tokenizer(queries, documents, padding=True, truncation="longest_first", max_length=16,
                                return_tensors="pt")
        ours = model.tokenize(queries, documents)
        assert set(ours) == set(whole) and all(ours[k].equal(whole[k]) for k in whole)
        cut += sum(a != b for a, b in zip(model._cut(queries, documents)[0], queries))
    assert cut > 0  # the texts were long enough to be cut


def test_the_head_is_the_classifier_and_the_pooler(tiny_bert: Path) -> None:
    model = CrossEncoder.from_pretrained(tiny_bert)
    assert sorted(model.head_parameter_names()) == [
        "model.bert.pooler.dense.bias", "model.bert.pooler.dense.weight", "model.classifier.bias", "model.classifier.weight"]
