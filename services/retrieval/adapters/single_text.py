"""One text through a sentence-transformers model without `encode`'s per-call machinery.

For one short query `SentenceTransformer.encode` runs a good deal of Python around the forward pass:
input and modality checks, a length sort, processor keyword merging, the batch loop, tensor -> numpy ->
list. This path calls the model's own tokenizer (the `tokenizers` object behind it) and transformer
directly, then mean-pools and normalises: the same arithmetic, for a model made of Transformer, mean
Pooling and optionally Normalize. A single text has no padding, so no attention mask is needed.
It is used only for such models, and only after a check at load time that it gives encode's vectors.
"""
from __future__ import annotations

import logging
from typing import Any

import torch

log = logging.getLogger("cairn.retrieval.embedder")

# Cosine against encode's vector that the check at load time demands (float32 arithmetic in another order).
MIN_COSINE = 0.99999
_CHECK_TEXTS = ("What is the TTL of a session?", "retrieval " * 400)  # the second one is truncated


class SingleTextEncoder:
    """`encoder(text)`: the unit vector `model.encode([text], normalize_embeddings=True)` gives."""

    def __init__(self, model: Any) -> None:
        transformer = model[0]
        self._model = transformer.model
        tokenizer = transformer.tokenizer.backend_tokenizer.__class__.from_str(transformer.tokenizer.backend_tokenizer.to_str())
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=int(model.max_seq_length))
        self._tokenizer = tokenizer  # a copy: a fast tokenizer must not be shared across threads
        self._type_ids = "token_type_ids" in transformer.tokenizer.model_input_names

    @classmethod
    def for_model(cls, model: Any) -> SingleTextEncoder | None:
        """The fast path for `model`, or None when its modules are not Transformer + mean Pooling
        (+ Normalize) or the path does not reproduce encode's vectors."""
        names = [type(module).__name__ for module in model]
        pooling = model[1] if len(names) > 1 else None
        if names not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]) or (
            getattr(pooling, "pooling_mode", None) != "mean" or model.prompts.get(model.default_prompt_name or "", "")
        ):
            log.info("single-text fast path not used", extra={"modules": names})
            return None
        try:
            encoder = cls(model)
            expected = model.encode(
                list(_CHECK_TEXTS), normalize_embeddings=True, convert_to_tensor=True, show_progress_bar=False
            )
            worst = min(float(torch.dot(encoder.tensor(text), row)) for text, row in zip(_CHECK_TEXTS, expected))
        except Exception as exc:  # an unexpected tokenizer or model class: keep encode
            log.warning("single-text fast path failed its check", extra={"error": f"{type(exc).__name__}: {exc}"})
            return None
        if worst < MIN_COSINE:
            log.warning("single-text fast path differs from encode", extra={"cosine": worst})
            return None
        return encoder

    @torch.inference_mode()
    def tensor(self, text: str) -> torch.Tensor:
        encoding = self._tokenizer.encode(text)
        inputs = {"input_ids": torch.tensor([encoding.ids])}
        if self._type_ids:
            inputs["token_type_ids"] = torch.tensor([encoding.type_ids])
        hidden = self._model(**inputs, return_dict=True).last_hidden_state[0]
        return torch.nn.functional.normalize(hidden.mean(dim=0), dim=0)

    def __call__(self, text: str) -> list[float]:
        return self.tensor(text).tolist()
