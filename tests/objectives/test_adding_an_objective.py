"""Adding an objective is its folder and one registry line: the toy objective of tests/objectives/toy/
registers, its config validates as `RunConfig.objective`, its metrics pass the tune metric check, it
trains through the generic loop (`Trainer` with a `FolderReporter`, no Ray), and a model it trained gets
a model card and goes through the champion gate, all from what its spec declares."""
from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import pytest
import torch

import lmplatform
from lmplatform.config import ConfigError
from lmplatform.objectives import registry
from lmplatform.objectives.run_config import RunConfig, load_run_config, reported_metrics
from lmplatform.train.loop import FolderReporter, Trainer
from lmplatform.train.recipe import Batch
from lmplatform.train.state import FINAL_MODEL_DIR
from lmplatform.tune.metrics import evaluation_config_keys
from lmplatform.tune.space import SpaceError, load_space
from tests.conftest import text_batches
from tests.objectives.toy import SPEC as TOY


@pytest.fixture
def toy_registered() -> Iterator[None]:
    lmplatform.register_objective(TOY)  # the public way (lmplatform.api)
    try:
        yield
    finally:
        registry.unregister(TOY.name)


def _config(tiny_bert: Path, *overrides: str) -> RunConfig:
    return load_run_config(None, [f"model.name_or_path={tiny_bert}", "model.max_seq_length=32", "data.train_paths=[unused.jsonl]",
                                  "objective.name=toy_norm", "optim.max_steps=2", "optim.lr=1e-3", "checkpoint.every_n_steps=1",
                                  *overrides])


def test_a_registered_objective_is_known_by_name_and_validated_as_the_run_config_objective(
    toy_registered: None, tiny_bert: Path
) -> None:
    assert registry.objective_spec("toy_norm") is TOY and "toy_norm" in registry.objective_names()
    cfg = _config(tiny_bert, "objective.target_norm=3")
    assert type(cfg.objective).__name__ == "ToyNormConfig" and cfg.objective.target_norm == 3.0
    assert RunConfig.model_validate(cfg.model_dump(mode="json")) == cfg  # what a worker receives validates again
    with pytest.raises(ConfigError, match=r"objective\.target_norm: got -1"):
        _config(tiny_bert, "objective.target_norm=-1")
    with pytest.raises(ConfigError, match=r"objective\.mask_probability: unknown key"):
        _config(tiny_bert, "objective.mask_probability=0.2")
    # its spec says its recipe ranks no texts: the built-in objectives that do are named
    with pytest.raises(ConfigError, match="retrieval_validation applies to objectives biencoder, biencoder_distill, "
                                          "cross_encoder, declutr, not 'toy_norm'"):
        _config(tiny_bert, "retrieval_validation.pairs={train_paths: [pairs.jsonl]}")


def test_a_spec_that_declares_an_unknown_model_kind_or_data_field_fails_where_it_is_declared() -> None:
    with pytest.raises(ValueError, match=r"model_kind 'bi_encoder' is not one of \('encoder', 'cross_encoder', 'classifier'\)"):
        dataclasses.replace(TOY, model_kind="bi_encoder")
    with pytest.raises(ValueError, match=r"data_fields \['negatives'\] are not fields of the data section"):
        dataclasses.replace(TOY, data_fields=(("negatives", "its hard negatives"),))


def test_unregistered_it_is_unknown_again(tiny_bert: Path) -> None:
    registry.register(TOY)
    registry.unregister(TOY.name)
    with pytest.raises(ConfigError, match="does not match any of the expected tags: 'mlm', 'biencoder'"):
        _config(tiny_bert)
    with pytest.raises(ValueError, match="built in"):
        registry.unregister("mlm")


def test_its_metrics_are_what_a_study_may_target(toy_registered: None, tiny_bert: Path, tmp_path: Path) -> None:
    cfg = _config(tiny_bert)
    assert reported_metrics(cfg) == {"val_norm_error", "val_norm_error_initial", "loss", "step", "epoch", "tokens"}
    assert "objective.target_norm" in evaluation_config_keys(cfg, "val_norm_error")

    base = tmp_path / "base.yaml"
    base.write_text(textwrap.dedent(f"""\
        model: {{name_or_path: {tiny_bert}, max_seq_length: 32}}
        data: {{train_paths: [unused.jsonl]}}
        objective: {{name: toy_norm}}
        optim: {{max_steps: 2}}
        """))
    space = tmp_path / "space.yaml"
    body = (f"study: toy\ntrial: train\nbase_config: {base}\nrequires: [toy_norm]\n"
            "parameters:\n  objective.target_norm: {distribution: uniform, low: 0.5, high: 2.0}\nmode: min\n")
    space.write_text(body + "metric: val_norm_error\n")
    assert load_space(space).base.objective.target_norm == 1.0
    space.write_text(body + "metric: val_mlm_loss\n")
    with pytest.raises(SpaceError, match=r"metric 'val_mlm_loss' is never reported by a 'toy_norm' trial"):
        load_space(space)


def test_it_trains_through_the_generic_loop_without_ray(toy_registered: None, tiny_bert: Path, tmp_path: Path) -> None:
    cfg = _config(tiny_bert, "objective.target_norm=2", "tracking.log_every_n_steps=1")
    recipe = registry.objective_spec("toy_norm").build_recipe(cfg)
    reporter = FolderReporter(tmp_path / "checkpoints")
    trainer = Trainer(cfg, recipe, 2, torch.device("cpu"), 0, reporter=reporter)
    trainer.begin(None)
    rng = random.Random(0)
    train, validation = text_batches(rng, 3, 4, (4, 12)), text_batches(rng, 2, 4, (4, 12))

    def train_batches(epoch: int, skip: int) -> Iterator[Batch]:
        return (recipe.collate(b) for b in train[skip:])

    summary = trainer.fit(train_batches, lambda: (recipe.collate(b) for b in validation))

    assert trainer.progress.step == 2 and len(reporter.checkpoints) == 2  # step 1, then the final one
    assert (reporter.checkpoints[-1] / FINAL_MODEL_DIR / "config.json").is_file()  # the recipe's export ran
    assert summary["val_norm_error"] < summary["val_norm_error_initial"]  # lr 1e-3 moves the norms towards 2
    reported = set().union(*reporter.reports)
    assert reported_metrics(cfg) <= reported  # every metric the tune check allows is reported


def test_a_model_it_trained_gets_a_model_card_and_goes_through_the_champion_gate(
    toy_registered: None, tiny_bert: Path, mlflow_uri: str, tmp_path: Path
) -> None:
    from lmplatform.config.schema import DataConfig
    from lmplatform.models.encoder import Encoder
    from lmplatform.retrieval.settings import RetrievalValidationConfig
    from lmplatform.tracking.mlflow_tracking import TrackedRun
    from lmplatform.tracking.model_card import read_model_card
    from lmplatform.tune.champion import GateInputs, register_and_maybe_promote
    from lmplatform.tune.gate import check_held_out, general_probes, load_ranker, reranks
    from lmplatform.tune.space import ChampionSpec, GeneralPackSpec, ScoredPairsSpec

    # The gate goes by the spec's model kind: an encoder, loaded as one and probed by its embeddings.
    assert not reranks("toy_norm") and isinstance(load_ranker(tiny_bert, "toy_norm"), Encoder)
    (sts,) = general_probes(GeneralPackSpec(sts=ScoredPairsSpec(path="data/general/sts_pairs.jsonl", limit=20)),
                            tiny_bert, tiny_bert, "toy_norm")
    assert sts.name == "sts_spearman" and sts.drop == pytest.approx(0.0, abs=1e-9)  # measured: the same model twice

    confirm = tmp_path / "confirm.jsonl"
    words = "apple river mountain cloud music garden yellow window".split()
    confirm.write_text("".join(json.dumps({"query": f"{a} {b}", "document": f"{a} {b} ."}) + "\n"
                               for a, b in zip(words, words[1:] + words[:1])))
    spec = ChampionSpec(confirm=RetrievalValidationConfig(
        pairs=DataConfig(train_paths=[str(confirm)], validation_fraction=0.0), split="all", relevance="pair"))
    check_held_out(spec, _config(tiny_bert))  # its data holds no pairs, so it is not read (unused.jsonl does not exist)

    run = TrackedRun.start(mlflow_uri, "toy", "toy-run", {"lmp.objective": "toy_norm", "lmp.model_source": str(tiny_bert)})
    run.log_artifacts(tiny_bert, "model")
    run.finish()
    decision = register_and_maybe_promote(mlflow_uri, "toy-model", run.run_id, "model", "val_norm_error", "min", 0.1, "fp",
                                          {}, tags={"objective": "toy_norm"},
                                          gate=GateInputs(spec, "ir_mrr_at_10", "toy_norm", str(tiny_bert)))
    assert not decision.moved and decision.reason.startswith("no gain"), decision.reason  # the base model against itself
    assert decision.verdict is not None and decision.verdict.comparison.queries == len(words)

    card = read_model_card(mlflow_uri, "toy-model", decision.version)
    for expected in ("Objective: `toy_norm`: Toy objective: the squared error between each pooled text vector's length",
                     f"## Intended use\n\n{TOY.card.use}", f"- {TOY.card.limits}", "**refused**: no gain"):
        assert expected in card, (expected, card)


def test_importing_the_configs_and_the_registry_imports_no_torch() -> None:
    probe = ("import sys, lmplatform.config.schema, lmplatform.objectives.registry, lmplatform.tune.metrics, "
             "tests.objectives.toy; print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split() == ["False"]


EXTERNAL = '''
from typing import Literal

from lmplatform.objectives.spec import ObjectiveSpec
from tests.objectives.toy import SPEC as TOY
from tests.objectives.toy.config import ToyNormConfig


class ExternalConfig(ToyNormConfig):
    name: Literal["extobjective.spec:SPEC"] = "extobjective.spec:SPEC"


SPEC = ObjectiveSpec(name="extobjective.spec:SPEC", config=ExternalConfig, validation_metrics=TOY.validation_metrics,
                     evaluation_keys=TOY.evaluation_keys, implementation=TOY.implementation, card=TOY.card)
'''


@pytest.fixture
def external_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A package outside lmplatform holding an objective spec named by its import path."""
    (tmp_path / "extobjective").mkdir()
    (tmp_path / "extobjective" / "__init__.py").write_text("")
    (tmp_path / "extobjective" / "spec.py").write_text(EXTERNAL)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    if "extobjective.spec:SPEC" in registry.objective_names():
        registry.unregister("extobjective.spec:SPEC")
    sys.modules.pop("extobjective.spec", None)
    sys.modules.pop("extobjective", None)


def test_an_objective_named_by_its_import_path_needs_no_register_call_in_any_process(
        external_package: Path, tiny_bert: Path, ray_session) -> None:
    import os

    import ray

    cfg = _config(tiny_bert, "objective.name=extobjective.spec:SPEC", "objective.target_norm=2")
    assert type(cfg.objective).__name__ == "ExternalConfig" and cfg.objective.target_norm == 2.0
    assert "extobjective.spec:SPEC" in registry.objective_names()

    @ray.remote(num_cpus=0)
    def validate_in_a_worker(config: dict) -> tuple[str, float]:  # a fresh process: nothing registered there
        from lmplatform.objectives.run_config import RunConfig

        validated = RunConfig.model_validate(config)
        return validated.objective.name, validated.objective.target_norm

    repository = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join([str(external_package), repository])
    task = validate_in_a_worker.options(runtime_env={"env_vars": {"PYTHONPATH": path}})
    assert ray.get(task.remote(cfg.model_dump(mode="json"))) == ("extobjective.spec:SPEC", 2.0)


def test_an_import_path_that_does_not_import_or_names_another_spec_is_refused_naming_the_field(
        external_package: Path, tiny_bert: Path) -> None:
    with pytest.raises(ConfigError, match=r"objective.name: objective 'extobjective.nowhere:SPEC': cannot import it "
                                          r"\(ModuleNotFoundError"):
        _config(tiny_bert, "objective.name=extobjective.nowhere:SPEC")
    (external_package / "extobjective" / "other.py").write_text("from tests.objectives.toy import SPEC\n")
    with pytest.raises(ConfigError, match=r"the spec there is named 'toy_norm'"):
        _config(tiny_bert, "objective.name=extobjective.other:SPEC")
