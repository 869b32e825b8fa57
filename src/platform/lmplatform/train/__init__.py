"""Ray Train: the generic worker loop and the driver that runs it."""

from lmplatform.lazy_exports import lazy_exports

# What tools such as the benches may use (tests/test_public_surface.py); every module path below is private.
PUBLIC: dict[str, str] = {
    "TextCollator": "lmplatform.train.collate",
    "resume_batches": "lmplatform.train.ingest",
    **dict.fromkeys(("FolderReporter", "Trainer"), "lmplatform.train.loop"),
    "total_optimizer_steps": "lmplatform.train.optim",
    "FINAL_MODEL_DIR": "lmplatform.train.state",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, PUBLIC)
