"""Text classification: encoder + pooling + MLP head, cross-entropy."""
from lmplatform.models.kind import CLASSIFIER
from lmplatform.objectives.classifier.config import ClassifierObjectiveConfig
from lmplatform.objectives.spec import ModelCardText, ObjectiveSpec

SPEC = ObjectiveSpec(
    name="classifier",
    config=ClassifierObjectiveConfig,
    validation_metrics=("loss", "accuracy"),
    evaluation_keys=("objective.label_field", "objective.split_field", "objective.labels"),
    implementation="lmplatform.objectives.classifier.objective",
    model_kind=CLASSIFIER,
    card=ModelCardText("Classifying texts of this domain into the labels of its training data (labels.json).",
                       "Only the trained labels; a text of another kind still gets one of them."),
)
