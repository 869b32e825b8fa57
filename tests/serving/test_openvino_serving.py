"""Serve with `encoder.backend: openvino`: an `lmp export --format openvino-int8` folder served over real HTTP on
127.0.0.1 answers with the vectors the same folder gives in process."""
from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest

from lmplatform.models.encoder import Encoder
from lmplatform.models.export import export_model
from lmplatform.testing.local_cluster import free_port
from tests.serving.servable import QUICK_STOP, make_documents, write_index


def test_serve_runs_an_openvino_int8_export(ray_session, tiny_bert: Path, tmp_path: Path) -> None:
    from ray import serve

    from lmplatform.serving import control
    from lmplatform.serving.settings import ServeSettings

    documents = make_documents()
    # Calibrated on the served domain's texts, as `lmp export --calibration` would be.
    model = export_model(tiny_bert, "openvino-int8", tmp_path / "openvino-int8",
                         calibration=[d["text"] for d in documents]).folder
    index = write_index(tiny_bert, documents, tmp_path / "index")  # built by the fp32 torch encoder
    settings = ServeSettings(model=str(model), index=str(index), cache_dir=str(tmp_path / "cache"), num_threads=1,
                             encoder={"backend": "openvino", "precision": "auto"}, limits={"max_texts": 4},
                             batching={"max_batch_size": 8})
    deployments = [{"name": d, "ray_actor_options": {"num_cpus": 0.1}, **QUICK_STOP}
                   for d in ("RetrieverDeployment", "ClassifierDeployment", "ServeIngress")]
    port = free_port()
    control.start("127.0.0.1", port)
    try:
        control.deploy(control.application_config(settings, name="lmp-openvino", deployments=deployments), timeout_s=240)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            info = client.get("/v1/model").json()
            assert info["encoder_backend"] == "openvino-int8" and info["dim"] == 32, info
            texts = [documents[0]["text"], documents[1]["text"]]
            served = client.post("/v1/embed", json={"texts": texts})
            assert served.status_code == 200, served.text
            local = Encoder.from_pretrained(model, backend="openvino", precision="auto").encode(texts)
            assert np.abs(np.asarray(served.json()["vectors"]) - local).max() < 1e-5
            for doc in documents[:4]:  # int8 queries against the fp32 index still find each text itself first
                hits = client.post("/v1/search", json={"query": doc["text"], "k": 2}).json()["hits"]
                assert hits[0]["id"] == doc["id"] and hits[0]["score"] == pytest.approx(1.0, abs=0.02)
    finally:
        serve.shutdown()
