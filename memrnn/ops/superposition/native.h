// Joulin & Mikolov's (2015) superposition stack in the stack RNN's C++ loops
// (memrnn/ops/stack_rnn/native.cpp; its Python kernel: memrnn/ops/superposition/cpu.py): z's
// memory rows are cells 0..D-1 and a zero cell D ([D+1, m, B]); actions pop, no-op, push (a
// softmax).  Gradient state gm = (gpp0, gpp1) [D+2, m, B] each (a zero cell each side),
// alternating.  Trimmed windows (`live`, from SuperpositionKernel._live in cpu.py): step s computes
// cells 0..C(s+1)−1 of S_{s+1} and writes zeros into the next two (which the next step may read as
// the structurally empty cells below); the backward computes cells 0..G(s)−1 of ∂L/∂S_s (zeros into
// the next two) and sums the actions' gradients over the cells of S_s whose products can be non-zero.
// Every cell computed is the full window's, bit for bit (the same loops over fewer cells).
#pragma once

#include "stack_rnn/native_common.h"

namespace {

struct Superposition {
  static constexpr MemoryTraits kTraits{true, false, false, false, 2, 0, 0, true};

  template <typename T>
  static void forward(const MemoryForward<T>& f) {
    const int64_t s = f.s, B = f.B, N = f.N, Z = f.Z, D = f.D, m = f.m;
    const T* as = f.as;
    const T* v = f.v;
    T* zp = f.zp;
    T* ov = f.ov;
    const T* old = zp + s * Z * B + N * B;  // [D+1, m, B], cell D is zero
    T* nw = zp + (s + 1) * Z * B + N * B;
    const T* push = as + 2 * B;
    const int64_t c = m * B;  // a cell
    T* t_pop = f.cells;  // the actions tiled over a cell
    T* t_noop = t_pop + c;
    T* t_push = t_noop + c;
    tile(as, t_pop, m, B);
    tile(as + B, t_noop, m, B);
    tile(push, t_push, m, B);
    const int64_t hi = f.live ? f.live[s + 1] : D;  // the cells computed
    for (int64_t i = 0; i < hi; ++i) {
      const T* above = i == 0 ? v : old + (i - 1) * c;
      mix3(nw + i * c, old + i * c, t_noop, above, t_push, old + (i + 1) * c, t_pop, c);
    }
    std::fill(nw + hi * c, nw + std::min(hi + 2, D) * c, T(0));
    if (f.want_overflow) {
      const bool empty = f.live && f.live[s] < D;  // the bottom cell not yet reached: zero
      const T* last = old + (D - 1) * m * B;
      MEMRNN_SIMD
      for (int64_t b = 0; b < B; ++b) {
        T mx = 0;
        if (!empty)
          for (int64_t j = 0; j < m; ++j) mx = std::max(mx, std::abs(last[j * B + b]));
        ov[b] = push[b] * mx;
      }
    }
  }

  // the final cells' gradient (gfin[0], [B, D, m]) into the current buffer's cells 0..D−1
  template <typename T>
  static void add_final_grads(const MemoryBackward<T>& g, const std::vector<at::Tensor>& gfin,
                              const int64_t* lens) {
    add_final<T>(gfin[0], g.gm[g.cur].template data_ptr<T>() + g.m * g.B, lens, g.t, g.B, g.D * g.m);
  }

  template <typename T>
  static void backward(const MemoryBackward<T>& g) {
    const int64_t s = g.s, T_ = g.T_, B = g.B, N = g.N, Z = g.Z, D = g.D, m = g.m, cur = g.cur;
    const T* as = g.as;
    const T* v = g.v;
    const T* zp = g.zp;
    T* gas = g.gas;
    T* gv = g.gv;
    T* gzr = g.gzr;
    T* gc = g.gm[cur].template data_ptr<T>() + m * B;  // ∂L/∂S_{s+1}[i] at gc + i·m·B, i = −1..D
    T* gn = g.gm[1 - cur].template data_ptr<T>() + m * B;
    const T* old = zp + s * Z * B + N * B;
    const T* push = as + 2 * B;
    const int64_t c = m * B;  // a cell
    T* t_pop = g.cells;  // the actions tiled over a cell
    T* t_noop = t_pop + c;
    T* t_push = t_noop + c;
    T* su = t_push + c;  // the actions' gradients summed over the cells, per unit: pop, no-op, push
    tile(as, t_pop, m, B);
    tile(as + B, t_noop, m, B);
    tile(push, t_push, m, B);
    std::fill(su, su + 3 * c, T(0));
    MEMRNN_SIMD
    for (int64_t j = 0; j < c; ++j) gc[j] += gzr[j];
    // the cells of S_s whose products with ∂L/∂S_{s+1} can be non-zero (L), of ∂L/∂S_s computed (Gn)
    const int64_t* lv = g.live;
    const int64_t Gn = lv ? lv[T_ + 1 + s] : D;
    const int64_t L = lv ? std::min(std::min(lv[s], lv[T_ + 1 + s + 1] + 1), D) : D;
    for (int64_t i = 0; i < std::max(L, Gn); ++i) {
      const T* o0 = old + i * c;
      const T* gu = gc + (i - 1) * c;
      const T* g0 = gc + i * c;
      const T* gd = gc + (i + 1) * c;
      if (i < L) {
        MEMRNN_SIMD
        for (int64_t j = 0; j < c; ++j) {
          su[j] += gu[j] * o0[j];
          su[c + j] += g0[j] * o0[j];
          su[2 * c + j] += gd[j] * o0[j];
        }
      }
      if (i < Gn) mix3(gn + i * c, g0, t_noop, gd, t_push, gu, t_pop, c);
    }
    std::fill(gn + Gn * c, gn + std::min(Gn + 2, D) * c, T(0));
    MEMRNN_SIMD
    for (int64_t j = 0; j < c; ++j) {
      su[2 * c + j] += gc[j] * v[j];
      gv[j] = gc[j] * t_push[j];
    }
    std::fill(gas, gas + 3 * B, T(0));
    sum_units(su, 3, m, B, gas);
  }
};

}  // namespace
