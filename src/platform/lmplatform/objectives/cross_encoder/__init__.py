"""Cross-encoder re-ranker: a query with its positive and its negatives, scored by BCE or per group (listwise)."""
from lmplatform.objectives.cross_encoder.config import CrossEncoderObjectiveConfig
from lmplatform.objectives.spec import ObjectiveSpec

SPEC = ObjectiveSpec(
    name="cross_encoder",
    config=CrossEncoderObjectiveConfig,
    validation_metrics=("bce_loss", "accuracy", "listwise_loss", "inbatch_pairwise_accuracy", "inbatch_mrr"),
    evaluation_keys=("objective.negatives_per_positive", "objective.negatives", "objective.miner_model",
                     "objective.mining_top_k", "objective.use_hard_negatives", "objective.seed"),
    implementation="lmplatform.objectives.cross_encoder.objective",
)
