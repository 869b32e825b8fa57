"""Toy objective: the squared error between each pooled text vector's length and `target_norm`.

Added the way every objective is: this folder, and one `register` line (the test's; a built-in objective's line is
in `lmplatform.objectives.registry.BUILTIN`).
"""
from lmplatform.objectives.spec import ModelCardText, ObjectiveSpec
from tests.objectives.toy.config import ToyNormConfig

SPEC = ObjectiveSpec(
    name="toy_norm",
    config=ToyNormConfig,
    validation_metrics=("norm_error",),
    evaluation_keys=("objective.target_norm",),
    implementation="tests.objectives.toy.objective",
    card=ModelCardText("Text vectors of a chosen length, for tests of the platform.",
                       "Its vectors' directions are the base model's: nothing is learnt about similarity."),
)
