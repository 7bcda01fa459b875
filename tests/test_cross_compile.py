"""Cross-compilation for aarch64 (minigrad/runtime/cross_compile.py): kernels optimized for an aarch64 Target (NEON,
16-byte vectors), rendered and compiled by `aarch64-linux-gnu-gcc` to object files, while the program runs on the host.

Input: small tensor programs (elementwise math, matmul, conv2d, softmax, float16 casts, int ops, reduces). Output: checks
that each kernel's object file is an aarch64 ELF relocatable whose undefined symbols the aarch64 C library defines
(nothing x86-specific slipped out of its guard), that its vectors are the Target's (float_v4, never wider than 16 bytes),
and that the host's numbers still match numpy. Skipped, saying why, when the cross compiler is not installed
(CI installs it: .ci/install-system-packages).
"""
from __future__ import annotations
import os
import pathlib
import re
import shutil
import subprocess
import sys
import numpy as np
import pytest
from minigrad import Tensor, dtypes
from minigrad.codegen.kernel import Opt
from minigrad.runtime import cross_compile
from minigrad.runtime.cross_compile import CrossCompilerMissing, CrossKernel, EM_AARCH64, cross_compile as build, elf_machine, toolchain
from minigrad.runtime.device import CompileError

CC = "aarch64-linux-gnu-gcc"
ROOT = pathlib.Path(__file__).resolve().parent.parent
LIBC_DIR = "/usr/aarch64-linux-gnu/lib"
pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason=f"{CC} is not installed (apt-get install "
                                "gcc-aarch64-linux-gnu libc6-dev-arm64-cross; CI installs it)")
rng = np.random.default_rng(21)


@pytest.fixture(autouse=True)
def default_march(monkeypatch):
  """The tests name their march, or mean the default one: not whatever CROSS_TARGET the run was started with."""
  monkeypatch.delenv("CROSS_TARGET", raising=False)


def randn(*shape: int) -> np.ndarray: return rng.standard_normal(shape).astype(np.float32)


def aarch64_libc_symbols() -> set[str]:
  """The functions aarch64 libm and libc export (what a kernel may call on the machine)."""
  nm = shutil.which("aarch64-linux-gnu-nm") or "nm"
  names: set[str] = set()
  for lib in ("libm.so.6", "libc.so.6"):
    out = subprocess.run([nm, "-D", "--defined-only", f"{LIBC_DIR}/{lib}"], capture_output=True, text=True, check=True).stdout
    names |= {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}
  return names


def undefined_symbols(obj: bytes, tmp_path) -> set[str]:
  path = tmp_path / "kernel.o"
  path.write_bytes(obj)
  nm = shutil.which("aarch64-linux-gnu-nm") or "nm"
  return {line.split()[-1] for line in subprocess.run([nm, "-u", str(path)], capture_output=True, text=True, check=True).stdout.splitlines() if line.strip()}


def check_aarch64(kernel: CrossKernel, tmp_path) -> None:
  """An aarch64 ELF relocatable object, vectors of at most 16 bytes, calling nothing aarch64's C library lacks."""
  obj = kernel.obj
  assert obj[:4] == b"\x7fELF" and obj[4] == 2 and int.from_bytes(obj[16:18], "little") == 1   # 64-bit, ET_REL
  assert elf_machine(obj) == EM_AARCH64, f"{kernel.name}: e_machine {elf_machine(obj)}"
  widths = {int(n) for n in re.findall(r"vector_size\((\d+)\)", kernel.source)}
  assert all(w <= 16 for w in widths), f"{kernel.name}: vectors of {sorted(widths)} bytes on a 16-byte-vector Target"
  missing = undefined_symbols(obj, tmp_path) - aarch64_libc_symbols()
  assert not missing, f"{kernel.name} calls {sorted(missing)}, which aarch64 libm/libc don't define"


def cross_build(t: Tensor, march: str | None = None) -> list[CrossKernel]:
  """Every kernel of `t`'s schedule built for aarch64 through the module's API (the realize hook has its own test)."""
  return [build(item.ast, cc=CC, march=march) for item in t.schedule()]


def run(t: Tensor, expected: np.ndarray, tmp_path, rtol: float = 1e-5, atol: float = 1e-6, march: str | None = None) -> list[CrossKernel]:
  """Build `t`'s kernels for aarch64, check each object, then run `t` on the host and compare with numpy."""
  kernels = cross_build(t, march)
  assert kernels
  for kernel in kernels: check_aarch64(kernel, tmp_path)
  np.testing.assert_allclose(t.numpy(), expected, rtol=rtol, atol=atol)
  return kernels


# ---------------------------------------------------------------- the toolchain

def test_toolchain_is_aarch64_neon():
  chain = toolchain(CC)
  assert chain.target.arch == "aarch64" and "neon" in chain.target.features
  assert chain.target.march == cross_compile.DEFAULT_MARCHES["aarch64"] and {"fullfp16", "dotprod"} <= chain.target.features
  assert (chain.target.vector_bytes, chain.target.vector_registers) == (16, 32)
  assert f"-march={chain.target.march}" in chain.compiler.flags and "-c" in chain.compiler.flags and "-march=native" not in chain.compiler.flags
  caps = chain.compiler.capabilities
  assert caps.vector_extensions and caps.shufflevector and not caps.f16c and not caps.errors
  assert chain.renderer.vector_lanes and chain.renderer.shufflevector
  # Armv8.2 FP16 computes in half precision itself: float16 is kept as words, converted through float32 ...
  assert caps.half_arithmetic and chain.renderer.float16_mode == "bits"
  # ... while plain Armv8-A has _Float16 that converts through float32
  base = toolchain(CC, "armv8-a")
  assert base.target.features == frozenset({"neon"}) and base.renderer.float16_mode == "native"


def test_cross_target_env(monkeypatch):
  monkeypatch.setenv("CROSS_TARGET", "armv8-a")
  assert toolchain(CC).target.march == "armv8-a"


def test_unknown_cross_target_names_it(monkeypatch):
  monkeypatch.setenv("CROSS_TARGET", "no-such-arm")
  with pytest.raises(ValueError, match="CROSS_TARGET='no-such-arm'.*armv8-a"): toolchain(CC)


def test_missing_compiler_names_it_and_the_package():
  with pytest.raises(CrossCompilerMissing) as error: toolchain("no-such-aarch64-linux-gnu-gcc")
  assert "no-such-aarch64-linux-gnu-gcc" in str(error.value) and "apt-get install gcc-aarch64-linux-gnu" in str(error.value)


def test_compile_error_has_the_source():
  with pytest.raises(CompileError) as error: toolchain(CC).compiler.compile("float broken(float x) { return x +; }\n")
  assert "aarch64" in str(error.value) and "--- source ---" in str(error.value) and "return x +;" in str(error.value)


def test_unguarded_x86_code_is_an_error():
  """An x86 intrinsic outside its guard is an implicit declaration: an error here, as loading it would be on aarch64."""
  with pytest.raises(CompileError, match="_mm_round_ps"):
    toolchain(CC).compiler.compile("float f(float x) { return _mm_round_ps(x, 11); }\n")


# ---------------------------------------------------------------- kernels

def test_elementwise_math(tmp_path):
  a, b = np.abs(randn(4, 1000)) + 0.5, randn(4, 1000)
  x, y = Tensor(a), Tensor(b)
  t = ((x.exp() + x.log()) * x.sqrt()).floor() + (y > 0).where(y, x * 2)
  expected = np.floor((np.exp(a) + np.log(a)) * np.sqrt(a)) + np.where(b > 0, b, a * 2)
  (kernel,) = run(t, expected, tmp_path, rtol=1e-5, atol=1e-5)
  assert "float_v4" in kernel.source and "float_v8" not in kernel.source and "float_v16" not in kernel.source
  assert any(opt.op == "UPCAST" and opt.amount == 4 for opt in kernel.opts)


def test_transcendentals(tmp_path):
  a = randn(3, 520)
  t = Tensor(a).sin() + Tensor(a).sigmoid() * Tensor(a).exp2() - Tensor(np.abs(a) + 1).log2()
  run(t, np.sin(a) + 1 / (1 + np.exp(-a)) * np.exp2(a) - np.log2(np.abs(a) + 1), tmp_path, rtol=1e-4, atol=1e-5)


def test_matmul(tmp_path):
  a, b = randn(67, 96), randn(96, 72)
  kernels = run(Tensor(a) @ Tensor(b), a @ b, tmp_path, rtol=1e-4, atol=1e-4)
  assert any("float_v4" in k.source for k in kernels)
  tile = [k for k in kernels if sum(o.op in ("UPCAST", "UNROLL") for o in k.opts) >= 2]
  assert tile, f"no register tile: {[k.opts for k in kernels]}"


def test_conv2d(tmp_path):
  x, w, bias = randn(2, 3, 13, 11), randn(8, 3, 3, 3), randn(8)
  torch = pytest.importorskip("torch")
  expected = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(bias), padding=1).numpy()
  run(Tensor(x).conv2d(Tensor(w), Tensor(bias), padding=1), expected, tmp_path, rtol=1e-4, atol=1e-4)


def test_softmax(tmp_path):
  a = randn(12, 333)
  e = np.exp(a - a.max(axis=-1, keepdims=True))
  run(Tensor(a).softmax(-1), e / e.sum(axis=-1, keepdims=True), tmp_path, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("march", [None, "armv8-a"])   # float16 as words (Armv8.2 FP16), and as _Float16 (Armv8-A)
def test_float16_casts(tmp_path, march):
  a = (randn(5, 123) * 50).astype(np.float16)
  t = (Tensor(a).float() * 1.5).half() + Tensor(a)
  expected = ((a.astype(np.float32) * 1.5).astype(np.float16).astype(np.float32) + a.astype(np.float32)).astype(np.float16)
  kernels = run(t, expected, tmp_path, rtol=1e-3, atol=1e-3, march=march)
  mode = toolchain(CC, march).renderer.float16_mode
  assert mode == ("native" if march == "armv8-a" else "bits")
  assert any(("_Float16" if mode == "native" else "float_to_half") in k.source for k in kernels)


def test_int_ops(tmp_path):
  a = rng.integers(-1000, 1000, (6, 130)).astype(np.int32)
  b = rng.integers(1, 50, (6, 130)).astype(np.int32)
  x, y = Tensor(a), Tensor(b)
  t = (x * y + x // y - (x % y)) ^ (x << 2) & (y | 7)
  expected = (a * b + a // b - (a % b)) ^ (a << 2) & (b | 7)
  kernels = run(t, expected, tmp_path)
  assert any("int_v4" in k.source for k in kernels)
  big = rng.integers(-2**40, 2**40, (257,)).astype(np.int64)
  run(Tensor(big) * 3 + 1, big * 3 + 1, tmp_path)
  small = rng.integers(-100, 100, (300,)).astype(np.int8)
  run(Tensor(small) * Tensor(small), small * small, tmp_path)


def test_reduce(tmp_path):
  a = randn(48, 250)
  run(Tensor(a).sum(axis=1), a.sum(axis=1), tmp_path, rtol=1e-4, atol=1e-4)
  run(Tensor(a).max(axis=0), a.max(axis=0), tmp_path)
  run(Tensor(a).mean(), a.mean(), tmp_path, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- opts, the cache and the realize hook

def test_explicit_opts_that_fit_are_used_and_others_not():
  (item,) = (Tensor(randn(8, 64)) + 1).schedule()
  fitting = build(item.ast, [Opt("UPCAST", 0, 4)], cc=CC)
  assert fitting.opts == (Opt("UPCAST", 0, 4),) and "float_v4" in fitting.source
  too_wide = build(item.ast, [Opt("UPCAST", 0, 16)], cc=CC)   # 64-byte vectors: an AVX-512 choice
  assert "float_v16" not in too_wide.source and Opt("UPCAST", 0, 16) not in too_wide.opts
  broken = build(item.ast, [Opt("UPCAST", 7, 4)], cc=CC)      # no such axis: hand-coded instead
  assert broken.opts == too_wide.opts


def test_each_kernel_is_compiled_once():
  (item,) = (Tensor(randn(9, 40)) * 3).schedule()
  first = build(item.ast, cc=CC)
  count = cross_compile.cross_compile_count
  assert build(item.ast, cc=CC) is first and cross_compile.cross_compile_count == count


REALIZE_SCRIPT = """
import sys
import numpy as np
from minigrad import Tensor
from minigrad.runtime import cross_compile
if sys.argv[1] == "x86-leak":   # an x86 header outside its guard: fine on the host, an error for aarch64
  from minigrad.codegen.c_renderer import CRenderer
  CRenderer.includes = CRenderer.includes + ["#include <immintrin.h>"]
a = np.arange(4096, dtype=np.float32).reshape(64, 64) / 4096
total = (Tensor(a).relu() * 2 + 1).sum().item()
machines = {cross_compile.elf_machine(k.obj) for k in cross_compile.cross_kernels()}
print(total, len(cross_compile.cross_kernels()), *sorted(machines))
"""


@pytest.mark.parametrize("variant", ["good", "x86-leak"])
def test_realize_hook(variant):
  """With CROSS_CC set (read once per process, like every flag: a subprocess), get_kernel cross-compiles every CPU kernel
  it builds while the host computes the numbers; a kernel the cross compiler rejects fails the run with its source."""
  env = {k: v for k, v in os.environ.items() if k != "CROSS_TARGET"} | {"CROSS_CC": CC, "DEV": "CPU"}
  result = subprocess.run([sys.executable, "-c", REALIZE_SCRIPT, variant], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
  if variant == "good":
    assert result.returncode == 0, result.stderr
    total, compiled, *machines = result.stdout.split()
    expected = float((np.arange(4096, dtype=np.float32) / 4096 * 2 + 1).sum())
    assert abs(float(total) - expected) < 1e-3 * expected and int(compiled) >= 1 and machines == [str(EM_AARCH64)]
  else:
    assert result.returncode != 0 and "CompileError" in result.stderr and "immintrin.h" in result.stderr and "--- source ---" in result.stderr
