"""Graph contrastive learning of relation structure in token embeddings (CLGS, CLDR, CLNER)."""
from lmplatform.objectives.graph_cl.config import GraphCLObjectiveConfig
from lmplatform.objectives.spec import ObjectiveSpec

SPEC = ObjectiveSpec(
    name="graph_cl",
    config=GraphCLObjectiveConfig,
    # a run reports the pair of its own `objective.variant`
    validation_metrics=tuple(f"{variant}_{m}" for variant in ("clgs", "cldr", "clner") for m in ("loss", "accuracy")),
    evaluation_keys=("objective.variant", "objective.negatives_per_sentence", "objective.samples_per_tag",
                     "objective.in_batch_negatives", "objective.folds_file", "objective.fold", "optim.batch_size"),
    implementation="lmplatform.objectives.graph_cl.objective",
)
