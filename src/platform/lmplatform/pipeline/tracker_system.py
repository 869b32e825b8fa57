"""A tracker's export to a served duplicate finder in one call: import, the tracker recipe, serve what it registered.

    plan = plan_tracker_system(TrackerImportConfig(format="jira-json", inputs=["export.json"], out=...), "mytracker")
    result = run_tracker_system(plan)      # import -> pipeline (registers mytracker) -> serve that version

`plan_tracker_system` validates everything before anything is written or started: the import config and its input
files, the recipe (configs/pipelines/tracker_system.yaml) with `vars.data_root` = the import's folder and
`vars.registered_model` = the name, its preflight (every file and model it names, except the two files the import
is about to write), and the Serve config with the model it will serve. A problem is a ConfigError (or DataError)
naming the field. `run_tracker_system` then runs the three steps, one line per step with its wall time, and serves
exactly the version the pipeline's registering stage reports (`StageState.model_version`), never an alias that
another run may have moved meanwhile. `lmp pipeline tracker` and ray_jobs/tracker_system.py are its command lines.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from lmplatform.config.loader import ConfigError, parse_yaml, read_yaml
from lmplatform.config.variables import VARS_KEY, extend
from lmplatform.data.readers import DataError, expand_paths
from lmplatform.data.trackers import ImportSummary, TrackerImportConfig, import_tracker
from lmplatform.data.trackers.importer import PAIRS, REPORTS
from lmplatform.pipeline.config import PipelineConfig, pipeline_config_from_dict
from lmplatform.pipeline.pairs import holdout_part
from lmplatform.pipeline.preflight import PreflightError, pipeline_problems
from lmplatform.pipeline.spec import STAGE_PREFIX
from lmplatform.ray_runtime import ensure_ray
from lmplatform.runtime import project_root, resolve_storage_path, resolve_tracking_uri
from lmplatform.serving.settings import DEFAULT_TOKEN_ENV, ServeConfigError, parse_settings

RECIPE = Path("configs/pipelines/tracker_system.yaml")
DATA_FOLDER = Path("runs") / "data"
# The recipe variables the job sets itself (from the import's folder and the name), never by --set.
JOB_VARS = {"data_root": "the import's folder (--data-out)", "registered_model": "the name (--name)"}
# Serve args the job sets itself: the version it registered, in the store it registered it in.
JOB_SERVE_ARGS = ("model", "tracking_uri")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ROUTE_PREFIX = re.compile(r"/|(?:/[A-Za-z0-9._-]+)+")  # what a tracker may be served under
_JOB_ENV_VAR = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # set by Ray's job supervisor in an entrypoint's environment
Say = Callable[[str], None]


@dataclass(frozen=True)
class ServeRequest:
    """How to serve the registered version: the Serve config (None: lmplatform's serve/config.yaml), `--set`
    overrides of its app args, the port (None: the config's), whether to leave it running on the cluster
    (`detach`, which needs one), and the route prefix (None: the config's). The application is named after the
    tracker, so trackers served on one cluster are apps of their own; each needs a route prefix of its own."""

    config: Optional[Path] = None
    overrides: tuple[str, ...] = ()
    port: Optional[int] = None
    detach: bool = False
    route_prefix: Optional[str] = None


@dataclass(frozen=True)
class TrackerSystemPlan:
    """Everything validated: what to import where, the pipeline with its variables set, the stage whose
    registration is served, and how (None: not served), on which Ray (None: $RAY_ADDRESS, else an embedded one)."""

    name: str
    imports: TrackerImportConfig
    pipeline: PipelineConfig
    register_stage: Optional[str]
    serve: Optional[ServeRequest]
    serve_config: Optional[Path] = None
    address: Optional[str] = None

    @property
    def data_root(self) -> Path:
        return Path(self.imports.out)

    def lines(self) -> list[str]:
        """What the job will do, one line per step."""
        imp = self.imports
        fractions = imp.fractions
        out = [f"import: {imp.format} {', '.join(imp.inputs)}" + (f" with links {', '.join(imp.links)}" if imp.links else "")
               + f" -> {imp.out} (split {imp.split} {fractions.train:g}/{fractions.dev:g}/{fractions.test:g})",
               f"pipeline: {self.pipeline.name}: {', '.join(s.name for s in self.pipeline.stages)}"
               + (f"; stage {self.register_stage} registers {self.registered_name}" if self.register_stage else
                  "; registers nothing")]
        if self.serve is None:
            out.append("serve: no (--no-serve)")
        else:
            out.append(f"serve: the version it registers, with {self.serve_config}"
                       + (" on port " + str(self.serve.port) if self.serve.port else "")
                       + (f" under {self.serve.route_prefix}" if self.serve.route_prefix else "")
                       + (", detached on the cluster" if self.serve.detach else ", until stopped"))
        return out

    def to_dict(self) -> dict[str, Any]:
        """The plan as data: the import config, the pipeline with its variables substituted, the serve request."""
        return {"name": self.name, "address": self.address, "import": self.imports.model_dump(mode="json"),
                "pipeline": self.pipeline.model_dump(mode="json", by_alias=True),
                "register_stage": self.register_stage, "registers": self.registered_name,
                "serve": None if self.serve is None else {
                    "config": str(self.serve_config), "overrides": list(self.serve.overrides), "port": self.serve.port,
                    "detach": self.serve.detach, "route_prefix": self.serve.route_prefix}}

    @property
    def registered_name(self) -> Optional[str]:
        if self.register_stage is None:
            return None
        system = self.pipeline.stage(self.register_stage).system
        return system.register_as.name if system is not None and system.register_as is not None else None


@dataclass
class TrackerSystemResult:
    """What the job made: the data folder and import summary, the pipeline run, the version registered and served."""

    name: str
    data_root: str
    summary: ImportSummary
    pipeline_run: Optional[str] = None
    tracking_uri: Optional[str] = None
    registered_model: Optional[str] = None
    model_version: Optional[str] = None
    app: Optional[str] = None
    url: Optional[str] = None
    curl: Optional[str] = None
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "data_root": self.data_root, "pipeline_run": self.pipeline_run,
                "tracking_uri": self.tracking_uri, "registered_model": self.registered_model,
                "model_version": self.model_version,
                "model": f"models:/{self.registered_model}/{self.model_version}" if self.model_version else None,
                "app": self.app, "url": self.url, "curl": self.curl, "seconds": self.seconds}


def default_data_root(name: str) -> Path:
    """runs/data/<name> under the project root (LMP_HOME, else the working directory), where runs/ also lies."""
    return project_root() / DATA_FOLDER / name


def plan_tracker_system(imports: TrackerImportConfig, name: str, recipe: str | Path = RECIPE,
                        overrides: Sequence[str] = (), serve: Optional[ServeRequest] = ServeRequest(),
                        address: Optional[str] = None) -> TrackerSystemPlan:
    """Validate the whole job without writing or starting anything; raise a ConfigError naming the first bad field.

    imports: the import (its `out` is the data root the recipe reads, made absolute here); name: the registered
    model and the data folder's default name; recipe: the tracker pipeline; overrides: its `--set` items
    (`vars.data_root` and `vars.registered_model` are the job's); serve: None not to serve; address: the Ray
    cluster to run on (None: $RAY_ADDRESS, else an embedded Ray)."""
    if not _NAME.match(name):
        raise ConfigError(f"name {name!r}: a registered model and folder name is 1-100 letters, digits, '.', '_' or "
                          "'-', starting with a letter or digit")
    for label, paths in (("import.inputs", imports.inputs), ("import.links", imports.links)):
        try:
            expand_paths(paths)
        except DataError as exc:
            raise ConfigError(f"{label}: {exc}" + _relative_note(paths)) from None
    root = Path(imports.out).expanduser()
    root = root if root.is_absolute() else project_root() / root
    imports = imports.model_copy(update={"out": str(root.resolve())})
    if root.exists() and not root.is_dir():
        raise ConfigError(f"import.out: {root} exists and is not a folder")
    pipeline = load_recipe(recipe, Path(imports.out), name, overrides)
    registering = [s.name for s in pipeline.stages if s.system is not None and s.system.register_as is not None]
    if serve is not None and not registering:
        systems = [s.name for s in pipeline.stages if s.system is not None]
        field_name = f"stages.{systems[-1]}.system.register_as" if systems else "stages"
        raise ConfigError(f"{field_name}: pipeline {pipeline.name!r} registers no version, so there is nothing to serve "
                          "(--no-serve runs it without serving)")
    # The import writes these two files; everything else the pipeline reads must be there now.
    written = {(Path(imports.out) / f).resolve() for f in (REPORTS, PAIRS)}
    problems = [p for p in pipeline_problems(pipeline) if p.path is None or Path(p.path).expanduser().resolve() not in written]
    if problems:
        raise PreflightError(pipeline.name, problems)
    serve_config = check_serve(serve, name, address) if serve is not None else None
    return TrackerSystemPlan(name, imports, pipeline, registering[-1] if registering else None, serve, serve_config,
                             address)


def load_recipe(recipe: str | Path, data_root: Path, name: str, overrides: Sequence[str] = ()) -> PipelineConfig:
    """The recipe with `vars.data_root` and `vars.registered_model` set (as values, not parsed as YAML), then the
    overrides; the job's own variables cannot be overridden."""
    for item in overrides:
        key = item.partition("=")[0].strip()
        variable = key[len(VARS_KEY) + 1:] if key.startswith(f"{VARS_KEY}.") else None
        if variable in JOB_VARS:
            raise ConfigError(f"--set {item!r}: {key} is set by the job, from {JOB_VARS[variable]}")
    path = Path(recipe)
    if not path.is_file():
        raise ConfigError(f"pipeline config not found: {path}" + _relative_note([str(path)]))
    data = extend(read_yaml(path), path, read_yaml)
    variables = data.get(VARS_KEY) or {}
    if not isinstance(variables, dict):
        raise ConfigError(f"{path}: {VARS_KEY} must be a mapping of names to values, got {variables!r}")
    missing = [v for v in JOB_VARS if v not in variables]
    if missing:
        raise ConfigError(f"{path}: {VARS_KEY} has no {', '.join(missing)}: a tracker recipe reads its data from "
                          "${data_root} and registers as ${registered_model}")
    data[VARS_KEY] = {**variables, "data_root": str(data_root), "registered_model": name}
    return pipeline_config_from_dict(data, path.resolve().parent, overrides, source=str(path))


def check_serve(serve: ServeRequest, name: str, address: Optional[str] = None) -> Path:
    """Validate the Serve config as `lmp serve run` will read it (the application, its `--set` overrides, the
    settings with the model to come as models:/<name>/1), without the registry; returns the config's path.
    `lmp serve run`'s own validation runs again when the version exists (serving/launch.py `plan_launch`)."""
    from lmplatform.serving.launch import DEFAULT_CONFIG, serve_overrides

    if serve.detach and not (address or os.environ.get("RAY_ADDRESS")):
        raise ConfigError("detach: needs a Ray cluster (--address, or $RAY_ADDRESS as `ray job submit` sets it): "
                          "an embedded Ray ends with this job")
    if serve.port is not None and not 0 < serve.port < 65536:
        raise ConfigError(f"port: {serve.port} is not a TCP port")
    if serve.route_prefix is not None and not ROUTE_PREFIX.fullmatch(serve.route_prefix):
        raise ConfigError(f"route_prefix: {serve.route_prefix!r} is not a route prefix: '/' or '/' then letters, digits, "
                          "'-', '_', '.' and further '/' (/writer, /trackers/suite), not ending in '/'")
    path = Path(serve.config) if serve.config else DEFAULT_CONFIG
    if not path.is_file():
        raise ServeConfigError(f"serve config not found: {path}")
    raw = parse_yaml(path.read_text()) or {}
    apps = raw.get("applications") or []
    if not apps or not isinstance(apps[0], dict):
        raise ServeConfigError(f"{path}: applications: no application to serve")
    for item in serve.overrides:
        key = item.partition("=")[0].strip()
        if key in JOB_SERVE_ARGS:
            raise ServeConfigError(f"--serve-set {item!r}: {key} is set by the job (the version it registers)")
    args = serve_overrides(apps[0].get("args") or {}, serve.overrides, "--serve-set")
    parse_settings({**args, "model": f"models:/{name}/1"})
    return path


def run_tracker_system(plan: TrackerSystemPlan, say: Say = print) -> TrackerSystemResult:
    """Import, run the pipeline, serve the version it registered (`plan.serve`); one line per step with its wall
    time, then the total, the URL and a sample request. Returns once serving (see `serve_until_stopped`)."""
    started = time.monotonic()
    steps = 3 if plan.serve is not None else 2
    name = plan.name
    warning = scratch_warning(plan)
    if warning:
        say(warning)

    begin = time.monotonic()
    summary = import_tracker(plan.imports)
    for line in summary.lines():
        say(f"[lmp] import: {line}")
    result = TrackerSystemResult(name, plan.imports.out, summary)
    result.seconds["import"] = round(time.monotonic() - begin, 1)
    say(f"[lmp] step 1/{steps} import: {summary.reports_kept} reports, {sum(summary.pairs.values())} duplicate pairs "
        f"({', '.join(f'{k} {v}' for k, v in summary.pairs.items())}) in {plan.imports.out}: {result.seconds['import']:.1f} s")
    check_pairs(plan.pipeline, plan.data_root)

    begin = time.monotonic()
    run_pipeline_step(plan, result)
    result.seconds["pipeline"] = round(time.monotonic() - begin, 1)
    registered = (f"registered {result.registered_model} version {result.model_version}" if result.model_version
                  else "registered nothing")
    say(f"[lmp] step 2/{steps} pipeline {result.pipeline_run}: {registered}: {result.seconds['pipeline']:.1f} s")

    if plan.serve is not None:
        begin = time.monotonic()
        serve_step(plan, result, say)
        result.seconds["serve"] = round(time.monotonic() - begin, 1)
        say(f"[lmp] step 3/{steps} serve: models:/{result.registered_model}/{result.model_version} as {result.app!r} "
            f"at {result.url}: {result.seconds['serve']:.1f} s")
    result.seconds["total"] = round(time.monotonic() - started, 1)
    say(f"[lmp] {name}: done in {result.seconds['total']:.1f} s ("
        + ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items() if k != "total") + ")")
    if result.url:
        result.curl = sample_curl(result.url, plan.data_root)
        say(f"[lmp] {name}: serving at {result.url}; try: {result.curl}")
    return result


def check_pairs(pipeline: PipelineConfig, data_root: Path) -> None:
    """A DataError when a pairs stage reading the import would write no pair for a split a later stage reads
    (`stage:<pairs stage>/<split>`; a holdout's parts counted by its group hash): found now, not after the stages
    before the one reading it have trained."""
    relations = (data_root / PAIRS).resolve()
    rows = [json.loads(line) for line in relations.read_text(encoding="utf-8").splitlines() if line.strip()]
    dumped = json.dumps(pipeline.model_dump(mode="json", by_alias=True))
    for stage in pipeline.stages:
        if stage.pairs is None or Path(stage.pairs.relations).expanduser().resolve() != relations:
            continue
        counts = Counter(row.get("split") for row in rows)
        holdout = stage.pairs.holdout
        if holdout is not None:
            parts = Counter(holdout_part(row["group"], holdout) for row in rows if row.get("split") == holdout.split)
            counts.update({name: parts[i] for i, name in enumerate(holdout.into)})
        read = sorted(set(re.findall(rf'"{STAGE_PREFIX}{re.escape(stage.name)}/([^"/]+)"', dumped)))
        empty = [split for split in read if not counts.get(split)]
        if empty:
            outputs = [*stage.pairs.splits, *(holdout.into if holdout else ())]
            made = ", ".join(f"{name} {counts.get(name, 0)}" for name in outputs if name != (holdout and holdout.split))
            raise DataError(f"stage {stage.name!r} would write no {' or '.join(empty)} pairs from the import ({made}), "
                            f"which later stages read: export more duplicates (links), or change --fractions / --split")


def run_pipeline_step(plan: TrackerSystemPlan, result: TrackerSystemResult) -> None:
    """Run the pipeline on the cluster the serve request names (else $RAY_ADDRESS, else an embedded Ray) and note
    the run and the version its registering stage reports."""
    from lmplatform.pipeline.runner import run_pipeline

    address = plan.address or os.environ.get("RAY_ADDRESS")
    if address:
        ensure_ray(address)
        if plan.serve is not None:  # on a cluster the prefix must be free: found now, not after training
            check_route_free(plan.name, plan.serve.route_prefix or "/")
    run = run_pipeline(plan.pipeline)
    result.pipeline_run, result.tracking_uri = run.run_name, run.tracking_uri
    if plan.register_stage is not None:
        record = run.state.stages[plan.register_stage]
        result.registered_model, result.model_version = record.registered_model, record.model_version


def serve_step(plan: TrackerSystemPlan, result: TrackerSystemResult, say: Say) -> None:
    """Serve models:/<registered>/<version> from the pipeline's tracking store, as `lmp serve run` does."""
    import ray

    from lmplatform.serving import control
    from lmplatform.serving.launch import launch, plan_launch

    serve = plan.serve
    assert serve is not None
    if not result.model_version:
        raise ConfigError(f"stage {plan.register_stage!r} registered no version, so there is nothing to serve")
    address = plan.address or os.environ.get("RAY_ADDRESS")
    if not address and ray.is_initialized():
        ray.shutdown()  # the pipeline's embedded Ray was started lean, for training; serving wants its own
    launch_plan = plan_launch(plan.serve_config, None, list(serve.overrides),
                              {"model": f"models:/{result.registered_model}/{result.model_version}",
                               "tracking_uri": result.tracking_uri}, None, serve.port,
                              app_name=plan.name, route_prefix=serve.route_prefix)
    say(f"[lmp] serving {launch_plan.release.id} ({launch_plan.release.model_uri}) as {launch_plan.name!r} at {launch_plan.url}")
    ensure_ray(address, serving=True)
    check_route_free(launch_plan.name, launch_plan.app["route_prefix"])  # again: an app may have come while it trained
    launch(launch_plan, progress=lambda line: say(f"[lmp] {line}"))
    result.app = launch_plan.name
    result.url = control.ingress(launch_plan.name).client_url(launch_plan.url)


def check_route_free(app: str, route_prefix: str) -> None:
    """A ConfigError when another application on the joined Ray's Serve already answers under `route_prefix`
    (Serve would refuse the deploy; the same app is this tracker served again, which replaces it)."""
    from lmplatform.serving.control import route_owners

    other = next((name for name, prefix in route_owners().items() if prefix == route_prefix and name != app), None)
    if other is not None:
        raise ConfigError(f"route_prefix: {route_prefix} is served by application {other!r} on this cluster; give "
                          f"tracker {app!r} its own (--serve-route-prefix /{app})")


def serve_until_stopped(say: Say = print) -> None:
    """Block until SIGTERM or SIGINT (Ctrl-C, `ray job stop`), then shut Serve down."""
    from ray import serve

    stopping = {"now": False}
    for signum in (signal.SIGTERM, signal.SIGINT):  # SIGINT too: a background job starts with it ignored
        signal.signal(signum, lambda *_: stopping.update(now=True))
    try:
        while not stopping["now"]:
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    serve.shutdown()
    say("[lmp] serve shut down")


def sample_report(data_root: Path) -> dict[str, Any]:
    """A report of the import to ask about: a test duplicate with a description, the last in pairs.jsonl (else any
    pair's duplicate, else the first report), as POST /v1/duplicates takes it (its id keeps it out of its own hits)."""
    pairs = [json.loads(line) for line in (data_root / PAIRS).read_text(encoding="utf-8").splitlines() if line.strip()]
    order = [p["duplicate_id"] for p in reversed(pairs) if p.get("split") == "test"] + [p["duplicate_id"] for p in pairs]
    reports: dict[str, dict[str, Any]] = {}
    first: Optional[dict[str, Any]] = None
    with (data_root / REPORTS).open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                first = first or row
                reports[str(row["id"])] = row
    candidates = [reports[i] for i in order if i in reports] + ([first] if first else [])
    chosen = next((r for r in candidates if str(r.get("description") or "").strip()), candidates[0] if candidates else {})
    text = " ".join(str(chosen.get("description") or chosen.get("title") or "").split())
    metadata = {k: chosen[k] for k in ("product", "component", "created") if chosen.get(k) not in (None, "")}
    return {"id": str(chosen.get("id", "")), "title": str(chosen.get("title") or ""),
            "text": text[:300] + ("..." if len(text) > 300 else ""), "metadata": metadata}


def sample_curl(url: str, data_root: Path, k: int = 5) -> str:
    """A curl line for POST /v1/duplicates with a report of the import (with the bearer header when
    $LMP_SERVE_TOKEN is set here)."""
    body = json.dumps({"k": k, "report": sample_report(data_root)}, ensure_ascii=False)
    auth = f' -H "Authorization: Bearer ${DEFAULT_TOKEN_ENV}"' if os.environ.get(DEFAULT_TOKEN_ENV) else ""
    return f"curl -s {url.rstrip('/')}/v1/duplicates{auth} -d {shlex.quote(body)}"


def _relative_note(paths: Sequence[str]) -> str:
    relative = [p for p in paths if not Path(p).expanduser().is_absolute()]
    return f" (relative paths are read from {Path.cwd()})" if relative else ""


def scratch_warning(plan: TrackerSystemPlan) -> Optional[str]:
    """Inside `ray job submit` the working directory is a temporary copy: a warning naming what the job would write
    under it (the data, the pipeline runs, the MLflow store), else None."""
    if _JOB_ENV_VAR not in os.environ:
        return None
    cwd = Path.cwd().resolve()
    tracking = resolve_tracking_uri(plan.pipeline.tracking.tracking_uri)
    places = [("the data", plan.data_root), ("the pipeline runs", Path(resolve_storage_path(plan.pipeline.storage_path)))]
    if tracking.startswith("sqlite:///"):
        places.append(("the MLflow store", Path(tracking[len("sqlite:///"):])))
    inside = [label for label, path in places if cwd == path.resolve() or cwd in path.resolve().parents]
    if not inside:
        return None
    return (f"[lmp] warning: {', '.join(inside)} will be written under this job's temporary working directory {cwd}: "
            "give absolute paths (--data-out, --set storage_path=..., --set tracking.tracking_uri=sqlite:////...)")
