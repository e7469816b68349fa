// Grefenstette et al.'s (2015) stratification stack and neural queue in the stack RNN's C++ loops
// (memrnn/ops/stack_rnn/native.cpp; their Python kernels: memrnn/ops/stratification/cpu.py, the
// queue's a StratificationKernel read from the other end): values slide in P [T+D, m, B] (the
// value pushed at step s at P[T-1-s]), strengths s [T+1, D, B], the reading in z's memory rows
// [m, B]; actions push, pop (a sigmoid each).  Gradient state gm = (gP [T+D, m, B], g [D, B]).
// Trimmed window (`live`, from StratificationKernel._live in cpu.py): the forward runs over the
// slots that can hold strength (C(t) = min(t, D) from zero strengths; the others are zeros in S),
// the backward over G(t) slots; every value computed is the full window's, bit for bit.
#pragma once

#include "stack_rnn/native_common.h"

namespace {

// kFromTop: the stack (covered sums from the top); else the queue (from the bottom)
template <bool kFromTop>
struct StratificationOf {
  static constexpr MemoryTraits kTraits{false, false, true, false, 2, 0, 0};

  template <typename T>
  static void forward(const MemoryForward<T>& f) {
    const int64_t s = f.s, T_ = f.T_, B = f.B, N = f.N, Z = f.Z, D = f.D, m = f.m;
    const bool from_top = kFromTop;
    const T* as = f.as;
    const T* v = f.v;
    T* zp = f.zp;
    T* ov = f.ov;
    T* Pp = f.Pp;
    T* Sp = f.Sp;
    T* cov = f.cov;
    const T* push = as;
    const T* pop = as + B;
    const T* old = Sp + s * D * B;
    T* nw = Sp + (s + 1) * D * B;
    const int64_t n = f.live ? f.live[s] : D, n1 = f.live ? f.live[s + 1] : D;  // slots of S_s, S_{s+1}
    covered(old, cov, n, B, from_top, f.acc);
    // popped[i] = max(old[i] − max(pop − covered[i], 0), 0) moves down one cell
    if (n < D && f.want_overflow) std::fill(ov, ov + B, T(0));  // slot D − 1 still empty
    for (int64_t i = 0; i < n; ++i) {
      T* dst = i + 1 < D ? nw + (i + 1) * B : nullptr;
      MEMRNN_SIMD
      for (int64_t b = 0; b < B; ++b) {
        const T p = std::max(old[i * B + b] - std::max(pop[b] - cov[i * B + b], T(0)), T(0));
        if (dst) {
          dst[b] = p;
        } else if (f.want_overflow) {
          ov[b] = p;  // what falls off the bottom of the window
        }
      }
    }
    std::copy(push, push + B, nw);
    std::copy(v, v + m * B, Pp + (T_ - 1 - s) * m * B);
    covered(nw, cov, n1, B, from_top, f.acc);
    T* r = zp + (s + 1) * Z * B + N * B;  // [m, B]
    std::fill(r, r + m * B, T(0));
    const T* win = Pp + (T_ - 1 - s) * m * B;  // window of step s+1: P[T−s−1 : T−s−1+D]
    read_cells(nw, cov, n1, m, B, [&](int64_t i) { return win + i * m * B; }, r);
  }

  // the final values (gfin[0], [B, D, m]) into gP's window, strengths (gfin[1]) into g, reading
  // (gfin[2]) into gzr
  template <typename T>
  static void add_final_grads(const MemoryBackward<T>& g, const std::vector<at::Tensor>& gfin,
                              const int64_t* lens) {
    const int64_t t = g.t, B = g.B, D = g.D, m = g.m;
    add_final<T>(gfin[0], g.gm[0].template data_ptr<T>() + (g.T_ - t) * m * B, lens, t, B, D * m);
    add_final<T>(gfin[1], g.gm[1].template data_ptr<T>(), lens, t, B, D);
    add_final<T>(gfin[2], g.gzr, lens, t, B, m);
  }

  template <typename T>
  static void backward(const MemoryBackward<T>& gs) {
    const int64_t s = gs.s, t = gs.t, T_ = gs.T_, B = gs.B, D = gs.D, m = gs.m;
    const bool from_top = kFromTop;
    const T* as = gs.as;
    const T* Pp = gs.Pp;
    const T* Sp = gs.Sp;
    T* gas = gs.gas;
    T* gv = gs.gv;
    T* gzr = gs.gzr;
    T* acc = gs.acc;
    T* c1 = gs.c1;
    T* c2 = gs.c2;
    T* c3 = gs.c3;
    T* c4 = gs.c4;
    T* gP = gs.gm[0].template data_ptr<T>();
    T* g = gs.gm[1].template data_ptr<T>();  // ∂L/∂s_{s+1} [D, B], becomes ∂L/∂s_s
    const T* old = Sp + s * D * B;
    const T* nw = Sp + t * D * B;
    const T* pop = as + B;
    const T* win = Pp + (T_ - t) * m * B;  // step t's window, [D, m, B]
    T* gwin = gP + (T_ - t) * m * B;
    // the slots of S_{s+1} and S_s whose strengths' gradient can matter (the trimmed window)
    const int64_t n1 = gs.live ? gs.live[T_ + 1 + t] : D, n = gs.live ? gs.live[T_ + 1 + s] : D;
    // the reading: c3 = g_new before the covered term, c4 = what goes back through it
    covered(nw, c1, n1, B, from_top, acc);
    std::copy(g, g + n1 * B, c3);
    read_cells_backward(nw, c1, n1, m, B, [&](int64_t i) { return win + i * m * B; },
                        [&](int64_t i) { return gwin + i * m * B; }, gzr, c3, c4);
    covered(c4, c1, n1, B, !from_top, acc);  // covered_transpose
    MEMRNN_SIMD
    for (int64_t j = 0; j < n1 * B; ++j) c3[j] -= c1[j];  // c3 = g_new
    std::copy(c3, c3 + B, gas);  // push
    covered(old, c1, n, B, from_top, acc);
    // the pop: a1 = pop − covered(old), a2 = old − max(a1, 0); c4 = g_a1 (= −∂L/∂a1), c2 = g_a2
    T* gpop = gas + B;
    std::fill(gpop, gpop + B, T(0));
    for (int64_t i = 0; i < n; ++i) {
      MEMRNN_SIMD
      for (int64_t b = 0; b < B; ++b) {
        const int64_t ib = i * B + b;
        const T a1 = pop[b] - c1[ib];
        const T a2 = old[ib] - std::max(a1, T(0));
        const T ga2 = i + 1 < D && a2 >= 0 ? c3[ib + B] : T(0);
        const T ga1 = a1 >= 0 ? ga2 : T(0);
        c2[ib] = ga2;
        c4[ib] = ga1;
        gpop[b] -= ga1;
      }
    }
    covered(c4, c1, n, B, !from_top, acc);
    MEMRNN_SIMD
    for (int64_t j = 0; j < n * B; ++j) g[j] = c2[j] + c1[j];
    const T* gvs = gP + (T_ - 1 - s) * m * B;
    std::copy(gvs, gvs + m * B, gv);
  }
};

using Stratification = StratificationOf<true>;
using Queue = StratificationOf<false>;  // QueueKernel(StratificationKernel), read from the other end

}  // namespace
