"""The Tensor API: what a user writes, turned into a lazy UOp graph.

Input: Python numbers, lists, numpy arrays and calls on `Tensor`. Output: lazy `Tensor`s whose `.uop` graphs the
scheduler (minigrad/schedule) turns into kernels when a result is needed (`realize`, `numpy`, `item`).

Files, from the core outwards:
- tensor.py: the `Tensor` class (storage, realize, movement ops, assign), mixing in the method groups below;
- function.py: the differentiable primitives (`Function`s, their gradients, templates) and the chain rule;
- create.py (constructors, random numbers), unary_ops.py (exp, sin, gelu ...), math_ops.py (binary ops,
  comparisons, broadcasting), reduce_ops.py (sum, max, argmax, var ...), index_ops.py (slicing, gather, cat,
  pad ...), indexing.py (advanced `t[...]` indexing), sort_ops.py (sort, argsort, topk), nn_ops.py (the
  neural-network methods), symbolic_shapes.py (shapes holding bound Variables);
- functional.py (torch's nn.functional: losses, attention, normalization), conv.py (N-d convolution and pooling),
  einsum.py: the functional ops built on the Tensor methods.
minigrad/nn (layers, optimizers, state, datasets) imports this package; nothing here imports minigrad/nn.
"""
from minigrad.tensor.tensor import Tensor

__all__ = ["Tensor"]
