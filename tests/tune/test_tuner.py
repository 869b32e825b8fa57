"""Real studies: Ray Tune + Optuna over a tiny BERT's MLM runs, MLflow on sqlite, champion registration."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lmplatform.tune.tuner import run_study


def _write_space(folder: Path, tiny_bert: Path, corpus: Path, mlflow_uri: str, name: str, lr: tuple[float, float],
                 samples: int) -> Path:
    base = folder / f"{name}-base.yaml"
    base.write_text(textwrap.dedent(f"""\
        model: {{name_or_path: {tiny_bert}, max_seq_length: 32}}
        data: {{train_paths: [{corpus}], validation_fraction: 0.2}}
        objective: {{name: mlm, pseudo_perplexity_sentences: 0}}
        optim: {{batch_size: 8, max_steps: 4, warmup_ratio: 0.0}}
        scaling: {{num_workers: 1, cpus_per_worker: 1}}
        checkpoint: {{every_n_steps: 100, storage_path: {folder / 'runs'}}}
        tracking: {{tracking_uri: '{mlflow_uri}', experiment: tune-tests, registered_model: tiny-tuned,
                   log_every_n_steps: 2, eval_every_n_steps: 2}}
        """))
    space = folder / f"{name}.yaml"
    space.write_text(textwrap.dedent(f"""\
        study: {name}
        trial: train
        requires: [mlm]
        base_config: {base}
        parameters:
          optim.lr: {{distribution: loguniform, low: {lr[0]}, high: {lr[1]}}}
        metric: val_mlm_loss
        mode: min
        num_samples: {samples}
        max_concurrent: 2
        resources: {{cpu: 0}}   # two trials of 1 CPU fill the session's 2 CPUs: drivers must take none
        scheduler: {{name: asha, grace_period: 2, reduction_factor: 2, max_t: 10}}
        storage_path: {folder / 'tune'}
        """))
    return space


def test_a_study_logs_child_runs_and_plots_and_moves_the_champion_it_beats(
    ray_session, tiny_bert, tmp_path, mlflow_uri
) -> None:
    """The study's winner replaces a champion measured the same way (same validation data and settings) only
    because it beats it: had the study fingerprinted its runs otherwise, the two would not be comparable and the
    champion would stay. A winner that does not beat the champion: tests/tune/test_champion.py."""
    from mlflow.tracking import MlflowClient

    from lmplatform.data.corpus import scan_corpus
    from lmplatform.tracking.mlflow_tracking import TrackedRun
    from lmplatform.tune.champion import evaluation_fingerprint, register_and_maybe_promote
    from lmplatform.tune.kinds.train import trial_config
    from lmplatform.tune.space import load_space
    from tests.conftest import write_corpus

    corpus = write_corpus(tmp_path / "corpus.jsonl", n=80)
    client = MlflowClient(mlflow_uri)
    space = _write_space(tmp_path, tiny_bert, corpus, mlflow_uri, "good", (3e-3, 1e-2), 2)
    # The current champion: measured the same way on the same data (the learning rate is no evaluation setting),
    # with a loss every run beats (a random BERT's MLM loss starts near ln(30522) = 10.3).
    cfg = trial_config(load_space(space), {"optim.lr": 1e-3})
    fingerprint = evaluation_fingerprint(cfg, scan_corpus(cfg.data, use_ray=False).report.fingerprint, "val_mlm_loss")
    holder = TrackedRun.start(mlflow_uri, "tune-tests", "earlier-champion")
    holder.log_artifacts(tiny_bert, "model")
    held = register_and_maybe_promote(mlflow_uri, "tiny-tuned", holder.run_id, "model", "val_mlm_loss", "min", 1000.0,
                                      fingerprint, {"val_mlm_loss": 1000.0})
    assert held.moved

    good = run_study(space, verbose=0)
    assert len(good.trials) == 2 and {t["status"] for t in good.trials} <= {"TERMINATED", "STOPPED"}
    parent = client.get_run(good.parent_run_id)
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{good.parent_run_id}'")
    assert len(children) == 2
    assert {c.info.run_id for c in children} == {t["mlflow_run_id"] for t in good.trials}
    stopped = {t["mlflow_run_id"] for t in good.trials if t["status"] == "STOPPED"}  # by ASHA, mid-run
    assert all((c.info.status == "KILLED") == (c.info.run_id in stopped) for c in children)
    assert all(c.info.status == "FINISHED" for c in children if c.info.run_id not in stopped)
    for child in children:
        assert "optim.lr" in child.data.params and child.data.tags["lmp.tune_trial"]
    best_child = client.get_run(good.trials[[t["trial_id"] for t in good.trials].index(good.best_trial_id)]["mlflow_run_id"])
    assert best_child.data.tags["lmp.checkpoint_path"] and "val_mlm_loss" in best_child.data.metrics
    # intermediate validation results reached Tune (and ASHA): the initial eval, step 2, the final one, the driver's last
    assert max(t["iterations"] for t in good.trials) >= 3
    assert {p.name for p in good.plots} >= {"optimization_history.png", "parallel_coordinate.png"}
    assert {a.path for a in client.list_artifacts(good.parent_run_id, "plots")} >= {"plots/optimization_history.png"}
    decision = good.champion
    assert decision is not None and decision.moved, decision
    # compared with the held champion (not "other validation data"), beaten, registered as the next version
    assert decision.previous_version == held.version and int(decision.version) == int(held.version) + 1
    assert f"beats champion version {held.version}" in decision.reason, decision.reason
    champion = client.get_model_version_by_alias("tiny-tuned", "champion")
    assert str(champion.version) == decision.version and champion.run_id == best_child.info.run_id
    assert float(champion.tags["lmp.metric_value"]) == pytest.approx(good.best_metrics["val_mlm_loss"])
    assert client.get_run(good.parent_run_id).data.tags["lmp.champion_moved"] == "True"
    from lmplatform.tracking.model_card import read_model_card

    card = read_model_card(mlflow_uri, "tiny-tuned", decision.version)  # from the real trial run, after the gate
    assert "**promoted**" in card and "| `val_mlm_loss` |" in card and "Selected in study `good-" in card
    assert "| train_documents | 64 |" in card and "| `optim.lr` |" in card


def _search_state_readable(study_dir: Path) -> bool:
    from ray import cloudpickle

    from lmplatform.tune.search_state import SEARCH_STATE_PATTERN

    found = sorted(study_dir.glob(SEARCH_STATE_PATTERN))
    try:
        return bool(found) and isinstance(cloudpickle.loads(found[-1].read_bytes()), dict)
    except Exception:  # a half-copied pickle fails in many ways (EOFError, UnpicklingError, ...)
        return False


def test_an_interrupted_study_resumes_without_rerunning_finished_trials(ray_session, tmp_path, mlflow_uri) -> None:
    """Kill a study's driver process after two trials finished, then restore it in this process."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    from mlflow.tracking import MlflowClient

    log_dir = tmp_path / "log"
    log_dir.mkdir()
    space = Path(__file__).resolve().parents[2] / "tune_spaces/quadratic_smoke.yaml"
    sets = [f"function_args.log_dir={log_dir}", "function_args.sleep_s=0.3", "num_samples=4", "max_concurrent=1",
            "resources.cpu=0.25", f"storage_path={tmp_path / 'tune'}"]
    env = {**os.environ, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address,
           "MLFLOW_TRACKING_URI": mlflow_uri, "TUNE_GLOBAL_CHECKPOINT_S": "0"}
    command = [sys.executable, "-m", "lmplatform.cli", "tune", "--space", str(space), *(f"--set={x}" for x in sets)]
    driver = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    study_dir = None
    try:
        deadline_polls = 0
        while deadline_polls < 6000:  # a safety net against a hung driver, not a timing assertion
            deadline_polls += 1
            time.sleep(0.1)
            states = sorted((tmp_path / "tune").glob("quadratic-smoke-*/experiment_state-*.json"))
            if states:
                study_dir = states[-1].parent
                try:
                    trials = json.loads(states[-1].read_text())["trial_data"]
                except (json.JSONDecodeError, FileNotFoundError):
                    continue  # caught between Tune's write and rename
                # Tune copies its state files to storage_path one after the other, not atomically: kill once the
                # search state has been copied whole (a kill mid-copy leaves a truncated file no restore can read)
                if sum('TERMINATED' in meta for meta, _ in trials) >= 2 and _search_state_readable(study_dir):
                    break
            assert driver.poll() is None, "the study finished before it could be interrupted"
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    assert study_dir is not None
    done_before = [json.loads(line) for line in (log_dir / "starts.log").read_text().splitlines()]
    assert 2 <= len(done_before) < 4
    # The kill's worst moment, made certain: Tune saves the search state after the trial list, and a trial just
    # suggested can be in the first only. Without forgetting it, the one slot stays taken and the study hangs.
    from ray import cloudpickle

    from lmplatform.tune.search_state import LIMITER_KEY, SEARCH_STATE_PATTERN

    search_state_file = max(study_dir.glob(SEARCH_STATE_PATTERN))
    state = cloudpickle.loads(search_state_file.read_bytes())
    state["counter"] += 1
    state[LIMITER_KEY]["live_trials"].add("unsaved")
    state[LIMITER_KEY]["num_unfinished_live_trials"] += 1
    search_state_file.write_bytes(cloudpickle.dumps(state))

    os.environ["MLFLOW_TRACKING_URI"] = mlflow_uri
    try:
        resumed = run_study(space, sets, resume=study_dir.name, verbose=0)
    finally:
        del os.environ["MLFLOW_TRACKING_URI"]
    starts = [json.loads(line) for line in (log_dir / "starts.log").read_text().splitlines()]
    finished_params = [(t["params"]["x"], t["params"]["y"]) for t in resumed.trials]
    assert len(resumed.trials) == 4 and all(t["status"] == "TERMINATED" for t in resumed.trials)
    # every finished trial kept its result; the two finished before the kill were not started again
    for start in done_before[:2]:
        assert sum(s == start for s in starts) == 1 and (start["x"], start["y"]) in finished_params
    assert resumed.best_metrics["final_score"] == min(t["metrics"]["final_score"] for t in resumed.trials)
    client = MlflowClient(mlflow_uri)
    parent = client.get_run(resumed.parent_run_id)
    assert parent.info.status == "FINISHED"
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{resumed.parent_run_id}' "
                                                "and attributes.status = 'FINISHED'")
    assert len(children) == 4


def test_the_live_output_is_a_line_per_trial_event_with_its_parameters_and_metric(monkeypatch) -> None:
    """Real Tune trials moved through a study's life: a line when one starts, reports or ends; nothing else."""
    from ray.tune.experiment import Trial

    from lmplatform.tune.progress import TrialStatusLines
    from lmplatform.tune.space import load_space
    from lmplatform.tune.tuner import _reporter

    monkeypatch.delenv("RAY_AIR_NEW_OUTPUT", raising=False)
    loaded = load_space(Path(__file__).resolve().parents[2] / "tune_spaces/knn_k.yaml")
    reporter = _reporter(loaded)["progress_reporter"]
    assert isinstance(reporter, TrialStatusLines) and reporter.parameters == ["k", "weights"]
    import builtins

    from ray import cloudpickle

    patched, builtins.print = builtins.print, lambda *a, **k: None  # as Ray Train patches print in a driver
    try:
        cloudpickle.dumps(reporter)  # Tune pickles its run config, the reporter with it
    finally:
        builtins.print = patched
    assert "val_macro_f1" in reporter.metrics
    monkeypatch.setenv("RAY_AIR_NEW_OUTPUT", "1")  # the user's choice of Ray's own output is kept
    assert _reporter(loaded) == {}

    lines: list[str] = []
    reporter = TrialStatusLines(["val_macro_f1"], ["k", "weights"], lines.append)
    a, b = Trial("knn", config={"k": 5, "weights": "distance"}, stub=True), Trial("knn", config={"k": 9}, stub=True)
    trials = [a, b]

    def tick() -> int:  # what Tune does on each turn of its loop
        before = len(lines)
        if reporter.should_report(trials):
            reporter.report(trials, False)
        return len(lines) - before

    assert tick() == 2 and tick() == 0 and tick() == 0  # two new trials, then nothing new: no output
    a.set_status(Trial.RUNNING)
    assert tick() == 1 and tick() == 0
    a.update_last_result({"training_iteration": 1, "val_macro_f1": 0.61234})
    assert tick() == 1
    a.update_last_result({"training_iteration": 2, "val_macro_f1": 0.7})
    a.set_status(Trial.TERMINATED)
    b.set_status(Trial.ERROR)
    assert tick() == 2 and tick() == 0
    assert lines == [
        f"[tune] {a.trial_id} PENDING k=5, weights=distance", f"[tune] {b.trial_id} PENDING k=9",
        f"[tune] {a.trial_id} RUNNING",
        f"[tune] {a.trial_id} report 1: val_macro_f1=0.6123",
        f"[tune] {a.trial_id} TERMINATED after 2 report(s): val_macro_f1=0.7",
        f"[tune] {b.trial_id} ERROR after 0 report(s); see the trial folder",
    ]
