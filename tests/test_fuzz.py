"""The differential fuzzer: random programs of elementwise, reduce, movement, matmul, cat, where and cast ops (and
their gradients) run on the device under test (DEV=...), checked against numpy for values and against torch for
dtypes and gradients; then the same programs with random valid optimization actions on every kernel (what BEAM may
pick) must give the default kernels' numbers.

The programs come from tests/fuzz_programs.py. Each shard draws its own fixed-seed sequence, so a run is repeatable
and the shards spread over pytest-xdist's workers. `FUZZ_EXAMPLES=N` sets how many programs are drawn in all (default
2,000), `FUZZ_OPT_EXAMPLES=N` how many the optimizer fuzz draws (default a quarter of N). A failure is shrunk to a
minimal program, printed as minigrad code. Bugs it found are kept as named tests in tests/test_fuzz_regressions.py.
"""
from __future__ import annotations
import os
import random
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, seed, settings, strategies as st
from minigrad.opt.heuristics import hand_coded_optimizations
from minigrad.opt.search_space import child_kernels
from minigrad.dtype import to_numpy
from minigrad.engine import realize
from minigrad.engine.realize import new_kernel
from fuzz_programs import MinigradOps, NumpyOps, Program, TorchOps, programs, run, step_dtypes

default_get_kernel = realize.get_kernel

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "2000"))
OPT_EXAMPLES = int(os.environ.get("FUZZ_OPT_EXAMPLES", str(EXAMPLES // 4)))
SHARDS = 8
FLOAT_TOLERANCE = {"float32": 1e-4, "float16": 1e-2}


def _fuzz(shard: int, examples: int, check) -> None:
  @seed(20261127 + shard)
  @settings(max_examples=max(1, examples // SHARDS), deadline=None, database=None, derandomize=False, print_blob=True,
            suppress_health_check=list(HealthCheck))
  @given(programs(), st.integers(0, 2**32 - 1))
  def fuzz(program: Program, opt_seed: int) -> None:
    try: check(program, opt_seed)
    except AssertionError: raise
    except Exception as e: raise AssertionError(f"{type(e).__name__}: {e}\nin the program {program!r}") from e
  fuzz()


def _scale(values: list, program: Program) -> float:
  """The largest finite magnitude among the float values the output depends on: float rounding errors scale with it."""
  biggest = 1.0
  for i in program.live():
    v = values[i]
    if v.dtype.kind == "f" and v.size and np.isfinite(v).any(): biggest = max(biggest, float(np.abs(v[np.isfinite(v)]).max()))
  return biggest


def assert_close(got: np.ndarray, expected: np.ndarray, dtype: str, scale: float, what: str) -> None:
  assert got.shape == expected.shape, f"{what}: shape {got.shape}, expected {expected.shape}"
  if dtype not in FLOAT_TOLERANCE: np.testing.assert_array_equal(got, expected, err_msg=what)
  else:
    tol = FLOAT_TOLERANCE[dtype]
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=tol, atol=tol * scale, equal_nan=True, err_msg=what)


def results(program: Program, ops: MinigradOps) -> tuple[np.ndarray, str, dict[int, np.ndarray | None]]:
  """A program run on minigrad: its output, the output's dtype (as numpy names it) and the gradient of
  sum(output * upstream) for each float32 input."""
  values = run(program, ops)
  out = values[-1]
  inputs = [i for i in program.live() if program.steps[i].op == "input" and program.steps[i].params[1] == "float32"]
  grads: dict[int, np.ndarray | None] = {}
  if out.requires_grad and out.is_floating_point():
    upstream = np.random.default_rng(1).standard_normal(out.shape).astype(np.float32)
    (out.float() * ops.Tensor(upstream)).sum().backward()
    grads = {i: None if values[i].grad is None else values[i].grad.numpy() for i in inputs}
  return out.numpy(), str(to_numpy(out.dtype)), grads


def _gradient_dtype(program: Program, dtypes_of: list[str]) -> str:
  """float32 gradients that flowed through float16 math carry its rounding (torch's too, in other places)."""
  return "float16" if any(dtypes_of[i] == "float16" for i in program.live()) else "float32"


def check_against_references(program: Program, _opt_seed: int = 0) -> None:
  """Values against numpy, the output's dtype and the inputs' gradients against torch."""
  dtypes_of = step_dtypes(program)
  expected = run(program, NumpyOps(), dtypes_of)
  got, got_dtype, grads = results(program, MinigradOps())
  assert got_dtype == dtypes_of[-1], f"output dtype {got_dtype}, torch gives {dtypes_of[-1]}, in {program!r}"
  scale = _scale(expected, program)
  assert_close(got, expected[-1], dtypes_of[-1], scale, f"output of {program!r}")
  theirs = run(program, TorchOps())
  out = theirs[-1]
  if out.is_floating_point(): assert bool(grads) == out.requires_grad, f"the output requires grad in {'torch' if out.requires_grad else 'minigrad'} only, in {program!r}"
  if not grads: return
  (out.float() * torch.tensor(np.random.default_rng(1).standard_normal(tuple(out.shape)).astype(np.float32))).sum().backward()
  for i, grad in grads.items():
    reference = theirs[i].grad
    if reference is None:
      assert grad is None or not grad.any(), f"input v{i} gets a gradient where torch has none, in {program!r}"
      continue
    if reference.numel() == 0 and grad is None: continue   # an empty input skipped by cat (torch's legacy rule) gets no gradient
    assert grad is not None, f"no gradient for input v{i}, in {program!r}"
    g_scale = max(scale, float(reference.abs().max()) if reference.numel() else 1.0)
    assert_close(grad, reference.numpy(), _gradient_dtype(program, dtypes_of), g_scale, f"gradient of v{i} in {program!r}")


def _random_opts(ast, device: str, rng: random.Random) -> list:
  """A random sequence of valid actions for one kernel, as BEAM may build it: a prefix of the hand-coded actions
  (or none), then one to three actions drawn from the search space."""
  kernel = new_kernel(ast, device)
  if rng.random() < 0.5 and not kernel.has_local:
    default = kernel.copy()
    hand_coded_optimizations(default)
    for opt in default.applied_opts[:rng.randint(0, len(default.applied_opts))]: kernel.apply_opt(opt)
  for _ in range(rng.randint(1, 3)):
    if not (children := child_kernels(kernel)): break
    kernel = rng.choice(children)
  return list(kernel.applied_opts)


def check_random_opts(program: Program, opt_seed: int) -> None:
  """The program's output and gradients with random actions on every kernel equal those of the default kernels."""
  default_out, dtype, default_grads = results(program, MinigradOps())
  rng = random.Random(opt_seed)
  chosen = []
  def get_random_kernel(ast, device, opts=None):
    opts = _random_opts(ast, device, rng) if opts is None else opts
    chosen.append(opts)
    return default_get_kernel(ast, device, opts)
  realize.get_kernel = get_random_kernel
  try: out, _, grads = results(program, MinigradOps())
  finally: realize.get_kernel = default_get_kernel
  where = f"{program!r} with actions {chosen}"
  scale = max(1.0, float(np.abs(default_out[np.isfinite(default_out)]).max())) if default_out.dtype.kind == "f" and np.isfinite(default_out).any() else 1.0
  assert_close(out, default_out, dtype if dtype in FLOAT_TOLERANCE else "exact", scale, f"output of {where}")
  for i, grad in default_grads.items():
    if grad is None: assert grads[i] is None, where
    else: assert_close(grads[i], grad, _gradient_dtype(program, step_dtypes(program)), max(scale, float(np.abs(grad).max()) if grad.size else 1.0), f"gradient of v{i} in {where}")


@pytest.mark.parametrize("shard", range(SHARDS))
def test_random_programs_match_numpy_and_torch(shard: int) -> None:
  _fuzz(shard, EXAMPLES, check_against_references)


@pytest.mark.parametrize("shard", range(SHARDS))
def test_random_actions_keep_the_default_kernels_numbers(shard: int) -> None:
  _fuzz(SHARDS + shard, max(SHARDS, OPT_EXAMPLES), check_random_opts)
