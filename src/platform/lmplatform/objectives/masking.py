"""RoBERTa-style dynamic masking, drawn afresh for every batch."""
from __future__ import annotations

from typing import Optional

import torch
from transformers import PreTrainedTokenizerBase

IGNORE_INDEX = -100


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

    def maskable(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        allowed = ~torch.isin(input_ids, self.special_ids.to(input_ids.device))
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
        uninterrupted one would, on a GPU too.
        """
        device = input_ids.device
        allowed = self.maskable(input_ids, attention_mask)
        if self.whole_word and word_ids is not None:
            selected = self._select_words(word_ids, allowed, generator)
        else:
            draws = torch.rand(input_ids.shape, generator=generator, device="cpu").to(device)
            selected = (draws < self.mask_probability) & allowed
        if not selected.any() and allowed.any():
            # A tiny batch can draw nothing; predict one token so the loss is defined.
            candidates = allowed.flatten().nonzero().squeeze(1)
            pick = candidates[torch.randint(len(candidates), (1,), generator=generator).item()]
            selected.view(-1)[pick] = True

        labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
        inputs = input_ids.clone()
        roll = torch.rand(input_ids.shape, generator=generator, device="cpu").to(device)
        to_mask = selected & (roll < self.replace_with_mask)
        to_random = selected & (roll >= self.replace_with_mask) & (roll < self.replace_with_mask + self.replace_with_random)
        inputs[to_mask] = self.mask_token_id
        n_random = int(to_random.sum())
        if n_random:
            choice = torch.randint(len(self.random_ids), (n_random,), generator=generator)
            inputs[to_random] = self.random_ids[choice].to(device)
        return inputs, labels

    def _select_words(
        self, word_ids: torch.Tensor, allowed: torch.Tensor, generator: Optional[torch.Generator]
    ) -> torch.Tensor:
        # One draw per (row, word id); every sub-word of a picked word is selected.
        n_words = int(word_ids.max().item()) + 1 if word_ids.numel() else 0
        draws = torch.rand((word_ids.shape[0], max(n_words, 1)), generator=generator) < self.mask_probability
        draws = draws.to(word_ids.device)
        safe_ids = word_ids.clamp(min=0)
        return torch.gather(draws, 1, safe_ids) & (word_ids >= 0) & allowed
