"""The sts evaluation: encoders' cosines of sentence pairs against gold similarity scores (`lmp evaluate` task
`sts`)."""
from lmplatform.evaluation.spec import EvaluationSpec
from lmplatform.evaluation.tasks.sts.config import StsTask

SPEC = EvaluationSpec(name="sts", implementation="lmplatform.evaluation.tasks.sts.task", config=StsTask)
