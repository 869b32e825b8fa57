"""Search-space validation: every bad space stops before a trial starts, naming its line."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lmplatform.tune.kinds.train import trial_config
from lmplatform.tune.space import SpaceError, define_by_run, load_space

REPO = Path(__file__).resolve().parents[2]


def _base_config(tmp_path: Path, corpus: Path) -> Path:
    path = tmp_path / "base.yaml"
    path.write_text(textwrap.dedent(f"""\
        model: {{name_or_path: default, max_seq_length: 32}}
        data: {{train_paths: [{corpus}]}}
        objective: {{name: mlm}}
        optim: {{max_steps: 2}}
        """))
    return path


def _space(tmp_path: Path, corpus: Path, body: str) -> Path:
    base = _base_config(tmp_path, corpus)
    path = tmp_path / "space.yaml"
    path.write_text(f"study: s\ntrial: train\nbase_config: {base}\n" + textwrap.dedent(body))
    return path


GOOD = """\
parameters:
  optim.lr: {distribution: loguniform, low: 1.0e-5, high: 1.0e-3}
  objective.mask_probability: {distribution: uniform, low: 0.1, high: 0.3}
metric: val_mlm_loss
mode: min
"""


def test_a_good_mlm_space_loads_and_trial_configs_apply_the_values(tmp_path: Path, corpus_file: Path) -> None:
    loaded = load_space(_space(tmp_path, corpus_file, GOOD), ["optim.max_steps=3", "num_samples=5"])
    assert loaded.space.num_samples == 5 and loaded.base.optim.max_steps == 3
    cfg = trial_config(loaded, {"optim.lr": 2e-4, "objective.mask_probability": 0.2})
    assert cfg.optim.lr == 2e-4 and cfg.objective.mask_probability == 0.2 and cfg.optim.max_steps == 3


def test_unknown_parameter_path_names_its_line_and_the_field(tmp_path: Path, corpus_file: Path) -> None:
    body = GOOD.replace("objective.mask_probability", "objective.mask_prob")
    with pytest.raises(SpaceError) as err:
        load_space(_space(tmp_path, corpus_file, body))
    message = str(err.value)
    assert "space.yaml:6:" in message and "objective.mask_prob" in message and "unknown key" in message


def test_out_of_range_values_are_rejected_by_the_run_config(tmp_path: Path, corpus_file: Path) -> None:
    body = GOOD.replace("low: 0.1, high: 0.3", "low: 0.1, high: 1.5")
    with pytest.raises(SpaceError, match=r"space.yaml:6: parameter 'objective.mask_probability' with value 1.5"):
        load_space(_space(tmp_path, corpus_file, body))


@pytest.mark.parametrize("param, expected", [
    ("{distribution: uniform, low: 0.3, high: 0.1}", "empty range: low (0.3) must be < high (0.1)"),
    ("{distribution: choice, values: []}", "choice needs a non-empty 'values' list"),
    ("{distribution: loguniform, low: 0, high: 1}", "loguniform needs low > 0"),
    ("{distribution: normal, low: 0, high: 1}", "'uniform', 'loguniform', 'int', 'randint' or 'choice'"),
])
def test_empty_or_bad_ranges_name_the_parameter_line(tmp_path: Path, corpus_file: Path, param: str, expected: str) -> None:
    body = GOOD.replace("{distribution: uniform, low: 0.1, high: 0.3}", param)
    with pytest.raises(SpaceError) as err:
        load_space(_space(tmp_path, corpus_file, body))
    assert "space.yaml:6:" in str(err.value) and expected in str(err.value)


def test_a_metric_the_objective_never_reports_lists_what_it_does(tmp_path: Path, corpus_file: Path) -> None:
    with pytest.raises(SpaceError) as err:
        load_space(_space(tmp_path, corpus_file, GOOD.replace("val_mlm_loss", "val_mrr_at_5")))
    message = str(err.value)
    assert "space.yaml:7: metric 'val_mrr_at_5' is never reported by a 'mlm' trial" in message
    assert "val_mlm_loss" in message and "val_pseudo_perplexity" in message


def test_unknown_space_keys_list_the_allowed_ones(tmp_path: Path, corpus_file: Path) -> None:
    with pytest.raises(SpaceError) as err:
        load_space(_space(tmp_path, corpus_file, GOOD + "num_sample: 3\n"))
    assert "space.yaml:9: num_sample: unknown key; allowed:" in str(err.value) and "num_samples" in str(err.value)


def test_a_missing_objective_is_named(tmp_path: Path, corpus_file: Path) -> None:
    with pytest.raises(SpaceError, match=r"space.yaml:9: this study needs objective\(s\) no_such_objective"):
        load_space(_space(tmp_path, corpus_file, GOOD + "requires: [no_such_objective]\n"))


def test_asha_with_several_objectives_is_refused(tmp_path: Path, corpus_file: Path) -> None:
    body = GOOD + "objectives: [{metric: val_mlm_accuracy, mode: max}]\nscheduler: {name: asha}\n"
    with pytest.raises(SpaceError, match="multi-objective studies cannot use the asha scheduler"):
        load_space(_space(tmp_path, corpus_file, body))


def test_conditional_parameters_are_only_suggested_when_their_condition_holds(tmp_path: Path) -> None:
    import optuna

    path = tmp_path / "fn.yaml"
    path.write_text(textwrap.dedent("""\
        study: cond
        trial: function
        function: lmplatform.tune.trials:quadratic
        reports: [score]
        parameters:
          x: {distribution: choice, values: [0.0, 1.0]}
          y: {distribution: uniform, low: -3, high: 3, when: {x: 1.0}}
        metric: score
        mode: min
        """))
    loaded = load_space(path)
    suggest = define_by_run(loaded)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = []
    for _ in range(12):
        trial = study.ask()
        suggest(trial)
        seen.append(trial.params)
        study.tell(trial, 0.0)
    assert all(("y" in p) == (p["x"] == 1.0) for p in seen)
    assert {p["x"] for p in seen} == {0.0, 1.0}


def test_function_spaces_check_the_import_and_declared_reports(tmp_path: Path) -> None:
    path = tmp_path / "fn.yaml"
    body = "study: f\ntrial: function\nfunction: lmplatform.tune.trials:nope\nreports: [score]\n" \
           "parameters:\n  x: {distribution: uniform, low: 0, high: 1}\nmetric: score\nmode: min\n"
    path.write_text(body)
    with pytest.raises(SpaceError, match=r"fn.yaml:3: function 'lmplatform.tune.trials:nope'.*no callable 'nope'"):
        load_space(path)
    path.write_text(body.replace(":nope", ":quadratic").replace("metric: score", "metric: loss"))
    with pytest.raises(SpaceError, match=r"fn.yaml:7: metric 'loss' is not among the function's reports: score"):
        load_space(path)


def test_shipped_spaces_that_run_in_this_branch_validate() -> None:
    assert load_space(REPO / "tune_spaces/mlm_lr.yaml").space.metric == "val_mlm_loss"
    assert load_space(REPO / "tune_spaces/knn_k.yaml").space.trial == "function"
    assert load_space(REPO / "tune_spaces/knn_k_ade.yaml").space.metric == "val_re_macro_f1"
    assert list(load_space(REPO / "tune_spaces/rerank_depth.yaml").space.parameters) == ["candidates"]
    demo = load_space(REPO / "tune_spaces/demo_temperature.yaml", ["model.name_or_path=default"])
    assert demo.space.resources.cpu == 0 and demo.base.objective.learnable_temperature is False


def test_a_negative_trial_cpu_reservation_is_rejected(tmp_path: Path, corpus_file: Path) -> None:
    with pytest.raises(SpaceError) as err:
        load_space(_space(tmp_path, corpus_file, GOOD + "resources: {cpu: -1}\n"))
    assert "resources.cpu" in str(err.value)


@pytest.mark.parametrize("name, objective", [
    ("infonce_temperature", "biencoder"), ("declutr_span", "declutr"), ("cldr_lambda", "graph_cl"),
    ("ewc_lambda", "biencoder"),
])
def test_shipped_spaces_for_objectives_not_installed_say_what_they_need(name: str, objective: str) -> None:
    from lmplatform.objectives.registry import objective_names

    if objective in objective_names():
        loaded = load_space(REPO / f"tune_spaces/{name}.yaml")
        assert loaded.base.objective.name == objective
    else:
        with pytest.raises(SpaceError, match=rf"this study needs objective\(s\) {objective}"):
            load_space(REPO / f"tune_spaces/{name}.yaml")
