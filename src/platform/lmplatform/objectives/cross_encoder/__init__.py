"""Cross-encoder re-ranker: a query with its positive and its negatives, scored by BCE or per group (listwise)."""
from lmplatform.models.kind import CROSS_ENCODER
from lmplatform.objectives.cross_encoder.config import CrossEncoderObjectiveConfig
from lmplatform.objectives.spec import ModelCardText, ObjectiveSpec

SPEC = ObjectiveSpec(
    name="cross_encoder",
    config=CrossEncoderObjectiveConfig,
    validation_metrics=("bce_loss", "accuracy", "listwise_loss", "inbatch_pairwise_accuracy", "inbatch_mrr"),
    evaluation_keys=("objective.negatives_per_positive", "objective.negatives", "objective.miner_model",
                     "objective.mining_top_k", "objective.use_hard_negatives", "objective.seed"),
    implementation="lmplatform.objectives.cross_encoder.objective",
    model_kind=CROSS_ENCODER,
    retrieval_validated=True,
    pair_data=True,
    card=ModelCardText(
        "Re-ranking: scoring (query, document) pairs of this domain, e.g. the top hits of a retriever (`reranker:` in "
        "serve/config.yaml).",
        "Scores pairs, one forward pass each: too slow to search a corpus by itself; not a text embedder."),
)
