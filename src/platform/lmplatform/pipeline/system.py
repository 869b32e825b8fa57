"""The `system` pipeline stage: a retrieval system assembled from the pipeline's models, chosen and measured on dev.

1. Rank the `select` pairs (dev) against the corpus with the bi-encoder, as the service ranks them
   (`evaluation.system.SystemScorer`): dense, BM25 fused with it, and re-ranked by the cross-encoder.
2. Keep the BM25 weight, re-rank depth and re-rank weight that score best (`choose`); the stage's metrics are
   the chosen system's on `select` (`ir_*`), beside the dense bi-encoder's (`dense_ir_*`) and, with a re-ranker,
   the first stage's alone (`first_stage_ir_*`). With `select.protocol: online` every query is ranked in the online
   protocol (only the reports filed before it within the window, a duplicate group counting once), so both the choice
   and the metrics (`ir_rr_at_<k>`, `ir_mrr_at_<k>`, `ir_map_at_<k>`) are the online ones.
3. With `register`, publish it (`publish_system`): the bi-encoder's registered version gets the served index
   (FAISS + BM25 + documents), the settings, and a link to the re-ranker's own registered version. A study
   registers only its winner, through the champion gate (tune/tuner.py).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from lmplatform.evaluation.retrieval_validation import build_retrieval_set
from lmplatform.evaluation.system import SetMetadata, SystemScorer, load_scorer, text_metadata
from lmplatform.pipeline.config import PipelineConfig, StageConfig, resolve_references
from lmplatform.pipeline.preflight import Problem, data_config_problems, file_problem, model_problems
from lmplatform.pipeline.spec import (
    STAGE_PREFIX,
    StageCheck,
    StageContext,
    StageRegistration,
    StageRegistrationContext,
)
from lmplatform.pipeline.stage_run import run_untrained, section_content, stage_tracking
from lmplatform.pipeline.state import PIPELINE_TAG, PipelineState
from lmplatform.pipeline.system_config import SystemConfig, SystemMetadataConfig, system_metric_names
from lmplatform.retrieval.build import build_index_folder
from lmplatform.retrieval.index import IndexParams
from lmplatform.retrieval.settings import MetadataFusionWeights, SearchSettings
from lmplatform.serving.release import publish_index
from lmplatform.tracking.mlflow_tracking import TrackedRun, flatten
from lmplatform.tracking.registry import register_model_version, register_search_settings
from lmplatform.tracking.version_tags import objective_tag

SETTINGS_FILE = "search_settings.json"
ARTIFACT_DIR = "system"


@dataclass
class SystemResult:
    settings: SearchSettings
    metrics: dict[str, float]
    mlflow_run_id: str
    tried: list[dict[str, Any]] = field(default_factory=list)

    @property
    def summary(self) -> str:
        m, s = self.metrics, self.settings
        how = f"{s.mode}" + (f" (BM25 weight {s.bm25_weight:g})" if s.mode == "hybrid" and s.fusion == "convex" else "")
        if s.mode == "metadata" and s.metadata_fusion is not None:
            how += f" (fusion fitted with C {s.metadata_fusion.config.regularization:g})"
        if s.reranker is not None:
            how += f", re-ranked top {s.rerank_depth} (weight {s.rerank_weight:g})"
        first = f", first stage {m['first_stage_ir_mrr_at_10']:.4f}" if "first_stage_ir_mrr_at_10" in m else ""
        return (f"{how}: MRR@10 {m['ir_mrr_at_10']:.4f} on {int(m['ir_queries'])} select queries "
                f"(dense {m['dense_ir_mrr_at_10']:.4f}{first})")


def fit_metadata_fusions(cfg: SystemMetadataConfig, encoder: Any, batch_size: int) -> tuple[list[MetadataFusionWeights], Any]:
    """(one fusion fitted on `cfg.fit`'s queries per `cfg.regularizations` value, the texts' metadata by text)."""
    by_text = text_metadata(cfg.corpus, cfg.fields, cfg.fusion.read_fields())
    rset = build_retrieval_set(cfg.fit)
    print(f"[lmp] system: metadata fusion fitted on {rset.summary()}", flush=True)
    scorer = SystemScorer(encoder, rset, cfg.fit, batch_size=batch_size, metadata=SetMetadata.of(rset, by_text))
    fusions = [scorer.fit_metadata_fusion(cfg.fusion.model_copy(update={"regularization": c})).to_dict()
               for c in cfg.regularizations]
    return [MetadataFusionWeights.model_validate(f) for f in fusions], by_text


def measure_system(cfg: SystemConfig, retriever: str, reranker: Optional[str]) -> tuple[SearchSettings, dict[str, float], list]:
    """(the chosen settings, their metrics on `select` with the dense and first-stage baselines, every try)."""
    rset = build_retrieval_set(cfg.select)
    print(f"[lmp] system: {rset.summary()}", flush=True)
    scorer = load_scorer(retriever, rset, cfg.select, reranker, cfg.max_seq_length)
    fusions: list[MetadataFusionWeights] = []
    if cfg.metadata is not None:
        fusions, by_text = fit_metadata_fusions(cfg.metadata, scorer.encoder, cfg.select.batch_size)
        scorer.metadata = SetMetadata.of(rset, by_text)
    base = cfg.search.model_copy(update={"reranker": reranker})
    choice = scorer.choose(base, cfg.choose.bm25_weights, cfg.choose.rerank_depths, cfg.choose.rerank_weights,
                           cfg.choose.metric, fusions)
    chosen = choice.settings
    metrics = dict(scorer.means(chosen))
    metrics |= {f"dense_{k}": v for k, v in scorer.means(SearchSettings(mode="dense")).items() if k.startswith("ir_")
                and k not in ("ir_queries", "ir_candidates")}
    if reranker is not None:  # what the re-ranker adds (nothing, when dev gave it no weight and it was dropped)
        first = scorer.means(chosen.model_copy(update={"reranker": None}))
        metrics |= {f"first_stage_{k}": v for k, v in first.items() if k not in ("ir_queries", "ir_candidates")}
    metrics |= {"bm25_weight": chosen.bm25_weight if chosen.mode == "hybrid" else 0.0,
                "rerank_depth": float(chosen.rerank_depth if chosen.reranker else 0),
                "rerank_weight": chosen.rerank_weight if chosen.reranker else 0.0}
    return chosen, metrics, choice.tried


def run_system_stage(cfg: SystemConfig, retriever: str, reranker: Optional[str], folder: Path, tracking_uri: str,
                     experiment: str, run_name: str, parent_run_id: str, tags: Mapping[str, str]) -> SystemResult:
    """Choose and measure the system, write `folder/search_settings.json` and log it, the metrics and every try in a
    new MLflow run nested under `parent_run_id`."""
    folder.mkdir(parents=True, exist_ok=True)
    tracker = TrackedRun.start(tracking_uri, experiment, run_name, {**tags, "lmp.stage_kind": "system"}, parent_run_id)
    try:
        tracker.log_params(flatten({"system": cfg.model_dump(mode="json")}) | {"retriever": retriever, "reranker": reranker})
        settings, metrics, tried = measure_system(cfg, retriever, reranker)
        (folder / SETTINGS_FILE).write_text(json.dumps(settings.model_dump(mode="json"), indent=2))
        tracker.log_metrics(metrics, step=0)
        tracker.log_artifact(folder / SETTINGS_FILE, ARTIFACT_DIR)
        tracker.log_dict({"metric": cfg.choose.metric, "tried": tried}, f"{ARTIFACT_DIR}/choices.json")
    except BaseException:
        tracker.finish("FAILED")
        raise
    tracker.finish()
    return SystemResult(settings, metrics, tracker.run_id, tried)


def publish_system(cfg: SystemConfig, tracking_uri: str, name: str, version: str, retriever: str,
                   settings: SearchSettings, reranker_run_id: Optional[str], folder: Path) -> SearchSettings:
    """Make version `name`/`version` (the bi-encoder) servable as measured: build its index over `cfg.index.corpus`
    and log it to the version's run, register the re-ranker (from its training run) and link it, and attach the
    settings. Returns the settings as registered (their `reranker` a models:/ URI)."""
    from mlflow.tracking import MlflowClient

    assert cfg.index is not None
    client = MlflowClient(tracking_uri)
    built = build_index_folder(cfg.index.corpus, folder / "served", retriever, cfg.index.fields, cfg.index.id_field,
                               cpus_per_actor=cfg.index.cpus_per_actor, params=IndexParams(kind=cfg.index.kind),
                               max_seq_length=cfg.max_seq_length, metadata_fields=list(dict.fromkeys(
                                   [*cfg.index.metadata_fields, *(cfg.metadata.fusion.read_fields() if cfg.metadata else [])])))
    publish_index(built.folder, client.get_model_version(name, version).run_id, tracking_uri)
    print(f"[lmp] system: index of {len(built.index)} documents ({built.index.kind}, BM25 "
          f"{'yes' if built.bm25 else 'no'}) logged with {name} version {version}", flush=True)
    if settings.reranker is not None and reranker_run_id is not None:
        reranker_name = (cfg.register_as.reranker_name if cfg.register_as and cfg.register_as.reranker_name
                         else f"{name}-reranker")
        run = client.get_run(reranker_run_id)
        reranker_version = register_model_version(tracking_uri, reranker_name, f"{run.info.artifact_uri}/model",
                                                  reranker_run_id,
                                                  tags={**objective_tag(run.data.tags), "lmp.reranks": f"{name}/{version}"})
        settings = settings.model_copy(update={"reranker": f"models:/{reranker_name}/{reranker_version}"})
    return register_search_settings(tracking_uri, name, version, settings)


# -- the stage kind (pipeline/spec.py) -------------------------------------------------------------------------
def run(ctx: StageContext) -> None:
    run_untrained(ctx, lambda: _measure_and_register(ctx))


def _measure_and_register(ctx: StageContext) -> SystemResult:
    """Measure the system on its select set (a Ray task with its own CPUs), and register it when the stage says so."""
    import ray
    from mlflow.tracking import MlflowClient
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    resolved: SystemConfig = ctx.section
    record, state, system = ctx.record, ctx.state, ctx.stage.section
    retriever, reranker = resolved.retriever, resolved.reranker
    print(f"[lmp] {ctx.label}: measuring {retriever}" + (f" re-ranked by {reranker}" if reranker else ""), flush=True)
    # Its own reservation, as a training stage's workers have theirs: outside the placement group of the study trial
    # that may be running this pipeline (which holds no CPU).
    measure = ray.remote(num_cpus=resolved.cpus)(run_system_stage).options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=None))
    result = ray.get(measure.remote(resolved, retriever, reranker, ctx.folder / ctx.stage.name, *stage_tracking(ctx)))
    record.model_dir, record.search = retriever, result.settings.model_dump(mode="json")
    record.model_run_id = _source_run(system.retriever, state)
    record.reranker_run_id = _source_run(system.reranker, state) if system.reranker else None
    if resolved.register_as is not None:
        if record.model_run_id is None:
            raise ValueError(f"stage {ctx.stage.name!r}: system.register_as needs system.retriever to be a training stage "
                             "of this pipeline (its MLflow run holds the model the version is registered from)")
        run = MlflowClient(state.tracking_uri).get_run(record.model_run_id)
        version = register_model_version(state.tracking_uri, resolved.register_as.name, f"{run.info.artifact_uri}/model",
                                         record.model_run_id,
                                         tags={**objective_tag(run.data.tags), PIPELINE_TAG: state.run_name})
        settings = publish_system(resolved, state.tracking_uri, resolved.register_as.name, version, retriever,
                                  result.settings, record.reranker_run_id, ctx.folder / ctx.stage.name)
        record.registered_model, record.model_version, record.search = (
            resolved.register_as.name, version, settings.model_dump(mode="json"))
        print(f"[lmp] {ctx.label}: registered {resolved.register_as.name} version {version} with its index and settings",
              flush=True)
    return result


def registration(ctx: StageRegistrationContext) -> StageRegistration:
    """A system registers its retriever (a training stage of the pipeline) with its index, settings and re-ranker;
    the gate compares it as served, and its confirmation set must be held out from the system's select set too."""
    system = SystemConfig.model_validate(resolve_references(ctx.stage.section.model_dump(mode="json"), ctx.outputs))
    record = ctx.state.stages[ctx.stage.name]
    settings = SearchSettings.model_validate(record.search)
    metadata = system.metadata

    def publish(tracking_uri: str, name: str, version: str) -> None:
        if system.index is not None:
            publish_system(system, tracking_uri, name, version, record.model_dir or "", settings,
                           record.reranker_run_id, ctx.folder)

    return StageRegistration(
        source=ctx.stage.section.retriever.removeprefix(STAGE_PREFIX),
        default_name=system.register_as.name if system.register_as else f"{ctx.pipeline.name}-{ctx.stage.name}",
        selected_on=system.select, search=settings,
        text_metadata=(lambda: text_metadata(metadata.corpus, metadata.fields, metadata.fusion.read_fields()))
        if metadata else None,
        publish=publish)


def _source_run(reference: Optional[str], state: PipelineState) -> Optional[str]:
    """The MLflow run holding the model of `stage:<name>` (None for a model from outside the pipeline)."""
    if not reference or not reference.startswith(STAGE_PREFIX):
        return None
    return state.stages[reference[len(STAGE_PREFIX):]].model_run_id


def problems(ctx: StageCheck) -> list[Problem]:
    system, where = ctx.section, ctx.where
    found = [Problem(p.where, f"system.{p.field}", p.message, p.path) for p in data_config_problems(system, where)]
    found += model_problems(system.retriever, "system.retriever", where, ctx.will_run, ctx.finished)
    found += model_problems(system.reranker, "system.reranker", where, ctx.will_run, ctx.finished)
    if system.index is not None and not system.index.corpus.startswith(STAGE_PREFIX):
        found += file_problem(system.index.corpus, "system.index.corpus", where)
    return found


reuse_content = section_content


def cpus(pipeline: PipelineConfig, stage: StageConfig) -> float:
    system = stage.section
    return max(system.cpus, system.index.cpus_per_actor if system.index else 0.0)


def metric_names(pipeline: PipelineConfig, stage: StageConfig) -> set[str]:
    return set(system_metric_names(stage.section))
