"""Config of the bi-encoder distillation objective: a cross-encoder teacher's scores taught to a bi-encoder."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from lmplatform.config.base import Section


class BiencoderDistillObjectiveConfig(Section):
    """Cross-encoder -> bi-encoder distillation on (query, positive, hard negatives) rows (data.hard_negative_field)."""

    name: Literal["biencoder_distill"] = "biencoder_distill"
    loss: Literal["margin_mse", "kl"] = Field(
        "margin_mse", description="'margin_mse': the student's (positive - negative) score margins regress onto the "
        "teacher's (Hofstaetter et al. 2020, sentence-transformers' MarginMSELoss); 'kl': KL(teacher || student) of the "
        "softmaxes over each query's positive and hard negatives.")
    teacher: str = Field(
        ..., min_length=1, description="The cross-encoder whose scores are learnt: a folder, models:/<name>/<version> "
        "(or @alias), or stage:<name> (an earlier stage's model) in a pipeline. Its scores are computed once, on the "
        "driver side, and cached (objective.teacher_cache_dir).")
    student_temperature: float = Field(
        0.05, gt=0.0, le=1.0, description="The student's score of (query, document) is cos(q, d) / student_temperature "
        "(the encoder is used with normalised vectors); a cosine alone spans [-1, 1], far less than a cross-encoder's "
        "logits. 0.05 is the bi-encoder's InfoNCE scale 20.")
    kl_temperature: float = Field(
        1.0, gt=0.0, description="loss 'kl' only: the teacher's logits are divided by it before the softmax: "
        "KL(softmax(teacher / kl_temperature) || softmax(cos / student_temperature)). Above 1 flattens the teacher's "
        "distribution. No temperature-squared factor is applied.")
    max_hard_negatives: int = Field(
        3, ge=1, description="Hard negatives used per pair, the first ones of data.hard_negative_field. A pair with "
        "fewer is left out (counted as data/distill_skipped_rows).")
    teacher_batch_size: int = Field(64, ge=1, description="(query, document) pairs per teacher forward pass.")
    teacher_max_seq_length: int = Field(256, ge=8, description="The teacher's query + document sequences are truncated to this.")
    teacher_cache_dir: Optional[str] = Field(
        None, description="Where teacher scores are cached, keyed by the teacher's fingerprint, the scored texts, "
        "max_hard_negatives and teacher_max_seq_length. Default: <checkpoint.storage_path>/teacher_scores.")
    in_batch_weight: float = Field(
        0.0, ge=0.0, description="Weight of an added in-batch InfoNCE term (the bi-encoder's loss, hard negatives "
        "included, at student_temperature); 0 is pure distillation.")
