"""The files that make a model folder a sentence-transformers model: its modules (transformer, pooling, optionally
normalisation) and their configs. Written by every encoder export, whatever the weights' format."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lmplatform.models.encoder import Encoder

# The sentence-transformers module classes named in modules.json (stable import paths since v2).
_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"


def write_sentence_transformers_modules(encoder: "Encoder", out: Path, normalize: bool) -> None:
    """The files that tell sentence-transformers how `encoder` pools, normalises and truncates."""
    (out / "sentence_bert_config.json").write_text(json.dumps(
        {"max_seq_length": encoder.max_seq_length, "do_lower_case": False}, indent=2))
    pooling = out / "1_Pooling"
    pooling.mkdir()
    (pooling / "config.json").write_text(json.dumps({
        "word_embedding_dimension": encoder.dim,
        "pooling_mode_cls_token": encoder.pooling == "cls",
        "pooling_mode_mean_tokens": encoder.pooling == "mean",
        "pooling_mode_max_tokens": encoder.pooling == "max",
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
    }, indent=2))
    modules = [{"idx": 0, "name": "0", "path": "", "type": _TRANSFORMER},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": _POOLING}]
    if normalize:
        (out / "2_Normalize").mkdir()
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": _NORMALIZE})
    (out / "modules.json").write_text(json.dumps(modules, indent=2))
    (out / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {}, "default_prompt_name": None, "similarity_fn_name": "cosine"}, indent=2))
