"""Codegen and DEBUG output: kernel names, generated C, the DEBUG levels, and compiler failures."""
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import numpy as np
import pytest
from minigrad import Tensor
from minigrad.codegen.kernel import Kernel
from minigrad.engine.realize import get_kernel
from minigrad.engine import realize
from minigrad.runtime import ops_cpu
from minigrad.runtime.device import CompileError, Compiler, Device
from minigrad.target import cpu_target
from minigrad.uop.ops import Ops

SCRIPT = """
import numpy as np
from minigrad import Tensor
x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
y = Tensor(np.ones((4, 5), dtype=np.float32))
print("RESULT", ((x @ y).relu() + 1).numpy().sum())
"""


def run_script(env_extra, tmp_path, script=SCRIPT):
  env = {**os.environ, "MINIGRAD_CACHE": str(tmp_path), **env_extra}
  return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)


# ---- what a kernel's C becomes on this host ----
# The C renderer writes each SIMD helper with an x86 branch under `#if defined(__x86_64__) && defined(<macro>)` (the
# AVX-512 instructions for 16 float32 lanes, AVX's for 8) and a portable one after `#else`: both are in the source on
# every host, so a test asserts on the branch the compiler takes (the source preprocessed with the CPU device's
# compiler and flags) and on the instructions it built (the shared object disassembled), never on the source text.
# The lanes are the CPU device's Target's (CPU_TARGET): 16 with AVX-512, 8 with AVX2, 4 on the SSE2 baseline.

X86_64 = platform.machine().lower() in ("x86_64", "amd64")
LANES = cpu_target().vector_bytes // 4   # float32 lanes of the CPU device's kernels


def simd_helpers(lanes: int) -> dict[str, tuple[str | None, str, str | None, str]]:
  """helper kind -> (the macro its x86 branch needs (None: it has none), a regex its x86 branch's body matches, a
  line only its portable branch has (None: the portable code is also the x86 branch's fallback), a regex of the
  built x86 branch's instruction) for helpers on `lanes` float32 lanes. Without wide vectors only the square root."""
  if lanes == 16:
    avx512, zmm = r"\b_mm512_|__builtin_ia32_", r"\s[^\n]*%zmm"
    return {"exp2f": ("__AVX512F__", avx512, "out[i] = exp2f(x[i]);", "vscalefps" + zmm),
            "scalef": ("__AVX512F__", avx512, "<< 23", "vscalefps" + zmm),
            "floorf": ("__AVX512F__", avx512, "out[i] = floorf(x[i]);", "vrndscaleps" + zmm),
            "maxps": ("__AVX512F__", avx512, "mask_v16 m = a > b;", "vmaxps" + zmm),
            "minps": ("__AVX512F__", avx512, "mask_v16 m = a < b;", "vminps" + zmm),
            "sqrtf": ("__AVX512F__", avx512, "out[i] = sqrtf(x[i]);", "vsqrtps" + zmm),
            "stream_float": ("__AVX512F__", avx512, None, "vmovntps" + zmm)}
  if lanes == 8:
    avx, ymm = r"\b_mm256_|__builtin_ia32_", r"\s[^\n]*%ymm"
    return {"exp2f": ("__AVX2__", r"_ZGVdN8v_exp2f", "out[i] = exp2f(x[i]);", r"call\s[^\n]*_ZGVdN8v_exp2f"),
            "scalef": (None, "", "<< 23", ""),   # AVX has no scalef: the exponent bits, as the graph built them
            "floorf": ("__AVX__", avx, "out[i] = floorf(x[i]);", "vroundps" + ymm),
            "maxps": ("__AVX__", avx, "mask_v8 m = a > b;", "vmaxps" + ymm),
            "minps": ("__AVX__", avx, "mask_v8 m = a < b;", "vminps" + ymm),
            "sqrtf": ("__AVX__", avx, "out[i] = sqrtf(x[i]);", "vsqrtps" + ymm),
            "stream_float": ("__AVX__", avx, None, "vmovntps" + ymm)}
  if lanes == 4: return {"sqrtf": ("__SSE__", r"\b_mm_", "out[i] = sqrtf(x[i]);", r"sqrtps\s[^\n]*%xmm")}
  return {}


HOST_AND_NO_AVX512 = [pytest.param((), id="host"),
                      pytest.param(("-mno-avx512f",), id="no_avx512", marks=pytest.mark.skipif(not X86_64, reason="an x86 flag"))]


@pytest.fixture
def cpu_compiler(request, monkeypatch) -> Compiler:
  """The compiler the CPU device builds kernels with in this test: its own, or (indirect parameter: extra flags) the
  same compiler with those flags added, installed on the device with an empty kernel cache."""
  extra = getattr(request, "param", ())
  if not extra: return Device["CPU"].compiler
  compiler = ops_cpu.CCompiler(cc=shlex.join(Device["CPU"].compiler.argv), extra_flags=tuple(extra))
  monkeypatch.setattr(Device["CPU"], "compiler", compiler)
  monkeypatch.setattr(realize, "compiled_kernels", {})
  return compiler


def _compiler_command(compiler: Compiler) -> list[str]:
  return [*compiler.argv, *(flag for flag in compiler.flags if flag != "-shared")]


def target_macros(compiler: Compiler) -> set[str]:
  """The macros the compiler defines for its target with the CPU device's flags (`cc <flags> -dM -E -`)."""
  out = subprocess.run([*_compiler_command(compiler), "-dM", "-E", "-x", "c", "-"], input="", capture_output=True, text=True,
                       timeout=60, check=True)
  return {line.split()[1] for line in out.stdout.splitlines() if line.startswith("#define ")}


def takes_x86_branch(compiler: Compiler, macro: str | None) -> bool:
  macros = target_macros(compiler)
  return macro is not None and "__x86_64__" in macros and macro in macros


def preprocessed_function(compiler: Compiler, source: str, name: str) -> str:
  """The definition of the C function `name` in `source` as the compiler sees it after preprocessing (`cc <flags> -E`)."""
  text = subprocess.run([*_compiler_command(compiler), "-E", "-P", "-x", "c", "-"], input=source, capture_output=True, text=True,
                        timeout=60, check=True).stdout
  match = re.search(rf"\b{name}\([^()]*\)\s*\{{", text)
  assert match, f"no definition of {name} in the preprocessed source"
  depth = 0
  for end in range(match.end() - 1, len(text)):
    depth += {"{": 1, "}": -1}.get(text[end], 0)
    if depth == 0: return text[match.start():end + 1]
  raise AssertionError(f"unbalanced braces in {name}")


def disassembly(library: bytes, tmp_path) -> str:
  """`objdump -d` of a compiled kernel library (binutils comes with the C toolchain the CPU device needs)."""
  objdump = shutil.which("objdump")
  assert objdump, "objdump (binutils) is needed to read the instructions a kernel was built into"
  path = tmp_path / "kernel.so"
  path.write_bytes(library)
  return subprocess.run([objdump, "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True, timeout=60, check=True).stdout


def assert_helpers_built_for_the_target(source: str, compiler: Compiler, kinds, tmp_path) -> None:
  """The kernel calls each kind of helper on the Target's lanes (floorf -> floorf_v16 with AVX-512); each compiles to
  its x86 branch exactly when the compiler's target defines that branch's macro on x86-64 (else to its portable
  code), and the built library holds the branch's instruction in the first case and no register of that width in
  the second. Without wide vectors (the SSE2 baseline) the kernel calls none of them but the square root."""
  helpers = simd_helpers(LANES)
  code = disassembly(compiler.compile_cached(source), tmp_path)
  kernel = source[source.index("void "):]
  for kind in kinds:
    name = f"{kind}_v{LANES}"
    if kind not in helpers:
      assert f"{name}(" not in kernel, f"{name}: no helper expected on {LANES} lanes"
      continue
    assert f"{name}(" in kernel, f"the kernel doesn't call {name}"
    macro, fast_body, portable, instruction = helpers[kind]
    body = preprocessed_function(compiler, source, name)
    if takes_x86_branch(compiler, macro):
      assert re.search(fast_body, body) and (portable is None or portable not in body), body
      assert re.search(rf"\b{instruction}", code), f"{name}: no {instruction} in the built kernel"
    else:
      assert (macro is None or not re.search(fast_body, body)) and (portable is None or portable in body), body
      if macro == "__AVX512F__": assert "%zmm" not in code and "vscalefps" not in code and "vrndscaleps" not in code


def test_debug4_prints_fused_c_kernel_that_compiles(tmp_path):
  out = run_script({"DEBUG": "4", "DEV": "CPU"}, tmp_path)   # the C source, whatever DEV the suite runs on
  assert out.returncode == 0, out.stderr
  assert "void r_3_5_4(" in out.stdout                  # one fused reduce kernel, named by its loop sizes
  assert "for (long ridx0 = 0; ridx0 < 4; ridx0++)" in out.stdout
  assert "RESULT 345.0" in out.stdout                    # sum(relu(x@1)+1) = 5*(6+22+38) + 15
  # the printed source is a complete C translation unit: compile it ourselves
  source = out.stdout[out.stdout.index("#include"):out.stdout.index("\n}\n") + 3]
  Device["CPU"].compiler.compile(source)


@pytest.mark.parametrize("level, expected, absent", [
  ("1", "r_3_5_4", "GFLOPS"),
  ("2", "GFLOPS", "#include"),
  ("3", "applied opts", "#include"),
  ("5", "DEFINE_ACC", None),
])
def test_debug_levels(tmp_path, level, expected, absent):
  out = run_script({"DEBUG": level}, tmp_path)
  assert out.returncode == 0, out.stderr
  assert expected in out.stdout
  if absent: assert absent not in out.stdout


def test_debug0_is_quiet(tmp_path):
  out = run_script({"DEBUG": "0"}, tmp_path)
  assert out.stdout.strip() == "RESULT 345.0"


def test_kernel_names_show_type_and_shape():
  x = Tensor(np.zeros((64, 32), np.float32))
  (item,) = (x.T + 1).schedule()
  assert Kernel(item.ast).name == "E_32_64"
  (item,) = (x + 1).schedule()
  assert Kernel(item.ast).name == "E_2048"                 # contiguous dims merge into one loop
  (item,) = x.sum(1).schedule()
  assert Kernel(item.ast).name == "r_64_32"


def test_generated_source_reads_well(tmp_path):
  x = Tensor(np.zeros((8, 16), np.float32))
  (item,) = (x.relu() * 2 + 1).exp().schedule()
  src = get_kernel(item.ast, "CPU").source
  assert src.count("for (long gidx") == 1 and "ridx" not in src
  assert "const float* restrict data1" in src
  assert_helpers_built_for_the_target(src, Device["CPU"].compiler, ["scalef"], tmp_path)   # exp's scaling by 2**n


def test_compile_error_shows_source():
  bad = "void broken(float* restrict data0) { data0[0] = ; }"
  with pytest.raises(CompileError) as err:
    Device["CPU"].compiler.compile(bad)
  assert "data0[0] = ;" in str(err.value) and "error" in str(err.value)


def test_missing_c_compiler_is_a_clear_error(tmp_path):
  out = run_script({"CC": "/nonexistent/cc", "DISABLE_COMPILER_CACHE": "1", "DEV": "CPU"}, tmp_path)
  assert out.returncode != 0
  assert "RuntimeError" in out.stderr and "/nonexistent/cc" in out.stderr
  assert "Segmentation" not in out.stderr


def test_debug2_prints_totals(tmp_path):
  out = run_script({"DEBUG": "2"}, tmp_path)
  assert "total: 1 kernels" in out.stdout


def test_renderer_bug_surfaces_as_compile_error_with_source(monkeypatch):
  renderer = Device["CPU"].renderer
  monkeypatch.setitem(type(renderer).code_for_op, Ops.MUL, lambda a, b, dt: f"({a}*)")
  monkeypatch.setattr(realize, "compiled_kernels", {})
  x = Tensor(np.ones((3, 3), np.float32), device="CPU")
  with pytest.raises(CompileError) as err:
    (x * 7 + 5).realize()
  assert "void E_9(" in str(err.value) and "*)" in str(err.value)


def test_out_of_bounds_kernel_is_refused_not_run():
  from minigrad.schedule.scheduler import ScheduleItem
  from minigrad.engine.realize import run_schedule
  x = Tensor(np.ones(16, np.float32))
  (item,) = (x + 1).schedule()
  small_input = Tensor(np.ones(4, np.float32)).uop.base      # the kernel reads 16 elements from a 4-element buffer
  with pytest.raises(RuntimeError, match="indexes data1 in \\[0, 15\\] but the buffer has 4 elements"):
    run_schedule([ScheduleItem(item.ast, (item.bufs[0], small_input))])


# ---- SIMD code for the whole elementwise surface (vectorize.py + the C renderer's vector spelling) ----

def kernel_body(t: Tensor) -> str:
  (item,) = t.schedule()
  source = get_kernel(item.ast, "CPU").source
  return source[source.index("void "):]


@pytest.mark.parametrize("cpu_compiler", HOST_AND_NO_AVX512, indirect=True)
def test_exp_is_all_simd_and_matches_numpy(cpu_compiler, tmp_path):
  x = np.array([-200, -104, -88.7, -20, -1, -1e-30, 0, 1e-30, 0.5, 1, 20, 88.7, 89, 100, np.nan, np.inf, -np.inf] * 4 + [3.0] * 60, np.float32)
  t = Tensor(x, device="CPU").exp()
  body = kernel_body(t)
  assert f"[{LANES - 1}]" not in body, body   # no per-lane code
  # floor, the clamps and the scaling by 2**n stay in vector registers: one AVX-512 instruction each where the
  # compiler targets AVX-512, the portable vector code otherwise
  (item,) = t.schedule()
  source = get_kernel(item.ast, "CPU").source
  assert_helpers_built_for_the_target(source, cpu_compiler, ("floorf", "scalef", "maxps", "minps"), tmp_path)
  with np.errstate(over="ignore"): np.testing.assert_allclose(t.numpy(), np.exp(x), rtol=2e-6)


@pytest.mark.parametrize("name, fn, ref", [
  ("floor", lambda t: t.floor(), np.floor),
  ("trunc", lambda t: t.trunc(), np.trunc),
  ("to_int32", lambda t: (t * 100).cast("int32") * 3 + 1, lambda x: (x * 100).astype(np.int32) * 3 + 1),
  ("int_shift_bitcast", lambda t: ((t.abs() * 10).cast("int32") + 127).bitwise_left_shift(23).bitcast("float32"),
   lambda x: (((np.abs(x) * 10).astype(np.int32) + 127) << 23).view(np.float32)),
  ("mask_to_float", lambda t: (t > 0).cast("float32") - (t < -1).cast("float32") * 2, lambda x: (x > 0).astype(np.float32) - (x < -1) * 2.0),
  ("where_int", lambda t: (t > 0).where((t * 4).cast("int32"), -7), lambda x: np.where(x > 0, (x * 4).astype(np.int32), -7)),
  ("max_int", lambda t: (t * 10).cast("int32").maximum((t * -7).cast("int32")), lambda x: np.maximum((x * 10).astype(np.int32), (x * -7).astype(np.int32))),
  ("mask_ne_mask", lambda t: ((t > 0) != (t < 2)).cast("int32"), lambda x: ((x > 0) != (x < 2)).astype(np.int32)),
])
def test_int_and_mask_lanes_are_simd(name, fn, ref):
  x = (np.random.default_rng(5).standard_normal(256) * 3).astype(np.float32)
  t = fn(Tensor(x))
  body = kernel_body(t)
  assert f"_v{LANES}" in body and f"[{LANES - 1}]" not in body, body   # one vector per LANES elements, no per-lane code
  np.testing.assert_array_equal(t.numpy(), ref(x))


def test_causal_mask_lanes_are_simd():
  # the causal mask compares the lane's column with the row: one int32 vector compare (column = base + lane), not
  # 16 compares gathered into a mask; selects on it, and on a row-wide condition, stay vector selects
  x = np.random.default_rng(6).standard_normal((64, 64)).astype(np.float32)
  row, column = Tensor.arange(64).reshape(64, 1), Tensor.arange(64).reshape(1, 64)
  t = (column <= row).where(Tensor(x), -np.inf).softmax(-1)
  for item in t.schedule():   # one kernel on CPU; GPU devices schedule the row max and sum apart (row reductions,
    source = get_kernel(item.ast, "CPU").source   # 8 lanes on CPUs that halve wide vectors: heuristics rule 5)
    last = max(int(w) for w in re.findall(r"_v(\d+)", source)) - 1
    assert last >= 7 and f"+{last})" not in source and f"[{last}]" not in source, source
  masked = np.where(np.tril(np.ones((64, 64), bool)), x, -np.inf)
  e = np.exp(masked - masked.max(1, keepdims=True))
  np.testing.assert_allclose(t.numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("cpu_compiler", HOST_AND_NO_AVX512, indirect=True)
def test_big_outputs_use_streaming_stores(monkeypatch, cpu_compiler, tmp_path):
  monkeypatch.setattr(Device["CPU"].renderer, "streaming_store_bytes", 4096)   # as if 4 KB outputs didn't fit the caches
  monkeypatch.setattr(realize, "compiled_kernels", {})
  x = np.random.default_rng(6).standard_normal((64, 48)).astype(np.float32)
  t = Tensor(x, device="CPU") * 3 + 1
  body = kernel_body(t)
  assert f"stream_float_v{LANES}(&data0[" in body, body
  # 64-byte streaming stores (vmovntps on zmm) where the compiler targets AVX-512, plain stores otherwise; the fence
  # after them on every x86-64 target, and nowhere else
  (item,) = t.schedule()
  source = get_kernel(item.ast, "CPU").source
  assert_helpers_built_for_the_target(source, cpu_compiler, ["stream_float"], tmp_path)
  code = disassembly(cpu_compiler.compile_cached(source), tmp_path)
  assert ("\tsfence" in code) == ("__x86_64__" in target_macros(cpu_compiler))
  if not takes_x86_branch(cpu_compiler, simd_helpers(LANES)["stream_float"][0]): assert "vmovnt" not in code
  np.testing.assert_allclose(t.numpy(), x * 3 + 1, rtol=1e-6, atol=1e-6)
  small = Tensor(x[:8]) * 3 + 1   # 1.5 KB: stays in the caches
  assert "stream_" not in kernel_body(small)
  np.testing.assert_allclose(small.numpy(), x[:8] * 3 + 1, rtol=1e-6, atol=1e-6)


# ---- index math the kernels above rely on (minigrad/uop/symbolic.py) ----

@pytest.mark.parametrize("build, expected", [
  (lambda g, l, y, k: (y + k * 35) % 34, lambda g, l, y, k: y + k),            # a padded sliding window's row
  (lambda g, l, y, k: (y + k * 35) // 34, lambda g, l, y, k: k),
  (lambda g, l, y, k: (g * 16 + l) % 32, lambda g, l, y, k: (g % 2) * 16 + l),  # a 16-lane split of a 32-wide panel
  (lambda g, l, y, k: (g * 16 + l) // 32, lambda g, l, y, k: g // 2),
])
def test_index_digits_simplify(build, expected):
  from minigrad.uop.ops import UOp
  g, l, y, k = UOp.variable("g", 0, 63), UOp.variable("l", 0, 15), UOp.variable("y", 0, 31), UOp.variable("k", 0, 2)
  assert build(g, l, y, k).simplify() is expected(g, l, y, k).simplify()
  for values in [(0, 0, 0, 0), (63, 15, 31, 2), (5, 9, 30, 1), (40, 3, 2, 2)]:   # the same numbers as Python ints give
    assert build(g, l, y, k).simplify().evaluate(dict(zip("glyk", values))) == build(*values)


@pytest.mark.parametrize("cpu_compiler", HOST_AND_NO_AVX512, indirect=True)
def test_simd_exp2_is_accurate_over_the_whole_float_range(cpu_compiler, tmp_path):
  x = np.concatenate([np.linspace(-160, 140, 20004), [np.inf, -np.inf, np.nan, 0, -0.0, 127.5, 128, -126.2, -149, -149.5, -151, 1e-30]])
  x = x.astype(np.float32)
  t = Tensor(x, device="CPU").exp2()
  (item,) = t.schedule()
  source = get_kernel(item.ast, "CPU").source
  # inline where the compiler targets AVX-512 (ending in vscalefps, no libm call), else libm's exp2f lane by lane
  assert_helpers_built_for_the_target(source, cpu_compiler, ["exp2f"], tmp_path)
  if takes_x86_branch(cpu_compiler, "__AVX512F__") and LANES == 16: assert "exp2f@" not in disassembly(cpu_compiler.compile_cached(source), tmp_path)
  out, exact = t.numpy(), np.exp2(x.astype(np.float64))
  with np.errstate(over="ignore"): nearest = exact.astype(np.float32)
  normal = (exact > 1.2e-38) & (exact < 3.4e38)
  assert (np.abs(out[normal] - exact[normal]) / np.spacing(nearest[normal])).max() <= 1.5
  tiny = exact <= 1.2e-38   # subnormal results: within one step of the smallest subnormal
  assert np.abs(out[tiny] - exact[tiny]).max() <= 1.5e-45
  special = ~(normal | tiny)
  np.testing.assert_array_equal(out[special], nearest[special])   # inf, nan, overflow


@pytest.mark.parametrize("cpu_compiler", HOST_AND_NO_AVX512, indirect=True)
def test_vector_sqrt_is_one_instruction_and_exact(cpu_compiler, tmp_path):
  # Adam's update takes the square root of every second moment: one x86 instruction per vector (clang 14 leaves the
  # portable loop over the lanes as scalar square roots), correctly rounded as sqrtf, NaN below zero
  x = np.concatenate([np.random.default_rng(3).random(264) * 100, [0.0, -0.0, -1, np.inf, -np.inf, np.nan, 1e-45, 3e38]])
  x = x.astype(np.float32)
  t = Tensor(x, device="CPU").sqrt()
  (item,) = t.schedule()
  assert_helpers_built_for_the_target(get_kernel(item.ast, "CPU").source, cpu_compiler, ["sqrtf"], tmp_path)
  with np.errstate(invalid="ignore"): expected = np.sqrt(x)
  np.testing.assert_array_equal(t.numpy(), expected)
  np.testing.assert_array_equal(np.signbit(t.numpy()), np.signbit(expected))


@pytest.mark.parametrize("cpu_compiler", HOST_AND_NO_AVX512, indirect=True)
def test_select_idioms_keep_nans_and_signed_zeros(cpu_compiler, tmp_path):
  x = np.array([-0.0, 0.0, -200, 200, np.nan, np.inf, -np.inf, 1, -1, 88.9, 89.1, -104, -103.9, 5, 6, 7], np.float32)
  y = np.array([0.0, -0.0, np.nan, 1, 2, np.nan, 0, 1, -2, 89, 89, -104, -0.0, 6, 6, -7], np.float32)
  for lo, hi in [(-104, 89), (0.0, 0.0), (-0.0, 1)]:
    t = Tensor(x, device="CPU").clamp(lo, hi)
    (item,) = t.schedule()   # vmaxps/vminps where the compiler targets AVX-512, the portable blends otherwise: same values
    assert_helpers_built_for_the_target(get_kernel(item.ast, "CPU").source, cpu_compiler, ("maxps", "minps"), tmp_path)
    out, ref = t.numpy(), np.clip(x, np.float32(lo), np.float32(hi))
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(ref))
  where = (Tensor(x, device="CPU") < Tensor(y, device="CPU")).where(Tensor(y, device="CPU"), Tensor(x, device="CPU"))   # (y > x) ? y : x, NaN on either side
  np.testing.assert_array_equal(where.numpy(), np.where(x < y, y, x))


def test_scalar_max_blends_and_keeps_nans():
  # a scalar float max that isn't a running max is spelled by max_float / max_double, which blend: gcc branches on
  # `(a!=a|a>b)?a:b`, and those branches mispredict on data. NaN on either side wins, as in torch.
  a = np.array([[1, np.nan, 3], [4, 5, -1], [-0.0, 0.0, -7], [np.nan, np.inf, -np.inf]], np.float32)
  b = np.array([[2, 1, np.nan], [4, -5, np.nan], [0.0, -0.0, 1], [0, np.nan, 2]], np.float32)
  for dtype in (np.float32, np.float64):
    for t, ref in [(Tensor(a.astype(dtype)).max(1).relu(), np.maximum(np.max(a, 1), 0)),   # the running max keeps its branch
                   (Tensor(a.astype(dtype)).maximum(Tensor(b.astype(dtype))), np.maximum(a, b))]:
      (item,) = t.schedule()
      source = get_kernel(item.ast, "CPU", []).source   # no opts: scalar code
      assert f"max_{'float' if dtype == np.float32 else 'double'}(" in source, source
      np.testing.assert_array_equal(t.numpy(), ref.astype(dtype))


def test_floor_and_power_of_two_idioms_match_their_plain_spelling():
  from minigrad.codegen.cpu_patterns import simd_idioms
  from minigrad.dtype import dtypes
  from minigrad.uop.ops import UOp, Ops
  x = np.array([-0.0, 0.0, -0.5, 0.5, -1.0, 1.5, -2.5, 1e30, -1e30, 8388609.0, np.inf, -np.inf, np.nan, -1e-45, 3.0, -3.7], np.float32)
  out = Tensor(x).floor().numpy()
  np.testing.assert_array_equal(out, np.floor(x))
  assert np.signbit(out[0]) and not np.signbit(out[1])   # floor(-0.0) stays -0.0
  # 2**n from exponent bits only becomes vscalefps when n is integral (scalef floors n, the bits truncate it)
  vec, ivec = dtypes.float32.vec(16), dtypes.int32.vec(16)
  n = UOp(Ops.DEFINE_VAR, vec, (), ("n", 0, 1))
  def scaled(exponent):
    bits = UOp(Ops.CAST, ivec, (exponent,)).alu(Ops.ADD, UOp.const(ivec, 127)).alu(Ops.SHL, UOp.const(ivec, 23))
    return n.alu(Ops.MUL, UOp(Ops.BITCAST, vec, (bits,)))
  integral, fractional = scaled(UOp(Ops.TRUNC, vec, (n,))), scaled(n)
  idioms = simd_idioms([integral, fractional])
  assert idioms.get(integral, ("",))[0] == "scalef_v16" and fractional not in idioms


def reduce_loops(t: Tensor) -> int:
  return sum(u.op is Ops.RANGE and u.arg[1] == "reduce" for item in t.schedule() for u in get_kernel(item.ast, item.device).uops)


@pytest.mark.parametrize("name", ["embedding", "gather", "getitem"])
def test_one_hot_picks_are_loads_not_loops(name):
  # sum_r (i == r) * x[r] is x[i]: one gated load per output, no loop over the table's rows
  from minigrad import nn
  rng = np.random.default_rng(0)
  table, idx = rng.standard_normal((300, 48)).astype(np.float32), rng.integers(0, 300, (4, 37)).astype(np.int32)
  if name == "embedding":
    emb = nn.Embedding(300, 48)
    emb.weight.assign(Tensor(table))
    t, expected = emb(Tensor(idx)), table[idx]
  elif name == "gather":
    cols = np.tile(idx[:1, :16].T % 48, (1, 48))   # (16, 48): out[i][j] = table[cols[i][j]][j]
    t, expected = Tensor(table).gather(0, Tensor(cols)), np.take_along_axis(table, cols, 0)
  else:
    t, expected = Tensor(table)[Tensor(idx[0])] * 2, table[idx[0]] * 2
  assert reduce_loops(t) == 0
  np.testing.assert_allclose(t.numpy(), expected, rtol=1e-6)


def test_big_embedding_is_one_kernel():
  # a 2 MB table read by 256 tokens: no packed copy of it first (the operand packing would copy all of it)
  from minigrad import nn
  emb = nn.Embedding(4096, 128)
  idx = np.random.default_rng(1).integers(0, 4096, (4, 64)).astype(np.int32)
  t = emb(Tensor(idx))
  assert len(t.schedule()) == 1 and reduce_loops(t) == 0
  np.testing.assert_array_equal(t.numpy(), emb.weight.numpy()[idx])


def test_one_hot_pick_out_of_range_reads_zero():
  # indices outside the arange select nothing: 0, and the gated load reads nothing out of bounds
  x = np.arange(1, 61, dtype=np.float32).reshape(6, 10)
  idx = np.array([-1, 0, 5, 6, 1 << 30, -(1 << 30)], dtype=np.int32)
  t = (Tensor(idx).reshape(6, 1, 1).eq(Tensor.arange(6).reshape(1, 6, 1)).where(Tensor(x).reshape(1, 6, 10), 0)).sum(1)
  assert reduce_loops(t) == 0
  expected = np.array([x[i] if 0 <= i < 6 else np.zeros(10, np.float32) for i in idx])
  np.testing.assert_array_equal(t.numpy(), expected)


def test_one_hot_pick_over_upcast_rows_indexes_with_scalars():
  # every output row of a gather upcast (3 rows x 4 lanes): the gathered lanes are a vector of indices, and the
  # contiguous loads of the index rows take lane 0 of row + (0, 1, 2, 3): a scalar whose bounds the launch can check
  from minigrad.codegen.kernel import Opt
  from minigrad.engine.realize import buffer_of
  index = np.array([[0, 1, 0, 2], [0, 0, 1, 2], [2, 2, 2, 0]], dtype=np.int32)
  x = np.arange(15, dtype=np.float32).reshape(3, 5)
  (item,) = Tensor(x).gather(0, Tensor(index)).schedule()
  program = get_kernel(item.ast, "CPU", [Opt("UPCAST", 1, 4), Opt("UPCAST", 0, 3)])
  bufs = [buffer_of(node).allocate() for node in item.bufs]
  program(bufs)
  np.testing.assert_array_equal(bufs[0].numpy().reshape(3, 4), x[index, np.arange(4)])


def test_scalar_selects_in_vector_kernels_blend():
  # a weight gradient through a relu: per row of the tile, (h > 0) ? dy : 0 on scalars broadcast to the lanes. clang
  # sank the load of dy into a branch on the data, which mispredicted half the time; a blend has no branch. NaN and
  # signed zeros pass through as selected.
  rng = np.random.default_rng(7)
  h, dy, x = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
  dy[3, 5], dy[7, 9], h[7, 9] = np.nan, -0.0, 1.0
  t = (Tensor(h) > 0).where(Tensor(dy), 0.0).T @ Tensor(x)
  (item,) = [i for i in t.schedule() if any(u.op is Ops.REDUCE_AXIS for u in i.ast.toposort)]
  assert "where_float(" in kernel_body_of(item)
  np.testing.assert_allclose(t.numpy(), np.where(h > 0, dy, 0).T @ x, rtol=1e-4, atol=1e-4, equal_nan=True)
  picked = (Tensor(h) > 0).where(Tensor(dy), -0.0).numpy()
  np.testing.assert_array_equal(np.signbit(picked), np.signbit(np.where(h > 0, dy, -0.0)))


def kernel_body_of(item) -> str:
  source = get_kernel(item.ast, "CPU").source
  return source[source.index("void "):]
