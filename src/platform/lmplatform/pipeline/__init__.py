"""Multi-stage training pipelines: stages of run_training nested under one MLflow run, resumable."""

from lmplatform.lazy_exports import lazy_exports

# What tools such as the benches may use (tests/test_public_surface.py); every module path below is private.
PUBLIC: dict[str, str] = {
    **dict.fromkeys(("load_pipeline_config", "pipeline_config_from_dict", "resolve_references"),
                    "lmplatform.pipeline.config"),
    **dict.fromkeys(("format_table", "run_pipeline", "stage_outputs"), "lmplatform.pipeline.runner"),
    "PipelineState": "lmplatform.pipeline.state",
    "SystemConfig": "lmplatform.pipeline.system_config",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, PUBLIC)
