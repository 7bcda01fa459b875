"""Tests of examples/gpt.py: the KV-cache gives the same logits as the plain forward, a tiny model overfits a short
text, the loss follows a torch copy of the same model step by step, seeded sampling repeats, generation compiles no
kernel after warm-up, checkpoints round-trip, and the text loader falls back to the built-in sample in one line.

Input: examples/gpt.py (imported in-process, as tests/test_examples.py does), torch for the reference model.
Output: pass/fail. Tiny models (width 16, context 8) so the file runs in seconds on CPU and LLVM and stays short on
PYTHON.
"""
from __future__ import annotations
from pathlib import Path
import sys
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import gpt  # noqa: E402
from minigrad import Device, Tensor  # noqa: E402

TINY = dict(vocab_size=11, context=8, layers=2, heads=2, width=16)


def tiny_model(seed: int = 0, **changes: int) -> gpt.GPT:
  return gpt.GPT(gpt.GPTConfig(**{**TINY, **changes}), seed=seed)


@pytest.mark.parametrize("symbolic", [False, True], ids=["masked", "symbolic"])
@pytest.mark.parametrize("prompt_length", [1, 3, 6])   # padded to 2, 4 and 8 (the context)
def test_kv_cache_logits_equal_the_plain_forward(prompt_length: int, symbolic: bool) -> None:
  """The prompt in one prefill, then one decode step per token: the logits after each token are the no-cache
  forward's at that position (symbolic: the cache row written at a Variable position, attention up to it)."""
  model = tiny_model()
  tokens = np.random.default_rng(1).integers(0, TINY["vocab_size"], TINY["context"]).astype(np.int32)
  expected = model(Tensor(tokens[None])).numpy()[0]
  got = gpt.Generator(model, symbolic=symbolic).logits_for(list(tokens), prompt_length)
  np.testing.assert_allclose(np.stack(got), expected[prompt_length - 1:], rtol=1e-4, atol=1e-5)


def test_layer_norm_in_two_kernels_equals_the_layer() -> None:
  """Generation's LayerNorm (mean and variance from one reduction of x shifted by its first element) gives
  nn.LayerNorm's numbers, also for rows whose mean is large next to their spread, in two kernels."""
  from minigrad import nn
  from minigrad.helpers import GlobalCounters
  rng = np.random.default_rng(2)
  norm = nn.LayerNorm(16)
  norm.weight, norm.bias = Tensor(rng.standard_normal(16).astype(np.float32)), Tensor(rng.standard_normal(16).astype(np.float32))
  rows = rng.standard_normal((3, 5, 16)).astype(np.float32) * np.array([1.0, 0.01, 30.0], np.float32)[:, None, None]
  x = Tensor(rows + np.array([0.0, 50.0, -7.0], np.float32)[:, None, None]).realize()
  GlobalCounters.reset()
  got = gpt.layer_norm_in_two_kernels(norm, x).realize()
  assert GlobalCounters.kernel_count == 2
  data = x.numpy().astype(np.float64)   # the exact result for these float32 inputs
  exact = (data - data.mean(-1, keepdims=True)) / np.sqrt(data.var(-1, keepdims=True) + norm.eps)
  exact = exact * norm.weight.numpy() + norm.bias.numpy()
  layer_error = np.abs(norm(x).numpy() - exact).max()
  np.testing.assert_allclose(got.numpy(), exact, rtol=0, atol=max(2 * layer_error, 1e-5))


def test_generation_past_the_context_refills_the_cache() -> None:
  """Once the cache is full the last half of the context is processed again as a prompt: the next logits are the
  plain forward's over that window."""
  model = tiny_model()
  generator = gpt.Generator(model)
  new = generator.generate([1, 2, 3], 12, temperature=0, seed=0)
  tokens = [1, 2, 3] + new
  assert len(new) == 12 and all(0 <= t < TINY["vocab_size"] for t in new)
  # greedy: token i is the argmax of the logits over what came before; check the first token after the refill
  context = TINY["context"]
  window = tokens[context + 1 - context // 2: context + 1]   # the refill prompt: the last context//2 tokens
  padded = np.zeros((1, context), np.int32)                  # (causal: padding after the window changes nothing)
  padded[0, :len(window)] = window
  expected = model(Tensor(padded)).numpy()[0, len(window) - 1]
  assert tokens[context + 1] == int(np.argmax(expected))


def train_tiny(model: gpt.GPT, tokens: np.ndarray, steps: int, seed: int = 0) -> list[float]:
  """`steps` jitted AdamW steps on batches of 4 windows of the context (the same kernels in every test)."""
  step, rng = gpt.make_train_step(model, gpt.make_optimizer(model, lr=1e-2, weight_decay=0.1)), np.random.default_rng(seed)
  return [float(step(*(Tensor(a) for a in gpt.random_batch(tokens, 4, model.config.context, rng))).item()) for _ in range(steps)]


@pytest.mark.skipif(Device.DEFAULT == "PYTHON", reason="150 interpreted training steps take about 50 s on PYTHON; the torch "
                    "comparison checks training on this device")
def test_tiny_model_overfits_a_short_text() -> None:
  text = gpt.Text("to be or not to be that is the ", "test")   # 11 distinct characters
  assert len(text.chars) == TINY["vocab_size"]
  losses = train_tiny(tiny_model(), text.encode(text.text * 4), 150)
  assert losses[0] > 2.0 and np.mean(losses[-25:]) < 0.8, f"loss {losses[0]:.3f} -> mean of the last 25 {np.mean(losses[-25:]):.3f}"


def torch_copy(model: gpt.GPT):
  """The same GPT in torch (nanoGPT's structure), with the minigrad model's weights: the benchmark's peer
  (bench/gpt_generate.py), so the model the speed figures compare with is the one checked here."""
  from minigrad.bench.harness import _bench_module
  return _bench_module("gpt_generate").torch_gpt(model)


def test_loss_matches_torch_over_three_steps() -> None:
  torch = pytest.importorskip("torch")
  model = tiny_model(seed=3)
  reference = torch_copy(model)
  step = gpt.make_train_step(model, gpt.make_optimizer(model, lr=1e-2, weight_decay=0.1))
  optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
  rng = np.random.default_rng(0)
  tokens = rng.integers(0, TINY["vocab_size"], 200).astype(np.int32)
  for _ in range(3):
    inputs, targets = gpt.random_batch(tokens, 4, TINY["context"], rng)
    loss = float(step(Tensor(inputs), Tensor(targets)).item())
    optimizer.zero_grad()
    logits = reference(torch.from_numpy(inputs).long())
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, TINY["vocab_size"]), torch.from_numpy(targets).long().reshape(-1))
    expected.backward()
    optimizer.step()
    assert loss == pytest.approx(expected.item(), rel=1e-4, abs=1e-5)
  for name, tensor in gpt.get_state_dict(model).items():   # and the weights after 3 updates
    # (not the attention's input biases: the key bias has a zero gradient in exact arithmetic - softmax ignores a
    # shift of every score in a row - so Adam turns either library's rounding noise into steps of any sign)
    if name.endswith("qkv.bias"): continue
    np.testing.assert_allclose(tensor.numpy(), reference.state_dict()[name].numpy(), rtol=1e-3, atol=1e-5, err_msg=name)


def test_seeded_sampling_is_reproducible() -> None:
  model = tiny_model()
  def sample(seed: int) -> list[int]: return gpt.Generator(model).generate([1, 2], 20, temperature=1.0, top_k=5, seed=seed)
  first = sample(7)
  assert first == sample(7)
  assert first != sample(8)


def test_top_k_and_temperature() -> None:
  logits = np.array([0.0, 5.0, 1.0, 4.0])
  rng = np.random.default_rng(0)
  assert gpt.sample(logits, 0, None, rng) == 1
  assert {gpt.sample(logits, 1.0, 2, rng) for _ in range(200)} == {1, 3}


@pytest.mark.parametrize("symbolic", [False, True], ids=["masked", "symbolic"])
def test_generation_compiles_no_kernels_after_warm_up(symbolic: bool) -> None:
  """Positions are data (or Variables) and prompts are padded to fixed sizes, the refills' size compiled with the first
  prompt: after the first two tokens (prefill, the decode step's first two recordings), no token compiles a kernel,
  across cache refills too."""
  generator = gpt.Generator(tiny_model(seed=5), symbolic=symbolic)
  generator.generate([4], 3 * TINY["context"], temperature=1.0, seed=0)
  counts = generator.kernel_counts
  assert counts[2:] == [counts[2]] * (len(counts) - 2), counts


def test_checkpoint_round_trip(tmp_path: Path) -> None:
  model, text = tiny_model(), gpt.Text("abcdefghijk", "test")
  path = str(tmp_path / "tiny.safetensors")
  gpt.save_checkpoint(model, text, path, {"val_loss": "1.0"})
  loaded, chars = gpt.load_checkpoint(path)
  assert chars == "abcdefghijk" and loaded.config == model.config
  tokens = Tensor(np.arange(TINY["context"], dtype=np.int32)[None])
  np.testing.assert_array_equal(loaded(tokens).numpy(), model(tokens).numpy())


def test_offline_without_the_file_falls_back_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
  monkeypatch.delenv("TINYSHAKESPEARE", raising=False)
  monkeypatch.setattr(gpt.text_data, "SHARED_COPY", tmp_path / "missing.txt")
  monkeypatch.setattr(gpt.text_data, "CACHED_COPY", tmp_path / "cache" / "input.txt")
  text = gpt.load_text(None, download=False)
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 1 and lines[0].startswith("Tiny Shakespeare not available (") and "built-in sample" in lines[0]
  assert text.source == "built-in sample text" and len(text.text) > 1000
  assert text.decode(text.encode("To be")) == "To be"


def test_bad_arguments_are_clear_errors(capsys: pytest.CaptureFixture[str]) -> None:
  with pytest.raises(SystemExit): gpt.parse_args(["--width", "10", "--heads", "4"])
  assert "--width 10 must be a multiple of --heads 4" in capsys.readouterr().err
  with pytest.raises(SystemExit): gpt.parse_args(["--iters", "-1"])
  with pytest.raises(ValueError, match="not in the model's vocabulary"): gpt.Text("abc", "test").encode("abz")
  with pytest.raises(ValueError, match="length <= context=8"): tiny_model()(Tensor(np.zeros((1, 9), np.int32)))
