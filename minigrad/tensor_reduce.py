"""Reductions and scans beyond sum/max/min/mean: prod, var/std, argmax/argmin, any/all, logsumexp, cumulative ops.

Input: Tensors (this class is mixed into `Tensor`). Output: lazy Tensors built from differentiable primitives.
"""
from __future__ import annotations


class ReduceMixin:
  """Reduce and scan ops of Tensor (see minigrad.tensor)."""
