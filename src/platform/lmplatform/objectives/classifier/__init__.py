"""Text classification: encoder + pooling + MLP head, cross-entropy."""
from lmplatform.objectives.classifier.config import ClassifierObjectiveConfig
from lmplatform.objectives.spec import ObjectiveSpec

SPEC = ObjectiveSpec(
    name="classifier",
    config=ClassifierObjectiveConfig,
    validation_metrics=("loss", "accuracy"),
    evaluation_keys=("objective.label_field", "objective.split_field", "objective.labels"),
    implementation="lmplatform.objectives.classifier.objective",
)
