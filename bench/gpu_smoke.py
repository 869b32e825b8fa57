"""Every shipped single-objective config that validates, trained a few steps on one device with its validation.

The loop is driven in this process (bench/in_process.py, no Ray), so the check runs where Ray is not
installed, as on a GPU machine whose environment lacks it. Each config's rows are read as its `prepare_data` would hand them to
Ray Data, then trained for `--steps` steps with in-batch validation before and after, and corpus-level retrieval validation
where the config sets it. A config that raises is reported with its traceback and the others still run.

    python bench/gpu_smoke.py [--device cuda] [--steps 3] [--configs mlm declutr ...]

Writes bench/results/gpu_smoke.json (device, and per config: ok, validation metrics or the error).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).parent))
from common import write_result
from in_process import train_in_process

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ("mlm", "declutr", "biencoder", "cross_encoder")


def smoke(config: str, device: str, steps: int, work: Path) -> dict[str, Any]:
    from lmplatform.objectives import load_run_config

    cfg = load_run_config(ROOT / "configs" / f"{config}.yaml", overrides=[
        f"optim.max_steps={steps}", f"scaling.use_gpu={str(device == 'cuda').lower()}",
        "checkpoint.every_n_steps=1000000", "tracking.log_every_n_steps=1"])
    run = train_in_process(cfg, device, work / config)
    return {"ok": True, "seconds": round(run.seconds, 1), "train_rows": run.train_rows,
            "validation_rows": run.validation_rows, "initial": run.initial, "final": run.final}


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), help="names under configs/")
    args = parser.parse_args(argv)

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="lmp-gpu-smoke-") as tmp:
        for config in args.configs:
            try:
                results[config] = smoke(config, device, args.steps, Path(tmp))
            except Exception as error:  # one config's failure is a result; the rest still run
                results[config] = {"ok": False, "error": repr(error), "traceback": traceback.format_exc()}
                print(results[config]["traceback"], flush=True)
            print(f"[smoke] {config}: {'ok' if results[config]['ok'] else results[config]['error']}", flush=True)
    write_result("gpu_smoke", {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "steps": args.steps, "results": results,
    })


if __name__ == "__main__":
    main()
