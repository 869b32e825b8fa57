"""Registering a study's best model and moving the `champion` alias only when it truly wins.

The rule:
1. The candidate is registered as a new version whose tags hold the study metric,
   its mode, every numeric validation metric, and an *evaluation fingerprint*:
   a hash of the data fingerprint (file contents) and of every setting that
   changes what the validation score means (split, cleaning, sequence length,
   the objective's evaluation settings, the metric name).
2. The alias moves only after the version is READY and its artifacts hold a
   complete Hugging Face folder (config.json plus weights), so a crash at any
   point leaves the previous champion in place.
3. With no current champion, the candidate becomes champion.
4. Otherwise the alias moves only if the current champion carries the same
   metric and the same fingerprint, and the candidate is strictly better. A
   champion measured on other data (or with no recorded metric) is never
   compared: the alias stays and the decision says why.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any, Optional

from lmplatform.config.schema import RunConfig
from lmplatform.tune.metrics import evaluation_config_keys

METRIC_TAG = "lmp.metric"
VALUE_TAG = "lmp.metric_value"
MODE_TAG = "lmp.metric_mode"
FINGERPRINT_TAG = "lmp.eval_fingerprint"
_VALIDATION_KEYS = (
    "data.format", "data.text_field", "data.validation_fraction",
    "data.seed", "data.clean", "data.dedup", "data.min_chars", "data.max_documents", "model.max_seq_length",
)


@dataclass
class ChampionDecision:
    registered_model: str
    version: str
    alias: str
    moved: bool
    reason: str
    previous_version: Optional[str] = None


def evaluation_fingerprint(cfg: RunConfig, data_fingerprint: str, metric: str) -> str:
    """Same fingerprint <=> the metric was measured the same way on the same validation documents."""
    from lmplatform.tracking.mlflow_tracking import flatten

    flat = flatten(cfg.model_dump(mode="json"))
    keys = [*_VALIDATION_KEYS, *(f"objective.{k}" for k in evaluation_config_keys(cfg.objective.name))]
    payload = {"data": data_fingerprint, "metric": metric, "objective": cfg.objective.name}
    payload.update({key: flat.get(key) for key in keys})
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _is_better(candidate: float, current: float, mode: str) -> bool:
    return candidate < current if mode == "min" else candidate > current


def _wait_ready(client: Any, name: str, version: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        status = client.get_model_version(name, version).status
        if status == "READY":
            return
        if status == "FAILED_REGISTRATION" or time.monotonic() > deadline:
            raise RuntimeError(f"model version {name}/{version} is {status}; the alias was not moved")
        time.sleep(0.5)


def _check_complete(client: Any, run_id: str, artifact_path: str) -> None:
    names = {a.path.rsplit("/", 1)[-1] for a in client.list_artifacts(run_id, artifact_path)}
    weights = {"model.safetensors", "pytorch_model.bin"} & names or {n for n in names if n.endswith(".safetensors")}
    if "config.json" not in names or not weights:
        raise RuntimeError(
            f"run {run_id} artifact {artifact_path!r} is not a complete model folder (has: {sorted(names)}); "
            "the alias was not moved"
        )


def register_and_maybe_promote(
    tracking_uri: str,
    registered_model: str,
    run_id: str,
    artifact_path: str,
    metric: str,
    mode: str,
    value: float,
    fingerprint: str,
    metrics: dict[str, float],
    tags: Optional[dict[str, str]] = None,
    alias: str = "champion",
) -> ChampionDecision:
    """Register the run's model folder as a new version; move `alias` only if it beats the holder (see module doc)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from lmplatform.tracking.registry import register_model_version

    client = MlflowClient(tracking_uri)
    _check_complete(client, run_id, artifact_path)
    source = f"{client.get_run(run_id).info.artifact_uri}/{artifact_path}"
    version_tags = {
        METRIC_TAG: metric, VALUE_TAG: repr(float(value)), MODE_TAG: mode, FINGERPRINT_TAG: fingerprint,
        **{f"metric.{k}": repr(float(v)) for k, v in metrics.items()},
        **(tags or {}),
    }
    version = register_model_version(tracking_uri, registered_model, source, run_id, tags=version_tags)
    _wait_ready(client, registered_model, version)

    try:
        current = client.get_model_version_by_alias(registered_model, alias)
    except MlflowException:
        current = None
    if current is None:
        client.set_registered_model_alias(registered_model, alias, version)
        return ChampionDecision(registered_model, version, alias, True, f"no {alias} yet; version {version} becomes {alias}")
    held = current.tags
    previous = str(current.version)
    if held.get(METRIC_TAG) != metric or VALUE_TAG not in held:
        reason = (f"current {alias} (version {previous}) has no recorded {metric!r} "
                  f"(it records {held.get(METRIC_TAG)!r}); not comparable, {alias} stays")
        return ChampionDecision(registered_model, version, alias, False, reason, previous)
    if held.get(FINGERPRINT_TAG) != fingerprint:
        reason = (f"current {alias} (version {previous}) was evaluated on other validation data or settings "
                  f"(fingerprint {held.get(FINGERPRINT_TAG)} vs {fingerprint}); not comparable, {alias} stays")
        return ChampionDecision(registered_model, version, alias, False, reason, previous)
    held_value = float(held[VALUE_TAG])
    if _is_better(value, held_value, mode):
        client.set_registered_model_alias(registered_model, alias, version)
        return ChampionDecision(
            registered_model, version, alias, True,
            f"{metric} {value:.6g} beats {alias} version {previous} ({held_value:.6g}, mode {mode}); {alias} moved",
            previous,
        )
    return ChampionDecision(
        registered_model, version, alias, False,
        f"{metric} {value:.6g} does not beat {alias} version {previous} ({held_value:.6g}, mode {mode}); {alias} stays",
        previous,
    )
