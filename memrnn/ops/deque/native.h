// Grefenstette et al.'s (2015) DeQue in the stack RNN's C++ loops (memrnn/ops/stack_rnn/native.cpp;
// its Python kernel: memrnn/ops/deque/cpu.py): 2D slots bottom first, strengths S [T+1, 2D, B];
// the bottom half's values slide in P [T+D, m, B] (pushed at the front, newest first, as the
// stack's), the top half's in P2 [T+D, m, B] (pushed at the back: step s's value at P2[D+s],
// oldest first); the reading [r_top ; r_bot] in z's memory rows [2m, B]; actions push and pop at
// the top, then at the bottom (a sigmoid each); the value [v_top ; v_bot].  Gradient state
// gm = (gP [T+D, m, B], gP2 [T+D, m, B], g [2D, B]).
// Trimmed window (`live`, from DequeKernel._live in cpu.py, where the argument is): from all-zero
// initial strengths the state after t steps holds strength only in the C(t) = min(t, D) cells at
// each end, 0..C−1 and 2D−C..2D−1 (a step pops an empty cell to 0, shifts each half outward by one
// and pushes at both ends, so the middle stays empty and the cells it drops, D−1 and D, are empty
// while C < D); an empty cell adds 0 to every running sum and weighs 0 in both readings, so the
// forward runs over the cells at the ends only (the middle of S is zeros), in the full window's
// order.  The backward runs over G(t) cells at each end: the same, unless the initial state's
// gradient is wanted or a pop ties at the middle (its gradient then reaches the live cells
// through autograd's subgradient at max(·, 0)): the forward looks for such a tie at each trimmed
// step and marks G(0) = −1 (the kernel's own live tensor), and the backward then runs whole
// (DequeKernel.start_backward sets G to 2D/2 = D).  Every value computed is the full window's.
#pragma once

#include "stack_rnn/native_common.h"

namespace {

struct Deque {
  static constexpr MemoryTraits kTraits{false, false, true, true, 3, 6, 16};

  // covered (native_common.h) over the n cells at each end of x [2D, B], the middle empty: from
  // cell 0 up (`up`, the bottom's running sum) or from cell 2D−1 down (the top's); mid(acc) sees
  // the running sum where the middle is (what covered is at each of its cells)
  template <typename T, typename Mid>
  static void covered_ends(const T* x, T* out, int64_t D, int64_t n, int64_t B, bool up, T* acc, Mid mid) {
    std::fill(acc, acc + B, T(0));
    auto cell = [&](int64_t i) {
      const T* xi = x + i * B;
      T* oi = out + i * B;
      MEMRNN_SIMD
      for (int64_t b = 0; b < B; ++b) {
        acc[b] += xi[b];
        oi[b] = acc[b] - xi[b];
      }
    };
    if (up) {
      for (int64_t i = 0; i < n; ++i) cell(i);
      mid(acc);
      for (int64_t i = 2 * D - n; i < 2 * D; ++i) cell(i);
    } else {
      for (int64_t i = 2 * D - 1; i >= 2 * D - n; --i) cell(i);
      mid(acc);
      for (int64_t i = n - 1; i >= 0; --i) cell(i);
    }
  }

  template <typename T>
  static void covered_ends(const T* x, T* out, int64_t D, int64_t n, int64_t B, bool up, T* acc) {
    covered_ends(x, out, D, n, B, up, acc, [](const T*) {});
  }

  // f(i) for the n cells at each end of 2D, in order
  template <typename F>
  static void each_end(int64_t D, int64_t n, F f) {
    for (int64_t i = 0; i < n; ++i) f(i);
    for (int64_t i = 2 * D - n; i < 2 * D; ++i) f(i);
  }

  template <typename T>
  static void forward(const MemoryForward<T>& f) {
    if (f.live && f.live[f.s] < f.D) return forward_trimmed(f, f.live[f.s]);
    const int64_t s = f.s, T_ = f.T_, B = f.B, N = f.N, Z = f.Z, D = f.D, m = f.m;
    const T* as = f.as;
    const T* v = f.v;
    T* zp = f.zp;
    T* ov = f.ov;
    T* Pp = f.Pp;
    T* P2p = f.P2p;
    T* Sp = f.Sp;
    T* acc = f.acc;
    const int64_t D2 = 2 * D;
    const T* push_top = as;
    const T* pop_top = as + B;
    const T* push_bot = as + 2 * B;
    const T* pop_bot = as + 3 * B;
    const T* old = Sp + s * D2 * B;
    T* nw = Sp + (s + 1) * D2 * B;
    T* p1 = f.dq;
    T* p2 = f.dq + D2 * B;
    T* cv = f.dq + 2 * D2 * B;
    // the top pop takes from the top (what lies above is covered first), then the bottom pop
    covered(old, cv, D2, B, false, acc);
    for (int64_t j = 0; j < D2 * B; ++j) {
      const int64_t b = j % B;
      p1[j] = std::max(old[j] - std::max(pop_top[b] - cv[j], T(0)), T(0));
    }
    covered(p1, cv, D2, B, true, acc);
    for (int64_t j = 0; j < D2 * B; ++j) {
      const int64_t b = j % B;
      p2[j] = std::max(p1[j] - std::max(pop_bot[b] - cv[j], T(0)), T(0));
    }
    // the pushes: a new slot at each end; the two middle slots leave the window
    std::copy(push_bot, push_bot + B, nw);
    std::copy(p2, p2 + (D - 1) * B, nw + B);
    std::copy(p2 + (D + 1) * B, p2 + D2 * B, nw + D * B);
    std::copy(push_top, push_top + B, nw + (D2 - 1) * B);
    if (f.want_overflow) {
      MEMRNN_SIMD
      for (int64_t b = 0; b < B; ++b) ov[b] = p2[(D - 1) * B + b] + p2[D * B + b];
    }
    std::copy(v, v + m * B, P2p + (D + s) * m * B);
    std::copy(v + m * B, v + 2 * m * B, Pp + (T_ - 1 - s) * m * B);
    // the readings: the top reads from the top (covered: what lies above), the bottom from below
    const T* bot = Pp + (T_ - 1 - s) * m * B;  // slots 0..D−1
    const T* top = P2p + (s + 1) * m * B;      // slots D..2D−1
    T* r = zp + (s + 1) * Z * B + N * B;
    std::fill(r, r + 2 * m * B, T(0));
    auto val = [&](int64_t i) { return i < D ? bot + i * m * B : top + (i - D) * m * B; };
    for (int end = 0; end < 2; ++end) {
      covered(nw, cv, D2, B, end == 1, acc);
      read_cells(nw, cv, D2, m, B, val, r + end * m * B);
    }
  }

  // The forward on the n = C(s) < D cells at each end of S_s (n + 1 of S_{s+1}): the same
  // operations in the same order, the middle skipped.
  template <typename T>
  static void forward_trimmed(const MemoryForward<T>& f, int64_t n) {
    const int64_t s = f.s, T_ = f.T_, B = f.B, N = f.N, Z = f.Z, D = f.D, m = f.m;
    const int64_t D2 = 2 * D, n1 = n + 1;
    const T* push_top = f.as;
    const T* pop_top = f.as + B;
    const T* push_bot = f.as + 2 * B;
    const T* pop_bot = f.as + 3 * B;
    const T* old = f.Sp + s * D2 * B;
    T* nw = f.Sp + (s + 1) * D2 * B;
    T* p1 = f.dq;
    T* p2 = f.dq + D2 * B;
    T* cv = f.dq + 2 * D2 * B;
    // a pop that ties at the middle (DequeKernel._middle_tie): covered there is the running sum
    // at the middle; the middle's p1 is 0 (it holds no strength)
    const bool track = f.live[T_ + 1] < D;  // the backward is to trim: look for ties
    bool tie = false;
    covered_ends(old, cv, D, n, B, false, f.acc, [&](const T* acc) {
      if (!track) return;
      for (int64_t b = 0; b < B; ++b) {
        const T c1 = pop_top[b] - acc[b];
        tie = tie || (c1 >= 0 && T(0) - std::max(c1, T(0)) >= 0);
      }
    });
    each_end(D, n, [&](int64_t i) {
      MEMRNN_SIMD
      for (int64_t b = 0; b < B; ++b)
        p1[i * B + b] = std::max(old[i * B + b] - std::max(pop_top[b] - cv[i * B + b], T(0)), T(0));
    });
    covered_ends(p1, cv, D, n, B, true, f.acc, [&](const T* acc) {
      if (!track) return;
      for (int64_t b = 0; b < B; ++b) {
        const T b1 = pop_bot[b] - acc[b];
        tie = tie || (b1 >= 0 && T(0) - std::max(b1, T(0)) >= 0);
      }
    });
    if (tie) const_cast<int64_t*>(f.live)[T_ + 1] = -1;  // G(0): the backward runs whole
    each_end(D, n, [&](int64_t i) {
      MEMRNN_SIMD
      for (int64_t b = 0; b < B; ++b)
        p2[i * B + b] = std::max(p1[i * B + b] - std::max(pop_bot[b] - cv[i * B + b], T(0)), T(0));
    });
    // the pushes at both ends; nothing leaves the window (its middle cells D−1, D are empty)
    std::copy(push_bot, push_bot + B, nw);
    std::copy(p2, p2 + n * B, nw + B);
    std::copy(p2 + (D2 - n) * B, p2 + D2 * B, nw + (D2 - 1 - n) * B);
    std::copy(push_top, push_top + B, nw + (D2 - 1) * B);
    if (f.want_overflow) std::fill(f.ov, f.ov + B, T(0));
    std::copy(f.v, f.v + m * B, f.P2p + (D + s) * m * B);
    std::copy(f.v + m * B, f.v + 2 * m * B, f.Pp + (T_ - 1 - s) * m * B);
    // the readings over the n1 cells at each end: the bottom's, then the top's (read_cells' order)
    const T* bot = f.Pp + (T_ - 1 - s) * m * B;
    const T* top = f.P2p + (s + 1) * m * B;
    T* r = f.zp + (s + 1) * Z * B + N * B;
    std::fill(r, r + 2 * m * B, T(0));
    const int64_t hi = D2 - n1;  // the top end's first cell
    for (int end = 0; end < 2; ++end) {
      covered_ends(nw, cv, D, n1, B, end == 1, f.acc);
      read_cells(nw, cv, n1, m, B, [&](int64_t i) { return bot + i * m * B; }, r + end * m * B);
      read_cells(nw + hi * B, cv + hi * B, n1, m, B, [&](int64_t i) { return top + (D - n1 + i) * m * B; },
                 r + end * m * B);
    }
  }

  // the final values (gfin[0], [B, 2D, m]: each half into its own buffer), strengths (gfin[1])
  // and reading (gfin[2])
  template <typename T>
  static void add_final_grads(const MemoryBackward<T>& g, const std::vector<at::Tensor>& gfin,
                              const int64_t* lens) {
    const int64_t t = g.t, B = g.B, D = g.D, m = g.m;
    add_final<T>(gfin[0], g.gm[0].template data_ptr<T>() + (g.T_ - t) * m * B, lens, t, B, D * m, 2 * D * m, 0);
    add_final<T>(gfin[0], g.gm[1].template data_ptr<T>() + t * m * B, lens, t, B, D * m, 2 * D * m, D * m);
    add_final<T>(gfin[1], g.gm[2].template data_ptr<T>(), lens, t, B, 2 * D);
    add_final<T>(gfin[2], g.gzr, lens, t, B, 2 * m);
  }

  template <typename T>
  static void backward(const MemoryBackward<T>& gs) {
    if (gs.live && gs.live[gs.T_ + 1 + gs.s] < gs.D) return backward_trimmed(gs);
    const int64_t s = gs.s, t = gs.t, T_ = gs.T_, B = gs.B, D = gs.D, m = gs.m;
    const T* as = gs.as;
    const T* Pp = gs.Pp;
    const T* P2p = gs.P2p;
    const T* Sp = gs.Sp;
    T* gas = gs.gas;
    T* gv = gs.gv;
    T* gzr = gs.gzr;
    T* acc = gs.acc;
    const int64_t D2 = 2 * D;
    T* gPb = gs.gm[0].template data_ptr<T>();
    T* gPt = gs.gm[1].template data_ptr<T>();
    T* g = gs.gm[2].template data_ptr<T>();  // ∂L/∂S_{s+1} [2D, B], becomes ∂L/∂S_s
    const T* old = Sp + s * D2 * B;
    const T* nw = Sp + t * D2 * B;
    const T* pop_top = as + B;
    const T* pop_bot = as + 3 * B;
    T* top1 = gs.dq;  // the forward's pre-activations, recomputed
    T* top2 = top1 + D2 * B;
    T* bot1 = top2 + D2 * B;
    T* bot2 = bot1 + D2 * B;
    T* cv = bot2 + D2 * B;
    T* gn = cv + D2 * B;
    T* u = gn + D2 * B;
    T* px = u + D2 * B;  // the first pop's result, then each pop's gradient in turn
    covered(old, cv, D2, B, false, acc);
    for (int64_t j = 0; j < D2 * B; ++j) {
      const int64_t b = j % B;
      top1[j] = pop_top[b] - cv[j];
      top2[j] = old[j] - std::max(top1[j], T(0));
      px[j] = std::max(top2[j], T(0));  // p1
    }
    covered(px, cv, D2, B, true, acc);
    for (int64_t j = 0; j < D2 * B; ++j) {
      const int64_t b = j % B;
      bot1[j] = pop_bot[b] - cv[j];
      bot2[j] = px[j] - std::max(bot1[j], T(0));
    }
    // the readings: into the values (each half's window) and the strengths
    const T* bot = Pp + (T_ - t) * m * B;
    const T* top = P2p + t * m * B;
    T* gbot = gPb + (T_ - t) * m * B;
    T* gtop = gPt + t * m * B;
    std::copy(g, g + D2 * B, gn);
    auto val = [&](int64_t i) { return i < D ? bot + i * m * B : top + (i - D) * m * B; };
    auto gval = [&](int64_t i) { return i < D ? gbot + i * m * B : gtop + (i - D) * m * B; };
    for (int end = 0; end < 2; ++end) {
      covered(nw, cv, D2, B, end == 1, acc);
      read_cells_backward(nw, cv, D2, m, B, val, gval, gzr + end * m * B, gn, u);
      covered(u, cv, D2, B, end == 0, acc);  // the transpose of covered
      for (int64_t j = 0; j < D2 * B; ++j) gn[j] -= cv[j];
    }
    // the pushes, then the shift that dropped slots D−1 and D
    std::copy(gn + (D2 - 1) * B, gn + D2 * B, gas);   // push_top
    std::copy(gn, gn + B, gas + 2 * B);                // push_bot
    T* gp2 = u;
    std::copy(gn + B, gn + D * B, gp2);
    std::fill(gp2 + (D - 1) * B, gp2 + (D + 1) * B, T(0));
    std::copy(gn + D * B, gn + (D2 - 1) * B, gp2 + (D + 1) * B);
    // the bottom pop, then the top pop (undone in reverse)
    T* gpop_bot = gas + 3 * B;
    T* gpop_top = gas + B;
    std::fill(gpop_bot, gpop_bot + B, T(0));
    std::fill(gpop_top, gpop_top + B, T(0));
    for (int64_t j = 0; j < D2 * B; ++j) {
      const T gb2 = bot2[j] >= 0 ? gp2[j] : T(0);
      const T gb1 = bot1[j] >= 0 ? -gb2 : T(0);
      gpop_bot[j % B] += gb1;
      px[j] = gb1;
      gn[j] = gb2;
    }
    covered(px, cv, D2, B, false, acc);  // covered(·, stack)ᵀ
    for (int64_t j = 0; j < D2 * B; ++j) {
      const T gp1 = gn[j] - cv[j];
      const T gc2 = top2[j] >= 0 ? gp1 : T(0);
      const T gc1 = top1[j] >= 0 ? -gc2 : T(0);
      gpop_top[j % B] += gc1;
      px[j] = gc1;
      gn[j] = gc2;
    }
    covered(px, cv, D2, B, true, acc);  // covered(·, queue)ᵀ
    for (int64_t j = 0; j < D2 * B; ++j) g[j] = gn[j] - cv[j];
    std::copy(gPt + (D + s) * m * B, gPt + (D + s + 1) * m * B, gv);
    std::copy(gPb + (T_ - 1 - s) * m * B, gPb + (T_ - s) * m * B, gv + m * B);
  }

  // The backward on the n = G(s) < D cells at each end of S_s and the n1 = G(s+1) of S_{s+1}:
  // backward's operations in its order, the middle skipped (its gradient is not kept).
  template <typename T>
  static void backward_trimmed(const MemoryBackward<T>& gs) {
    const int64_t s = gs.s, t = gs.t, T_ = gs.T_, B = gs.B, D = gs.D, m = gs.m;
    const int64_t D2 = 2 * D, n = gs.live[T_ + 1 + s], n1 = gs.live[T_ + 1 + t];
    const T* pop_top = gs.as + B;
    const T* pop_bot = gs.as + 3 * B;
    T* gas = gs.gas;
    T* acc = gs.acc;
    T* gPb = gs.gm[0].template data_ptr<T>();
    T* gPt = gs.gm[1].template data_ptr<T>();
    T* g = gs.gm[2].template data_ptr<T>();  // ∂L/∂S_{s+1} [2D, B] (its live cells), becomes ∂L/∂S_s
    const T* old = gs.Sp + s * D2 * B;
    const T* nw = gs.Sp + t * D2 * B;
    T* top1 = gs.dq;  // the forward's pre-activations, recomputed
    T* top2 = top1 + D2 * B;
    T* bot1 = top2 + D2 * B;
    T* bot2 = bot1 + D2 * B;
    T* cv = bot2 + D2 * B;
    T* gn = cv + D2 * B;
    T* u = gn + D2 * B;
    T* px = u + D2 * B;  // the first pop's result, then each pop's gradient in turn
    covered_ends(old, cv, D, n, B, false, acc);
    each_end(D, n, [&](int64_t i) {
      for (int64_t b = 0; b < B; ++b) {
        const int64_t j = i * B + b;
        top1[j] = pop_top[b] - cv[j];
        top2[j] = old[j] - std::max(top1[j], T(0));
        px[j] = std::max(top2[j], T(0));  // p1
      }
    });
    covered_ends(px, cv, D, n, B, true, acc);
    each_end(D, n, [&](int64_t i) {
      for (int64_t b = 0; b < B; ++b) {
        const int64_t j = i * B + b;
        bot1[j] = pop_bot[b] - cv[j];
        bot2[j] = px[j] - std::max(bot1[j], T(0));
      }
    });
    // the readings over the n1 cells at each end: into the values and the strengths
    const T* bot = gs.Pp + (T_ - t) * m * B;
    const T* top = gs.P2p + t * m * B;
    T* gbot = gPb + (T_ - t) * m * B;
    T* gtop = gPt + t * m * B;
    const int64_t hi = D2 - n1;  // the top end's first cell
    std::copy(g, g + n1 * B, gn);
    std::copy(g + hi * B, g + D2 * B, gn + hi * B);
    for (int end = 0; end < 2; ++end) {
      covered_ends(nw, cv, D, n1, B, end == 1, acc);
      read_cells_backward(nw, cv, n1, m, B, [&](int64_t i) { return bot + i * m * B; },
                          [&](int64_t i) { return gbot + i * m * B; }, gs.gzr + end * m * B, gn, u);
      read_cells_backward(nw + hi * B, cv + hi * B, n1, m, B,
                          [&](int64_t i) { return top + (D - n1 + i) * m * B; },
                          [&](int64_t i) { return gtop + (D - n1 + i) * m * B; }, gs.gzr + end * m * B,
                          gn + hi * B, u + hi * B);
      covered_ends(u, cv, D, n1, B, end == 0, acc);  // the transpose of covered
      each_end(D, n1, [&](int64_t i) {
        for (int64_t b = 0; b < B; ++b) gn[i * B + b] -= cv[i * B + b];
      });
    }
    // the pushes, then the shift (no cell left the window: n < D)
    std::copy(gn + (D2 - 1) * B, gn + D2 * B, gas);  // push_top
    std::copy(gn, gn + B, gas + 2 * B);               // push_bot
    T* gp2 = u;
    std::copy(gn + B, gn + (n + 1) * B, gp2);
    std::copy(gn + (D2 - 1 - n) * B, gn + (D2 - 1) * B, gp2 + (D2 - n) * B);
    // the bottom pop, then the top pop (undone in reverse)
    T* gpop_bot = gas + 3 * B;
    T* gpop_top = gas + B;
    std::fill(gpop_bot, gpop_bot + B, T(0));
    std::fill(gpop_top, gpop_top + B, T(0));
    each_end(D, n, [&](int64_t i) {
      for (int64_t b = 0; b < B; ++b) {
        const int64_t j = i * B + b;
        const T gb2 = bot2[j] >= 0 ? gp2[j] : T(0);
        const T gb1 = bot1[j] >= 0 ? -gb2 : T(0);
        gpop_bot[b] += gb1;
        px[j] = gb1;
        gn[j] = gb2;
      }
    });
    covered_ends(px, cv, D, n, B, false, acc);  // covered(·, stack)ᵀ
    each_end(D, n, [&](int64_t i) {
      for (int64_t b = 0; b < B; ++b) {
        const int64_t j = i * B + b;
        const T gp1 = gn[j] - cv[j];
        const T gc2 = top2[j] >= 0 ? gp1 : T(0);
        const T gc1 = top1[j] >= 0 ? -gc2 : T(0);
        gpop_top[b] += gc1;
        px[j] = gc1;
        gn[j] = gc2;
      }
    });
    covered_ends(px, cv, D, n, B, true, acc);  // covered(·, queue)ᵀ
    each_end(D, n, [&](int64_t i) {
      for (int64_t b = 0; b < B; ++b) g[i * B + b] = gn[i * B + b] - cv[i * B + b];
    });
    std::copy(gPt + (D + s) * m * B, gPt + (D + s + 1) * m * B, gs.gv);
    std::copy(gPb + (T_ - 1 - s) * m * B, gPb + (T_ - s) * m * B, gs.gv + m * B);
  }
};

}  // namespace
