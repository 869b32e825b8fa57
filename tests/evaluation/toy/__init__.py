"""Toy evaluation: how far each text's pooled vector length is from `target_norm`.

Added the way every evaluation is: this folder, and one `register` line (the test's; a built-in evaluation's line is
in `lmplatform.evaluation.registry.BUILTIN`).
"""
from lmplatform.evaluation.spec import EvaluationSpec
from tests.evaluation.toy.config import ToyNormTask

SPEC = EvaluationSpec(name="toy_norm", implementation="tests.evaluation.toy.task", config=ToyNormTask,
                      scores_one_model=True)
