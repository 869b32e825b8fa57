"""quiet_transformers: errors only inside the block, the previous verbosity back after, also after an error."""
from __future__ import annotations

import pytest
from transformers.utils import logging as hf_logging

from lmplatform.models.quiet import quiet_transformers


def test_verbosity_is_errors_inside_and_restored_after() -> None:
    before = hf_logging.get_verbosity()
    hf_logging.set_verbosity_info()
    try:
        with quiet_transformers():
            assert hf_logging.get_verbosity() == hf_logging.ERROR
        assert hf_logging.get_verbosity() == hf_logging.INFO
        with pytest.raises(RuntimeError), quiet_transformers():
            raise RuntimeError("a load failed")
        assert hf_logging.get_verbosity() == hf_logging.INFO
    finally:
        hf_logging.set_verbosity(before)
