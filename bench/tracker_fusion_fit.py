"""How the tracker recipe's metadata fusion is fitted: on the train pairs against the whole corpus, or in the online
protocol (each train query against the reports filed in the 365 days before it), compared on dev only.

Both variants are configs/pipelines/tracker_system.yaml on OpenOffice imported as bench/tracker_online.py imports
it; they share every stage but the system stage (stage reuse), whose choices and reported metrics are in the online
protocol on dev_select. Test is never read.

    python bench/tracker_fusion_fit.py [--data ../shared/data] [--out runs/bench/tracker_fusion_fit]

Writes bench/results/tracker_fusion_fit.json: per variant, the dev_select metrics of the system as chosen and the
settings it chose.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, write_result
from tracker_online import PIPELINE, import_export

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"fit against the corpus": [], "fit in the online protocol": ["stages.system.system.metadata.fit.protocol=online"]}


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="The shared data folder.")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench" / "tracker_fusion_fit")
    args = parser.parse_args(argv)

    from lmplatform.pipeline import PipelineState, load_pipeline_config, run_pipeline

    root = args.out / "data"
    if not (root / "reports.jsonl").exists():
        import_export(args.data, root)
    base = [f"vars.data_root={root}", "vars.registered_model=fusion-exp", f"storage_path={args.out / 'pipelines'}",
            f"tracking.tracking_uri=sqlite:///{(args.out / 'mlflow.db').resolve()}", "reuse.enabled=true"]
    rows = {}
    for name, overrides in VARIANTS.items():
        result = run_pipeline(load_pipeline_config(PIPELINE, base + overrides))
        system = PipelineState.load(Path(result.folder)).stages["system"]
        rows[name] = {"dev_select": {k: v for k, v in system.metrics.items() if k.startswith(("ir_", "dense_ir_"))},
                      "regularization": system.search["metadata_fusion"]["config"]["regularization"],
                      "bm25_weight": system.search["bm25_weight"], "overrides": overrides}
        print(f"{name}: dev_select RR@10 {rows[name]['dev_select']['ir_rr_at_10']:.4f} "
              f"MRR@10 {rows[name]['dev_select']['ir_mrr_at_10']:.4f}", flush=True)
    write_result("tracker_fusion_fit", {"pipeline": str(PIPELINE.relative_to(ROOT)), "protocol": "online, 365 days",
                                        "queries": "dev_select", "rows": rows})


if __name__ == "__main__":
    main()
