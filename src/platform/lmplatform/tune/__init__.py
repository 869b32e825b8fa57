"""Hyperparameter search: search spaces as data, Ray Tune + Optuna studies, champion registration."""

from lmplatform.lazy_exports import lazy_exports

# What tools such as the benches may use (tests/test_public_surface.py); every module path below is private.
PUBLIC: dict[str, str] = {
    "STUDY_TAG": "lmplatform.tune.results",
    **dict.fromkeys(("import_callable", "load_space"), "lmplatform.tune.space"),
    "quadratic": "lmplatform.tune.trials",
    "run_study": "lmplatform.tune.tuner",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, PUBLIC)
