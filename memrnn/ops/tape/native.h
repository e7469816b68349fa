// Deletang et al.'s (2023) tape in the stack RNN's C++ loops (memrnn/ops/stack_rnn/native.cpp; its
// Python kernels: memrnn/ops/tape/cpu.py): z's memory rows are the D cells, the head's first
// ([D, m, B]); actions stay, left, right (a softmax).  Their Tape-RNN's tape (TapeJump) has two
// more actions, jump left and right by each row's own shift (`jumps` [B], int64, in 0..D-1).
// Gradient state gm = (g, scratch) [D, m, B], alternating (the caller reads gm[T % 2]).
#pragma once

#include "stack_rnn/native_common.h"

namespace {

// A cell index i ± shift back into 0..D−1, for i and the shift in 0..D−1 (`jumps` are): the
// jumps' inner loops ran `%` per element and row, an integer division each
inline int64_t wrap_up(int64_t c, int64_t D) { return c >= D ? c - D : c; }
inline int64_t wrap_down(int64_t c, int64_t D) { return c < 0 ? c + D : c; }

template <bool kJump>
struct TapeOf {
  static constexpr MemoryTraits kTraits{true, kJump, false, false, 2, 0, 0};

  template <typename T>
  static void forward(const MemoryForward<T>& f) {
    const int64_t s = f.s, B = f.B, N = f.N, Z = f.Z, D = f.D, m = f.m;
    const T* as = f.as;
    const T* v = f.v;
    T* zp = f.zp;
    T* W = f.W;
    const int64_t* jp = f.jp;
    const T* old = zp + s * Z * B + N * B;  // [D, m, B]
    T* nw = zp + (s + 1) * Z * B + N * B;
    const int64_t c = m * B;  // a cell
    T* at = f.cells;  // stay, left, right tiled over a cell
    for (int64_t r = 0; r < 3; ++r) tile(as + r * B, at + r * c, m, B);
    std::copy(old, old + D * c, W);
    std::copy(v, v + c, W);  // write into the head's cell
    for (int64_t i = 0; i < D; ++i) {
      const int64_t ir = (i + 1) % D, il = (i + D - 1) % D;
      mix3(nw + i * c, W + i * c, at, W + ir * c, at + c, W + il * c, at + 2 * c, c);
      if (kJump) {  // new[i] += jump_left · W[i+L] + jump_right · W[i−L]
        const T* jl = as + 3 * B;
        const T* jr = as + 4 * B;
        for (int64_t j = 0; j < m; ++j) {
          T* n0 = nw + (i * m + j) * B;
          for (int64_t b = 0; b < B; ++b) {
            const int64_t cl = wrap_up(i + jp[b], D), cr = wrap_down(i - jp[b], D);
            n0[b] += W[(cl * m + j) * B + b] * jl[b];
            n0[b] += W[(cr * m + j) * B + b] * jr[b];
          }
        }
      }
    }
  }

  // the final tape's gradient (gfin[0], [B, D, m]) into the current buffer
  template <typename T>
  static void add_final_grads(const MemoryBackward<T>& g, const std::vector<at::Tensor>& gfin,
                              const int64_t* lens) {
    add_final<T>(gfin[0], g.gm[g.cur].template data_ptr<T>(), lens, g.t, g.B, g.D * g.m);
  }

  template <typename T>
  static void backward(const MemoryBackward<T>& gs) {
    const int64_t s = gs.s, B = gs.B, N = gs.N, Z = gs.Z, k = gs.k, D = gs.D, m = gs.m, cur = gs.cur;
    const T* as = gs.as;
    const T* v = gs.v;
    const T* zp = gs.zp;
    const int64_t* jp = gs.jp;
    T* gas = gs.gas;
    T* gv = gs.gv;
    T* gzr = gs.gzr;
    T* g = gs.gm[cur].template data_ptr<T>();  // ∂L/∂S_{s+1} [D, m, B]
    T* gn = gs.gm[1 - cur].template data_ptr<T>();
    const T* old = zp + s * Z * B + N * B;
    const int64_t c = m * B;  // a cell
    T* at = gs.cells;           // stay, left, right tiled over a cell
    T* su = at + 3 * c;         // their gradients summed over the cells, per unit
    for (int64_t r = 0; r < 3; ++r) tile(as + r * B, at + r * c, m, B);
    std::fill(su, su + 3 * c, T(0));
    MEMRNN_SIMD
    for (int64_t j = 0; j < c; ++j) g[j] += gzr[j];
    std::fill(gs.sums, gs.sums + 5 * B, T(0));
    T* sp = gs.sums;
    for (int64_t i = 0; i < D; ++i) {
      const int64_t ir = (i + 1) % D, il = (i + D - 1) % D;
      // W = the written tape: v in the head's cell 0, the old tape elsewhere
      const T* w0 = i == 0 ? v : old + i * c;
      const T* wr = ir == 0 ? v : old + ir * c;
      const T* wl = il == 0 ? v : old + il * c;
      const T* g0 = g + i * c;
      MEMRNN_SIMD
      for (int64_t j = 0; j < c; ++j) {
        su[j] += g0[j] * w0[j];
        su[c + j] += g0[j] * wr[j];
        su[2 * c + j] += g0[j] * wl[j];
      }
      // g[i−1] feeds W[i] through a left move, g[i+1] through a right one
      mix3(gn + i * c, g0, at, g + il * c, at + c, g + ir * c, at + 2 * c, c);
      if (kJump) {  // the jumps' transposes: gathers the other way
        const T* jl = as + 3 * B;
        const T* jr = as + 4 * B;
        for (int64_t j = 0; j < m; ++j) {
          T* n0 = gn + (i * m + j) * B;
          const T* g0j = g0 + j * B;
          for (int64_t b = 0; b < B; ++b) {
            const int64_t cl = wrap_up(i + jp[b], D), cr = wrap_down(i - jp[b], D);
            const T* wcl = cl == 0 ? v + j * B : old + (cl * m + j) * B;
            const T* wcr = cr == 0 ? v + j * B : old + (cr * m + j) * B;
            sp[3 * B + b] += g0j[b] * wcl[b];
            sp[4 * B + b] += g0j[b] * wcr[b];
            n0[b] += jl[b] * g[(cr * m + j) * B + b];  // W[i] fed new[i−L] through a left jump
            n0[b] += jr[b] * g[(cl * m + j) * B + b];
          }
        }
      }
    }
    sum_units(su, 3, m, B, sp);
    std::copy(sp, sp + k * B, gas);
    std::copy(gn, gn + m * B, gv);
    std::fill(gn, gn + m * B, T(0));
  }
};

using Tape = TapeOf<false>;
using TapeJump = TapeOf<true>;

}  // namespace
