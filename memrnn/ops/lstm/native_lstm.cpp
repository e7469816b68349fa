// The LSTM recurrence's time loops in C++ (memrnn.ops.lstm.cpu.LSTMSequence, single and with a
// member dimension): the per-step loops of its forward and of its backward's blocks, making the
// same ATen calls on the same views as the Python loops they replace, so that every result is
// the Python loop's bit for bit (tests/ops/test_lstm.py checks it).  What is not per step (the
// input projection, each block's local derivatives, the weight and input gradients) stays in
// Python: a few large calls per sequence or block.  Per step the Python loop spends most of its
// time dispatching ~8 small calls from the interpreter; from here each call costs the
// dispatcher's overhead only, below the autograd layer (nothing in these loops is recorded).
//
// Layout (cpu.py's LSTMSequence docstring): acts [T, (M,) 4N, B] the gates in the order o, i, f,
// g (activated in place), hs, cs [T+1, (M,) N, B], xs [T, (M,) N, B] (X(c_t): tanh on the first
// tanh_units units, the cell itself after), all contiguous; w_rec [(M,) 4N, N].
#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <optional>
#include <vector>

namespace {

using at::Tensor;

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
}
