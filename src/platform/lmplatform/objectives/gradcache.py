"""Cached InfoNCE (GradCache; Gao et al., 2021, "Scaling Deep Contrastive Learning Batch Size under
Memory Limited Setup"): the loss and gradients of InfoNCE over a large batch with the activation memory
of a small one.

InfoNCE couples every text of the batch, but its gradient reaches the encoder's parameters θ only
through the embeddings: dL/dθ = Σ_i ∂L/∂e_i · ∂e_i/∂θ. So
1. embed the batch in chunks of `mini_batch_size` texts without autograd (no activations kept);
2. compute the loss on those embeddings, and its gradient g_i = ∂L/∂e_i and ∂L/∂τ
   (`info_nce_gradients`; with several workers through the gather, as plain InfoNCE);
3. embed each chunk again with autograd and backpropagate its rows of g, one chunk at a time.

Step 3 runs inside the caller's `backward()`: the returned loss carries a hook that receives the
gradient the caller sends into it (1/grad_accum_steps, times the fp16 loss scale) and scales g by it.
So the training loop treats a cached loss like any other. Every worker must send the same factor (the
loop's are the same everywhere): a worker's g already holds what the other workers' losses sent back
through the gather in step 2, so it is scaled by this worker's factor only.

Each chunk's second pass replays the random state of its first (`RandContext`, as in sentence-transformers'
CachedMultipleNegativesRankingLoss): dropout drops the same units, and the gradients belong to the
embeddings the loss saw. The second pass runs under the autocast the first one ran under, since backward
runs outside the loop's autocast.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import torch

from lmplatform.objectives.infonce import InfoNCEOutput, info_nce

Inputs = dict[str, torch.Tensor]  # the encoder's keyword arguments, one row per text
Encode = Callable[..., torch.Tensor]  # encode(**inputs) -> [rows, dim]


class RandContext:
    """The torch generators a forward pass on `device` draws from (CPU, and the CUDA device's), captured
    now; `replay()` runs a block from that state and restores the generators afterwards."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cpu_state = torch.get_rng_state()
        self.cuda_state = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    @contextlib.contextmanager
    def replay(self) -> Iterator[None]:
        with torch.random.fork_rng(devices=[self.device] if self.cuda_state is not None else []):
            torch.set_rng_state(self.cpu_state)
            if self.cuda_state is not None:
                torch.cuda.set_rng_state(self.cuda_state, self.device)
            yield


@dataclass(frozen=True)
class AutocastState:
    """The autocast a block runs under, to run another block (a recomputation) under the same."""

    device_type: str
    enabled: bool
    dtype: torch.dtype

    @classmethod
    def current(cls, device_type: str) -> "AutocastState":
        return cls(device_type, torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type))

    def restore(self) -> torch.autocast:
        return torch.autocast(self.device_type, dtype=self.dtype, enabled=self.enabled)


@dataclass
class EmbeddedChunks:
    """One kind of text (queries, documents, hard negatives) embedded chunk by chunk without autograd,
    with what embedding a chunk again takes: its inputs, its random state and the autocast."""

    chunks: list[Inputs]
    states: list[RandContext]
    autocast: AutocastState
    embeddings: Optional[torch.Tensor]  # [rows, dim] float32, no history; None for no rows

    @classmethod
    def embed(cls, encode: Encode, inputs: Inputs, mini_batch_size: int) -> "EmbeddedChunks":
        rows = next(iter(inputs.values())).shape[0]
        device = next(iter(inputs.values())).device
        chunks = [{k: v[start:start + mini_batch_size] for k, v in inputs.items()} for start in range(0, rows, mini_batch_size)]
        states, pieces = [], []
        with torch.no_grad():
            for chunk in chunks:
                states.append(RandContext(device))
                pieces.append(encode(**chunk).float())
        embeddings = torch.cat(pieces) if pieces else None
        return cls(chunks, states, AutocastState.current(device.type), embeddings)

    def backward(self, encode: Encode, gradient: torch.Tensor) -> None:
        """Embed each chunk again, with autograd and the first pass's random state, and backpropagate its rows
        of `gradient` ([rows, dim], ∂loss/∂embeddings) into the encoder's parameters."""
        start = 0
        for chunk, state in zip(self.chunks, self.states):
            # enable_grad: called from a hook inside backward, where autograd does not record
            with state.replay(), self.autocast.restore(), torch.enable_grad():
                embeddings = encode(**chunk)
            rows = embeddings.shape[0]
            embeddings.float().backward(gradient[start:start + rows])
            start += rows


@dataclass
class InfoNCEGradients:
    """∂L/∂ each input of `info_nce_gradients`, shaped as the input; temperature is None unless it required grad."""

    queries: torch.Tensor
    keys: torch.Tensor
    hard_negatives: Optional[torch.Tensor]
    temperature: Optional[torch.Tensor]


def info_nce_gradients(
    queries: torch.Tensor,
    keys: torch.Tensor,
    temperature: torch.Tensor | float,
    symmetric: bool = False,
    hard_negatives: Optional[torch.Tensor] = None,
    gather: bool = True,
) -> tuple[InfoNCEOutput, InfoNCEGradients]:
    """InfoNCE (`info_nce`, same arguments) on embeddings without history, and its gradient with respect
    to each embedding and the temperature.

    With q̂ = q/|q|, the candidates ĉ = the (gathered) keys then the (gathered) hard negatives, and
    label(i) = this worker's offset + i:
        L = mean_i [ -q̂_i·ĉ_label(i)/τ + log Σ_j exp(q̂_i·ĉ_j/τ) ]   (averaged with the key→query
        direction when symmetric).
    queries, keys: [b, d]; hard_negatives: [n, d]; temperature: a scalar tensor or a float.
    Returns the detached output and ∂L/∂queries [b, d], ∂L/∂keys [b, d], ∂L/∂hard_negatives [n, d],
    ∂L/∂τ [] (only when `temperature` requires grad). Under several workers the gradients include
    what the other workers' losses send back through the gather, as plain InfoNCE's backward would
    (every worker must call this at the same point: the gather's backward is a collective).
    """
    leaves = [queries.detach().requires_grad_(), keys.detach().requires_grad_()]
    if hard_negatives is not None:
        leaves.append(hard_negatives.detach().requires_grad_())
    tau = temperature
    learns_tau = torch.is_tensor(temperature) and temperature.requires_grad
    if learns_tau:
        tau = temperature.detach().requires_grad_()
    with torch.enable_grad():
        out = info_nce(leaves[0], leaves[1], tau, symmetric=symmetric,
                       hard_negatives=leaves[2] if hard_negatives is not None else None, gather=gather)
        grads = list(torch.autograd.grad(out.loss, leaves + ([tau] if learns_tau else []), materialize_grads=True))
    detached = InfoNCEOutput(out.loss.detach(), out.query_to_key_loss.detach(),
                             None if out.key_to_query_loss is None else out.key_to_query_loss.detach(), out.accuracy)
    return detached, InfoNCEGradients(
        queries=grads[0],
        keys=grads[1],
        hard_negatives=grads[2] if hard_negatives is not None else None,
        temperature=grads[-1] if learns_tau else None,
    )


def cached_info_nce(
    encode: Encode,
    queries: Inputs,
    keys: Inputs,
    temperature: torch.Tensor | float,
    mini_batch_size: int,
    symmetric: bool = False,
    hard_negatives: Optional[Inputs] = None,
    gather: bool = True,
) -> InfoNCEOutput:
    """`info_nce` of the texts' embeddings, computed with GradCache (module doc) in chunks of `mini_batch_size`.

    queries, keys, hard_negatives: the encoder's inputs of each kind of text (hard negatives may have no rows:
    the loss then has an empty negatives tensor, so every worker still enters the same collectives).
    The returned loss has InfoNCE's value; its backward puts the gradient of InfoNCE into the encoder's
    parameters and into `temperature`, scaled by the gradient the caller sends into the loss.
    """
    texts = [EmbeddedChunks.embed(encode, queries, mini_batch_size), EmbeddedChunks.embed(encode, keys, mini_batch_size)]
    if hard_negatives is not None:
        texts.append(EmbeddedChunks.embed(encode, hard_negatives, mini_batch_size))
    embeddings = [text.embeddings for text in texts]
    if len(texts) == 3 and embeddings[2] is None:  # no hard negative in this batch
        embeddings[2] = embeddings[1].new_zeros((0, embeddings[1].shape[1]))
    out, grads = info_nce_gradients(embeddings[0], embeddings[1], temperature, symmetric=symmetric,
                                    hard_negatives=embeddings[2] if len(texts) == 3 else None, gather=gather)
    per_text = [grads.queries, grads.keys, grads.hard_negatives]

    def backward_through_chunks(scale: torch.Tensor) -> None:
        for text, gradient in zip(texts, per_text):
            text.backward(encode, gradient * scale)

    # A leaf with InfoNCE's value: its hook receives the gradient sent into the loss and runs step 3.
    loss = out.loss.clone().requires_grad_()
    loss.register_hook(backward_through_chunks)
    if grads.temperature is not None:
        # Adds 0 to the value and ∂L/∂τ · ∂τ/∂θ to the temperature's parameter (log τ) in backward.
        term = temperature * grads.temperature
        loss = loss + (term - term.detach())
    return InfoNCEOutput(loss, out.query_to_key_loss, out.key_to_query_loss, out.accuracy)
