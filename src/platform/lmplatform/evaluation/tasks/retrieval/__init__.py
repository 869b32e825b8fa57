"""The retrieval evaluation: duplicate reports found among all reports (`lmp evaluate` task `retrieval`), and one
model ranking a pairs file's queries after a pipeline stage (evaluation `retrieval`)."""
from lmplatform.evaluation.spec import EvaluationSpec
from lmplatform.evaluation.tasks.retrieval.config import RetrievalTask

SPEC = EvaluationSpec(
    name="retrieval",
    implementation="lmplatform.evaluation.tasks.retrieval.task",
    config=RetrievalTask,
    scores_one_model=True,
    stage_settings=("retrieval",),
)
