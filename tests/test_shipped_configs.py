"""Every shipped config validates through its own loader, and the files and models it names are there.

Run configs (configs/*.yaml), pipelines (configs/pipelines/), evaluation configs (configs/eval/) and
tune spaces (tune_spaces/). Paths are checked from the repository root, where the README runs them.
Files under the shared data folder (../shared/data, public data sets not in this repository) are
checked only where that folder exists; without it the config is still validated.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from lmplatform.config.loader import parse_config, read_yaml
from lmplatform.config.variables import VARS_KEY, extend
from lmplatform.evaluation.config import load_evaluation_config
from lmplatform.evaluation.relations import RelationEvalConfig
from lmplatform.evaluation.tasks.classification.config import ClassificationDataset
from lmplatform.evaluation.tasks.common import EncoderSpec
from lmplatform.evaluation.tasks.retrieval.config import RetrievalDataset, RetrieverSpec
from lmplatform.evaluation.tasks.sts.config import StsDataset
from lmplatform.objectives.run_config import load_run_config
from lmplatform.pipeline.config import load_pipeline_config
from lmplatform.pipeline.preflight import (
    REGISTRY_PREFIXES,
    Problem,
    config_sections,
    data_config_problems,
    file_problem,
    model_problems,
    pipeline_problems,
    run_config_problems,
)
from lmplatform.tune.space import GeneralPackSpec, ScoredPairsSpec, load_space

REPO = Path(__file__).resolve().parents[1]
# Where the configs expect the public data sets: ../shared/data, beside the repository.
SHARED_ROOTS = ((REPO.parent / "shared" / "data").resolve(),)

# Fields of the evaluation and tune-space sections that name a file, and those that name a model.
FILE_FIELDS: dict[type[BaseModel], tuple[str, ...]] = {
    RetrievalDataset: ("corpus", "relations"),
    StsDataset: ("path", "fit_path"),
    ClassificationDataset: ("path", "train", "dev", "test"),
    RelationEvalConfig: ("data_path", "folds_file"),
    ScoredPairsSpec: ("path",),
    GeneralPackSpec: ("old_domain",),
}
MODEL_FIELDS: dict[type[BaseModel], tuple[str, ...]] = {
    EncoderSpec: ("model",),
    RetrieverSpec: ("model", "reranker"),
    RelationEvalConfig: ("ner_model", "re_model", "base_model", "clgs_model"),
}
# `lmp graph evaluate` configs have their own schema; every other configs/eval/ file is an `lmp evaluate` config.
GRAPH_EVAL_CONFIGS = {"relations_ade.yaml"}


@pytest.fixture(autouse=True)
def _from_the_repository_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("LMP_HOME", raising=False)


def _shared_data_absent(problem: Problem) -> bool:
    if problem.path is None:
        return False
    path = Path(problem.path).expanduser()
    path = (path if path.is_absolute() else REPO / path).resolve()
    return any(path.is_relative_to(root) and not root.is_dir() for root in SHARED_ROOTS)


def _made_by_a_run(problem: Problem) -> bool:
    # A registry reference (e.g. biencoder_ewc.yaml's models:/lmplatform-mlm@champion) names what an earlier
    # run registers, and a file under runs/ what an earlier command writes (openoffice_duplicates.yaml's pair
    # files, from `lmp data pairs`); a fresh clone has neither, and the config's comments say which makes it.
    return problem.path is not None and (problem.path.startswith(REGISTRY_PREFIXES) or Path(problem.path).parts[:1] == ("runs",))


def _reported(problems: list[Problem]) -> list[str]:
    return [str(p) for p in problems if not _shared_data_absent(p) and not _made_by_a_run(p)]


def _shipped_model(reference: Any) -> bool:
    # Registry entries and per-fold templates are made by runs, not shipped: only local references are checked.
    return isinstance(reference, str) and not reference.startswith(REGISTRY_PREFIXES) and "{fold}" not in reference


def _section_problems(config: BaseModel, where: str) -> list[Problem]:
    """Files and models named by evaluation / tune-space sections (FILE_FIELDS, MODEL_FIELDS)."""
    problems = data_config_problems(config, where)
    for location, section in config_sections(config):
        prefix = f"{location}." if location else ""
        for name in FILE_FIELDS.get(type(section), ()):
            problems += file_problem(getattr(section, name), prefix + name, where)
        references = [(name, getattr(section, name)) for name in MODEL_FIELDS.get(type(section), ())]
        if isinstance(section, RelationEvalConfig):
            references += [(f"probe_models.{key}", value) for key, value in section.probe_models.items()]
        for name, reference in references:
            if _shipped_model(reference):
                problems += model_problems(reference, prefix + name, where)
    return problems


def _recipe_inputs(path: Path) -> list[str]:
    """A recipe's required variables (those left null, e.g. tracker_system.yaml's data_root), set to a folder under
    runs/: what `lmp data import` writes before the recipe runs, which a fresh clone does not have."""
    data = extend(read_yaml(path), path, read_yaml)
    return [f"{VARS_KEY}.{name}=runs/data/example" for name, value in (data.get(VARS_KEY) or {}).items() if value is None]


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(REPO)) for p in paths]


RUN_CONFIGS = sorted((REPO / "configs").glob("*.yaml"))
PIPELINES = sorted((REPO / "configs" / "pipelines").glob("*.yaml"))
EVAL_CONFIGS = sorted((REPO / "configs" / "eval").glob("*.yaml"))
TUNE_SPACES = sorted((REPO / "tune_spaces").glob("*.yaml"))


def test_every_kind_of_config_is_found() -> None:
    # a moved folder must not turn the tests below into zero tests
    assert len(RUN_CONFIGS) >= 5 and len(PIPELINES) >= 4 and len(EVAL_CONFIGS) >= 4 and len(TUNE_SPACES) >= 5


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=_ids(RUN_CONFIGS))
def test_run_config(path: Path) -> None:
    cfg = load_run_config(path)
    assert _reported(run_config_problems(cfg, str(path.relative_to(REPO)))) == []


@pytest.mark.parametrize("path", PIPELINES, ids=_ids(PIPELINES))
def test_pipeline(path: Path) -> None:
    cfg = load_pipeline_config(path, _recipe_inputs(path))
    assert cfg.stages[0].init_from == "default", "a preset must run from a fresh clone (the packaged model)"
    assert _reported(pipeline_problems(cfg)) == []


@pytest.mark.parametrize("path", EVAL_CONFIGS, ids=_ids(EVAL_CONFIGS))
def test_evaluation_config(path: Path) -> None:
    if path.name in GRAPH_EVAL_CONFIGS:
        cfg: BaseModel = parse_config(read_yaml(path), RelationEvalConfig, source=str(path))
    else:
        cfg = load_evaluation_config(path)
    assert _reported(_section_problems(cfg, str(path.relative_to(REPO)))) == []


@pytest.mark.parametrize("path", TUNE_SPACES, ids=_ids(TUNE_SPACES))
def test_tune_space(path: Path) -> None:
    loaded = load_space(path, _recipe_inputs(path))  # validates the base run config with every sampled parameter value
    where = str(path.relative_to(REPO))
    problems = _section_problems(loaded.space, where)  # champion.confirm, champion.general
    if loaded.space.trial == "train":
        problems += run_config_problems(loaded.base, f"{where}: base_config {loaded.space.base_config}")
    for key, value in loaded.space.function_args.items():
        if key in ("model", "reranker"):
            if _shipped_model(value):
                problems += model_problems(value, f"function_args.{key}", where)
        elif isinstance(value, str) and "/" in value and Path(value).suffix:  # a file argument (data, folds_file, evaluation)
            problems += file_problem(value, f"function_args.{key}", where)
    assert _reported(problems) == []
