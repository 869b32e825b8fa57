"""Documents, index folders and models as the serving tests need them (registering them: lmplatform.testing.registered)."""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Sequence

LABELS = ("network", "storage", "billing")
# A replica being stopped waits graceful_shutdown_wait_loop_s (2 s by default) before it looks for requests still in
# flight, and Serve deletes an application's deployments one after another: 2 s a deployment at each module's teardown.
# These tests stop replicas only there (a reload reconfigures the replicas in place; a crash is a kill).
QUICK_STOP = {"graceful_shutdown_wait_loop_s": 0.1}
WORDS = {
    "network": "vpn tunnel network timeout gateway certificate router latency packet dns".split(),
    "storage": "disk backup database queue memory volume snapshot quota replica index".split(),
    "billing": "payment invoice refund card charge subscription receipt price tax account".split(),
}


PRODUCTS = ("gateway", "ledger")
DAY = 86_400


def make_documents(n: int = 36, seed: int = 0) -> list[dict[str, Any]]:
    """Unique texts, each of one label's vocabulary, so a text's nearest neighbour is itself; each with the metadata a
    metadata fusion reads (product, component, created: a day apart, some unknown), as the store holds it."""
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        label = LABELS[i % len(LABELS)]
        words = [rng.choice(WORDS[label]) for _ in range(6 + i % 9)]
        metadata = {"product": PRODUCTS[i % 2], "component": label, **({"created": i * DAY} if i % 5 else {})}
        docs.append({"id": f"doc-{i}", "title": f"report {i}", "text": " ".join(words) + f" case {i}", "label": label,
                     "metadata": metadata})
    return docs


def write_index(encoder_dir: Path, documents: list[dict[str, str]], out: Path, bm25: bool = True,
                fields: Sequence[str] = ("text",)) -> Path:
    """Encode the documents' `fields` (joined with '. ') with the encoder and save index + document store + BM25 index
    of the same texts (what build_index.py makes with --fields; bm25=False: as with its --no-bm25)."""
    from lmplatform.data.fields import join_fields
    from lmplatform.models.encoder import Encoder
    from lmplatform.retrieval.index import VectorIndex
    from lmplatform.retrieval.retrievers import BM25_DIR, BM25Retriever
    from lmplatform.retrieval.store import DOCUMENTS_FILE

    encoder = Encoder.from_pretrained(encoder_dir)
    texts = [join_fields(d, list(fields)) for d in documents]
    vectors = encoder.encode(texts)
    VectorIndex.build([d["id"] for d in documents], vectors, kind="flat").save(out)
    if bm25:
        retriever = BM25Retriever()
        retriever.index([d["id"] for d in documents], texts)
        retriever.save(out / BM25_DIR)
    with (out / DOCUMENTS_FILE).open("w") as handle:
        for doc in documents:
            handle.write(json.dumps(doc) + "\n")
    return out


def write_classifier_model(folder: Path, hidden: int = 48) -> Path:
    """A tiny random BERT encoder of another width with an MLP head over LABELS (a `TextClassifier` folder)."""
    import torch

    from lmplatform.models.classifier import ClassifierModel, MLPHead
    from lmplatform.models.encoder import Encoder
    from tests.conftest import write_tiny_bert

    base = write_tiny_bert(folder.parent / f"{folder.name}-bert", hidden=hidden)
    encoder = Encoder.from_pretrained(base)
    torch.manual_seed(1)
    ClassifierModel(encoder, MLPHead(hidden, len(LABELS), 16, 2), list(LABELS)).save_pretrained(folder)
    return folder


def write_cross_encoder(base: Path, folder: Path) -> Path:
    """A saved cross-encoder (its head included, so every process loads the same one) over `base`, the head's
    weights scaled so that its scores spread across (0, 1) instead of all sitting within 1e-3 of 0.5."""
    import torch

    from lmplatform.models.cross_encoder import CrossEncoder

    torch.manual_seed(2)
    model = CrossEncoder.from_pretrained(base)
    with torch.no_grad():
        model.model.classifier.weight.mul_(50.0)
    return model.save_pretrained(folder)
