"""STS fine-tuning: CoSENT or cosine-MSE over scored sentence pairs."""
from lmplatform.objectives.spec import ObjectiveSpec
from lmplatform.objectives.sts.config import STSObjectiveConfig

SPEC = ObjectiveSpec(
    name="sts",
    config=STSObjectiveConfig,
    validation_metrics=("spearman", "pearson"),
    evaluation_keys=("objective.sentence1_field", "objective.sentence2_field", "objective.score_field", "objective.scale",
                     "objective.split_field"),
    implementation="lmplatform.objectives.sts.objective",
)
