"""Embedding lookup of integer indices, then a sum over the sequence."""

import torch
import torch.nn as nn

batch_size = 8
seq_len = 12
num_embeddings = 100
embedding_dim = 32


class Model(nn.Module):
    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings, embedding_dim)

    def forward(self, indices):
        return self.embedding(indices).sum(dim=1)


def get_inputs():
    return [torch.randint(0, num_embeddings, (batch_size, seq_len))]


def get_init_inputs():
    return [num_embeddings, embedding_dim]
