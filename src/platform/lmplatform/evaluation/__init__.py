"""Evaluation, shared by training, tuning, pipelines and `lmp evaluate`.

`tasks/` holds the tasks of an evaluation config (retrieval, sts, classification), which `runner` runs into
a report, scored by the pure functions of `lmplatform.metrics`; `plots` their figures. Beside them:
corpus-level `retrieval_validation` (inside training and in the champion gate), `behavioural` suites,
GLUE `probes`, the `old_domain_mlm` loss and the `frozen_vs_finetuned` study. The datasets they read
are read by `lmplatform.data`.
"""

from lmplatform.lazy_exports import lazy_exports

# What tools such as the benches may use (tests/test_public_surface.py); every module path below is private.
PUBLIC: dict[str, str] = {
    **dict.fromkeys(("candidate_mask", "evaluate_online", "metric_interval", "paired_difference", "split_queries",
                     "timeline_from_files"), "lmplatform.evaluation.online"),
    "probe_encoder": "lmplatform.evaluation.probes",
    "evaluation_spec": "lmplatform.evaluation.registry",
    **dict.fromkeys(("RelationEvalConfig", "run_cross_validation", "summarize_folds"),
                    "lmplatform.evaluation.relations"),
    **dict.fromkeys(("CorpusRetrievalValidator", "build_retrieval_set", "evaluate_model", "prepare_retrieval_set",
                     "score_rankings"), "lmplatform.evaluation.retrieval_validation"),
    **dict.fromkeys(("SetMetadata", "SystemScorer", "load_scorer", "text_metadata"), "lmplatform.evaluation.system"),
    "ClassificationTask": "lmplatform.evaluation.tasks.classification.config",
    "ModelCache": "lmplatform.evaluation.tasks.common",
    "old_domain_mlm_loss": "lmplatform.evaluation.tasks.old_domain_mlm.task",
    **dict.fromkeys(("RetrievalDataset", "RetrievalScenario", "RetrievalTask"),
                    "lmplatform.evaluation.tasks.retrieval.config"),
    **dict.fromkeys(("ScenarioInputs", "load_retrieval_data", "scenario_inputs", "write_split_pairs"),
                    "lmplatform.evaluation.tasks.retrieval.data"),
    "run_retrieval_task": "lmplatform.evaluation.tasks.retrieval.task:run",
    "StsTask": "lmplatform.evaluation.tasks.sts.config",
    "cosine_scores": "lmplatform.evaluation.tasks.sts.task",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, PUBLIC)
