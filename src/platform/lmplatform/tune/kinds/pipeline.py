"""Pipeline trials (`trial: pipeline`, `base_pipeline:`): each trial runs a whole pipeline with its values
(tune/pipeline_trial.py runs it inside Tune). Parameters address stage fields by stage name
(`stages.biencoder.run.optim.lr`); the metrics are the stages' reports, `<stage>/<metric>`; the best trial's stage
that registers (`champion.stage`) is registered through the champion gate."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from lmplatform.pipeline.config import PipelineConfig, build_stage_config, load_pipeline_config, resolve_references
from lmplatform.pipeline.runner import stage_outputs
from lmplatform.pipeline.spec import StageRegistrationContext
from lmplatform.pipeline.state import PipelineState
from lmplatform.runtime import resolve_storage_path
from lmplatform.tune.champion import ChampionDecision, GateInputs, register_and_maybe_promote
from lmplatform.tune.gate import check_held_out, check_system_held_out
from lmplatform.tune.metrics import pipeline_reported_metrics
from lmplatform.tune.results import trial_pipeline_name, winner_tags
from lmplatform.tune.space import (
    ChampionSpec,
    LoadedSpace,
    SpaceError,
    SpaceLines,
    check_champion,
    check_values,
    gate_metric,
    load_base,
    target_keys,
    where,
)
from lmplatform.tune.trial_spec import StudyRun


def check(loaded: LoadedSpace, lines: SpaceLines) -> PipelineConfig:
    """Every parameter must address a stage field the base pipeline accepts, with its sampled values; every
    target must be a metric some stage reports (`<stage>/<metric>`)."""
    space, source = loaded.space, loaded.path
    base, with_override = load_base(loaded, lines, "the base pipeline", load_pipeline_config)
    stages = [stage.name for stage in base.stages]
    for name, param in space.parameters.items():
        parts = name.split(".")
        if parts[0] == "stages" and (len(parts) < 3 or parts[1] not in stages):
            raise SpaceError(f"{where(source, lines, ('parameters', name))}: parameter {name!r} names no stage of "
                             f"{space.base_pipeline}; its stages: {', '.join(stages)} (address a field as "
                             "stages.<stage>.<field>..., e.g. stages.<stage>.run.optim.lr)")
        check_values(loaded, lines, name, param, f"the base pipeline {space.base_pipeline}", with_override)
        for cond in param.when:
            if cond not in space.parameters:
                raise SpaceError(f"{where(source, lines, ('parameters', name, 'when', cond))}: condition on {cond!r}, "
                                 "which is not a searched parameter")
    allowed = pipeline_reported_metrics(base)
    targets = target_keys(space) + ([(("scheduler", "metric"), space.scheduler.metric)] if space.scheduler.metric else [])
    for key, metric in targets:
        if metric not in allowed:
            raise SpaceError(f"{where(source, lines, key)}: metric {metric!r} is never reported by a trial of "
                             f"{space.base_pipeline}; its stages report: {', '.join(sorted(allowed))}")
    champion = space.champion
    if champion.register_best:
        registrable = [stage.name for stage in base.stages if stage.spec.registers]
        if champion.stage is not None and champion.stage not in registrable:
            raise SpaceError(f"{where(source, lines, ('champion', 'stage'))}: champion.stage {champion.stage!r} is not a "
                             f"training or system stage of {space.base_pipeline}; those stages: "
                             f"{', '.join(registrable) or 'none'}")
        if not registrable:
            raise SpaceError(f"{where(source, lines, ('champion',))}: {space.base_pipeline} trains no model to register; "
                             "set champion.register_best: false")
        registered = next(s for s in base.stages if s.name == (champion.stage or registrable[-1]))
        if not hasattr(registered.spec.module(), "registration"):  # else the study would fail only once it is over
            raise SpaceError(f"{where(source, lines, ('champion',))}: stage {registered.name!r} of kind "
                             f"{registered.spec.name!r} may register (its spec's `registers`), but its module "
                             f"{registered.spec.implementation} has no `registration`; set champion.register_best: false")
    check_champion(loaded, lines)
    return base


def tracking(loaded: LoadedSpace) -> Any:
    return loaded.base.tracking


def trainable(loaded: LoadedSpace, study: StudyRun) -> Callable[..., Any]:
    from ray import tune

    from lmplatform.tune.pipeline_trial import pipeline_trial

    return tune.with_parameters(pipeline_trial, base_pipeline=str(loaded.base_path), overrides=loaded.base_overrides,
                                study=study)


def trial_pipeline(loaded: LoadedSpace, params: dict[str, Any]) -> PipelineConfig:
    """The pipeline a trial with these values runs."""
    return load_pipeline_config(loaded.base_path, loaded.trial_overrides(params))


def stage_cpus(pipeline: PipelineConfig) -> float:
    """CPUs the largest stage of a pipeline reserves at once (training workers, mining actors, a system stage's
    task or index encoder): what one trial needs to make progress."""
    return max([0.0, *(stage.spec.module().cpus(pipeline, stage) for stage in pipeline.stages)])


def concurrent_trials(loaded: LoadedSpace, cluster_cpus: float) -> int:
    """How many trials the cluster holds at once, each at its largest stage (at least one)."""
    need = stage_cpus(loaded.base)
    return max(1, int(cluster_cpus // need)) if need > 0 else max(1, int(cluster_cpus))


def trial_state_folder(loaded: LoadedSpace, study: str, trial_id: str) -> Path:
    """Where the pipeline of a study's trial keeps its state."""
    return Path(resolve_storage_path(loaded.base.storage_path)) / trial_pipeline_name(study, trial_id)


def champion(loaded: LoadedSpace, best: dict[str, Any], tracking_uri: str, study_name: str) -> ChampionDecision:
    """Register the best trial's model (`champion.stage`, by default its last stage that registers) and let the gate
    decide on the alias. What is registered and how the gate scores it is the stage kind's (`registration`,
    pipeline/spec.py): a system stage registers its bi-encoder with its index, settings and re-ranker, made servable
    before the gate, which then compares systems. A confirmation set may name the trial's own files
    (`stage:pairs/dev_confirm`), and must share no query with what any of its stages trained or selected on."""
    space = loaded.space
    pipeline = trial_pipeline(loaded, best["params"])
    folder = trial_state_folder(loaded, study_name, best["trial_id"])
    state = PipelineState.load(folder)
    registrable = [stage for stage in pipeline.stages if stage.spec.registers]
    stage = next(s for s in registrable if s.name == (space.champion.stage or registrable[-1].name))
    outputs = stage_outputs(state)
    registration = stage.spec.module().registration(  # type: ignore[attr-defined]
        StageRegistrationContext(pipeline, stage, state, outputs, folder / stage.name))
    spec = ChampionSpec.model_validate(resolve_references(space.champion.model_dump(mode="json"), outputs))
    name = spec.registered_model or registration.default_name
    source = next(s for s in pipeline.stages if s.name == registration.source)
    # what is registered, gated and tagged is the source stage's model (a system's retriever)
    objective = build_stage_config(pipeline, source, "default", "runs", "gate", None, outputs).objective.name
    gate = None
    if spec.confirm is not None:
        for other in (s for s in pipeline.stages if s.spec.trains):
            check_held_out(spec, build_stage_config(pipeline, other, "default", "runs", "gate", None, outputs))
        if registration.selected_on is not None:
            check_system_held_out(spec, registration.selected_on)
        gate = GateInputs(spec, gate_metric(space), objective, state.stages[source.name].init_model or "default",
                          registration.search, registration.text_metadata() if registration.text_metadata else None)
    record = state.stages[stage.name]
    publish = registration.publish
    return register_and_maybe_promote(
        tracking_uri, name, record.model_run_id or record.mlflow_run_id, "model", space.metric, space.mode,
        best["metrics"][space.metric], f"pipeline:{pipeline.name}:{space.metric}",
        {k: v for k, v in best["metrics"].items() if k.startswith(f"{stage.name}/") and "ir_" in k},
        tags={**winner_tags(study_name, best, objective), "lmp.pipeline_run": state.run_name},
        alias=spec.alias, gate=gate,
        before_decision=(lambda version: publish(tracking_uri, name, version)) if publish else None,
    )
