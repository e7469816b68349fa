// DuSell & Chiang's nondeterministic stack (NS-RNN 2020; RNS-RNN and its memory-limited variant
// 2022) over a whole sequence, step by step, in C++ (memrnn.ops.nondeterministic): the log-space
// recurrences, window and per-step normalisation of nondeterministic_step in __init__.py, whose
// broadcast log-sum-exps they replace on CPU tensors.  Every log-sum-exp is exact (its sum kept
// relative to the running maximum of its own terms, never a product of separately shifted
// exponentials: lse_add) and formed term by term without materialising the broadcast; every array
// is batch-last ([..., B], B padded to 16 lanes) so that each loop over the batch vectorises, the
// exponentials and logarithms included (float: vexp/vlog below, Cephes' polynomials, within 2 ulp;
// double: the C library's).  The selects in those loops vectorise on AVX2 only under -fno-trapping-math
// (memrnn/ops/native.py's flags); without it GCC 12 leaves them scalar unless the CPU has AVX-512.
//
// The store.  A run of T steps from a window of depth D keeps every column once, in absolute
// order, instead of a window copied at every step (O(D²) per step; the columns are written once):
//   store  [D+T][D][C][QS][QS][B]  store[J][o][0] = log γ[i → j], j the end of column J,
//                                  i = j − 1 − o (columns 0..D−1: the starting window's, column
//                                  D+s: step s's)
//   alphas [D+T+1][QS][B]          alphas[J+1] = log α[j] (the end of column J); alphas[0..D] the
//                                  starting window's
// with QS = Q·S configurations qx = q·S + x.  Window entry G[a][c] (a ≤ c) is store[c][c − a];
// entries below the diagonal, and start offsets beyond the depth, are log 0.  Only what can be
// alive is allocated (Geo below): columns from J0 = D − live on and start offsets below
// Do = min(D, live + T), so the store is [D − J0 + T][Do][C][QS][QS][B] (C channels, below; T+1
// columns of T+1 offsets from the fresh stack, where live = 1).
//
// Without history (a run nothing will differentiate: NondeterministicRun's history=False, e.g.
// under torch.no_grad) the store and the alphas are rings (Geo::col, Geo::al): column J in slot
// (J − J0) mod D, α's entry A in slot A mod (D + 1), so that a run's memory is that of its window,
// O(B·D·Do·C·QS²), whatever T (with history it is O(B·(D + T)·Do·C·QS²)).  This is what the
// step's geometry allows: step s (column J) reads columns J−1..J−L and α's entries J−L..J (L ≤ D,
// below), all of them before it writes column J and α's entry J+1, so column J may take the slot
// of column J − D and entry J+1 that of entry J − D, the oldest ones it read.  No step reads an
// offset left from a slot's earlier column: step s + c reads column J at offsets up to
// min(live + s, D − c) ≤ min(L, D − 1), all of which step s wrote; and column J reuses a slot
// only once J − J0 ≥ D, i.e. live + s ≥ D, when L = D and step s writes every offset 0..D−1, so
// a window read from the rings holds what the history store holds (its fresh log 0 included,
// where the slot's first column has offsets no step wrote).  A row's window after
// its lengths[b] steps is columns lengths[b]..lengths[b]+D−1 and α's entries lengths[b]..+D: in the
// rings exactly while the run has taken lengths[b] steps, when ns_run_window_into copies it out
// (the run copies each row's at its length; rows run on past their lengths).  The ring is the
// window's own size, hence the limited (memory-limited RNS-RNN) stack's saving: with D ≥ T the
// columns are all kept anyway (D − J0 + T ≤ D slots), the unlimited NS-RNN's state being O(T)
// columns of O(T) offsets itself.  The step's arithmetic is the same op for op, so the run gives
// the history run's numbers bit for bit; it has no backward.
//
// Live starts.  Starts earlier than every entry alive in the starting window (above LOG_ZERO / 2)
// can never gain weight: their entries stay log 0 exactly and are never computed.  From the fresh
// stack, step s computes s + 2 start offsets (not D + 1), so an unlimited stack (D ≥ T) costs
// Σ_s s² ≈ T³/3, not T·D².
//
// Step s (column J = D + s, end t+1; P, R [QS][QS][B] push q,x → r,xy and replace q,x → r,y;
// O [QS][Q][B] pop q,x → r), new start offsets o' = 0..D (start t − o'):
//   col[0]   = P
//   colR[o'] = ⊕_w store[J−1][o'−1][u][w] ⊗ R[w][v]                              (o' ≥ 1)
//   gp[ko]   = ⊕_v store[J−1][ko][w][v] ⊗ O[v][r]: the run from t−1−ko popped into r
//   popped[o'][u][r][y] = ⊕_{ko ≤ o'−2} ⊕_q store[J−2−ko][o'−2−ko][u][qy] ⊗ gp[ko][qy][r]  (o' ≥ 2)
//   col[o']  = colR[o'] ⊕ popped[o']
//   newA[v]  = ⊕_{o'} ⊕_u alphas[J − o'][u] ⊗ col[o'][u][v],   z = ⊕_v newA[v]
//   store[J][o'] = max(col[o'] − z, LOG_ZERO) (o' < D),         alphas[J+1] = max(newA − z, LOG_ZERO)
// saved for the backward (per step): R, O, colR, gp, popped, col, newA, z.
//
// Channels.  The vector RNS-RNN (DuSell & Chiang 2023) keeps, beside γ, the weighted top vectors
// ζ[i → j] ∈ R^m: the same recurrences with the vector carried along (a push's column is P ⊗ v_c,
// replace and pop as above with the popped runs' gp taken from γ), and η[c] = ⊕ α ⊗ ζ_c.  The
// store holds C = 1 + m channels per offset, γ first: store [cols][Do][C][QS][QS][B]; each
// step's colR, popped and col carry the channels too, and η (before normalisation) is saved as
// eta [m][QS][B].  A plain run has C = 1.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "nondeterministic/native_common.h"

namespace {

// One step's saved arrays (pointers into the run's per-step buffers).
template <typename T>
struct Saved {
  T *R, *O, *colR, *gp, *popped, *col, *newA, *z, *eta;  // eta [m][QS][B]: η before normalisation
};

// V [m][B]: the log pushed vectors (m = C − 1; unused when C = 1); eta_out [m][QS][B]: η after
// the step, normalised.
template <typename T, int64_t N>
void step_forward(const Geo& g, int64_t J, int64_t L, T* store, T* alphas, const T* P, const T* V,
                  const Saved<T>& sv, T* eta_out) {
  const int64_t B = N ? N : g.B, D = g.D, S = g.S, QS = g.QS, C = g.C;
  std::vector<T> m(B), s(B);
  Terms t;
  for (int64_t ch = 0; ch < C; ++ch)
    replace_products(g, J, L, ch, [&](int64_t a, int64_t o) { log_vecmat<T, N>(store + a, sv.R, QS, QS, B, sv.colR + o); });
  popped_run_products(g, J, L, [&](int64_t a, int64_t o) { log_vecmat<T, N>(store + a, sv.O, QS, g.Q, B, sv.gp + o); });
  {
    std::vector<T> mx(QS * g.Q * S * B), sm(QS * g.Q * S * B);
    for (int64_t ch = 0; ch < C; ++ch) pop_forward<T, N>(g, J, L, ch, store, sv.gp, sv.popped, mx.data(), sm.data());
  }
  // the new column: the push from start t (with the pushed vector in channels 1..m), the replace
  // (⊕ the pop from start t − 2 on)
  for (int64_t ch = 0; ch < C; ++ch)
    for (int64_t uv = 0; uv < QS * QS; ++uv) {
      const T* p = P + uv * B;
      T* out = sv.col + g.sq(0, ch, 0, 0) + uv * B;
      if (ch == 0) {
        std::copy(p, p + B, out);
      } else {
        const T* v = V + (ch - 1) * B;
        NS_SIMD
        for (int64_t b = 0; b < B; ++b) out[b] = p[b] + v[b];
      }
    }
  for (int64_t o = 1; o <= L; ++o)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t u = 0; u < QS; ++u)
        for (int64_t v = 0; v < QS; ++v) {
          const T* cr = sv.colR + g.sq(o - 1, ch, u, v);
          T* out = sv.col + g.sq(o, ch, u, v);
          if (o >= 2) {
            const T* pp = sv.popped + g.pop(o - 2, ch, u, v / S, v % S);
            NS_SIMD
            for (int64_t b = 0; b < B; ++b) {
              const T mx = cr[b] > pp[b] ? cr[b] : pp[b];  // not std::max (left scalar by GCC)
              out[b] = mx + vlog(vexp(cr[b] - mx) + vexp(pp[b] - mx));
            }
          } else {
            std::copy(cr, cr + B, out);
          }
        }
  alpha_terms(g, J, L, 0, t, [&](int64_t o, const Terms& tm) { lse(alphas, sv.col, tm.ia, tm.ic, B, sv.newA + o, m.data(), s.data()); });
  for (int64_t ch = 1; ch < C; ++ch) {
    T* eta = sv.eta + (ch - 1) * QS * B;
    alpha_terms(g, J, L, ch, t, [&](int64_t o, const Terms& tm) { lse(alphas, sv.col, tm.ia, tm.ic, B, eta + o, m.data(), s.data()); });
  }
  {
    const std::vector<T> zero(B, T(0));
    t.clear();
    for (int64_t v = 0; v < QS; ++v) t.add(v * B, 0);
    lse(sv.newA, zero.data(), t.ia, t.ic, B, sv.z, m.data(), s.data());
  }
  // normalised by z; start t − D leaves the window (the depth's D offsets are kept)
  for (int64_t o = 0; o <= std::min(L, D - 1); ++o)
    for (int64_t j = 0; j < C * QS * QS; ++j) {
      const T* src = sv.col + g.sq(o, 0, 0, 0) + j * B;
      T* dst = store + g.col(J, o, 0, 0, 0) + j * B;
      NS_SIMD
      for (int64_t b = 0; b < B; ++b) dst[b] = snap(src[b] - sv.z[b]);
    }
  for (int64_t v = 0; v < QS; ++v) {
    T* dst = alphas + g.al(J + 1, v);
    const T* src = sv.newA + v * B;
    NS_SIMD
    for (int64_t b = 0; b < B; ++b) dst[b] = snap(src[b] - sv.z[b]);
  }
  for (int64_t j = 0; j < (C - 1) * QS; ++j) {
    const T* src = sv.eta + j * B;
    T* dst = eta_out + j * B;
    NS_SIMD
    for (int64_t b = 0; b < B; ++b) dst[b] = snap(src[b] - sv.z[b]);
  }
}

// The gradients of step s's push, replace, pop and pushed vectors (gP, gR [QS][QS][B], gO
// [QS][Q][B], gV [m][B], each overwritten) from those of its column and α (in gstore[J],
// galphas[J+1]) and of its normalised η (g_eta [m][QS][B]); the gradients of what the step read
// are added to gstore and galphas.
template <typename T, int64_t N>
void step_backward(const Geo& g, int64_t J, int64_t L, const T* store, const T* alphas, const Saved<T>& sv,
                   T* gstore, T* galphas, const T* g_eta, T* gP, T* gR, T* gO, T* gV) {
  const int64_t B = N ? N : g.B, D = g.D, Q = g.Q, S = g.S, QS = g.QS, C = g.C;
  const int64_t blk = C * QS * QS * B;
  std::fill(gR, gR + QS * QS * B, T(0));
  std::fill(gO, gO + QS * Q * B, T(0));
  std::vector<T> gcol((L + 1) * blk, T(0)), gnewA(QS * B), gz(B, T(0)), gcolR(std::max<int64_t>(L, 1) * blk);
  std::vector<T> gpop(g.E() * C * QS * Q * S * B, T(0)), ggp(g.E() * QS * Q * B, T(0)), geta((C - 1) * QS * B);
  // the clamps at log 0, then the normaliser z (it enters the column, α and η)
  for (int64_t o = 0; o <= std::min(L, D - 1); ++o)
    for (int64_t j = 0; j < C * QS * QS; ++j) {
      const T* gs = gstore + g.col(J, o, 0, 0, 0) + j * B;
      const T* c = sv.col + g.sq(o, 0, 0, 0) + j * B;
      T* out = gcol.data() + g.sq(o, 0, 0, 0) + j * B;
      NS_SIMD
      for (int64_t b = 0; b < B; ++b) {
        out[b] = alive(c[b] - sv.z[b]) ? gs[b] : T(0);
        gz[b] -= out[b];
      }
    }
  for (int64_t v = 0; v < QS; ++v) {
    const T* ga = galphas + g.al(J + 1, v);
    const T* na = sv.newA + v * B;
    T* out = gnewA.data() + v * B;
    NS_SIMD
    for (int64_t b = 0; b < B; ++b) {
      out[b] = alive(na[b] - sv.z[b]) ? ga[b] : T(0);
      gz[b] -= out[b];
    }
  }
  for (int64_t j = 0; j < (C - 1) * QS; ++j) {
    const T* ge = g_eta + j * B;
    const T* e = sv.eta + j * B;
    T* out = geta.data() + j * B;
    NS_SIMD
    for (int64_t b = 0; b < B; ++b) {
      out[b] = alive(e[b] - sv.z[b]) ? ge[b] : T(0);
      gz[b] -= out[b];
    }
  }
  for (int64_t v = 0; v < QS; ++v) {
    const T* na = sv.newA + v * B;
    T* out = gnewA.data() + v * B;
    NS_SIMD
    for (int64_t b = 0; b < B; ++b) out[b] += gz[b] * vexp(na[b] - sv.z[b]);
  }
  Terms t;
  alpha_terms(g, J, L, 0, t, [&](int64_t o, const Terms& tm) {
    lse_backward(alphas, sv.col, galphas, gcol.data(), tm.ia, tm.ic, sv.newA + o, gnewA.data() + o, B);
  });
  for (int64_t ch = 1; ch < C; ++ch) {
    const int64_t e0 = (ch - 1) * QS * B;
    alpha_terms(g, J, L, ch, t, [&](int64_t o, const Terms& tm) {
      lse_backward(alphas, sv.col, galphas, gcol.data(), tm.ia, tm.ic, sv.eta + e0 + o, geta.data() + e0 + o, B);
    });
  }
  // the push: P enters every channel's offset 0, the vector c channel c + 1's
  std::copy(gcol.data(), gcol.data() + QS * QS * B, gP);
  for (int64_t ch = 1; ch < C; ++ch) {
    T* gv = gV + (ch - 1) * B;
    std::fill(gv, gv + B, T(0));
    for (int64_t uv = 0; uv < QS * QS; ++uv) {
      const T* gc = gcol.data() + g.sq(0, ch, 0, 0) + uv * B;
      T* gp = gP + uv * B;
      NS_SIMD
      for (int64_t b = 0; b < B; ++b) {
        gp[b] += gc[b];
        gv[b] += gc[b];
      }
    }
  }
  // col = colR ⊕ popped from offset 2 on, colR at offset 1
  for (int64_t o = 1; o <= L; ++o)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t u = 0; u < QS; ++u)
        for (int64_t v = 0; v < QS; ++v) {
          const T* gc = gcol.data() + g.sq(o, ch, u, v);
          T* gr = gcolR.data() + g.sq(o - 1, ch, u, v);
          if (o >= 2) {
            const T* c = sv.col + g.sq(o, ch, u, v);
            const T* cr = sv.colR + g.sq(o - 1, ch, u, v);
            const T* pp = sv.popped + g.pop(o - 2, ch, u, v / S, v % S);
            T* gpp = gpop.data() + g.pop(o - 2, ch, u, v / S, v % S);
            NS_SIMD
            for (int64_t b = 0; b < B; ++b) {
              gr[b] = gc[b] * vexp(cr[b] - c[b]);
              gpp[b] = gc[b] * vexp(pp[b] - c[b]);
            }
          } else {
            std::copy(gc, gc + B, gr);
          }
        }
  for (int64_t ch = 0; ch < C; ++ch)
    pop_backward<T, N>(g, J, L, ch, store, sv.gp, sv.popped, gpop.data(), gstore, ggp.data());
  popped_run_products(g, J, L, [&](int64_t a, int64_t o) {
    log_vecmat_backward(store + a, sv.O, sv.gp + o, ggp.data() + o, QS, Q, B, gstore + a, gO);
  });
  for (int64_t ch = 0; ch < C; ++ch)
    replace_products(g, J, L, ch, [&](int64_t a, int64_t o) {
      log_vecmat_backward(store + a, sv.R, sv.colR + o, gcolR.data() + o, QS, QS, B, gstore + a, gR);
    });
}

// ---- the ops -------------------------------------------------------------------------------


int64_t padded(int64_t B) { return (B + kLanes - 1) / kLanes * kLanes; }

void check(const at::Tensor& t, const char* name, at::ScalarType dtype, at::IntArrayRef shape) {
  TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == dtype,
              "memrnn nondeterministic stack: ", name, " must be a contiguous CPU tensor of ", dtype);
  TORCH_CHECK(t.sizes() == shape, "memrnn nondeterministic stack: ", name, " has shape ", t.sizes(),
              ", expected ", shape);
}

// The geometry of a run: geo = [D, Do, J0, live, steps, Rc, Ra] (int64; ns_run_start's), the
// store [slots][Do][C][QS][QS][Bp] (slots: Rc, or 0 where the run has no column at all).
constexpr int64_t kGeo = 7;

Geo geo_of(const at::Tensor& store, const at::Tensor& geo, int64_t Q) {
  TORCH_CHECK(geo.scalar_type() == at::kLong && geo.numel() == kGeo && geo.is_contiguous(),
              "memrnn nondeterministic stack: bad run geometry");
  TORCH_CHECK(store.dim() == 6, "memrnn nondeterministic stack: bad store");
  const int64_t* p = geo.data_ptr<int64_t>();
  Geo g{};
  g.D = p[0];
  g.Do = p[1];
  g.J0 = p[2];
  g.Rc = p[5];
  g.Ra = p[6];
  g.C = store.size(2);
  g.QS = store.size(3);
  g.Q = Q;
  g.S = g.QS / Q;
  g.B = store.size(5);
  return g;
}

int64_t live_of(const at::Tensor& geo) { return geo.data_ptr<int64_t>()[3]; }
int64_t steps_of(const at::Tensor& geo) { return geo.data_ptr<int64_t>()[4]; }

// Whether the run keeps every column (history), not the rings of the last ones.
bool has_history(const at::Tensor& geo) {
  const int64_t* p = geo.data_ptr<int64_t>();
  return p[5] >= std::max<int64_t>(1, p[0] - p[2] + p[4]) && p[6] == p[0] + p[4] + 1;
}

// Every entry of a window ([B][D][D][QS][QS] and [B][D+1][QS], batch first; ζ's [B][D][D][QS][QS][m])
// that the store holds and where: f(window offset, store offset) for γ's upper triangle, fz(ζ
// window offset, store offset) for ζ's, fa(window, alphas offset) for α.  Row b's window is the
// one after lengths[b] steps of the run (column D − 1 + lengths[b] last); only ≥ 0: the rows
// whose lengths[b] is `only` alone (the others are not visited).
template <typename F, typename FZ, typename FA>
void for_window(const Geo& g, const int64_t* lengths, int64_t B, F f, FZ fz, FA fa, int64_t only = -1) {
  const int64_t D = g.D, QS = g.QS, sq = QS * QS, m = g.C - 1;
  for (int64_t b = 0; b < B; ++b) {
    if (only >= 0 && lengths[b] != only) continue;
    const int64_t last = D - 1 + (lengths ? lengths[b] : 0);
    for (int64_t a = 0; a < D; ++a)
      for (int64_t c = a; c < D; ++c) {
        const int64_t J = last - (D - 1) + c;
        if (!g.stored(J, c - a)) continue;
        const int64_t w = ((b * D + a) * D + c) * sq;
        for (int64_t uv = 0; uv < sq; ++uv) f(w + uv, g.col(J, c - a, 0, 0, 0) + uv * g.B + b);
        for (int64_t ch = 1; ch <= m; ++ch)
          for (int64_t uv = 0; uv < sq; ++uv) fz((w + uv) * m + ch - 1, g.col(J, c - a, ch, 0, 0) + uv * g.B + b);
      }
    for (int64_t p = 0; p <= D; ++p)
      for (int64_t u = 0; u < QS; ++u) fa((b * (D + 1) + p) * QS + u, g.al(last + 1 - D + p, u) + b);
  }
}

// A run of `steps` steps from the window (gamma [B, D, D, QS, QS], alpha [B, D+1, QS], and for the
// vector stack zeta [B, D, D, QS, QS, m], batch first) -> (store, alphas, geo): the window written
// in (everything else log 0) and the run's geometry [D, Do, J0, live, steps, Rc, Ra], live being
// the largest start offset, counted from the window's last end, of an entry alive in it (start
// offsets up to live + s are computed at step s), Rc and Ra the rings' slots (every column and
// entry with history, the last D columns and D + 1 entries without: the header's "Without
// history").
std::tuple<at::Tensor, at::Tensor, at::Tensor> ns_run_start(const at::Tensor& gamma, const at::Tensor& alpha,
                                                             const std::optional<at::Tensor>& zeta, int64_t steps,
                                                             bool history) {
  TORCH_CHECK(gamma.dim() == 5 && alpha.dim() == 3, "memrnn nondeterministic stack: bad ranks");
  const int64_t B = gamma.size(0), D = gamma.size(1), QS = gamma.size(3);
  TORCH_CHECK(D >= 1 && steps >= 0, "memrnn nondeterministic stack: bad sizes");
  const auto dt = gamma.scalar_type();
  check(gamma, "gamma", dt, {B, D, D, QS, QS});
  check(alpha, "alpha", dt, {B, D + 1, QS});
  const int64_t m = zeta.has_value() ? zeta->size(-1) : 0;
  if (zeta.has_value()) check(*zeta, "zeta", dt, {B, D, D, QS, QS, m});
  const int64_t Bp = padded(B), sq = QS * QS;
  int64_t live = 0;
  AT_DISPATCH_FLOATING_TYPES(dt, "memrnn_ns_run_live", [&] {
    const scalar_t alive = scalar_t(kLogZero / 2);
    const scalar_t* G = gamma.data_ptr<scalar_t>();
    for (int64_t w = 0; w < gamma.numel(); ++w)
      if (G[w] > alive) live = std::max(live, D - (w / sq / D % D));  // D − a
    if (m > 0) {
      const scalar_t* Z = zeta->data_ptr<scalar_t>();
      for (int64_t w = 0; w < zeta->numel(); ++w)
        if (Z[w] > alive) live = std::max(live, D - (w / m / sq / D % D));
    }
  });
  const int64_t Do = std::max<int64_t>(1, std::min(D, live + steps)), J0 = D - std::min(D, live);
  const int64_t cols = D - J0 + steps, Rc = history ? cols : std::min(D, cols), Ra = history ? D + steps + 1 : D + 1;
  at::Tensor geo = at::tensor(std::vector<int64_t>{D, Do, J0, live, steps, std::max<int64_t>(Rc, 1), Ra}, at::kLong);
  at::Tensor store = at::full({Rc, Do, 1 + m, QS, QS, Bp}, kLogZero, gamma.options());
  at::Tensor alphas = at::full({Ra, QS, Bp}, kLogZero, gamma.options());
  AT_DISPATCH_FLOATING_TYPES(dt, "memrnn_ns_run_start", [&] {
    const Geo g = geo_of(store, geo, 1);
    const scalar_t* G = gamma.data_ptr<scalar_t>();
    const scalar_t* Z = m > 0 ? zeta->data_ptr<scalar_t>() : nullptr;
    const scalar_t* A = alpha.data_ptr<scalar_t>();
    scalar_t* st = store.data_ptr<scalar_t>();
    scalar_t* al = alphas.data_ptr<scalar_t>();
    for_window(g, nullptr, B, [&](int64_t w, int64_t o) { st[o] = snap(G[w]); },
               [&](int64_t w, int64_t o) { st[o] = snap(Z[w]); }, [&](int64_t w, int64_t o) { al[o] = A[w]; });
  });
  return {store, alphas, geo};
}

// The per-step arrays (R, O, colR, gp, popped, col, newA, z, eta) for n steps of a run.
std::vector<at::Tensor> ns_run_buffers(const at::Tensor& store, const at::Tensor& geo, int64_t Q, int64_t n) {
  const Geo g = geo_of(store, geo, Q);
  auto opt = store.options();
  const int64_t B = g.B, D = g.D, QS = g.QS, E = g.E(), C = g.C;
  return {at::empty({n, QS, QS, B}, opt),           at::empty({n, QS, Q, B}, opt),
          at::empty({n, D, C, QS, QS, B}, opt),     at::empty({n, E, QS, Q, B}, opt),
          at::empty({n, E, C, QS, Q, g.S, B}, opt), at::empty({n, D + 1, C, QS, QS, B}, opt),
          at::empty({n, QS, B}, opt),               at::empty({n, B}, opt),
          at::empty({n, C - 1, QS, B}, opt)};
}

template <typename T>
Saved<T> saved_at(at::TensorList sv, int64_t k) {
  auto p = [&](int i) { return sv[i].data_ptr<T>() + k * sv[i].stride(0); };
  return {p(0), p(1), p(2), p(3), p(4), p(5), p(6), p(7), p(8)};
}

// batch first [B, rest...] -> batch last, padded with zeros, into dst [rest..., Bp]
template <typename T>
void to_batch_last(const at::Tensor& x, T* dst, int64_t Bp) {
  const int64_t B = x.size(0), n = x.numel() / std::max<int64_t>(B, 1);
  const T* src = x.data_ptr<T>();
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t b = 0; b < B; ++b) dst[j * Bp + b] = src[b * n + j];
    for (int64_t b = B; b < Bp; ++b) dst[j * Bp + b] = T(0);
  }
}

template <typename T>
at::Tensor to_batch_first(const T* src, int64_t B, int64_t Bp, at::IntArrayRef rest, const at::TensorOptions& opt) {
  std::vector<int64_t> shape{B};
  shape.insert(shape.end(), rest.begin(), rest.end());
  at::Tensor out = at::empty(shape, opt);
  T* dst = out.data_ptr<T>();
  const int64_t n = out.numel() / std::max<int64_t>(B, 1);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t b = 0; b < B; ++b) dst[b * n + j] = src[j * Bp + b];
  return out;
}

// Step s of the run (push, repl [B, QS, QS], pop [B, QS, Q], the log pushed vectors [B, m] (m = 0
// for the plain stack), batch first), its arrays kept at index k of the buffers -> (log α after
// the step [B, QS], η after it, normalised [B, m, QS]).
std::vector<at::Tensor> ns_run_step(at::Tensor store, at::Tensor alphas, at::TensorList buffers, const at::Tensor& geo,
                                    int64_t k, int64_t s, const at::Tensor& push, const at::Tensor& repl,
                                    const at::Tensor& pop, const at::Tensor& vector) {
  const auto dt = store.scalar_type();
  const int64_t Q = pop.size(2), B = push.size(0), QS = store.size(3), m = store.size(2) - 1;
  check(push, "push", dt, {B, QS, QS});
  check(repl, "repl", dt, {B, QS, QS});
  check(pop, "pop", dt, {B, QS, Q});
  check(vector, "the pushed vector", dt, {B, m});
  at::Tensor top, eta;
  AT_DISPATCH_FLOATING_TYPES(dt, "memrnn_ns_run_step", [&] {
    const Geo g = geo_of(store, geo, Q);
    const int64_t J = g.D + s;
    TORCH_CHECK(s >= 0 && s < steps_of(geo), "memrnn nondeterministic stack: step ", s, " is beyond the run");
    const Saved<scalar_t> sv = saved_at<scalar_t>(buffers, k);
    std::vector<scalar_t> P(QS * QS * g.B), V(std::max<int64_t>(m, 1) * g.B), E(std::max<int64_t>(m, 1) * QS * g.B);
    to_batch_last(push, P.data(), g.B);
    to_batch_last(repl, sv.R, g.B);
    to_batch_last(pop, sv.O, g.B);
    if (m > 0) to_batch_last(vector, V.data(), g.B);
    const int64_t L = std::min(live_of(geo) + s, g.D);
    auto run = g.B == kLanes ? step_forward<scalar_t, kLanes> : step_forward<scalar_t, 0>;
    run(g, J, L, store.data_ptr<scalar_t>(), alphas.data_ptr<scalar_t>(), P.data(), V.data(), sv, E.data());
    top = to_batch_first(alphas.data_ptr<scalar_t>() + g.al(J + 1, 0), B, g.B, {QS}, store.options());
    eta = to_batch_first(E.data(), B, g.B, {m, QS}, store.options());
  });
  return {top, eta};
}

// The backward of ns_run_step: g_top [B, QS] and g_eta [B, m, QS] (the gradients of its outputs)
// are added to those of α and η after the step, the step's gradients are added to gstore and
// galphas -> (gP, gR, gO, gV) batch first.
std::vector<at::Tensor> ns_run_step_backward(const at::Tensor& store, const at::Tensor& alphas,
                                             at::TensorList buffers, const at::Tensor& geo, int64_t k, int64_t s,
                                             at::Tensor gstore, at::Tensor galphas, const at::Tensor& g_top,
                                             const at::Tensor& g_eta, int64_t Q) {
  const auto dt = store.scalar_type();
  const int64_t QS = store.size(3), B = g_top.size(0), m = store.size(2) - 1;
  check(g_top, "the gradient of alpha", dt, {B, QS});
  check(g_eta, "the gradient of eta", dt, {B, m, QS});
  TORCH_CHECK(has_history(geo), "memrnn nondeterministic stack: a run without history has no backward");
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(dt, "memrnn_ns_run_step_backward", [&] {
    const Geo g = geo_of(store, geo, Q);
    const Saved<scalar_t> sv = saved_at<scalar_t>(buffers, k);
    const int64_t J = g.D + s;
    scalar_t* ga = galphas.data_ptr<scalar_t>() + g.al(J + 1, 0);
    const scalar_t* gt = g_top.data_ptr<scalar_t>();
    for (int64_t u = 0; u < QS; ++u)
      for (int64_t b = 0; b < B; ++b) ga[u * g.B + b] += gt[b * QS + u];
    std::vector<scalar_t> gE(std::max<int64_t>(m, 1) * QS * g.B, scalar_t(0));
    if (m > 0) to_batch_last(g_eta, gE.data(), g.B);
    std::vector<scalar_t> gP(QS * QS * g.B), gR(QS * QS * g.B), gO(QS * Q * g.B), gV(std::max<int64_t>(m, 1) * g.B);
    const int64_t L = std::min(live_of(geo) + s, g.D);
    auto back = g.B == kLanes ? step_backward<scalar_t, kLanes> : step_backward<scalar_t, 0>;
    back(g, J, L, store.data_ptr<scalar_t>(), alphas.data_ptr<scalar_t>(), sv, gstore.data_ptr<scalar_t>(),
         galphas.data_ptr<scalar_t>(), gE.data(), gP.data(), gR.data(), gO.data(), gV.data());
    auto opt = store.options();
    out = {to_batch_first(gP.data(), B, g.B, {QS, QS}, opt), to_batch_first(gR.data(), B, g.B, {QS, QS}, opt),
           to_batch_first(gO.data(), B, g.B, {QS, Q}, opt), to_batch_first(gV.data(), B, g.B, {m}, opt)};
  });
  return out;
}

// The windows of the rows whose length is `only` (every row when −1) copied from the store into
// gamma [B, D, D, QS, QS], alpha [B, D+1, QS] and zeta [B, D, D, QS, QS, m] (batch first,
// contiguous); the entries the store does not hold are left as they are.  The one body of
// ns_run_window and ns_run_window_into.
void copy_windows(const at::Tensor& store, const at::Tensor& alphas, const at::Tensor& geo, const at::Tensor& lengths,
                  int64_t only, at::Tensor& gamma, at::Tensor& alpha, at::Tensor& zeta) {
  AT_DISPATCH_FLOATING_TYPES(store.scalar_type(), "memrnn_ns_copy_windows", [&] {
    const Geo g = geo_of(store, geo, 1);
    const scalar_t* st = store.data_ptr<scalar_t>();
    const scalar_t* al = alphas.data_ptr<scalar_t>();
    scalar_t* G = gamma.data_ptr<scalar_t>();
    scalar_t* Z = zeta.data_ptr<scalar_t>();
    scalar_t* A = alpha.data_ptr<scalar_t>();
    for_window(g, lengths.data_ptr<int64_t>(), gamma.size(0), [&](int64_t w, int64_t o) { G[w] = st[o]; },
               [&](int64_t w, int64_t o) { Z[w] = st[o]; }, [&](int64_t w, int64_t o) { A[w] = al[o]; }, only);
  });
}

// Each row's window after lengths[b] steps of the run -> (gamma [B, D, D, QS, QS], alpha [B, D+1,
// QS], zeta [B, D, D, QS, QS, m]), batch first; `fill` where the store holds nothing (log 0 for
// weights, 0 for gradients).
std::vector<at::Tensor> ns_run_window(const at::Tensor& store, const at::Tensor& alphas, const at::Tensor& geo,
                                      const at::Tensor& lengths, int64_t B, double fill) {
  const int64_t QS = store.size(3), m = store.size(2) - 1;
  TORCH_CHECK(lengths.scalar_type() == at::kLong && lengths.is_contiguous() && lengths.numel() == B,
              "memrnn nondeterministic stack: lengths must be B int64");
  TORCH_CHECK(has_history(geo),
              "memrnn nondeterministic stack: a run without history gives each row's window at its length "
              "(ns_run_window_into)");
  const int64_t D = geo.data_ptr<int64_t>()[0];
  at::Tensor gamma = at::full({B, D, D, QS, QS}, fill, store.options());
  at::Tensor zeta = at::full({B, D, D, QS, QS, m}, fill, store.options());
  at::Tensor alpha = at::empty({B, D + 1, QS}, store.options());
  copy_windows(store, alphas, geo, lengths, -1, gamma, alpha, zeta);
  return {gamma, alpha, zeta};
}

// ns_run_window for the rows whose length is `taken`, the steps the run has taken (the rows' windows
// are then in the store, with history or without), written into gamma [B, D, D, QS, QS], alpha
// [B, D+1, QS] and zeta [B, D, D, QS, QS, m] (batch first, contiguous; made log 0 by the caller,
// the entries the store does not hold are left as they are); the other rows are left as they are.
void ns_run_window_into(const at::Tensor& store, const at::Tensor& alphas, const at::Tensor& geo,
                        const at::Tensor& lengths, int64_t taken, at::Tensor gamma, at::Tensor alpha,
                        at::Tensor zeta) {
  const int64_t QS = store.size(3), m = store.size(2) - 1, B = gamma.size(0);
  const auto dt = store.scalar_type();
  TORCH_CHECK(lengths.scalar_type() == at::kLong && lengths.is_contiguous() && lengths.numel() == B,
              "memrnn nondeterministic stack: lengths must be B int64");
  TORCH_CHECK(taken >= 0 && taken <= steps_of(geo), "memrnn nondeterministic stack: ", taken,
              " steps taken by a run of ", steps_of(geo));
  const int64_t D = geo.data_ptr<int64_t>()[0];
  check(gamma, "gamma", dt, {B, D, D, QS, QS});
  check(alpha, "alpha", dt, {B, D + 1, QS});
  check(zeta, "zeta", dt, {B, D, D, QS, QS, m});
  copy_windows(store, alphas, geo, lengths, taken, gamma, alpha, zeta);
}

// The backward of ns_run_window: the windows' gradients added to gstore and galphas.
void ns_run_window_backward(at::Tensor gstore, at::Tensor galphas, const at::Tensor& geo, const at::Tensor& lengths,
                            const at::Tensor& g_gamma, const at::Tensor& g_alpha, const at::Tensor& g_zeta) {
  const int64_t B = g_gamma.size(0);
  TORCH_CHECK(g_gamma.is_contiguous() && g_alpha.is_contiguous() && g_zeta.is_contiguous(),
              "memrnn nondeterministic stack: gradients must be contiguous");
  AT_DISPATCH_FLOATING_TYPES(gstore.scalar_type(), "memrnn_ns_run_window_backward", [&] {
    const Geo g = geo_of(gstore, geo, 1);
    scalar_t* st = gstore.data_ptr<scalar_t>();
    scalar_t* al = galphas.data_ptr<scalar_t>();
    const scalar_t* G = g_gamma.data_ptr<scalar_t>();
    const scalar_t* Z = g_zeta.data_ptr<scalar_t>();
    const scalar_t* A = g_alpha.data_ptr<scalar_t>();
    for_window(g, lengths.data_ptr<int64_t>(), B, [&](int64_t w, int64_t o) { st[o] += G[w]; },
               [&](int64_t w, int64_t o) { st[o] += Z[w]; }, [&](int64_t w, int64_t o) { al[o] += A[w]; });
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(memrnn_native, lib) {
  lib.def(
      "ns_run_start(Tensor gamma, Tensor alpha, Tensor? zeta, int steps, bool history=True) -> (Tensor, Tensor, "
      "Tensor)",
      &ns_run_start);
  lib.def("ns_run_buffers(Tensor store, Tensor geo, int states, int n) -> Tensor[]", &ns_run_buffers);
  lib.def(
      "ns_run_step(Tensor(a!) store, Tensor(b!) alphas, Tensor(c!)[] buffers, Tensor geo, int k, int s, "
      "Tensor push, Tensor repl, Tensor pop, Tensor vector) -> Tensor[]",
      &ns_run_step);
  lib.def(
      "ns_run_step_backward(Tensor store, Tensor alphas, Tensor[] buffers, Tensor geo, int k, int s, "
      "Tensor(a!) gstore, Tensor(b!) galphas, Tensor g_top, Tensor g_eta, int states) -> Tensor[]",
      &ns_run_step_backward);
  lib.def("ns_run_window(Tensor store, Tensor alphas, Tensor geo, Tensor lengths, int batch, float fill) -> Tensor[]",
          &ns_run_window);
  lib.def(
      "ns_run_window_into(Tensor store, Tensor alphas, Tensor geo, Tensor lengths, int taken, Tensor(a!) gamma, "
      "Tensor(b!) alpha, Tensor(c!) zeta) -> ()",
      &ns_run_window_into);
  lib.def(
      "ns_run_window_backward(Tensor(a!) gstore, Tensor(b!) galphas, Tensor geo, Tensor lengths, Tensor g_gamma, "
      "Tensor g_alpha, Tensor g_zeta) -> ()",
      &ns_run_window_backward);
}
