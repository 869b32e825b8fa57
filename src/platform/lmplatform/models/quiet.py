"""Quiet loading: transformers' long, expected load reports are turned off while a model loads."""
from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Only transformers' errors are logged inside the block; its verbosity is restored after.

    Loading a checkpoint into another class than it was saved with (an MLM checkpoint into `AutoModel`,
    an encoder under a new classification or MLM head) logs every unused or newly initialised tensor.
    That is expected there, and the callers give their own account of the head.
    """
    from transformers.utils import logging as hf_logging

    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(previous)
