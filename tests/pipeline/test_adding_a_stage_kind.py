"""A new kind of pipeline stage is one module and one registration: this module is that module (a toy kind that
counts a file's lines), and the pipeline config, pre-flight, the runner, stage reuse and a study's metrics and CPUs
all take it from its spec, with no other change to the package."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest
from pydantic import Field

from lmplatform.config.base import Section
from lmplatform.config.loader import ConfigError
from lmplatform.pipeline import kinds
from lmplatform.pipeline.config import PipelineConfig, StageConfig, pipeline_config_from_dict
from lmplatform.pipeline.preflight import Problem, file_problem, stage_problems
from lmplatform.pipeline.spec import StageCheck, StageContext, StageSpec
from lmplatform.pipeline.stage_run import run_untrained, section_content, stage_tracking

REPO = Path(__file__).resolve().parents[2]


class CountConfig(Section):
    path: str = Field(..., min_length=1, description="The text file whose lines are counted.")
    cpus: float = Field(0.5, gt=0.0)


@dataclass
class CountResult:
    mlflow_run_id: str
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        return f"{int(self.metrics['lines'])} lines"


def run(ctx: StageContext) -> None:
    def work() -> CountResult:
        from lmplatform.tracking.mlflow_tracking import TrackedRun

        tracking_uri, experiment, run_name, parent_run_id, tags = stage_tracking(ctx)
        tracker = TrackedRun.start(tracking_uri, experiment, run_name, tags, parent_run_id)
        lines = float(len(Path(ctx.section.path).read_text().splitlines()))
        out = ctx.folder / ctx.stage.name / "count.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"lines": lines}))
        ctx.record.output_path = str(out)
        tracker.log_metrics({"lines": lines}, step=0)
        tracker.finish()
        return CountResult(tracker.run_id, {"lines": lines})

    run_untrained(ctx, work)


def problems(ctx: StageCheck) -> list[Problem]:
    return file_problem(ctx.section.path, "count.path", ctx.where)


reuse_content = section_content


def cpus(pipeline: PipelineConfig, stage: StageConfig) -> float:
    return stage.section.cpus


def metric_names(pipeline: PipelineConfig, stage: StageConfig) -> set[str]:
    return {"lines"}


SPEC = StageSpec(name="count", section=CountConfig, description="Count a text file's lines.",
                 implementation=__name__, makes="nothing")


@pytest.fixture
def count_kind() -> Iterator[StageSpec]:
    kinds.register(SPEC)
    yield SPEC
    kinds.unregister(SPEC.name)


def _pipeline(tmp_path: Path, path: Path, **extra: object) -> PipelineConfig:
    return pipeline_config_from_dict({"name": "counting", "storage_path": str(tmp_path / "pipelines"),
                                      "stages": [{"name": "lines", "count": {"path": str(path), **extra}}]}, tmp_path)


def test_a_registered_kind_is_a_stage_section_validated_by_its_own_model(count_kind, tmp_path: Path) -> None:
    cfg = _pipeline(tmp_path, tmp_path / "a.txt")
    stage = cfg.stage("lines")
    assert stage.kind == "count" and isinstance(stage.section, CountConfig)
    with pytest.raises(ConfigError, match=r"stages\.0\.count\.cpu"):
        _pipeline(tmp_path, tmp_path / "a.txt", cpu=1)
    with pytest.raises(ConfigError, match=r"init_from names count stage 'lines', which makes no model"):
        pipeline_config_from_dict({"name": "p", "stages": [
            {"name": "lines", "count": {"path": "a.txt"}},
            {"name": "train", "init_from": "stage:lines", "run": {"data": {"train_paths": ["x.jsonl"]}}}]}, tmp_path)


def test_without_its_registration_the_section_is_an_unknown_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"stages\.0\.count"):
        _pipeline(tmp_path, tmp_path / "a.txt")


def test_preflight_and_a_study_read_the_kind_from_its_spec(count_kind, tmp_path: Path) -> None:
    from lmplatform.tune.kinds.pipeline import stage_cpus
    from lmplatform.tune.metrics import pipeline_reported_metrics

    cfg = _pipeline(tmp_path, tmp_path / "missing.txt", cpus=1.5)
    [problem] = stage_problems(cfg, cfg.stage("lines"), [])
    assert problem.field == "count.path" and "missing.txt" in problem.message
    assert pipeline_reported_metrics(cfg) == {"lines/lines"}
    assert stage_cpus(cfg) == 1.5


def test_the_runner_runs_it_and_reuses_it(count_kind, ray_session, mlflow_uri, tmp_path: Path) -> None:
    from lmplatform.pipeline.runner import run_pipeline

    text = tmp_path / "a.txt"
    text.write_text("one\ntwo\nthree\n")
    written = _pipeline(tmp_path, text).model_dump(mode="json")
    cfg = pipeline_config_from_dict({**written, "tracking": {"tracking_uri": mlflow_uri}, "reuse": {"enabled": True}},
                                    tmp_path)
    first = run_pipeline(cfg).state.stages["lines"]
    assert first.metrics == {"lines": 3.0} and json.loads(Path(first.output_path).read_text()) == {"lines": 3.0}
    second = run_pipeline(cfg).state.stages["lines"]
    assert second.reused_from is not None and second.metrics == {"lines": 3.0}


def _load_in_a_fresh_process(tmp_path: Path, plugins: list[str]) -> subprocess.CompletedProcess:
    """Load a pipeline with a `count_from_plugin` stage in a new interpreter, as a study's trial actor would."""
    config = tmp_path / "pipeline.yaml"
    config.write_text(json.dumps({"name": "counting", "plugins": plugins,
                                  "stages": [{"name": "lines", "count_from_plugin": {"path": "a.txt"}}]}))
    code = ("from lmplatform.pipeline.config import load_pipeline_config; "
            f"print(load_pipeline_config({str(config)!r}).stage('lines').kind)")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_a_plugin_named_by_the_pipeline_registers_its_kind_in_any_process(tmp_path: Path) -> None:
    loaded = _load_in_a_fresh_process(tmp_path, ["tests.pipeline.stage_kind_plugin"])
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "count_from_plugin"
    unknown = _load_in_a_fresh_process(tmp_path, [])
    assert unknown.returncode != 0 and "stages.0.count_from_plugin" in unknown.stderr
    for bad in ["no_such_module", "", ".relative", "nul\x00here", "surrogate\ud800"]:
        with pytest.raises(ConfigError, match=r"plugins\.1: cannot import"):
            pipeline_config_from_dict({"name": "p", "plugins": ["json", bad], "stages": [{"name": "a", "run": {}}]},
                                      tmp_path)


def test_a_kind_that_may_register_without_saying_what_is_refused_before_a_study(tmp_path: Path) -> None:
    """A spec with `registers` whose module lacks `registration` (this one) is refused when a study that would register
    from it is loaded, not once its trials are over."""
    import yaml

    from lmplatform.tune.space import SpaceError, load_space

    registering = StageSpec(name="count", section=CountConfig, description="Count a text file's lines.",
                            implementation=__name__, makes="nothing", registers=True)
    kinds.register(registering)
    try:
        (tmp_path / "a.txt").write_text("one\ntwo\n")
        pipeline = {"name": "counting", "storage_path": str(tmp_path / "pipelines"),
                    "stages": [{"name": "lines", "count": {"path": str(tmp_path / "a.txt")}}]}
        (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(pipeline))
        space = {"study": "counts", "trial": "pipeline", "base_pipeline": str(tmp_path / "pipeline.yaml"),
                 "parameters": {"stages.lines.count.cpus": {"distribution": "choice", "values": [0.5, 1.0]}},
                 "metric": "lines/lines", "mode": "max", "num_samples": 2, "storage_path": str(tmp_path / "tune"),
                 "champion": {"registered_model": "counter"}}
        (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
        with pytest.raises(SpaceError, match=r"stage 'lines' of kind 'count' may register .* has no `registration`"):
            load_space(tmp_path / "space.yaml")
    finally:
        kinds.unregister(registering.name)
