"""torch's `nn.functional` under the name torch users look for: convolution, pooling, interpolation, attention,
normalization, dropout, one-hot and losses. The functions are part of the Tensor API and live in
minigrad/tensor/functional.py; this module only gives them their `minigrad.nn.functional` address."""
from minigrad.tensor.functional import *  # noqa: F401,F403  (the names listed in its __all__)
from minigrad.tensor.functional import __all__  # noqa: F401
