"""A user's plugin module as a pipeline names it in `plugins:`: importing it registers a stage kind (the counting
kind of test_adding_a_stage_kind.py, under its own name), in whichever process loads the pipeline."""
from __future__ import annotations

import dataclasses

from lmplatform.pipeline import kinds
from tests.pipeline.test_adding_a_stage_kind import SPEC

PLUGIN_SPEC = dataclasses.replace(SPEC, name="count_from_plugin")

if PLUGIN_SPEC.name not in kinds.stage_kind_names():
    kinds.register(PLUGIN_SPEC)
