"""The ``gpt`` demo: a small decoder-only transformer trained on random tokens.

Next-token prediction on uniformly random sequences has nothing to learn beyond the unigram
distribution (the loss settles near ln(vocab)); that is fine for a performance demo, whose
point is the step's shape: embedding, attention and MLP matmuls, a large LM-head softmax, and
AdamW. On a GPU this is the territory of AMP, torch.compile and the fused optimizer (knobs).
Tokens are made once in memory from the seed; nothing is downloaded.

The dataset is a top-level picklable class, because DataLoader workers are started with
``spawn`` on every OS, as Windows has it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from gpuwatch.runner.workloads import Log
from gpuwatch.runner.workloads.dataset_workload import DatasetWorkload

#: Naive baseline. Sized so a step takes tens of ms on a 2-core CPU (measured in the notes).
#: The other knobs start at ``knobs.NAIVE_DEFAULTS``.
DEFAULTS: dict[str, Any] = {
    "batch_size": 8,
    "vocab": 2048,
    "context": 64,
    "d_model": 128,
    "n_heads": 4,
    "n_layers": 2,
    "dataset_sequences": 1024,
    "epoch_samples": 8192,  # 1024 steps of 8: see dataset_workload
    "lr": 3e-4,
}


class TokenDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Rows of one token tensor; an item is (input, target shifted by one)."""

    def __init__(self, tokens: torch.Tensor) -> None:
        self.tokens = tokens  # (N, context + 1) int64

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        row = self.tokens[index]
        return row[:-1], row[1:]


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then a 4× MLP."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.norm1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=-1)
        heads = (batch, seq, self.n_heads, width // self.n_heads)
        q, k, v = (t.view(heads).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, seq, width))
        return x + self.mlp(self.norm2(x))


class TinyGpt(nn.Module):
    """Token + learned position embeddings, ``n_layers`` blocks, final norm, LM head."""

    def __init__(self, vocab: int, context: int, d_model: int, n_heads: int, n_layers: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(context, d_model)
        self.blocks = nn.Sequential(*(Block(d_model, n_heads) for _ in range(n_layers)))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tokens(idx) + self.positions(positions)
        return self.head(self.norm(self.blocks(x)))


class GptWorkload(DatasetWorkload):
    """Language-model training on random tokens; compute-heavy rather than input-bound."""

    name = "gpt"
    defaults = DEFAULTS
    size_parameter = "dataset_sequences"

    def __init__(
        self, *, seed: int, torch_threads: int, dataset_sequences: int | None = None
    ) -> None:
        super().__init__(seed=seed, torch_threads=torch_threads)
        if dataset_sequences is not None:
            self.config["dataset_sequences"] = dataset_sequences
        self._tokens: torch.Tensor | None = None

    def prepare(self, log: Log) -> None:
        count, context = self.config["dataset_sequences"], self.config["context"]
        log(f"building gpt dataset: {count} random sequences of {context} tokens")
        generator = torch.Generator().manual_seed(self.seed)
        self._tokens = torch.randint(
            self.config["vocab"], (count, context + 1), generator=generator
        )

    def dataset(self, config: dict[str, Any]) -> TokenDataset:
        if self._tokens is None:
            raise RuntimeError("GptWorkload.prepare() must run before the dataset is used")
        return TokenDataset(self._tokens)

    def build_model(self, device: torch.device) -> nn.Module:
        torch.manual_seed(self.seed)
        c = self.config
        model = TinyGpt(c["vocab"], c["context"], c["d_model"], c["n_heads"], c["n_layers"])
        return model.to(device).train()

    def optimizer_class(self) -> type[torch.optim.Optimizer]:
        return torch.optim.AdamW

    def build_optimizer(
        self, model: nn.Module, *, foreach: bool | None = None, fused: bool | None = None
    ) -> torch.optim.Optimizer:
        return torch.optim.AdamW(
            model.parameters(), lr=self.config["lr"], foreach=foreach, fused=fused
        )

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        """Next-token cross-entropy; samples/s counts sequences of ``context`` tokens."""
        inputs, targets = batch
        logits = model(inputs)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


WORKLOAD = GptWorkload
