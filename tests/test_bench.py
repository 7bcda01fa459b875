"""The benchmark CLI's choices (minigrad/bench/), without timing anything: --target parsing and the ISA torch is
limited to for a Target, checked with hand-built Targets."""
from __future__ import annotations
import subprocess
import sys
import pytest
from minigrad.bench import main
from minigrad.bench.harness import choose_torch_isa, torch_capability_for
from minigrad.target import Target

BASELINE = frozenset({"sse", "sse2"})
AVX2 = BASELINE | {"sse4.2", "avx", "avx2", "fma"}
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"}


@pytest.mark.parametrize("features, expected", [
  (AVX512, "avx512"), (AVX2, "avx2"), (BASELINE, "default"),
  (AVX2 | {"avx512f"}, "avx2"),                        # AVX-512F alone is not what ATen's avx512 kernels need
  (BASELINE | {"avx", "avx2"}, "default"),             # AVX2 without FMA
])
def test_torch_capability_for_x86(features, expected):
  assert torch_capability_for(Target("x86_64", "x", frozenset(features))) == expected


def test_torch_capability_for_aarch64():
  assert torch_capability_for(Target("aarch64", "armv8-a", frozenset({"neon"}))) == "default"
  assert torch_capability_for(Target("aarch64", "native", frozenset({"neon", "sve"}))) == "sve256"


def test_narrower_target_limits_mkl_and_onednn():
  isa = choose_torch_isa(Target("x86_64", "x86-64-v3", AVX2), Target("x86_64", "native", AVX512), environ={})
  assert dict(isa.environment) == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                                   "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"}


def test_host_level_target_leaves_libraries_alone():
  isa = choose_torch_isa(Target("x86_64", "native", AVX512), Target("x86_64", "native", AVX512), environ={})
  assert dict(isa.environment) == {"ATEN_CPU_CAPABILITY": "avx512"}


def test_user_environment_is_respected_and_flag_overrides():
  v3, host = Target("x86_64", "x86-64-v3", AVX2), Target("x86_64", "native", AVX512)
  user = {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX512"}
  isa = choose_torch_isa(v3, host, environ=user)
  assert isa.capability == "default" and "environment" in isa.reason
  assert dict(isa.environment)["MKL_ENABLE_INSTRUCTIONS"] == "AVX512"    # the user's own limit stays
  assert dict(isa.environment)["ONEDNN_MAX_CPU_ISA"] == "SSE41"
  assert choose_torch_isa(v3, host, override="avx2", environ=user).capability == "avx2"


def test_bad_arguments_are_one_line_errors(capsys):
  for argv in (["nosuchbench"], ["--runs", "3"], ["--torch-isa", "avx9000"]):
    with pytest.raises(SystemExit) as exit_info: main(argv)
    assert exit_info.value.code == 2


def test_unknown_target_is_a_one_line_error():
  result = subprocess.run([sys.executable, "-m", "minigrad.bench", "matmul", "--target", "no-such-cpu"],
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 1 and "Traceback" not in result.stderr
  assert result.stderr.strip().count("\n") == 0 and "no-such-cpu" in result.stderr
