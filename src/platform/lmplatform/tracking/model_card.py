"""MODEL_CARD.md of a registered version, written from its MLflow run, kept in that run; nothing is published.

Every version gets one when it is registered (`registry.register_model_version`), and the champion gate
writes it again once it has decided (`tune/champion.py`), so the card carries the decision and its
numbers. The card says what a reader of a model folder needs and MLflow already knows: the base model,
the objective and its loss, the data (files, fingerprint, row counts), the hyper-parameters, the
evaluation (validation at the start and end of training, the gate's held-out comparison), what the
model is for and where it stops. It lives at `CARD_ARTIFACT` in the version's run (one run can back
versions of two registered models: a training run's own and a study's), and the version's
`CARD_TAG` tag holds its URI. `lmp models card <name>` prints it.
"""
from __future__ import annotations

import importlib
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from lmplatform.markdown import markdown_table
from lmplatform.objectives.registry import objective_spec
from lmplatform.objectives.spec import EMBEDDING_CARD, ModelCardText
from lmplatform.tracking.version_tags import (
    DECISION_TAG,
    GATE_PREFIX,
    METRIC_TAG,
    OBJECTIVE_TAG,
    REASON_TAG,
    RUN_OBJECTIVE_TAG,
    VALUE_TAG,
)

logger = logging.getLogger(__name__)
CARD_FILE = "MODEL_CARD.md"
CARD_TAG = "lmp.model_card"
# Config sections that are hyper-parameters (the rest: data, paths and tracking, shown elsewhere or not at all).
HYPERPARAMETER_PREFIXES = ("model.pooling", "model.max_seq_length", "objective.", "optim.", "scaling.num_workers",
                           "ewc.lambda", "ewc.samples", "ewc.loss")

def card_artifact(name: str, version: str) -> str:
    return f"model_cards/{name}/{version}"


def card_text(objective: str) -> ModelCardText:
    """What the card says a model of this objective is for and where it stops (its spec's `card`); an objective
    this installation does not know gets the text of an embedding model."""
    try:
        return objective_spec(objective).card
    except KeyError:
        return EMBEDDING_CARD


def _objective_line(objective: str) -> str:
    """The objective package's own one-line description (its docstring names the loss)."""
    try:
        package = importlib.import_module(objective_spec(objective).config.__module__.rsplit(".", 1)[0])
        return (package.__doc__ or "").strip().splitlines()[0]
    except (KeyError, ImportError, IndexError):
        return ""


def _model_config(tracking_uri: str, run_id: str) -> dict[str, Any]:
    """The saved model's config.json (width, layers, architecture), read from the run's `model/` artifact."""
    import mlflow.artifacts

    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="model/config.json", dst_path=tmp,
                                                       tracking_uri=tracking_uri)
            return json.loads(Path(path).read_text())
    except Exception:  # a card without the width is still a card
        return {}


def _fmt(value: float) -> str:
    return f"{value:.4f}" if abs(value) < 1000 else f"{value:.1f}"


def _evaluation_rows(metrics: dict[str, float]) -> list[list[str]]:
    """val_* metrics: before training (the `_initial` copy) and after, one row each."""
    rows = []
    for key in sorted(k for k in metrics if k.startswith("val_") and not k.endswith("_initial")):
        before = metrics.get(f"{key}_initial")
        rows.append([f"`{key}`", _fmt(before) if before is not None else "-", _fmt(metrics[key])])
    return rows


def _gate_section(tags: dict[str, str]) -> list[str]:
    if DECISION_TAG not in tags:
        return ["No champion gate decision recorded: this version was registered by a training run, not chosen "
                "by a study (`lmp models why` shows a decision once there is one)."]
    lines = [f"**{tags[DECISION_TAG]}**: {tags.get(REASON_TAG, '')}", ""]
    gate = {k[len(GATE_PREFIX):]: v for k, v in tags.items() if k.startswith(GATE_PREFIX)
            and k not in (DECISION_TAG, REASON_TAG) and not k.startswith(GATE_PREFIX + "probe.")}
    if gate:
        lines += [markdown_table(["gate", "value"], [[k, v] for k, v in sorted(gate.items())]), ""]
    probes = [v for k, v in sorted(tags.items()) if k.startswith(GATE_PREFIX + "probe.")]
    if probes:
        lines += ["General-capability probes (candidate vs the model it would replace):", ""]
        lines += [f"- {p}" for p in probes]
    return lines


def model_card(tracking_uri: str, name: str, version: str) -> str:
    """The card of `name` version `version`, as markdown."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    mv = client.get_model_version(name, version)
    run = client.get_run(mv.run_id)
    params, metrics, run_tags, tags = run.data.params, run.data.metrics, run.data.tags, mv.tags
    aliases = sorted(a for a, v in client.get_registered_model(name).aliases.items() if str(v) == str(version))
    objective = run_tags.get(RUN_OBJECTIVE_TAG) or tags.get(OBJECTIVE_TAG) or params.get("objective.name", "unknown")
    base = run_tags.get("lmp.model_source") or params.get("model.name_or_path", "unknown")
    base_shown = "all-MiniLM-L6-v2 (the packaged default)" if base == "default" else base
    config = _model_config(tracking_uri, mv.run_id)
    intended = card_text(objective)
    created = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(mv.creation_timestamp / 1000))

    out = [f"# {name}, version {version}", ""]
    out += [f"{objective} model adapted from {base_shown}; registered {created}"
            + (f", holds {', '.join(f'`@{a}`' for a in aliases)}" if aliases else "") + ". "
            f"Generated by lmplatform from MLflow run `{mv.run_id}`; nothing is published.", ""]
    out += ["## Model", ""]
    width = f"{config.get('hidden_size')}-d, {config.get('num_hidden_layers')} layers, " if config else ""
    out += [f"- Base model: {base_shown}",
            f"- Architecture: {width}{', '.join(config.get('architectures', [])) or 'see config.json'}",
            f"- Pooling: {params.get('model.pooling', 'mean')}; max sequence length {params.get('model.max_seq_length', '?')} "
            "tokens (longer texts are truncated); vectors L2-normalised by `Encoder.encode` and the service",
            f"- Objective: `{objective}`" + (f": {line}" if (line := _objective_line(objective)) else ""),
            f"- Loading: `models:/{name}/{version}` (lmplatform, or any Hugging Face folder loader); "
            f"`lmp export --model models:/{name}/{version} --format sentence-transformers|onnx|onnx-int8`", ""]

    out += ["## Training data", ""]
    out += [f"- Train: {params.get('data.train_paths', '?')}; validation: "
            + (params["data.validation_paths"] if params.get("data.validation_paths", "[]") != "[]"
               else f"{params.get('data.validation_fraction', '?')} of it, "
               f"split by a stable hash (seed {params.get('data.seed', '?')})"),
            f"- Data fingerprint (file contents): `{run_tags.get('lmp.data_fingerprint', 'not recorded')}`"]
    if run_tags.get("lmp.retrieval_validation_fingerprint"):
        out.append(f"- Retrieval validation set fingerprint: `{run_tags['lmp.retrieval_validation_fingerprint']}`")
    counts = sorted((k[len("data/"):], v) for k, v in metrics.items() if k.startswith("data/"))
    if counts:
        out += ["", markdown_table(["rows", "count"], [[k, f"{v:g}"] for k, v in counts])]
    out.append("")

    out += ["## Hyper-parameters", ""]
    hyper = sorted((k, v) for k, v in params.items()
                   if k.startswith(HYPERPARAMETER_PREFIXES) and k != "objective.name" and v != "None")
    if "total_steps" in params:
        hyper.append(("total_steps", params["total_steps"]))
    out += [markdown_table(["parameter", "value"], [[f"`{k}`", v] for k, v in hyper]) if hyper else "Not recorded.", ""]

    out += ["## Evaluation", ""]
    evaluation = _evaluation_rows(metrics)
    if evaluation:
        out += ["Validation split of the training data, before and after training:", "",
                markdown_table(["metric", "before", "after"], evaluation), ""]
    if METRIC_TAG in tags:
        out += [f"Selected in study `{tags.get('lmp.tune_study', '?')}` (trial `{tags.get('lmp.tune_trial', '?')}`) on "
                f"`{tags[METRIC_TAG]}` = {tags.get(VALUE_TAG)}: the best of the study's trials on validation, so that "
                "number is optimistic; a gate with a confirmation set (below, when one ran) measures on data no trial saw.", ""]
    out += ["### Champion gate", ""] + _gate_section(tags) + [""]

    out += ["## Intended use", "", intended.use, ""]
    out += ["## Limits", "",
            f"- {intended.limits}",
            f"- Measured only on the data above (fingerprint `{run_tags.get('lmp.data_fingerprint', '?')}`) and, where a "
            "gate ran, its held-out split and general probes; other domains, languages and text kinds are not measured.",
            f"- Inherits the base model's limits ({base_shown}: its languages, its pre-training data and biases).",
            f"- Texts longer than {params.get('model.max_seq_length', 'the maximum')} tokens are cut; what follows is not read.",
            ""]
    out += ["## Provenance", ""]
    provenance = [["MLflow run", f"`{mv.run_id}` ({run_tags.get('mlflow.runName', '')})"],
                  ["git commit", run_tags.get("lmp.git_commit", "not recorded")]]
    for label, key in (("pipeline run", "lmp.pipeline_run"), ("pipeline stage", "lmp.pipeline_stage"),
                       ("training run", "lmp.train_run"), ("study", "lmp.tune_study")):
        if run_tags.get(key) or tags.get(key):
            provenance.append([label, run_tags.get(key) or tags.get(key, "")])
    out += [markdown_table(["what", "value"], provenance), ""]
    return "\n".join(out)


def write_model_card(tracking_uri: str, name: str, version: str) -> str:
    """Write the card into the version's run (`card_artifact`) and tag the version with its URI."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    mv = client.get_model_version(name, version)
    text = model_card(tracking_uri, name, version)
    path = card_artifact(name, version)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / CARD_FILE).write_text(text, encoding="utf-8")
        client.log_artifact(mv.run_id, str(Path(tmp) / CARD_FILE), path)
    uri = f"{client.get_run(mv.run_id).info.artifact_uri}/{path}/{CARD_FILE}"
    client.set_model_version_tag(name, version, CARD_TAG, uri)
    return uri


def try_write_model_card(tracking_uri: str, name: str, version: str) -> Optional[str]:
    """`write_model_card`, or None with a warning: a card must never fail the registration it documents."""
    try:
        return write_model_card(tracking_uri, name, version)
    except Exception as exc:
        logger.warning("model card of %s version %s not written: %s: %s", name, version, type(exc).__name__, exc)
        return None


def read_model_card(tracking_uri: str, name: str, version: str) -> str:
    """The card as written for the version (its run's artifact)."""
    import mlflow.artifacts
    from mlflow.tracking import MlflowClient

    mv = MlflowClient(tracking_uri).get_model_version(name, version)
    with tempfile.TemporaryDirectory() as tmp:
        path = mlflow.artifacts.download_artifacts(run_id=mv.run_id, artifact_path=f"{card_artifact(name, version)}/{CARD_FILE}",
                                                   dst_path=tmp, tracking_uri=tracking_uri)
        return Path(path).read_text(encoding="utf-8")
