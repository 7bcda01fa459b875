"""The C compilers users have (gcc, clang): what the CPU device's probe finds out about each installed one, and float16
computed through each of them, bit for bit equal to numpy's.

Facts the probe's answers are checked against come from elsewhere: the compilers' versions (`-dumpversion`: gcc has
_Float16 on x86-64 from 12 on, clang from 15 on or with AVX512-FP16; __builtin_shufflevector came to gcc in 12) and the
CPU's flags in /proc/cpuinfo. A compiler that is not installed is skipped, saying so. Tensor programs run in a
subprocess per compiler (CC=...), since a process opens its CPU device once.
"""
from __future__ import annotations
import ctypes
import json
import os
import re
import pathlib
import platform
import shutil
import stat
import subprocess
import sys
import numpy as np
import pytest
from minigrad.codegen.c_renderer import CRenderer, half_conversions
from minigrad.dtype import dtypes
from minigrad.runtime import ops_cpu
from minigrad.runtime.ops_cpu import CCompiler, CompilerCapabilities, configure_renderer, float16_mode, load_library, target_flag_candidates
from minigrad.target import Target, cpu_target

X86 = platform.machine() in ("x86_64", "AMD64")
REPO = pathlib.Path(__file__).resolve().parent.parent


def target_features(cc: str) -> frozenset[str]:
  """The ISA features of the Target `cc` compiles for (CPU_TARGET, else this CPU), as minigrad.target names them."""
  return cpu_target([cc]).features


def major_version(cc: str) -> int:
  return int(subprocess.run([cc, "-dumpversion"], capture_output=True, text=True, check=True).stdout.strip().split(".")[0])


def installed(cc: str) -> str:
  if shutil.which(cc) is None: pytest.skip(f"{cc} is not installed here (apt-get install {cc})")
  return cc


def takes_flags(cc: str, *flags: str) -> bool:
  """Does `cc` accept these flags together with -march=native?"""
  command = [cc, *flags, "-march=native", "-E", "-x", "c", "-"]
  return subprocess.run(command, input="", capture_output=True, text=True).returncode == 0


def fake_compiler(tmp_path: pathlib.Path, name: str, rejects: list[str], version: str | None = None) -> str:
  """A shell script in front of the real default compiler that fails, as a compiler lacking a feature does, on any
  argument or source text containing one of `rejects`. `version`, if given, is appended to the real version line."""
  argv, real_version = ops_cpu.find_c_compiler()
  real = shutil.which(argv[0])
  version = f"{real_version} {version}" if version else None
  cases = "".join(f'  case "$arg" in *{r}*) echo "error: {r} is not supported" >&2; exit 1;; esac\n' for r in rejects)
  source_cases = "".join(f'case "$src" in *{r}*) echo "<stdin>:1:1: error: {r} is not supported" >&2; exit 1;; esac\n' for r in rejects)
  version_line = f'echo "{version}"; exit 0' if version else f"exec {real} --version"
  script = tmp_path / name
  script.write_text(f'#!/bin/sh\nif [ "$1" = "--version" ]; then {version_line}; fi\nfor arg in "$@"; do\n{cases}done\n'
                    f'src=$(cat)\n{source_cases}printf "%s\\n" "$src" | exec {real} "$@"\n')
  script.chmod(script.stat().st_mode | stat.S_IEXEC)
  return str(script)


# ---------------------------------------------------------------- the probe's answers for the installed compilers

def test_probe_answers_for_gcc():
  cc = installed("gcc")
  version, flags = major_version(cc), target_features(cc)
  compiler = CCompiler(cc)
  answers = compiler.capabilities
  assert answers.target_flags == target_flag_candidates(compiler.target)[0] and answers.vector_extensions and answers.half_bits
  assert answers.shufflevector == (version >= 12)
  if X86:
    assert answers.float16 == (version >= 12)
    assert answers.f16c == ("f16c" in flags)
    assert answers.half_arithmetic == (version >= 12 and "avx512fp16" in flags)   # gcc 11 doesn't know AVX512-FP16
  if X86 and version >= 12:   # the same CPU without its half arithmetic: gcc's own _Float16 is used
    without = CCompiler(f"{cc} -mno-avx512fp16").capabilities
    assert without.float16 and not without.half_arithmetic and float16_mode(without) == "native"


def test_probe_answers_for_clang():
  cc = installed("clang")
  version, flags = major_version(cc), target_features(cc)
  compiler = CCompiler(cc)
  answers = compiler.capabilities
  assert answers.target_flags == target_flag_candidates(compiler.target)[0]
  assert answers.vector_extensions and answers.shufflevector and answers.half_bits
  if X86:
    assert answers.f16c == ("f16c" in flags)
    assert answers.half_arithmetic == ("avx512fp16" in flags)
    assert answers.float16 == (version >= 15 or "avx512fp16" in flags)   # clang 14 has x86 _Float16 only with AVX512-FP16
    without = CCompiler(f"{cc} -mno-avx512fp16").capabilities
    assert without.float16 == (version >= 15) and not without.half_arithmetic
    if version < 15: assert any(e.startswith("float16:") and "_Float16" in e for e in without.errors), without.errors


def test_float16_decision():
  native = CompilerCapabilities(float16=True, half_arithmetic=False, f16c=True)
  assert float16_mode(native) == "native"
  # the target computes in half itself: gcc and clang would fuse a half multiply-add, so words it is
  assert float16_mode(CompilerCapabilities(float16=True, half_arithmetic=True, f16c=True)) == "f16c"
  assert float16_mode(CompilerCapabilities(float16=False, f16c=True)) == "f16c"
  assert float16_mode(CompilerCapabilities(float16=False, f16c=False)) == "bits"
  assert float16_mode(CompilerCapabilities(float16=True, half_arithmetic=True, f16c=False)) == "bits"
  assert float16_mode(CompilerCapabilities(float16=False, f16c=False, half_bits=False)) is None
  renderer = configure_renderer(CRenderer(), type("Fake", (), {"capabilities": CompilerCapabilities(float16=False, f16c=False), "description": "cc", "target": None})())
  assert (renderer.float16_mode, renderer.float16_unavailable, renderer.shufflevector, renderer.vector_lanes) == ("bits", "", True, True)
  assert renderer.type_name(dtypes.float16) == "unsigned short" and CRenderer().type_name(dtypes.float16) == "_Float16"


def test_probe_is_asked_once_per_compiler_and_kept_on_disk(monkeypatch, tmp_path):
  monkeypatch.setenv("MINIGRAD_CACHE", str(tmp_path / "cache"))
  monkeypatch.delenv("DISABLE_COMPILER_CACHE", raising=False)
  monkeypatch.setattr(ops_cpu, "_probed", {})
  runs: list[list[str]] = []
  real_run = CCompiler._run
  monkeypatch.setattr(CCompiler, "_run", lambda self, command, src: runs.append(command) or real_run(self, command, src))
  first = CCompiler().capabilities
  assert runs[0][-5:] == ["-dM", "-E", "-x", "c", "-"]   # the target's macros with the flags used, then one compile
  assert len(runs) == 2 if not first.errors else len(runs) > 2   # and one per feature when that one fails
  asked = len(runs)
  CCompiler()
  assert len(runs) == asked   # in this process: no subprocess at all
  monkeypatch.setattr(ops_cpu, "_probed", {})   # as a new process: the answer comes from the disk
  assert CCompiler().capabilities == first and len(runs) == asked
  assert len(list((tmp_path / "cache" / "compiler_probes").iterdir())) == 1
  # another compiler (or the same one under another version) gets its own answer
  other = fake_compiler(tmp_path, "oldcc", ["_Float16"], version="[oldcc 11.0.0]")
  assert not CCompiler(other).capabilities.float16 and len(runs) > asked
  assert len(list((tmp_path / "cache" / "compiler_probes").iterdir())) == 2


def test_target_flags_set_the_vector_width_on_x86():
  # clang tunes Intel's AVX-512 server CPUs for 256-bit vectors and splits 64-byte vector types (spilling register
  # tiles): the Target's vector width is asked for first, then the march alone for compilers that don't know the flag
  avx512 = Target("x86_64", "x86-64-v4", frozenset({"avx", "avx2", "fma", "avx512f"}))
  assert target_flag_candidates(avx512) == (("-march=x86-64-v4", "-mprefer-vector-width=512"), ("-march=x86-64-v4",))
  assert target_flag_candidates(Target("x86_64", "x86-64-v3", frozenset({"avx", "avx2"})))[0][-1] == "-mprefer-vector-width=256"
  assert target_flag_candidates(Target("aarch64", "armv8-a", frozenset({"neon"}))) == (("-march=armv8-a",),)
  if X86:
    for cc in ("gcc", "clang"):
      if shutil.which(cc): assert f"-mprefer-vector-width={8 * CCompiler(cc).target.vector_bytes}" in CCompiler(cc).flags


def test_probe_picks_the_target_flag_the_compiler_takes(tmp_path, monkeypatch):
  # clang before 15 rejects -march=native on aarch64; then -mcpu=native, else no target flag
  monkeypatch.delenv("CPU_TARGET", raising=False)   # the host's Target, whatever the suite runs for
  no_march = CCompiler(fake_compiler(tmp_path, "nomarch", ["-march=native"]))
  assert no_march.capabilities.target_flags != ("-march=native",) and "-march=native" not in no_march.flags
  neither = CCompiler(fake_compiler(tmp_path, "nonative", ["=native"]))
  assert neither.capabilities.target_flags == () and not any("native" in f for f in neither.flags)
  assert neither.capabilities.vector_extensions and neither.capabilities.half_bits   # the rest is asked without a target flag
  library = load_library(neither.compile("int triple(int x) { return 3 * x; }\n"))
  assert library.triple(14) == 42


# ---------------------------------------------------------------- float16 conversions, exhaustively, through each compiler

HARNESS = """
void widen(float* out, const unsigned short* in, long n) { for (long i = 0; i < n; i++) out[i] = half_to_float(in[i]); }
void narrow(unsigned short* out, const float* in, long n) { for (long i = 0; i < n; i++) out[i] = float_to_half(in[i]); }
"""
FLUSH_TO_ZERO = """
#include <xmmintrin.h>
void narrow_ftz(unsigned short* out, const float* in, long n) {   /* with flush-to-zero and denormals-are-zero set */
  unsigned int saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040);
  narrow(out, in, n);
  _mm_setcsr(saved);
}
void widen_ftz(float* out, const unsigned short* in, long n) {
  unsigned int saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040);
  widen(out, in, n);
  _mm_setcsr(saved);
}
"""


def all_half_words() -> np.ndarray: return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def narrowing_inputs() -> np.ndarray:
  """float32 values around every float16: each float16, the ties halfway to the next one and the floats next to those
  ties, values past 65504 and below the smallest subnormal, float32 subnormals, infs, NaNs, and random bit patterns."""
  halves = all_half_words().view(np.float16)
  finite = np.sort(halves[np.isfinite(halves)].astype(np.float32))
  ties = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)   # exact: float32 has the bits
  assert np.all((ties.astype(np.float64) * 2) == finite[:-1].astype(np.float64) + finite[1:])
  near = np.concatenate([np.nextafter(ties, np.float32(np.inf)), np.nextafter(ties, np.float32(-np.inf))])
  special = np.array([65504, 65519.996, 65520, 65536, 1e10, 3.4e38, 2**-25, 2**-26, 2**-24 * 1.5, 2**-24 * 0.75, 1e-30,
                      np.inf, -np.inf, 0.0, -0.0], dtype=np.float32)
  special = np.concatenate([special, -special, np.nextafter(special, np.float32(0))])
  bits = np.array([0x00000001, 0x007fffff, 0x80000001, 0x7f800001, 0x7fc00000, 0xffc00000, 0x7fbfffff, 0xff800001,
                   0x7fc02000, 0x7f802000], dtype=np.uint32).view(np.float32)   # subnormals; signaling and quiet NaNs
  random = np.random.default_rng(0).integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
  return np.concatenate([finite, ties, near, special, bits, random]).astype(np.float32)


def expected_widening(words: np.ndarray) -> np.ndarray:
  """numpy's float16 -> float32, except that a NaN comes out quiet (as F16C does; numpy keeps signaling NaNs signaling)."""
  out = words.view(np.float16).astype(np.float32).view(np.uint32).copy()
  nan = np.isnan(words.view(np.float16))
  out[nan] |= 0x400000
  return out


def expected_narrowing(values: np.ndarray) -> np.ndarray:
  """numpy's float32 -> float16 (to nearest, ties to even), a NaN coming out quiet with the top of its payload."""
  with np.errstate(over="ignore", invalid="ignore"): out = values.astype(np.float16).view(np.uint16).copy()
  nan = np.isnan(values)
  bits = values.view(np.uint32)
  out[nan] = ((bits[nan] >> 16) & 0x8000) | 0x7e00 | ((bits[nan] >> 13) & 0x3ff)
  return out


def conversion_modes() -> list[str]: return ["bits"] + (["f16c"] if X86 and "f16c" in cpu_target().features else [])


@pytest.mark.parametrize("cc", ["gcc", "clang"])
@pytest.mark.parametrize("mode", ["bits", "f16c"])
def test_float16_conversions_equal_numpy(cc: str, mode: str):
  installed(cc)
  if mode not in conversion_modes(): pytest.skip(f"this CPU has no F16C ({platform.machine()})")
  compiler = CCompiler(cc)
  ftz = X86 and mode == "bits"
  library = load_library(compiler.compile("\n".join(half_conversions(mode)) + HARNESS + (FLUSH_TO_ZERO if ftz else "")))
  words, values = all_half_words(), narrowing_inputs()
  for suffix in ("", "_ftz") if ftz else ("",):
    widened = np.empty(words.size, dtype=np.float32)
    getattr(library, "widen" + suffix)(ctypes.c_void_p(widened.ctypes.data), ctypes.c_void_p(words.ctypes.data), ctypes.c_long(words.size))
    np.testing.assert_array_equal(widened.view(np.uint32), expected_widening(words), err_msg=f"{cc} {mode}{suffix}: half -> float")
    narrowed = np.empty(values.size, dtype=np.uint16)
    getattr(library, "narrow" + suffix)(ctypes.c_void_p(narrowed.ctypes.data), ctypes.c_void_p(values.ctypes.data), ctypes.c_long(values.size))
    wrong = narrowed != expected_narrowing(values)
    assert not wrong.any(), (f"{cc} {mode}{suffix}: float -> half of {values[wrong][:5]} ({values[wrong][:5].view(np.uint32)}) gave "
                             f"{narrowed[wrong][:5]}, numpy {expected_narrowing(values)[wrong][:5]}")


# ---------------------------------------------------------------- float16 tensors computed through each compiler

PROGRAM = r"""
import json, sys
import numpy as np
from minigrad import Tensor, Device, dtypes
device = Device["CPU"]
words = lambda t: t.numpy().view(np.uint16).tolist()
a, b, c, d = (np.array(x, dtype=np.uint16).view(np.float16) for x in json.loads(sys.stdin.read()))
f32 = a.astype(np.float32) * 1.0009765625 + b.astype(np.float32) * 2**-14   # between float16 values: rounding to do
ints = np.arange(-2100, 2100, 7, dtype=np.int32)
ta, tb, tc = Tensor(a), Tensor(b), Tensor(c)
out = {
  "mode": device.renderer.float16_mode, "flags": device.compiler.flags,
  "add": words(ta + tb), "mul": words(ta * tb), "mul_add": words(ta * tb + tc), "div": words(ta / tb),
  "to_float32": ta.cast(dtypes.float32).numpy().view(np.uint32).tolist(),
  "from_float32": words(Tensor(f32).cast(dtypes.float16)),
  "to_int32": ta.clip(-60000, 60000).cast(dtypes.int32).numpy().tolist(),
  "from_int32": words(Tensor(ints).cast(dtypes.float16)),
  "where": words((ta < tb).where(ta, Tensor.full(a.shape, 0.1, dtype=dtypes.float16))),
  "sum": words(Tensor(d).reshape(-1, 64).sum(axis=1)),
}
print(json.dumps(out))
"""


def float16_inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """a, b, c: operands that round: random halves of every size, subnormals, ties, overflow past 65504, NaN, infs and
  zeros. d: rows of 64 sixteenths below 64 in magnitude, whose float32 sums are exact (so any summation order gives
  the same float16)."""
  rng = np.random.default_rng(3)
  random = rng.integers(0, 1 << 16, 4096, dtype=np.uint32).astype(np.uint16).view(np.float16)
  special = np.array([0, -0.0, 1, -1, 65504, -65504, np.inf, -np.inf, np.nan, 6e-8, -6e-8, 6.1e-5, 2048, 2049, 0.5, 1.5,
                      2**-24, 2**-14, 1000, 300], dtype=np.float16)
  a = np.concatenate([random, special, special[::-1], rng.standard_normal(960).astype(np.float16)])
  b = np.concatenate([rng.permutation(random), special[::-1], special, (rng.standard_normal(960) * 100).astype(np.float16)])
  c = np.concatenate([rng.permutation(random), special, special, rng.standard_normal(960).astype(np.float16)])
  d = ((np.arange(4096) * 37 % 2001 - 1000) / 16).astype(np.float16)
  return a, b, c, d


def same_float16(got: list[int], expected: np.ndarray, what: str) -> None:
  got_words = np.array(got, dtype=np.uint16)
  expected_words = expected.astype(np.float16).view(np.uint16)
  both_nan = np.isnan(got_words.view(np.float16)) & np.isnan(expected_words.view(np.float16))
  wrong = (got_words != expected_words) & ~both_nan
  assert not wrong.any(), f"{what}: {wrong.sum()} differ, e.g. got {got_words.view(np.float16)[wrong][:4]} expected {expected_words.view(np.float16)[wrong][:4]}"


def variants() -> list[tuple[str, str]]:
  """(compiler, CC): each installed compiler as it comes, and on x86 also without the CPU's half arithmetic (the
  common CPU: gcc's own _Float16, clang 14's F16C words) and without F16C (the portable bit code)."""
  return [("gcc", "gcc"), ("clang", "clang"), ("gcc", "gcc -mno-avx512fp16"), ("clang", "clang -mno-avx512fp16"),
          ("clang", "clang -mno-avx512fp16 -mno-f16c"), ("gcc", "gcc -mno-avx512fp16 -mno-f16c")]


def run_with(cc: str, program: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess:
  """`program` in a new process whose CPU device compiles with `cc` (on CPU, whatever device the suite runs on)."""
  environment = {**os.environ, "CC": cc, "DEV": "CPU", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), **env}
  return subprocess.run([sys.executable, "-c", program], input=stdin, capture_output=True, text=True, env=environment, cwd=REPO, timeout=600)


@pytest.mark.parametrize("compiler,cc", variants(), ids=[cc.replace(" ", "") for _, cc in variants()])
def test_float16_tensors_equal_numpy(compiler: str, cc: str):
  installed(compiler)
  extra = cc.split()[1:]
  if extra and not (X86 and takes_flags(compiler, *extra)): pytest.skip(f"{compiler} here doesn't take {' '.join(extra)}")
  a, b, c, d = float16_inputs()
  result = run_with(cc, PROGRAM, json.dumps([x.view(np.uint16).tolist() for x in (a, b, c, d)]))
  assert result.returncode == 0, result.stderr[-3000:]
  got = json.loads(result.stdout.strip().splitlines()[-1])
  # the path each variant is there to exercise, from the compiler's version and the CPU's flags (not from the probe)
  version, flags = major_version(compiler), target_features(compiler)
  half_arithmetic = "avx512fp16" in flags and "-mno-avx512fp16" not in extra
  has_float16 = (version >= 12 if compiler == "gcc" else version >= 15 or half_arithmetic) if X86 else True
  has_f16c = X86 and "f16c" in flags and "-mno-f16c" not in extra
  expected_mode = "native" if has_float16 and not half_arithmetic else "f16c" if has_f16c else "bits"
  assert got["mode"] == expected_mode, (got["mode"], got["flags"])
  with np.errstate(all="ignore"):
    f32 = a.astype(np.float32) * np.float32(1.0009765625) + b.astype(np.float32) * np.float32(2**-14)
    same_float16(got["add"], a + b, "a + b")
    same_float16(got["mul"], a * b, "a * b")
    same_float16(got["mul_add"], (a * b) + c, "a * b + c, rounded after each op")
    same_float16(got["div"], a / b, "a / b")
    same_float16(got["from_float32"], f32.astype(np.float16), "float32 -> float16")
    same_float16(got["from_int32"], np.arange(-2100, 2100, 7, dtype=np.int32).astype(np.float16), "int32 -> float16")
    same_float16(got["where"], np.where(a < b, a, np.float16(0.1)), "where with a float16 constant")
    same_float16(got["sum"], d.astype(np.float32).reshape(-1, 64).sum(axis=1), "sum")
    widened = np.array(got["to_float32"], dtype=np.uint32)
    expected = a.astype(np.float32).view(np.uint32)
    nan = np.isnan(a)
    assert np.array_equal(widened[~nan], expected[~nan]) and np.isnan(widened[nan].view(np.float32)).all()
    clipped = np.clip(a, -60000, 60000)
    keep = ~np.isnan(clipped)
    assert np.array_equal(np.array(got["to_int32"])[keep], clipped[keep].astype(np.int32))


# ---------------------------------------------------------------- compilers without what kernels use

def test_compiler_without_any_float16_says_so(tmp_path):
  fake = fake_compiler(tmp_path, "nohalfcc", ["_Float16", "half_to_float"], version="[nohalfcc 9.9.9]")
  answers = CCompiler(fake).capabilities
  assert not answers.float16 and not answers.half_bits and not answers.f16c and float16_mode(answers) is None
  program = ("import numpy as np\nfrom minigrad import Tensor, dtypes\n"
             "print((Tensor(np.arange(4, dtype=np.float32)) * 2).numpy().tolist())\n"   # float32 kernels still compile
             "(Tensor(np.arange(4, dtype=np.float16)) + 1).numpy()\n")
  result = run_with(fake, program, DISABLE_COMPILER_CACHE="1")
  assert result.returncode != 0 and "[0.0, 2.0, 4.0, 6.0]" in result.stdout
  # the exception's line (notes naming the kernel's ops and lines follow it: minigrad/viz/errors.py)
  error = next(line for line in reversed(result.stderr.splitlines()) if re.match(r"[\w.]+(Error|Exception): ", line))
  assert "float16" in error and fake in error and "[nohalfcc 9.9.9]" in error and "_Float16" in error, error


def test_compiler_without_vector_extensions_gets_scalar_kernels(tmp_path):
  fake = fake_compiler(tmp_path, "novectorcc", ["vector_size"])
  answers = CCompiler(fake).capabilities
  assert not answers.vector_extensions and not answers.shufflevector and answers.half_bits
  program = ("import numpy as np\nfrom minigrad import Tensor, Device\n"
             "rng = np.random.default_rng(1)\n"
             "a, b = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((48, 40)).astype(np.float32)\n"
             "np.testing.assert_allclose((Tensor(a) @ Tensor(b)).relu().numpy(), np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)\n"
             "np.testing.assert_allclose(Tensor(a).softmax(1).numpy(), np.exp(a) / np.exp(a).sum(1, keepdims=True), rtol=1e-5, atol=1e-6)\n"
             "print(Device['CPU'].renderer.vector_lanes)\n")
  result = run_with(fake, program, DISABLE_COMPILER_CACHE="1")
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.split() == ["False"]
