"""Tags the champion gate writes on a model version (tune/champion.py): the metric it was selected on and the
gate's decision; and the objective a version's training run trained. Here, beside the registry, because the model
card (`model_card.py`) and `lmp models` read them."""

METRIC_TAG = "lmp.metric"
VALUE_TAG = "lmp.metric_value"
MODE_TAG = "lmp.metric_mode"
FINGERPRINT_TAG = "lmp.eval_fingerprint"
GATE_PREFIX = "lmp.gate."
DECISION_TAG = GATE_PREFIX + "decision"
REASON_TAG = GATE_PREFIX + "reason"
# A training run's tag naming its objective (jobs/train_run.py), and a model version's (the gate compares a candidate
# only with a champion of the same objective).
RUN_OBJECTIVE_TAG = "lmp.objective"
OBJECTIVE_TAG = "objective"


def objective_tag(run_tags: dict[str, str]) -> dict[str, str]:
    """The version tag naming the objective of the training run whose model it registers (none if the run has no
    such tag)."""
    return {OBJECTIVE_TAG: run_tags[RUN_OBJECTIVE_TAG]} if RUN_OBJECTIVE_TAG in run_tags else {}
