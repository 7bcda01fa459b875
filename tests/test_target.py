"""The CPU Target (minigrad/target.py): what it derives from its ISA features, what the real C compiler says a march
means, CPU_TARGET, refusing to run code the host can't, and the caches keyed by what compiled code assumes (never by
the CPU's model name).

Facts the answers are checked against come from elsewhere: /proc/cpuinfo's flags, sysfs, and the built binaries'
instructions (`objdump -d`: no zmm register in code built for x86-64-v3).
"""
from __future__ import annotations
import dataclasses
import os
import pathlib
import platform
import re
import shutil
import subprocess
import tempfile
import numpy as np
import pytest
from minigrad import Tensor
import minigrad.engine.search as search
from minigrad.engine import kernel_cache, realize
from minigrad.runtime import ops_cpu
from minigrad.runtime.device import Device
from minigrad.runtime.ops_cpu import CCompiler, CPUProgram
from minigrad import target as target_module
from minigrad.target import Target, cpu_target, cpuinfo_flags, ensure_runnable, host_features, host_target

X86 = platform.machine() in ("x86_64", "AMD64")
ADD_SRC = """void add(float* restrict out, const float* restrict a, const float* restrict b, int n) {
  for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}"""
BASELINE = frozenset({"sse", "sse2", "cx16"})
AVX2 = BASELINE | {"sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2", "fma", "f16c", "bmi", "bmi2"}   # Zen 3
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx512vnni"}                   # Zen 5-like


@pytest.fixture(autouse=True)
def isolated_cache(monkeypatch, tmp_path):
  monkeypatch.setenv("MINIGRAD_CACHE", str(tmp_path / "cache"))
  monkeypatch.delenv("DISABLE_COMPILER_CACHE", raising=False)
  monkeypatch.delenv("CPU_TARGET", raising=False)
  return tmp_path / "cache"


def needs_x86() -> None:
  if not X86: pytest.skip(f"the x86-64 march levels are for x86-64 hosts; this one is {platform.machine()}")


# ---------------------------------------------------------------- Targets built by hand

def test_hand_built_targets_derive_vectors_and_registers():
  avx512 = Target("x86_64", "znver5", AVX512, model="AMD EPYC")
  avx2 = Target("x86_64", "znver3", AVX2, model="AMD EPYC")
  baseline = Target("x86_64", "x86-64", BASELINE)
  neon = Target("aarch64", "armv8-a", {"neon"})
  assert (avx512.vector_bytes, avx512.vector_registers) == (64, 32)
  assert (avx2.vector_bytes, avx2.vector_registers) == (32, 16)
  assert (baseline.vector_bytes, baseline.vector_registers) == (16, 16)
  assert (neon.vector_bytes, neon.vector_registers) == (16, 32) and isinstance(neon.features, frozenset)
  # AVX without AVX2 (Sandy Bridge) already has 32-byte registers; AVX-512 registers need avx512f itself
  assert Target("x86_64", "sandybridge", BASELINE | {"avx"}).vector_bytes == 32
  assert Target("x86_64", "x", BASELINE | {"avx", "avx512vnni"}).vector_bytes == 32
  # a Target not of the host assumes conservative caches and no halved vectors
  assert (baseline.l1d_bytes, baseline.l2_bytes, baseline.l3_bytes) == (32 << 10, 1 << 20, 8 << 20)
  assert not baseline.halves_wide_vectors


def test_key_names_the_isa_not_the_model():
  zen3 = Target("x86_64", "native", AVX2, model="AMD EPYC")
  zen5 = Target("x86_64", "native", AVX512, model="AMD EPYC")
  assert zen3.key != zen5.key and "avx512f" in zen5.key and "avx512f" not in zen3.key
  assert "EPYC" not in zen5.key and zen3.key.startswith("x86_64:native:")
  # the same ISA under another name, or listed in another order, is the same key (and an equal Target)
  renamed = Target("x86_64", "native", frozenset(sorted(AVX2, reverse=True)), model="AMD EPYC 7B13")
  assert renamed.key == zen3.key and renamed == zen3
  assert Target("x86_64", "x86-64-v3", AVX2).key != zen3.key   # the march is part of what the code assumes
  assert Target("aarch64", "native", AVX2).key != zen3.key
  # the tuning key adds what policy reads: caches and cores change it, the model doesn't
  assert dataclasses.replace(zen3, l2_bytes=2 << 20).tuning_key != zen3.tuning_key
  assert renamed.tuning_key == zen3.tuning_key and zen3.key in zen3.tuning_key


# ---------------------------------------------------------------- the host, from the compiler

def test_host_target_agrees_with_proc_cpuinfo():
  flags = cpuinfo_flags()
  if not flags: pytest.skip("no /proc/cpuinfo flags on this host")
  host = host_target()
  table = {feature: flag for _, feature, flag in target_module.feature_table(host.arch)}
  assert host.arch == platform.machine() and host.march == "native" and host.features
  for feature in host.features: assert table[feature] in flags, f"the compiler says the host has {feature}, cpuinfo doesn't"
  # every compiler minigrad supports knows these, so the host has them exactly when cpuinfo lists them
  known = {"sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"} if X86 else {"neon"}
  for feature in known: assert (feature in host.features) == (table[feature] in flags), feature
  assert host.vector_bytes == (64 if "avx512f" in flags else 32 if "avx" in flags else 16) or not X86
  assert host_features() == frozenset(f for f, flag in table.items() if flag in flags)
  assert host.cores == len(os.sched_getaffinity(0))
  l1d = pathlib.Path("/sys/devices/system/cpu/cpu0/cache/index0")
  if (l1d / "type").exists() and (l1d / "type").read_text().strip() == "Data":
    assert host.l1d_bytes == int((l1d / "size").read_text().strip().rstrip("K")) * 1024


def test_cache_sizes_are_read_from_sysfs(tmp_path):
  for name, (level, kind, size) in {"index0": ("1", "Data", "48K"), "index1": ("1", "Instruction", "32K"),
                                    "index2": ("2", "Unified", "2048K"), "index3": ("3", "Unified", "32M")}.items():
    (tmp_path / name).mkdir()
    for file, text in (("level", level), ("type", kind), ("size", size)): (tmp_path / name / file).write_text(text + "\n")
  assert target_module.host_cache_sizes(str(tmp_path)) == (48 << 10, 2 << 20, 32 << 20)
  assert target_module.host_cache_sizes(str(tmp_path / "none")) == (32 << 10, 1 << 20, 8 << 20)


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_cpu_target_x86_64_v3_from_the_compiler(cc, monkeypatch):
  needs_x86()
  if shutil.which(cc) is None: pytest.skip(f"{cc} is not installed here")
  monkeypatch.setenv("CPU_TARGET", "x86-64-v3")
  v3 = cpu_target([cc])
  assert v3.march == "x86-64-v3" and {"avx2", "fma", "f16c", "bmi2"} <= v3.features and "avx512f" not in v3.features
  assert (v3.vector_bytes, v3.vector_registers) == (32, 16) and v3.key.startswith("x86_64:x86-64-v3:")
  v4 = cpu_target([cc], "x86-64-v4")
  assert {"avx512f", "avx512bw", "avx512vl"} <= v4.features and v4.vector_bytes == 64 and v4.key != v3.key
  compiler = CCompiler(cc)
  assert compiler.target == v3 and "-march=x86-64-v3" in compiler.flags and "-march=native" not in compiler.flags
  assert f"target={v3.key}" in compiler.cache_key


def test_unknown_cpu_target_is_a_clear_error(monkeypatch):
  monkeypatch.setenv("CPU_TARGET", "no-such-cpu-9000")
  with pytest.raises(ValueError, match="CPU_TARGET='no-such-cpu-9000'") as error: cpu_target()
  assert "native" in str(error.value) and ("x86-64-v3" in str(error.value) or not X86)
  with pytest.raises(ValueError, match="no-such-cpu-9000"): CCompiler()


def test_probe_answers_are_kept_on_disk(monkeypatch, isolated_cache):
  argv = tuple(ops_cpu.find_c_compiler()[0])
  monkeypatch.setattr(target_module, "_targets", {})
  asked: list[str] = []
  real = target_module._probe_isa
  monkeypatch.setattr(target_module, "_probe_isa", lambda cc, march: asked.append(march) or real(cc, march))
  first = cpu_target(argv, "native")
  monkeypatch.setattr(target_module, "_targets", {})   # as a new process: the answer comes from the disk
  assert cpu_target(argv, "native") == first and asked == ["native"]
  assert len(list((isolated_cache / "cpu_targets").iterdir())) == 1
  # a native answer is kept per CPU: another CPU (same model name, other flags) asks again
  monkeypatch.setattr(target_module, "_targets", {})
  monkeypatch.setattr(target_module, "_host_identity", lambda: '["x86_64", "AuthenticAMD", "AMD EPYC", "avx2"]')
  cpu_target(argv, "native")
  assert asked == ["native", "native"]


# ---------------------------------------------------------------- code built for a narrower target

def objdump(binary: bytes) -> str:
  if shutil.which("objdump") is None: pytest.skip("objdump is not installed here (apt-get install binutils)")
  with tempfile.NamedTemporaryFile(suffix=".so") as f:
    f.write(binary)
    f.flush()
    return subprocess.run(["objdump", "-d", f.name], capture_output=True, text=True, check=True).stdout


ZMM, YMM = re.compile(r"%zmm\d+"), re.compile(r"%ymm\d+")


@pytest.mark.parametrize("device", ["CPU", "LLVM"])
def test_kernel_built_for_x86_64_v3_runs_and_has_no_avx512(device, monkeypatch):
  needs_x86()
  if not {"avx2", "fma"} <= host_features(): pytest.skip("this CPU can't run x86-64-v3 code (no AVX2/FMA)")
  module = ops_cpu if device == "CPU" else pytest.importorskip("minigrad.runtime.ops_llvm")
  native = Device[device]
  monkeypatch.setenv("CPU_TARGET", "x86-64-v3")   # this device as a process started with CPU_TARGET=x86-64-v3 opens it
  narrow = module.create_device()
  monkeypatch.setitem(Device._devices, device, narrow)
  monkeypatch.setattr(realize, "compiled_kernels", {})
  assert narrow.compiler.target.march == "x86-64-v3" and f"target={narrow.compiler.target.key}" in narrow.compiler.cache_key
  if device == "LLVM":
    assert narrow.compiler.cpu_name == "x86-64-v3" and "+avx2" in narrow.compiler.features and "avx512" not in narrow.compiler.features
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((64, 96), dtype=np.float32), rng.standard_normal((96, 48), dtype=np.float32)
  result = ((Tensor(a, device=device) @ Tensor(b, device=device)).relu() * 0.5 + 1).exp().numpy()
  np.testing.assert_allclose(result, np.exp(np.maximum(a.astype(np.float64) @ b, 0) * 0.5 + 1), rtol=1e-4)
  sources = [k.source for k in realize.compiled_kernels.values() if k.device == device]
  assert sources
  code = [objdump(narrow.compiler.compile_cached(source)) for source in sources]   # the binaries that ran (cached)
  assert not any(ZMM.search(c) for c in code), "x86-64-v3 code must not use AVX-512's zmm registers"
  assert any(YMM.search(c) for c in code), "x86-64-v3 code should use AVX2's ymm registers"
  # the same kernels as an AVX-512 host decides and builds them do use zmm registers: the check above tells the two
  # apart (the policy reads the Target, so the x86-64-v3 sources themselves have 8-float vectors only)
  if "avx512f" in native.compiler.target.features:
    from cpu_targets import decide, render
    asts = [k.kernel.ast for k in realize.compiled_kernels.values() if k.device == device]
    monkeypatch.undo()   # the host's own device again
    wide = [render(decide(ast, native.compiler.target), device) for ast in asts]
    assert any(ZMM.search(objdump(native.compiler.compile(source))) for source in wide)


def test_code_the_host_cannot_run_compiles_but_does_not_run(monkeypatch):
  needs_x86()
  host = host_features()
  # an AMD march on an Intel host (sse4a), an Intel one on AMD (AMX, AVX512-FP16), AVX-512 on an AVX2 CPU
  for march in ("znver3", "sapphirerapids", "x86-64-v4"):
    try: candidate = cpu_target(march=march)
    except ValueError: continue
    if candidate.missing_on(host): break
  else: pytest.skip("this CPU runs every march tried")
  missing = sorted(candidate.missing_on(host))
  monkeypatch.setenv("CPU_TARGET", march)
  device = ops_cpu.create_device()
  assert device.compiler.target == candidate
  binary = device.compiler.compile(ADD_SRC)   # compiling is fine
  with pytest.raises(RuntimeError, match=f"CPU_TARGET={march}.*{re.escape(missing[0])}"): device.program("add", binary)
  with pytest.raises(RuntimeError, match="lacks"): ensure_runnable(candidate)
  # a Target the host can run passes; one that claims a feature the host lacks doesn't
  runnable = cpu_target(march="x86-64")
  ensure_runnable(runnable)
  with pytest.raises(RuntimeError, match=re.escape(missing[0])):
    CPUProgram("add", binary, target=dataclasses.replace(runnable, features=runnable.features | {missing[0]}))


# ---------------------------------------------------------------- caches keyed by the Target

def counting(compiler: CCompiler, monkeypatch) -> list[str]:
  calls: list[str] = []
  real_compile = compiler.compile
  monkeypatch.setattr(compiler, "compile", lambda src: calls.append(src) or real_compile(src))
  return calls


def test_binary_cached_for_one_isa_is_not_found_for_another_of_the_same_model(monkeypatch):
  host, avx512 = host_target(), AVX512 - AVX2
  zen3 = dataclasses.replace(host, features=host.features - avx512, model="AMD EPYC")   # AVX2 only
  zen5 = dataclasses.replace(host, features=host.features | avx512, model="AMD EPYC")   # and AVX-512
  assert zen3.key != zen5.key
  first, second = CCompiler(target=zen3), CCompiler(target=zen5)
  # the same compiler and flags (but the vector width it is asked to prefer): only what the code may assume differs
  same_flags = lambda compiler: [f for f in compiler.flags if not f.startswith("-mprefer-vector-width=")]
  assert same_flags(first) == same_flags(second)
  assert first.cache_path(ADD_SRC) != second.cache_path(ADD_SRC)
  first_calls, second_calls = counting(first, monkeypatch), counting(second, monkeypatch)
  binary = first.compile_cached(ADD_SRC)
  assert second.compile_cached(ADD_SRC) and len(second_calls) == 1, "the other ISA's binary must not be found"
  # the same ISA under another model name finds it
  renamed = CCompiler(target=dataclasses.replace(zen3, model="AMD EPYC 7B13"))
  renamed_calls = counting(renamed, monkeypatch)
  assert renamed.compile_cached(ADD_SRC) == binary and renamed_calls == [] and len(first_calls) == 1


def other_target(device: str) -> Target:
  current = Device[device].compiler.target
  return dataclasses.replace(current, features=current.features ^ {"avx512f"}, model=current.model)


@pytest.mark.parametrize("device", ["CPU", "LLVM"])
def test_beam_and_kernel_cache_keys_differ_by_target(device, monkeypatch):
  if device == "LLVM": pytest.importorskip("llvmlite")
  (item,) = (Tensor(np.ones((16, 16), np.float32), device=device).sum(1) * 2).schedule()
  compiler = Device[device].compiler
  beam, kernels = search.cache_path(item.ast, device, 2), kernel_cache.entry_path(item.ast, device, None)
  monkeypatch.setattr(compiler, "target", dataclasses.replace(compiler.target, model="renamed"))
  assert (search.cache_path(item.ast, device, 2), kernel_cache.entry_path(item.ast, device, None)) == (beam, kernels)
  monkeypatch.setattr(compiler, "target", other_target(device))   # the compiler's own key left as it was
  assert search.cache_path(item.ast, device, 2) != beam and kernel_cache.entry_path(item.ast, device, None) != kernels
  monkeypatch.setattr(compiler, "target", dataclasses.replace(compiler.target, l2_bytes=compiler.target.l2_bytes * 2))
  assert kernel_cache.entry_path(item.ast, device, None) != kernels   # rendered kernels follow what policy reads


def test_beam_result_for_one_isa_is_searched_again_on_another(monkeypatch):
  monkeypatch.setattr(search, "chosen_opts", {})
  (item,) = (Tensor(np.ones((16, 16), np.float32)).sum(1) * 2).schedule()
  searches: list[object] = []
  monkeypatch.setattr(search._Search, "run", lambda self: searches.append(self) or [])
  assert search.beam_search(item.ast, "CPU", 1) == [] and len(searches) == 1
  monkeypatch.setattr(search, "chosen_opts", {})   # a new process, same ISA: the disk answers
  search.beam_search(item.ast, "CPU", 1)
  assert len(searches) == 1
  monkeypatch.setattr(search, "chosen_opts", {})   # a new process on a CPU with another ISA: searched again
  monkeypatch.setattr(Device["CPU"].compiler, "target", other_target("CPU"))
  search.beam_search(item.ast, "CPU", 1)
  assert len(searches) == 2
