"""`model.gradient_checkpointing`: Hugging Face activation checkpointing on every transformer inside a model.

Each transformer layer keeps only its input during the forward pass and recomputes its activations
during backward. Non-reentrant checkpointing (`use_reentrant=False`) is the one torch recommends: it
works when the layer's inputs do not require grad, with nested backward passes (GradCache's) and
replays the layer's random state, so dropout matches and the gradients are unchanged.
"""
from __future__ import annotations

from torch import nn
from transformers import PreTrainedModel

CHECKPOINT_KWARGS = {"use_reentrant": False}


def enable_gradient_checkpointing(model: nn.Module) -> list[str]:
    """Turn checkpointing on in each outermost Hugging Face transformer of `model`; their names.

    Raises when `model` holds none that supports it (nothing would change: the setting must not pass silently).
    """
    enabled: list[str] = []
    for name, module in model.named_modules():  # parents come before their children
        if any(_inside(name, outer) for outer in enabled):
            continue
        if not isinstance(module, PreTrainedModel) or not module.supports_gradient_checkpointing:
            continue
        # transformers 5 renamed gradient_checkpointing_enable (deprecated, removed in 6) to
        # activation_checkpointing_enable; the releases this project allows have one or both.
        if hasattr(module, "activation_checkpointing_enable"):
            module.activation_checkpointing_enable(activation_checkpointing_kwargs=CHECKPOINT_KWARGS)
        else:
            module.gradient_checkpointing_enable(gradient_checkpointing_kwargs=CHECKPOINT_KWARGS)
        enabled.append(name)
    if not enabled:
        raise ValueError(f"model.gradient_checkpointing: {type(model).__name__} holds no Hugging Face transformer "
                         "that supports gradient checkpointing; set it to false")
    return enabled


def _inside(name: str, outer: str) -> bool:
    """Whether module `name` lies within module `outer` ('' is the root, which holds every module)."""
    return outer == "" or name.startswith(f"{outer}.")
