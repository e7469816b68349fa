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
#include <type_traits>
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
// One pass per step and member over its [B, 4N] gates does the recurrent product, the gate
// activations and the c and h updates (forward), or the local derivatives, the gate gradients and
// the product with w_rec (backward), where the ATen loops above make ~8 elementwise passes and one
// batched product per step.  Its own sigmoid and tanh (float: a Cephes-style exp polynomial that
// vectorises; double: libm), its own summation order and contracted multiply-adds: its results
// differ from the ATen loops' in the last bits (float64 within 1e-12 of them, float32 within 1e-5 of
// the float64 loop, as close as the float32 ATen loop is: tests/ops/test_lstm.py).
//
// Layout: batch first and row major, as the products around the cell read and write it, so that
// every inner loop runs over a row's contiguous values and nothing is transposed: the projection
// proj [M, B, S, 4N] (gates o, i, f, g; activated in place: it becomes acts), the states h_out,
// c_out [M, B, S+1, N] (the outputs; the initial state first), xs [M, B, S, N] (X(c_t)), h_prev
// [M, B, S, N] (the state each step reads: the weight gradient's operand), and in the backward
// the gradients ghs, gcs [M, B, S+1, N] and ga [M, B, S, 4N].  The products run over rows too
// (rows_gemm: a row's outputs are contiguous vectors, its inputs broadcast).  (An earlier layout
// had the batch innermost, [units, B] per step: its per-step transposes in and out took ~40% of the
// forward, at the default job's M 10, B 16, N 16.)
//
// Threads: the members are independent runs, so each runs its whole sequence on one thread and
// the members are shared out in torch.get_num_threads() chunks (member_chunks).  Every member's
// arithmetic is the same on any number of threads: results do not depend on the thread count.
// One model's product per step is too small to split (OneThread in stack_rnn/native.cpp); M runs
// in one process are the work that fills the cores.

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

// One 64-byte vector of T (GCC's and Clang's vector extensions: the compiler keeps a block's
// sums in registers, where arrays under `omp simd` went through the stack), its loads and stores
// of the first n values (the rest zero; n >= lanes: the whole vector).
template <typename T>
struct Vec64 {
  typedef T type __attribute__((vector_size(64)));
  static constexpr int64_t kLanes = 64 / sizeof(T);
};

template <bool kPart, typename T, typename V = typename Vec64<T>::type>
inline V vec_load(const T* p, int64_t n) {
  V v{};
  if (!kPart || n >= Vec64<T>::kLanes) {
    std::memcpy(&v, p, sizeof(V));
  } else if (n > 0) {
    for (int64_t l = 0; l < n; ++l) v[l] = p[l];
  }
  return v;
}

template <bool kPart, typename T, typename V = typename Vec64<T>::type>
inline void vec_store(T* p, const V& v, int64_t n) {
  if (!kPart || n >= Vec64<T>::kLanes) {
    std::memcpy(p, &v, sizeof(V));
  } else {
    for (int64_t l = 0; l < n; ++l) p[l] = v[l];
  }
}

// out[b, c] += Σ_q in[b, q] w[q, c] for rows b < R, columns c < C, q < Q: out's rows at out + b·so,
// in's at in + b·si, w's at w + q·sw, each padded with zeros to whole blocks of columns
// (gemm_width(C) values: the inner loop loads whole vectors only).  Register blocked: kRows rows ×
// kVecs vectors of columns at a time (n of them in the last block, kPart where n is not kVecs whole
// vectors: only out's loads and stores are partial), each q one broadcast of in per row and kVecs
// loads of w; the sums run over q in order, one multiply-add each.
template <int kRows, int kVecs, bool kPart, typename T>
inline void rows_gemm_block(T* out, int64_t so, const T* in, int64_t si, const T* w, int64_t sw, int64_t Q,
                            int64_t n) {
  using V = typename Vec64<T>::type;
  constexpr int64_t L = Vec64<T>::kLanes;
  V acc[kRows][kVecs];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) acc[r][v] = vec_load<kPart>(out + r * so + v * L, n - v * L);
  for (int64_t q = 0; q < Q; ++q) {
    V wq[kVecs];
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) wq[v] = vec_load<false>(w + q * sw + v * L, L);
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const T a = in[r * si + q];
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) acc[r][v] += a * wq[v];
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v)
      if (!kPart || n > v * L) vec_store<kPart>(out + r * so + v * L, acc[r][v], n - v * L);
}

// rows_gemm over all R rows: blocks of kRows rows, then of 2, then 1, each over the columns kVecs
// vectors at a time.
template <int kRows, int kVecs, typename T>
void rows_gemm_blocked(T* out, int64_t so, const T* in, int64_t si, const T* w, int64_t sw, int64_t R, int64_t Q,
                       int64_t C) {
  constexpr int64_t kCols = kVecs * Vec64<T>::kLanes;
  const auto columns = [&](auto rows, int64_t b) {
    constexpr int kR = decltype(rows)::value;
    int64_t c = 0;
    for (; c + kCols <= C; c += kCols)
      rows_gemm_block<kR, kVecs, false>(out + b * so + c, so, in + b * si, si, w + c, sw, Q, kCols);
    if (c < C) rows_gemm_block<kR, kVecs, true>(out + b * so + c, so, in + b * si, si, w + c, sw, Q, C - c);
  };
  int64_t b = 0;
  for (; b + kRows <= R; b += kRows) columns(std::integral_constant<int, kRows>{}, b);
  for (; b + 2 <= R; b += 2) columns(std::integral_constant<int, 2>{}, b);
  for (; b < R; ++b) columns(std::integral_constant<int, 1>{}, b);
}

// The values each of w's rows takes for rows_gemm over C columns: C padded to its blocks.
template <typename T>
constexpr int64_t gemm_width(int64_t C) {
  constexpr int64_t L = Vec64<T>::kLanes;
  return C <= L ? L : (C + 2 * L - 1) / (2 * L) * (2 * L);
}

// w [Q, C] row-major (row stride sw_in, column stride sc) copied into out [Q, gemm_width(C)],
// zero padded: rows_gemm's operand.
template <typename T>
void gemm_operand(const T* w, int64_t sw_in, int64_t sc, int64_t Q, int64_t C, std::vector<T>& out) {
  const int64_t width = gemm_width<T>(C);
  out.assign(Q * width, T(0));
  for (int64_t q = 0; q < Q; ++q)
    for (int64_t c = 0; c < C; ++c) out[q * width + c] = w[q * sw_in + c * sc];
}

// Narrow outputs (the backward's C = N columns, up to one vector) take 8 rows at a time, so that 8
// independent sums hide the multiply-add's latency; wide ones (the forward's C = 4N) 4 rows of 2
// vectors.  w: gemm_operand's, sw = gemm_width(C).
template <typename T>
void rows_gemm(T* out, int64_t so, const T* in, int64_t si, const T* w, int64_t sw, int64_t R, int64_t Q,
               int64_t C) {
  if (C <= Vec64<T>::kLanes) {
    rows_gemm_blocked<8, 1>(out, so, in, si, w, sw, R, Q, C);
  } else {
    rows_gemm_blocked<4, 2>(out, so, in, si, w, sw, R, Q, C);
  }
}

// Asks for the n values at p to come into cache (a step's rows lie S·4N values apart in the
// batch-first layout: B rows × 3-4 buffers are more streams than the hardware prefetcher follows,
// so each step prefetches the next step's rows; at DuSell & Chiang's shape, B 10, T 120, N 20, the
// backward spent half its time waiting on these loads without it).
template <typename T>
inline void prefetch_row(const T* p, int64_t n, bool write = false) {
  for (int64_t k = 0; k < n; k += 64 / sizeof(T)) {
    if (write) {
      __builtin_prefetch(p + k, 1);
    } else {
      __builtin_prefetch(p + k, 0);
    }
  }
}

// One row's elementwise forward over n units (contiguous): activates o, i, f, g in place,
// c1 = f c0 + i g, x = X(c1), h1 = o x.
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

// The input projection from token ids (lstm_fused_forward_tokens): each member's table P [V, G] =
// E w_inᵀ + b over its embedding E (a token's row is the projection of its embedding), the ids
// [B, S] (shared: member stride 0) or [M, B, S] (member stride B·S).  row: the index of member m's
// row for position (b, s) among the M·V rows of the table [M, V, G], or of its gradient.
struct TokenRows {
  const int64_t* ids;
  int64_t member_stride, V;
  int64_t row(int64_t m, int64_t b, int64_t s, int64_t S) const { return m * V + ids[m * member_stride + b * S + s]; }
};

// Forward of every member over steps 0..S−1 (the layout above): proj [M, B, S, G] the input
// projection (x w_inᵀ), its bias [M, G] added here, activated in place; or, with tokens (bias
// unused), proj uninitialised and each row its token's row of table [M, V, G]; w [M, G, N]; h0,
// c0 [M, B, N]; writes h_out, c_out, xs and h_prev.
template <typename T>
void fused_forward_impl(T* proj, const T* bias, const TokenRows* tokens, const T* table, const T* w, const T* h0,
                        const T* c0, T* h_out, T* c_out, T* xs, T* h_prev, int64_t M, int64_t S, int64_t N,
                        int64_t B, int64_t u) {
  const int64_t G = 4 * N;
  member_chunks(M, [&](int64_t m0, int64_t m1) {
    std::vector<T> wt;  // the member's w_recᵀ [N, G] (padded): a step's product reads its rows
    const int64_t wide = gemm_width<T>(G);
    for (int64_t m = m0; m < m1; ++m) {
      gemm_operand(w + m * G * N, 1, N, N, G, wt);
      for (int64_t b = 0; b < B; ++b) {
        std::copy_n(h0 + (m * B + b) * N, N, h_out + (m * B + b) * (S + 1) * N);
        std::copy_n(c0 + (m * B + b) * N, N, c_out + (m * B + b) * (S + 1) * N);
      }
      T* a0 = proj + m * B * S * G;      // row b, step s at a0 + (b·S + s)·G
      T* h = h_out + m * B * (S + 1) * N;  // row b, step s at h + (b·(S+1) + s)·N; likewise c
      T* c = c_out + m * B * (S + 1) * N;
      const T* bm = tokens == nullptr ? bias + m * G : nullptr;
      for (int64_t s = 0; s < S; ++s) {
        if (s + 1 < S) {
          for (int64_t b = 0; b < B; ++b) {
            prefetch_row(a0 + (b * S + s + 1) * G, G, true);
            prefetch_row(c + (b * (S + 1) + s + 2) * N, N, true);
            prefetch_row(h + (b * (S + 1) + s + 2) * N, N, true);
          }
        }
        for (int64_t b = 0; b < B; ++b) {  // the bias or the token's row, while the step's rows come into cache
          T* a = a0 + (b * S + s) * G;
          if (tokens == nullptr) {
            MEMRNN_LSTM_SIMD
            for (int64_t r = 0; r < G; ++r) a[r] += bm[r];
          } else {
            std::copy_n(table + tokens->row(m, b, s, S) * G, G, a);
          }
        }
        rows_gemm(a0 + s * G, S * G, h + s * N, (S + 1) * N, wt.data(), wide, B, N, G);  // gates += w_rec h_s
        for (int64_t b = 0; b < B; ++b) {
          T* a = a0 + (b * S + s) * G;
          T *o = a, *i = a + N, *f = a + 2 * N, *g = a + 3 * N;
          const T* cp = c + (b * (S + 1) + s) * N;
          T* c1 = c + (b * (S + 1) + s + 1) * N;
          T* h1 = h + (b * (S + 1) + s + 1) * N;
          T* x = xs + ((m * B + b) * S + s) * N;
          std::copy_n(h + (b * (S + 1) + s) * N, N, h_prev + ((m * B + b) * S + s) * N);
          forward_cells<true>(o, i, f, g, cp, c1, x, h1, u);
          forward_cells<false>(o + u, i + u, f + u, g + u, cp + u, c1 + u, x + u, h1 + u, N - u);
        }
      }
    }
  });
}

// Backward of every member over steps S−1 down to 0: acts [M, B, S, G] (activated), c_out
// [M, B, S+1, N], xs [M, B, S, N], w [M, G, N]; ghs, gcs [M, B, S+1, N] the outputs' gradients
// (nullptr: zero); writes ga [M, B, S, G] (the projection's gradient) and g_h0, g_c0 [M, B, N].
// With tokens, grad_table [M, V, G] (zero on entry) accumulates each row of ga into its token's row,
// steps S−1 down to 0, rows in order.
template <typename T>
void fused_backward_impl(const T* acts, const T* c_out, const T* xs, const T* w, const T* ghs, const T* gcs, T* ga,
                         const TokenRows* tokens, T* grad_table, T* g_h0, T* g_c0, int64_t M, int64_t S, int64_t N,
                         int64_t B, int64_t u) {
  const int64_t G = 4 * N;
  member_chunks(M, [&](int64_t m0, int64_t m1) {
    std::vector<T> gh(B * N), gc(B * N);  // ∂L/∂h_s, ∂L/∂c_s of the member's rows, [B, N]
    std::vector<T> wp;                     // the member's w_rec [G, N] (padded)
    const int64_t narrow = gemm_width<T>(N);
    const auto incoming = [&](const T* grad, int64_t m, int64_t s, T* out) {  // grad[m, :, s, :] or 0
      for (int64_t b = 0; b < B; ++b) {
        if (grad == nullptr)
          std::fill_n(out + b * N, N, T(0));
        else
          std::copy_n(grad + ((m * B + b) * (S + 1) + s) * N, N, out + b * N);
      }
    };
    for (int64_t m = m0; m < m1; ++m) {
      gemm_operand(w + m * G * N, N, 1, G, N, wp);
      incoming(ghs, m, S, gh.data());
      incoming(gcs, m, S, gc.data());
      for (int64_t s = S - 1; s >= 0; --s) {
        if (s > 0) {
          for (int64_t b = 0; b < B; ++b) {
            prefetch_row(acts + ((m * B + b) * S + s - 1) * G, G);
            prefetch_row(ga + ((m * B + b) * S + s - 1) * G, G, true);
            prefetch_row(c_out + ((m * B + b) * (S + 1) + s - 1) * N, N);
            prefetch_row(xs + ((m * B + b) * S + s - 1) * N, N);
          }
        }
        for (int64_t b = 0; b < B; ++b) {
          const T* a = acts + ((m * B + b) * S + s) * G;
          const T *o = a, *i = a + N, *f = a + 2 * N, *g = a + 3 * N;
          T* d = ga + ((m * B + b) * S + s) * G;
          T *go = d, *gi = d + N, *gf = d + 2 * N, *gg = d + 3 * N;
          const T* cp = c_out + ((m * B + b) * (S + 1) + s) * N;
          const T* x = xs + ((m * B + b) * S + s) * N;
          T *dh = gh.data() + b * N, *dc = gc.data() + b * N;
          if (gcs == nullptr) {
            backward_cells<true, false>(o, i, f, g, cp, x, dh, dc, dc, go, gi, gf, gg, u);
            backward_cells<false, false>(o + u, i + u, f + u, g + u, cp + u, x + u, dh + u, dc + u, dc + u, go + u,
                                         gi + u, gf + u, gg + u, N - u);
          } else {
            const T* inc = gcs + ((m * B + b) * (S + 1) + s) * N;
            backward_cells<true, true>(o, i, f, g, cp, x, dh, dc, inc, go, gi, gf, gg, u);
            backward_cells<false, true>(o + u, i + u, f + u, g + u, cp + u, x + u, dh + u, dc + u, inc + u, go + u,
                                        gi + u, gf + u, gg + u, N - u);
          }
        }
        if (tokens != nullptr) {
          for (int64_t b = 0; b < B; ++b) {
            const T* d = ga + ((m * B + b) * S + s) * G;
            T* row = grad_table + tokens->row(m, b, s, S) * G;
            MEMRNN_LSTM_SIMD
            for (int64_t r = 0; r < G; ++r) row[r] += d[r];
          }
        }
        incoming(ghs, m, s, gh.data());  // g_h = ghs[s] (or 0) + ga_s w_rec
        rows_gemm(gh.data(), N, ga + (m * B * S + s) * G, S * G, wp.data(), narrow, B, G, N);
      }
      for (int64_t b = 0; b < B; ++b) {
        std::copy_n(gh.data() + b * N, N, g_h0 + (m * B + b) * N);
        std::copy_n(gc.data() + b * N, N, g_c0 + (m * B + b) * N);
      }
    }
  });
}

void check_fused(const Tensor& t, const char* name, at::ScalarType dtype) {
  TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == dtype, "lstm_fused: ", name,
              " must be a contiguous CPU tensor of the gates' dtype");
}

// The forward's outputs for M members, S steps, N units, batch B: h_out, c_out [M, B, S+1, N], xs,
// h_prev [M, B, S, N].
std::vector<Tensor> forward_outputs(const at::TensorOptions& opt, int64_t M, int64_t B, int64_t S, int64_t N) {
  return {at::empty({M, B, S + 1, N}, opt), at::empty({M, B, S + 1, N}, opt), at::empty({M, B, S, N}, opt),
          at::empty({M, B, S, N}, opt)};
}

// The forward (fused_forward_impl): proj [M, B, T, 4N] = x w_inᵀ (the bias [M, 4N] added here;
// activated in place: the backward's acts), w_rec [M, 4N, N], h0, c0 [M, B, N] -> h_out, c_out
// [M, B, T+1, N] (the outputs; c_out is the backward's too), xs [M, B, T, N] (the backward's),
// h_prev [M, B, T, N].  (The bias is not in the product, as baddbmm's: its copy into the product's
// output was a pass of its own over MBs out of cache, ~0.2 ms a step at the default job's shape.)
std::vector<Tensor> lstm_fused_forward(Tensor proj, Tensor bias, Tensor w_rec, Tensor h0, Tensor c0,
                                       int64_t tanh_units) {
  const auto dtype = proj.scalar_type();
  for (const auto& [t, name] :
       {std::pair{&proj, "proj"}, {&bias, "bias"}, {&w_rec, "w_rec"}, {&h0, "h0"}, {&c0, "c0"}})
    check_fused(*t, name, dtype);
  const int64_t M = proj.size(0), B = proj.size(1), S = proj.size(2), N = w_rec.size(2);
  TORCH_CHECK(proj.size(3) == 4 * N && w_rec.size(1) == 4 * N && bias.sizes() == at::IntArrayRef({M, 4 * N}) &&
                  0 <= tanh_units && tanh_units <= N,
              "lstm_fused_forward: proj ", proj.sizes(), ", bias ", bias.sizes(), ", w_rec ", w_rec.sizes(),
              ", tanh_units ", tanh_units);
  auto out = forward_outputs(proj.options(), M, B, S, N);  // h_out, c_out, xs, h_prev
  AT_DISPATCH_FLOATING_TYPES(dtype, "lstm_fused_forward", [&] {
    fused_forward_impl<scalar_t>(proj.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(), nullptr, nullptr,
                                 w_rec.data_ptr<scalar_t>(), h0.data_ptr<scalar_t>(), c0.data_ptr<scalar_t>(),
                                 out[0].data_ptr<scalar_t>(), out[1].data_ptr<scalar_t>(), out[2].data_ptr<scalar_t>(),
                                 out[3].data_ptr<scalar_t>(), M, S, N, B, tanh_units);
  });
  return out;
}

// ids as TokenRows read them: int64, contiguous, [B, S] or [M, B, S], every id in 0..V−1.
int64_t check_ids(const Tensor& ids, int64_t M, int64_t B, int64_t S, int64_t V) {
  TORCH_CHECK(ids.device().is_cpu() && ids.is_contiguous() && ids.scalar_type() == at::kLong,
              "lstm_fused: ids must be a contiguous CPU int64 tensor");
  const bool shared = ids.sizes() == at::IntArrayRef({B, S});
  TORCH_CHECK(shared || ids.sizes() == at::IntArrayRef({M, B, S}), "lstm_fused: ids ", ids.sizes(), " must be [",
              B, ", ", S, "] or [", M, ", ", B, ", ", S, "]");
  const int64_t* p = ids.data_ptr<int64_t>();
  for (int64_t k = 0; k < ids.numel(); ++k)
    TORCH_CHECK(0 <= p[k] && p[k] < V, "lstm_fused: unknown token id ", p[k], "; the table has ids 0..", V - 1);
  return shared ? 0 : B * S;
}

// The forward from token ids: acts [M, B, T, 4N] (uninitialised: each row becomes its token's row
// of table, then the gates, activated), table [M, V, 4N] = E w_inᵀ + b, ids [B, T] or [M, B, T]
// (int64), the rest as lstm_fused_forward's -> h_out, c_out, xs, h_prev as its.
std::vector<Tensor> lstm_fused_forward_tokens(Tensor acts, Tensor table, Tensor ids, Tensor w_rec, Tensor h0,
                                              Tensor c0, int64_t tanh_units) {
  const auto dtype = acts.scalar_type();
  for (const auto& [t, name] :
       {std::pair{&acts, "acts"}, {&table, "table"}, {&w_rec, "w_rec"}, {&h0, "h0"}, {&c0, "c0"}})
    check_fused(*t, name, dtype);
  const int64_t M = acts.size(0), B = acts.size(1), S = acts.size(2), N = w_rec.size(2), V = table.size(1);
  TORCH_CHECK(acts.size(3) == 4 * N && w_rec.size(1) == 4 * N && table.dim() == 3 && table.size(0) == M &&
                  table.size(2) == 4 * N && 0 <= tanh_units && tanh_units <= N,
              "lstm_fused_forward_tokens: acts ", acts.sizes(), ", table ", table.sizes(), ", w_rec ", w_rec.sizes(),
              ", tanh_units ", tanh_units);
  const TokenRows tokens{ids.data_ptr<int64_t>(), check_ids(ids, M, B, S, V), V};
  auto out = forward_outputs(acts.options(), M, B, S, N);  // h_out, c_out, xs, h_prev
  AT_DISPATCH_FLOATING_TYPES(dtype, "lstm_fused_forward_tokens", [&] {
    fused_forward_impl<scalar_t>(acts.data_ptr<scalar_t>(), nullptr, &tokens, table.data_ptr<scalar_t>(),
                                 w_rec.data_ptr<scalar_t>(), h0.data_ptr<scalar_t>(), c0.data_ptr<scalar_t>(),
                                 out[0].data_ptr<scalar_t>(), out[1].data_ptr<scalar_t>(), out[2].data_ptr<scalar_t>(),
                                 out[3].data_ptr<scalar_t>(), M, S, N, B, tanh_units);
  });
  return out;
}

// The backward (fused_backward_impl): acts [M, B, T, 4N], c_out [M, B, T+1, N], xs [M, B, T, N] the
// forward's; ghs, gcs [M, B, T+1, N] the outputs' gradients (None: zero) -> ga [M, B, T, 4N] (the
// projection's gradient: written into ga, uninitialised on entry), g_h0, g_c0 [M, B, N].  With
// ids (the forward from tokens), grad_table [M, V, 4N] (zero on entry) receives the table's
// gradient: each row of ga added into its token's row.
std::vector<Tensor> lstm_fused_backward(Tensor acts, Tensor c_out, Tensor xs, Tensor w_rec, std::optional<Tensor> ghs,
                                        std::optional<Tensor> gcs, int64_t tanh_units, Tensor ga,
                                        std::optional<Tensor> ids, std::optional<Tensor> grad_table) {
  const auto dtype = acts.scalar_type();
  for (const auto& [t, name] :
       {std::pair{&acts, "acts"}, {&c_out, "c_out"}, {&xs, "xs"}, {&w_rec, "w_rec"}, {&ga, "ga"}})
    check_fused(*t, name, dtype);
  if (ghs.has_value()) check_fused(*ghs, "ghs", dtype);
  if (gcs.has_value()) check_fused(*gcs, "gcs", dtype);
  const int64_t M = acts.size(0), B = acts.size(1), S = acts.size(2), N = w_rec.size(2);
  const auto opt = acts.options();
  TORCH_CHECK(ga.sizes() == acts.sizes(), "lstm_fused_backward: ga ", ga.sizes(), " must have acts' shape ",
              acts.sizes());
  TORCH_CHECK(ids.has_value() == grad_table.has_value(), "lstm_fused_backward: ids and grad_table go together");
  std::optional<TokenRows> tokens;
  if (grad_table.has_value()) {
    check_fused(*grad_table, "grad_table", dtype);
    TORCH_CHECK(grad_table->dim() == 3 && grad_table->size(0) == M && grad_table->size(2) == 4 * N,
                "lstm_fused_backward: grad_table ", grad_table->sizes());
    const int64_t V = grad_table->size(1);
    tokens = TokenRows{ids->data_ptr<int64_t>(), check_ids(*ids, M, B, S, V), V};
  }
  Tensor g_h0 = at::empty({M, B, N}, opt), g_c0 = at::empty({M, B, N}, opt);
  AT_DISPATCH_FLOATING_TYPES(dtype, "lstm_fused_backward", [&] {
    fused_backward_impl<scalar_t>(
        acts.data_ptr<scalar_t>(), c_out.data_ptr<scalar_t>(), xs.data_ptr<scalar_t>(), w_rec.data_ptr<scalar_t>(),
        ghs.has_value() ? ghs->data_ptr<scalar_t>() : nullptr, gcs.has_value() ? gcs->data_ptr<scalar_t>() : nullptr,
        ga.data_ptr<scalar_t>(), tokens.has_value() ? &*tokens : nullptr,
        grad_table.has_value() ? grad_table->data_ptr<scalar_t>() : nullptr, g_h0.data_ptr<scalar_t>(),
        g_c0.data_ptr<scalar_t>(), M, S, N, B, tanh_units);
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
  lib.def(
      "lstm_fused_forward(Tensor(a!) proj, Tensor bias, Tensor w_rec, Tensor h0, Tensor c0, int tanh_units) -> "
      "Tensor[]",
      &lstm_fused_forward);
  lib.def(
      "lstm_fused_backward(Tensor acts, Tensor c_out, Tensor xs, Tensor w_rec, Tensor? ghs, Tensor? gcs, "
      "int tanh_units, Tensor(a!) ga, Tensor? ids, Tensor(b!)? grad_table) -> Tensor[]",
      &lstm_fused_backward);
  lib.def(
      "lstm_fused_forward_tokens(Tensor(a!) acts, Tensor table, Tensor ids, Tensor w_rec, Tensor h0, Tensor c0, "
      "int tanh_units) -> Tensor[]",
      &lstm_fused_forward_tokens);
}
