// What every memory of the stack RNN's C++ loops (memrnn/ops/stack_rnn/native.cpp) shares: the
// SIMD macros, the strength-weighted readings of Grefenstette et al. (2015) and their backward,
// the cell mixes of the superposition stack and the tape, the final states' gradients, and what
// the shared loop hands a memory's step (MemoryForward, MemoryBackward).  Each memory's steps live
// in its own folder's native.h (memrnn/ops/<memory>/native.h), which includes this; native.cpp
// includes those and calls them through a switch on MemoryKind (memory_kinds.h).  One translation
// unit includes these headers (native.cpp), hence their anonymous namespace.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

// every loop over the batch is independent across b: let the compiler vectorise it
#define MEMRNN_SIMD _Pragma("omp simd")
#define MEMRNN_PRAGMA(x) _Pragma(#x)
#define MEMRNN_SIMD_SUM(v) MEMRNN_PRAGMA(omp simd reduction(+ : v))

namespace {

// What the shared loop needs to know of a memory before it runs (each memory's kTraits).
struct MemoryTraits {
  bool softmax;           // its actions are a softmax over the k heads (else a sigmoid each)
  bool jumps;             // it reads each row's shift (`jumps` [B], int64: the jump tape)
  bool windows;           // its values slide in P and its strengths in S (the stratification memories)
  bool top_half;          // its top half's values slide in P2 (the DeQue)
  int64_t grad_buffers;   // its gradient state's buffers (gm)
  int64_t forward_rows;   // its forward scratch, in [D, B] rows (beside the shared scratch)
  int64_t backward_rows;  // its backward scratch, in [D, B] rows
  // its rows after h are cells from the top ([D+1, m, B]: a trimmed window's live cells are the
  // first ones) and its state is z's alone, so its steps can be rerun from z (native.cpp's
  // "Recomputed memory")
  bool cells = false;
};

// Step s of the forward, as a memory's step sees it: the step's actions `as` [k, B] (activated)
// and value `v` [K − k, B]; the loop's buffers (z's rows at zp, the overflow of step s at ov, P,
// P2, S, the jumps, cpu.py's layout) and scratch (acc [B], cov [D, B], W [max(D, 1), m, B], cells
// [3, m, B], dq [forward_rows, D, B]); `live` [2, T+1] (int64; null: the full window): a memory's
// trimmed windows, row 0 the cells of the state after each step that can matter (see the
// superposition stack's _live in memrnn/ops/superposition/cpu.py), row 1 its gradient's.
template <typename T>
struct MemoryForward {
  int64_t s, T_, B, N, Z, D, m;
  bool want_overflow;
  const T* as;
  const T* v;
  T* zp;
  T* ov;
  T* Pp;
  T* P2p;
  T* Sp;
  const int64_t* jp;
  T* acc;
  T* cov;
  T* W;
  T* cells;
  T* dq;
  const int64_t* live = nullptr;
};

// Step s of the backward (t = s + 1), as a memory's step sees it: from ∂L/∂(the reading) at gzr
// and its gradient state gm (cur: the alternating buffers' current one), it writes ∂L/∂actions
// into gas [k, B] and ∂L/∂v into gv and moves the state's gradient to step s.  Scratch: acc [B],
// c1..c4 [D, B], sums [5, B], cells [6, m, B], dq [backward_rows, D, B]; `live` as MemoryForward's.
template <typename T>
struct MemoryBackward {
  int64_t s, t, T_, B, N, Z, k, D, m, cur;
  const T* as;
  const T* v;
  const T* zp;
  const T* Pp;
  const T* P2p;
  const T* Sp;
  const int64_t* jp;
  const std::vector<at::Tensor>& gm;
  T* gas;
  T* gv;
  T* gzr;
  T* acc;
  T* c1;
  T* c2;
  T* c3;
  T* c4;
  T* sums;
  T* cells;
  T* dq;
  const int64_t* live = nullptr;
};

// covered(x) along the D rows of x [D, B] (memrnn.ops.stratification.covered): the inclusive
// running sum in the structure's reading direction minus the element itself (newest first: a
// stack sums from the top, a queue from the bottom).  `transpose` gives covered_transpose.
template <typename T>
void covered(const T* x, T* out, int64_t D, int64_t B, bool from_top, T* acc) {
  std::fill(acc, acc + B, T(0));
  for (int64_t n = 0; n < D; ++n) {
    const int64_t i = from_top ? n : D - 1 - n;
    const T* xi = x + i * B;
    T* oi = out + i * B;
    MEMRNN_SIMD
    for (int64_t b = 0; b < B; ++b) {
      acc[b] += xi[b];
      oi[b] = acc[b] - xi[b];
    }
  }
}

// The strength-weighted reading of Grefenstette et al. (2015, eq. 3) over D cells: r += Σ_i w_i ⊙
// val(i) with w_i = min(s_i, max(1 − covered_i, 0)).  `cov [D, B]` holds covered(s) and is
// overwritten with the weights; val(i) points at cell i's values [m, B]; r [m, B].
template <typename T, typename Val>
void read_cells(const T* s, T* cov, int64_t D, int64_t m, int64_t B, Val val, T* r) {
  for (int64_t i = 0; i < D; ++i) {
    T* wi = cov + i * B;
    MEMRNN_SIMD
    for (int64_t b = 0; b < B; ++b) wi[b] = std::min(s[i * B + b], std::max(T(1) - wi[b], T(0)));
    const T* vi = val(i);
    for (int64_t j = 0; j < m; ++j) {
      T* rj = r + j * B;
      const T* vj = vi + j * B;
      MEMRNN_SIMD
      for (int64_t b = 0; b < B; ++b) rj[b] += wi[b] * vj[b];
    }
  }
}

// Its backward from gr = ∂L/∂r [m, B]: gs += ∂L/∂s through the min (½ at a tie, as autograd),
// u [D, B] = ∂L/∂w through the max, to be passed back through covered's transpose and
// subtracted; gval(i) += w_i ⊙ gr.  `cov` as in read_cells (holds the weights afterwards).
template <typename T, typename Val, typename GVal>
void read_cells_backward(const T* s, T* cov, int64_t D, int64_t m, int64_t B, Val val, GVal gval,
                         const T* gr, T* gs, T* u) {
  for (int64_t i = 0; i < D; ++i) {
    const T* vi = val(i);
    T* ui = u + i * B;
    std::fill(ui, ui + B, T(0));
    for (int64_t j = 0; j < m; ++j) {
      const T* vj = vi + j * B;
      const T* grj = gr + j * B;
      MEMRNN_SIMD
      for (int64_t b = 0; b < B; ++b) ui[b] += vj[b] * grj[b];  // ∂L/∂w
    }
    T* wi = cov + i * B;
    MEMRNN_SIMD
    for (int64_t b = 0; b < B; ++b) {
      const T si = s[i * B + b];
      const T a = T(1) - wi[b];
      const T r = std::max(a, T(0));
      const T da = si < r ? T(1) : (si == r ? T(0.5) : T(0));
      gs[i * B + b] += ui[b] * da;
      ui[b] *= a >= 0 ? T(1) - da : T(0);
      wi[b] = std::min(si, r);
    }
    T* gvi = gval(i);
    for (int64_t j = 0; j < m; ++j) {
      T* gvj = gvi + j * B;
      const T* grj = gr + j * B;
      MEMRNN_SIMD
      for (int64_t b = 0; b < B; ++b) gvj[b] += wi[b] * grj[b];
    }
  }
}

// n[b] = c0[b]·x0[b] + c1[b]·x1[b] + c2[b]·x2[b]: a cell of the superposition stack or the tape
// from three cells and three per-row action weights (and the same map's transpose)
template <typename T>
inline void mix3(T* n, const T* x0, const T* c0, const T* x1, const T* c1, const T* x2, const T* c2,
                 int64_t B) {
  MEMRNN_SIMD
  for (int64_t b = 0; b < B; ++b) {
    T t = x0[b] * c0[b];
    t += x1[b] * c1[b];
    t += x2[b] * c2[b];
    n[b] = t;
  }
}

// out[j·B + b] = a[b] for j < m: a per-row action weight laid out as a cell of m units, so that
// a loop over a whole cell (m·B contiguous values) vectorises even when B is small
template <typename T>
inline void tile(const T* a, T* out, int64_t m, int64_t B) {
  for (int64_t j = 0; j < m; ++j) std::copy(a, a + B, out + j * B);
}

// out[r·B + b] += Σ_j su[r·m·B + j·B + b] for r < R: per-unit sums (R rows of cells) to per-row sums
template <typename T>
inline void sum_units(const T* su, int64_t R, int64_t m, int64_t B, T* out) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < m; ++j) {
      const T* xj = su + (r * m + j) * B;
      MEMRNN_SIMD
      for (int64_t b = 0; b < B; ++b) out[r * B + b] += xj[b];
    }
}

// Add `g [B, rows, cols]` (a final state's gradient, batch first) into `dst [rows·cols, B]` for
// the rows b whose length is t.
template <typename T>
void add_final(const at::Tensor& g, T* dst, const int64_t* lens, int64_t t, int64_t B,
               int64_t n, int64_t row = -1, int64_t offset = 0) {
  if (!g.defined()) return;
  const T* gp = g.data_ptr<T>() + offset;
  if (row < 0) row = n;  // the source's row length: n unless a slice of longer rows
  MEMRNN_SIMD
  for (int64_t b = 0; b < B; ++b) {
    if (lens[b] != t) continue;
    for (int64_t j = 0; j < n; ++j) dst[j * B + b] += gp[b * row + j];
  }
}

}  // namespace
