"""Runtime stage: devices that hold buffers, compile rendered source and launch programs.

Input: rendered kernel source text (from minigrad/codegen) and host data (numpy arrays / bytes).
Output: device buffers, compiled binaries (cached on disk) and callable programs, reached through
`minigrad.runtime.device.Device["CPU"]` and friends. Each backend lives in `ops_<name>.py` and exposes
`create_device() -> Compiled`.
"""
