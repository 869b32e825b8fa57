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


def test_a_replica_answers_from_its_held_release_while_a_new_one_loads() -> None:
    """A reload's load (minutes for an index of 10^6 documents) runs off the replica's event loop: the loop goes on
    (here it is the one to let the load finish) and the held release serves until the new one is in."""
    import asyncio
    import threading
    from types import SimpleNamespace

    from lmplatform.serving.deployments import RetrieverDeployment

    replica = RetrieverDeployment.func_or_class(batching={})
    loading, finish = threading.Event(), threading.Event()

    def load(release: Release) -> SimpleNamespace:
        if release.id == "v2":
            loading.set()
            if not finish.wait(timeout=60):  # only the event loop sets it
                raise TimeoutError("the event loop stood still while the release loaded")
        return SimpleNamespace(index=[f"{release.id}-doc"])

    replica.releases = ReleaseSlots(load, "retriever")

    async def reload() -> list[str]:
        await replica.reconfigure({"releases": [_release("v1")]})
        moving = asyncio.create_task(replica.reconfigure({"releases": [_release("v1"), _release("v2")]}))
        while not loading.is_set():
            await asyncio.sleep(0.01)
        held_meanwhile = replica.releases.ids()
        finish.set()
        await moving
        return held_meanwhile

    assert asyncio.run(reload()) == ["v1"]
    assert replica.releases.ids() == ["v1", "v2"] and replica.releases.failures == {}


def test_a_fusion_time_unknown_for_most_documents_is_said_at_load() -> None:
    """One log line with the count and examples when the time the release's fusion reads is unknown for most of the
    store; the per-field counts are what /v1/model shows."""
    import logging

    import numpy as np

    from lmplatform.retrieval.metadata_fusion import MetadataFusion
    from lmplatform.retrieval.settings import MetadataFusionConfig, SearchSettings, feature_names
    from lmplatform.retrieval.store import DocumentStore, StoredDocument
    from lmplatform.serving.deployments import audit_fusion_metadata, logger

    cfg = MetadataFusionConfig()
    search = SearchSettings(metadata_fusion=MetadataFusion(cfg, np.ones(len(feature_names(cfg))), 0.0).to_dict())
    release = Release(id="r/1", model_uri="/m", index_uri="/i", search=search)
    times = ["2001-01-10T09:30:00Z", "01/Jan/20 02:52 (not ISO)", "soon", None, 979_084_800]
    store = DocumentStore({f"d{n}": StoredDocument("t", "x", metadata={"product": "Writer", **({"created": t} if t else {})})
                           for n, t in enumerate(times)})
    lines: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = lines.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        unknown = audit_fusion_metadata(release, store)
        said = [r.getMessage() for r in lines]
        assert unknown == {"product": 0, "component": 5, "created": 3}, unknown
        (line,) = said
        assert "'created', unknown for 3 of 5 documents" in line and 'd2: "soon"' in line, line
        lines.clear()
        store.documents["d2"].metadata["created"] = 1.0  # now 2 of 5 unknown: no line
        assert audit_fusion_metadata(release, store)["created"] == 2 and not lines
        assert audit_fusion_metadata(Release(id="r/2", model_uri="/m", index_uri="/i"), store) is None
    finally:
        logger.removeHandler(handler)


def test_a_replica_with_backend_auto_loads_the_cached_choice_and_says_what_it_chose(tiny_bert, tmp_path) -> None:
    """`load_encoder` with `EncoderSettings(backend="auto")`: the choice made for this host and model (here by a fake
    timer, in the serve settings' cache_dir) is the one a replica loads from its own copy of the model, untimed."""
    import shutil

    from lmplatform.models.encode_path import choose_path
    from lmplatform.serving.deployments import load_encoder
    from lmplatform.serving.settings import EncoderSettings

    def timer(encoder, texts, batch_size):
        return 0.1 if encoder.backend == "onnx" and not encoder.quantized else 1.0

    choose_path(tiny_bert, cache=tmp_path / "cache" / "encode_paths.json", timer=timer)
    fetched = tmp_path / "fetched"  # what a replica holds: a copy of the registered model
    shutil.copytree(tiny_bert, fetched)
    encoder, choice = load_encoder(fetched, EncoderSettings(backend="auto").model_dump(), str(tmp_path / "cache"))
    assert (encoder.backend, encoder.quantized) == ("onnx", False)
    assert choice["chosen"] == "onnx fp32" and choice["cached"] is True
    for backend in ("torch", "onnx"):  # a backend set is loaded as it is, untimed
        plain, none = load_encoder(fetched, EncoderSettings(backend=backend).model_dump(), str(tmp_path / "cache"))
        assert plain.backend == backend and none is None


def test_backend_auto_refuses_a_quantization_or_precision_set_beside_it() -> None:
    from pydantic import ValidationError

    from lmplatform.serving.settings import EncoderSettings

    for field, value in (("quantize", "int8"), ("precision", "bf16")):
        with pytest.raises(ValidationError, match=f"encoder.{field}: backend 'auto' chooses"):
            EncoderSettings(backend="auto", **{field: value})
