"""From a Serve config file plus overrides to a running application: what `lmp serve run` and ray_jobs/serve.py do.

Everything is validated on the driver first (settings, model, index), so a bad
config fails before any replica starts and the message names the field.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from lmplatform.config.loader import ConfigError, apply_overrides, parse_yaml
from lmplatform.serving.app import reranker_for
from lmplatform.serving.control import DEFAULT_APP, IMPORT_PATH, application_config, deploy, start
from lmplatform.serving.release import Release, check_release, collection_for, release_for
from lmplatform.serving.settings import DEFAULT_TOKEN_ENV, ServeConfigError, ServeSettings, parse_settings, token_sha256

PROXY_LOCATIONS = ("HeadOnly", "EveryNode", "Disabled")  # Ray Serve's ProxyLocation values
DEFAULT_CONFIG = Path(__file__).resolve().parents[4] / "serve" / "config.yaml"


@dataclass
class LaunchPlan:
    name: str
    host: str
    port: int
    settings: ServeSettings
    release: Release
    app: dict[str, Any]
    # Where Serve runs its HTTP proxies. On a cluster, EveryNode (Serve's own default) starts a
    # proxy on each node with a replica, all binding host:port: with a loopback host they are
    # unreachable from outside their node, and nodes sharing one machine fight over the port.
    proxy_location: Optional[str] = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.app['route_prefix'].rstrip('/')}"


def serve_overrides(args: dict[str, Any], overrides: list[str], flag: str) -> dict[str, Any]:
    """A copy of a Serve application's `args` with each `limits.max_k=50` of `flag` set."""
    try:
        return apply_overrides(args, overrides, flag, example="limits.max_k=50")
    except ConfigError as exc:
        raise ServeConfigError(str(exc)) from None


def plan_launch(config: Optional[str | Path] = None, name: Optional[str] = None, overrides: Optional[list[str]] = None,
                args: Optional[dict[str, Any]] = None, host: Optional[str] = None, port: Optional[int] = None,
                token_env: str = DEFAULT_TOKEN_ENV, app_name: Optional[str] = None,
                route_prefix: Optional[str] = None) -> LaunchPlan:
    """Read the Serve config, apply overrides (`--set limits.max_k=50`, explicit `args`), validate, pin the model.
    `name` picks the config's application; `app_name` and `route_prefix` replace its name and prefix."""
    path = Path(config) if config else DEFAULT_CONFIG
    if not path.is_file():
        raise ServeConfigError(f"serve config not found: {path}")
    raw = parse_yaml(path.read_text()) or {}
    apps = raw.get("applications") or []
    chosen = next((a for a in apps if name is None or a.get("name") == name), None)
    if chosen is None:
        raise ServeConfigError(f"{path}: no application named {name!r} (has: {[a.get('name') for a in apps]})")
    if chosen.get("import_path", IMPORT_PATH) != IMPORT_PATH:
        raise ServeConfigError(f"{path}: application {chosen.get('name')!r} has import_path {chosen.get('import_path')!r}; "
                               f"lmp serve runs {IMPORT_PATH}")
    merged = serve_overrides(chosen.get("args") or {}, overrides or [], "--set")
    merged.update({k: v for k, v in (args or {}).items() if v is not None})
    token = os.environ.get(token_env)
    if token:
        merged["auth_token_sha256"] = token_sha256(token)
    settings = parse_settings(merged)
    release = release_for(settings)
    check_release(release, settings.cache_dir, collection_for(settings))
    deployments = [d for d in chosen.get("deployments") or []
                   if d.get("name") != "RerankerDeployment" or reranker_for(settings, release)]
    http = raw.get("http_options") or {}
    proxy_location = raw.get("proxy_location")
    if proxy_location is not None and proxy_location not in PROXY_LOCATIONS:
        raise ServeConfigError(f"{path}: proxy_location {proxy_location!r} is not one of {', '.join(PROXY_LOCATIONS)}")
    app = application_config(settings, app_name or chosen.get("name") or DEFAULT_APP,
                             route_prefix or chosen.get("route_prefix", "/"), deployments, chosen.get("logging_config"))
    return LaunchPlan(app["name"], host or http.get("host", "127.0.0.1"), int(port or http.get("port", 8000)),
                      settings, release, app, proxy_location)


def launch(plan: LaunchPlan, timeout_s: float = 600.0, progress: Optional[Callable[[str], None]] = None) -> None:
    """Start Serve on the plan's host:port (on the Ray already joined) and deploy the application."""
    start(plan.host, plan.port, plan.proxy_location)
    deploy(plan.app, timeout_s, progress)
