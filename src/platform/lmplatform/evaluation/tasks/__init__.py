"""The evaluation tasks, one module each: `run_<task>_task(task_config, output_dir, models) -> TaskResult`
(the contract is in `common`); `lmplatform.evaluation.runner.TASK_RUNNERS` maps a config's `task` to its runner."""
