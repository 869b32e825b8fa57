"""The per-replica release slots behind hot reload, without Ray."""
from __future__ import annotations

import pytest

from lmplatform.serving.deployments import ReleaseNotLoaded, ReleaseSlots
from lmplatform.serving.release import Release, ReleaseError


def _release(rid: str) -> dict:
    return Release(id=rid, model_uri=f"/m/{rid}", index_uri=f"/i/{rid}").model_dump()


def test_slots_load_new_releases_keep_loaded_ones_and_survive_a_failed_load() -> None:
    loads: list[str] = []

    def load(release: Release) -> str:
        loads.append(release.id)
        if release.id == "bad":
            raise FileNotFoundError("index artifact missing")
        return f"model-{release.id}"

    slots: ReleaseSlots[str] = ReleaseSlots(load, "retriever")
    slots.reconfigure({"releases": [_release("v1")]})
    assert slots.get("v1") == "model-v1" and slots.holds("v1") is None
    slots.reconfigure({"releases": [_release("v1"), _release("v2")]})
    assert loads == ["v1", "v2"] and set(slots.ids()) == {"v1", "v2"}  # v1 was not loaded again
    slots.reconfigure({"releases": [_release("v2"), _release("bad")]})
    assert slots.ids() == ["v2"] and "index artifact missing" in slots.holds("bad")
    with pytest.raises(ReleaseNotLoaded, match="not 'v1'"):
        slots.get("v1")  # dropped once no longer listed
    with pytest.raises(ReleaseError, match="no release could be loaded"):
        slots.reconfigure({"releases": [_release("bad")]})
    assert slots.get("v2") == "model-v2"  # a failed reconfigure leaves the replica serving what it had
    with pytest.raises(ReleaseError, match="no releases"):
        slots.reconfigure({})
