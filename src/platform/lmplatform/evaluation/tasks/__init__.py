"""The evaluations, one folder each: `__init__.py` declares its `SPEC` (`evaluation/spec.py`), `config.py` its task
config, `task.py` its `run(task, output_dir, models) -> TaskResult` (the contract is in `common`) and, for one
that scores one model, `evaluate_model`. `evaluation/registry.py` lists them."""
