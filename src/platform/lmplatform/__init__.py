"""lmplatform: adapt text encoders to a specialist domain on Ray.

Importing the package changes nothing in the process and loads none of its dependencies: the public names below
are read from their modules on first use (PEP 562). The offline/loopback runtime defaults
(`lmplatform.runtime.apply_runtime_defaults`) are applied where they matter: by the `lmp` command line, when Ray
is started or joined (`ray_runtime.ensure_ray`) and in every Train worker.

The public surface (docs/python-api.md): the functions of `lmplatform.api` (run_training, run_pipeline, run_study,
run_evaluation, serve, stop_serving, export, register_objective, register_evaluation, register_stage_kind,
register_trial_kind, register_export_format), the encoders and the config models. Everything else may change between
releases. (No public name is a subpackage's: `lmplatform.train`, once imported, is the train/ package.) Tools such as the
benches may also use what a subpackage or top-level module lists in its `__all__` (lazy_exports.py).
"""
from __future__ import annotations

from lmplatform.lazy_exports import lazy_exports

__version__ = "0.1.0"

# name -> the module it lives in
PUBLIC: dict[str, str] = {
    **dict.fromkeys(("run_training", "run_pipeline", "run_study", "run_evaluation", "serve", "stop_serving", "export",
                     "register_objective", "register_evaluation", "register_stage_kind", "register_trial_kind",
                     "register_export_format"),
                    "lmplatform.api"),
    "Encoder": "lmplatform.models.encoder",
    "CrossEncoder": "lmplatform.models.cross_encoder",
    **dict.fromkeys(("TextClassifier", "KNNClassifier"), "lmplatform.models.classifier"),
    **dict.fromkeys(("register_search_settings", "read_search_settings"), "lmplatform.tracking.registry"),
    "MetadataFusion": "lmplatform.retrieval.metadata_fusion",
    **dict.fromkeys(("FisherDiagonal", "MLMFisherLoss", "EWCPenalty"), "lmplatform.objectives.ewc"),
    "LocalCluster": "lmplatform.testing.local_cluster",
    "RunConfig": "lmplatform.objectives.run_config",
    "PipelineConfig": "lmplatform.pipeline.config",
    "EvaluationConfig": "lmplatform.evaluation.config",
    "ServeSettings": "lmplatform.serving.settings",
    "SearchSettings": "lmplatform.retrieval.settings",
}

_public, __getattr__, _ = lazy_exports(__name__, PUBLIC)
__all__ = ["__version__", *_public]


def __dir__() -> list[str]:
    return sorted(__all__)
