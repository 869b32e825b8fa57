"""The old_domain_mlm_loss evaluation: a model's masked-LM loss on held-out text of an earlier stage, with fixed
masks (forgetting measured as a loss). A pipeline stage's evaluation only: it scores one model."""
from lmplatform.evaluation.spec import EvaluationSpec

SPEC = EvaluationSpec(
    name="old_domain_mlm_loss",
    implementation="lmplatform.evaluation.tasks.old_domain_mlm.task",
    scores_one_model=True,
    stage_settings=("mlm_head_from",),
)
