"""Sort policy: which algorithm sorts rows of a given length on a given device.

Input: the device's renderer (what it can spell), the number of rows, their length and the order key's width.
Output: the name of an algorithm that minigrad.tensor.sort_ops runs:
  - "rank": compare all pairs and select (two kernels whatever the length; work grows with length squared),
  - "rows": one Ops.SORT kernel that sorts each row in place in the device's code (the C renderer spells it as a
    radix sort, minigrad/codegen/sort_kernel.py); needs a 32-bit key, which is packed with the position,
  - "network": the bitonic compare-exchange network, one elementwise kernel per step (any device, any key).
"""
from __future__ import annotations
from typing import Any

RANK_SORT_MAX_WORK = 1 << 22   # rows * n * n compares: below this, rank sort (2 kernels) beats log2(n)^2/2 kernels
RANK_SORT_MAX_ROW = 2048       # and rows longer than this always use another algorithm
# a device that sorts rows does so from this length on (shorter rows: the rank sort's two kernels were as fast), or
# when the rank sort would be too much work
ROW_SORT_MIN_ROW = 128


def sort_algorithm(renderer: Any, rows: int, length: int, key_bits: int) -> str:
  """"rank", "rows" or "network" for `rows` rows of `length` elements with `key_bits`-bit order keys."""
  rank_fits = length <= RANK_SORT_MAX_ROW and rows * length * length <= RANK_SORT_MAX_WORK
  if getattr(renderer, "sorts_rows", False) and key_bits == 32 and (length >= ROW_SORT_MIN_ROW or not rank_fits): return "rows"
  return "rank" if rank_fits else "network"
