// The building blocks of DuSell & Chiang's nondeterministic stack in C++ (native_step.cpp, beside
// this file, includes it; its header comment describes the store, the columns and the step): exp
// and log that vectorise, exact log-sum-exps (lse_add, lse, log_vecmat) and their backward, the
// store's geometry (Geo) and the products and terms of one step (replace_products,
// popped_run_products, pop_forward, alpha_terms).  One translation unit includes it, hence the
// anonymous namespace.
#pragma once

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

// A normalised log weight below LOG_ZERO / 2 is log 0: stored as LOG_ZERO exactly (and takes no
// gradient), so that weights of runs that cannot exist never drift (the torch step does the same).
template <typename T>
inline bool alive(T x) {
  return x > T(kLogZero / 2);
}
template <typename T>
inline T snap(T x) {
  return alive(x) ? x : T(kLogZero);
}
inline double vlog(double x) { return std::log(x); }

// One term a[b] + c[b] into the running log-sum-exp (maximum m, sum s relative to it; m = −inf,
// s = 0 before the first term): one pass and one exponential per term, the sum rescaled when a
// term exceeds the maximum (the first term always does).  The result is m + log s.
template <typename T>
inline void lse_add(const T* a, const T* c, T* m, T* s, int64_t B) {
  NS_SIMD
  for (int64_t b = 0; b < B; ++b) {
    const T t = a[b] + c[b];
    const T d = t - m[b];
    const bool up = d > T(0);
    const T e = vexp(up ? -d : d);
    s[b] = up ? s[b] * e + T(1) : s[b] + e;
    m[b] = up ? t : m[b];
  }
}

// out[b] = log Σ_k exp(A[ia_k + b] + C[ic_k + b]) over the term offsets (ia_k, ic_k), exactly,
// in one pass (lse_add).
template <typename T>
void lse(const T* A, const T* C, const std::vector<int64_t>& ia, const std::vector<int64_t>& ic,
         int64_t B, T* out, T* m, T* s) {
  std::fill(m, m + B, -std::numeric_limits<T>::infinity());
  std::fill(s, s + B, T(0));
  for (size_t k = 0; k < ia.size(); ++k) lse_add(A + ia[k], C + ic[k], m, s, B);
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

// The batch is padded to whole vectors (16 lanes) inside: with 10 rows, 6 of them would run as
// scalar remainders, at three times the cost of the rest.  Padded lanes hold log weight 0.
constexpr int64_t kLanes = 16;

// x in a ring of n slots (n ≥ 1; x ≥ 0): x itself while it fits, so that a run with history,
// whose rings hold every column, takes no division.
inline int64_t wrap(int64_t x, int64_t n) { return x < n ? x : x % n; }

// Offsets (in elements) into the store, the alphas and one step's saved arrays.  The store
// keeps columns J0.. (in the absolute numbering of the header; the starting window's columns
// before J0 hold nothing alive) and start offsets 0..Do−1 (no later offset is ever alive), column
// J in slot (J − J0) mod Rc and α's entry A in slot A mod Ra: with history the rings hold every
// column and entry (Rc = D − J0 + T, Ra = D + T + 1: no slot is reused), without history the
// last D columns and D + 1 entries (native_step.cpp's header: "Without history").
struct Geo {
  int64_t B, D, Do, J0, Q, S, QS, C;  // C: channels (γ, then ζ's m)
  int64_t Rc = 1, Ra = 1;             // the store's column slots and the alphas' slots (≥ 1)
  int64_t col(int64_t J, int64_t o, int64_t ch, int64_t u, int64_t v) const {  // store[J][o][ch][u][v][0]
    return ((((wrap(J - J0, Rc) * Do + o) * C + ch) * QS + u) * QS + v) * B;
  }
  bool stored(int64_t J, int64_t o) const { return J >= J0 && o < Do; }
  int64_t al(int64_t A, int64_t u) const { return (wrap(A, Ra) * QS + u) * B; }
  int64_t sq(int64_t o, int64_t ch, int64_t u, int64_t v) const { return (((o * C + ch) * QS + u) * QS + v) * B; }
  int64_t gp(int64_t k, int64_t w, int64_t r) const { return ((k * QS + w) * Q + r) * B; }
  int64_t pop(int64_t o, int64_t ch, int64_t u, int64_t r, int64_t y) const {
    return ((((o * C + ch) * QS + u) * Q + r) * S + y) * B;
  }
  int64_t E() const { return std::max<int64_t>(D - 1, 1); }  // rows of gp and popped
};

// The log-semiring vector-matrix product out[v] = ⊕_w a[w] ⊗ M[w][v] (a [W][B], M [W][V][B],
// out [V][B]; V ≤ kMaxV), exact: each output's sum kept relative to its running maximum.  N: the batch when known at
// compile time (pop_forward), else 0.
constexpr int64_t kMaxV = 64;

template <typename T, int64_t N>
void log_vecmat(const T* a, const T* M, int64_t W, int64_t V, int64_t Bd, T* out) {
  const int64_t B = N ? N : Bd;
  T m[kMaxV * kLanes], sm[kMaxV * kLanes];
  for (int64_t b0 = 0; b0 < B; b0 += kLanes) {  // one vector of lanes at a time
    for (int64_t j = 0; j < V * kLanes; ++j) {
      m[j] = -std::numeric_limits<T>::infinity();
      sm[j] = T(0);
    }
    for (int64_t w = 0; w < W; ++w) {  // one pass: the running maximum, as pop_forward
      const T* aw = a + w * B + b0;
      for (int64_t v = 0; v < V; ++v) {
        const T* mv = M + (w * V + v) * B + b0;
        lse_add(aw, mv, m + v * kLanes, sm + v * kLanes, kLanes);
      }
    }
    for (int64_t v = 0; v < V; ++v) {
      T* o = out + v * B + b0;
      NS_SIMD
      for (int64_t b = 0; b < kLanes; ++b) o[b] = m[v * kLanes + b] + vlog(sm[v * kLanes + b]);
    }
  }
}

// The backward of log_vecmat: each term's weight exp(a + M − out) · g added to ga and gM.
template <typename T>
void log_vecmat_backward(const T* a, const T* M, const T* out, const T* g, int64_t W, int64_t V, int64_t B,
                         T* ga, T* gM) {
  for (int64_t w = 0; w < W; ++w)
    for (int64_t v = 0; v < V; ++v) {
      const T* aw = a + w * B;
      const T* mv = M + (w * V + v) * B;
      const T* ov = out + v * B;
      const T* gv = g + v * B;
      T* da = ga + w * B;
      T* dm = gM + (w * V + v) * B;
      NS_SIMD
      for (int64_t b = 0; b < B; ++b) {
        const T wt = vexp(aw[b] + mv[b] - ov[b]) * gv[b];
        da[b] += wt;
        dm[b] += wt;
      }
    }
}

// The replace term colR[o'−1][ch][u] = store[J−1][o'−1][ch][u] ⊗ R (o' = 1..L, each channel)
// and the popped runs gp[ko][w] = store[J−1][ko][0][w] ⊗ O (ko = 0..L−2, from γ), as log
// vector-matrix products: f(store offset, output offset) for each.
template <typename F>
void replace_products(const Geo& g, int64_t J, int64_t L, int64_t ch, F f) {
  for (int64_t o = 1; o <= L; ++o)
    for (int64_t u = 0; u < g.QS; ++u) f(g.col(J - 1, o - 1, ch, u, 0), g.sq(o - 1, ch, u, 0));
}

template <typename F>
void popped_run_products(const Geo& g, int64_t J, int64_t L, F f) {
  for (int64_t k = 0; k + 2 <= L; ++k)
    for (int64_t w = 0; w < g.QS; ++w) f(g.col(J - 1, k, 0, w, 0), g.gp(k, w, 0));
}

// The pop term, popped[o'−2][u][r][y] = ⊕_{ko ≤ o'−2} ⊕_q store[J−2−ko][o'−2−ko][u][qy] ⊗
// gp[ko][qy][r] (o' = 2..L), in channel ch: the step's O(L²) part.  For each o' the blocks store[..][..] (QS·QS
// vectors, contiguous) are streamed once, the row's running maxima and sums staying in cache.
// N: the padded batch when it is one vector's worth (16), known at compile time so that each
// inner loop is a few vector instructions; 0: any batch.
template <typename T, int64_t N>
void pop_forward(const Geo& g, int64_t J, int64_t L, int64_t ch, const T* store, const T* gp, T* popped, T* mx,
                 T* sm) {
  const int64_t B = N ? N : g.B, Q = g.Q, S = g.S, QS = g.QS, n = QS * Q * S * B;
  for (int64_t o = 2; o <= L; ++o) {
    std::fill(mx, mx + n, -std::numeric_limits<T>::infinity());
    std::fill(sm, sm + n, T(0));
    for (int64_t k = 0; k + 2 <= o; ++k) {
      const T* blk = store + g.col(J - 2 - k, o - 2 - k, ch, 0, 0);
      const T* gk = gp + g.gp(k, 0, 0);
      for (int64_t u = 0; u < QS; ++u)
        for (int64_t qy = 0; qy < QS; ++qy) {
          const T* a = blk + (u * QS + qy) * B;
          const int64_t y = qy % S;
          for (int64_t r = 0; r < Q; ++r) {
            const T* c = gk + (qy * Q + r) * B;
            const int64_t at = ((u * Q + r) * S + y) * B;
            lse_add(a, c, mx + at, sm + at, B);
          }
        }
    }
    T* out = popped + g.pop(o - 2, ch, 0, 0, 0);
    NS_SIMD
    for (int64_t j = 0; j < n; ++j) out[j] = mx[j] + vlog(sm[j]);
  }
}

// The backward of pop_forward: each term's weight exp(a + c − out) · g added to both factors.
template <typename T, int64_t N>
void pop_backward(const Geo& g, int64_t J, int64_t L, int64_t ch, const T* store, const T* gp, const T* popped,
                  const T* gpop, T* gstore, T* ggp) {
  const int64_t B = N ? N : g.B, Q = g.Q, S = g.S, QS = g.QS;
  for (int64_t o = 2; o <= L; ++o) {
    const T* out = popped + g.pop(o - 2, ch, 0, 0, 0);
    const T* go = gpop + g.pop(o - 2, ch, 0, 0, 0);
    for (int64_t k = 0; k + 2 <= o; ++k) {
      const T* blk = store + g.col(J - 2 - k, o - 2 - k, ch, 0, 0);
      T* gblk = gstore + g.col(J - 2 - k, o - 2 - k, ch, 0, 0);
      const T* gk = gp + g.gp(k, 0, 0);
      T* ggk = ggp + g.gp(k, 0, 0);
      for (int64_t u = 0; u < QS; ++u)
        for (int64_t qy = 0; qy < QS; ++qy) {
          const T* a = blk + (u * QS + qy) * B;
          T* da = gblk + (u * QS + qy) * B;
          const int64_t y = qy % S;
          for (int64_t r = 0; r < Q; ++r) {
            const T* c = gk + (qy * Q + r) * B;
            T* dc = ggk + (qy * Q + r) * B;
            const int64_t at = ((u * Q + r) * S + y) * B;
            const T* ot = out + at;
            const T* gt = go + at;
            NS_SIMD
            for (int64_t b = 0; b < B; ++b) {
              const T w = vexp(a[b] + c[b] - ot[b]) * gt[b];
              da[b] += w;
              dc[b] += w;
            }
          }
        }
    }
  }
}

// newA[v] = ⊕_{o' ≤ L} ⊕_u alphas[J − o'][u] ⊗ col[o'][0][u][v] (channel 0; channel c ≥ 1: η[c−1])
template <typename F>
void alpha_terms(const Geo& g, int64_t J, int64_t L, int64_t ch, Terms& t, F visit) {
  for (int64_t v = 0; v < g.QS; ++v) {
    t.clear();
    for (int64_t o = 0; o <= L; ++o)
      for (int64_t u = 0; u < g.QS; ++u) t.add(g.al(J - o, u), g.sq(o, ch, u, v));
    visit(v * g.B, t);
  }
}

}  // namespace
