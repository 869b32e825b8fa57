"""Ask every running replica of a deployment, each by its id, what it holds.

A handle call goes to whichever replica Serve's router picks, so even many calls can miss
one replica. Serve's controller lists each replica with the name of its actor; this module
calls that actor directly, through `record_routing_stats`, the per-replica hook Serve
forwards to the deployment's method of that name (our model deployments answer it with
the releases they hold: see `deployments`). So the answer covers every replica, by id.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

SERVE_NAMESPACE = "serve"  # where Serve names its replica actors


@dataclass
class ReplicaAnswer:
    replica_id: str
    status: dict[str, Any] = field(default_factory=dict)
    error: Optional[str] = None  # the replica could not be asked (died, timed out)


def running_replicas(app: dict[str, Any], deployment: str) -> list[dict[str, Any]]:
    """The deployment's RUNNING replicas in `app` (an application of `get_serve_details()`)."""
    replicas = app.get("deployments", {}).get(deployment, {}).get("replicas", [])
    return [r for r in replicas if str(getattr(r.get("state"), "value", r.get("state"))) == "RUNNING"]


def ask_each(app: dict[str, Any], deployment: str, timeout_s: float = 60.0) -> list[ReplicaAnswer]:
    """Every RUNNING replica's `record_routing_stats()` answer, asked of its own actor, in parallel."""
    import ray

    replicas = running_replicas(app, deployment)
    pending: list[tuple[str, Any]] = []
    answers: list[ReplicaAnswer] = []
    for replica in replicas:
        try:
            actor = ray.get_actor(replica["actor_name"], namespace=SERVE_NAMESPACE)
            pending.append((replica["replica_id"], actor.record_routing_stats.remote()))
        except Exception as exc:  # gone between the listing and the call
            answers.append(ReplicaAnswer(replica["replica_id"], error=f"{type(exc).__name__}: {exc}"))
    for replica_id, ref in pending:
        try:
            answers.append(ReplicaAnswer(replica_id, status=dict(ray.get(ref, timeout=timeout_s))))
        except Exception as exc:
            answers.append(ReplicaAnswer(replica_id, error=f"{type(exc).__name__}: {str(exc).splitlines()[-1]}"))
    return answers


def lacking(app: dict[str, Any], deployment: str, release_id: str, timeout_s: float = 60.0) -> list[str]:
    """One line per replica of `deployment` that does not hold `release_id` (why), or cannot say."""
    answers = ask_each(app, deployment, timeout_s)
    if not answers:
        return [f"{deployment}: no running replica"]
    problems = []
    for answer in answers:
        if answer.error is not None:
            problems.append(f"{deployment} replica {answer.replica_id}: not answering ({answer.error})")
        elif release_id not in answer.status.get("releases", []):
            reason = answer.status.get("failures", {}).get(release_id, "not loaded")
            problems.append(f"{deployment} replica {answer.replica_id}: {reason}")
    return problems
