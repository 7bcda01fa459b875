"""Joining, splitting and indexing Tensors: cat/stack/split, repeat, roll, gather/scatter, masked_fill, setitem.

Input: Tensors (this class is mixed into `Tensor`). Output: lazy Tensors, zero-copy views where possible.
"""
from __future__ import annotations


class IndexMixin:
  """Join/split/index ops of Tensor (see minigrad.tensor)."""
