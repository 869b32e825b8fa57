"""`lmp models list|why|card|promote`: registered versions, their metrics, which one holds each alias and why;
move one by hand."""
from __future__ import annotations

import time
from typing import Any, Optional

import typer

from lmplatform.cli.common import TRACKING_URI_HELP, fail
from lmplatform.runtime import resolve_tracking_uri
from lmplatform.tracking.model_card import read_model_card, write_model_card
from lmplatform.tracking.version_tags import DECISION_TAG, FINGERPRINT_TAG, METRIC_TAG, REASON_TAG, VALUE_TAG

app = typer.Typer(add_completion=False, no_args_is_help=True, help="The MLflow model registry.")


def model_versions(tracking_uri: str, name: Optional[str] = None) -> list[dict[str, Any]]:
    """Every version (of `name`, or of every registered model), newest first, with aliases and metric tags."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    names = [name] if name else sorted(m.name for m in client.search_registered_models())
    rows = []
    for model_name in names:
        aliases_of: dict[str, list[str]] = {}
        for alias, version in client.get_registered_model(model_name).aliases.items():
            aliases_of.setdefault(str(version), []).append(alias)
        for v in client.search_model_versions(f"name = '{model_name}'"):
            rows.append({
                "name": model_name, "version": str(v.version), "aliases": sorted(aliases_of.get(str(v.version), [])),
                "metric": v.tags.get(METRIC_TAG), "value": v.tags.get(VALUE_TAG),
                "metrics": {k[len("metric."):]: float(val) for k, val in v.tags.items() if k.startswith("metric.")},
                "fingerprint": v.tags.get(FINGERPRINT_TAG), "run_id": v.run_id, "created": v.creation_timestamp,
                "study": v.tags.get("lmp.tune_study"),
            })
    return sorted(rows, key=lambda r: (r["name"], -int(r["version"])))


@app.command("list")
def list_models(
    name: Optional[str] = typer.Option(None, "--name", "-n", help="Only this registered model."),
    tracking_uri: Optional[str] = typer.Option(None, help=TRACKING_URI_HELP),
) -> None:
    """Show registered versions with their metrics; the champion is marked."""
    from mlflow.exceptions import MlflowException
    from rich.console import Console
    from rich.table import Table

    uri = resolve_tracking_uri(tracking_uri)
    try:
        rows = model_versions(uri, name)
    except MlflowException as exc:
        fail(f"cannot read the registry at {uri}: {exc.message}")
        return
    if not rows:
        typer.echo(f"no registered model versions{f' of {name}' if name else ''} at {uri}")
        return
    table = Table(title=f"registered models at {uri}")
    for column in ("model", "version", "aliases", "study metric", "value", "other metrics", "eval fingerprint", "study",
                   "created"):
        table.add_column(column)
    for r in rows:
        others = ", ".join(f"{k} {v:.4g}" for k, v in sorted(r["metrics"].items()) if k != r["metric"])
        value = f"{float(r['value']):.5g}" if r["value"] else "-"
        aliases = ", ".join(r["aliases"])
        table.add_row(
            r["name"], r["version"], f"[bold green]{aliases}[/]" if "champion" in r["aliases"] else aliases,
            r["metric"] or "-", value, others or "-", r["fingerprint"] or "-", r["study"] or "-",
            time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created"] / 1000)),
        )
    Console(width=200).print(table)


def champion_explanation(tracking_uri: str, name: str, version: Optional[str] = None, alias: str = "champion") -> list[str]:
    """Why `version` (default: the newest) of `name` does or does not hold `alias`, from the gate's tags."""
    from mlflow.tracking import MlflowClient

    from lmplatform.tune.gate import GATE_TAG

    client = MlflowClient(tracking_uri)
    holder = client.get_registered_model(name).aliases.get(alias)
    if version is None:
        version = str(max(int(v.version) for v in client.search_model_versions(f"name = '{name}'")))
    tags = client.get_model_version(name, version).tags
    lines = [f"{name} version {version}: " + (f"holds {alias}" if str(holder) == str(version)
                                               else f"not {alias} ({alias} is version {holder})" if holder
                                               else f"no {alias} yet")]
    if DECISION_TAG not in tags:
        lines.append("no gate decision recorded (registered outside a study, e.g. by a training run)")
        return lines
    lines.append(f"gate: {tags[DECISION_TAG]}: {tags.get(REASON_TAG, '')}")
    lines += [f"  {key[len(GATE_TAG) + 1:]}: {value}" for key, value in sorted(tags.items())
              if key.startswith(GATE_TAG + ".") and key not in (DECISION_TAG, REASON_TAG)]
    if "lmp.tune_study" in tags:
        lines.append(f"  selected in study {tags['lmp.tune_study']} (trial {tags.get('lmp.tune_trial')}) on "
                     f"{tags.get('lmp.metric')} = {tags.get('lmp.metric_value')}")
    return lines


@app.command("why")
def why(
    name: str = typer.Argument(..., help="Registered model name."),
    version: Optional[str] = typer.Option(None, "--version", "-v", help="Default: the newest version."),
    alias: str = typer.Option("champion", help="The alias the gate decides on."),
    tracking_uri: Optional[str] = typer.Option(None, help=TRACKING_URI_HELP),
) -> None:
    """Why a version is, or is not, the champion: the gate's decision and the numbers behind it."""
    from mlflow.exceptions import MlflowException

    uri = resolve_tracking_uri(tracking_uri)
    try:
        lines = champion_explanation(uri, name, version, alias)
    except MlflowException as exc:
        fail(f"cannot read {name}{f' version {version}' if version else ''} at {uri}: {exc.message}")
        return
    for line in lines:
        typer.echo(line)


@app.command("card")
def card(
    name: str = typer.Argument(..., help="Registered model name."),
    version: Optional[str] = typer.Option(None, "--version", "-v", help="Default: the newest version."),
    refresh: bool = typer.Option(False, help="Write the card again from the run and the version's tags first."),
    tracking_uri: Optional[str] = typer.Option(None, help=TRACKING_URI_HELP),
) -> None:
    """Print a version's MODEL_CARD.md (written when it was registered, and again after the champion gate)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri = resolve_tracking_uri(tracking_uri)
    try:
        if version is None:
            version = str(max(int(v.version) for v in MlflowClient(uri).search_model_versions(f"name = '{name}'")))
        if refresh:
            write_model_card(uri, name, version)
        text = read_model_card(uri, name, version)
    except (MlflowException, ValueError, OSError) as exc:
        fail(f"no model card for {name}{f' version {version}' if version else ''} at {uri}: "
             f"{getattr(exc, 'message', exc)} (write one with --refresh)")
        return
    typer.echo(text)


@app.command("promote")
def promote(
    name: str = typer.Argument(..., help="Registered model name."),
    version: str = typer.Argument(..., help="The version that gets the alias."),
    alias: str = typer.Option("champion", help="The alias to move."),
    tracking_uri: Optional[str] = typer.Option(None, help=TRACKING_URI_HELP),
) -> None:
    """Move an alias to a version by hand (a study's gate moves it by itself). A service started with
    `lmp serve run --watch-interval` follows: with live.dir set it rebuilds the version's index, then reloads."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri = resolve_tracking_uri(tracking_uri)
    client = MlflowClient(uri)
    try:
        client.get_model_version(name, version)
        previous = client.get_registered_model(name).aliases.get(alias)
        client.set_registered_model_alias(name, alias, version)
        client.set_model_version_tag(name, version, DECISION_TAG, "promoted")
        client.set_model_version_tag(name, version, REASON_TAG, f"promoted by hand (lmp models promote); {alias} was "
                                     f"{f'version {previous}' if previous else 'not set'}")
    except MlflowException as exc:
        fail(f"cannot move {alias} of {name} to version {version} at {uri}: {exc.message}")
        return
    typer.echo(f"{name}: {alias} moved from {f'version {previous}' if previous else 'nowhere'} to version {version}")
