// One step of DuSell & Chiang's nondeterministic stack (NS-RNN 2020; RNS-RNN and its
// memory-limited variant 2022) and its backward, in C++ (memrnn.ops.nondeterministic): the same
// log-space recurrences, window and per-step normalisation as nondeterministic_step in
// __init__.py, whose broadcast log-sum-exps it replaces on CPU tensors.  Every log-sum-exp is
// exact (the maximum of its own terms subtracted, never a product of separately shifted
// exponentials) and formed term by term without materialising the broadcast; every array is
// batch-last ([..., B]) so that each loop over the batch vectorises, the exponentials and
// logarithms included (float: vexp/vlog below, Cephes' polynomials, within 2 ulp; double:
// the C library's).
//
// Layout (per step, batch last; QS = Q·S configurations qx = q·S + x, E = depth − 1):
//   G  [D][D][QS][QS][B]  G[a][c] = log γ[t−D+a → t−D+1+c]     (the window before the step)
//   Al [D+1][QS][B]        Al[p]  = log α[t−D+p]
//   P, R [QS][QS][B]       push q,x → r,xy and replace q,x → r,y;   O [QS][Q][B] pop q,x → r
//   saved for the backward: colR [D][QS][QS][B] (the replace term), gp [E][QS][Q][B] (a run's
//   top popped into state r), popped [E][QS][Q][S][B] (the pop term), col [D+1][QS][QS][B]
//   (the new column before normalisation), newA [QS][B] and z [B] (its normaliser).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#define NS_SIMD _Pragma("omp simd")

namespace {

constexpr double kLogZero = -1.0e4;  // memrnn.ops.nondeterministic.LOG_ZERO

// exp and log that vectorise (float: Cephes' expf/logf polynomials; double: libm)
inline float vexp(float x) {
  const bool under = x < -87.0f;
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float fx = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln 2)
  float r = x - fx * 0.693359375f;
  r = r - fx * -2.12194440e-4f;
  const float r2 = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r2 + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(fx) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return under ? 0.0f : y * scale;
}

inline float vlog(float x) {  // x > 0 and normal (here: a sum of exponentials, at least 1)
  int32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  float e = static_cast<float>(((bits >> 23) & 0xff) - 126);
  const int32_t mbits = (bits & 0x807fffff) | 0x3f000000;  // mantissa in [0.5, 1)
  float m;
  std::memcpy(&m, &mbits, sizeof m);
  const bool small = m < 0.707106781186547524f;
  e = small ? e - 1.0f : e;
  const float f = small ? m + m - 1.0f : m - 1.0f;
  const float z = f * f;
  float y = 7.0376836292e-2f;
  y = y * f - 1.1514610310e-1f;
  y = y * f + 1.1676998740e-1f;
  y = y * f - 1.2420140846e-1f;
  y = y * f + 1.4249322787e-1f;
  y = y * f - 1.6668057665e-1f;
  y = y * f + 2.0000714765e-1f;
  y = y * f - 2.4999993993e-1f;
  y = y * f + 3.3333331174e-1f;
  y = y * f * z;
  y += -2.12194440e-4f * e;
  y += -0.5f * z;
  return f + y + 0.693359375f * e;
}

inline double vexp(double x) { return std::exp(x); }
inline double vlog(double x) { return std::log(x); }

template <typename T>
struct Dims {
  int64_t B, D, E, Q, S, QS;
  int64_t g(int64_t a, int64_t c, int64_t u, int64_t v) const {  // G[a][c][u][v][0]
    return (((a * D + c) * QS + u) * QS + v) * B;
  }
  int64_t sq(int64_t a, int64_t u, int64_t v) const { return ((a * QS + u) * QS + v) * B; }
  int64_t gp(int64_t k, int64_t w, int64_t r) const { return ((k * QS + w) * Q + r) * B; }
  int64_t pop(int64_t i, int64_t u, int64_t r, int64_t y) const {
    return (((i * QS + u) * Q + r) * S + y) * B;
  }
};

// out[b] = log Σ_k exp(A[ia_k + b] + C[ic_k + b]) over the term offsets (ia_k, ic_k), exactly:
// the maximum first, then the shifted sum.
template <typename T>
void lse(const T* A, const T* C, const std::vector<int64_t>& ia, const std::vector<int64_t>& ic,
         int64_t B, T* out, T* m, T* s) {
  const auto K = ia.size();
  std::fill(m, m + B, -std::numeric_limits<T>::infinity());
  std::fill(s, s + B, T(0));
  for (size_t k = 0; k < K; ++k) {
    const T* a = A + ia[k];
    const T* c = C + ic[k];
    NS_SIMD
    for (int64_t b = 0; b < B; ++b) {
      const T t = a[b] + c[b];
      m[b] = t > m[b] ? t : m[b];
    }
  }
  for (size_t k = 0; k < K; ++k) {
    const T* a = A + ia[k];
    const T* c = C + ic[k];
    NS_SIMD
    for (int64_t b = 0; b < B; ++b) s[b] += vexp(a[b] + c[b] - m[b]);
  }
  NS_SIMD
  for (int64_t b = 0; b < B; ++b) out[b] = m[b] + vlog(s[b]);
}

// The backward of lse: each term's weight exp(a + c − out) · g, added to both factors' gradients.
template <typename T>
void lse_backward(const T* A, const T* C, T* gA, T* gC, const std::vector<int64_t>& ia,
                  const std::vector<int64_t>& ic, const T* out, const T* g, int64_t B) {
  for (size_t k = 0; k < ia.size(); ++k) {
    const T* a = A + ia[k];
    const T* c = C + ic[k];
    T* da = gA + ia[k];
    T* dc = gC + ic[k];
    NS_SIMD
    for (int64_t b = 0; b < B; ++b) {
      const T w = vexp(a[b] + c[b] - out[b]) * g[b];
      da[b] += w;
      dc[b] += w;
    }
  }
}

// The step's four log-semiring contractions, each written once: visit(out, ia, ic) for every
// output element (its offset) with its terms' factor offsets; the forward forms their log-sum-exp
// (lse), the backward their weights (lse_backward).
struct Terms {
  std::vector<int64_t> ia, ic;
  void clear() {
    ia.clear();
    ic.clear();
  }
  void add(int64_t a, int64_t c) {
    ia.push_back(a);
    ic.push_back(c);
  }
};

// the replace term: colR[a][u][v] = ⊕_w G[a][D−1][u][w] ⊗ R[w][v]
template <typename T, typename F>
void replace_terms(const Dims<T>& d, Terms& t, F visit) {
  for (int64_t a = 0; a < d.D; ++a)
    for (int64_t u = 0; u < d.QS; ++u)
      for (int64_t v = 0; v < d.QS; ++v) {
        t.clear();
        for (int64_t w = 0; w < d.QS; ++w) t.add(d.g(a, d.D - 1, u, w), (w * d.QS + v) * d.B);
        visit(d.sq(a, u, v), t);
      }
}

// gp[k][w][r] = ⊕_v G[k+1][D−1][w][v] ⊗ O[v][r]: the run from start k+1 popped into state r
template <typename T, typename F>
void popped_run_terms(const Dims<T>& d, Terms& t, F visit) {
  for (int64_t k = 0; k < d.E; ++k)
    for (int64_t w = 0; w < d.QS; ++w)
      for (int64_t r = 0; r < d.Q; ++r) {
        t.clear();
        for (int64_t v = 0; v < d.QS; ++v) t.add(d.g(k + 1, d.D - 1, w, v), (v * d.Q + r) * d.B);
        visit(d.gp(k, w, r), t);
      }
}

// the pop term: popped[i][u][r][y] = ⊕_{k, t'} G[i][k][u][t'S+y] ⊗ gp[k][t'S+y][r]
template <typename T, typename F>
void pop_terms(const Dims<T>& d, Terms& t, F visit) {
  for (int64_t i = 0; i < d.E; ++i)
    for (int64_t u = 0; u < d.QS; ++u)
      for (int64_t r = 0; r < d.Q; ++r)
        for (int64_t y = 0; y < d.S; ++y) {
          t.clear();
          for (int64_t k = 0; k < d.E; ++k)
            for (int64_t q = 0; q < d.Q; ++q) t.add(d.g(i, k, u, q * d.S + y), d.gp(k, q * d.S + y, r));
          visit(d.pop(i, u, r, y), t);
        }
}

// the forward weights: newA[v] = ⊕_{a, u} Al[a][u] ⊗ col[a][u][v]
template <typename T, typename F>
void alpha_terms(const Dims<T>& d, Terms& t, F visit) {
  for (int64_t v = 0; v < d.QS; ++v) {
    t.clear();
    for (int64_t a = 0; a <= d.D; ++a)
      for (int64_t u = 0; u < d.QS; ++u) t.add((a * d.QS + u) * d.B, d.sq(a, u, v));
    visit(v * d.B, t);
  }
}

template <typename T>
void step_forward(const Dims<T>& d, const T* G, const T* Al, const T* P, const T* R, const T* O,
                  T* G2, T* Al2, T* colR, T* gp, T* popped, T* col, T* newA, T* z) {
  const int64_t B = d.B, D = d.D, E = d.E, S = d.S, QS = d.QS;
  const T lz = T(kLogZero);
  std::vector<T> m(B), s(B);
  Terms t;
  replace_terms(d, t, [&](int64_t o, const Terms& terms) { lse(G, R, terms.ia, terms.ic, B, colR + o, m.data(), s.data()); });
  popped_run_terms(d, t, [&](int64_t o, const Terms& terms) { lse(G, O, terms.ia, terms.ic, B, gp + o, m.data(), s.data()); });
  pop_terms(d, t, [&](int64_t o, const Terms& terms) { lse(G, gp, terms.ia, terms.ic, B, popped + o, m.data(), s.data()); });
  // the new column: replace ⊕ pop for the starts that can pop, then the push from start t
  for (int64_t a = 0; a < D; ++a)
    for (int64_t u = 0; u < QS; ++u)
      for (int64_t v = 0; v < QS; ++v) {
        const T* cr = colR + d.sq(a, u, v);
        T* out = col + d.sq(a, u, v);
        if (a < E) {
          const T* pp = popped + d.pop(a, u, v / S, v % S);
          NS_SIMD
          for (int64_t b = 0; b < B; ++b) {
            const T mx = std::max(cr[b], pp[b]);
            out[b] = mx + vlog(vexp(cr[b] - mx) + vexp(pp[b] - mx));
          }
        } else {
          std::copy(cr, cr + B, out);
        }
      }
  std::copy(P, P + QS * QS * B, col + d.sq(D, 0, 0));
  // α[t+1], then its normaliser z
  alpha_terms(d, t, [&](int64_t o, const Terms& terms) { lse(Al, col, terms.ia, terms.ic, B, newA + o, m.data(), s.data()); });
  {
    const std::vector<T> zero(B, T(0));
    t.clear();
    for (int64_t v = 0; v < QS; ++v) t.add(v * B, 0);
    lse(newA, zero.data(), t.ia, t.ic, B, z, m.data(), s.data());
  }
  // the window slides: drop start t−D and column t−D+1; the new column is col[1..D] − z
  const int64_t blk = QS * QS * B;
  for (int64_t a = 0; a + 1 < D; ++a)
    for (int64_t c = 0; c + 1 < D; ++c) std::copy(G + d.g(a + 1, c + 1, 0, 0), G + d.g(a + 1, c + 1, 0, 0) + blk, G2 + d.g(a, c, 0, 0));
  for (int64_t c = 0; c + 1 < D; ++c) std::fill(G2 + d.g(D - 1, c, 0, 0), G2 + d.g(D - 1, c, 0, 0) + blk, lz);
  for (int64_t a = 0; a < D; ++a)
    for (int64_t uv = 0; uv < QS * QS; ++uv) {
      const T* src = col + d.sq(a + 1, 0, 0) + uv * B;
      T* dst = G2 + d.g(a, D - 1, 0, 0) + uv * B;
      NS_SIMD
      for (int64_t b = 0; b < B; ++b) dst[b] = std::max(src[b] - z[b], lz);
    }
  std::copy(Al + QS * B, Al + (D + 1) * QS * B, Al2);
  for (int64_t v = 0; v < QS; ++v) {
    T* dst = Al2 + (D * QS + v) * B;
    const T* src = newA + v * B;
    NS_SIMD
    for (int64_t b = 0; b < B; ++b) dst[b] = std::max(src[b] - z[b], lz);
  }
}

template <typename T>
void step_backward(const Dims<T>& d, const T* G, const T* Al, const T* R, const T* O,
                   const T* colR, const T* gp, const T* popped, const T* col, const T* newA,
                   const T* z, const T* gG2, const T* gAl2, T* gG, T* gAl, T* gP, T* gR, T* gO) {
  const int64_t B = d.B, D = d.D, E = d.E, Q = d.Q, S = d.S, QS = d.QS;
  const T lz = T(kLogZero);
  const int64_t blk = QS * QS * B;
  std::fill(gG, gG + D * D * blk, T(0));
  std::fill(gAl, gAl + (D + 1) * QS * B, T(0));
  std::fill(gR, gR + blk, T(0));
  std::fill(gO, gO + QS * Q * B, T(0));
  std::vector<T> gcol((D + 1) * blk, T(0)), gnewA(QS * B), gz(B, T(0)), gcolR(D * blk);
  std::vector<T> gpop(std::max<int64_t>(E, 1) * QS * Q * S * B, T(0));
  std::vector<T> ggp(std::max<int64_t>(E, 1) * QS * Q * B, T(0));
  // the slide: the window's older part and α's older part pass through
  for (int64_t a = 0; a + 1 < D; ++a)
    for (int64_t c = 0; c + 1 < D; ++c) {
      const T* src = gG2 + d.g(a, c, 0, 0);
      T* dst = gG + d.g(a + 1, c + 1, 0, 0);
      NS_SIMD
      for (int64_t j = 0; j < blk; ++j) dst[j] += src[j];
    }
  std::copy(gAl2, gAl2 + D * QS * B, gAl + QS * B);
  // the clamps at log 0, then the normaliser z (it enters the column and α)
  for (int64_t a = 0; a < D; ++a)
    for (int64_t uv = 0; uv < QS * QS; ++uv) {
      const T* g = gG2 + d.g(a, D - 1, 0, 0) + uv * B;
      const T* c = col + d.sq(a + 1, 0, 0) + uv * B;
      T* out = gcol.data() + d.sq(a + 1, 0, 0) + uv * B;
      NS_SIMD
      for (int64_t b = 0; b < B; ++b) {
        out[b] = c[b] - z[b] >= lz ? g[b] : T(0);
        gz[b] -= out[b];
      }
    }
  for (int64_t v = 0; v < QS; ++v) {
    const T* g = gAl2 + (D * QS + v) * B;
    const T* na = newA + v * B;
    T* out = gnewA.data() + v * B;
    NS_SIMD
    for (int64_t b = 0; b < B; ++b) {
      out[b] = na[b] - z[b] >= lz ? g[b] : T(0);
      gz[b] -= out[b];
    }
  }
  for (int64_t v = 0; v < QS; ++v) {
    const T* na = newA + v * B;
    T* out = gnewA.data() + v * B;
    NS_SIMD
    for (int64_t b = 0; b < B; ++b) out[b] += gz[b] * vexp(na[b] - z[b]);
  }
  // α[t+1] = ⊕ Al ⊗ col
  Terms t;
  alpha_terms(d, t, [&](int64_t o, const Terms& terms) {
    lse_backward(Al, col, gAl, gcol.data(), terms.ia, terms.ic, newA + o, gnewA.data() + o, B);
  });
  std::copy(gcol.data() + d.sq(D, 0, 0), gcol.data() + d.sq(D, 0, 0) + blk, gP);
  // col = colR ⊕ popped (starts that can pop), colR otherwise
  for (int64_t a = 0; a < D; ++a)
    for (int64_t u = 0; u < QS; ++u)
      for (int64_t v = 0; v < QS; ++v) {
        const T* g = gcol.data() + d.sq(a, u, v);
        T* gr = gcolR.data() + d.sq(a, u, v);
        if (a < E) {
          const T* c = col + d.sq(a, u, v);
          const T* cr = colR + d.sq(a, u, v);
          const T* pp = popped + d.pop(a, u, v / S, v % S);
          T* gpp = gpop.data() + d.pop(a, u, v / S, v % S);
          NS_SIMD
          for (int64_t b = 0; b < B; ++b) {
            gr[b] = g[b] * vexp(cr[b] - c[b]);
            gpp[b] = g[b] * vexp(pp[b] - c[b]);
          }
        } else {
          std::copy(g, g + B, gr);
        }
      }
  // the pop term, the popped runs, the replace term
  pop_terms(d, t, [&](int64_t o, const Terms& terms) {
    lse_backward(G, gp, gG, ggp.data(), terms.ia, terms.ic, popped + o, gpop.data() + o, B);
  });
  popped_run_terms(d, t, [&](int64_t o, const Terms& terms) {
    lse_backward(G, O, gG, gO, terms.ia, terms.ic, gp + o, ggp.data() + o, B);
  });
  replace_terms(d, t, [&](int64_t o, const Terms& terms) {
    lse_backward(G, R, gG, gR, terms.ia, terms.ic, colR + o, gcolR.data() + o, B);
  });
}

void check(const at::Tensor& t, const char* name, at::ScalarType dtype, at::IntArrayRef shape) {
  TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == dtype,
              "memrnn nondeterministic step: ", name, " must be a contiguous CPU tensor of ",
              dtype);
  TORCH_CHECK(t.sizes() == shape, "memrnn nondeterministic step: ", name, " has shape ",
              t.sizes(), ", expected ", shape);
}

template <typename T>
Dims<T> dims_of(const at::Tensor& G, const at::Tensor& O) {
  Dims<T> d{};
  d.D = G.size(0);
  d.E = d.D - 1;
  d.QS = G.size(2);
  d.Q = O.size(1);
  d.S = d.QS / d.Q;
  d.B = G.size(4);
  return d;
}

// The batch is padded to whole vectors (16 lanes) inside: with 10 rows, 6 of them would run as
// scalar remainders, at three times the cost of the rest.  Padded lanes hold log weight 0.
constexpr int64_t kLanes = 16;

at::Tensor pad(const at::Tensor& t, int64_t Bp) {
  return t.size(-1) == Bp ? t : at::constant_pad_nd(t, {0, Bp - t.size(-1)}, 0);
}

at::Tensor unpad(const at::Tensor& t, int64_t B) {
  return t.size(-1) == B ? t : t.narrow(-1, 0, B).contiguous();
}

// G [D, D, QS, QS, B], Al [D+1, QS, B], P, R [QS, QS, B], O [QS, Q, B] (batch last) ->
// (G2, Al2, then what the backward needs: the padded G, Al, R, O and colR, gp, popped, col,
// newA, z of the header, all with the padded batch).
std::vector<at::Tensor> ns_step_forward(const at::Tensor& G, const at::Tensor& Al,
                                        const at::Tensor& P, const at::Tensor& R,
                                        const at::Tensor& O) {
  TORCH_CHECK(G.dim() == 5 && O.dim() == 3 && G.size(0) >= 1, "memrnn nondeterministic step: bad ranks");
  const int64_t D = G.size(0), QS = G.size(2), B = G.size(4), Q = O.size(1), E = D - 1;
  TORCH_CHECK(Q >= 1 && QS % Q == 0, "memrnn nondeterministic step: ", QS, " configurations for ", Q, " states");
  const auto dt = G.scalar_type();
  check(G, "gamma", dt, {D, D, QS, QS, B});
  check(Al, "alpha", dt, {D + 1, QS, B});
  check(P, "push", dt, {QS, QS, B});
  check(R, "repl", dt, {QS, QS, B});
  check(O, "pop", dt, {QS, Q, B});
  const int64_t S = QS / Q, Bp = (B + kLanes - 1) / kLanes * kLanes;
  const at::Tensor Gp = pad(G, Bp), Alp = pad(Al, Bp), Pp = pad(P, Bp), Rp = pad(R, Bp), Op = pad(O, Bp);
  auto opt = G.options();
  at::Tensor G2 = at::empty_like(Gp), Al2 = at::empty_like(Alp);
  at::Tensor colR = at::empty({D, QS, QS, Bp}, opt), gp = at::empty({E, QS, Q, Bp}, opt);
  at::Tensor popped = at::empty({E, QS, Q, S, Bp}, opt);
  at::Tensor col = at::empty({D + 1, QS, QS, Bp}, opt), newA = at::empty({QS, Bp}, opt), z = at::empty({Bp}, opt);
  AT_DISPATCH_FLOATING_TYPES(dt, "memrnn_ns_step_forward", [&] {
    Dims<scalar_t> d = dims_of<scalar_t>(G, O);
    d.B = Bp;
    step_forward<scalar_t>(d, Gp.data_ptr<scalar_t>(), Alp.data_ptr<scalar_t>(), Pp.data_ptr<scalar_t>(),
                           Rp.data_ptr<scalar_t>(), Op.data_ptr<scalar_t>(), G2.data_ptr<scalar_t>(),
                           Al2.data_ptr<scalar_t>(), colR.data_ptr<scalar_t>(), gp.data_ptr<scalar_t>(),
                           popped.data_ptr<scalar_t>(), col.data_ptr<scalar_t>(), newA.data_ptr<scalar_t>(),
                           z.data_ptr<scalar_t>());
  });
  return {unpad(G2, B), unpad(Al2, B), Gp, Alp, Rp, Op, colR, gp, popped, col, newA, z};
}

// The gradients of (G, Al, P, R, O) from those of (G2, Al2), batch last; the saved tensors
// are ns_step_forward's (padded batch).
std::vector<at::Tensor> ns_step_backward(const at::Tensor& G, const at::Tensor& Al, const at::Tensor& R,
                                         const at::Tensor& O, const at::Tensor& colR, const at::Tensor& gp,
                                         const at::Tensor& popped, const at::Tensor& col,
                                         const at::Tensor& newA, const at::Tensor& z, const at::Tensor& gG2,
                                         const at::Tensor& gAl2) {
  const auto dt = G.scalar_type();
  const int64_t B = gG2.size(-1), Bp = G.size(-1);
  TORCH_CHECK(gG2.is_contiguous() && gAl2.is_contiguous() && gG2.scalar_type() == dt && gAl2.scalar_type() == dt,
              "memrnn nondeterministic step: the gradients must be contiguous and of the state's dtype");
  const at::Tensor gG2p = pad(gG2, Bp), gAl2p = pad(gAl2, Bp);
  at::Tensor gG = at::empty_like(G), gAl = at::empty_like(Al), gP = at::empty_like(R);
  at::Tensor gR = at::empty_like(R), gO = at::empty_like(O);
  AT_DISPATCH_FLOATING_TYPES(dt, "memrnn_ns_step_backward", [&] {
    const Dims<scalar_t> d = dims_of<scalar_t>(G, O);
    step_backward<scalar_t>(d, G.data_ptr<scalar_t>(), Al.data_ptr<scalar_t>(), R.data_ptr<scalar_t>(),
                            O.data_ptr<scalar_t>(), colR.data_ptr<scalar_t>(), gp.data_ptr<scalar_t>(),
                            popped.data_ptr<scalar_t>(), col.data_ptr<scalar_t>(), newA.data_ptr<scalar_t>(),
                            z.data_ptr<scalar_t>(), gG2p.data_ptr<scalar_t>(), gAl2p.data_ptr<scalar_t>(),
                            gG.data_ptr<scalar_t>(), gAl.data_ptr<scalar_t>(), gP.data_ptr<scalar_t>(),
                            gR.data_ptr<scalar_t>(), gO.data_ptr<scalar_t>());
  });
  return {unpad(gG, B), unpad(gAl, B), unpad(gP, B), unpad(gR, B), unpad(gO, B)};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(memrnn_native, lib) {
  lib.def(
      "ns_step_forward(Tensor gamma, Tensor alpha, Tensor push, Tensor repl, Tensor pop) -> Tensor[]",
      &ns_step_forward);
  lib.def(
      "ns_step_backward(Tensor gamma, Tensor alpha, Tensor repl, Tensor pop, Tensor colR, Tensor gp, "
      "Tensor popped, Tensor col, Tensor newA, Tensor z, Tensor grad_gamma, Tensor grad_alpha) -> Tensor[]",
      &ns_step_backward);
}
