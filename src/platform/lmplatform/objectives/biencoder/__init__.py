"""Bi-encoder: multiple-negatives ranking (in-batch InfoNCE) on (query, document) pairs."""
from lmplatform.objectives.biencoder.config import BiencoderObjectiveConfig
from lmplatform.objectives.spec import ObjectiveSpec

SPEC = ObjectiveSpec(
    name="biencoder",
    config=BiencoderObjectiveConfig,
    validation_metrics=("ranking_loss", "inbatch_accuracy", "inbatch_mrr", "inbatch_candidates"),
    evaluation_keys=("objective.max_hard_negatives", "optim.batch_size"),
    implementation="lmplatform.objectives.biencoder.objective",
    retrieval_validated=True,
    pair_data=True,
)
