"""The application builder: `args` (a `ServeSettings` dict) -> a Ray Serve application.

Used by `serve run serve/config.yaml`, `serve deploy`, `lmp serve run` and
`ray_jobs/serve.py` alike. The model named by `args.model` is resolved here, once,
to a pinned release; the replicas receive it in their `user_config`, which is also
the handle for hot reload (see `control.reload`).
"""
from __future__ import annotations

from typing import Any, Optional

from ray.serve import Application

from lmplatform.serving.deployments import ClassifierDeployment, RerankerDeployment, RetrieverDeployment
from lmplatform.serving.ingress import ServeIngress
from lmplatform.serving.release import Release, release_for
from lmplatform.serving.settings import ServeSettings, parse_settings
from lmplatform.serving.writer import ChangeLogWriter

MODEL_DEPLOYMENTS = ("RetrieverDeployment", "ClassifierDeployment")
INGRESS = "ServeIngress"
WRITER = "ChangeLogWriter"


def model_user_config(releases: list[Release]) -> dict[str, Any]:
    return {"releases": [r.model_dump() for r in releases]}


def ingress_user_config(active: Release) -> dict[str, Any]:
    return {"active": active.model_dump()}


def build_app(args: dict[str, Any]) -> Application:
    """The Serve application builder (exactly one parameter, as Serve requires): validate, pin, bind."""
    settings = parse_settings(dict(args))
    return bind_app(settings, release_for(settings))


def reranker_for(settings: ServeSettings, release: Release) -> Optional[str]:
    """The cross-encoder to deploy: the serve settings' `reranker`, else the one registered with the release's
    version (its search settings), else none. A later reload keeps the one deployed at the start."""
    return settings.reranker or (release.search.reranker if release.search else None)


def bind_app(settings: ServeSettings, release: Release) -> Application:
    """The deployment graph for `settings`, every model deployment holding `release`; with live updates on, the
    change log's writer too, which the retrievers replay from and the ingress appends to."""
    cpus = {"ray_actor_options": {"num_cpus": settings.replica_cpus}} if settings.replica_cpus else {}
    models = model_user_config([release])
    live = settings.live
    writer = ChangeLogWriter.bind(live.dir, live.snapshot_every) if live.enabled else None
    retriever = RetrieverDeployment.options(user_config=models, **cpus).bind(
        settings.batching.model_dump(), settings.num_threads, settings.cache_dir, settings.encoder.model_dump(),
        writer, list(live.fields), live.read_wait_s, live.read_retry_s)
    classifier = ClassifierDeployment.options(user_config=models, **cpus).bind(retriever, settings.knn_k, settings.cache_dir)
    reranker = None
    reranker_model = reranker_for(settings, release)
    if reranker_model:
        reranker = RerankerDeployment.options(**cpus).bind(
            reranker_model, settings.tracking_uri,
            max(settings.batching.max_batch_size, settings.limits.rerank_candidates),
            settings.batching.batch_wait_timeout_s, settings.num_threads, settings.cache_dir)
    return ServeIngress.options(user_config=ingress_user_config(release), **cpus).bind(
        retriever, classifier, reranker, settings.limits.model_dump(), settings.auth_token_sha256, writer,
        list(live.fields), live.write_wait_s)
