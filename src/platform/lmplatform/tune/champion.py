"""Registering a study's best model and moving the `champion` alias only when it truly wins.

The rule:
1. The candidate is registered as a new version whose tags hold the study metric,
   its mode, every numeric validation metric, and an *evaluation fingerprint*:
   a hash of the data fingerprint (file contents) and of every setting that
   changes what the validation score means (split, cleaning, sequence length,
   the objective's evaluation settings, the retrieval validation set, the metric name).
2. The alias moves only after the version is READY and its artifacts hold a
   complete Hugging Face folder (config.json plus weights), so a crash at any
   point leaves the previous champion in place.
3. With a confirmation set (`champion.confirm`, required for retrieval studies) the
   gate of `gate.py` decides: the candidate and the model it would replace (the
   current champion, or the base model for a first champion) are scored on held-out
   queries, and the alias moves only if the paired bootstrap interval of the gain
   excludes 0 and no general-capability probe regresses beyond the tolerance.
4. Without one (e.g. an MLM loss study) recorded values are compared: the alias
   moves only if the current champion carries the same metric and fingerprint and
   the candidate is strictly better; with no champion, the candidate becomes one.
Every decision is written to the version's tags (`lmp models why` shows them).
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from lmplatform.models.resolve import download_model, resolve_model_path
from lmplatform.objectives.run_config import RunConfig
from lmplatform.retrieval.settings import SearchSettings
from lmplatform.tracking.mlflow_tracking import flatten
from lmplatform.tracking.model_card import try_write_model_card
from lmplatform.tracking.registry import read_search_settings, register_model_version
from lmplatform.tracking.version_tags import DECISION_TAG, FINGERPRINT_TAG, METRIC_TAG, MODE_TAG, REASON_TAG, VALUE_TAG
from lmplatform.tune.gate import decide, run_gate
from lmplatform.tune.metrics import evaluation_config_keys

if TYPE_CHECKING:
    from lmplatform.retrieval.settings import SearchSettings
    from lmplatform.tune.gate import GateVerdict
    from lmplatform.tune.space import ChampionSpec

@dataclass
class ChampionDecision:
    registered_model: str
    version: str
    alias: str
    moved: bool
    reason: str
    previous_version: Optional[str] = None
    verdict: Optional["GateVerdict"] = None


@dataclass
class GateInputs:
    """What the gate needs besides the registry: its spec and metric, the objective, the trials' base model, and
    for a retrieval system the candidate's search settings (its `reranker` a local folder): the system is then what
    is compared, against the champion's registered system or the base model searched dense."""

    spec: "ChampionSpec"
    metric: str
    objective: str
    base_model: str
    search: Optional["SearchSettings"] = None
    text_metadata: Optional[Mapping[str, Mapping[str, Any]]] = None  # a metadata fusion's inputs, by text


def evaluation_fingerprint(cfg: RunConfig, data_fingerprint: str, metric: str, retrieval_fingerprint: str = "") -> str:
    """Same fingerprint <=> the metric was measured the same way on the same validation data."""
    flat = flatten(cfg.model_dump(mode="json"))
    keys = evaluation_config_keys(cfg, metric)
    payload: dict[str, Any] = {"metric": metric, "objective": cfg.objective.name}
    payload["data"] = retrieval_fingerprint if metric.startswith("val_ir_") else data_fingerprint
    payload.update({key: value for key, value in flat.items() if any(key == k or key.startswith(k + ".") for k in keys)})
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
    gate: Optional[GateInputs] = None,
    before_decision: Optional[Callable[[str], None]] = None,
) -> ChampionDecision:
    """Register the run's model folder as a new version; move `alias` only if it wins (see module doc).

    `before_decision(version)` runs once the version is registered and before the alias may move: what the version
    must carry when it is served (its index, its search settings) is attached there, never after."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

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
    if before_decision is not None:
        before_decision(version)

    try:
        current = client.get_model_version_by_alias(registered_model, alias)
    except MlflowException:
        current = None
    if gate is not None:
        decision = _gated(client, tracking_uri, registered_model, version, source, alias, current, gate)
    else:
        decision = _by_recorded_value(client, registered_model, version, alias, current, metric, mode, value, fingerprint)
    client.set_model_version_tag(registered_model, version, DECISION_TAG, "promoted" if decision.moved else "refused")
    client.set_model_version_tag(registered_model, version, REASON_TAG, decision.reason[:5000])

    try_write_model_card(tracking_uri, registered_model, version)  # again, now with the gate's decision
    return decision


def _gated(client: Any, tracking_uri: str, name: str, version: str, source: str, alias: str, current: Any,
           gate: GateInputs) -> ChampionDecision:
    previous = str(current.version) if current is not None else None
    if current is not None and current.tags.get("objective", gate.objective) != gate.objective:
        reason = (f"current {alias} (version {previous}) is a {current.tags.get('objective')!r} model, the candidate a "
                  f"{gate.objective!r} one; not comparable, {alias} stays")
        return ChampionDecision(name, version, alias, False, reason, previous)
    if current is not None:
        comparator: Optional[str] = str(download_model(f"models:/{name}/{previous}", tracking_uri))
        compared_with = f"{alias} version {previous}"
    elif gate.spec.baseline == "base_model":
        comparator, compared_with = str(resolve_model_path(gate.base_model)), f"the base model {gate.base_model}"
    else:
        comparator, compared_with = None, f"no {alias} yet and baseline: none"
    candidate = download_model(source, tracking_uri)
    searches = _searches(gate, tracking_uri, name, previous) if gate.search is not None and comparator else None
    print(f"[lmp] champion gate: scoring version {version} and {compared_with} on the confirmation set", flush=True)
    verdict = run_gate(gate.spec, gate.metric, gate.objective, candidate, comparator, compared_with, searches,
                       gate.text_metadata) if comparator \
        else decide(None, [], 0.0, compared_with)
    for key, value in verdict.tags().items():
        client.set_model_version_tag(name, version, key, value)
    if verdict.promote:
        client.set_registered_model_alias(name, alias, version)
    outcome = "moved" if verdict.promote else "stays" if previous else "not set"
    reason = f"{verdict.reason}; {alias} {outcome}"
    return ChampionDecision(name, version, alias, verdict.promote, reason, previous, verdict)


def _searches(gate: GateInputs, tracking_uri: str, name: str, previous: Optional[str]) -> tuple[Any, Any]:
    """(candidate, comparator) search settings with local re-ranker folders: the champion's registered system, or
    for a first champion the base model searched dense."""
    comparator = (read_search_settings(tracking_uri, name, previous) if previous else None) or SearchSettings(mode="dense")
    if comparator.reranker is not None:
        comparator = comparator.model_copy(update={"reranker": str(download_model(comparator.reranker, tracking_uri))})
    return gate.search, comparator


def _by_recorded_value(client: Any, name: str, version: str, alias: str, current: Any, metric: str, mode: str,
                       value: float, fingerprint: str) -> ChampionDecision:
    if current is None:
        client.set_registered_model_alias(name, alias, version)
        return ChampionDecision(name, version, alias, True, f"no {alias} yet; version {version} becomes {alias}")
    held = current.tags
    previous = str(current.version)
    if held.get(METRIC_TAG) != metric or VALUE_TAG not in held:
        reason = (f"current {alias} (version {previous}) has no recorded {metric!r} "
                  f"(it records {held.get(METRIC_TAG)!r}); not comparable, {alias} stays")
        return ChampionDecision(name, version, alias, False, reason, previous)
    if held.get(FINGERPRINT_TAG) != fingerprint:
        reason = (f"current {alias} (version {previous}) was evaluated on other validation data or settings "
                  f"(fingerprint {held.get(FINGERPRINT_TAG)} vs {fingerprint}); not comparable, {alias} stays")
        return ChampionDecision(name, version, alias, False, reason, previous)
    held_value = float(held[VALUE_TAG])
    if _is_better(value, held_value, mode):
        client.set_registered_model_alias(name, alias, version)
        return ChampionDecision(
            name, version, alias, True,
            f"{metric} {value:.6g} beats {alias} version {previous} ({held_value:.6g}, mode {mode}); {alias} moved",
            previous,
        )
    return ChampionDecision(
        name, version, alias, False,
        f"{metric} {value:.6g} does not beat {alias} version {previous} ({held_value:.6g}, mode {mode}); {alias} stays",
        previous,
    )
