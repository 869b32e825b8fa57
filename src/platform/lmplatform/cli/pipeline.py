"""`lmp pipeline ...`: run, resume and inspect multi-stage pipelines."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from lmplatform.config.loader import ConfigError
from lmplatform.pipeline.config import load_pipeline_config
from lmplatform.pipeline.state import PipelineState
from lmplatform.ray_runtime import ensure_ray
from lmplatform.runtime import resolve_storage_path

app = typer.Typer(no_args_is_help=True, help="Multi-stage pipelines (domain MLM -> task, EWC, forgetting).")
PipelineSetOption = typer.Option(
    None, "--set", help="pipeline field (tracking.experiment=x) or stages.<stage>.<section>.<field>=v; repeatable.")


@app.command("run")
def pipeline_run(
    config: Path = typer.Option(..., "--config", "-c", help="Pipeline YAML (see configs/pipelines/)."),
    overrides: Optional[List[str]] = PipelineSetOption,
    resume: Optional[str] = typer.Option(None, help="Continue this pipeline run: finished stages are skipped."),
    address: Optional[str] = typer.Option(None, help="Ray cluster address (default: $RAY_ADDRESS, else an embedded local Ray)."),
) -> None:
    """Run every stage as a Ray Train run nested under one MLflow parent run."""
    from lmplatform.cli.common import fail, user_errors
    from lmplatform.pipeline.runner import run_pipeline

    try:
        cfg = load_pipeline_config(config, overrides or [])
        if address:
            ensure_ray(address)
        result = run_pipeline(cfg, resume=resume)
    except user_errors() as exc:
        fail(str(exc))
        return
    typer.echo(json.dumps({
        "pipeline_run": result.run_name,
        "mlflow_parent_run_id": result.parent_run_id,
        "state": str(result.folder / "pipeline_state.json"),
        "stages": {n: {"model_dir": s.model_dir, "mlflow_run_id": s.mlflow_run_id, "model_version": s.model_version,
                       **({"pairs_file": s.output_path} if s.output_path else {}),
                       **({"files": s.outputs} if s.outputs else {}), **({"reused_from": s.reused_from} if s.reused_from else {})}
                   for n, s in result.state.stages.items()},
        "forgetting": result.forgetting,
        "continual_metrics": result.continual,
    }, indent=2))


@app.command("validate")
def pipeline_validate(
    config: Path = typer.Option(..., "--config", "-c"),
    overrides: Optional[List[str]] = PipelineSetOption,
) -> None:
    """Validate a pipeline and every stage's run config; print the stage plan."""
    from lmplatform.cli.common import fail
    try:
        cfg = load_pipeline_config(config, overrides or [])
    except ConfigError as exc:
        fail(str(exc))
        return
    for i, stage in enumerate(cfg.stages, 1):
        ewc = f", EWC λ={stage.ewc.lambda_:g} vs {stage.ewc.anchor_reference}" if stage.ewc else ""
        evals = f", evaluations: {', '.join(e.key for e in stage.evaluations)}" if stage.evaluations else ""
        if stage.pairs is not None:
            source = f"writes {', '.join(stage.pairs.outputs())} from {stage.pairs.relations}"
        elif stage.system is not None:
            source = f"the retrieval system around {stage.system.retriever}" + (
                f", re-ranked by {stage.system.reranker}" if stage.system.reranker else "")
        else:
            source = f"mines hard negatives with {stage.init_from}" if stage.mine else f"from {stage.init_from}"
        typer.echo(f"{i}. {stage.name}: {source}{ewc}{evals}")


@app.command("status")
def pipeline_status(
    run_name: str = typer.Argument(..., help="The pipeline run name."),
    storage_path: str = typer.Option("runs/pipelines", help="The pipeline config's storage_path."),
) -> None:
    """Print a pipeline run's state file (which stages finished, their models, errors)."""
    from lmplatform.cli.common import fail
    path = PipelineState.path(Path(resolve_storage_path(storage_path)) / run_name)
    if not path.is_file():
        fail(f"no pipeline state at {path}")
    typer.echo(path.read_text())
