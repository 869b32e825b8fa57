"""Import a bug tracker's export (Jira JSON or CSV, Bugzilla or GitHub REST JSON, plain JSONL) into the project's
report schema: `reports.jsonl`, duplicate `pairs.jsonl` with train/dev/test splits, and `import_summary.json`
saying what was read, kept and skipped and why.

`import_tracker(TrackerImportConfig(...))` does it all (`lmp data import` is its command line). Torch-free and
Ray-free: an import runs anywhere the data is. The pairs file is what `lmp data pairs` and the pipeline's pairs
stage read (see `evaluation.tasks.retrieval.data`).
"""
from __future__ import annotations

from lmplatform.data.trackers.config import SplitFractions, TrackerFormat, TrackerImportConfig
from lmplatform.data.trackers.importer import import_tracker
from lmplatform.data.trackers.summary import ImportSummary

__all__ = ["ImportSummary", "SplitFractions", "TrackerFormat", "TrackerImportConfig", "import_tracker"]
