"""DeCLUTR: span-sampling InfoNCE plus MLM on the same batch."""
from lmplatform.objectives.declutr.config import DeclutrObjectiveConfig
from lmplatform.objectives.spec import ObjectiveSpec

SPEC = ObjectiveSpec(
    name="declutr",
    config=DeclutrObjectiveConfig,
    validation_metrics=("contrastive_loss", "inbatch_accuracy", "mlm_loss", "mlm_accuracy", "perplexity"),
    evaluation_keys=("objective.num_anchors", "objective.num_positives", "objective.min_span", "objective.max_span",
                     "objective.mask_probability", "objective.replace_with_mask", "objective.replace_with_random",
                     "optim.batch_size"),
    implementation="lmplatform.objectives.declutr.objective",
    retrieval_validated=True,  # on retrieval_validation.pairs: its corpus has none
)
