// The LSTM recurrence's time loops in C++ (memrnn.ops.lstm.cpu), two kinds:
//
// * lstm_forward_steps / lstm_backward_steps (LSTMSequence, single and with a member dimension):
//   the per-step loops of its forward and of its backward's blocks, making the same ATen calls on
//   the same views as the Python loops they replace, so that every result is the Python loop's
//   bit for bit (tests/ops/test_lstm.py checks it).  What is not per step (the input projection,
//   each block's local derivatives, the weight and input gradients) stays in Python: a few large
//   calls per sequence or block.  Per step the Python loop spends most of its time dispatching ~8
//   small calls from the interpreter; from here each call costs the dispatcher's overhead only,
//   below the autograd layer (nothing in these loops is recorded).  The single-run default.
// * lstm_fused_forward / lstm_fused_backward (FusedLSTMSequence, members, float32 and float64):
//   the whole cell in plain loops, not ATen's kernels (below, "The fused cell").  The member
//   path's default; within rounding of the others, not bit for bit.
//
// Layout of the first kind (cpu.py's LSTMSequence docstring): acts [T, (M,) 4N, B] the gates in the
// order o, i, f, g (activated in place), hs, cs [T+1, (M,) N, B], xs [T, (M,) N, B] (X(c_t): tanh
// on the first tanh_units units, the cell itself after), all contiguous; w_rec [(M,) 4N, N].
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <future>
#include <optional>
#include <vector>

namespace {

using at::Tensor;

#define MEMRNN_LSTM_SIMD _Pragma("omp simd")

// Forward steps 0..T−1: gates += w_rec h_{t−1}; o, i, f = σ; g = tanh; c_t = f c_{t−1} + i g;
// x_t = X(c_t); h_t = o x_t.  Writes acts (activated), hs[1:], cs[1:], xs.
void lstm_forward_steps(Tensor acts, Tensor w_rec, Tensor hs, Tensor cs, Tensor xs, int64_t tanh_units) {
  // below autograd (the Function's forward records nothing): no view or version bookkeeping per call
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  const bool members = w_rec.dim() == 3;
  const int64_t T = acts.size(0), N = w_rec.size(-1), u = tanh_units;
  const Tensor sig = acts.narrow(-2, 0, 3 * N), g = acts.narrow(-2, 3 * N, N);
  const Tensor o = acts.narrow(-2, 0, N), i = acts.narrow(-2, N, N), f = acts.narrow(-2, 2 * N, N);
  const Tensor cu = cs.narrow(-2, 0, u), xu = xs.narrow(-2, 0, u);
  const Tensor cl = cs.narrow(-2, u, N - u), xl = xs.narrow(-2, u, N - u);
  for (int64_t s = 0; s < T; ++s) {
    Tensor a = acts.select(0, s);
    if (members) {
      a.baddbmm_(w_rec, hs.select(0, s));
    } else {
      a.addmm_(w_rec, hs.select(0, s));
    }
    sig.select(0, s).sigmoid_();
    g.select(0, s).tanh_();
    Tensor c_next = cs.select(0, s + 1);
    at::mul_out(c_next, f.select(0, s), cs.select(0, s));
    c_next.addcmul_(i.select(0, s), g.select(0, s));
    Tensor xu_s = xu.select(0, s);
    at::tanh_out(xu_s, cu.select(0, s + 1));
    if (u < N) {
      xl.select(0, s).copy_(cl.select(0, s + 1));
    }
    Tensor h_next = hs.select(0, s + 1);
    at::mul_out(h_next, o.select(0, s), xs.select(0, s));
  }
}

// Backward steps hi−1 down to lo of one block: k [L, (M,) 4, N, B] the block's local derivatives
// (k[:, 0] multiplies ∂h_t, k[:, 1:] ∂c_t), f [L, (M,) N, B] the forget gates, dhdc [L, (M,) N, B]
// = ∂h_t/∂c_t; ghs, gcs [T+1, (M,) N, B] the incoming gradients (time major; None: zero); ga
// [T, (M,) 4, N, B] receives the gates' pre-activation gradients.  g_h, g_c: the gradients
// flowing into step hi−1's h and c; returns those flowing out of step lo (into h_{lo}, c_{lo}).
std::vector<Tensor> lstm_backward_steps(int64_t lo, int64_t hi, Tensor k, Tensor f, Tensor dhdc,
                                        std::optional<Tensor> ghs, std::optional<Tensor> gcs,
                                        Tensor w_rec_t, Tensor ga, Tensor g_h, Tensor g_c) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;  // first-order backward: nothing recorded
  const bool members = w_rec_t.dim() == 3;
  const Tensor kh = k.select(-3, 0), kc = k.narrow(-3, 1, 3);
  const Tensor gah = ga.select(-3, 0), gac = ga.narrow(-3, 1, 3);
  std::vector<int64_t> flat(ga.sizes().begin(), ga.sizes().end() - 3);  // [T, (M,) G, B]
  flat.push_back(ga.size(-3) * ga.size(-2));
  flat.push_back(ga.size(-1));
  const Tensor ga_flat = ga.view(flat);
  for (int64_t s = hi - 1; s >= lo; --s) {
    const int64_t j = s - lo;
    g_c = at::addcmul(g_c, g_h, dhdc.select(0, j));
    Tensor gah_s = gah.select(0, s), gac_s = gac.select(0, s);
    at::mul_out(gah_s, kh.select(0, j), g_h);
    at::mul_out(gac_s, kc.select(0, j), g_c.unsqueeze(-3));
    g_c = gcs.has_value() ? at::addcmul(gcs->select(0, s), g_c, f.select(0, j)) : g_c * f.select(0, j);
    const Tensor ga_s = ga_flat.select(0, s);
    if (ghs.has_value()) {
      g_h = members ? at::baddbmm(ghs->select(0, s), w_rec_t, ga_s) : at::addmm(ghs->select(0, s), w_rec_t, ga_s);
    } else {
      g_h = members ? at::bmm(w_rec_t, ga_s) : at::mm(w_rec_t, ga_s);
    }
  }
  return {g_h, g_c};
}

// ---- The fused cell (memrnn.ops.lstm.cpu.FusedLSTMSequence: the member path's default) ----------
// One pass per step and member over [units x batch] does the recurrent product, the gate
// activations and the c and h updates (forward), or the local derivatives, the gate gradients and
// the product with w_recᵀ (backward), where the ATen loops above make ~8 elementwise passes and one
// batched product per step.  Its own sigmoid and tanh (float: a Cephes-style exp polynomial that
// vectorises; double: libm), its own summation order and contracted multiply-adds: its results
// differ from the ATen loops' in the last bits (float64 within 1e-12 of them, float32 within 1e-5 of
// the float64 loop, as close as the float32 ATen loop is: tests/ops/test_lstm.py).
//
// Layout: member major, then time, batch innermost (a member's steps are one contiguous block, a
// step's [rows, B] one contiguous run, every inner loop runs over contiguous values): acts
// [M, T, 4N, Bp] (activated), cs [M, T+1, N, Bp], xs [M, T, N, Bp] with Bp the batch padded to
// whole vectors (kLanes; the padding columns hold zeros throughout); w_rec [M, 4N, N].
//
// Threads: the members are independent runs, so each runs its whole sequence on one thread and
// the members are shared out in torch.get_num_threads() chunks (member_chunks).  Every member's
// arithmetic is the same on any number of threads: results do not depend on the thread count.
// One model's product per step is too small to split (OneThread in stack_rnn/native.cpp); M runs
// in one process are the work that fills the cores.  What enters and leaves is
// batch first, as the products around it want it, and the kernels transpose it on the way in and
// out (ATen's permuted copies of these small-inner-dimension tensors cost 5-10 ns a value, the most
// of the step after the loops): the projection proj and its gradient ga [M, B, T, 4N], the outputs
// h_out, c_out [M, B, T+1, N] and their gradients, h_prev [M, B, T, N].

// exp for float that the compiler vectorises: exp(x) = 2^k e^r, |r| <= ln2 / 2, r's polynomial
// from Cephes' expf; underflow to 0 below −87, overflow clamped at 88 (sigmoid saturates there).
inline float fused_exp(float x) {
  const bool under = x < -87.0f;
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln 2)
  float r = x - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return under ? 0.0f : p * scale;
}
inline double fused_exp(double x) { return std::exp(x); }

template <typename T>
inline T fused_sigmoid(T x) {
  return T(1) / (T(1) + fused_exp(-x));
}
// tanh(x) = sign(x) (1 − e) / (1 + e), e = exp(−2|x|): no overflow, odd by construction
template <typename T>
inline T fused_tanh(T x) {
  const T e = fused_exp(T(-2) * std::abs(x));
  const T t = (T(1) - e) / (T(1) + e);
  return x < T(0) ? -t : t;
}

// The lanes of one AVX register: the fused cell's buffers pad the batch to a multiple of it.
template <typename T>
constexpr int64_t kLanes = 32 / sizeof(T);

// out[p, :] += Σ_q coef[p·sp + q·sq] in[q, :] for p < P, q < Q over B columns (B a multiple of
// kLanes): out's rows at out + p·so, in's at in + q·si.  Register blocked, 4 rows of out × one
// vector of kLanes columns at a time (a loop over B per (p, q) costs more in loop overhead than in
// arithmetic at B = 10-16; a scalar tail of columns cost more than padding them).
template <typename T>
void small_gemm(T* out, int64_t so, const T* in, int64_t si, const T* coef, int64_t sp, int64_t sq, int64_t P,
                int64_t Q, int64_t B) {
  constexpr int64_t L = kLanes<T>, kRows = 4;
  int64_t p = 0;
  for (; p + kRows <= P; p += kRows) {
    for (int64_t b = 0; b < B; b += L) {
      T acc[kRows][L];
      for (int64_t r = 0; r < kRows; ++r) {
        MEMRNN_LSTM_SIMD
        for (int64_t l = 0; l < L; ++l) acc[r][l] = out[(p + r) * so + b + l];
      }
      for (int64_t q = 0; q < Q; ++q) {
        const T* x = in + q * si + b;
        for (int64_t r = 0; r < kRows; ++r) {
          const T c = coef[(p + r) * sp + q * sq];
          MEMRNN_LSTM_SIMD
          for (int64_t l = 0; l < L; ++l) acc[r][l] += c * x[l];
        }
      }
      for (int64_t r = 0; r < kRows; ++r) {
        MEMRNN_LSTM_SIMD
        for (int64_t l = 0; l < L; ++l) out[(p + r) * so + b + l] = acc[r][l];
      }
    }
  }
  for (; p < P; ++p) {  // the rows left over
    T* y = out + p * so;
    for (int64_t q = 0; q < Q; ++q) {
      const T c = coef[p * sp + q * sq];
      const T* x = in + q * si;
      MEMRNN_LSTM_SIMD
      for (int64_t b = 0; b < B; ++b) y[b] += c * x[b];
    }
  }
}

// One member's elementwise forward over n = units·B values (flat: the units' rows of B are
// contiguous): activates o, i, f, g in place, c1 = f c0 + i g, x = X(c1), h1 = o x.
template <bool kSquash, typename T>
inline void forward_cells(T* o, T* i, T* f, T* g, const T* c0, T* c1, T* x, T* h1, int64_t n) {
  MEMRNN_LSTM_SIMD
  for (int64_t e = 0; e < n; ++e) {
    const T ob = fused_sigmoid(o[e]), ib = fused_sigmoid(i[e]), fb = fused_sigmoid(f[e]);
    const T gb = fused_tanh(g[e]);
    o[e] = ob;
    i[e] = ib;
    f[e] = fb;
    g[e] = gb;
    const T cb = fb * c0[e] + ib * gb;
    c1[e] = cb;
    const T xb = kSquash ? fused_tanh(cb) : cb;
    x[e] = xb;
    h1[e] = ob * xb;
  }
}

// Its backward: ga's four blocks from dh = ∂L/∂h1 and dc (∂L/∂c1 so far, updated to ∂L/∂c0).
template <bool kSquash, bool kGcs, typename T>
inline void backward_cells(const T* o, const T* i, const T* f, const T* g, const T* c0, const T* x, const T* dh,
                           T* dc, const T* gcs, T* go, T* gi, T* gf, T* gg, int64_t n) {
  MEMRNN_LSTM_SIMD
  for (int64_t e = 0; e < n; ++e) {
    const T ob = o[e], ib = i[e], fb = f[e], gb = g[e], xb = x[e], dhb = dh[e];
    const T dhdc = kSquash ? ob * (T(1) - xb * xb) : ob;
    const T dcb = dc[e] + dhb * dhdc;
    go[e] = dhb * (ob - ob * ob) * xb;
    gi[e] = dcb * (ib - ib * ib) * gb;
    gf[e] = dcb * (fb - fb * fb) * c0[e];
    gg[e] = dcb * (ib - ib * gb * gb);
    dc[e] = kGcs ? dcb * fb + gcs[e] : dcb * fb;
  }
}

// fn(m0, m1) over the members [0, M) in at::get_num_threads() chunks of consecutive members
// (chunks of ceil(M / threads)), joined before returning.  Built with -fopenmp (memrnn/ops/
// native.py), this is at::parallel_for on torch's own OpenMP pool: the extension's libgomp.so.1 is
// the one torch loaded (the loader matches it by soname), so torch.set_num_threads governs it, and
// the pool's workers, which spin for milliseconds after each of ATen's parallel ops (GNU OpenMP's
// wait policy; `pause` is slow on AMD), take the chunks instead of competing with threads of our
// own for the cores: with std::async threads the 10-member forward inside a training step ran no
// faster on two threads than on one (alone, 2.1x faster).  Without OpenMP (a compiler
// without it) the chunks after the first run on threads of their own.
template <typename F>
void member_chunks(int64_t M, const F& fn) {
#ifdef _OPENMP
  at::parallel_for(0, M, 1, [&](int64_t lo, int64_t hi) { fn(lo, hi); });
#else
  const int64_t n = std::min<int64_t>(M, at::get_num_threads());
  if (n <= 1) {
    fn(0, M);
    return;
  }
  const int64_t chunk = (M + n - 1) / n;
  std::vector<std::future<void>> others;
  for (int64_t lo = chunk; lo < M; lo += chunk)
    others.push_back(std::async(std::launch::async, [&fn, lo, hi = std::min(M, lo + chunk)] { fn(lo, hi); }));
  fn(0, chunk);
  for (auto& f : others) f.get();  // rethrows a chunk's error
#endif
}

// Forward of every member over steps 0..S−1 (the buffers' layout above).  proj [M, B, S, G] the
// input projection (x w_inᵀ + b, row-major as one baddbmm writes it); h0, c0 [M, B, N]; writes acts,
// hs, cs, xs, and the outputs h_out, c_out [M, B, S+1, N] (initial state first) and h_prev
// [M, B, S, N] (the state each step reads: the weight gradient's operand).
template <typename T>
void fused_forward_impl(const T* proj, const T* w, const T* h0, const T* c0, T* acts, T* hs, T* cs, T* xs,
                        T* h_out, T* c_out, T* h_prev, int64_t M, int64_t S, int64_t N, int64_t B, int64_t Bp,
                        int64_t u) {
  const int64_t G = 4 * N, nb = N * Bp, ub = u * Bp;
  member_chunks(M, [&](int64_t m0, int64_t m1) {
  for (int64_t m = m0; m < m1; ++m) {
    for (int64_t b = 0; b < B; ++b) {  // the initial state, transposed to [N, B] columns
      for (int64_t k = 0; k < N; ++k) {
        const T hv = h0[(m * B + b) * N + k], cv = c0[(m * B + b) * N + k];
        hs[(m * (S + 1) * N + k) * Bp + b] = hv;
        cs[(m * (S + 1) * N + k) * Bp + b] = cv;
        h_out[((m * B + b) * (S + 1)) * N + k] = hv;
        c_out[((m * B + b) * (S + 1)) * N + k] = cv;
      }
    }
    for (int64_t s = 0; s < S; ++s) {
      T* a = acts + (m * S + s) * G * Bp;
      const T* hp = hs + (m * (S + 1) + s) * nb;
      T* h1 = hs + (m * (S + 1) + s + 1) * nb;
      const T* cp = cs + (m * (S + 1) + s) * nb;
      T* c1 = cs + (m * (S + 1) + s + 1) * nb;
      T* x = xs + (m * S + s) * nb;
      for (int64_t b = 0; b < B; ++b) {  // the step's projection, transposed to [G, B] columns
        const T* row = proj + ((m * B + b) * S + s) * G;
        for (int64_t r = 0; r < G; ++r) a[r * Bp + b] = row[r];
        T* prev = h_prev + ((m * B + b) * S + s) * N;
        for (int64_t k = 0; k < N; ++k) prev[k] = hp[k * Bp + b];
      }
      small_gemm(a, Bp, hp, Bp, w + m * G * N, N, 1, G, N, Bp);  // gates += w_rec h_{s}
      T *o = a, *i = a + nb, *f = a + 2 * nb, *g = a + 3 * nb;
      forward_cells<true>(o, i, f, g, cp, c1, x, h1, ub);
      forward_cells<false>(o + ub, i + ub, f + ub, g + ub, cp + ub, c1 + ub, x + ub, h1 + ub, nb - ub);
      for (int64_t b = 0; b < B; ++b) {  // the outputs, batch first
        T* ho = h_out + ((m * B + b) * (S + 1) + s + 1) * N;
        T* co = c_out + ((m * B + b) * (S + 1) + s + 1) * N;
        for (int64_t k = 0; k < N; ++k) {
          ho[k] = h1[k * Bp + b];
          co[k] = c1[k * Bp + b];
        }
      }
    }
  }
  });
}

// out [N, Bp] = grad[m, :, s, :] of a batch-first gradient [M, B, S+1, N] (transposed; the padding
// columns b >= B left as they are), or 0.
template <typename T>
inline void gather_grad(const T* grad, int64_t m, int64_t s, int64_t S, int64_t N, int64_t B, int64_t Bp, T* out) {
  if (grad == nullptr) {
    std::fill(out, out + N * Bp, T(0));
    return;
  }
  for (int64_t b = 0; b < B; ++b) {
    const T* row = grad + ((m * B + b) * (S + 1) + s) * N;
    for (int64_t k = 0; k < N; ++k) out[k * Bp + b] = row[k];
  }
}

// Backward of every member over steps S−1 down to 0: ghs, gcs [M, B, S+1, N] the outputs'
// gradients (nullptr: zero); writes ga [M, B, S, G] (the projection's gradient, row-major like
// proj) and g_h0, g_c0 [M, B, N].
template <typename T>
void fused_backward_impl(const T* acts, const T* cs, const T* xs, const T* w, const T* ghs, const T* gcs, T* ga,
                         T* g_h0, T* g_c0, int64_t M, int64_t S, int64_t N, int64_t B, int64_t Bp, int64_t u) {
  const int64_t G = 4 * N, nb = N * Bp, ub = u * Bp;
  member_chunks(M, [&](int64_t m0, int64_t m1) {
  // each chunk's own scratch; zeros: the padding columns stay 0
  std::vector<T> gh(nb), gc(nb), step(G * Bp), inc(nb);
  for (int64_t m = m0; m < m1; ++m) {
    gather_grad(ghs, m, S, S, N, B, Bp, gh.data());
    gather_grad(gcs, m, S, S, N, B, Bp, gc.data());
    for (int64_t s = S - 1; s >= 0; --s) {
      const T* a = acts + (m * S + s) * G * Bp;
      const T *o = a, *i = a + nb, *f = a + 2 * nb, *g = a + 3 * nb;
      T *d = step.data(), *go = d, *gi = d + nb, *gf = d + 2 * nb, *gg = d + 3 * nb;
      const T *cp = cs + (m * (S + 1) + s) * nb, *x = xs + (m * S + s) * nb;
      T* dh = gh.data();
      T* dc = gc.data();
      if (gcs == nullptr) {
        backward_cells<true, false>(o, i, f, g, cp, x, dh, dc, inc.data(), go, gi, gf, gg, ub);
        backward_cells<false, false>(o + ub, i + ub, f + ub, g + ub, cp + ub, x + ub, dh + ub, dc + ub,
                                     inc.data() + ub, go + ub, gi + ub, gf + ub, gg + ub, nb - ub);
      } else {
        gather_grad(gcs, m, s, S, N, B, Bp, inc.data());
        backward_cells<true, true>(o, i, f, g, cp, x, dh, dc, inc.data(), go, gi, gf, gg, ub);
        backward_cells<false, true>(o + ub, i + ub, f + ub, g + ub, cp + ub, x + ub, dh + ub, dc + ub,
                                    inc.data() + ub, go + ub, gi + ub, gf + ub, gg + ub, nb - ub);
      }
      for (int64_t b = 0; b < B; ++b) {  // ga, batch first
        T* row = ga + ((m * B + b) * S + s) * G;
        for (int64_t r = 0; r < G; ++r) row[r] = d[r * Bp + b];
      }
      gather_grad(ghs, m, s, S, N, B, Bp, dh);  // g_h = ghs[s] (or 0) + w_recᵀ ga
      small_gemm(dh, Bp, d, Bp, w + m * G * N, 1, N, N, G, Bp);
    }
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t k = 0; k < N; ++k) {
        g_h0[(m * B + b) * N + k] = gh[k * Bp + b];
        g_c0[(m * B + b) * N + k] = gc[k * Bp + b];
      }
    }
  }
  });
}

void check_fused(const Tensor& t, const char* name, at::ScalarType dtype) {
  TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == dtype, "lstm_fused: ", name,
              " must be a contiguous CPU tensor of the gates' dtype");
}

// The forward (fused_forward_impl): proj [M, B, T, 4N], w_rec [M, 4N, N], h0, c0 [M, B, N] ->
// acts [M, T, 4N, Bp], cs [M, T+1, N, Bp], xs [M, T, N, Bp] (the backward's), h_out, c_out
// [M, B, T+1, N] (the outputs), h_prev [M, B, T, N].
std::vector<Tensor> lstm_fused_forward(Tensor proj, Tensor w_rec, Tensor h0, Tensor c0, int64_t tanh_units) {
  const auto dtype = proj.scalar_type();
  for (const auto& [t, name] : {std::pair{&proj, "proj"}, {&w_rec, "w_rec"}, {&h0, "h0"}, {&c0, "c0"}})
    check_fused(*t, name, dtype);
  const int64_t M = proj.size(0), B = proj.size(1), S = proj.size(2), N = w_rec.size(2), G = 4 * N;
  const auto opt = proj.options();
  int64_t Bp = B;  // the batch padded to whole vectors: the padding columns stay 0 throughout
  AT_DISPATCH_FLOATING_TYPES(dtype, "lstm_fused_pad", [&] { Bp = (B + kLanes<scalar_t> - 1) / kLanes<scalar_t> * kLanes<scalar_t>; });
  const auto alloc = [&](at::IntArrayRef size) { return Bp == B ? at::empty(size, opt) : at::zeros(size, opt); };
  Tensor acts = alloc({M, S, G, Bp}), hs = alloc({M, S + 1, N, Bp});
  Tensor cs = alloc({M, S + 1, N, Bp}), xs = alloc({M, S, N, Bp});
  Tensor h_out = at::empty({M, B, S + 1, N}, opt), c_out = at::empty({M, B, S + 1, N}, opt);
  Tensor h_prev = at::empty({M, B, S, N}, opt);
  AT_DISPATCH_FLOATING_TYPES(dtype, "lstm_fused_forward", [&] {
    fused_forward_impl<scalar_t>(proj.data_ptr<scalar_t>(), w_rec.data_ptr<scalar_t>(), h0.data_ptr<scalar_t>(),
                                 c0.data_ptr<scalar_t>(), acts.data_ptr<scalar_t>(), hs.data_ptr<scalar_t>(),
                                 cs.data_ptr<scalar_t>(), xs.data_ptr<scalar_t>(), h_out.data_ptr<scalar_t>(),
                                 c_out.data_ptr<scalar_t>(), h_prev.data_ptr<scalar_t>(), M, S, N, B, Bp,
                                 tanh_units);
  });
  return {acts, cs, xs, h_out, c_out, h_prev};
}

// The backward (fused_backward_impl): ghs, gcs [M, B, T+1, N] the outputs' gradients (None: zero),
// batch = B (acts' last dimension is B padded to whole vectors) -> ga [M, B, T, 4N] (the projection's gradient), g_h0, g_c0 [M, B, N].
std::vector<Tensor> lstm_fused_backward(Tensor acts, Tensor cs, Tensor xs, Tensor w_rec, std::optional<Tensor> ghs,
                                        std::optional<Tensor> gcs, int64_t batch, int64_t tanh_units) {
  const auto dtype = acts.scalar_type();
  for (const auto& [t, name] : {std::pair{&acts, "acts"}, {&cs, "cs"}, {&xs, "xs"}, {&w_rec, "w_rec"}})
    check_fused(*t, name, dtype);
  if (ghs.has_value()) check_fused(*ghs, "ghs", dtype);
  if (gcs.has_value()) check_fused(*gcs, "gcs", dtype);
  const int64_t M = acts.size(0), S = acts.size(1), N = w_rec.size(2), Bp = acts.size(3), G = 4 * N;
  const int64_t B = batch;  // the real batch; acts' last dimension is it padded
  TORCH_CHECK(B <= Bp, "lstm_fused_backward: batch ", B, " exceeds the buffers' ", Bp);
  const auto opt = acts.options();
  Tensor ga = at::empty({M, B, S, G}, opt), g_h0 = at::empty({M, B, N}, opt), g_c0 = at::empty({M, B, N}, opt);
  AT_DISPATCH_FLOATING_TYPES(dtype, "lstm_fused_backward", [&] {
    fused_backward_impl<scalar_t>(
        acts.data_ptr<scalar_t>(), cs.data_ptr<scalar_t>(), xs.data_ptr<scalar_t>(), w_rec.data_ptr<scalar_t>(),
        ghs.has_value() ? ghs->data_ptr<scalar_t>() : nullptr, gcs.has_value() ? gcs->data_ptr<scalar_t>() : nullptr,
        ga.data_ptr<scalar_t>(), g_h0.data_ptr<scalar_t>(), g_c0.data_ptr<scalar_t>(), M, S, N, B, Bp, tanh_units);
  });
  return {ga, g_h0, g_c0};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(memrnn_native, lib) {
  lib.def(
      "lstm_forward_steps(Tensor(a!) acts, Tensor w_rec, Tensor(b!) hs, Tensor(c!) cs, Tensor(d!) xs, "
      "int tanh_units) -> ()",
      &lstm_forward_steps);
  lib.def(
      "lstm_backward_steps(int lo, int hi, Tensor k, Tensor f, Tensor dhdc, Tensor? ghs, Tensor? gcs, "
      "Tensor w_rec_t, Tensor(a!) ga, Tensor g_h, Tensor g_c) -> Tensor[]",
      &lstm_backward_steps);
  lib.def("lstm_fused_forward(Tensor proj, Tensor w_rec, Tensor h0, Tensor c0, int tanh_units) -> Tensor[]",
          &lstm_fused_forward);
  lib.def(
      "lstm_fused_backward(Tensor acts, Tensor cs, Tensor xs, Tensor w_rec, Tensor? ghs, Tensor? gcs, "
      "int batch, int tanh_units) -> Tensor[]",
      &lstm_fused_backward);
}
