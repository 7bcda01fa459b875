"""minigrad: a lazy tensor compiler. `from minigrad import Tensor, dtypes, Device`."""
