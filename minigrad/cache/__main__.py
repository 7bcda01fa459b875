"""`python -m minigrad.cache [--clear]`: the disk cache's size, entries by kind and hit rates (see minigrad.cache)."""
from minigrad.cache import main

main()
