"""`make demo`: domain-adapt the packaged MiniLM on the shipped trouble reports, then serve it."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from rich.console import Console
from rich.table import Table

from lmplatform.config.loader import load_run_config
from lmplatform.runtime import project_root

DEMO_CONFIG = Path("configs/demo_mlm.yaml")
DEMO_REPORTS = Path("data/demo/reports.jsonl")


def run_demo(data: Optional[Path] = None, overrides: list[str] = (), serve: bool = True) -> dict[str, float]:  # type: ignore[assignment]
    from lmplatform.train.run import run_training

    config = project_root() / DEMO_CONFIG
    extra = [f"data.train_paths={data}"] if data else []
    cfg = load_run_config(config, [*extra, *overrides])
    result = run_training(cfg)
    metrics = result.metrics
    table = Table(title="Held-out masked-LM loss (same masks before and after)")
    table.add_column("metric")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    for name in ("val_mlm_loss", "val_mlm_accuracy", "val_pseudo_perplexity"):
        if name in metrics:
            table.add_row(name[4:], f"{metrics[name + '_initial']:.4f}", f"{metrics[name]:.4f}")
    console = Console()
    console.print(table)
    console.print(f"model: {result.model_dir}")
    console.print(f"MLflow run {result.mlflow_run_id}; browse it with:")
    console.print(f"  mlflow ui --backend-store-uri {result.tracking_uri}", soft_wrap=True)
    if serve:
        from lmplatform.serving.demo import serve_and_query

        # The adapted encoder behind the HTTP service, searching the shipped reports with real queries.
        serve_and_query(str(result.model_dir), project_root() / DEMO_REPORTS, tracking_uri=result.tracking_uri)
    return metrics
