"""A small decoder-only Transformer (task 3b), in the shape nanoGPT gives GPT-2's blocks.

Pre-norm blocks (LayerNorm, causal self-attention, residual; LayerNorm, GELU MLP of 4x the
width, residual), learned position embeddings, a final LayerNorm, and a decoder that shares
the token embedding's matrix. Attention is torch's `scaled_dot_product_attention` with
`is_causal`, so no mask is built and the fused kernel is used where there is one.
Initialisation as GPT-2: normal(0, 0.02), and the residual projections scaled by
1 / sqrt(2 x layers) so the residual stream's variance does not grow with depth.

Written from the GPT-2 paper's description and nanoGPT's published structure (Karpathy,
github.com/karpathy/nanoGPT), not copied. It exports to ONNX with a dynamic batch and
sequence length for the evaluator (tasks/wikitext2/export.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.heads = heads
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, dropout)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class GPT(nn.Module):
    """Token ids (batch x time, time <= block) -> logits (batch x time x vocab)."""

    def __init__(
        self, vocab: int, width: int, layers: int, heads: int, block: int, dropout: float = 0.1
    ) -> None:
        super().__init__()
        self.block = block
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(block, width)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(width, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("out.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, 0.0, 0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def decay_groups(self, weight_decay: float) -> list[dict]:
        """AdamW's groups: decay on matrices (2-D and up), none on biases, norms, positions'
        and tokens' embeddings are matrices and decay, as in nanoGPT."""
        params = [p for p in self.parameters() if p.requires_grad]
        return [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
