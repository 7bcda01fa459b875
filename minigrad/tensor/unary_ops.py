"""Elementwise functions of one tensor: exp/log family, trigonometry, rounding, erf and the activation functions.

Input: Tensors (this class is mixed into `Tensor` through MathMixin, so `self` is a Tensor). Output: new lazy
Tensors. Results match torch's: values within a few ulp, the same dtypes (integer inputs give the default float;
float16/bfloat16 compute in float32 and round once, as torch's kernels do) and the same gradients, including
at the corners (relu6'(0) = 0, hardswish'(3) = 1, clamp passes the gradient at its bounds, abs'(0) = 0).

Accuracy: the primitives (exp, expm1, log, log1p, cos, tan, tanh, sigmoid, erf) are `Composite` functions: a
forward graph built for accuracy and a derivative formula beside it. They compute in the input's precision
with formulas that avoid error growth and cancellation: Cody-Waite argument reduction for exp and cos (cos
of float32 computes in float64), Goldberg's log1p, and polynomial fits made for minigrad (least squares in
high precision, then checked against mpmath) where a formula would cancel: expm1 and tanh near 0, erf (float32 has its
own cheaper erf fit).
Measured against torch: within 1-3 ulp for float32 and float64 (tests/test_ops_elementwise.py).
"""
from __future__ import annotations
from typing import Callable, TYPE_CHECKING
import math
from minigrad.dtype import dtypes
from minigrad.uop.ops import Ops
import minigrad.tensor.function as F
if TYPE_CHECKING: from minigrad.tensor.tensor import Tensor

LOG2E, LN2 = 1.4426950408889634, 0.6931471805599453
# ln 2 = HI + LO for exact argument reduction: HI has few significant bits, so n * HI is exact for every n that
# matters (21 bits for float64, 12 for float32). The clamp keeps n finite; beyond it exp is 0 or inf anyway.
# The last two: the exponents of the smallest normal and the largest float (2**n for n between them is normal).
EXP_REDUCTION = {8: (0.6931467056274414, 4.7493250390316726e-07, -750.0, 710.0, -1022.0, 1023.0),
                 4: (0.693115234375, 3.194618329871446e-05, -104.0, 89.0, -126.0, 127.0)}
# float32 exp(r) = 1 + r + r^2 * Q(r) for |r| <= ln2/2, Q of degree 4 (a fit for minigrad: weighted least squares
# towards the minimax relative error, 3.1e-9 before rounding the coefficients to float32; checked against mpmath).
# With the Cody-Waite reduction, exp is within 0.9 ulp of the true value in float32 (1.2 ulp without FMA).
EXP_SMALL_F32 = (1.0, 1.0, 0.4999999403953552, 0.1666651964187622, 0.04166839271783829, 0.008368751034140587, 0.0013814526610076427)
# pi/2 in three parts (33 significant bits each) for argument reduction, and 2/pi
PIO2_1, PIO2_2, PIO2_3, TWO_OVER_PI = 1.5707963267341256, 6.077100506303966e-11, 2.0222662487959506e-21, 0.6366197723675814
TWO_OVER_SQRT_PI, SQRT_2_OVER_PI, SQRT_HALF = 1.1283791670955126, 0.7978845608028654, 0.7071067811865476
# tanh(a) = a + a^3 * P(a^2 / 0.15125 - 1) for a < 0.55 (fit of (tanh(a) - a) / a^3, degree 9)
TANH_SMALL = (-0.3143299751688834, 0.017907231183013513, -0.0010328257160338824, 5.964512824329236e-05, -3.4449637902978835e-06,
              1.9897634925319034e-07, -1.1492339358989056e-08, 6.637871494743558e-10, -3.866166992064984e-11, 2.231237924932076e-12)
# float32 tanh(a) = a + a^3 * P(a^2) for a < TANH32_SWITCH (P degree 5, fitted like ERF32_SMALL below): within 0.9 ulp
# of mpmath's tanh there, and 1 - 2 / (exp(2a) + 1) within 1 ulp beyond
TANH32_SWITCH = 0.875
TANH32_SMALL = (-0.3333324193954468, 0.1333097517490387, -0.05376157537102699, 0.021017024293541908, -0.007003142032772303,
                0.0013709354680031538)
# expm1(x) = x + x^2 * Q(2x) for |x| < 0.5 (fit of (expm1(x) - x) / x^2, degree 10)
EXPM1_SMALL = (0.5, 0.08333333333333416, 0.010416666666666128, 0.0010416666666499227, 8.680555555950889e-05, 6.2003969194615376e-06,
               3.875247921865714e-07, 2.1528940167302332e-08, 1.07646468446252e-09, 4.9145649996517404e-11, 2.0406068540209414e-12)
# erf(x) = x * P(t/2 - 1) with t = x*x, for |x| < 2 (least-squares fit with relative weights, degree 16)
ERF_SMALL = (0.674933236039655, -0.26111186093124494, 0.11947913860985301, -0.04866277744917654, 0.017128344571793578,
             -0.005234875835851481, 0.0014050914238250944, -0.00033514353548940834, 7.180100782917153e-05,
             -1.3946267100005377e-05, 2.4758031090909326e-06, -4.0452217940016e-07, 6.119491691100874e-08,
             -8.603862282173268e-09, 1.1346741596035326e-09, -1.4811402350440907e-10, 1.6838403581286382e-11)
# erfc(x) = exp(-x*x) * Q(6/x - 2) for 2 <= x <= 6 (Q fits erfc(x) * exp(x*x) in 1/x, degree 13); erf = 1 beyond 6
ERFC_LARGE = (0.17900115118138804, 0.08155839001078087, -0.00503935989548127, -0.00023215792068069792,
              0.00012459325007956168, -1.734069440760715e-05, -9.981237482188304e-08, 6.468248438505992e-07,
              -1.6584858446051844e-07, 1.7904205993918587e-08, 2.7806453798276557e-09, -1.8517307470245846e-09,
              3.9985184219363123e-10, -1.8027327507437517e-11)

# float32 erf (float16 and bfloat16 compute in float32), a third of the work of the float64 fits above. Fitted for the
# smallest largest error (Lawson's iteration), coefficients rounded to float32; within 0.95 ulp of mpmath's erf on
# 80,000 points, evaluated in float32 with fused multiply-adds:
# erf(x) = x + x * Q(x*x) for |x| < 1 (Q fits erf(x)/x - 1, degree 6);
# erf(x) = 1 - R(x - 2.5) for 1 <= x < 4 (R fits erfc, degree 14); 1 beyond (erfc(4) is below half an ulp of 1)
ERF32_SMALL = (0.12837916612625122, -0.3761262595653534, 0.1128358542919159, -0.026853810995817184, 0.005188324023038149,
               -0.000801015761680901, 7.853724673623219e-05)
ERF32_LARGE = (0.0004069526621606201, -0.002178188879042864, 0.005445676390081644, -0.008351716212928295, 0.008622685447335243,
               -0.006109301466494799, 0.002797348890453577, -0.0005600668955594301, -0.0002584807516541332, 0.0002704003418330103,
               -8.125659951474518e-05, -1.768262700352352e-05, 1.5767991499160416e-05, -5.091959565106663e-07, -8.961351340985857e-07)
# atan(u) = u + u*z*P(z) with z = u*u for |u| <= tan(pi/8) (least squares in 50-digit precision with relative weights,
# degree 10; within 0.5 ulp of mpmath's atan in float64 before the argument reduction's rounding)
ATAN_SMALL = (-0.33333333333333187, 0.19999999999951815, -0.14285714280044026, 0.11111110776759447, -0.09090897585414695,
              0.07692057439988456, -0.06663075229586649, 0.05847696323165607, -0.05038499894536994, 0.03804554892856584,
              -0.017887779925664465)
TAN_PI_8, PI_2, PI_4 = 0.41421356237309503, 1.5707963267948966, 0.7853981633974483


def horner(x: Tensor, coefficients: tuple[float, ...]) -> Tensor:
  """c0 + c1*x + c2*x**2 + ... evaluated from the highest power down."""
  acc = x.full_like(coefficients[-1])
  for c in reversed(coefficients[:-1]): acc = acc * x + c
  return acc


# ---- forward graphs of the primitives. `x` is a float tensor; these run without gradient tracking ----

def _exp2_of(x: Tensor) -> Tensor: return x._alu(Ops.EXP2)
def _log2_of(x: Tensor) -> Tensor: return x._alu(Ops.LOG2)
def _sin_of(x: Tensor) -> Tensor: return x._alu(Ops.SIN)


def power_of_two(n: Tensor) -> Tensor:
  """2**n for integer-valued float n inside the normal exponent range, built from the exponent bits."""
  int_dtype, bias, shift = (dtypes.int32, 127, 23) if n.dtype == dtypes.float32 else (dtypes.int64, 1023, 52)
  biased = n.cast(int_dtype) + bias
  return biased._alu(Ops.SHL, biased.full_like(shift)).bitcast(n.dtype)


def _ln2_multiples(x: Tensor) -> tuple[Tensor, Tensor]:
  """(n, r) with x = n ln2 + r, n integer-valued and |r| <= ln2/2, r exact (Cody-Waite, see EXP_REDUCTION)."""
  ln2_hi, ln2_lo = EXP_REDUCTION[x.dtype.itemsize][:2]
  n = (x * LOG2E + 0.5).floor()
  return n, (x - n * ln2_hi) - n * ln2_lo


def exp_forward(x: Tensor, at_most_zero: bool = False) -> Tensor:
  """Cody-Waite: x = n*ln2 + r with r exact, so the reduced argument carries no error that grows with |x|; then
  exp(x) = exp(r) * 2**n1 * 2**n2 with n = n1 + n2, n1 = n clamped to the normal exponents (so a result in the
  subnormals is rounded once, by the last multiply). exp(r) is a polynomial in float32 (a few multiply-adds on
  every device) and exp2(r * log2 e) in float64. `at_most_zero`: the caller knows x <= 0 or NaN (softmax's
  x - max): no upper clamp, and exp(x) = (exp(r) * 2**-shift) * 2**(n + shift) with a constant shift that makes
  the second factor normal (one multiply fewer). NaN stays NaN, -inf gives 0 and +inf gives inf.
  Below `low` exp rounds to 0: those elements are computed on 0 and replaced by 0 after, so none of them makes a
  subnormal on the way (on x86 a multiply with a subnormal result takes a microcode assist, ~100 cycles: a causal
  attention's softmax, half of whose inputs are -inf, ran 9x slower)."""
  _, _, low, high, min_exponent, max_exponent = EXP_REDUCTION[x.dtype.itemsize]
  underflows = x < low
  x = underflows.where(0.0, x)
  if not at_most_zero: x = (x > high).where(high, x)
  n, r = _ln2_multiples(x)
  if at_most_zero:   # low <= x <= 0: n + shift is a normal exponent; exp(r) * 2**-shift is exact (in the polynomial's coefficients)
    shift = min_exponent - math.floor(low * LOG2E + 0.5)
    scale = 2.0 ** -shift
    scaled = horner(r, tuple(c * scale for c in EXP_SMALL_F32)) if x.dtype == dtypes.float32 else _exp2_of(r * LOG2E) * scale
    return underflows.where(0.0, scaled * power_of_two(n + shift))
  exp_r = horner(r, EXP_SMALL_F32) if x.dtype == dtypes.float32 else _exp2_of(r * LOG2E)
  n1 = (n > max_exponent).where(max_exponent, n)
  n1 = (n1 < min_exponent).where(min_exponent, n1)
  return underflows.where(0.0, exp_r * power_of_two(n1) * power_of_two(n - n1))


def _exp_at_most_zero_forward(x: Tensor) -> Tensor: return exp_forward(x, at_most_zero=True)
def _log_forward(x: Tensor) -> Tensor: return _log2_of(x) * LN2
def _log10_forward(x: Tensor) -> Tensor: return _log2_of(x) * (LN2 / math.log(10))


def expm1_forward(x: Tensor) -> Tensor:
  """x + x^2 Q(x) for |x| < 0.5 (a fitted polynomial: exp(x) - 1 would cancel there), exp(x) - 1 beyond."""
  small = x.abs() < 0.5
  near_zero = x + x * x * horner(x * 2.0, EXPM1_SMALL)
  return small.where(near_zero, exp_forward(small.where(1.0, x)) - 1.0)


def log1p_forward(x: Tensor) -> Tensor:
  """Goldberg: log(u) * x / (u - 1) with u = 1 + x is accurate near 0."""
  u = x + 1
  ratio = _log2_of(u) * LN2 * x / (u - 1)
  return u.eq(1).where(x, u.eq(math.inf).where(math.inf, ratio))


def _in_float64(x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
  return fn(x) if x.dtype == dtypes.float64 else fn(x.cast(dtypes.float64)).cast(x.dtype)


def cos_forward(x: Tensor) -> Tensor:
  """cos from sin, in float64: x = n*pi/2 + r (Cody-Waite, exact for |x| < 1e6), then +-sin(r) or
  +-cos(r) = 1 - 2 sin(r/2)**2 by n mod 4, each accurate to ~1 ulp since |r| <= pi/4. Larger |x| use
  1 - 2 sin(x/2)**2 directly (error ~ulp(1))."""
  def fn(v: Tensor) -> Tensor:
    n = (v * TWO_OVER_PI + 0.5).floor()
    r = ((v - n * PIO2_1) - n * PIO2_2) - n * PIO2_3
    sin_r, half = _sin_of(r), _sin_of(r * 0.5)
    cos_r = 1.0 - 2.0 * half * half
    quadrant = n - (n * 0.25).floor() * 4.0
    reduced = quadrant.eq(0).where(cos_r, quadrant.eq(1).where(-sin_r, quadrant.eq(2).where(-cos_r, sin_r)))
    half_v = _sin_of(v * 0.5)
    return (v.abs() < 1e6).where(reduced, 1.0 - 2.0 * half_v * half_v)
  return _in_float64(x, fn)


def tan_forward(x: Tensor) -> Tensor: return _in_float64(x, lambda v: _sin_of(v) / cos_forward(v))


def _abs_bits(x: Tensor) -> Tensor:
  """|x| of float32 x by clearing its sign bit: one AND, where maximum(x, -x) takes a compare and select that keep NaN."""
  return (x.bitcast(dtypes.int32) & 0x7FFFFFFF).bitcast(dtypes.float32)


def _with_sign_of(magnitude: Tensor, x: Tensor) -> Tensor:
  """float32 `magnitude` (sign bit clear) with the sign bit of x (also -0.0's)."""
  return (magnitude.bitcast(dtypes.int32) | (x.bitcast(dtypes.int32) & -0x80000000)).bitcast(dtypes.float32)


def _tanh_f32(x: Tensor) -> Tensor:
  """float32 tanh, within 1 ulp (see TANH32_SMALL): a + a*t*P(t) with t = a^2 below TANH32_SWITCH, else
  1 - 2 / (exp(2a) + 1) with a clamped to at most 10 (tanh is 1.0 in float32 from 9.01 on). On that range
  2a = n ln2 + r with n between 2 and 29, so exp needs no underflow or overflow handling: exp(r) * 2**n."""
  a = _abs_bits(x)
  t = a * a
  near_zero = a + a * t * horner(t, TANH32_SMALL)
  clamped = (a < TANH32_SWITCH).where(TANH32_SWITCH, (a > 10.0).where(10.0, a))   # NaN stays NaN
  n, r = _ln2_multiples(clamped * 2.0)
  e = horner(r, EXP_SMALL_F32) * power_of_two(n)
  return _with_sign_of((a < TANH32_SWITCH).where(near_zero, 1.0 - 2.0 / (e + 1.0)), x)


def tanh_forward(x: Tensor) -> Tensor:
  """float32 (and float16/bfloat16, computed in float32): _tanh_f32. float64: tanh|x| = a + a^3 P(a^2) below 0.55
  (a fitted polynomial: no cancellation, no libm call), and 1 - 2 / (exp(2a) + 1) beyond (the correction to 1 is
  computed, not the value); the sign is restored last."""
  if x.dtype == dtypes.float32: return _tanh_f32(x)
  a = x.abs()
  t = a * a
  near_zero = a + a * t * horner(t * (1 / 0.15125) - 1.0, TANH_SMALL)
  far = 1.0 - 2.0 / (exp_forward(a.maximum(0.55) * 2.0) + 1.0)
  magnitude = (a < 0.55).where(near_zero, far)
  return (x < 0).where(-magnitude, magnitude)


def sigmoid_forward(x: Tensor) -> Tensor: return 1.0 / (1.0 + exp_forward(-x))


# ---- hyperbolic and inverse trigonometric functions, computed in float64 for float32 and smaller (rounded once) ----

def _signed_like(magnitude: Tensor, v: Tensor) -> Tensor:
  """magnitude with v's sign, for odd functions: -magnitude where v < 0, and v itself where v is +-0.0."""
  return (v < 0).where(-magnitude, v.eq(0).where(v, magnitude))


def _sinh_f64(v: Tensor) -> Tensor:
  """sinh|v| = (u + u/(u+1))/2 with u = expm1|v| below 1 (no cancellation near 0), else h*h/2 - 1/(2*h*h) with
  h = exp(|v|/2) (finite as long as sinh is); the sign is restored last."""
  a = v.abs()
  u = expm1_forward(a.minimum(1.0))
  small = 0.5 * (u + u / (u + 1.0))
  h = exp_forward(a * 0.5)
  large = (0.5 * h) * h - (0.5 / h) / h
  magnitude = (a < 1.0).where(small, large)
  return _signed_like(magnitude, v)


def _cosh_f64(v: Tensor) -> Tensor:
  h = exp_forward(v.abs() * 0.5)
  return (0.5 * h) * h + (0.5 / h) / h


def _atan_f64(v: Tensor) -> Tensor:
  """atan by reduction to |u| <= tan(pi/8): atan(a) = pi/2 - atan(1/a) for a > 1, pi/4 + atan((a-1)/(a+1)) for a
  > tan(pi/8), then the ATAN_SMALL polynomial; atan(+-inf) = +-pi/2 and NaN stays NaN."""
  a = v.abs()
  inverted = a > 1.0
  t = inverted.where(1.0 / a, a)
  shifted = t > TAN_PI_8
  u = shifted.where((t - 1.0) / (t + 1.0), t)
  z = u * u
  r = u + u * z * horner(z, ATAN_SMALL)
  r = shifted.where(r + PI_4, r)
  r = inverted.where(PI_2 - r, r)
  return _signed_like(r, v)


def sinh_forward(x: Tensor) -> Tensor: return _in_float64(x, _sinh_f64)
def cosh_forward(x: Tensor) -> Tensor: return _in_float64(x, _cosh_f64)
def atan_forward(x: Tensor) -> Tensor: return _in_float64(x, _atan_f64)


def asin_forward(x: Tensor) -> Tensor:
  """asin(x) = atan(x / sqrt((1-x)(1+x))): the product keeps 1 - x*x exact near +-1; |x| > 1 gives NaN."""
  return _in_float64(x, lambda v: _atan_f64(v / ((1.0 - v) * (1.0 + v)).sqrt()))


def acos_forward(x: Tensor) -> Tensor:
  """acos(x) = 2 atan(sqrt((1-x)/(1+x))): accurate near 1, where pi/2 - asin(x) would cancel."""
  return _in_float64(x, lambda v: 2.0 * _atan_f64(((1.0 - v) / (1.0 + v)).sqrt()))


def asinh_forward(x: Tensor) -> Tensor:
  """asinh|x| = log1p(a + a*a/(1 + sqrt(1 + a*a))) (accurate near 0), log(a) + ln2 beyond 2**28 (a*a would overflow)."""
  def fn(v: Tensor) -> Tensor:
    a = v.abs()
    moderate = a.minimum(2.0 ** 28)
    near = log1p_forward(moderate + moderate * moderate / (1.0 + (1.0 + moderate * moderate).sqrt()))
    magnitude = (a > 2.0 ** 28).where(_log_forward(a) + LN2, near)
    return _signed_like(magnitude, v)
  return _in_float64(x, fn)


def acosh_forward(x: Tensor) -> Tensor:
  """acosh(x) = log1p(t + sqrt(2t + t*t)) with t = x - 1 (accurate near 1), log(x) + ln2 beyond 2**28; x < 1 gives NaN."""
  def fn(v: Tensor) -> Tensor:
    t = v.minimum(2.0 ** 28) - 1.0
    out = (v > 2.0 ** 28).where(_log_forward(v) + LN2, log1p_forward(t + (2.0 * t + t * t).sqrt()))
    return (v < 1.0).where(math.nan, out)
  return _in_float64(x, fn)


def atanh_forward(x: Tensor) -> Tensor:
  """atanh|x| = log1p(2a / (1 - a)) / 2 with a = |x| (log1p's argument stays >= 0, where it is well conditioned):
  +-inf at +-1, NaN beyond; the sign is restored last."""
  def fn(v: Tensor) -> Tensor:
    a = v.abs()
    magnitude = 0.5 * log1p_forward(2.0 * a / (1.0 - a))
    return _signed_like(magnitude, v)
  return _in_float64(x, fn)


def erf_forward(x: Tensor) -> Tensor:
  a = x.abs()
  if x.dtype == dtypes.float32:
    large = 1.0 - horner(a - 2.5, ERF32_LARGE)
    large = (a >= 4.0).where(1.0, large)
    return (a < 1.0).where(x + x * horner(x * x, ERF32_SMALL), (x < 0).where(-large, large))
  t = a * a
  small = x * horner(t * 0.5 - 1.0, ERF_SMALL)
  inv = 1.0 / a.maximum(2.0)
  large = 1.0 - exp_forward(-t) * horner(inv * 6.0 - 2.0, ERFC_LARGE)
  large = (a > 6.0).where(1.0, large)
  return (a < 2.0).where(small, (x < 0).where(-large, large))


class UnaryMixin:
  """Elementwise functions of Tensor (see minigrad.tensor)."""

  # ---- precision helpers ----
  def _opmath(self, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """fn on float values, computed as torch does: float16/bfloat16 in float32 (one rounding at the end),
    integers in the default float."""
    x = self._float()
    return fn(x.cast(dtypes.float32)).cast(x.dtype) if x.dtype in (dtypes.float16, dtypes.bfloat16) else fn(x)

  def _primitive(self, forward: Callable[[Tensor], Tensor], derivative: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
    """A differentiable elementwise function: `forward` (in float32 for float16/bfloat16) and its derivative
    `derivative(x, y)` in terms of the input x and the output y. `forward` must be a module-level function: it
    keys the graphs built once and copied onto each input (minigrad.tensor.function.Composite)."""
    return F.Composite.apply(self._float(), fn=lambda x: x._opmath(forward), gradient=lambda grad, y, x: (grad * derivative(x, y),),
                             key=forward)

  # ---- exponentials and logarithms ----
  def exp(self) -> Tensor: return self._primitive(exp_forward, lambda x, y: y)
  def _exp_at_most_zero(self) -> Tensor:
    """exp of a tensor known to hold values <= 0 or NaN (softmax's x - max): a few operations fewer."""
    return self._primitive(_exp_at_most_zero_forward, lambda x, y: y)
  def exp2(self) -> Tensor: return self._float()._alu(Ops.EXP2)
  def expm1(self) -> Tensor: return self._primitive(expm1_forward, lambda x, y: y + 1)
  def log(self) -> Tensor: return self._primitive(_log_forward, lambda x, y: 1 / x)
  def log2(self) -> Tensor: return self._float()._alu(Ops.LOG2)
  def log10(self) -> Tensor: return self._primitive(_log10_forward, lambda x, y: 1 / (x * math.log(10)))
  def log1p(self) -> Tensor: return self._primitive(log1p_forward, lambda x, y: 1 / (x + 1))
  def sqrt(self) -> Tensor: return self._float()._alu(Ops.SQRT)
  def rsqrt(self) -> Tensor: return self._opmath(lambda x: x.sqrt().reciprocal())
  def reciprocal(self) -> Tensor: return self._float()._alu(Ops.RECIP)
  def square(self) -> Tensor: return self * self

  # ---- trigonometry and hyperbolic functions ----
  def sin(self) -> Tensor: return self._primitive(_sin_of, lambda x, y: x.cos())
  def cos(self) -> Tensor: return self._primitive(cos_forward, lambda x, y: -x.sin())
  def tan(self) -> Tensor: return self._primitive(tan_forward, lambda x, y: 1 + y * y)
  def tanh(self) -> Tensor: return self._primitive(tanh_forward, lambda x, y: 1 - y * y)
  def sigmoid(self) -> Tensor: return self._primitive(sigmoid_forward, lambda x, y: y * (1 - y))
  def erf(self) -> Tensor: return self._primitive(erf_forward, lambda x, y: TWO_OVER_SQRT_PI * (-x * x).exp())
  def sinh(self) -> Tensor: return self._primitive(sinh_forward, lambda x, y: x.cosh())
  def cosh(self) -> Tensor: return self._primitive(cosh_forward, lambda x, y: x.sinh())
  def asin(self) -> Tensor: return self._primitive(asin_forward, lambda x, y: ((1 - x) * (1 + x)).rsqrt())
  def acos(self) -> Tensor: return self._primitive(acos_forward, lambda x, y: -((1 - x) * (1 + x)).rsqrt())
  def atan(self) -> Tensor: return self._primitive(atan_forward, lambda x, y: 1 / (1 + x * x))
  def asinh(self) -> Tensor: return self._primitive(asinh_forward, lambda x, y: (x * x + 1).rsqrt())
  def acosh(self) -> Tensor: return self._primitive(acosh_forward, lambda x, y: ((x - 1) * (x + 1)).rsqrt())
  def atanh(self) -> Tensor: return self._primitive(atanh_forward, lambda x, y: 1 / ((1 - x) * (1 + x)))

  # ---- sign and rounding (zero gradient, as torch); integers pass through ----
  def _piecewise_constant(self, fn: Callable[[Tensor], Tensor]) -> Tensor:
    if not dtypes.is_float(self.dtype): return self
    return F.Composite.apply(self, fn=lambda x: x._opmath(fn), gradient=lambda grad, y, x: (grad.zeros_like(),))

  def trunc(self) -> Tensor: return self._piecewise_constant(lambda x: x._alu(Ops.TRUNC))
  def floor(self) -> Tensor:
    return self._piecewise_constant(lambda x: (t := x._alu(Ops.TRUNC)) - (x < t).cast(x.dtype))
  def ceil(self) -> Tensor:
    return self._piecewise_constant(lambda x: (t := x._alu(Ops.TRUNC)) + (x > t).cast(x.dtype))

  def round(self) -> Tensor:
    """Round half to even, like torch.round (0.5 -> 0, 1.5 -> 2, -2.5 -> -2). Exact for every float: the
    fraction x - trunc(x) is computed without rounding."""
    def half_even(x: Tensor) -> Tensor:
      t = x._alu(Ops.TRUNC)
      fraction = (x - t).abs()
      t_is_odd = (t - (t * 0.5)._alu(Ops.TRUNC) * 2.0).ne(0)
      away = (fraction > 0.5) | (fraction.eq(0.5) & t_is_odd)
      return away.where(t + (x < 0).where(-1.0, 1.0), t)
    return self._piecewise_constant(half_even)

  def sign(self) -> Tensor:
    """-1, 0 or 1 (0 for NaN, as torch); bools stay bools, unsigned ints are 0 or 1."""
    if self.dtype == dtypes.bool: return self
    def fn(x: Tensor) -> Tensor:
      positive = (x > 0).cast(x.dtype)
      return positive if dtypes.is_unsigned(x.dtype) else positive - (x < 0).cast(x.dtype)
    return self._piecewise_constant(fn) if dtypes.is_float(self.dtype) else fn(self)

  def abs(self) -> Tensor: return self if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool else self.maximum(-self)

  # ---- activation functions ----
  def relu(self) -> Tensor: return F.Relu.apply(self)

  def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """Clamp to [min_val, max_val] with gradient only strictly inside (torch's hardtanh/relu6)."""
    return (self <= min_val).where(min_val, (self >= max_val).where(max_val, self))

  def relu6(self) -> Tensor: return self.hardtanh(0.0, 6.0)
  def leaky_relu(self, negative_slope: float = 0.01) -> Tensor: return (self > 0).where(self, self * negative_slope)

  def elu(self, alpha: float = 1.0) -> Tensor:
    positive = self > 0
    return self._opmath(lambda x: positive.where(x, alpha * positive.where(0.0, x).expm1()))   # expm1 never sees large inputs

  def selu(self) -> Tensor:
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    return self._opmath(lambda x: scale * x.elu(alpha))

  def celu(self, alpha: float = 1.0) -> Tensor:
    positive = self > 0
    return self._opmath(lambda x: positive.where(x, alpha * positive.where(0.0, x / alpha).expm1()))

  def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta*x)) / beta, and x itself where beta*x > threshold (torch's numerically safe form)."""
    def fn(x: Tensor) -> Tensor:
      scaled = x * beta
      linear = scaled > threshold
      return linear.where(x, linear.where(0.0, scaled).exp().log1p() / beta)
    return self._opmath(fn)

  def logsigmoid(self) -> Tensor:
    """log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), torch's form (no threshold, no overflow)."""
    return self._opmath(lambda x: x.minimum(0.0) - (-x.abs()).exp().log1p())
  def silu(self) -> Tensor: return self._opmath(lambda x: x * x.sigmoid())
  swish = silu
  def mish(self) -> Tensor: return self._opmath(lambda x: x * x.softplus().tanh())
  def hardsigmoid(self) -> Tensor: return self._opmath(lambda x: (x + 3.0).relu6() / 6.0)

  def hardswish(self) -> Tensor:
    """x * relu6(x + 3) / 6; the gradient is torch's: 0 up to -3, x/3 + 1/2 inside, 1 from 3 on."""
    return self._opmath(lambda x: x * (x + 3.0).relu6() / 6.0)

  def gelu(self, approximate: str = "none") -> Tensor:
    """x * Phi(x) with the exact normal CDF (approximate="none", torch's default) or the tanh approximation
    (approximate="tanh", which is tinygrad's gelu; minigrad keeps torch's default)."""
    if approximate == "none": return self._opmath(lambda x: 0.5 * x * (1.0 + (x * SQRT_HALF).erf()))
    if approximate == "tanh": return self._opmath(lambda x: 0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh()))
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")

  def softsign(self) -> Tensor:
    """x / (1 + |x|) (torch.nn.functional.softsign)."""
    return self._opmath(lambda x: x / (1.0 + x.abs()))

  def quick_gelu(self) -> Tensor: return self._opmath(lambda x: x * (x * 1.702).sigmoid())
