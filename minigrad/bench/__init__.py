"""minigrad's speed, side by side with numpy and torch: `python -m minigrad.bench` (cli.py says how it measures).

Files: harness.py (the Target, torch's ISA, the header, timing runners side by side), sections.py (the benchmarks),
cli.py (the command line), beam.py (--beam-check: the default kernel choices against BEAM's).
"""
from minigrad.bench.cli import main

__all__ = ["main"]
