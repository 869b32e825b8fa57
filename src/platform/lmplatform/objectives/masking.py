"""RoBERTa-style dynamic masking, drawn afresh for every batch."""
from __future__ import annotations

from typing import Optional

import torch
from transformers import PreTrainedTokenizerBase

from lmplatform.models.masked_lm import IGNORE_INDEX


class DynamicMasker:
    """Pick `mask_probability` of the real tokens; of those, 80% -> [MASK], 10% -> random, 10% kept.

    Special tokens and padding are never picked. With whole-word masking a word's
    sub-words are picked together (by the tokenizer's word ids).
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        mask_probability: float = 0.15,
        replace_with_mask: float = 0.8,
        replace_with_random: float = 0.1,
        whole_word: bool = False,
    ):
        if tokenizer.mask_token_id is None:
            raise ValueError(f"tokenizer {type(tokenizer).__name__} has no mask token; MLM needs one")
        self.mask_token_id = int(tokenizer.mask_token_id)
        self.mask_probability = mask_probability
        self.replace_with_mask = replace_with_mask
        self.replace_with_random = replace_with_random
        self.whole_word = whole_word
        special = sorted(set(tokenizer.all_special_ids))
        self.special_ids = torch.tensor(special, dtype=torch.long)
        vocab = torch.ones(len(tokenizer), dtype=torch.bool)
        vocab[self.special_ids] = False
        self.random_ids = vocab.nonzero().squeeze(1)
        self._special_ids_by_device: dict[str, torch.Tensor] = {}

    def maskable(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        # A comparison with each special id, not torch.isin: on CUDA, isin of a large tensor sorts through
        # torch.unique, whose output size is read back from the device.
        allowed = ~(input_ids.unsqueeze(-1) == self._special_ids_on(input_ids.device)).any(-1)
        if attention_mask is not None:
            allowed &= attention_mask.bool()
        return allowed

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        word_ids: Optional[torch.Tensor] = None,
        generator: Optional[torch.Generator] = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (masked inputs, labels); labels are IGNORE_INDEX where nothing is predicted.

        Every draw is made on the CPU: from `generator` when given (evaluation's fixed masks), else from
        torch's global CPU generator, which each checkpoint saves per rank, so a resumed run masks as the
        uninterrupted one would, on a GPU too. Nothing is read back from the device (no branch on a tensor's
        value, no count sizing a draw) and the draws reach a GPU from pinned memory without waiting for it,
        so masking does not stall a training step: each call draws the same shapes whatever the batch holds.
        """
        device = input_ids.device
        allowed = self.maskable(input_ids, attention_mask)
        if self.whole_word and word_ids is not None:
            # One draw per (row, word id), word ids being below the row length; every sub-word of a picked
            # word is selected.
            word_draws = _to_device(torch.rand(word_ids.shape, generator=generator, device="cpu"), device)
            draws = torch.gather(word_draws, 1, word_ids.clamp(min=0))
            allowed &= word_ids >= 0
        else:
            draws = _to_device(torch.rand(input_ids.shape, generator=generator, device="cpu"), device)
        selected = (draws < self.mask_probability) & allowed
        # A tiny batch can draw nothing: then the allowed token of the lowest draw (a uniform pick among the
        # allowed tokens) is predicted, so the loss is defined. Branch-free, as deciding would read the device.
        lowest = draws.masked_fill(~allowed, 2.0).flatten().argmin()  # draws are below 1
        fallback = torch.zeros_like(selected).flatten().scatter_(0, lowest[None], True).view_as(selected) & allowed
        selected |= fallback & ~selected.any()

        labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
        roll = _to_device(torch.rand(input_ids.shape, generator=generator, device="cpu"), device)
        to_mask = selected & (roll < self.replace_with_mask)
        to_random = selected & (roll >= self.replace_with_mask) & (roll < self.replace_with_mask + self.replace_with_random)
        # A random id drawn for every position (only the to_random ones are used): the draw's size does not
        # depend on how many were picked, which only the device knows.
        random_ids = self.random_ids[torch.randint(len(self.random_ids), input_ids.shape, generator=generator)]
        inputs = input_ids.masked_fill(to_mask, self.mask_token_id)
        inputs = torch.where(to_random, _to_device(random_ids, device), inputs)
        return inputs, labels

    def _special_ids_on(self, device: torch.device) -> torch.Tensor:
        key = str(device)
        if key not in self._special_ids_by_device:
            self._special_ids_by_device[key] = _to_device(self.special_ids, device)
        return self._special_ids_by_device[key]


def _to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device` without waiting for the device: PyTorch synchronizes after a CUDA copy from
    pageable memory, whereas one from pinned memory is only queued (the pinned block is kept until it ran)."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)
