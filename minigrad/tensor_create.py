"""Tensor creation beyond the basics in tensor.py: ranges, identity and triangular matrices, random tensors.

Input: shapes, values, dtypes and devices. Output: lazy Tensors (mixed into `Tensor`, so these are called as
`Tensor.linspace(...)`, `Tensor.randint(...)`, `x.tril()` ...).
"""
from __future__ import annotations


class CreationMixin:
  """Creation ops of Tensor (see minigrad.tensor)."""
