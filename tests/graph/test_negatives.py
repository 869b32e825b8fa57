import random

from lmplatform.graph.data import Entity, Relation, Sentence
from lmplatform.graph.negatives import candidate_words, sample_negative_graph, sample_negative_graphs


def _sentence() -> Sentence:
    # 0 aspirin 1 and 2 heparin 3 caused 4 severe 5 rash 6 .  ; AE "severe rash" related to both drugs
    tokens = ("aspirin", "and", "heparin", "caused", "severe", "rash", ".")
    entities = (Entity(4, 6, "Adverse-Effect"), Entity(0, 1, "Drug"), Entity(2, 3, "Drug"))
    return Sentence("s1", tokens, entities, (Relation(0, 1, "Adverse-Effect"), Relation(0, 2, "Adverse-Effect")))


def test_negatives_never_return_a_gold_relation_and_keep_the_relation_count() -> None:
    sentence = _sentence()
    gold = {(sentence.entities[r.head].start, sentence.entities[r.head].end,
             sentence.entities[r.tail].start, sentence.entities[r.tail].end) for r in sentence.relations}
    rng = random.Random(0)
    graphs = sample_negative_graphs(sentence, 200, rng)
    replaced_sides = set()
    for graph in graphs:
        assert len(graph) == len(sentence.relations)
        for negative in graph:
            assert negative.valid
            spans = (*negative.head.words(sentence), *negative.tail.words(sentence))
            assert spans not in gold
            word = negative.head if negative.head.word is not None else negative.tail
            replaced_sides.add("head" if word is negative.head else "tail")
            # the replacement is never part of an entity of the kept side's type, nor a related drug
            assert word.word not in (0, 2, 4, 5)
    assert replaced_sides == {"head", "tail"}


def test_replacement_of_the_drug_avoids_adverse_effect_words() -> None:
    sentence = _sentence()
    assert candidate_words(sentence, keep=0, replace=1) == [1, 3, 6]  # not 0/2 (related drugs), not 4/5 (AE)
    assert candidate_words(sentence, keep=1, replace=0) == [1, 3, 6]  # not 0/2 (drugs), not 4/5 (the AE)


def test_no_admissible_word_gives_an_invalid_negative() -> None:
    sentence = Sentence("s", ("rash", "aspirin"), (Entity(0, 1, "AE"), Entity(1, 2, "Drug")), (Relation(0, 1, "R"),))
    (negative,) = sample_negative_graph(sentence, random.Random(0))
    assert not negative.valid
