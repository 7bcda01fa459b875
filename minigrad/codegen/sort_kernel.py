"""The C spelling of Ops.SORT: a helper function the C renderer puts before a sort kernel.

Input: the linearized uops of a kernel. Output: C source lines (the helper) and the call that sorts one row.

A sort kernel (built by minigrad.schedule.scheduler._KernelBuilder._sort_kernel) loops over rows; for each it
stores SORT(LOAD(in)) at the row's first element: `sort_row_by_high32(&out[start], &in[start], length)` sorts the
row's uint64 words by their high 32 bits, keeping equal ones in their order (stable). minigrad.tensor.sort_ops packs
(order key << 32 | position), so the result is sorted by key, then position.

The algorithm: a radix sort of the key. Rows of at most CACHED_ROW words: 8-bit digits, least significant first,
with a scratch row on the stack (the shortest rows: insertion sort). Longer rows: 11-bit digits and a scratch row
from malloc. One pass counts every digit's values; a digit every key shares is skipped (small integers, keys of one
sign and exponent). When more than one digit differs and no bucket of the top differing digit is longer than
BUCKET_ROW words, one pass moves the words into those buckets, and each bucket is then sorted by the lower digits on
its own, in cache; else each differing digit takes a pass over the whole row, least significant first. Every pass is
stable, so the sort is. The constants belong to the algorithm (a 32 KB row fits every L1 data cache, a 1 MB bucket
and its scratch most L2s), not to a machine.
"""
from __future__ import annotations
from minigrad.uop.ops import UOp, Ops

SMALL_ROW = 64          # rows up to this length: insertion sort
CACHED_ROW = 4096       # up to this length (32 KB of words): 8-bit digits, in two buffers on the stack
WIDE_DIGIT_BITS = 11    # longer rows: 11-bit digits (three of them)
BUCKET_ROW = 1 << 17    # a long row's buckets by its top digit are sorted one by one when none is longer (1 MB)

HELPER = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
/* Rows of uint64 words sorted by their high 32 bits (the key), stably. */
static void sort_insertion(uint64_t *restrict out, const uint64_t *restrict in, long n) {
  for (long i = 0; i < n; i++) {
    uint64_t word = in[i];
    long j = i;
    while (j > 0 && (out[j - 1] >> 32) > (word >> 32)) { out[j] = out[j - 1]; j--; }
    out[j] = word;
  }
}
/* count[d * 2**bits + v]: how many keys have value v in digit d (`bits` wide, digit 0 the lowest), for the digits
   below `digits`; returns how many of them differ between keys, their numbers in `moving`, lowest first */
static int sort_count(const uint64_t *in, long n, int bits, int digits, uint32_t *count, int *moving) {
  const int values = 1 << bits;
  const uint32_t mask = values - 1;
  memset(count, 0, sizeof(uint32_t) * values * digits);
  for (long i = 0; i < n; i++) {
    uint32_t key = (uint32_t)(in[i] >> 32);
    for (int d = 0; d < digits; d++) count[d * values + ((key >> (d * bits)) & mask)]++;
  }
  int passes = 0;
  const uint32_t first = (uint32_t)(in[0] >> 32);
  for (int d = 0; d < digits; d++)   /* a digit every key shares moves nothing */
    if (count[d * values + ((first >> (d * bits)) & mask)] != (uint32_t)n) moving[passes++] = d;
  return passes;
}
/* one stable pass: src into dst by digit d; `count` (that digit's) becomes where each value's words end */
static void sort_scatter(uint64_t *restrict dst, const uint64_t *restrict src, long n, int bits, int d, uint32_t *count) {
  const int values = 1 << bits, shift = 32 + d * bits;
  const uint32_t mask = values - 1;
  uint32_t offset = 0;
  for (int v = 0; v < values; v++) { uint32_t c = count[v]; count[v] = offset; offset += c; }
  for (long i = 0; i < n; i++) { uint64_t word = src[i]; dst[count[(word >> shift) & mask]++] = word; }
}
/* least-significant digit first over moving[0..passes), alternating between out and scratch so the last pass
   writes out (in is only read) */
static void sort_lsd(uint64_t *restrict out, const uint64_t *restrict in, long n, int bits, uint32_t *count, const int *moving, int passes, uint64_t *restrict scratch) {
  const uint64_t *src = in;
  for (int p = 0; p < passes; p++) {
    uint64_t *dst = ((passes - p) & 1) ? out : scratch;
    sort_scatter(dst, src, n, bits, moving[p], count + moving[p] * (1 << bits));
    src = dst;
  }
  if (src != out) memcpy(out, src, sizeof(uint64_t) * n);
}
/* a row of at most CACHED_ROW words: 8-bit digits, scratch on the stack */
static void sort_cached(uint64_t *restrict out, const uint64_t *restrict in, long n) {
  if (n <= SMALL_ROW) { sort_insertion(out, in, n); return; }
  uint64_t scratch[CACHED_ROW];
  uint32_t count[4 * 256];
  int moving[4], passes = sort_count(in, n, 8, 4, count, moving);
  sort_lsd(out, in, n, 8, count, moving, passes, scratch);
}
/* out[0..n) = in[0..n) sorted by key, stably. A long row whose keys differ in more than one digit and whose buckets
   by the top differing digit are at most BUCKET_ROW words: one pass by that digit, then each bucket by the lower
   ones on its own, in cache; else every differing digit over the whole row, least significant first. */
static void sort_row_by_high32(uint64_t *restrict out, const uint64_t *restrict in, long n) {
  if (n <= CACHED_ROW) { sort_cached(out, in, n); return; }
  const int bits = WIDE_DIGIT_BITS, values = 1 << WIDE_DIGIT_BITS;
  uint64_t *scratch = (uint64_t *)malloc(sizeof(uint64_t) * n);
  uint32_t *count = (uint32_t *)malloc(sizeof(uint32_t) * 3 * values * 2);
  if (scratch == NULL || count == NULL) { free(scratch); free(count); sort_insertion(out, in, n); return; }   /* slow, never wrong */
  int moving[3], passes = sort_count(in, n, bits, 3, count, moving);
  uint32_t *top = count + (passes ? moving[passes - 1] : 0) * values, largest = 0;
  for (int v = 0; passes > 1 && v < values; v++) if (top[v] > largest) largest = top[v];
  if (passes < 2 || largest > BUCKET_ROW) sort_lsd(out, in, n, bits, count, moving, passes, scratch);
  else {
    uint64_t *bucket_scratch = (uint64_t *)malloc(sizeof(uint64_t) * largest);
    uint32_t *bucket_count = count + 3 * values, size[1 << WIDE_DIGIT_BITS];
    memcpy(size, top, sizeof(uint32_t) * values);
    sort_scatter(scratch, in, n, bits, moving[passes - 1], top);   /* top[v]: where bucket v ends */
    for (int v = 0; v < values; v++) {
      if (size[v] == 0) continue;
      long start = top[v] - size[v];
      if (size[v] <= CACHED_ROW) { sort_cached(out + start, scratch + start, size[v]); continue; }
      if (bucket_scratch == NULL) { sort_insertion(out + start, scratch + start, size[v]); continue; }
      int bucket_moving[3], bucket_passes = sort_count(scratch + start, size[v], bits, moving[passes - 1], bucket_count, bucket_moving);
      sort_lsd(out + start, scratch + start, size[v], bits, bucket_count, bucket_moving, bucket_passes, bucket_scratch);
    }
    free(bucket_scratch);
  }
  free(scratch);
  free(count);
}
""".replace("SMALL_ROW", str(SMALL_ROW)).replace("CACHED_ROW", str(CACHED_ROW)).replace("WIDE_DIGIT_BITS", str(WIDE_DIGIT_BITS)) \
   .replace("BUCKET_ROW", str(BUCKET_ROW))


def sort_helpers(uops: list[UOp]) -> list[str]:
  """The helper's source lines when the kernel sorts, else none."""
  return HELPER.strip("\n").split("\n") if any(u.op is Ops.SORT for u in uops) else []


def sort_call(out_element: str, in_element: str, length: int) -> str:
  """The statement sorting the row of `length` words that starts at `in_element` into the one at `out_element`
  (both rendered array elements, data0[...])."""
  return f"sort_row_by_high32((uint64_t *)&{out_element}, (const uint64_t *)&{in_element}, {length});"
