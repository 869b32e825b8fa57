"""The one-job tracker system, without Ray: its plan validates the import, the recipe with the job's variables and
the Serve config before anything is written (each bad field named); on a real Jira export the import writes what the
recipe's preflight and its data stage then read; the pairs guard and the sample request read the import."""
from __future__ import annotations

import json
import shlex
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from lmplatform.config.loader import ConfigError
from lmplatform.data.readers import DataError
from lmplatform.data.trackers import SplitFractions, TrackerImportConfig, import_tracker
from lmplatform.pipeline.pairs import write_pairs
from lmplatform.pipeline.preflight import PreflightError, pipeline_problems
from lmplatform.pipeline.tracker_system import (
    ServeRequest,
    check_pairs,
    default_data_root,
    plan_tracker_system,
    sample_curl,
    scratch_warning,
)
from lmplatform.serving.settings import ServeConfigError
from tests.data.trackers.exports import jira_issue, read_jsonl, write_json

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "configs" / "pipelines" / "tracker_system.yaml"
SERVE_CONFIG = REPO / "serve" / "config.yaml"
TOPICS = ("printer offline", "save as docx", "font rendering", "spell check", "table sort", "pdf export", "autosave",
          "chart legend", "mail merge", "page numbers", "find and replace", "undo history")


def tracker_export(path: Path, groups: int = 12, size: int = 3) -> Path:
    """A Jira REST export: `groups` duplicate groups of `size` issues, filed 3 days apart, each later issue linked
    to its group's first, over three components."""
    issues, number = [], 0
    for g in range(groups):
        first = None
        for _ in range(size):
            number += 1
            key, topic = f"HADOOP-{number}", TOPICS[g % len(TOPICS)]
            created = (datetime(2020, 1, 1) + timedelta(days=3 * number)).strftime("%Y-%m-%dT%H:%M:%S.000+0000")
            issues.append(jira_issue(key, 1000 + number, created, f"{topic} fails ({number})",
                                     description=f"Using {topic} the application fails; report {number}.",
                                     component=("writer", "calc", "impress")[g % 3], outward=[first] if first else []))
            first = first or key
    return write_json(path, {"startAt": 0, "total": len(issues), "issues": issues})


def _imports(tmp_path: Path, **fields: object) -> TrackerImportConfig:
    values = {"format": "jira-json", "inputs": [str(tracker_export(tmp_path / "export.json"))],
              "out": str(tmp_path / "data" / "mytracker"), **fields}
    return TrackerImportConfig(**values)


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_the_plan_sets_the_jobs_variables_and_keeps_the_users_overrides(tmp_path: Path) -> None:
    plan = plan_tracker_system(_imports(tmp_path), "mytracker", RECIPE,
                               ["stages.biencoder.run.optim.lr=5.0e-5", "vars.pairs=pairs.jsonl"],
                               ServeRequest(SERVE_CONFIG, ("limits.max_k=50",), port=8123))
    root = tmp_path / "data" / "mytracker"
    assert plan.data_root == root and plan.register_stage == "system" and plan.registered_name == "mytracker"
    data, system = plan.pipeline.stage("data").pairs, plan.pipeline.stage("system").system
    assert data.corpus == f"{root}/reports.jsonl" and data.relations == f"{root}/pairs.jsonl"
    assert system.index.corpus == f"{root}/reports.jsonl"
    assert plan.pipeline.stage("biencoder").run["optim"]["lr"] == 5.0e-5
    assert plan.serve_config == SERVE_CONFIG
    as_data = plan.to_dict()
    assert as_data["import"]["out"] == str(root) and as_data["registers"] == "mytracker"
    assert as_data["serve"] == {"config": str(SERVE_CONFIG), "overrides": ["limits.max_k=50"], "port": 8123,
                                "detach": False, "route_prefix": None}
    assert _files(tmp_path) == ["export.json"]  # validated: nothing written


def test_a_relative_data_root_lies_under_the_project_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "project"
    monkeypatch.setenv("LMP_HOME", str(home))
    assert default_data_root("mytracker") == home / "runs" / "data" / "mytracker"
    plan = plan_tracker_system(_imports(tmp_path, out="runs/data/x"), "x", RECIPE, serve=None)
    assert plan.data_root == home / "runs" / "data" / "x"
    assert plan.pipeline.stage("data").pairs.corpus == str(home / "runs" / "data" / "x" / "reports.jsonl")


@pytest.mark.parametrize("change, error, named", [
    ({"name": "my tracker"}, ConfigError, "name 'my tracker'"),
    ({"imports": {"inputs": ["missing.json"]}}, ConfigError, "import.inputs: data file not found: missing.json"),
    ({"imports": {"links": ["links.jsonl"]}}, ConfigError, "import.links: data file not found: links.jsonl"),
    ({"overrides": ["vars.data_root=/elsewhere"]}, ConfigError, "vars.data_root is set by the job"),
    ({"overrides": ["vars.registered_model=other"]}, ConfigError, "vars.registered_model is set by the job"),
    ({"overrides": ["stages.nope.optim.lr=1"]}, ConfigError, "no stage named 'nope'"),
    ({"overrides": ["stages.biencoder.run.optim.lr=fast"]}, ConfigError, "optim.lr"),
    ({"overrides": ["vars.reports=other.jsonl"]}, PreflightError, "pairs.corpus: file not found"),
    ({"overrides": ["stages.negatives.init_from=/no/model"]}, PreflightError, "init_from"),
    ({"overrides": ["stages.system.system.register_as=null"]}, ConfigError, "stages.system.system.register_as"),
    ({"recipe": "nowhere.yaml"}, ConfigError, "pipeline config not found: nowhere.yaml"),
    ({"serve": ServeRequest(SERVE_CONFIG, ("limits.max_k=0",))}, ServeConfigError, "limits.max_k"),
    ({"serve": ServeRequest(SERVE_CONFIG, ("model=models:/x/1",))}, ServeConfigError, "model is set by the job"),
    ({"serve": ServeRequest(Path("no.yaml"))}, ServeConfigError, "serve config not found: no.yaml"),
    ({"serve": ServeRequest(SERVE_CONFIG, detach=True)}, ConfigError, "detach: needs a Ray cluster"),
    ({"serve": ServeRequest(SERVE_CONFIG, port=70000)}, ConfigError, "port: 70000"),
    ({"serve": ServeRequest(SERVE_CONFIG, route_prefix="writer")}, ConfigError, "route_prefix: 'writer' is not a route"),
    ({"serve": ServeRequest(SERVE_CONFIG, route_prefix="/writer/")}, ConfigError, "route_prefix: '/writer/' is not"),
    ({"serve": ServeRequest(SERVE_CONFIG, route_prefix="/a\nb")}, ConfigError, "route_prefix: '/a\\nb' is not"),
    ({"serve": ServeRequest(SERVE_CONFIG, route_prefix="/\ud800")}, ConfigError, "route_prefix: '/\\ud800' is not"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_bad_field_fails_before_anything_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      change: dict, error: type, named: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    imports = _imports(tmp_path).model_copy(update=change.pop("imports", {}))
    arguments = {"name": "mytracker", "recipe": RECIPE, "overrides": [], "serve": ServeRequest(SERVE_CONFIG)} | change
    with pytest.raises(error) as raised:
        plan_tracker_system(imports, arguments.pop("name"), **arguments)
    assert named in str(raised.value)
    assert _files(tmp_path) == ["export.json"]


def test_detached_serving_needs_a_cluster_named_or_in_the_environment(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    detached = ServeRequest(SERVE_CONFIG, detach=True)
    plan = plan_tracker_system(_imports(tmp_path), "t", RECIPE, serve=detached, address="auto")
    assert plan.address == "auto" and plan.lines()[2].endswith("detached on the cluster")
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:8265")  # as `ray job submit` sets it
    assert plan_tracker_system(_imports(tmp_path), "t", RECIPE, serve=detached).address is None


def test_without_serving_a_recipe_that_registers_nothing_is_fine(tmp_path: Path) -> None:
    plan = plan_tracker_system(_imports(tmp_path), "t", RECIPE, ["stages.system.system.register_as=null"], serve=None)
    assert plan.register_stage is None and plan.serve is None
    assert plan.lines()[1].endswith("registers nothing") and plan.lines()[2] == "serve: no (--no-serve)"


def test_the_import_writes_what_the_recipe_reads(tmp_path: Path) -> None:
    """Before the import only the files it writes are missing; after it, the preflight finds nothing, and the
    recipe's data stage cuts the import's pairs into the splits the later stages read."""
    plan = plan_tracker_system(_imports(tmp_path), "mytracker", RECIPE, serve=None)
    before = pipeline_problems(plan.pipeline)
    assert before and {Path(p.path).name for p in before} == {"reports.jsonl", "pairs.jsonl"}
    summary = import_tracker(plan.imports)
    assert summary.reports_kept == 36 and summary.pairs == {"train": 14, "dev": 5, "test": 5}
    assert pipeline_problems(plan.pipeline) == []
    check_pairs(plan.pipeline, plan.data_root)
    files, metrics, bad_rows = write_pairs(plan.pipeline.stage("data").pairs, tmp_path / "stage-data")
    assert set(files) == {"train", "dev_select", "dev_confirm", "test"} and bad_rows == []
    assert metrics["pairs/train_pairs"] == 14 and metrics["pairs/dev_select_pairs"] > 0
    train = read_jsonl(files["train"])
    assert train[0] == {"query": "printer offline fails (2). Using printer offline the application fails; report 2.",
                        "document": "printer offline fails (1). Using printer offline the application fails; report 1.",
                        "group": "HADOOP-1"}


def test_an_import_without_pairs_a_later_stage_reads_is_refused_before_training(tmp_path: Path) -> None:
    plan = plan_tracker_system(_imports(tmp_path, fractions=SplitFractions(train=0.9, dev=0.0, test=0.1)),
                               "mytracker", RECIPE, serve=None)
    import_tracker(plan.imports)
    with pytest.raises(DataError, match=r"stage 'data' would write no dev_select pairs from the import \(train"):
        check_pairs(plan.pipeline, plan.data_root)


def test_the_sample_request_is_a_test_duplicate_of_the_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = plan_tracker_system(_imports(tmp_path), "mytracker", RECIPE, serve=None)
    import_tracker(plan.imports)
    monkeypatch.delenv("LMP_SERVE_TOKEN", raising=False)
    words = shlex.split(sample_curl("http://127.0.0.1:8123", plan.data_root))
    assert words[:3] == ["curl", "-s", "http://127.0.0.1:8123/v1/duplicates"] and words[3] == "-d"
    body = json.loads(words[4])
    last_test = [p for p in read_jsonl(plan.data_root / "pairs.jsonl") if p["split"] == "test"][-1]
    assert last_test["duplicate_id"] == "HADOOP-36"
    assert body == {"k": 5, "report": {
        "id": "HADOOP-36", "title": "undo history fails (36)", "text": "Using undo history the application fails; report 36.",
        "metadata": {"product": "Hadoop Common", "component": "impress, test", "created": "2020-04-18T00:00:00Z"}}}
    monkeypatch.setenv("LMP_SERVE_TOKEN", "secret")
    words = shlex.split(sample_curl("http://127.0.0.1:8123/", plan.data_root))
    assert words[3:5] == ["-H", "Authorization: Bearer $LMP_SERVE_TOKEN"]


def test_inside_a_job_results_bound_for_its_temporary_working_directory_are_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workdir, keep = tmp_path / "working_dir_files", tmp_path / "keep"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    monkeypatch.delenv("LMP_HOME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    relative = plan_tracker_system(_imports(tmp_path, out="runs/data/t"), "t", RECIPE, serve=None)
    kept = plan_tracker_system(_imports(tmp_path, out=str(keep / "data")), "t", RECIPE,
                               [f"storage_path={keep}/runs", f"tracking.tracking_uri=sqlite:///{keep}/mlflow.db"], None)
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    assert scratch_warning(relative) is None  # not a job: the working directory is the user's
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}")  # as Ray's job supervisor sets it
    warning = scratch_warning(relative)
    assert warning is not None and "the data, the pipeline runs, the MLflow store will be written under this job's" in warning
    assert scratch_warning(kept) is None
