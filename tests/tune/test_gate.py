"""The champion gate: the paired bootstrap, the decision rule, and every refusal path on a real registry."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from lmplatform.config.schema import DataConfig
from lmplatform.retrieval.settings import RetrievalValidationConfig
from lmplatform.tune.gate import PairedComparison, ProbeResult, decide
from lmplatform.tune.space import ChampionSpec, GeneralPackSpec, ScoredPairsSpec

# One-token words: texts of three of them all have the same length, so an encoder whose rows for
# these words are zeroed gives every such text the same vector (it "collapses" on that vocabulary).
DOMAIN = "printer database crash server disk memory network error".split()
GENERAL = "apple river mountain cloud music garden yellow window".split()


def _comparison(gain: float, low: float, high: float) -> PairedComparison:
    return PairedComparison("ir_mrr_at_10", 0.5 + gain, 0.5, gain, low, high, 0.95, 200)


def test_each_rule_of_the_decision() -> None:
    assert decide(None, [], 0.01, "no champion yet").promote
    no_gain = decide(_comparison(-0.02, -0.05, 0.01), [], 0.01, "champion version 1")
    assert not no_gain.promote and no_gain.reason.startswith("no gain")
    noise = decide(_comparison(0.01, -0.004, 0.03), [], 0.01, "champion version 1")
    assert not noise.promote and "within noise: its interval includes 0" in noise.reason
    forgets = decide(_comparison(0.03, 0.01, 0.05), [ProbeResult("sts_spearman", 0.70, 0.80, 0.10)], 0.01, "v1")
    assert not forgets.promote and forgets.reason.startswith("forgets: sts_spearman 0.7000 vs 0.8000")
    skipped = ProbeResult("old_domain_mlm_loss", None, None, None, note="no trained MLM head")
    wins = decide(_comparison(0.03, 0.01, 0.05), [ProbeResult("sts_spearman", 0.795, 0.80, 0.005), skipped], 0.01, "v1")
    assert wins.promote and "beats v1" in wins.reason
    assert wins.tags()["lmp.gate.ci_low"] == "0.010000" and "skipped" in wins.tags()["lmp.gate.probe.old_domain_mlm_loss"]


# -- on a real registry --------------------------------------------------------------------------------
def _variant(tiny_bert: Path, folder: Path, collapse: list[str]) -> Path:
    """The tiny BERT with the embedding rows of `collapse` zeroed, saved as an encoder folder."""
    import torch

    from lmplatform.models.encoder import Encoder

    encoder = Encoder.from_pretrained(tiny_bert)
    ids = encoder.tokenizer(collapse, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        for token_ids in ids:
            encoder.backbone.embeddings.word_embeddings.weight[token_ids] = 0.0
    return encoder.save_pretrained(folder)


def _triples(words: list[str]) -> list[str]:
    return [" ".join(t) for t in itertools.permutations(words, 3)][:60]


def _logged_run(uri: str, model: Path) -> str:
    from lmplatform.tracking.mlflow_tracking import TrackedRun

    run = TrackedRun.start(uri, "gate-tests", model.name)
    run.log_artifacts(model, "model")
    run.finish()
    return run.run_id


@pytest.fixture
def gate_files(tmp_path: Path) -> dict[str, Path]:
    texts = _triples(DOMAIN)
    confirm = tmp_path / "confirm.jsonl"  # a query finds its text with a full stop; the others are distractors
    confirm.write_text("".join(json.dumps({"query": t, "document": t + " ."}) + "\n" for t in texts[:24]))
    general = tmp_path / "general.jsonl"
    rows = [{"sentence1": t, "sentence2": t + " .", "score": 5.0} for t in _triples(GENERAL)[:24]]
    rows += [{"sentence1": t, "sentence2": t + " .", "score": 0.0} for t in _triples(GENERAL)[24:]]
    general.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"confirm": confirm, "general": general}


def test_refusal_paths_and_promotion_on_a_real_registry(tmp_path: Path, tiny_bert: Path, mlflow_uri: str,
                                                        gate_files: dict[str, Path]) -> None:
    from mlflow.tracking import MlflowClient
    from typer.testing import CliRunner

    from lmplatform.cli import app
    from lmplatform.tune.champion import GateInputs, register_and_maybe_promote

    # base: blind on the domain words; candidate: learned the domain, forgot the general words
    base = _variant(tiny_bert, tmp_path / "base", DOMAIN)
    candidate = _variant(tiny_bert, tmp_path / "candidate", GENERAL)
    confirm = RetrievalValidationConfig(pairs=DataConfig(train_paths=[str(gate_files["confirm"])], validation_fraction=0.0),
                                        split="all", relevance="pair")
    pack = GeneralPackSpec(paraphrase=[ScoredPairsSpec(path=str(gate_files["general"]))], tolerance=0.05)
    client = MlflowClient(mlflow_uri)

    def register(model: Path, spec: ChampionSpec, objective: str = "biencoder"):
        gate = GateInputs(spec, "ir_mrr_at_10", objective, str(base))
        return register_and_maybe_promote(mlflow_uri, "retriever", _logged_run(mlflow_uri, model), "model",
                                          "val_ir_mrr_at_10", "max", 0.5, "fp", {}, tags={"objective": objective}, gate=gate)

    forgets = register(candidate, ChampionSpec(confirm=confirm, general=pack))
    assert not forgets.moved and forgets.reason.startswith("forgets: paraphrase_mrr_at_10"), forgets.reason
    assert forgets.verdict.comparison.low > 0  # it did beat the base model on the confirmation set
    assert "champion" not in client.get_registered_model("retriever").aliases

    first = register(candidate, ChampionSpec(confirm=confirm))
    assert first.moved and "beats the base model" in first.reason, first.reason
    assert str(client.get_model_version_by_alias("retriever", "champion").version) == first.version

    same = register(candidate, ChampionSpec(confirm=confirm))
    assert not same.moved and same.reason.startswith("no gain") and same.previous_version == first.version
    other_kind = register(candidate, ChampionSpec(confirm=confirm), objective="cross_encoder")
    assert not other_kind.moved and "not comparable" in other_kind.reason
    assert str(client.get_model_version_by_alias("retriever", "champion").version) == first.version

    tags = client.get_model_version("retriever", same.version).tags
    assert tags["lmp.gate.decision"] == "refused" and tags["lmp.gate.gain"] == "0.000000"
    out = CliRunner().invoke(app, ["models", "why", "retriever", "--version", same.version, "--tracking-uri", mlflow_uri])
    assert out.exit_code == 0, out.output
    assert f"not champion (champion is version {first.version})" in out.output and "gate: refused: no gain" in out.output
    out = CliRunner().invoke(app, ["models", "why", "retriever", "--version", first.version, "--tracking-uri", mlflow_uri])
    assert "holds champion" in out.output and "ci_low" in out.output


def test_a_confirmation_set_must_be_held_out_from_training_and_selection(gate_files: dict[str, Path], tmp_path: Path) -> None:
    from lmplatform.config.loader import ConfigError
    from lmplatform.objectives.run_config import load_run_config
    from lmplatform.tune.gate import check_held_out

    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"query": t, "document": t + " !"}) + "\n" for t in _triples(GENERAL)[:10]))
    spec = ChampionSpec(confirm=RetrievalValidationConfig(
        pairs=DataConfig(train_paths=[str(gate_files["confirm"])], validation_fraction=0.0), split="all"))
    base = {"objective": {"name": "biencoder"}, "data": {"train_paths": [str(other)]}}
    check_held_out(spec, load_run_config(None, base=base))
    with pytest.raises(ConfigError, match="champion.confirm shares 24 of its 24 queries"):
        check_held_out(spec, load_run_config(None, base=base | {"data": {"train_paths": [str(other)],
                                                                        "validation_paths": [str(gate_files["confirm"])]}}))


def test_general_probes_score_both_models_and_skip_what_they_cannot_measure(tiny_bert: Path, tmp_path: Path) -> None:
    from lmplatform.tune.gate import general_probes

    pack = GeneralPackSpec(sts=ScoredPairsSpec(path="data/general/sts_pairs.jsonl"),
                           paraphrase=[ScoredPairsSpec(path="data/general/sts_pairs.jsonl")],
                           old_domain="data/demo/reports.jsonl")
    other = _variant(tiny_bert, tmp_path / "other", GENERAL)
    sts, paraphrase, old_domain = general_probes(pack, other, tiny_bert, "biencoder")
    assert sts.name == "sts_spearman" and -1 <= sts.candidate <= 1 and sts.drop == pytest.approx(sts.comparator - sts.candidate)
    assert paraphrase.name == "paraphrase_mrr_at_10" and 0 <= paraphrase.candidate <= 1
    # a bi-encoder folder carries no MLM head: its MLM loss would measure a random head
    assert old_domain.drop is None and "no trained MLM head" in old_domain.note
    assert [p.drop for p in general_probes(pack, other, tiny_bert, "cross_encoder")] == [None, None, None]
