"""Target: what generated CPU code may assume about the machine it runs on (DESIGN.md, decision 7).

Input: the C compiler's argv (the one the CPU device compiles with), $CPU_TARGET, and, for the host, /proc/cpuinfo and
sysfs. Output: a frozen `Target` (architecture, -march name, ISA features, vector bytes, vector registers, cache sizes,
cores) whose `key` names what compiled code assumes, for the cache keys of binaries, rendered kernels and BEAM results.

The ISA features come from the compiler itself: `<cc> -march=<march> -dM -E -x c - </dev/null` lists the macros it
predefines (__AVX2__, __AVX512F__, __ARM_NEON ...), so the features a Target names are exactly those the compiler's
flags let the code use. `CPU_TARGET=native|x86-64-v4|x86-64-v3|x86-64-v2|x86-64|<any -march name the compiler accepts>`
picks the march (native by default). A Target the host cannot run (CPU_TARGET=x86-64-v4 on an AVX2 CPU) may compile;
`ensure_runnable` refuses to run its kernels.

This is the one module that reads /proc/cpuinfo (`cpu_model`, `cpu_halves_wide_vectors`, the host's flags). It sits
low in the stack: runtime/ and codegen/ import it; it imports them only inside functions (the default C compiler,
the disk cache's entry format).

Documented caches: `_targets` (probed Targets by compiler argv and march, for this process), the probes' answers on
disk in the "cpu_targets" folder of minigrad.cache, and the functools caches of the host's cpuinfo and sysfs facts.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Sequence
import functools
import hashlib
import json
import os
import pathlib
import platform
import shutil
import subprocess
from minigrad import cache
from minigrad.helpers import DEBUG

# ---------------------------------------------------------------- ISA features: macro -> feature -> /proc/cpuinfo flag

# (predefined macro, feature name as LLVM spells it, the flag /proc/cpuinfo shows for it). The features are those a
# compiler may use in code it generates or that kernels test for; LLVM's spelling lets the LLVM device pass them as is.
X86_FEATURES: tuple[tuple[str, str, str], ...] = (
  ("__SSE__", "sse", "sse"), ("__SSE2__", "sse2", "sse2"), ("__SSE3__", "sse3", "pni"), ("__SSSE3__", "ssse3", "ssse3"),
  ("__SSE4_1__", "sse4.1", "sse4_1"), ("__SSE4_2__", "sse4.2", "sse4_2"), ("__SSE4A__", "sse4a", "sse4a"),
  ("__POPCNT__", "popcnt", "popcnt"), ("__LZCNT__", "lzcnt", "abm"), ("__BMI__", "bmi", "bmi1"), ("__BMI2__", "bmi2", "bmi2"),
  ("__MOVBE__", "movbe", "movbe"), ("__PRFCHW__", "prfchw", "3dnowprefetch"), ("__LAHF_SAHF__", "sahf", "lahf_lm"),
  ("__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16", "cx16", "cx16"), ("__XSAVE__", "xsave", "xsave"),
  ("__AVX__", "avx", "avx"), ("__AVX2__", "avx2", "avx2"), ("__FMA__", "fma", "fma"), ("__FMA4__", "fma4", "fma4"),
  ("__XOP__", "xop", "xop"), ("__F16C__", "f16c", "f16c"), ("__AES__", "aes", "aes"), ("__PCLMUL__", "pclmul", "pclmulqdq"),
  ("__VAES__", "vaes", "vaes"), ("__VPCLMULQDQ__", "vpclmulqdq", "vpclmulqdq"), ("__GFNI__", "gfni", "gfni"),
  ("__SHA__", "sha", "sha_ni"), ("__ADX__", "adx", "adx"), ("__RDRND__", "rdrnd", "rdrand"), ("__RDSEED__", "rdseed", "rdseed"),
  ("__AVX512F__", "avx512f", "avx512f"), ("__AVX512CD__", "avx512cd", "avx512cd"), ("__AVX512DQ__", "avx512dq", "avx512dq"),
  ("__AVX512BW__", "avx512bw", "avx512bw"), ("__AVX512VL__", "avx512vl", "avx512vl"),
  ("__AVX512IFMA__", "avx512ifma", "avx512ifma"), ("__AVX512VBMI__", "avx512vbmi", "avx512vbmi"),
  ("__AVX512VBMI2__", "avx512vbmi2", "avx512_vbmi2"), ("__AVX512VNNI__", "avx512vnni", "avx512_vnni"),
  ("__AVX512BITALG__", "avx512bitalg", "avx512_bitalg"), ("__AVX512VPOPCNTDQ__", "avx512vpopcntdq", "avx512_vpopcntdq"),
  ("__AVX512BF16__", "avx512bf16", "avx512_bf16"), ("__AVX512FP16__", "avx512fp16", "avx512_fp16"),
  ("__AVX512VP2INTERSECT__", "avx512vp2intersect", "avx512_vp2intersect"), ("__AVXVNNI__", "avxvnni", "avx_vnni"),
  ("__AVXIFMA__", "avxifma", "avx_ifma"), ("__AVXVNNIINT8__", "avxvnniint8", "avx_vnni_int8"),
  ("__AVXNECONVERT__", "avxneconvert", "avx_ne_convert"), ("__AMX_TILE__", "amx-tile", "amx_tile"),
  ("__AMX_INT8__", "amx-int8", "amx_int8"), ("__AMX_BF16__", "amx-bf16", "amx_bf16"), ("__AMX_FP16__", "amx-fp16", "amx_fp16"),
)
AARCH64_FEATURES: tuple[tuple[str, str, str], ...] = (
  ("__ARM_NEON", "neon", "asimd"), ("__ARM_FEATURE_FP16_VECTOR_ARITHMETIC", "fullfp16", "asimdhp"),
  ("__ARM_FEATURE_DOTPROD", "dotprod", "asimddp"), ("__ARM_FEATURE_MATMUL_INT8", "i8mm", "i8mm"),
  ("__ARM_FEATURE_BF16_VECTOR_ARITHMETIC", "bf16", "bf16"), ("__ARM_FEATURE_QRDMX", "rdm", "asimdrdm"),
  ("__ARM_FEATURE_SVE", "sve", "sve"), ("__ARM_FEATURE_SVE2", "sve2", "sve2"), ("__ARM_FEATURE_CRC32", "crc", "crc32"),
  ("__ARM_FEATURE_ATOMICS", "lse", "atomics"), ("__ARM_FEATURE_AES", "aes", "aes"), ("__ARM_FEATURE_SHA2", "sha2", "sha2"),
)
# the architecture, by the macro the compiler defines for it
ARCH_MACROS: tuple[tuple[str, str], ...] = (("__x86_64__", "x86_64"), ("__aarch64__", "aarch64"), ("__i386__", "i386"),
                                            ("__riscv", "riscv64"), ("__powerpc64__", "ppc64le"), ("__arm__", "arm"))
X86_ARCHS = ("x86_64", "i386")

DEFAULT_L1D, DEFAULT_L2, DEFAULT_L3 = 32 << 10, 1 << 20, 8 << 20   # bytes: what a Target not of the host assumes
EXAMPLE_MARCHES = {"x86_64": "native, x86-64-v4, x86-64-v3, x86-64-v2, x86-64, or another -march name the C compiler "
                             "accepts (haswell, skylake-avx512, znver3, ...)",
                   "aarch64": "native, armv8-a, armv8.2-a+fp16+dotprod, or another -march name the C compiler accepts"}
PROBE_TIMEOUT_S = 120.0


def feature_table(arch: str) -> tuple[tuple[str, str, str], ...]:
  """(macro, feature, cpuinfo flag) for the features minigrad knows on `arch`."""
  return X86_FEATURES if arch in X86_ARCHS else AARCH64_FEATURES if arch == "aarch64" else ()


# ---------------------------------------------------------------- the Target

@dataclass(frozen=True)
class Target:
  """What generated CPU code may assume. Built by `cpu_target()` for this process, or by hand (tests describe CPUs
  they don't run on): `Target("x86_64", "haswell", frozenset({"avx", "avx2", "fma"}))`.

  `features` are ISA extensions as LLVM spells them ("sse4.2", "avx2", "avx512f", "avx512vnni", "neon" ...); cache
  sizes are the host's (sysfs) when the Target is the host's, else conservative defaults; `halves_wide_vectors` (the
  CPU runs a 64-byte vector as two 32-byte halves: AMD family 25) only means something for the host. `model` is the
  CPU's name, for reports only: it is never part of a key ("AMD EPYC" names an AVX2 Zen 3 and an AVX-512 Zen 5)."""
  arch: str
  march: str = "native"
  features: frozenset[str] = frozenset()
  l1d_bytes: int = DEFAULT_L1D
  l2_bytes: int = DEFAULT_L2
  l3_bytes: int = DEFAULT_L3
  cores: int = 1
  halves_wide_vectors: bool = False
  cache_line_bytes: int = 64
  model: str = field(default="", compare=False)

  def __post_init__(self) -> None:
    if not isinstance(self.features, frozenset): object.__setattr__(self, "features", frozenset(self.features))

  @property
  def vector_bytes(self) -> int:
    """The widest SIMD register: 64 bytes with AVX-512F, 32 with AVX/AVX2, else 16 (SSE2, NEON)."""
    if self.arch in X86_ARCHS:
      if "avx512f" in self.features: return 64
      if "avx" in self.features: return 32
    return 16

  @property
  def vector_registers(self) -> int:
    """SIMD registers the code may use: 32 with AVX-512F, else 16 on x86; 32 on aarch64 (and other RISC targets)."""
    if self.arch in X86_ARCHS: return 32 if "avx512f" in self.features else 16
    return 32

  @property
  def key(self) -> str:
    """What compiled code assumes, for cache keys: "<arch>:<march>:<sorted features, comma-separated>"."""
    return f"{self.arch}:{self.march}:{','.join(sorted(self.features))}"

  @property
  def tuning_key(self) -> str:
    """`key` and every other fact policy may read (vectors, registers, caches, cores, halved vectors): for caches of
    choices made from the Target (rendered kernels), which must not be reused where those facts differ."""
    return (f"{self.key}|vector={self.vector_bytes}|registers={self.vector_registers}|l1d={self.l1d_bytes}|"
            f"l2={self.l2_bytes}|l3={self.l3_bytes}|line={self.cache_line_bytes}|cores={self.cores}|"
            f"halves={int(self.halves_wide_vectors)}")

  def missing_on(self, host_features: frozenset[str]) -> frozenset[str]:
    """The features this Target's code may use that a CPU with `host_features` lacks."""
    return self.features - host_features

  def summary(self) -> str:
    """One line for reports and benchmarks."""
    kib = lambda n: f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
    return (f"{self.arch} -march={self.march}: {self.vector_bytes}-byte vectors, {self.vector_registers} vector registers, "
            f"L1d {kib(self.l1d_bytes)}, L2 {kib(self.l2_bytes)}, L3 {kib(self.l3_bytes)}, {self.cores} cores"
            f"{', wide vectors in halves' if self.halves_wide_vectors else ''}; {' '.join(sorted(self.features)) or 'baseline ISA'}")


# ---------------------------------------------------------------- the host, from /proc/cpuinfo and sysfs

@functools.cache
def _cpuinfo() -> dict[str, str]:
  """The first CPU's fields in /proc/cpuinfo (Linux), else none."""
  fields: dict[str, str] = {}
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if not line.strip():
          if fields: break   # the first CPU's fields are enough
          continue
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
  except OSError: pass
  return fields


def cpu_model() -> str:
  """The CPU's model name (from /proc/cpuinfo on Linux), for benchmark reports. Not for cache keys: see Target.key."""
  return _cpuinfo().get("model name") or platform.processor() or platform.machine()


def cpu_halves_wide_vectors() -> bool:
  """Does the host CPU run a 64-byte SIMD vector as two 32-byte halves? AMD family 25 (Zen 3, Zen 4) does; then rows
  of memory stream faster as 32-byte vectors (see heuristics rule 5)."""
  return _cpuinfo().get("vendor_id") == "AuthenticAMD" and _cpuinfo().get("cpu family") == "25"


def cpuinfo_flags() -> frozenset[str]:
  """The host CPU's flags as /proc/cpuinfo lists them ("flags" on x86, "Features" on aarch64); empty elsewhere."""
  info = _cpuinfo()
  return frozenset((info.get("flags") or info.get("Features") or "").split())


def host_features(cc: Sequence[str] | None = None) -> frozenset[str]:
  """The ISA features of the CPU this process runs on: /proc/cpuinfo's flags named as Target features; without a
  /proc/cpuinfo, what the C compiler finds for -march=native."""
  flags = cpuinfo_flags()
  if not flags: return host_target(cc).features
  return frozenset(feature for _, feature, flag in feature_table(platform.machine()) if flag in flags)


def _host_identity() -> str | None:
  """The host CPU's identity for the disk cache of -march=native probes: vendor, family, model, stepping and every
  flag (the model name alone would mistake one AMD EPYC for another). None without a /proc/cpuinfo."""
  info = _cpuinfo()
  if not info: return None
  names = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags", "CPU implementer", "CPU architecture",
           "CPU variant", "CPU part", "CPU revision", "Features")
  return json.dumps([platform.machine()] + [info.get(name, "") for name in names])


def _size_bytes(text: str) -> int | None:
  """sysfs cache sizes: "48K", "2048K", "32M"."""
  text = text.strip().upper()
  scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
  try: return int(text.rstrip("KMG")) * scale
  except ValueError: return None


@functools.cache
def host_cache_sizes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> tuple[int, int, int]:
  """(L1 data, L2, L3) bytes of the host's first CPU from sysfs; a level sysfs doesn't show gets the default."""
  found: dict[str, int] = {}
  for index in sorted(pathlib.Path(root).glob("index*")):
    try: level, kind, size = ((index / name).read_text().strip() for name in ("level", "type", "size"))
    except OSError: continue
    name = {"1": "l1d" if kind == "Data" else None, "2": "l2", "3": "l3"}.get(level)
    if name is not None and kind != "Instruction" and (nbytes := _size_bytes(size)): found.setdefault(name, nbytes)
  return found.get("l1d", DEFAULT_L1D), found.get("l2", DEFAULT_L2), found.get("l3", DEFAULT_L3)


def host_cores() -> int:
  """The CPUs this process may run on."""
  try: return len(os.sched_getaffinity(0))
  except (AttributeError, OSError): return os.cpu_count() or 1


# ---------------------------------------------------------------- asking the compiler

def march_flag_candidates(march: str) -> tuple[tuple[str, ...], ...]:
  """How the C compiler is told to target `march`, in order of preference. native: -march=native (gcc; clang on x86),
  -mcpu=native (clang before 15 rejects -march=native on aarch64), else nothing (the compiler's default target)."""
  if march == "native": return (("-march=native",), ("-mcpu=native",), ())
  return ((f"-march={march}",),)


def requested_march() -> str:
  """$CPU_TARGET, else "native"."""
  return os.environ.get("CPU_TARGET", "").strip() or "native"


@functools.cache
def _default_compiler(cc_env: str | None) -> tuple[str, ...]:
  from minigrad.runtime.ops_cpu import find_c_compiler   # the CPU device's compiler; imported when first asked
  return tuple(find_c_compiler()[0])


def _run_preprocessor(argv: tuple[str, ...], flags: tuple[str, ...]) -> tuple[int, str]:
  """(exit code, output) of `<argv> <flags> -dM -E -x c -` on empty input: the macros the compiler predefines."""
  try:
    result = subprocess.run([*argv, *flags, "-dM", "-E", "-x", "c", "-"], input="", capture_output=True, text=True,
                            timeout=PROBE_TIMEOUT_S)
  except subprocess.TimeoutExpired:
    raise RuntimeError(f"the C compiler ({' '.join(argv)}) did not list its macros within {PROBE_TIMEOUT_S} s") from None
  except OSError as e: raise RuntimeError(f"could not run the C compiler ({' '.join(argv)}): {e}") from None
  return result.returncode, result.stdout if result.returncode == 0 else result.stderr + result.stdout


def _isa_of(macros: set[str]) -> tuple[str, list[str]]:
  """(architecture, sorted features) from the names of the predefined macros."""
  arch = next((name for macro, name in ARCH_MACROS if macro in macros), platform.machine())
  return arch, sorted(feature for macro, feature, _ in feature_table(arch) if macro in macros)


def _probe_isa(argv: tuple[str, ...], march: str) -> tuple[str, list[str]]:
  """Ask the compiler which ISA `-march=<march>` means. An unknown march is a ValueError naming it."""
  errors = []
  for flags in march_flag_candidates(march):
    returncode, output = _run_preprocessor(argv, flags)
    if returncode == 0:
      return _isa_of({line.split()[1].split("(")[0] for line in output.splitlines()
                      if line.startswith("#define ") and len(line.split()) > 1})
    errors.append(next((line.strip() for line in output.splitlines() if "error" in line), output.strip()[:200]))
  if march != "native" and march in errors[0]:
    raise ValueError(f"CPU_TARGET={march!r} is not a CPU the C compiler ({' '.join(argv)}) knows ({errors[0]}); valid "
                     f"examples: {EXAMPLE_MARCHES.get(platform.machine(), 'native, or a -march name the C compiler accepts')}")
  raise RuntimeError(f"the C compiler ({' '.join(argv)}) could not list its macros for -march={march}: {'; '.join(errors)}")


def _probe_path(argv: tuple[str, ...], march: str) -> pathlib.Path | None:
  """Where the answer for (compiler, march) is kept on disk: named by the compiler's command and executable (path,
  size, time: a reinstall is asked anew), the march, the host CPU's identity when the march is native, and the
  tables above. None when it can't be cached (the cache is off, or native on a host without /proc/cpuinfo)."""
  if not cache.enabled(): return None
  host = _host_identity() if march == "native" else ""
  if host is None: return None
  executable = os.path.realpath(shutil.which(argv[0]) or argv[0])
  try: stat = os.stat(executable)
  except OSError: return None
  tables = repr((X86_FEATURES, AARCH64_FEATURES, ARCH_MACROS, march_flag_candidates(march)))
  key = json.dumps([list(argv), executable, stat.st_size, stat.st_mtime_ns, march, host, tables])
  return cache.entry("cpu_targets", hashlib.sha256(key.encode()).hexdigest())


def _isa(argv: tuple[str, ...], march: str) -> tuple[str, list[str]]:
  """(architecture, features) of `-march=<march>` for the compiler `argv`: from disk, else asked."""
  path = _probe_path(argv, march)
  if path is not None and (cached := cache.read(path, "CPU target")) is not None:
    try:
      arch, features = json.loads(cached)
      if isinstance(arch, str) and all(isinstance(f, str) for f in features): return arch, list(features)
    except (ValueError, TypeError): pass   # another format: asked again
  arch, features = _probe_isa(argv, march)
  if path is not None: cache.write(path, json.dumps([arch, features]).encode(), "CPU target")
  return arch, features


# the documented in-process cache: (compiler argv, march) -> its Target
_targets: dict[tuple[tuple[str, ...], str], Target] = {}


def cpu_target(cc: Sequence[str] | None = None, march: str | None = None) -> Target:
  """The Target CPU code is compiled for: `march` (default $CPU_TARGET, else native) as the C compiler `cc` (its argv;
  default: the CPU device's compiler) understands it. Raises ValueError for a march the compiler doesn't know."""
  march = march or requested_march()
  argv = tuple(cc) if cc is not None else _default_compiler(os.environ.get("CC"))
  if (found := _targets.get((argv, march))) is not None: return found
  arch, features = _isa(argv, march)
  is_host = march == "native"
  l1d, l2, l3 = host_cache_sizes() if is_host else (DEFAULT_L1D, DEFAULT_L2, DEFAULT_L3)
  target = Target(arch, march, frozenset(features), l1d, l2, l3, host_cores(), is_host and cpu_halves_wide_vectors(),
                  model=cpu_model() if is_host else march)
  if DEBUG >= 2: print(f"CPU target: {target.summary()}")
  _targets[(argv, march)] = target
  return target


def host_target(cc: Sequence[str] | None = None) -> Target:
  """The Target of this CPU (-march=native) as the C compiler `cc` (default: the CPU device's) sees it."""
  return cpu_target(cc, "native")


def ensure_runnable(target: Target) -> None:
  """Raise a RuntimeError when this CPU lacks features `target`'s code may use (its kernels would crash with an
  illegal instruction). Compiling for such a Target is fine; running its kernels is not. native always runs."""
  if target.march == "native": return
  if missing := target.missing_on(host_features()):
    raise RuntimeError(f"CPU_TARGET={target.march} code can't run on this CPU ({cpu_model()}): it lacks "
                       f"{', '.join(sorted(missing))}. Compile for a narrower target (CPU_TARGET=native, or x86-64-v3 "
                       f"for AVX2 CPUs) to run here; compiling for {target.march} alone is fine.")
