"""The AWD-LSTM language model (Merity, Keskar, Socher, "Regularizing and Optimizing LSTM
Language Models", ICLR 2018, arXiv:1708.02182), as task 3a trains it (tasks/wikitext2/task.py).

Written from the paper's description, in today's PyTorch:

- Weight drop (DropConnect on the hidden-to-hidden matrices): each forward pass in training
  draws one dropout mask per layer over `weight_hh` and runs torch's fused LSTM with the
  dropped matrix through `torch.func.functional_call`, so the gradient reaches the one
  stored parameter and the fused kernel is kept (the reference code's trick of deleting and
  re-registering the parameter no longer works with current PyTorch's flattened weights).
- Locked (variational) dropout: one mask per sequence and unit, shared over time steps.
- Embedding dropout: whole words of the embedding matrix dropped, the rest rescaled.
- Tied weights: the decoder's matrix is the embedding's, so the last LSTM layer's output
  has the embedding's size.

`forward` returns, beside the logits, the last layer's output before and after its dropout:
the activation regularisers (AR on the dropped output, TAR on the raw one) need them.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

Hidden = list[tuple[torch.Tensor, torch.Tensor]]


def locked_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Dropout of x (time x batch x features) with one mask for all time steps."""
    if not training or p == 0.0:
        return x
    mask = x.new_empty(1, x.size(1), x.size(2)).bernoulli_(1 - p) / (1 - p)
    return x * mask


def embedding_dropout(
    embed: nn.Embedding, words: torch.Tensor, p: float, training: bool
) -> torch.Tensor:
    """Look `words` up in `embed` with whole rows of its matrix dropped (rescaled)."""
    weight = embed.weight
    if training and p > 0.0:
        mask = weight.new_empty(weight.size(0), 1).bernoulli_(1 - p) / (1 - p)
        weight = weight * mask
    return F.embedding(words, weight)


class WeightDropLSTM(nn.Module):
    """One LSTM layer whose hidden-to-hidden matrix is dropped (DropConnect) in training."""

    def __init__(self, inputs: int, hidden: int, p: float) -> None:
        super().__init__()
        self.lstm = nn.LSTM(inputs, hidden)
        self.p = p

    def forward(
        self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        if not self.training or self.p == 0.0:
            return self.lstm(x, state)
        dropped = F.dropout(self.lstm.weight_hh_l0, self.p, training=True)
        return functional_call(self.lstm, {"weight_hh_l0": dropped}, (x, state))


class AWDLSTM(nn.Module):
    """Embedding, `layers` weight-dropped LSTMs, tied decoder (see the module docstring)."""

    def __init__(
        self,
        vocab: int,
        embedding: int = 400,
        hidden: int = 1150,
        layers: int = 3,
        *,
        dropout: float = 0.4,
        dropouth: float = 0.2,
        dropouti: float = 0.65,
        dropoute: float = 0.1,
        wdrop: float = 0.5,
    ) -> None:
        super().__init__()
        self.encoder = nn.Embedding(vocab, embedding)
        sizes = [embedding] + [hidden] * (layers - 1) + [embedding]
        self.rnns = nn.ModuleList(
            WeightDropLSTM(sizes[i], sizes[i + 1], wdrop) for i in range(layers)
        )
        self.decoder = nn.Linear(embedding, vocab)
        self.decoder.weight = self.encoder.weight  # tied
        self.sizes = sizes
        self.dropout, self.dropouth, self.dropouti, self.dropoute = (
            dropout, dropouth, dropouti, dropoute,
        )  # fmt: skip
        # The reference's initialisation: embedding uniform in +-0.1, decoder bias 0.
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def init_hidden(self, batch: int) -> Hidden:
        """Zero states for `batch` columns, one (h, c) per layer."""
        w = self.encoder.weight
        return [
            (w.new_zeros(1, batch, size), w.new_zeros(1, batch, size)) for size in self.sizes[1:]
        ]

    def forward(
        self, words: torch.Tensor, hidden: Hidden
    ) -> tuple[torch.Tensor, Hidden, torch.Tensor, torch.Tensor]:
        """(logits time x batch x vocab, new states, last raw output, last dropped output)."""
        x = embedding_dropout(self.encoder, words, self.dropoute, self.training)
        x = locked_dropout(x, self.dropouti, self.training)
        new_hidden = []
        raw = x
        for i, rnn in enumerate(self.rnns):
            raw, state = rnn(x, hidden[i])
            new_hidden.append(state)
            last = i == len(self.rnns) - 1
            x = locked_dropout(raw, self.dropout if last else self.dropouth, self.training)
        return self.decoder(x), new_hidden, raw, x


def detach(hidden: Hidden) -> Hidden:
    """The states without their history (truncated back-propagation through time)."""
    return [(h.detach(), c.detach()) for h, c in hidden]
