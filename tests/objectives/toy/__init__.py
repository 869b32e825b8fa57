"""A toy objective, added the way every objective is: this folder, and one `register` line (the test's;
a built-in objective's line is in `lmplatform.objectives.registry.BUILTIN`)."""
from lmplatform.objectives.spec import ObjectiveSpec
from tests.objectives.toy.config import ToyNormConfig

SPEC = ObjectiveSpec(
    name="toy_norm",
    config=ToyNormConfig,
    validation_metrics=("norm_error",),
    evaluation_keys=("objective.target_norm",),
    implementation="tests.objectives.toy.objective",
)
