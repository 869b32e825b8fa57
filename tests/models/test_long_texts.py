"""A long text's head gives the tokens the whole text gives, for each tokenizer family, at a fraction of the work."""
from __future__ import annotations

import random

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from lmplatform.models.encoder import Encoder
from lmplatform.models.long_texts import encoder_head, encoder_heads
from lmplatform.models.resolve import packaged_model_path

MAX_LENGTH = 128


def long_report(rng: random.Random) -> str:
    """A bug report as trackers hold them: prose, a stack trace, a log line without spaces, accents, tabs."""
    words = ["Writer", "crashes", "when", "saving", "the", "document", "as", ".odt", "café", "naïve", "(see", "attached)"]
    prose = " ".join(rng.choice(words) for _ in range(rng.randint(20, 400)))
    trace = "\n".join(f"\tat org.openoffice.module{n}.Frame.dispatch(Frame.java:{rng.randint(1, 999)})"
                      for n in range(rng.randint(10, 600)))
    blob = "".join(rng.choice("abcdef0123456789=/+") for _ in range(rng.randint(0, 3000)))
    return "  ".join([prose, trace, blob, prose])


def trained_tokenizer(kind: str, corpus: list[str]) -> PreTrainedTokenizerFast:
    """A small byte-level BPE (RoBERTa, GPT-2) or Metaspace Unigram (SentencePiece: XLM-R, T5) tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if kind == "bpe":
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>", "<pad>"])
    else:
        tokenizer = Tokenizer(models.Unigram())
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=["<s>", "</s>", "<pad>"], unk_token="<pad>")
    tokenizer.train_from_iterator(corpus, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


@pytest.fixture(scope="module")
def reports() -> list[str]:
    rng = random.Random(7)
    sparse = "".join(f"field{n}:" + " " * 30 for n in range(400))  # few tokens per character: a first prefix is short
    return [long_report(rng) for _ in range(12)] + [sparse]


@pytest.mark.parametrize("kind", ["wordpiece", "bpe", "unigram"])
def test_the_head_gives_the_whole_texts_tokens(kind: str, reports: list[str]) -> None:
    tokenizer = (AutoTokenizer.from_pretrained(str(packaged_model_path())) if kind == "wordpiece"
                 else trained_tokenizer(kind, reports))
    for text in reports:
        head = encoder_head(tokenizer, text, MAX_LENGTH)
        whole = tokenizer(text, truncation=True, max_length=MAX_LENGTH)["input_ids"]
        assert tokenizer(head, truncation=True, max_length=MAX_LENGTH)["input_ids"] == whole
        assert len(head) < len(text) / 2  # the tokenizer's work is cut, not just kept equal


def test_a_text_without_enough_tokens_in_its_head_stays_whole() -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_path()))
    spaced = "word " * 20 + " " * 5000 + "end"  # long in characters, 22 tokens
    unbroken = "x" * 5000  # no whitespace to cut at
    assert encoder_heads(tokenizer, [spaced, unbroken, "short"], MAX_LENGTH) == [spaced, unbroken, "short"]


def test_the_encoder_reads_long_texts_through_their_heads(tiny_bert, reports: list[str]) -> None:
    encoder = Encoder.from_pretrained(tiny_bert, max_seq_length=64)
    whole = encoder.tokenizer(reports, truncation=True, max_length=64, padding=True, return_tensors="pt")["input_ids"]
    assert encoder.tokenize(reports)["input_ids"].tolist() == whole.tolist()
    assert encoder.token_counts(reports) == [64] * len(reports)
