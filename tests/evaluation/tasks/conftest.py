"""The `dataset` fixture: the toy duplicate-report set (toy_reports.py) as a retrieval dataset config."""
from pathlib import Path

import pytest

from lmplatform.evaluation.tasks.retrieval.config import RetrievalDataset
from tests.evaluation.tasks.toy_reports import PAIRS, REPORTS, write_jsonl


@pytest.fixture
def dataset(tmp_path: Path) -> RetrievalDataset:
    return RetrievalDataset(
        name="toy", corpus=write_jsonl(tmp_path / "corpus.jsonl", REPORTS, bad_line=True),
        relations=write_jsonl(tmp_path / "pairs.jsonl", PAIRS),
    )


