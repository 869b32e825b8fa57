"""Training objectives, one folder each: `<name>/config.py` (the torch-free config), `<name>/objective.py`
(a torch module whose `forward(model, batch)` returns (loss, metrics), its evaluator and collate, and the
`prepare_data` / `build_recipe` wiring) and `<name>/__init__.py`, which declares the objective's `SPEC`.
`lmplatform.objectives.registry` lists the specs; the shared pieces (infonce, masking, ewc) sit here."""

from lmplatform.lazy_exports import lazy_exports

# What tools such as the benches may use (tests/test_public_surface.py); every module path below is private.
PUBLIC: dict[str, str] = {
    "plan_pairs": "lmplatform.objectives.biencoder.group_batches",
    "compute_fisher_file": "lmplatform.objectives.ewc_setup",
    "DynamicMasker": "lmplatform.objectives.masking",
    "MLMObjective": "lmplatform.objectives.mlm.objective",
    "objective_spec": "lmplatform.objectives.registry",
    "load_run_config": "lmplatform.objectives.run_config",
    "build_trainer": "lmplatform.objectives.trainer",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, PUBLIC)
