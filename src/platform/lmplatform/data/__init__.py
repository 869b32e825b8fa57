"""Corpus reading, cleaning, validation and splitting."""

from lmplatform.lazy_exports import lazy_exports

# What tools such as the benches may use (tests/test_public_surface.py); every module path below is private.
PUBLIC: dict[str, str] = {
    **dict.fromkeys(("TRAIN", "VALIDATION", "local_documents", "scan_corpus"), "lmplatform.data.corpus"),
    **dict.fromkeys(("join_fields", "parse_time"), "lmplatform.data.fields"),
    "read_glue_probe": "lmplatform.data.glue_probes",
    "read_pairs": "lmplatform.data.pairs",
    "read_pairs_jsonl": "lmplatform.data.sts_pairs",
    **dict.fromkeys(("TrackerImportConfig", "import_tracker"), "lmplatform.data.trackers"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, PUBLIC)
