"""minigrad: a lazy tensor compiler. `from minigrad import Tensor, dtypes, Device`."""
from minigrad.dtype import dtypes, DType
from minigrad.helpers import GlobalCounters, tune_garbage_collection
from minigrad.runtime.device import Device
from minigrad.tensor import Tensor
from minigrad.engine.jit import TinyJit
from minigrad.uop.variable import Variable

tune_garbage_collection()

__all__ = ["Tensor", "TinyJit", "Variable", "dtypes", "DType", "Device", "GlobalCounters"]
