from pathlib import Path

import pytest

from lmplatform.config import ConfigError
from lmplatform.objectives.run_config import load_run_config

REPO = Path(__file__).resolve().parents[2]


def _error(overrides: list[str], base: dict | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_run_config(None, ["data.train_paths=x.jsonl", *overrides], base=base)
    return str(info.value)


def test_overrides_are_parsed_and_validated() -> None:
    cfg = load_run_config(REPO / "configs/mlm.yaml", ["optim.max_steps=5", "model.pooling=cls", "optim.lr=1e-4"])
    assert cfg.optim.max_steps == 5 and cfg.model.pooling == "cls" and cfg.optim.lr == pytest.approx(1e-4)


def test_error_names_field_value_and_allowed_values() -> None:
    message = _error(["model.pooling=avg"])
    assert "model.pooling" in message and "'avg'" in message
    assert "'mean', 'cls' or 'max'" in message


@pytest.mark.parametrize("value", ["gpu", "auto\x00", "full\ud800"])
def test_bad_mlm_and_declutr_projection_names_the_field_and_allowed_values(value: str) -> None:
    for objective in ("mlm", "declutr"):
        message = _error([f"objective.name={objective}"], {"objective": {"name": objective, "projection": value}})
        assert "objective.projection" in message
        # a lone surrogate is refused as text before the choice is checked; the rest get the allowed values
        assert ("not valid unicode" in message.lower() or "unicode string" in message) if "\ud800" in value \
            else "'auto', 'masked' or 'full'" in message


def test_out_of_range_number() -> None:
    message = _error(["objective.mask_probability=1.5"])
    assert "objective.mask_probability" in message and "1.5" in message and "less than 1" in message


def test_a_discriminated_union_s_tag_leaves_the_location_and_a_key_of_that_name_stays() -> None:
    from typing import Annotated, Literal, Union

    from pydantic import Field

    from lmplatform.config import parse_config
    from lmplatform.config.base import Section

    class Words(Section):
        kind: Literal["words"]
        count: int

    class Chars(Section):
        kind: Literal["chars"]
        limit: int

    class Report(Section):
        parts: list[Annotated[Union[Words, Chars], Field(discriminator="kind")]]
        mlm: dict[str, int]  # a key named like an objective is a key, not a tag

    with pytest.raises(ConfigError) as info:
        parse_config({"parts": [{"kind": "words", "count": 1}, {"kind": "chars", "limit": "x"}], "mlm": {"mlm": "y"}},
                     Report)
    assert "parts.1.limit: got 'x'" in str(info.value) and "mlm.mlm: got 'y'" in str(info.value), str(info.value)


def test_unknown_keys_are_rejected() -> None:
    message = _error(["optim.lrr=0.1"])
    assert "optim.lrr" in message and "unknown key" in message


def test_unknown_section_is_rejected() -> None:
    assert "trainer" in _error(["trainer.x=1"])


def test_unknown_objective_lists_the_known_ones() -> None:
    message = _error(["objective.name=word2vec"])
    assert "word2vec" in message and "'mlm'" in message


def test_cross_field_rule() -> None:
    message = _error(["objective.replace_with_mask=0.95"])
    assert "replace_with_mask + replace_with_random" in message


def test_bad_override_syntax() -> None:
    with pytest.raises(ConfigError, match="section.field=value"):
        load_run_config(None, ["optim.max_steps"])


def test_missing_and_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_run_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_run_config(bad)


def test_required_data_paths() -> None:
    with pytest.raises(ConfigError, match="data: required field is missing"):
        load_run_config(None, [])


def test_schema_command_prints_json_schema() -> None:
    import json

    from typer.testing import CliRunner

    from lmplatform.cli import app

    result = CliRunner().invoke(app, ["config", "schema"])
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert "data" in schema["properties"] and "objective" in schema["properties"]


def test_cli_reports_bad_config_without_traceback(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from lmplatform.cli import app

    config = tmp_path / "c.yaml"
    config.write_text("data: {train_paths: [x.jsonl]}\nscaling: {num_workers: 0}\n")
    result = CliRunner().invoke(app, ["train", "--config", str(config)])
    assert result.exit_code == 2
    assert "scaling.num_workers" in result.output and "Traceback" not in result.output


def test_config_reference_is_current() -> None:
    from lmplatform.objectives.config_reference import render

    assert (REPO / "docs/config-reference.md").read_text().strip() == render().strip(), "run `make docs`"


def test_an_override_names_an_entry_of_a_list_of_sections() -> None:
    from lmplatform.config.loader import apply_overrides

    data = {"tasks": [{"task": "retrieval", "retrievers": [{"name": "dense", "k": 1}, {"name": "bm25"}]}, {"task": "sts"}],
            "paths": ["a.jsonl"]}
    out = apply_overrides(data, ["tasks.retrieval.retrievers.bm25.k=5", "tasks.sts.limit=3"])
    assert out["tasks"][0]["retrievers"] == [{"name": "dense", "k": 1}, {"name": "bm25", "k": 5}]
    assert out["tasks"][1] == {"task": "sts", "limit": 3} and data["tasks"][1] == {"task": "sts"}  # a copy
    for override, message in [("tasks.classification.k=1", "tasks has no entry 'classification'; its entries: retrieval, sts"),
                              ("tasks.retrieval.retrievers.hybrid.k=1", "retrievers has no entry 'hybrid'; its entries: "
                                                                        "dense, bm25"),
                              ("paths.first.x=1", "paths is a value, not a section"),
                              ("tasks.retrieval.retrievers.k=1", "retrievers is a list: name one of its entries, then a field")]:
        with pytest.raises(ConfigError, match=message):
            apply_overrides(data, [override])


@pytest.mark.parametrize(("raw", "value"), [("3e-5", 3e-5), ("1E+3", 1000.0), ("-2.5e-4", -2.5e-4), ("1e5", 100000.0),
                                            ("3", 3), ("0.5", 0.5), ("e5", "e5"), ("1e", "1e"), ("1e-5x", "1e-5x")])
def test_exponent_floats_are_floats_in_files_and_overrides(tmp_path, raw: str, value: object) -> None:
    """YAML 1.1 (PyYAML) reads 3e-5 as a string; we read it as YAML 1.2 and JSON do, in a file and in --set alike."""
    from lmplatform.config.loader import apply_overrides, parse_yaml, read_yaml

    path = tmp_path / "config.yaml"
    path.write_text(f"optim:\n  lr: {raw}\n")
    from_file = read_yaml(path)["optim"]["lr"]
    from_override = apply_overrides({}, [f"optim.lr={raw}"])["optim"]["lr"]
    assert from_file == from_override == value and type(from_file) is type(value) is type(from_override)
    assert parse_yaml(f"[{raw}]") == [value]
