"""Evaluation, shared by training, tuning, pipelines and `lmp evaluate`.

`tasks/` holds the tasks of an evaluation config (retrieval, sts, classification), which `runner` runs into
a report, scored by the pure functions of `lmplatform.metrics`; `plots` their figures. Beside them:
corpus-level `retrieval_validation` (inside training and in the champion gate), `behavioural` suites,
GLUE `probes`, the `old_domain_mlm` loss and the `frozen_vs_finetuned` study. The datasets they read
are read by `lmplatform.data`.
"""
