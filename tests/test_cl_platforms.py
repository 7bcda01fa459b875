"""Which OpenCL device the CL device uses when several platforms are installed (e.g. pip's pocl 3.0 and Debian's 3.1).

The selection logic runs against fake platforms and devices with a fake probe, so it needs no OpenCL (without pyopencl,
ops_cl is imported over a stand-in module). One test builds and runs real kernels on the device chosen on this host.
"""
import importlib
import os
import sys
import types
import numpy as np
import pytest

WHEEL_POCL = "OpenCL 3.0 PoCL 3.0-rc2  Linux, Release, RELOC, LLVM 14.0.6, SLEEF, DISTRO, POCL_DEBUG"
DEBIAN_POCL = "OpenCL 3.0 PoCL 3.1+debian  Linux, None+Asserts, RELOC, SPIR, LLVM 15.0.6, SLEEF, DISTRO, POCL_DEBUG"
NVIDIA = "OpenCL 3.0 CUDA 12.4.131"
ZEN5_LOG = ("error: unknown target CPU 'generic'\n"
            "note: valid target CPU values are: nocona, core2, penryn, haswell, skylake-avx512, znver3, x86-64")


@pytest.fixture(scope="module")
def ops_cl():
  try:
    import pyopencl  # noqa: F401
  except ImportError:   # import ops_cl over a stand-in pyopencl, then forget both so the real import still fails
    import minigrad.runtime as runtime
    saved = {name: sys.modules.pop(name) for name in ("pyopencl", "minigrad.runtime.ops_cl") if name in sys.modules}
    sys.modules["pyopencl"] = types.ModuleType("pyopencl")
    try: module = importlib.import_module("minigrad.runtime.ops_cl")
    finally:
      for name in ("pyopencl", "minigrad.runtime.ops_cl"): sys.modules.pop(name, None)
      sys.modules.update(saved)
      if hasattr(runtime, "ops_cl"): delattr(runtime, "ops_cl")
    return module
  from minigrad.runtime import ops_cl as module
  return module


class FakePlatform:
  def __init__(self, version: str, name: str = "Portable Computing Language"): self.version, self.name = version, name


class FakeDevice:
  def __init__(self, name: str, version: str, platform_name: str = "Portable Computing Language"):
    self.name, self.platform = name, FakePlatform(version, platform_name)

  def __repr__(self) -> str: return f"<FakeDevice {self.name}>"


def wheel(): return FakeDevice("pthread-AMD EPYC 9575F 64-Core Processor", WHEEL_POCL)
def debian(): return FakeDevice("pthread-skylake-avx512-AMD EPYC 9575F 64-Core Processor", DEBIAN_POCL)
def gpu(): return FakeDevice("NVIDIA GeForce RTX 4090", NVIDIA, "NVIDIA CUDA")


class Probe:
  """A fake probe: `failures` maps device -> the error it fails with; records which devices were probed."""
  def __init__(self, failures=None): self.failures, self.probed = failures or {}, []

  def __call__(self, device) -> str:
    self.probed.append(device)
    return self.failures.get(device, "")


def test_pocl_versions_are_read_from_the_platform_version(ops_cl):
  assert ops_cl.pocl_version(WHEEL_POCL) == (3, 0, 0, 0)        # a release candidate
  assert ops_cl.pocl_version(DEBIAN_POCL) == (3, 1, 0, 1)
  assert ops_cl.pocl_version("OpenCL 3.0 PoCL 6.0.1  Linux, Release") == (6, 0, 1, 1)
  assert ops_cl.pocl_version("OpenCL 3.0 PoCL 3.0  Linux") > ops_cl.pocl_version(WHEEL_POCL)   # 3.0 final beats 3.0-rc2
  assert ops_cl.pocl_version(NVIDIA) is None


@pytest.mark.parametrize("order", ["wheel first", "debian first"])
def test_the_newer_pocl_is_chosen_when_both_build(ops_cl, order):
  old, new = wheel(), debian()
  devices = [old, new] if order == "wheel first" else [new, old]
  probe = Probe()
  assert ops_cl.select_device(devices, None, probe) is new
  assert probe.probed == [new]   # the probe stops at the first device that works: no build on the other pocl


def test_an_older_pocl_that_builds_beats_a_newer_one_that_does_not(ops_cl):
  old, new = wheel(), debian()
  probe = Probe({new: "error: something pocl 3.1 cannot do here"})
  assert ops_cl.select_device([new, old], None, probe) is old
  assert probe.probed == [new, old]


def test_vendor_runtimes_come_before_pocl_in_listing_order(ops_cl):
  old, new, card, card2 = wheel(), debian(), gpu(), gpu()
  assert ops_cl.select_device([old, new, card, card2], None, Probe()) is card
  assert ops_cl.select_device([old, new, card, card2], None, Probe({card: "CL_DEVICE_NOT_AVAILABLE"})) is card2
  assert ops_cl.select_device([old, new, card], None, Probe({card: "CL_DEVICE_NOT_AVAILABLE"})) is new


def test_cl_device_picks_by_index_without_probing(ops_cl):
  old, new = wheel(), debian()
  def no_probe(device): raise AssertionError("CL_DEVICE must not probe")
  assert ops_cl.select_device([new, old], "1", no_probe) is old
  assert ops_cl.select_device([new, old], "0", no_probe) is new
  assert ops_cl.select_device([old, new], "", Probe()) is new   # CL_DEVICE= (empty) means unset
  with pytest.raises(RuntimeError, match=r"CL_DEVICE=2, but there are only 2 OpenCL devices"):
    ops_cl.select_device([new, old], "2", no_probe)
  with pytest.raises(RuntimeError, match="CL_DEVICE='pocl' is not a device number"):
    ops_cl.select_device([new, old], "pocl", no_probe)


def test_no_platform_says_how_to_get_one(ops_cl):
  with pytest.raises(RuntimeError, match=r"no OpenCL platform.*pip install -e '\.\[opencl\]'"): ops_cl.select_device([], None, Probe())


def test_the_wheel_pocl_on_a_cpu_its_llvm_does_not_know_names_cpu_version_and_fix(ops_cl, monkeypatch):
  monkeypatch.setattr(ops_cl, "cpu_model", lambda: "AMD EPYC 9575F 64-Core Processor")
  old = wheel()
  with pytest.raises(RuntimeError) as error: ops_cl.select_device([old], None, Probe({old: ZEN5_LOG}))
  message = str(error.value)
  assert "no OpenCL device that can build and run a kernel" in message
  assert f"{old.name} (OpenCL 3.0 PoCL 3.0-rc2 Linux, Release" in message   # which device failed ...
  assert "error: unknown target CPU 'generic'" in message and "note: valid" not in message   # ... with pocl's error line
  assert "pocl 3.0 (pre-release) with LLVM 14.0.6 does not know the host CPU (AMD EPYC 9575F 64-Core Processor)" in message
  assert ".ci/install-system-packages" in message and "apt-get install pocl-opencl-icd" in message


def test_other_build_failures_list_every_device_and_the_fix(ops_cl):
  old, new = wheel(), debian()
  failures = {new: "RuntimeError: clCreateContext failed: OUT_OF_HOST_MEMORY", old: "warning: x\nerror: linker 'ld' not found"}
  with pytest.raises(RuntimeError) as error: ops_cl.select_device([old, new], None, Probe(failures))
  lines = str(error.value).splitlines()
  assert lines[1] == f"  {new.name} ({' '.join(DEBIAN_POCL.split())}): RuntimeError: clCreateContext failed: OUT_OF_HOST_MEMORY"
  assert lines[2] == f"  {old.name} ({' '.join(WHEEL_POCL.split())}): error: linker 'ld' not found"
  assert "install-system-packages" in lines[3] and "does not know the host CPU" not in str(error.value)


def test_compile_errors_explain_an_unknown_cpu_and_nothing_else(ops_cl):
  assert ops_cl.unknown_cpu_advice(wheel(), "<source>:2:13: error: use of undeclared identifier 'undefined_name'") == ""
  advice = ops_cl.unknown_cpu_advice(wheel(), ZEN5_LOG)
  assert "its LLVM calls it 'generic'" in advice and "apt-get install pocl-opencl-icd" in advice


def test_each_device_is_probed_once_per_process(ops_cl, monkeypatch):
  built = []
  monkeypatch.setattr(ops_cl, "_probe_results", {})
  def try_kernel(device):
    built.append(device)
    return "" if device.platform.version == DEBIAN_POCL else ZEN5_LOG
  monkeypatch.setattr(ops_cl, "_try_kernel", try_kernel)
  old, new = wheel(), debian()
  assert [ops_cl.probe(d) for d in (old, new, old, new, old)] == [ZEN5_LOG, "", ZEN5_LOG, "", ZEN5_LOG]
  assert built == [old, new]


def test_the_chosen_cl_device_builds_and_runs_kernels():
  pytest.importorskip("pyopencl")
  from minigrad import Tensor
  from minigrad.runtime import ops_cl
  from minigrad.runtime.device import Device
  devices = ops_cl._opencl_devices()
  if not devices: pytest.skip("no OpenCL platform with a device")
  chosen = ops_cl.select_device(devices)   # the real probe: builds and runs a kernel on each candidate until one works
  assert ops_cl.probe(chosen) == ""
  working = [ops_cl.pocl_version(d.platform.version) for d in devices if ops_cl.probe(d) == ""]
  if ops_cl.pocl_version(chosen.platform.version) is not None:   # a pocl was chosen: the newest pocl that works here
    assert ops_cl.pocl_version(chosen.platform.version) == max(v for v in working if v is not None)
  if not os.environ.get("CL_DEVICE"): assert Device["CL"].cl_device.int_ptr == chosen.int_ptr
  rng = np.random.default_rng(3)
  x, y = rng.standard_normal((33, 70)).astype(np.float32), rng.standard_normal(70).astype(np.float32)
  got = ((Tensor(x, device="CL") * 3 - Tensor(y, device="CL")).relu().sqrt().sum(axis=1)).numpy()
  np.testing.assert_allclose(got, np.sqrt(np.maximum(x * 3 - y, 0)).sum(axis=1), rtol=1e-5, atol=1e-5)
