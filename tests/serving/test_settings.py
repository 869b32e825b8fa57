"""Serving settings and launch planning, without Ray: every bad value is refused before anything starts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lmplatform.serving.launch import DEFAULT_CONFIG, plan_launch
from lmplatform.serving.release import ReleaseError
from lmplatform.serving.settings import ServeConfigError, parse_settings, token_sha256


def test_bad_settings_name_the_field() -> None:
    cases = [
        ({}, "model"),
        ({"model": "m", "limits": {"max_k": 0}}, "limits.max_k"),
        ({"model": "m", "batching": {"max_batch_size": "many"}}, "batching.max_batch_size"),
        ({"model": "m", "limits": {"max_texts": 64}, "batching": {"max_batch_size": 8}}, "max_texts"),
        ({"model": "m", "auth_token_sha256": "plain-token"}, "auth_token_sha256"),
        ({"model": "m", "colour": "red"}, "colour"),
        ({"model": "m", "encoder": {"backend": "tensorrt"}}, "encoder.backend"),
        ({"model": "m", "encoder": {"quantize": "int4"}}, "encoder.quantize"),
        ({"model": "m", "live": {"fields": ["body"]}}, "live.fields"),
        ({"model": "m", "live": {"fields": []}}, "live.fields"),
        ({"model": "m", "live": {"snapshot_every": 0}}, "live.snapshot_every"),
        ({"model": "m", "live": {"dir": "/srv/changes"}, "limits": {"max_documents": 64}}, "max_documents"),
        ({"model": "m", "encoder": {"backend": "openvino", "quantize": "int8"}}, "encoder.quantize"),
        ({"model": "m", "encoder": {"precision": "fp8"}}, "encoder.precision"),
        ({"model": "m", "encoder": {"backend": "onnx", "precision": "bf16"}}, "encoder.precision"),
    ]
    for args, field in cases:
        with pytest.raises(ServeConfigError, match=field):
            parse_settings(args)
    assert parse_settings({"model": "m"}).batching.enabled is True
    assert parse_settings({"model": "m"}).encoder.backend == "torch"
    assert not parse_settings({"model": "m"}).live.enabled  # a read-only index unless live.dir is set
    assert parse_settings({"model": "m", "limits": {"max_documents": 64}}).limits.max_documents == 64


def test_shipped_config_is_valid_and_binds_loopback() -> None:
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    assert raw["http_options"]["host"] == "127.0.0.1"
    from ray.serve.schema import ServeDeploySchema

    ServeDeploySchema.model_validate(raw)  # what `serve run` / `serve deploy` accept
    (app,) = raw["applications"]
    settings = parse_settings(app["args"])
    assert settings.model.endswith("@champion")
    assert {d["name"] for d in app["deployments"]} >= {"ServeIngress", "RetrieverDeployment", "ClassifierDeployment"}


@pytest.fixture
def served_index(tiny_bert: Path, tmp_path: Path) -> Path:
    from tests.serving.servable import make_documents, write_index

    return write_index(tiny_bert, make_documents(6), tmp_path / "index")


def test_plan_launch_applies_overrides_token_and_pins_a_path_model(tiny_bert: Path, served_index: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LMP_SERVE_TOKEN", "abc")
    plan = plan_launch(DEFAULT_CONFIG, overrides=["limits.max_k=7", "batching.enabled=false"],
                       args={"model": str(tiny_bert), "index": str(served_index)}, port=8123)
    assert plan.url == "http://127.0.0.1:8123"
    assert plan.settings.limits.max_k == 7 and plan.settings.batching.enabled is False
    assert plan.app["args"]["auth_token_sha256"] == token_sha256("abc") and "abc" not in json.dumps(plan.app)
    assert plan.release.model_uri == str(tiny_bert.resolve()) and plan.release.index_uri == str(served_index)
    assert all(d["name"] != "RerankerDeployment" for d in plan.app["deployments"])
    with pytest.raises(ServeConfigError, match="--set 'limits.max_k': expected section.field=value, e.g. --set limits"):
        plan_launch(DEFAULT_CONFIG, overrides=["limits.max_k"], args={"model": str(tiny_bert), "index": str(served_index)})
    with pytest.raises(ReleaseError, match="index"):
        plan_launch(DEFAULT_CONFIG, args={"model": str(tiny_bert), "index": str(tmp_path)})
    with pytest.raises(ServeConfigError, match="no application named"):
        plan_launch(DEFAULT_CONFIG, name="other", args={"model": str(tiny_bert), "index": str(served_index)})


def test_plan_launch_takes_the_proxy_location_of_the_config(tiny_bert: Path, served_index: Path, tmp_path: Path) -> None:
    args = {"model": str(tiny_bert), "index": str(served_index)}
    # The shipped config keeps one proxy on the head: lmp serve run must not fall back to
    # Serve's EveryNode, whose per-node proxies on a loopback host are unreachable.
    assert plan_launch(DEFAULT_CONFIG, args=args).proxy_location == "HeadOnly"
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    raw.pop("proxy_location")
    unset = tmp_path / "unset.yaml"
    unset.write_text(yaml.safe_dump(raw))
    assert plan_launch(unset, args=args).proxy_location is None
    raw["proxy_location"] = "Everywhere"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(ServeConfigError, match="proxy_location 'Everywhere' is not one of HeadOnly, EveryNode, Disabled"):
        plan_launch(bad, args=args)


def test_a_reranker_registered_with_the_version_is_deployed_unless_the_settings_name_one(
        tiny_bert: Path, served_index: Path, tmp_path: Path, mlflow_uri: str) -> None:
    from lmplatform.serving.app import reranker_for
    from lmplatform.testing.registered import register_with_index
    from lmplatform.tracking.registry import register_search_settings

    (tmp_path / "mlruns").mkdir(exist_ok=True)
    version = register_with_index(mlflow_uri, "enc", tiny_bert, served_index).version
    register_search_settings(mlflow_uri, "enc", version, {"reranker": str(tiny_bert), "rerank_depth": 5})
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    raw["applications"][0]["deployments"].append({"name": "RerankerDeployment", "ray_actor_options": {"num_cpus": 0.5}})
    config = tmp_path / "with-reranker.yaml"
    config.write_text(yaml.safe_dump(raw))
    args = {"model": f"models:/enc/{version}", "tracking_uri": mlflow_uri, "cache_dir": str(tmp_path / "cache")}
    plan = plan_launch(config, args=args)
    assert plan.release.search.rerank_depth == 5 and reranker_for(plan.settings, plan.release) == str(tiny_bert)
    assert any(d["name"] == "RerankerDeployment" for d in plan.app["deployments"])
    named = plan_launch(config, args=args | {"reranker": "/models/other-cross-encoder"})
    assert reranker_for(named.settings, named.release) == "/models/other-cross-encoder"
    register_search_settings(mlflow_uri, "enc", version, {})
    plain = plan_launch(config, args=args)
    assert reranker_for(plain.settings, plain.release) is None
    assert all(d["name"] != "RerankerDeployment" for d in plain.app["deployments"])
