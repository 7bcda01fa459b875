"""Linear algebra and neural-network ops on Tensor beyond matmul: einsum, convolutions, pooling, interpolation,
attention. The implementations live in minigrad.nn.functional; these are the Tensor-method spellings.

Input: Tensors (this class is mixed into `Tensor`). Output: lazy Tensors.
"""
from __future__ import annotations


class NNMixin:
  """Linear-algebra and nn ops of Tensor (see minigrad.tensor)."""
