"""The encoder-decoder Transformer of task 4 (Vaswani et al. 2017, "Attention Is All You
Need"), as the "base" model trains on WMT English-to-German.

Post-norm layers (each sub-layer's output added to its input, then layer-normalised, as in
the paper and fairseq's `transformer_wmt_en_de`, which the original mlbench's task 4b
followed), no final layer norm after either stack, sinusoidal positions (no parameters),
ReLU feed-forward. One embedding matrix serves the encoder's input, the decoder's input and
the output projection (the shared source-target vocabulary makes the three tie), scaled by
sqrt(d_model) on the way in; the output projection has no bias. torch.nn's encoder and
decoder layers are the building blocks, so the attention is torch's own kernel.

`greedy` decodes a batch: the source is encoded once, and each step runs the decoder over
the whole prefix so far (no key/value cache: the sentences of the test set are short, and
one code path for training and decoding keeps the two equal).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def sinusoids(length: int, width: int) -> torch.Tensor:
    """The paper's position encodings (length x width): sine on even, cosine on odd."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10_000.0) / width))
    out = torch.zeros(length, width)
    out[:, 0::2] = torch.sin(position * rate)
    out[:, 1::2] = torch.cos(position * rate)
    return out


class TransformerMT(nn.Module):
    """Encoder-decoder Transformer with one tied embedding; inputs are batch-first ids."""

    def __init__(
        self,
        vocab: int,
        width: int = 512,
        heads: int = 8,
        encoder_layers: int = 6,
        decoder_layers: int = 6,
        feedforward: int = 2048,
        dropout: float = 0.1,
        pad_id: int = 0,
        max_positions: int = 1024,
    ) -> None:
        super().__init__()
        self.width, self.pad_id = width, pad_id
        self.embedding = nn.Embedding(vocab, width, padding_idx=pad_id)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=width**-0.5)
        with torch.no_grad():
            self.embedding.weight[pad_id].zero_()
        self.register_buffer("positions", sinusoids(max_positions, width), persistent=False)
        self.dropout = nn.Dropout(dropout)
        layer = dict(d_model=width, nhead=heads, dim_feedforward=feedforward, dropout=dropout,
                     batch_first=True)  # fmt: skip
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(**layer), encoder_layers, enable_nested_tensor=False
        )
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer), decoder_layers)
        for name, p in self.named_parameters():  # Xavier for every matrix of the stacks
            if p.dim() > 1 and not name.startswith("embedding"):
                nn.init.xavier_uniform_(p)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embedding(ids) * math.sqrt(self.width) + self.positions[: ids.shape[1]]
        return self.dropout(x)

    def encode(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(memory, source padding mask) of a batch of source ids."""
        pad = source == self.pad_id
        return self.encoder(self._embed(source), src_key_padding_mask=pad), pad

    def decode(
        self, target_in: torch.Tensor, memory: torch.Tensor, source_pad: torch.Tensor
    ) -> torch.Tensor:
        """Logits (batch x length x vocab) of the next token after each prefix."""
        length = target_in.shape[1]
        causal = torch.ones(length, length, dtype=torch.bool, device=target_in.device).triu(1)
        h = self.decoder(
            self._embed(target_in), memory, tgt_mask=causal, tgt_is_causal=True,
            tgt_key_padding_mask=target_in == self.pad_id, memory_key_padding_mask=source_pad,
        )  # fmt: skip
        return F.linear(h, self.embedding.weight)

    def forward(self, source: torch.Tensor, target_in: torch.Tensor) -> torch.Tensor:
        memory, pad = self.encode(source)
        return self.decode(target_in, memory, pad)

    @torch.no_grad()
    def greedy(self, source: torch.Tensor, bos: int, eos: int, max_len: int) -> list[list[int]]:
        """The most likely next token at each step until EOS or `max_len` tokens, for each
        source of the batch (without BOS and EOS)."""
        memory, pad = self.encode(source)
        out = torch.full((source.shape[0], 1), bos, dtype=torch.long, device=source.device)
        done = torch.zeros(source.shape[0], dtype=torch.bool, device=source.device)
        for _ in range(max_len):
            nxt = self.decode(out, memory, pad)[:, -1].argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, self.pad_id), nxt)
            out = torch.cat([out, nxt[:, None]], dim=1)
            done |= nxt == eos
            if bool(done.all()):
                break
        result = []
        for row in out[:, 1:].tolist():
            ids = []
            for t in row:
                if t in (eos, self.pad_id):
                    break
                ids.append(t)
            result.append(ids)
        return result
