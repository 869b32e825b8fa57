"""Which report fields the tracker recipe's metadata fusion should match on, asked of dev only.

REP matches product, component, type, priority and version; the recipe's fusion matches product and component. On a
tracker_system pipeline run over OpenOffice (as bench/tracker_online.py makes it), this bench fits the fusion on the
train pairs once per field set, pool size and regularisation, as the system stage fits it, and scores each on
dev_select in the online protocol (each query against the reports filed in the 365 days before it), beside the
dense bi-encoder alone and the ceiling: the share of dev_select queries with an earlier duplicate in the window.
Test is never read.

    python bench/tracker_fusion_fields.py --pipeline-run runs/bench/tracker_online/pipelines/<run> \
        [--data-root runs/bench/tracker_online/data]

Writes bench/results/tracker_fusion_fields.json.
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).parent))
from common import write_result
from tracker_online import PIPELINE

ROOT = Path(__file__).resolve().parents[1]
FIELD_SETS = (("product", "component"), ("product", "component", "priority"), ("product", "component", "severity"),
              ("product", "component", "priority", "severity"))
POOLS = (100, 200)
METRICS = ("ir_rr_at_1", "ir_rr_at_10", "ir_rr_at_20", "ir_mrr_at_10")


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline-run", type=Path, required=True, help="A tracker_system pipeline run folder.")
    parser.add_argument("--data-root", type=Path, default=ROOT / "runs" / "bench" / "tracker_online" / "data",
                        help="The imported data the run was made from (its vars.data_root).")
    args = parser.parse_args(argv)

    from lmplatform import SearchSettings
    from lmplatform.evaluation import SetMetadata, SystemScorer, build_retrieval_set, load_scorer, text_metadata
    from lmplatform.pipeline import PipelineState, SystemConfig, load_pipeline_config, resolve_references, stage_outputs
    from lmplatform.retrieval import MetadataFusionConfig

    start = time.perf_counter()
    state = PipelineState.load(args.pipeline_run)
    pipeline = load_pipeline_config(PIPELINE, [f"vars.data_root={args.data_root}"])
    cfg = SystemConfig.model_validate(resolve_references(pipeline.stage("system").system.model_dump(mode="json"),
                                                         stage_outputs(state)))
    assert cfg.metadata is not None
    select = build_retrieval_set(cfg.select)
    scorer = load_scorer(cfg.retriever, select, cfg.select, None, cfg.max_seq_length)
    keep = sorted({field for fields in FIELD_SETS for field in fields} | {"created"})
    by_text = text_metadata(cfg.metadata.corpus, cfg.metadata.fields, keep)
    fit = build_retrieval_set(cfg.metadata.fit)
    fitter = SystemScorer(scorer.encoder, fit, cfg.metadata.fit, batch_size=cfg.select.batch_size,
                          metadata=SetMetadata.of(fit, by_text))
    scorer.metadata = SetMetadata.of(select, by_text)

    def means(settings: SearchSettings) -> dict[str, float]:
        return {k: v for k, v in scorer.means(settings).items() if k in (*METRICS, "ir_queries")}

    rows: dict[str, Any] = {"dense bi-encoder": means(SearchSettings(mode="dense"))}
    for fields, pool, c in itertools.product(FIELD_SETS, POOLS, cfg.metadata.regularizations):
        fusion = fitter.fit_metadata_fusion(MetadataFusionConfig(match_fields=list(fields), pool=pool, regularization=c))
        name = f"{' + '.join(fields)}, pool {pool}, C {c:g}"
        rows[name] = means(SearchSettings(mode="metadata", metadata_fusion=fusion.to_dict()))
        print(f"[bench] {name}: " + " ".join(f"{k} {rows[name][k]:.4f}" for k in METRICS), flush=True)
    queries, misses = select.counts["queries"], select.counts["queries_without_earlier_relevant"]
    fused = [row for name, row in rows.items() if name != "dense bi-encoder"]
    write_result("tracker_fusion_fields", {
        "pipeline_run": args.pipeline_run.name, "protocol": "online, 365 days", "queries": "dev_select", "rows": rows,
        "spread": {m: {"min": min(r[m] for r in fused), "max": max(r[m] for r in fused)} for m in METRICS},
        "ceiling": {"queries": queries, "with_an_earlier_duplicate_in_the_window": queries - misses,
                    "rr_at_k": (queries - misses) / queries},
        "seconds": time.perf_counter() - start,
    })


if __name__ == "__main__":
    main()
