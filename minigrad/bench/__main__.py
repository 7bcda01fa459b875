"""`python -m minigrad.bench`: see cli.py."""
from minigrad.bench.cli import main

main()
