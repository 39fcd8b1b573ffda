"""A small Transformer encoder classifier: token embedding + learned positions, a stack of
``nn.TransformerEncoderLayer`` (batch first), mean pooling over valid tokens, a linear head."""

from __future__ import annotations

import flowserve as flow
from flowserve import nn


class TransformerClassifier(nn.Module):
    def __init__(self, vocab_size: int, num_classes: int, d_model: int = 64, nhead: int = 4, num_layers: int = 2,
                 dim_feedforward: int = 128, max_len: int = 128, dropout: float = 0.1, activation: str = "gelu",
                 norm_first: bool = True):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pos_embedding = nn.Parameter(flow.zeros(1, max_len, d_model))
        nn.init.normal_(self.pos_embedding, 0.0, 0.02)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation, batch_first=True,
                                       norm_first=norm_first) for _ in range(num_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)
        self.max_len = max_len

    def forward(self, tokens, padding_mask=None):
        """``tokens`` (N, L) int64; ``padding_mask`` (N, L) bool, True at padding."""
        length = tokens.shape[1]
        if length > self.max_len:
            raise ValueError(f"TransformerClassifier expected at most {self.max_len} tokens, got {length}")
        x = self.embedding(tokens) + self.pos_embedding[:, :length]
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=padding_mask)
        x = self.norm(x)
        if padding_mask is None:
            return self.head(x.mean(1))
        keep = (~padding_mask).to(x.dtype).unsqueeze(-1)
        return self.head((x * keep).sum(1) / keep.sum(1))


def transformer_classifier(vocab_size: int = 1000, num_classes: int = 2, d_model: int = 64, nhead: int = 4,
                           num_layers: int = 2, dim_feedforward: int = 128, max_len: int = 128,
                           dropout: float = 0.1) -> TransformerClassifier:
    """A small Transformer encoder classifier for token sequences.

    >>> import flowserve as flow
    >>> model = flow.models.transformer_classifier(vocab_size=100, num_classes=3)
    >>> model(flow.randint(0, 100, (2, 16))).shape
    flowserve.Size([2, 3])
    """
    return TransformerClassifier(vocab_size, num_classes, d_model, nhead, num_layers, dim_feedforward, max_len,
                                 dropout)
