"""`lmp serve run|reload|status`: serve the champion with Ray Serve and move it to a new champion without downtime."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from lmplatform.cli.common import TRACKING_URI_HELP, fail, user_errors
from lmplatform.ray_runtime import ensure_ray
from lmplatform.serving.access_log import ACCESS_LOG_ENV
from lmplatform.serving.settings import ServeConfigError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Serve the champion encoder with Ray Serve.")


def _errors() -> tuple[type[BaseException], ...]:
    from lmplatform.serving.control import ServeControlError
    from lmplatform.serving.release import ReleaseError

    return (*user_errors(), ServeConfigError, ReleaseError, ServeControlError)


@app.command("run")
def run(
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Serve config (default: serve/config.yaml)."),
    model: Optional[str] = typer.Option(None, help="models:/<name>@champion, models:/<name>/<version>, or a model folder."),
    index: Optional[str] = typer.Option(None, help="Saved VectorIndex folder (default: the model run's `index` artifact)."),
    documents: Optional[str] = typer.Option(None, help="Document store JSONL (default: documents.jsonl in the index)."),
    reranker: Optional[str] = typer.Option(None, help="Cross-encoder folder or models:/ URI for rerank=true."),
    tracking_uri: Optional[str] = typer.Option(None, help=TRACKING_URI_HELP),
    overrides: Optional[List[str]] = typer.Option(None, "--set", help="Override an app arg: --set limits.max_k=50."),
    no_batching: bool = typer.Option(False, "--no-batching", help="Encode every request on its own (benchmark baseline)."),
    name: Optional[str] = typer.Option(None, help="Application name in the config (default: the first)."),
    host: Optional[str] = typer.Option(None, help="Bind address (default: the config's, 127.0.0.1)."),
    port: Optional[int] = typer.Option(None, help="HTTP port (default: the config's, 8000)."),
    address: Optional[str] = typer.Option(None, help="Ray address (default: $RAY_ADDRESS, else an embedded local Ray)."),
    watch_interval: float = typer.Option(0.0, help="Seconds between checks of the model alias; reload when it moves "
                                         "(with live.dir set, after rebuilding the new version's index; 0: off)."),
    detach: bool = typer.Option(False, help="Return once running (needs --address: an embedded Ray ends with this command)."),
    ingress: Optional[str] = typer.Option(
        None, help="How HTTP reaches the ingress replicas: proxy (Serve's HTTP proxy), direct (each replica on its own "
                   "port, skipping the proxy's hop) or haproxy (HAProxy on --port, forwarding to those ports). An "
                   "embedded Ray is started for it (default proxy); a cluster must have been started for it (default: "
                   "as it was): RAY_SERVE_THROUGHPUT_OPTIMIZED=1 for direct and haproxy, RAY_SERVE_ENABLE_HA_PROXY=1 "
                   "too for haproxy, on every node before `ray start`."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also print each request's access log line "
                                 "(by default they go to the replicas' log files only)."),
) -> None:
    """Validate, deploy on 127.0.0.1 and keep serving until Ctrl-C (the bearer token comes from $LMP_SERVE_TOKEN)."""
    from lmplatform.serving import control
    from lmplatform.serving.launch import launch, plan_launch

    if ingress is not None and ingress not in control.INGRESS_ENV:
        fail(f"--ingress {ingress!r}: choose one of {', '.join(control.INGRESS_ENV)}")
        return
    if detach and not address:
        fail("--detach needs --address: without it the application lives in this command's embedded Ray")
        return
    sets = list(overrides or []) + (["batching.enabled=false"] if no_batching else [])
    try:
        plan = plan_launch(config, name, sets, {"model": model, "index": index, "documents": documents,
                                                 "reranker": reranker, "tracking_uri": tracking_uri}, host, port)
        typer.echo(f"[lmp] serving {plan.release.id} ({plan.release.model_uri}) as {plan.name!r} at {plan.url}", err=True)
        if ingress is not None and not address:
            os.environ.update(control.INGRESS_ENV[ingress])  # read by every Ray process at its start
        if verbose:
            os.environ[ACCESS_LOG_ENV] = "1"  # an embedded Ray's replicas inherit it
            # A cluster's replicas get it from the app's runtime env (Serve merges env_vars into the job's).
            plan.app.setdefault("runtime_env", {}).setdefault("env_vars", {})[ACCESS_LOG_ENV] = "1"
        ensure_ray(address, serving=True)
        launch(plan, progress=lambda line: typer.echo(f"[lmp] {line}", err=True))
    except _errors() as exc:
        fail(str(exc))
        return
    active = control.ingress(plan.name)
    if ingress is not None:
        try:
            active.require(ingress)
        except control.ServeControlError as exc:
            fail(f"--ingress {ingress}: {exc}; the app is serving at {plan.url}")
            return
    import ray

    from lmplatform.serving.metrics import scrape_urls

    ray_address = ray.get_runtime_context().gcs_address  # for `lmp serve reload|status --address`
    url = active.client_url(plan.url)
    typer.echo(json.dumps({"app": plan.name, "url": url, "docs": f"{url}/docs", "release": plan.release.id,
                           "ray_address": ray_address, "ingress": active.mode, "direct_ingress": active.direct_urls,
                           "metrics": scrape_urls()}))
    if detach:
        return
    stopping = {"now": False}
    for signum in (signal.SIGTERM, signal.SIGINT):  # SIGINT too: a background job starts with it ignored
        signal.signal(signum, lambda *_: stopping.update(now=True))
    try:
        if watch_interval > 0:
            control.watch(plan.name, watch_interval, lambda: stopping["now"], lambda line: typer.echo(f"[lmp] {line}", err=True))
        else:
            while not stopping["now"]:
                time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    from ray import serve

    serve.shutdown()
    typer.echo("[lmp] serve shut down", err=True)


@app.command("reload")
def reload(
    name: str = typer.Option("lmp", help="Application name."),
    address: str = typer.Option("auto", help="Ray address of the cluster running the application."),
    force: bool = typer.Option(False, help="Reload even if the alias still names the served version."),
) -> None:
    """Move the running application to the version its alias names now; requests keep being answered."""
    from lmplatform.serving import control

    _control(address, lambda progress: control.reload(name, progress=progress, force=force))


@app.command("rebuild")
def rebuild(
    name: str = typer.Option("lmp", help="Application name."),
    address: str = typer.Option("auto", help="Ray address of the cluster running the application."),
) -> None:
    """Rebuild the index of the version the alias names now from the documents served now (base corpus, upserts,
    no deletions) with a Ray Data job, log it with the version, and hot-reload onto it (needs live.dir)."""
    from lmplatform.serving import control

    _control(address, lambda progress: control.rebuild(name, progress=progress))


@app.command("import")
def bulk_import(
    corpus: Path = typer.Option(..., "--corpus", help="The export's reports: JSONL (or CSV, Parquet) with id, title, "
                                "description (or text) and metadata fields, as `lmp data import` writes reports.jsonl."),
    metadata_fields: Optional[str] = typer.Option(None, "--metadata-fields",
                                                  help="Fields kept as each document's metadata, comma-separated. "
                                                  "Default: those the served version's metadata fusion reads."),
    label_field: Optional[str] = typer.Option(None, "--label-field", help="Field copied as the document label."),
    id_field: str = typer.Option("id", "--id-field", help="The report id field."),
    replace: bool = typer.Option(False, "--replace", help="Drop the served documents the export lacks (default: keep "
                                 "them beside its reports)."),
    name: str = typer.Option("lmp", help="Application name."),
    address: str = typer.Option("auto", help="Ray address of the cluster running the application."),
) -> None:
    """Load a whole export into the live index as a new index version (a Ray Data job on the cluster), then
    hot-reload onto it. Its reports replace the served copies of the same ids; changes made while it builds are
    applied on top, none lost (needs live.dir)."""
    from lmplatform.serving import control
    from lmplatform.serving.rebuild import BulkImport

    fields = tuple(f for f in metadata_fields.split(",") if f) if metadata_fields is not None else None
    bulk = BulkImport(str(corpus), id_field, label_field=label_field, metadata_fields=fields, replace=replace)
    _control(address, lambda progress: control.rebuild(name, progress=progress, bulk=bulk))


def _control(address: str, call: Callable[[Callable[[str], None]], Any]) -> None:
    """Join the cluster, run a control call with its progress lines on stderr and print its summary; a clear error
    (exit code 2) when it cannot."""
    try:
        ensure_ray(address)
        result = call(lambda line: typer.echo(f"[lmp] {line}", err=True))
    except _errors() as exc:
        fail(str(exc))
        return
    typer.echo(result.summary())


@app.command("status")
def status(
    name: str = typer.Option("lmp", help="Application name."),
    address: str = typer.Option("auto", help="Ray address of the cluster running the application."),
) -> None:
    """Application and deployment states, replicas, and the model version being served."""
    from lmplatform.serving import control

    try:
        ensure_ray(address)
        typer.echo(control.dumps(control.status(name)))
    except _errors() as exc:
        fail(str(exc))


@app.command("demo")
def demo(
    model: str = typer.Option("default", help="models:/<name>@champion, a model folder, or 'default'."),
    corpus: Path = typer.Option(Path("data/demo/reports.jsonl"), help="JSONL with id, title, text (and component)."),
    query: Optional[List[str]] = typer.Option(None, "--query", "-q", help="A search query (repeatable)."),
    tracking_uri: Optional[str] = typer.Option(None, help="MLflow tracking URI for models:/ URIs."),
) -> None:
    """Serve a model over a small corpus, send a few real queries over HTTP, print the hits and shut down."""
    from lmplatform.serving.demo import DEMO_QUERIES, serve_and_query

    try:
        serve_and_query(model, corpus, query or DEMO_QUERIES, tracking_uri=tracking_uri,
                        say=lambda line: typer.echo(line))
    except _errors() as exc:
        fail(str(exc))
