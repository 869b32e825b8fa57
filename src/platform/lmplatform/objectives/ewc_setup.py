"""Wiring of an `ewc:` config block: the Fisher job on the driver side, the penalty on each worker.

Any objective gets EWC the same way: `run_training` calls `check_fisher_anchor`
before anything starts, then `prepare_ewc` (computes and logs the Fisher once when
`ewc.fisher_from` is set), and the worker calls `attach_ewc` after `build_recipe`,
which appends an `EWCPenalty` to the recipe's regularizers.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import torch
from torch import nn

from lmplatform.config.loader import ConfigError
from lmplatform.config.schema import DataConfig, EWCConfig
from lmplatform.data.sampling import sample_texts
from lmplatform.models.quiet import quiet_transformers
from lmplatform.models.resolve import resolve_model_path
from lmplatform.objectives.ewc import (
    FISHER_FILE,
    EWCPenalty,
    FisherDiagonal,
    MatchReport,
    MLMFisherLoss,
    canonical_parameter_names,
)
from lmplatform.objectives.run_config import RunConfig


def untrained_head_error(anchor: str, head: list[str], field: str) -> str:
    """Why a Fisher through this model's MLM head is refused, and what to set instead."""
    return (
        f"{field} = {anchor!r} has no trained MLM head ({len(head)} head tensors, e.g. {head[0]}, would be "
        f"initialised at random). ewc.fisher_from computes the Fisher diagonal from the MLM loss, whose gradients "
        f"pass through that head: through a random head F_i measures a random projection, not what the backbone "
        f"learnt. Set ewc.anchor_model to an MLM-trained model of the same backbone (e.g. "
        f"models:/lmplatform-mlm@champion, or the model folder of an `lmp train --config configs/mlm.yaml` run), "
        f"or give ewc.fisher_path a Fisher computed with one."
    )


def check_fisher_anchor(cfg: RunConfig) -> None:
    """Refuse, before the Fisher job or any worker starts, a Fisher that would go through an untrained MLM head.

    The model whose Fisher `fisher_from` computes is `ewc.anchor_model`, or `model.name_or_path` when unset.
    A `fisher_path` Fisher was computed elsewhere and is not checked here.
    """
    from lmplatform.models.masked_lm import untrained_mlm_head

    ewc = cfg.ewc
    if ewc is None or ewc.fisher_from is None:
        return
    anchor = ewc.anchor_model or cfg.model.name_or_path
    field = "ewc.anchor_model" if ewc.anchor_model else "ewc.anchor_model (unset, so model.name_or_path)"
    path = resolve_model_path(anchor)  # a missing model or registry entry fails here with its own message
    try:
        head = untrained_mlm_head(path)
    except (ValueError, KeyError) as exc:  # an architecture with no masked-LM class
        raise ConfigError(f"{field} = {anchor!r} cannot be loaded as a masked language model for the Fisher: {exc}") from exc
    if head:
        raise ConfigError(untrained_head_error(anchor, head, field))


def compute_fisher_file(
    model_path: str, data: DataConfig, out_path: str, samples: int, batch_size: int = 1, seed: int = 1234,
    max_seq_length: int = 128, mask_probability: float = 0.15, threads: int = 1,
) -> dict[str, Any]:
    """Compute the MLM Fisher diagonal of `model_path` on `samples` train documents of `data`; save it."""
    from lmplatform.models.encoder import load_tokenizer
    from lmplatform.models.masked_lm import MaskedLanguageModel
    from lmplatform.objectives.masking import DynamicMasker
    from lmplatform.train.collate import TextCollator

    torch.set_num_threads(threads)
    path = resolve_model_path(model_path)
    tokenizer = load_tokenizer(path)
    model = MaskedLanguageModel.from_pretrained(path)
    if model.untrained_head:
        raise ValueError(untrained_head_error(model_path, list(model.untrained_head), "the Fisher's model"))
    texts = sample_texts(data, samples, seed)
    if not texts:
        raise ValueError(f"ewc.fisher_from: no training documents in {', '.join(data.train_paths)}")
    collate = TextCollator(tokenizer, max_seq_length)
    batches = (collate.encode(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size))
    loss = MLMFisherLoss(DynamicMasker(tokenizer, mask_probability=mask_probability), seed)
    fisher = FisherDiagonal.compute(
        model, batches, loss, metadata={"loss": "mlm", "source_model": str(model_path), "data": list(data.train_paths),
                                        "requested_samples": samples, "batch_size": batch_size, "seed": seed},
    )
    fisher.save(out_path)
    return fisher.metadata


def prepare_ewc(cfg: RunConfig, tracker: Any, run_dir: Path) -> RunConfig:
    """Driver side: when the Fisher must be computed, do it once in a Ray task, log it, and point the config at it."""
    ewc = cfg.ewc
    if ewc is None:
        return cfg
    if ewc.anchor_model and Path(ewc.anchor_model).expanduser().is_dir():  # workers run in their own directories
        ewc = ewc.model_copy(update={"anchor_model": str(Path(ewc.anchor_model).expanduser().resolve())})
        cfg = cfg.model_copy(update={"ewc": ewc})
    if ewc.fisher_from is None:
        FisherDiagonal.load(ewc.fisher_path, tracker.tracking_uri)  # a missing or bad file fails now, not in a worker
        tracker.set_tags({"lmp.ewc.fisher": ewc.fisher_path})
        local = Path(ewc.fisher_path).expanduser()
        if local.is_file():  # workers run in their own working directories
            return cfg.model_copy(update={"ewc": ewc.model_copy(update={"fisher_path": str(local.resolve())})})
        return cfg
    out = run_dir / FISHER_FILE
    if out.is_file():  # a resumed run reuses the Fisher its first attempt computed
        return cfg.model_copy(update={"ewc": ewc.model_copy(update={"fisher_path": str(out), "fisher_from": None})})
    import ray

    anchor = ewc.anchor_model or cfg.model.name_or_path
    threads = max(1, math.ceil(cfg.scaling.cpus_per_worker))
    resources: dict[str, Any] = {"num_cpus": cfg.scaling.cpus_per_worker}
    if cfg.scaling.use_gpu:
        resources["num_gpus"] = cfg.scaling.gpus_per_worker
    print(f"[lmp] ewc: computing the Fisher diagonal of {anchor} on {ewc.samples} documents "
          f"of {', '.join(ewc.fisher_from.train_paths)}", flush=True)
    task = ray.remote(**resources)(compute_fisher_file)
    meta = ray.get(task.remote(anchor, ewc.fisher_from, str(out), ewc.samples, ewc.batch_size, ewc.seed,
                               cfg.model.max_seq_length, 0.15, threads))
    fisher = FisherDiagonal.load(out)
    uri = fisher.log_to_mlflow(tracker, out)
    tracker.log_metrics({"ewc/fisher_gradients": meta["gradients"], "ewc/fisher_examples": meta["examples"]}, step=0)
    tracker.set_tags({"lmp.ewc.fisher": uri})
    print(f"[lmp] ewc: Fisher from {meta['gradients']} gradients saved to {out} and logged as {uri}", flush=True)
    return cfg.model_copy(update={"ewc": ewc.model_copy(update={"fisher_path": str(out), "fisher_from": None})})


def load_anchor_parameters(model_path: str) -> dict[str, torch.Tensor]:
    """θ* by canonical name from a model folder; head tensors the folder does not hold are left out."""
    from transformers import AutoModel, AutoModelForMaskedLM

    path = resolve_model_path(model_path)
    with quiet_transformers():
        try:
            model, info = AutoModelForMaskedLM.from_pretrained(str(path), output_loading_info=True)
        except (ValueError, KeyError):
            model, info = AutoModel.from_pretrained(str(path), output_loading_info=True)
    missing = set(info.get("missing_keys", ()))
    names = canonical_parameter_names(model)
    return {names[n]: p.detach().clone() for n, p in model.named_parameters() if n not in missing}


def snapshot_parameters(model: nn.Module) -> dict[str, torch.Tensor]:
    names = canonical_parameter_names(model)
    return {names[n]: p.detach().clone() for n, p in model.named_parameters()}


def build_penalty(cfg: RunConfig, model: nn.Module, tracking_uri: Optional[str] = None) -> EWCPenalty:
    ewc: EWCConfig = cfg.ewc  # type: ignore[assignment]
    if ewc.fisher_path is None:
        raise ValueError("ewc.fisher_path is not set: run_training computes it from ewc.fisher_from before the workers start")
    fisher = FisherDiagonal.load(ewc.fisher_path, tracking_uri)
    # Default θ*: the model this run starts from, i.e. the recipe's model before any step.
    anchor = load_anchor_parameters(ewc.anchor_model) if ewc.anchor_model else snapshot_parameters(model)
    return EWCPenalty(model, fisher, anchor, ewc.lambda_)


def attach_ewc(cfg: RunConfig, recipe: Any, tracking_uri: Optional[str] = None) -> Optional[MatchReport]:
    """Append the EWC penalty to `recipe.regularizers` when the config has an `ewc:` block."""
    if cfg.ewc is None:
        return None
    penalty = build_penalty(cfg, recipe.model, tracking_uri)
    recipe.regularizers.append(penalty)
    return penalty.report
