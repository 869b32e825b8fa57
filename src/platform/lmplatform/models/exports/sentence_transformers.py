"""`sentence-transformers`: a folder sentence-transformers (and TEI/Infinity) load with our vectors or scores.

- A bi-encoder: the Hugging Face folder plus `modules.json`, `sentence_bert_config.json` (max_seq_length),
  `1_Pooling/config.json` with the encoder's own pooling and `2_Normalize` (our vectors are L2-normalised). Without
  these files sentence-transformers (and TEI) guess mean pooling, silently wrong for a CLS- or max-pooled model. The
  classic file format is written (the one the Hub's sentence-transformers models carry and TEI reads); current
  sentence-transformers reads it too.
- A cross-encoder (a one-logit sequence classifier): the Hugging Face folder with its sigmoid activation and maximum
  length recorded, as sentence-transformers' `CrossEncoder` reads them, so its `predict` gives
  `CrossEncoder.score`'s probabilities.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from lmplatform.models.export_spec import ExportFormatSpec, ExportOptions, ExportResult, folder_files, load_encoder
from lmplatform.models.kind import CROSS_ENCODER, ENCODER, ModelKind
from lmplatform.models.sentence_transformers_layout import write_sentence_transformers_modules

if TYPE_CHECKING:
    from lmplatform.models.encoder import Encoder

NAME = "sentence-transformers"
_SIGMOID = "torch.nn.modules.activation.Sigmoid"


def write(source: Path, kind: ModelKind, out: Path, options: ExportOptions) -> ExportResult:
    if kind == CROSS_ENCODER:
        return write_cross_encoder(source, out, options.cross_encoder_max_length)
    return write_encoder(load_encoder(source), out)


def write_encoder(encoder: "Encoder", out: Path, normalize: bool = True) -> ExportResult:
    """`encoder` as a sentence-transformers folder."""
    out = encoder.save_pretrained(out)  # backbone only, tokenizer, lmplatform_encoder.json
    write_sentence_transformers_modules(encoder, out, normalize)
    return ExportResult(NAME, ENCODER, out, folder_files(out),
                        [f"{encoder.pooling} pooling{', normalised' if normalize else ''}, "
                         f"max_seq_length {encoder.max_seq_length}"])


def write_cross_encoder(source: Path, out: Path, max_seq_length: int) -> ExportResult:
    """A cross-encoder folder that sentence-transformers' `CrossEncoder` loads with our scores."""
    from lmplatform.models.cross_encoder import CrossEncoder

    model = CrossEncoder.from_pretrained(source, max_seq_length)
    model.save_pretrained(out)
    config = json.loads((out / "config.json").read_text())
    # sentence-transformers reads its settings from this key of config.json (v4 and later).
    config["sentence_transformers"] = {"activation_fn": _SIGMOID}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    # The truncation length CrossEncoder.score uses; sentence-transformers takes it from the tokenizer.
    tokenizer_config = out / "tokenizer_config.json"
    settings = json.loads(tokenizer_config.read_text()) if tokenizer_config.is_file() else {}
    settings["model_max_length"] = max_seq_length
    tokenizer_config.write_text(json.dumps(settings, indent=2))
    return ExportResult(NAME, CROSS_ENCODER, out, folder_files(out), [f"sigmoid of one logit, max length {max_seq_length}"])


def how_to_load(result: ExportResult) -> str:
    loader = "CrossEncoder" if result.kind == CROSS_ENCODER else "SentenceTransformer"
    return f"from sentence_transformers import {loader}; {loader}({str(result.folder)!r})"


SPEC = ExportFormatSpec(
    name=NAME,
    description="for sentence-transformers, TEI and Infinity: bi-encoders and cross-encoders",
    write=write,
    how_to_load=how_to_load,
    kinds=(ENCODER, CROSS_ENCODER),
)
