"""Elastic weight consolidation (Kirkpatrick et al., 2017).

`FisherDiagonal` is the diagonal of the empirical Fisher information of an
earlier model θ* on its own data: F_i = (1/K) Σ_k (∂L_k/∂θ_i)², the mean over
K gradient evaluations (one per example by default) of a chosen loss (MLM).
`EWCPenalty` adds λ/2 · Σ_i F_i (θ_i − θ*_i)² to a later stage's loss, so
parameters that mattered for the earlier data move less.

Parameters are matched by their name relative to the transformer backbone, so
a Fisher computed on `MaskedLanguageModel` (`mlm.bert.encoder...`) applies to an
`Encoder` (`backbone.encoder...`) or a `CrossEncoder` (`model.bert.encoder...`).
Parameters with no match (new heads) are not penalised.
"""
from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import torch
import torch.distributed as dist
from torch import nn

from lmplatform.runtime import resolve_tracking_uri

logger = logging.getLogger(__name__)

FISHER_FILE = "fisher.safetensors"
FISHER_ARTIFACT_DIR = "ewc"
Batch = dict[str, torch.Tensor]
LossFn = Callable[[nn.Module, Batch], torch.Tensor]


# -- parameter names ----------------------------------------------------------
def _is_backbone(module: nn.Module) -> bool:
    from transformers import PreTrainedModel

    return isinstance(module, PreTrainedModel) and module.base_model is module


def _is_hf_wrapper(module: nn.Module) -> bool:
    from transformers import PreTrainedModel

    return isinstance(module, PreTrainedModel) and module.base_model is not module


def canonical_parameter_names(model: nn.Module) -> dict[str, str]:
    """{name in `model`: name that is stable across wrapper classes}.

    Inside the transformer backbone (the module whose `base_model` is itself) the
    name is relative to it: `encoder.layer.0.attention.self.query.weight`. Outside
    it (heads) the name is relative to the outermost Hugging Face model, prefixed
    `head:` (e.g. `head:cls.predictions.transform.dense.weight`), so a head only
    matches the same head of another wrapper.
    """
    backbones = [(name, m) for name, m in model.named_modules() if _is_backbone(m)]
    wrappers = [(name, m) for name, m in model.named_modules() if _is_hf_wrapper(m)]
    out: dict[str, str] = {}
    for name, _ in model.named_parameters():
        out[name] = _relative(name, backbones, wrappers)
    return out


def _relative(name: str, backbones: list[tuple[str, nn.Module]], wrappers: list[tuple[str, nn.Module]]) -> str:
    for prefix, _ in backbones:
        if prefix == "" or name.startswith(prefix + "."):
            return name[len(prefix) + 1 :] if prefix else name
    for prefix, _ in wrappers:
        if prefix == "" or name.startswith(prefix + "."):
            return "head:" + (name[len(prefix) + 1 :] if prefix else name)
    return "head:" + name


# -- the Fisher diagonal ------------------------------------------------------
@dataclass
class FisherDiagonal:
    """Per-parameter Fisher values keyed by canonical name, plus how they were made."""

    values: dict[str, torch.Tensor]
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def compute(
        cls,
        model: nn.Module,
        batches: Iterable[Batch],
        loss_fn: LossFn,
        max_batches: Optional[int] = None,
        metadata: Optional[dict[str, Any]] = None,
        progress_every: int = 500,
    ) -> "FisherDiagonal":
        """Mean over batches of the squared gradient of `loss_fn(model, batch)`.

        Each batch is one gradient evaluation; batches of one example give the
        empirical Fisher. Under torch.distributed, every worker passes its own
        batches and the sums of squares and the counts are all-reduced, so the
        result is the mean over all workers' batches.
        """
        params = {name: p for name, p in model.named_parameters() if p.requires_grad}
        names = canonical_parameter_names(model)
        sums = {name: torch.zeros_like(p, dtype=torch.float32) for name, p in params.items()}
        was_training = model.training
        model.eval()  # no dropout: the Fisher of the model as it will be used
        count = examples = 0
        start = time.perf_counter()
        for batch in batches:
            if max_batches is not None and count >= max_batches:
                break
            model.zero_grad(set_to_none=True)
            loss = loss_fn(model, batch)
            loss.backward()
            with torch.no_grad():
                for name, p in params.items():
                    if p.grad is not None:
                        sums[name] += p.grad.detach().float() ** 2
            count += 1
            examples += int(batch["input_ids"].shape[0])
            if progress_every and count % progress_every == 0:
                rate = count / max(time.perf_counter() - start, 1e-9)
                eta = (max_batches - count) / rate if max_batches else float("nan")
                print(f"[lmp] fisher: {count}/{max_batches or '?'} gradients, {rate:.1f}/s, ETA {eta:.0f}s", flush=True)
        model.zero_grad(set_to_none=True)
        model.train(was_training)
        total = torch.tensor([float(count), float(examples)], dtype=torch.float64)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            device = next(iter(sums.values())).device
            for tensor in sums.values():
                dist.all_reduce(tensor)
            total = total.to(device)
            dist.all_reduce(total)
        count, examples = int(total[0]), int(total[1])
        if count == 0:
            raise ValueError("no batches to compute the Fisher diagonal from")
        values = {names[name]: (s / count).cpu() for name, s in sums.items()}
        meta = {"gradients": count, "examples": examples, "parameters": sum(v.numel() for v in values.values()),
                "tensors": len(values), **(metadata or {})}
        return cls(values, meta)

    def save(self, path: str | Path) -> Path:
        from safetensors.torch import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.values.items()}, str(path),
                  metadata={"lmplatform": json.dumps(self.metadata)})
        return path

    @classmethod
    def load(cls, path_or_uri: str | Path, tracking_uri: Optional[str] = None) -> "FisherDiagonal":
        """Load a local .safetensors file, or download it from an MLflow URI (runs:/..., mlflow-artifacts:/...)."""
        from safetensors import safe_open

        path = resolve_fisher_path(str(path_or_uri), tracking_uri)
        values: dict[str, torch.Tensor] = {}
        with safe_open(str(path), framework="pt") as handle:
            meta = json.loads((handle.metadata() or {}).get("lmplatform", "{}"))
            for key in handle.keys():
                values[key] = handle.get_tensor(key)
        return cls(values, meta)

    def log_to_mlflow(self, tracker: Any, local_path: Path) -> str:
        """Log the saved file under `ewc/` of the tracker's run; returns its artifact URI."""
        tracker.log_artifact(local_path, FISHER_ARTIFACT_DIR)
        tracker.log_dict(self.metadata, f"{FISHER_ARTIFACT_DIR}/fisher_metadata.json")
        return tracker.artifact_uri(f"{FISHER_ARTIFACT_DIR}/{Path(local_path).name}")


def resolve_fisher_path(path_or_uri: str, tracking_uri: Optional[str] = None) -> Path:
    local = Path(path_or_uri[len("file://"):] if path_or_uri.startswith("file://") else path_or_uri).expanduser()
    if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:/", path_or_uri) or path_or_uri.startswith("file://"):
        if not local.is_file():
            raise FileNotFoundError(f"ewc.fisher_path: no Fisher file at {local}")
        return local
    import mlflow.artifacts

    try:
        return Path(mlflow.artifacts.download_artifacts(artifact_uri=path_or_uri,
                                                        tracking_uri=resolve_tracking_uri(tracking_uri)))
    except Exception as exc:
        raise FileNotFoundError(f"ewc.fisher_path: cannot download {path_or_uri}: {exc}") from exc


class MLMFisherLoss:
    """The MLM loss with masks drawn from a fixed seed, so the Fisher is reproducible."""

    def __init__(self, masker: Any, seed: int = 1234):
        self.masker = masker
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        inputs, labels = self.masker(batch["input_ids"], batch["attention_mask"], batch.get("word_ids"), self.generator)
        return model(input_ids=inputs, attention_mask=batch["attention_mask"], labels=labels)["loss"]


# -- the penalty --------------------------------------------------------------
@dataclass
class MatchReport:
    matched_tensors: int
    matched_parameters: int
    model_tensors: int
    fisher_tensors: int
    unmatched_model: list[str]
    shape_mismatch: list[str]

    def summary(self) -> str:
        return (f"ewc: {self.matched_tensors}/{self.model_tensors} model tensors "
                f"({self.matched_parameters} parameters) matched {self.fisher_tensors} Fisher tensors; "
                f"{len(self.unmatched_model)} not penalised"
                + (f", {len(self.shape_mismatch)} shape mismatches" if self.shape_mismatch else ""))

    def metrics(self) -> dict[str, float]:
        return {"ewc/matched_tensors": float(self.matched_tensors), "ewc/matched_parameters": float(self.matched_parameters),
                "ewc/unmatched_tensors": float(len(self.unmatched_model))}


class EWCPenalty(nn.Module):
    """λ/2 · Σ_i F_i (θ_i − θ*_i)² over the parameters of `model` that the Fisher knows.

    `forward(model)` returns (penalty, {"ewc_penalty": value}); it is a
    `TrainingRecipe.regularizers` entry. F and θ* are buffers, so `.to(device)` moves them.
    """

    def __init__(self, model: nn.Module, fisher: FisherDiagonal, anchor: dict[str, torch.Tensor], lambda_: float):
        super().__init__()
        if lambda_ <= 0:
            raise ValueError(f"EWC lambda must be > 0, got {lambda_}")
        self.lambda_ = float(lambda_)
        self.param_names: list[str] = []
        unmatched, mismatched = [], []
        matched_params = 0
        params = dict(model.named_parameters())
        for name, canonical in canonical_parameter_names(model).items():
            f, theta = fisher.values.get(canonical), anchor.get(canonical)
            if f is None or theta is None:
                unmatched.append(name)
                continue
            if f.shape != params[name].shape or theta.shape != params[name].shape:
                mismatched.append(name)
                continue
            slot = len(self.param_names)
            self.register_buffer(f"fisher_{slot}", f.detach().float().clone(), persistent=False)
            self.register_buffer(f"anchor_{slot}", theta.detach().float().clone(), persistent=False)
            self.param_names.append(name)
            matched_params += f.numel()
        self.report = MatchReport(len(self.param_names), matched_params, len(params), len(fisher.values),
                                  unmatched + mismatched, mismatched)
        if not self.param_names:
            raise ValueError("EWC: no parameter of the model matches the Fisher diagonal "
                             f"(model names like {next(iter(params), '?')!r}, "
                             f"Fisher names like {next(iter(fisher.values), '?')!r})")

    @classmethod
    def from_anchor_model(cls, model: nn.Module, fisher: FisherDiagonal, anchor_model: nn.Module, lambda_: float) -> "EWCPenalty":
        names = canonical_parameter_names(anchor_model)
        anchor = {names[n]: p.detach() for n, p in anchor_model.named_parameters()}
        return cls(model, fisher, anchor, lambda_)

    def forward(self, model: nn.Module) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        params = dict(model.named_parameters())
        total = None
        for slot, name in enumerate(self.param_names):
            theta = params[name]
            term = (getattr(self, f"fisher_{slot}") * (theta.float() - getattr(self, f"anchor_{slot}")) ** 2).sum()
            total = term if total is None else total + term
        penalty = 0.5 * self.lambda_ * total
        return penalty, {"ewc_penalty": penalty.detach()}  # read by the loop at logging time
