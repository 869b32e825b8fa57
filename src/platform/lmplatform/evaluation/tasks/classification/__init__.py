"""The classification evaluation: classifiers built on encoders (frozen head, KNN, fine-tuned), and few-shot curves
(`lmp evaluate` task `classification`)."""
from lmplatform.evaluation.spec import EvaluationSpec
from lmplatform.evaluation.tasks.classification.config import ClassificationTask

SPEC = EvaluationSpec(name="classification", implementation="lmplatform.evaluation.tasks.classification.task",
                      config=ClassificationTask)
