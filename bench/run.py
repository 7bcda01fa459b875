"""minigrad's speed next to numpy and torch: a thin wrapper around `python -m minigrad.bench` (minigrad/bench/).

  python bench/run.py                 # all benchmarks
  python bench/run.py matmul softmax  # some of them
"""
from __future__ import annotations
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from minigrad.bench import main  # noqa: E402

if __name__ == "__main__":
  main()
