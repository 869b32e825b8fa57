"""Tags the champion gate writes on a model version (tune/champion.py): the metric it was selected on and the
gate's decision. Here, beside the registry, because the model card (`model_card.py`) and `lmp models` read them."""

METRIC_TAG = "lmp.metric"
VALUE_TAG = "lmp.metric_value"
MODE_TAG = "lmp.metric_mode"
FINGERPRINT_TAG = "lmp.eval_fingerprint"
GATE_PREFIX = "lmp.gate."
DECISION_TAG = GATE_PREFIX + "decision"
REASON_TAG = GATE_PREFIX + "reason"
