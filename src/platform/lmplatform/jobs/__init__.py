"""Jobs on Ray: the Ray Train driver (`train_run.run_training`) and the function its workers run
(`train_worker`), and the studies made of training runs (`frozen_vs_finetuned`). They put the layers below
together: the objective's recipe (`objectives`), the Ray-free engine (`train`), validation (`evaluation`) and
MLflow (`tracking`); pipelines and studies (`pipeline`, `tune`) call them."""

from lmplatform.lazy_exports import lazy_exports

# What tools such as the benches may use (tests/test_public_surface.py); every module path below is private.
PUBLIC: dict[str, str] = {
    "run_training": "lmplatform.jobs.train_run",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, PUBLIC)
