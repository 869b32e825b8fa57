"""`lmp pipeline tracker`: a tracker's export to a registered, indexed and served duplicate finder in one command
(`lmplatform.pipeline.tracker_system`; ray_jobs/tracker_system.py submits it as one Ray job)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer
from pydantic import ValidationError

from lmplatform.data.trackers import TrackerImportConfig
from lmplatform.pipeline.tracker_system import (
    RECIPE,
    ServeRequest,
    default_data_root,
    plan_tracker_system,
    run_tracker_system,
    serve_until_stopped,
)
from lmplatform.serving.settings import ServeConfigError


def tracker(
    fmt: str = typer.Option(..., "--format", "-f", help="jira-json, jira-csv, bugzilla-json, github-json or jsonl."),
    inputs: List[Path] = typer.Option(..., "--input", "-i", help="Export file or folder (repeatable)."),
    name: str = typer.Option(..., "--name", help="The tracker's name: the registered model, and runs/data/<name>."),
    links: Optional[List[Path]] = typer.Option(
        None, "--links", help="JSONL of duplicate links, {duplicate_id, master_id} or {id_a, id_b} rows (repeatable)."),
    mapping: Optional[List[str]] = typer.Option(None, "--map", help="FIELD=SOURCE_PATH, as `lmp data import --map`."),
    metadata: Optional[List[str]] = typer.Option(None, "--metadata", help="Keep only these metadata fields (repeatable)."),
    split: str = typer.Option("time", "--split", help="time (oldest duplicates train, newest test) or group."),
    fractions: str = typer.Option("0.6,0.2,0.2", "--fractions", help="train,dev,test shares."),
    seed: int = typer.Option(0, "--seed", help="Seed of the group split's hash."),
    epoch_unit: str = typer.Option("auto", "--epoch-unit", help="Unit of epoch-number times: auto, s or ms."),
    date_fields: Optional[List[str]] = typer.Option(None, "--date-field", help="A metadata field read as a time, as "
                                                    "`lmp data import --date-field` (repeatable)."),
    link_fields: Optional[str] = typer.Option(None, "--link-fields", help="DUPLICATE,MASTER: the id fields of the "
                                              "--links rows, as `lmp data import --link-fields`."),
    data_out: Optional[Path] = typer.Option(None, "--data-out", help="Folder the import writes and the pipeline reads "
                                            "(default: runs/data/<name>)."),
    config: Path = typer.Option(RECIPE, "--config", "-c", help="The tracker recipe."),
    overrides: Optional[List[str]] = typer.Option(
        None, "--set", help="Pipeline override, as `lmp pipeline run --set` (vars.data_root and vars.registered_model "
                            "are the job's); repeatable."),
    serve: bool = typer.Option(True, "--serve/--no-serve", help="Serve the registered version at the end."),
    serve_config: Optional[Path] = typer.Option(None, "--serve-config", help="Serve config (default: serve/config.yaml)."),
    serve_overrides: Optional[List[str]] = typer.Option(
        None, "--serve-set", help="Override a Serve app arg: --serve-set live.dir=runs/live/x (repeatable)."),
    port: Optional[int] = typer.Option(None, "--port", help="HTTP port (default: the Serve config's, 8000)."),
    route_prefix: Optional[str] = typer.Option(
        None, "--serve-route-prefix", help="Serve the tracker under this path (/writer: /writer/v1/duplicates); each "
                                           "tracker on one cluster needs its own (default: the Serve config's, /)."),
    address: Optional[str] = typer.Option(None, help="Ray cluster address (default: $RAY_ADDRESS, else an embedded "
                                          "local Ray)."),
    detach: bool = typer.Option(False, "--detach", help="Return once serving, leaving the app on the cluster (needs "
                                "one: --address or $RAY_ADDRESS)."),
    check: bool = typer.Option(False, "--check", help="Validate everything, print the plan (then as JSON: the import config, the "
                            "pipeline with its variables set, the serve request), and stop."),
) -> None:
    """Import a tracker's export, run the tracker recipe on it (which registers <name> with its index and search
    settings), and serve exactly the version it registered. Everything is validated before the import starts."""
    from lmplatform.cli.common import fail, user_errors
    from lmplatform.cli.data import _fractions_option, _link_fields_option, _mapping_option

    try:
        imports = TrackerImportConfig(
            format=fmt, inputs=[str(p) for p in inputs], links=[str(p) for p in links or []],
            out=str(data_out or default_data_root(name)), split=split, mapping=_mapping_option(mapping or []),
            metadata=metadata or None, fractions=_fractions_option(fractions), seed=seed, epoch_unit=epoch_unit,
            date_fields=date_fields or None, link_fields=_link_fields_option(link_fields))
        request = ServeRequest(serve_config, tuple(serve_overrides or []), port, detach, route_prefix) if serve else None
        plan = plan_tracker_system(imports, name, config, overrides or [], request, address)
    except ValidationError as exc:
        fail("; ".join(f"import.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()))
        return
    except (*user_errors(), ServeConfigError) as exc:
        fail(str(exc))
        return
    if check:
        for line in plan.lines():
            typer.echo(line)
        typer.echo(json.dumps(plan.to_dict(), indent=2))
        return
    from lmplatform.serving.control import ServeControlError
    from lmplatform.serving.release import ReleaseError

    try:
        result = run_tracker_system(plan, say=lambda line: typer.echo(line))
    except (*user_errors(), ServeConfigError, ReleaseError, ServeControlError) as exc:
        fail(str(exc))
        return
    typer.echo(json.dumps(result.to_dict(), indent=2))
    if result.url and not detach:
        typer.echo("[lmp] serving until Ctrl-C (or `ray job stop`)")
        serve_until_stopped(say=lambda line: typer.echo(line))
