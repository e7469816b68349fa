// The stack RNN's time loops in C++ (memrnn.ops.stack_rnn.native): the same recurrence, buffers
// and hand-written backpropagation through time as memrnn/ops/stack_rnn/cpu.py, whose Python
// loops they replace on CPU tensors.  Python allocates every buffer; these two functions run the
// steps.  Per step the forward makes one addmm for the controller, one vectorised sigmoid over
// its gates (tanh as 2σ(2x) − 1), one more for the LSTM's tanh(c), and one mm for the head; the
// backward one mm for the head and one for the controller.  Everything else (the LSTM cell, the
// actions' softmax or sigmoid, the memory and its backward) is a plain loop over [rows, batch]
// buffers, batch innermost.  The products off the recurrence (the input projection, a block of
// steps ahead; the weight and input gradients, a block behind) run on a second thread when torch
// has two or more (Pipeline); the loop itself runs on one, since products of this size take as
// long on two.  Up to kStepInputs inputs (one-hot symbols) are projected inside each step instead
// (forward_impl's in_step): a product of that rank over a block costs more in passes over memory
// than its multiply-adds.
//
// Layout (cpu.py's module docstring): z [T+1, N+R, B] holds [h_t ; memory rows] (the rows the
// controller reads come first: the superposition stack's top cell, the tape's head cell, the
// stratification reading), acts [T, G, B] the gates (activated in place), heads [T, K, B] the
// head (actions' pre-activations, then the activated value), A [T, k, B] the actions in the
// kernel's order.  The blocks' products (the input projection, the weight gradients) read and
// write contiguous [rows, n·B] buffers that the loop fills or empties a step at a time
// (BlockBuffers): the backward's ∂L/∂acts needs only one step's buffer, ga [1, G, B].
//
// The value's MLP (the Tape-RNN's write head, Deletang et al. 2023; `mlp_w`, `mlp_b`, empty
// without one): the head `w_head` then holds the k action rows only, and the value rows of heads
// are W_L relu(… relu(W_1 h + b_1) …) + b_L, the hidden layers' activations kept in `mlp_h`
// ([T, H_l, B] each) and their pre-activations' gradients written into `mlp_g` by the backward
// (the weights' gradients are products over all steps, made by the caller).
//
// Memories (the memory code, from their specs: memory_kinds.h), each in its own folder's native.h
// with its layout, forward step and backward step (what they share: native_common.h):
//   0 superposition (Joulin & Mikolov 2015): memrnn/ops/superposition/native.h;
//   1 stratification stack, 2 neural queue (Grefenstette et al. 2015): ops/stratification/native.h;
//   3 tape, 4 the Tape-RNN's jump tape (Deletang et al. 2023): ops/tape/native.h;
//   5 Grefenstette et al.'s DeQue: ops/deque/native.h.
// The loops call them through one switch on MemoryKind (with_memory below).
//
// Recomputed memory (`recompute` K > 0; cpu.py's StackRNNSequence, for a memory whose state
// lives in z only and that can rerun its steps from the stored actions: the superposition stack):
// the training forward keeps z as a ring of K + 1 slots (as without history) and stores, instead
// of every step's window, the controller's rows [h_t ; r_t] of every step (`saved[0]`, zh [T+1,
// N+mr, B]) and the memory's state every K steps (`saved[1]`, ck [ceil(T/K), Z, B]: each
// checkpoint only the rows that can be non-zero or read, the trimmed window's); the other per-step
// buffers (acts, heads, A, cs, xs, the MLP's) keep every step.  The backward, entering each block
// of K steps from its end, restores the block's checkpoint into slot 0 and reruns the memory's
// forward steps from the stored actions and values into the ring, then goes back through the block
// as with a full history.  The memory's steps are the forward's, op for op, so every gradient
// equals the full history's bit for bit; the history is O(T·(N+m) + (T/K + K)·window) instead of
// O(T·window), and the forward stops paying for first touching T windows of fresh memory.  With
// the final state wanted, `saved[2]` ([Z, B], its memory rows holding the initial state) takes
// each row's memory rows at its length (`lens`), as the ring's `keep` does.
//
// Members (`members` M > 0; 0 for one run): M runs as one model (cpu.py's StackRNNSequence with
// members).  The memory has no weights, so the loops run it once on the members' rows as one
// batch: the B columns are M blocks of B / M, member-major (x, the outputs' gradients and gx as
// [M·(B / M), T, n] rows in that order).  Every weight carries the member dimension first ([M, G,
// ·], [M, K, N], biases [M, ·], the value MLP's [M, H_l, ·]) and every product runs per member on
// its block of columns (BLAS reads it with its leading dimension, no copy), through Members below;
// with M = 0 they are the one run's products as they were.  The per-step products call torch's
// BLAS directly, as at::addmm_ would for the same operands (gemm_as_addmm: the same bits, without
// ~10-20 µs of dispatch and views per member and step).
// Every subgradient is autograd's (clamp_min passes at 0, min splits a tie in halves), so the
// gradients equal the reference loop's to rounding.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <torch/library.h>

#include "memory_kinds.h"
#include "deque/native.h"
#include "stack_rnn/native_common.h"
#include "stratification/native.h"
#include "superposition/native.h"
#include "tape/native.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <type_traits>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <dlfcn.h>
#define MEMRNN_TORCH_BLAS 1
// torch's own BLAS by name (weak: null where no library exports it); used only when it is the one
// in libtorch_cpu (torch_blas below), the routine at::addmm_ and at::mm_out end in for float32 and
// float64 on CPU
extern "C" {
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*, const int*,
            const float*, const int*, const float*, float*, const int*) __attribute__((weak));
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*,
            const int*, const double*, const int*, const double*, double*, const int*) __attribute__((weak));
}
#endif

namespace {

// ---- The per-step products, through torch's BLAS directly ----------------------------------------
// A member's product at one step is small (e.g. [80, 40] · [40, 10]: ~1 µs of arithmetic), and
// at::addmm_ with the views that pick its weights and columns costs ~10-20 µs more (dispatch,
// narrow, select): with 20 members two thirds of a DuSell superposition step.  gemm_as_addmm makes
// the BLAS call that at::addmm_ / at::mm_out make for the same operands (ATen's addmm_impl_cpu_:
// the choice of transposes and leading dimensions, the result taken as C = outᵀ when row-major),
// so the bits are the same; where that function would copy an operand first (a layout BLAS cannot
// read, a dimension of size 0 or 1) or torch's BLAS is not reachable by name, the caller's ATen
// call runs instead.

// A 2-D strided view of a buffer: element (r, c) at p[r·s0 + c·s1].
template <typename T>
struct Mat {
  T* p;
  int64_t rows, cols, s0, s1;
  Mat t() const { return {p, cols, rows, s1, s0}; }
};

template <typename T>
Mat<T> mat_of(const at::Tensor& t) {
  return {t.data_ptr<T>(), t.size(0), t.size(1), t.stride(0), t.stride(1)};
}

// Whether sgemm_ and dgemm_ are torch's own (exported by libtorch_cpu, as on x86-64 Linux wheels,
// whose BLAS is MKL): another library's would compute the same products in other bits.
bool torch_blas() {
#ifdef MEMRNN_TORCH_BLAS
  static const bool ok = [] {
    if (sgemm_ == nullptr || dgemm_ == nullptr) return false;
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&sgemm_), &info) == 0 || info.dli_fname == nullptr) return false;
    return std::strstr(info.dli_fname, "libtorch_cpu") != nullptr;
  }();
  return ok;
#else
  return false;
#endif
}

// out = beta·out + m1 · m2 (beta 0 or 1; out [P, Q], m1 [P, K], m2 [K, Q]) as at::addmm_ (beta 1)
// or at::mm_out (beta 0) computes it; false (nothing done) where that would not be one BLAS call
// on the operands as they lie.
template <typename T>
bool gemm_as_addmm(Mat<T> out, Mat<T> m1, Mat<T> m2, T beta) {
#ifdef MEMRNN_TORCH_BLAS
  if (!torch_blas()) return false;
  const int64_t P = out.rows, Q = out.cols, K = m1.cols;
  if (P < 2 || Q < 2 || K < 2 || m1.rows != P || m2.rows != K || m2.cols != Q) return false;
  // the result: column-major (transpose_c false) or row-major (true: C = outᵀ = m2ᵀ · m1ᵀ)
  bool tc;
  if (out.s0 == 1 && out.s1 >= P) {
    tc = false;
  } else if (out.s1 == 1 && out.s0 >= Q) {
    tc = true;
    std::swap(m1, m2);
  } else {
    return false;
  }
  const int64_t m = tc ? Q : P, n = tc ? P : Q, k = K;
  // a (from m1) and b (from m2), with the strides addmm_impl_cpu_ reads (m1, m2 as after the swap):
  // as they lie when the inner stride is 1 and the outer one covers `plain`, transposed when the
  // other way round covers `trans`; neither: ATen would copy the operand first
  const int64_t a_s[2] = {m1.s0, m1.s1}, b_s[2] = {m2.s0, m2.s1};
  const auto reads = [tc](const int64_t* st, int64_t plain, int64_t trans, bool& transposed) {
    if (st[tc ? 1 : 0] == 1 && st[tc ? 0 : 1] >= std::max<int64_t>(1, plain)) {
      transposed = false;
    } else if (st[tc ? 0 : 1] == 1 && st[tc ? 1 : 0] >= std::max<int64_t>(1, trans)) {
      transposed = true;
    } else {
      return false;
    }
    return true;
  };
  bool ta = false, tb = false;
  if (!reads(a_s, m, k, ta) || !reads(b_s, k, n, tb)) return false;
  const int64_t lda = a_s[(ta == tc) ? 1 : 0], ldb = b_s[(tb == tc) ? 1 : 0], ldc = tc ? out.s0 : out.s1;
  for (const int64_t v : {m, n, k, lda, ldb, ldc})
    if (v > INT_MAX) return false;
  // cpublas::gemm's own checks before its BLAS call (use_blas_gemm): every leading dimension
  // covers its operand
  if (lda < std::max<int64_t>(1, ta ? k : m) || ldb < std::max<int64_t>(1, tb ? n : k) ||
      ldc < std::max<int64_t>(1, m))
    return false;
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const int ldai = static_cast<int>(lda), ldbi = static_cast<int>(ldb), ldci = static_cast<int>(ldc);
  const char ca = ta ? 't' : 'n', cb = tb ? 't' : 'n';
  const T alpha = T(1);
  if constexpr (std::is_same_v<T, float>) {
    sgemm_(&ca, &cb, &mi, &ni, &ki, &alpha, m1.p, &ldai, m2.p, &ldbi, &beta, out.p, &ldci);
  } else {
    dgemm_(&ca, &cb, &mi, &ni, &ki, &alpha, m1.p, &ldai, m2.p, &ldbi, &beta, out.p, &ldci);
  }
  return true;
#else
  (void)out, (void)m1, (void)m2, (void)beta;
  return false;
#endif
}

enum Controller : int64_t { kLSTM = 0, kElman = 1 };
enum Act : int64_t { kTanh = 0, kSigmoid = 1, kRelu = 2, kIdentity = 3 };
// MemoryKind: generated from the memories' specs (memrnn/ops/stack_rnn/specs.py), the codes
// Python passes

// The loops' products are too small to share between threads (a [4N, N+m] x [N+m, B] product
// takes as long on two threads as on one, plus the pool's wake-up): they run on one.
struct OneThread {
  int saved = at::get_num_threads();
  bool had_more() const { return saved > 1; }
  OneThread() {
    if (saved > 1) at::set_num_threads(1);
  }
  ~OneThread() {
    if (saved > 1) at::set_num_threads(saved);
  }
};

// Runs one task at a time on a second thread while the caller's loop goes on (or inline when the
// caller has one thread): the forward's input projection for the next block of steps, the
// backward's weight and input gradients of the block just finished.  `run` first waits for the
// task before (so tasks never overlap each other); `finish` waits for the last.
class Pipeline {
 public:
  explicit Pipeline(bool threaded) : threaded_(threaded) {}
  ~Pipeline() {
    if (pending_.valid()) pending_.wait();
  }
  void run(std::function<void()> task) {
    if (!threaded_) {
      task();
      return;
    }
    finish();
    // the task sees the caller's thread-local state (grad mode off inside autograd's Function,
    // dispatch keys, the profiler)
    pending_ = std::async(std::launch::async, [task = std::move(task), state = at::ThreadLocalState()] {
      at::ThreadLocalStateGuard guard(state);
      at::set_num_threads(1);  // this thread's OpenMP and MKL: one thread, beside the caller's
      task();
    });
  }
  void finish() {
    if (pending_.valid()) pending_.get();  // rethrows the task's error
  }

 private:
  bool threaded_;
  std::future<void> pending_;
};

// The pipelined tasks' blocks of steps: 8, 16, then 32 at a time.  The first block's projection
// runs before the loop can start and the backward's last task (the first block's gradients)
// after it ends, both with no loop beside them: small first blocks keep those waits short, and
// doubling lets the second thread keep ahead of the loop after them (BlockBuffers hold the
// largest, kRingBlock steps).
constexpr int64_t kRingBlock = 32;
constexpr int64_t kStepInputs = 16;  // inputs projected in the step (forward_impl's in_step)
std::vector<int64_t> block_starts(int64_t T) {
  std::vector<int64_t> starts;
  for (int64_t lo = 0, n = 8; lo < T; lo += n, n = std::min<int64_t>(2 * n, kRingBlock)) starts.push_back(lo);
  starts.push_back(T);
  return starts;
}

struct Dims {
  int64_t T, B, N, G, Z, mr, K, Ka, k, D, m;  // K: heads' rows; Ka: w_head's (K, or k with an MLP)
  int64_t Th;  // the steps the per-step buffers hold (T; 1 without history)
  int64_t M;  // members (0: one run)
};

// ---- Members' narrow products ------------------------------------------------------------------
// With members of at most kNarrow columns each (DuSell & Chiang's batch of 10), a member's product
// at one step is [G, K] · [K, B'] with B' ≤ 16: a few hundred nanoseconds of arithmetic, where
// BLAS's small-matrix path takes microseconds a call (MKL's sgemm_pst: ~12 ms of a 42 ms step of
// 20 DuSell superposition members, ~100 calls per time step).  These loops make them instead: a
// member's columns packed once into rows of kNarrow (zero-padded), four rows of the weight at a time
// against them in vector registers (GCC/Clang vector extensions).  Sums run over k ascending onto
// out (accumulate) or zero: other bits than BLAS's, within rounding (the members are held to
// their single runs to 1e-12 in float64 and 1e-5 in float32, tests/ops/test_stack_rnn.py).
constexpr int64_t kNarrow = 16;

template <typename T>
struct NarrowVec {
  typedef T type __attribute__((vector_size(kNarrow * sizeof(T))));
};

// n rounded up to a multiple of kNarrow (a row of whole vectors)
inline int64_t narrow_round(int64_t n) { return (n + kNarrow - 1) / kNarrow * kNarrow; }

// p rounded up to a multiple of kNarrow elements (the vector's size, for its aligned loads); p's
// buffer has kNarrow elements to spare
template <typename T>
T* aligned(T* p) {
  return p + (kNarrow - (reinterpret_cast<uintptr_t>(p) / sizeof(T)) % kNarrow) % kNarrow;
}

// out (+)= w · in for one member: out [P, C] and in [K, C] with unit column stride, C ≤ kNarrow;
// w [P, K] any strides; pack: scratch of K · kNarrow
template <typename T>
void narrow_gemm(Mat<T> out, Mat<T> w, Mat<T> in, bool accumulate, T* pack) {
  using V = typename NarrowVec<T>::type;
  const int64_t P = out.rows, C = out.cols, K = w.cols;
  for (int64_t k = 0; k < K; ++k) {
    T* row = pack + k * kNarrow;
    const T* src = in.p + k * in.s0;
    for (int64_t c = 0; c < C; ++c) row[c] = src[c];
    for (int64_t c = C; c < kNarrow; ++c) row[c] = T(0);
  }
  const V* xv = reinterpret_cast<const V*>(pack);
  auto load_out = [&](int64_t r) {
    V v = {};
    if (accumulate) {
      const T* o = out.p + r * out.s0;
      for (int64_t c = 0; c < C; ++c) v[c] = o[c];
    }
    return v;
  };
  auto store_out = [&](int64_t r, const V& v) {
    T* o = out.p + r * out.s0;
    for (int64_t c = 0; c < C; ++c) o[c] = v[c];
  };
  int64_t r = 0;
  for (; r + 4 <= P; r += 4) {
    V a0 = load_out(r), a1 = load_out(r + 1), a2 = load_out(r + 2), a3 = load_out(r + 3);
    const T* w0 = w.p + r * w.s0;
    const T* w1 = w0 + w.s0;
    const T* w2 = w1 + w.s0;
    const T* w3 = w2 + w.s0;
    for (int64_t k = 0; k < K; ++k) {
      const V x = xv[k];
      const int64_t o = k * w.s1;
      a0 += w0[o] * x;
      a1 += w1[o] * x;
      a2 += w2[o] * x;
      a3 += w3[o] * x;
    }
    store_out(r, a0);
    store_out(r + 1, a1);
    store_out(r + 2, a2);
    store_out(r + 3, a3);
  }
  for (; r < P; ++r) {
    V a = load_out(r);
    const T* wr = w.p + r * w.s0;
    for (int64_t k = 0; k < K; ++k) a += wr[k * w.s1] * xv[k];
    store_out(r, a);
  }
}

// g += a · bᵀ for one member: a [P, C], b [Q, C] (unit column stride, C ≤ kNarrow), g [P, Q]
// contiguous rows; the sum over the C columns, c ascending from zero in fused multiply-adds, added
// onto g.  bᵀ is packed into pack ([C, Qp], Qp = Q rounded up to kNarrow, zero-padded) so that
// each row of g is a few vectors of independent sums (a scalar sum per element is a chain of C
// dependent multiply-adds: ~5% of 20 DuSell & Chiang members' step)
template <typename T>
void narrow_gemm_t(Mat<T> g, Mat<T> a, Mat<T> b, T* pack) {
  using V = typename NarrowVec<T>::type;
  const int64_t P = a.rows, Q = b.rows, C = a.cols, Qp = narrow_round(Q);
  for (int64_t c = 0; c < C; ++c) {
    T* row = pack + c * Qp;
    for (int64_t q = 0; q < Q; ++q) row[q] = b.p[q * b.s0 + c * b.s1];
    for (int64_t q = Q; q < Qp; ++q) row[q] = T(0);
  }
  const V* bv = reinterpret_cast<const V*>(pack);
  const int64_t nv = Qp / kNarrow;  // vectors a row of bᵀ
  for (int64_t r = 0; r < P; ++r) {
    const T* ar = a.p + r * a.s0;
    T* gr = g.p + r * g.s0;
    for (int64_t j = 0; j < nv; ++j) {
      V sum = {};
      for (int64_t c = 0; c < C; ++c) sum += ar[c * a.s1] * bv[c * nv + j];
      const int64_t q0 = j * kNarrow, n = std::min(kNarrow, Q - q0);
      for (int64_t q = 0; q < n; ++q) gr[(q0 + q) * g.s1] += sum[q];
    }
  }
}

// The members' products (the header's "Members"): member i's weights `w(t, i)` (t itself for one
// run) and its block of the B columns `cols(t, i)` (t itself for one run), for i < count().
struct Members {
  int64_t M, Bm;  // members (0: one run) and each one's columns
  Members(int64_t members, int64_t B) : M(members), Bm(members ? B / members : B) {}
  int64_t count() const { return M ? M : 1; }
  at::Tensor w(const at::Tensor& t, int64_t i) const { return M ? t.select(0, i) : t; }
  at::Tensor cols(const at::Tensor& t, int64_t i) const { return M ? t.narrow(-1, i * Bm, Bm) : t; }
  // members of at most kNarrow columns each: their per-step products run in narrow_gemm's loops
  bool narrow_members() const { return M > 1 && Bm <= kNarrow; }
  // each member's weights, made once per call (undefined stays undefined)
  std::vector<at::Tensor> split(const at::Tensor& t) const {
    std::vector<at::Tensor> out;
    for (int64_t i = 0; i < count(); ++i) out.push_back(t.defined() ? w(t, i) : t);
    return out;
  }
  // out (+)= w[i] @ in, member by member on their columns (through torch's BLAS directly where
  // gemm_as_addmm applies: no view made per member and step)
  void addmm_(const at::Tensor& out, const std::vector<at::Tensor>& w_, const at::Tensor& in) const {
    products(out, w_, in, true);
  }
  void mm_out(const at::Tensor& out, const std::vector<at::Tensor>& w_, const at::Tensor& in) const {
    products(out, w_, in, false);
  }
  // the weight gradients' products g[i] += cols(a, i) · cols(b, i)ᵀ
  void addmm_t_(const std::vector<at::Tensor>& g, const at::Tensor& a, const at::Tensor& b) const {
    if (narrow(a, b) && g[0].dim() == 2) {
      AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "memrnn_narrow_gemm_t", [&] {
        std::vector<scalar_t> pack(Bm * narrow_round(b.size(0)) + kNarrow);
        scalar_t* pk = aligned(pack.data());
        for (int64_t i = 0; i < count(); ++i)
          narrow_gemm_t<scalar_t>(mat_of<scalar_t>(g[i]), col_block<scalar_t>(a, i), col_block<scalar_t>(b, i), pk);
      });
      return;
    }
    bool done = false;
    AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "memrnn_gemm", [&] {
      done = true;
      for (int64_t i = 0; i < count() && done; ++i) {
        done = gemm_as_addmm<scalar_t>(mat_of<scalar_t>(g[i]), col_block<scalar_t>(a, i),
                                       col_block<scalar_t>(b, i).t(), scalar_t(1));
        if (!done && i > 0) TORCH_CHECK(false, "memrnn native stack RNN: the members' products changed path");
      }
    });
    if (done) return;
    for (int64_t i = 0; i < count(); ++i) g[i].addmm_(cols(a, i), cols(b, i).t());
  }

 private:
  // the members' narrow products (narrow_gemm) apply: members, each of at most kNarrow columns,
  // the operands' columns at unit stride
  bool narrow(const at::Tensor& out, const at::Tensor& in) const {
    return narrow_members() && out.dim() == 2 && in.dim() == 2 && out.stride(1) == 1 && in.stride(1) == 1;
  }
  // member i's columns of a 2-D tensor, as a strided view of its buffer
  template <typename T>
  Mat<T> col_block(const at::Tensor& t, int64_t i) const {
    Mat<T> v = mat_of<T>(t);
    v.p += i * (M ? Bm : 0) * v.s1;
    v.cols = M ? Bm : v.cols;
    return v;
  }
  void products(const at::Tensor& out, const std::vector<at::Tensor>& w_, const at::Tensor& in,
                bool accumulate) const {
    if (narrow(out, in)) {
      AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "memrnn_narrow_gemm", [&] {
        std::vector<scalar_t> pack(in.size(0) * kNarrow + kNarrow);
        scalar_t* pk = aligned(pack.data());
        for (int64_t i = 0; i < count(); ++i)
          narrow_gemm<scalar_t>(col_block<scalar_t>(out, i), mat_of<scalar_t>(w_[i]), col_block<scalar_t>(in, i),
                                accumulate, pk);
      });
      return;
    }
    bool done = false;
    AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "memrnn_gemm", [&] {
      done = true;
      for (int64_t i = 0; i < count() && done; ++i) {
        done = gemm_as_addmm<scalar_t>(col_block<scalar_t>(out, i), mat_of<scalar_t>(w_[i]),
                                       col_block<scalar_t>(in, i), scalar_t(accumulate ? 1 : 0));
        // the members' blocks share every shape and stride: a path is all members' or none's
        if (!done && i > 0) TORCH_CHECK(false, "memrnn native stack RNN: the members' products changed path");
      }
    });
    if (done) return;
    for (int64_t i = 0; i < count(); ++i) {
      at::Tensor o = cols(out, i);
      if (accumulate) {
        o.addmm_(w_[i], cols(in, i));
      } else {
        at::mm_out(o, w_[i], cols(in, i));
      }
    }
  }
};

// dst[0..n) = src[0..n) for a member's row of a step (n = B', 10 for DuSell & Chiang's members),
// inline: std::copy of so few elements is a call to memmove per row (~2,400 calls of 40 bytes a
// step for 20 such members, several % of their step).  Below 16 elements, two copies of a fixed
// size that overlap (which the compiler makes a vector load and store each)
template <typename T>
inline void copy_row(const T* src, int64_t n, T* dst) {
  auto two = [&](auto width) {
    constexpr int64_t w = decltype(width)::value;
    std::memcpy(dst, src, w * sizeof(T));
    std::memcpy(dst + n - w, src + n - w, w * sizeof(T));
  };
  if (n >= 16) {
    std::copy(src, src + n, dst);
  } else if (n >= 8) {
    two(std::integral_constant<int64_t, 8>{});
  } else if (n >= 4) {
    two(std::integral_constant<int64_t, 4>{});
  } else if (n >= 2) {
    two(std::integral_constant<int64_t, 2>{});
  } else if (n == 1) {
    dst[0] = src[0];
  }
}

// Two buffers of a block of steps' rows as the block's products read or write them: member i's
// [R, n·B'] ((t, b) columns, B' its columns) at its own 64-byte aligned offset, for n up to
// kRingBlock.  The forward's input projection writes a block's gates there and the loop copies
// each step's columns out into acts[t] as it reaches the step (unload); the backward's loop copies
// each step's ∂L/∂acts and [h ; r] in (load) while they are in cache, for the block's weight
// gradients.  Either way the products see the contiguous operands they had when each block was
// copied whole, so the bits are the same; the copies just stop reading a whole block back from
// memory.  Buffer b % 2 is the loop's block, the other the one whose products run beside it.
struct BlockBuffers {
  const Members& mb;
  int64_t R, stride;  // rows; a member's share, rounded up to 16 elements
  at::Tensor buf;     // [2, members · stride]
  BlockBuffers(const Members& members, int64_t rows, const at::TensorOptions& options)
      : mb(members), R(rows), stride((rows * kRingBlock * members.Bm + 15) / 16 * 16),
        buf(at::empty({2, members.count() * stride}, options)) {}
  // member i's [R, n·B'] of buffer b
  at::Tensor block(int64_t b, int64_t i, int64_t n) const {
    return buf.select(0, b).narrow(0, i * stride, R * n * mb.Bm).view({R, n * mb.Bm});
  }
  // step j (of n) of buffer b <-> a step's [R, B] rows at `step` (all members' columns)
  template <typename T>
  void unload(T* step, int64_t b, int64_t j, int64_t n) const {
    rows<T>(b, j, n, [&](T* blk, int64_t off) { copy_row(blk, mb.Bm, step + off); });
  }
  template <typename T>
  void load(const T* step, int64_t b, int64_t j, int64_t n) const {
    rows<T>(b, j, n, [&](T* blk, int64_t off) { copy_row(step + off, mb.Bm, blk); });
  }

 private:
  // f(member i's row r of step j in buffer b, that row's offset in the step) for every i and r
  template <typename T, typename F>
  void rows(int64_t b, int64_t j, int64_t n, F&& f) const {
    const int64_t Bm = mb.Bm, B = Bm * mb.count();
    T* base = buf.data_ptr<T>() + b * buf.size(1);
    for (int64_t i = 0; i < mb.count(); ++i)
      for (int64_t r = 0; r < R; ++r) f(base + i * stride + r * n * Bm + j * Bm, r * B + i * Bm);
  }
};

Dims dims_of(const at::Tensor& acts, const at::Tensor& z, const at::Tensor& w_z,
             const at::Tensor& w_head, const at::Tensor& heads, const at::Tensor& A, int64_t D,
             int64_t m, int64_t members) {
  Dims d{};
  d.T = acts.size(0);
  d.Th = d.T;
  d.G = acts.size(1);
  d.B = acts.size(2);
  d.Z = z.size(1);
  d.N = w_head.size(-1);
  d.mr = w_z.size(-1) - d.N;
  d.K = heads.size(1);
  d.Ka = w_head.size(-2);
  d.k = A.size(1);
  d.D = D;
  d.m = m;
  d.M = members;
  TORCH_CHECK(members >= 0 && (members == 0 || d.B % members == 0), "memrnn native stack RNN: ",
              d.B, " columns are not ", members, " members' blocks");
  TORCH_CHECK(w_z.dim() == (members ? 3 : 2) && w_head.dim() == w_z.dim() && (!members || (w_z.size(0) == members && w_head.size(0) == members)),
              "memrnn native stack RNN: with ", members, " members the weights need ", members ? "3" : "2",
              " dimensions (the members first)");
  return d;
}

void check_contiguous(const at::Tensor& t, const char* name) {
  TORCH_CHECK(!t.defined() || t.is_contiguous(), "memrnn native stack RNN: ", name,
              " must be contiguous");
}

// The memory with code `memory` (memory_kinds.h), handed to f as a value of its type: the one
// switch on MemoryKind, through which the loops reach each memory's traits and steps.
template <typename F>
decltype(auto) with_memory(int64_t memory, F&& f) {
  switch (static_cast<MemoryKind>(memory)) {
    case kSuperposition: return f(Superposition{});
    case kStratification: return f(Stratification{});
    case kQueue: return f(Queue{});
    case kTape: return f(Tape{});
    case kTapeJump: return f(TapeJump{});
    case kDeque: return f(Deque{});
  }
  TORCH_CHECK(false, "memrnn native stack RNN: unknown memory code ", memory);
}

MemoryTraits traits_of(int64_t memory) {
  return with_memory(memory, [](auto mem) { return decltype(mem)::kTraits; });
}

// An activation in place on `t`, whose `n` elements start at `p` (contiguous); tanh as
// 2σ(2x) − 1 (ATen's sigmoid is several times faster than its tanh on small blocks; the two
// agree to rounding).
template <typename T>
void activate_(const at::Tensor& t, T* p, int64_t n, int64_t act) {
  if (act == kTanh) {
    MEMRNN_SIMD
    for (int64_t j = 0; j < n; ++j) p[j] *= T(2);
    t.sigmoid_();
    MEMRNN_SIMD
    for (int64_t j = 0; j < n; ++j) p[j] = T(2) * p[j] - T(1);
  } else if (act == kSigmoid) {
    t.sigmoid_();
  } else if (act == kRelu) {  // as clamp_min_(0) (NaN and −0 pass), without a dispatch a step
    MEMRNN_SIMD
    for (int64_t j = 0; j < n; ++j) p[j] = p[j] < T(0) ? T(0) : p[j];
  }
}

// The value MLP's tensors: L linear layers (weights [H_l, H_{l−1}] from H_0 = N to H_L = K − k,
// biases [H_l] where given) and L − 1 buffers [T, H_l, B] for the hidden layers; without an MLP
// (L = 0) the head holds every row of heads.
void check_mlp(const Dims& d, const std::vector<at::Tensor>& w, const std::vector<at::Tensor>* b,
               const std::vector<at::Tensor>& bufs, const char* bufs_name) {
  const auto L = static_cast<int64_t>(w.size());
  const int64_t want = L == 0 ? d.K : d.k;
  TORCH_CHECK(d.Ka == want, "memrnn native stack RNN: w_head has ", d.Ka, " rows, expected ", want,
              L == 0 ? " (the actions, then the value)" : " (the actions; the value MLP gives the value)");
  TORCH_CHECK(static_cast<int64_t>(bufs.size()) == std::max<int64_t>(L - 1, 0),
              "memrnn native stack RNN: ", bufs_name, " needs one buffer per hidden layer of the value MLP");
  TORCH_CHECK(b == nullptr || static_cast<int64_t>(b->size()) == L,
              "memrnn native stack RNN: the value MLP needs one bias per layer");
  int64_t in = d.N;
  for (int64_t l = 0; l < L; ++l) {
    const int64_t out = l + 1 < L ? w[l].size(-2) : d.K - d.k;
    TORCH_CHECK(w[l].dim() == (d.M ? 3 : 2) && (!d.M || w[l].size(0) == d.M) && w[l].size(-2) == out &&
                    w[l].size(-1) == in,
                "memrnn native stack RNN: the value MLP's layer ", l, " must have a [", out, ", ", in,
                "] weight");
    if (b != nullptr) {
      TORCH_CHECK((*b)[l].numel() == out * std::max<int64_t>(d.M, 1) && (*b)[l].is_contiguous(),
                  "memrnn native stack RNN: the value MLP's layer ", l, " must have a contiguous [", out,
                  "] bias");
    }
    if (l + 1 < L) {
      const at::Tensor& buf = bufs[l];
      TORCH_CHECK(buf.dim() == 3 && buf.size(0) == d.Th && buf.size(1) == out && buf.size(2) == d.B &&
                      buf.is_contiguous(),
                  "memrnn native stack RNN: ", bufs_name, "[", l, "] must be a contiguous [", d.Th, ", ",
                  out, ", ", d.B, "] buffer");
    }
    in = out;
  }
}

// The value MLP at step s: from h [N, B] through relu(W_l · + b_l) (activations kept in hid[l][s])
// into the value rows `out` [K − k, B] (pre-activation: the value activation follows).
template <typename T>
void mlp_forward(const std::vector<std::vector<at::Tensor>>& w, const std::vector<at::Tensor>& b,
                 const std::vector<at::Tensor>& hid, int64_t s, const at::Tensor& h, const at::Tensor& out,
                 int64_t B, const Members& mb) {
  const size_t L = w.size();
  at::Tensor in = h;
  for (size_t l = 0; l < L; ++l) {
    const bool last = l + 1 == L;
    at::Tensor o = last ? out : hid[l].select(0, s);
    mb.mm_out(o, w[l], in);
    T* op = o.data_ptr<T>();
    const int64_t H = o.size(0);
    for (int64_t i = 0; i < mb.count(); ++i) {
      const T* bp = b[l].data_ptr<T>() + i * H;  // member i's bias
      for (int64_t r = 0; r < H; ++r) {
        const T br = bp[r];
        T* orow = op + r * B + i * mb.Bm;
        if (last) {
          MEMRNN_SIMD
          for (int64_t j = 0; j < mb.Bm; ++j) orow[j] += br;
        } else {
          MEMRNN_SIMD
          for (int64_t j = 0; j < mb.Bm; ++j) {
            const T v = orow[j] + br;
            orow[j] = v < T(0) ? T(0) : v;  // relu (NaN passes, as clamp_min)
          }
        }
      }
    }
    in = o;
  }
}

// Its backward at step s: from gv = ∂L/∂(the value's pre-activation) [K − k, B] down the hidden
// layers (∂L/∂ each pre-activation into gbuf[l][s]; relu's subgradient 0 at 0, as autograd's),
// then gh += W_1ᵀ · (the first layer's).  `w_t`: the weights transposed.
template <typename T>
void mlp_backward(const std::vector<std::vector<at::Tensor>>& w_t, const std::vector<at::Tensor>& hid,
                  const std::vector<at::Tensor>& gbuf, int64_t s, const at::Tensor& gv, at::Tensor& gh,
                  const Members& mb) {
  at::Tensor g = gv;
  for (auto l = static_cast<int64_t>(w_t.size()) - 1; l >= 1; --l) {
    at::Tensor gp = gbuf[l - 1].select(0, s);
    mb.mm_out(gp, w_t[l], g);
    T* gpp = gp.data_ptr<T>();
    const T* hp = hid[l - 1].select(0, s).data_ptr<T>();
    const int64_t n = gp.numel();
    MEMRNN_SIMD
    for (int64_t j = 0; j < n; ++j) gpp[j] = hp[j] > T(0) ? gpp[j] : T(0);
    g = gp;
  }
  mb.addmm_(gh, w_t[0], g);
}

// Recomputed memory (the header's): the rows of z's slot at step t that can be non-zero or be read:
// h and the read rows, then the cells a trimmed window computed (live[t]) and the two zero cells
// written past them; all D cells without trimming (cell D, zero in every slot, is never written)
inline int64_t live_rows(const int64_t* live, int64_t t, int64_t N, int64_t D, int64_t m, int64_t Z) {
  return live ? std::min(N + std::min(live[t] + 2, D) * m, Z) : N + D * m;
}

template <typename T>
void forward_impl(int64_t controller, int64_t activation, int64_t memory, int64_t value_act,
                  bool want_overflow, bool threaded, const Dims& d, const at::Tensor& x,
                  const at::Tensor& w_x, const at::Tensor& b_in, const at::Tensor& acts,
                  const at::Tensor& z,
                  const at::Tensor& w_z, const at::Tensor& w_head, const at::Tensor& b_head,
                  const at::Tensor& heads, const at::Tensor& A, const at::Tensor& cs,
                  const at::Tensor& xs, const at::Tensor& overflow, const at::Tensor& P,
                  const at::Tensor& S, const int64_t* jp, const at::Tensor& P2,
                  const std::vector<at::Tensor>& mlp_w, const std::vector<at::Tensor>& mlp_b,
                  const std::vector<at::Tensor>& mlp_h, const int64_t* live, int64_t ring,
                  const int64_t* lens, const std::vector<at::Tensor>& keep, int64_t recompute,
                  const std::vector<at::Tensor>& saved) {
  const int64_t T_ = d.T, B = d.B, N = d.N, Z = d.Z, K = d.K, Ka = d.Ka, k = d.k, D = d.D, m = d.m;
  const bool lstm = controller == kLSTM;
  // Without history (ring > 0, the header's "No history"): z, cs and the memory's buffers hold
  // Tm + 1 steps, the per-step buffers (acts among them) one
  const int64_t Tm = ring > 0 ? ring : T_;
  // Recomputed memory (the header's): z holds rc + 1 slots; zh every step's [h ; r], ck the
  // checkpoints
  const int64_t rc = recompute;
  T* zhp = rc > 0 ? saved[0].data_ptr<T>() : nullptr;
  T* ckp = rc > 0 ? saved[1].data_ptr<T>() : nullptr;
  T* zfp = rc > 0 && saved.size() == 3 ? saved[2].data_ptr<T>() : nullptr;  // the final memory rows
  const Members mb(d.M, B);
  const std::vector<at::Tensor> w_z_m = mb.split(w_z), w_head_m = mb.split(w_head);
  std::vector<std::vector<at::Tensor>> mlp_w_m;
  for (const auto& w : mlp_w) mlp_w_m.push_back(mb.split(w));
  const at::Tensor bh = b_head.contiguous();
  const T* bhp = bh.data_ptr<T>();
  T* zp = z.data_ptr<T>();
  T* hp = heads.data_ptr<T>();
  T* Ap = A.data_ptr<T>();
  T* ap = acts.data_ptr<T>();
  T* csp = lstm ? cs.data_ptr<T>() : nullptr;
  T* xsp = lstm ? xs.data_ptr<T>() : nullptr;
  T* ovp = overflow.data_ptr<T>();
  T* Pp = P.defined() ? P.data_ptr<T>() : nullptr;
  T* P2p = P2.defined() ? P2.data_ptr<T>() : nullptr;
  T* Sp = S.defined() ? S.data_ptr<T>() : nullptr;
  const MemoryTraits mt = traits_of(memory);
  std::vector<T> acc(B), cov(D * B), W(std::max<int64_t>(D, 1) * m * B);
  std::vector<T> dq(mt.forward_rows * D * B);
  std::vector<T> cells(3 * m * B);  // the actions tiled over a cell
  Pipeline pipe(threaded);
  const std::vector<int64_t> starts = block_starts(T_);
  int64_t next = 0;  // the block whose start is next
  // w_x x_tᵀ + b for the steps of block j (the input projection), as one product over the block's
  // n·B columns (per member: its rows of x) into proj's buffer j % 2, [G, n·B'] a member; the loop
  // copies each step's columns into acts[t] when it reaches the step (BlockBuffers)
  const int64_t G = d.G, nx = x.size(2);
  const at::Tensor bias = mb.M ? b_in.view({mb.M, G, 1}) : b_in.view({G, 1});
  // A few inputs (nx ≤ kStepInputs: one-hot symbols, as Deletang et al.'s and DuSell & Chiang's
  // models read them) are projected in the step instead, into its pre-activations: a block's
  // product of rank nx costs a pass over [G, n·B] and the copy of every step's columns out of it,
  // several times the nx multiply-adds per element.  The sum runs from zero, k ascending, then
  // adds the bias: float32 results equal MKL's addmm bit for bit in every case checked (nx 1–16,
  // G·B up to 256·1024), float64 ones to rounding; the training and no-history forwards share it,
  // so they stay equal bit for bit (tests/ops/test_stack_rnn_inference.py)
  const bool in_step = nx <= kStepInputs;
  const BlockBuffers proj(mb, in_step ? 0 : G, acts.options());
  std::vector<T> xt(in_step ? nx * B : 0);  // step s's inputs [nx, B]
  const T* wxp = w_x.data_ptr<T>();
  const at::Tensor b_c = b_in.contiguous();
  const T* bxp = b_c.data_ptr<T>();
  const T* xp = x.data_ptr<T>();
  const int64_t xs0 = x.stride(0), xs1 = x.stride(1), xs2 = x.stride(2);
  // Members of at most kNarrow columns (DuSell & Chiang's 10) sum in narrow_gemm's vector
  // registers, in the same order (k ascending from zero, then the bias): the same bits as the
  // loop below, whose rows of a few columns would go through memory once per input
  const bool narrow_step = in_step && mb.narrow_members();
  std::vector<T> xpack(narrow_step ? nx * kNarrow + kNarrow : 0);
  T* xpk = aligned(xpack.data());
  auto project_step = [&, G, nx](T* pre, int64_t s) {
    T* xtp = xt.data();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t k = 0; k < nx; ++k) xtp[k * B + b] = xp[b * xs0 + s * xs1 + k * xs2];
    const int64_t Bm = mb.Bm;
    for (int64_t i = 0; i < mb.count(); ++i) {  // member i: its weights on its columns
      const T* w = wxp + i * G * nx;
      const T* bias = bxp + i * G;
      if (narrow_step) {
        narrow_gemm<T>({pre + i * Bm, G, Bm, B, 1}, {const_cast<T*>(w), G, nx, nx, 1},
                       {xtp + i * Bm, nx, Bm, B, 1}, false, xpk);
        for (int64_t r = 0; r < G; ++r) {
          const T br = bias[r];
          T* o = pre + r * B + i * Bm;
          MEMRNN_SIMD
          for (int64_t c = 0; c < Bm; ++c) o[c] += br;
        }
        continue;
      }
      for (int64_t r = 0; r < G; ++r) {
        const T* wr = w + r * nx;
        const T br = bias[r];
        T* o = pre + r * B + i * Bm;
        const T* xc = xtp + i * Bm;
        // (k outermost: each pass vectorised over the columns, o stays in L1)
        MEMRNN_SIMD
        for (int64_t c = 0; c < Bm; ++c) o[c] = nx > 0 ? wr[0] * xc[c] : T(0);
        for (int64_t k = 1; k < nx; ++k) {
          const T wk = wr[k];
          const T* xk = xc + k * B;
          MEMRNN_SIMD
          for (int64_t c = 0; c < Bm; ++c) o[c] += wk * xk[c];
        }
        MEMRNN_SIMD
        for (int64_t c = 0; c < Bm; ++c) o[c] += br;
      }
    }
  };
  auto project = [&, G, nx](int64_t j) {
    const int64_t lo = starts[j], n = starts[j + 1] - lo, Bm = mb.Bm;
    for (int64_t i = 0; i < mb.count(); ++i) {
      const at::Tensor xi = mb.M ? x.narrow(0, i * Bm, Bm) : x;
      const at::Tensor xb = xi.narrow(1, lo, n).transpose(0, 1).reshape({n * Bm, nx});
      at::Tensor y = proj.block(j % 2, i, n);
      at::addmm_out(y, mb.w(bias, i), mb.w(w_x, i), xb.t());
    }
  };
  // without history: the outputs [h ; r] of each step into zout [T, N + mr, B], each row's final
  // state (z's and cs's slot, the strengths' S, the windows of P and P2) into keep's buffers at
  // its length (all rows at T without lens), and the rewind of the last slot to the first
  T* zoutp = nullptr;
  T* finp[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};  // z, cs, P, S, P2 at each row's length
  std::vector<char> ends(T_ + 1, 0);
  const int64_t SD = S.defined() ? S.size(1) : 0, R = N + d.mr;
  if (ring > 0 || zfp != nullptr) {
    if (ring > 0) {
      zoutp = keep[0].data_ptr<T>();
      for (int i = 0; i < 5; ++i) finp[i] = keep[i + 1].numel() ? keep[i + 1].template data_ptr<T>() : nullptr;
    }
    if (lens == nullptr) {
      if (T_ > 0) ends[T_] = 1;
    } else {
      for (int64_t b = 0; b < B; ++b)
        if (lens[b] > 0 && lens[b] <= T_) ends[lens[b]] = 1;
    }
  }
  auto copy_cols = [&](const T* src, T* dst, int64_t rows, int64_t t) {
    if (dst == nullptr) return;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < B; ++b)
        if (lens == nullptr || lens[b] == t) dst[r * B + b] = src[r * B + b];
  };
  auto keep_step = [&](int64_t s, int64_t slot) {
    std::copy(zp + slot * Z * B, zp + slot * Z * B + R * B, zoutp + s * R * B);
    const int64_t t = s + 1;
    if (!ends[t]) return;
    copy_cols(zp + slot * Z * B, finp[0], Z, t);
    if (lstm) copy_cols(csp + slot * N * B, finp[1], N, t);
    if (Pp) copy_cols(Pp + (Tm - slot) * m * B, finp[2], D * m, t);
    if (Sp) copy_cols(Sp + slot * SD * B, finp[3], SD, t);
    if (P2p) copy_cols(P2p + slot * m * B, finp[4], D * m, t);
  };
  // (z: a memory of cells' rows that step s's state can hold, live_rows, the superposition
  // stack's; all of them for the other memories, whose rows are not cells from the top)
  auto rewind = [&](int64_t s) {
    const int64_t zr = mt.cells ? live_rows(live, s, N, D, m, Z) : Z;
    std::copy(zp + Tm * Z * B, zp + Tm * Z * B + zr * B, zp);
    if (lstm) std::copy(csp + Tm * N * B, csp + (Tm + 1) * N * B, csp);
    if (Sp) std::copy(Sp + Tm * SD * B, Sp + (Tm + 1) * SD * B, Sp);
    if (Pp) std::copy_backward(Pp, Pp + D * m * B, Pp + (Tm + D) * m * B);  // P[Tm : Tm+D] = P[0 : D]
    if (P2p) std::copy(P2p + Tm * m * B, P2p + (Tm + D) * m * B, P2p);      // P2[0 : D] = P2[Tm : Tm+D]
  };
  // recomputed memory: slot `slot`'s rows that step t's state can hold (live_rows) into checkpoint
  // c, and the rewind of slot rc to slot 0 (those rows only: the rest is never read)
  auto checkpoint = [&](int64_t t, int64_t slot) {
    const int64_t n = live_rows(live, t, N, D, m, Z) * B;
    std::copy(zp + slot * Z * B, zp + slot * Z * B + n, ckp + (t / rc) * Z * B);
    if (slot != 0) std::copy(zp + slot * Z * B, zp + slot * Z * B + n, zp);
  };
  if (rc > 0 && T_ > 0) {
    std::copy(zp, zp + R * B, zhp);
    checkpoint(0, 0);
  }
  if (T_ > 0 && !in_step) project(0);
  for (int64_t s = 0; s < T_; ++s) {
    if (!in_step && s == starts[next]) {
      pipe.finish();  // this block's projection is ready; start the next block's
      if (++next + 1 < static_cast<int64_t>(starts.size())) pipe.run([&project, j = next] { project(j); });
    }
    // p: the slot of z, cs and the memory's buffers that step s reads (it writes p + 1); j: of the
    // per-step buffers, acts among them (all s with history)
    // (recomputed memory: p is z's slot, pc cs's step)
    const int64_t p = ring > 0 ? s % Tm : rc > 0 ? s % rc : s, j = ring > 0 ? 0 : s, pc = ring > 0 ? p : s;
    if (ring > 0 && s > 0 && p == 0) rewind(s);
    if (rc > 0 && s > 0 && p == 0) checkpoint(s, rc);
    T* a = ap + j * G * B;
    T* h = zp + (p + 1) * Z * B;
    // the step's pre-activations: its columns of the projection, then w_z [h ; r] added by the
    // product (an Elman controller's straight into h: its backward reads h, never acts)
    T* pre = lstm ? a : h;
    if (in_step) {
      project_step(pre, s);
    } else {
      proj.unload(pre, (next - 1) % 2, s - starts[next - 1], starts[next] - starts[next - 1]);
    }
    at::Tensor a_s = lstm ? acts.select(0, j) : z.select(0, p + 1).narrow(0, 0, N);  // [G, B]
    mb.addmm_(a_s, w_z_m, z.select(0, p).narrow(0, 0, N + d.mr));
    if (lstm) {
      // o, i, f = σ(·), g = tanh(·) = 2σ(2·) − 1: one vectorised sigmoid over all four blocks
      T* g = a + 3 * N * B;
      MEMRNN_SIMD
      for (int64_t j = 0; j < N * B; ++j) g[j] *= T(2);
      a_s.sigmoid_();
      const T* o = a;
      const T* i = a + N * B;
      const T* f = a + 2 * N * B;
      const T* c0 = csp + pc * N * B;
      T* c1 = csp + (pc + 1) * N * B;
      T* tc = xsp + j * N * B;  // tanh(c)
      MEMRNN_SIMD
      for (int64_t j = 0; j < N * B; ++j) {
        g[j] = T(2) * g[j] - T(1);
        c1[j] = f[j] * c0[j] + i[j] * g[j];
        tc[j] = T(2) * c1[j];
      }
      xs.select(0, j).sigmoid_();  // tanh(c) = 2σ(2c) − 1
      MEMRNN_SIMD
      for (int64_t j = 0; j < N * B; ++j) {
        tc[j] = T(2) * tc[j] - T(1);
        h[j] = o[j] * tc[j];
      }
    } else {
      activate_(a_s, h, N * B, activation);
    }
    at::Tensor hd = heads.select(0, j);
    const at::Tensor h_s = z.select(0, p + 1).narrow(0, 0, N);
    at::Tensor hd_head = hd.narrow(0, 0, Ka);  // the head's rows (all of them without an MLP)
    mb.mm_out(hd_head, w_head_m, h_s);
    if (!mlp_w.empty()) mlp_forward<T>(mlp_w_m, mlp_b, mlp_h, j, h_s, hd.narrow(0, Ka, K - Ka), B, mb);
    T* hs = hp + j * K * B;
    for (int64_t i = 0; i < mb.count(); ++i) {  // member i's bias on its columns
      for (int64_t r = 0; r < Ka; ++r) {
        const T br = bhp[i * Ka + r];
        T* hr = hs + r * B + i * mb.Bm;
        MEMRNN_SIMD
        for (int64_t b = 0; b < mb.Bm; ++b) hr[b] += br;
      }
    }
    T* as = Ap + j * k * B;
    if (mt.softmax) {  // softmax over the k actions
      MEMRNN_SIMD
      for (int64_t b = 0; b < B; ++b) {
        T mx = hs[b];
        for (int64_t r = 1; r < k; ++r) mx = std::max(mx, hs[r * B + b]);
        for (int64_t r = 0; r < k; ++r) as[r * B + b] = hs[r * B + b] - mx;
      }
      at::Tensor as_t = A.select(0, j);
      as_t.exp_();
      MEMRNN_SIMD
      for (int64_t b = 0; b < B; ++b) {
        T sum = 0;
        for (int64_t r = 0; r < k; ++r) sum += as[r * B + b];
        for (int64_t r = 0; r < k; ++r) as[r * B + b] /= sum;
      }
    } else {
      std::copy(hs, hs + k * B, as);
      A.select(0, j).sigmoid_();
    }
    activate_(hd.narrow(0, k, K - k), hs + k * B, (K - k) * B, value_act);
    const T* v = hs + k * B;  // [m, B]
    // a trimming memory reads its live ranges by step: at slot p, shifted by s − p (0 with history)
    const MemoryForward<T> step{p, rc > 0 ? rc : Tm, B, N, Z, D, m, want_overflow, as, v, zp, ovp + s * B,
                                Pp, P2p, Sp, jp, acc.data(), cov.data(), W.data(), cells.data(), dq.data(),
                                live ? live + (s - p) : nullptr};
    with_memory(memory, [&](auto mem) { decltype(mem)::template forward<T>(step); });
    if (ring > 0) keep_step(s, p + 1);
    if (rc > 0) std::copy(zp + (p + 1) * Z * B, zp + (p + 1) * Z * B + R * B, zhp + (s + 1) * R * B);
    // recomputed memory with the final state: each row's memory rows at its length (the rows past
    // the live ones are zero in saved[2] and in the full window alike)
    if (zfp != nullptr && ends[s + 1]) {
      const int64_t n = live_rows(live, s + 1, N, D, m, Z) - N;
      copy_cols(zp + (p + 1) * Z * B + N * B, zfp + N * B, n, s + 1);
    }
  }
}

// The memory's trimmed windows (native_common.h's MemoryForward::live): int64 [2, T+1], or null
const int64_t* live_of(const std::optional<at::Tensor>& live, int64_t T) {
  if (!live.has_value()) return nullptr;
  TORCH_CHECK(live->scalar_type() == at::kLong && live->is_contiguous() && live->dim() == 2 &&
                  live->size(0) == 2 && live->size(1) == T + 1,
              "memrnn native stack RNN: live must be a contiguous int64 [2, ", T + 1, "] tensor");
  return live->data_ptr<int64_t>();
}

// Recomputed memory (the header's): a memory that reruns its steps from z alone, z a ring of K + 1
// slots, zh [T+1, N+mr, B] and ck [ceil(T/K), Z, B]
void check_recompute(const Dims& d, int64_t memory, int64_t recompute, int64_t ring, const at::Tensor& z,
                     const std::vector<at::Tensor>& saved, const char* where) {
  if (recompute == 0) {
    TORCH_CHECK(saved.empty(), "memrnn native stack RNN ", where, ": saved is for recompute > 0");
    return;
  }
  TORCH_CHECK(recompute > 0 && ring == 0 && traits_of(memory).cells,
              "memrnn native stack RNN ", where, ": recompute = ", recompute,
              " needs a memory of cells (the superposition stack) with history (ring 0)");
  const int64_t nck = (d.T + recompute - 1) / recompute;
  TORCH_CHECK(z.size(0) == recompute + 1 && (saved.size() == 2 || saved.size() == 3) && saved[0].dim() == 3 &&
                  saved[0].size(0) == d.T + 1 && saved[0].size(1) == d.N + d.mr && saved[0].size(2) == d.B &&
                  saved[1].dim() == 3 && saved[1].size(0) == nck && saved[1].size(1) == d.Z &&
                  saved[1].size(2) == d.B,
              "memrnn native stack RNN ", where, ": recompute = ", recompute, " needs z [", recompute + 1,
              ", Z, B] and saved = [zh [T+1, N+mr, B], ck [", nck, ", Z, B] (, the final rows [Z, B])]");
  TORCH_CHECK(saved.size() == 2 || saved[2].numel() == d.Z * d.B,
              "memrnn native stack RNN ", where, ": the final rows saved[2] hold ", d.Z * d.B, " elements");
  for (const auto& t : saved) {
    check_contiguous(t, "saved");
    TORCH_CHECK(t.scalar_type() == z.scalar_type(), "memrnn native stack RNN: saved's dtype must be z's");
  }
}

void stack_rnn_forward(int64_t controller, int64_t activation, int64_t memory, int64_t value_act,
                       bool want_overflow, int64_t D, int64_t m, const std::optional<at::Tensor>& jumps,
                       const at::Tensor& x,
                       const at::Tensor& w_x, const at::Tensor& b, const at::Tensor& acts,
                       const at::Tensor& z, const at::Tensor& w_z, const at::Tensor& w_head,
                       const at::Tensor& b_head, const at::Tensor& heads, const at::Tensor& A,
                       const std::optional<at::Tensor>& cs, const std::optional<at::Tensor>& xs,
                       const at::Tensor& overflow, const std::optional<at::Tensor>& P,
                       const std::optional<at::Tensor>& S, const std::optional<at::Tensor>& P2,
                       const std::vector<at::Tensor>& mlp_w, const std::vector<at::Tensor>& mlp_b,
                       const std::vector<at::Tensor>& mlp_h, int64_t members,
                       const std::optional<at::Tensor>& live, int64_t ring,
                       const std::optional<at::Tensor>& lens, const std::vector<at::Tensor>& keep,
                       int64_t recompute, const std::vector<at::Tensor>& saved) {
  const at::Tensor cs_ = cs.value_or(at::Tensor()), xs_ = xs.value_or(at::Tensor());
  const at::Tensor P_ = P.value_or(at::Tensor()), S_ = S.value_or(at::Tensor());
  for (const auto& [t, name] : {std::pair{acts, "acts"}, {z, "z"}, {w_z, "w_z"}, {w_x, "w_x"},
                                {w_head, "w_head"}, {heads, "heads"}, {A, "A"}, {cs_, "cs"},
                                {xs_, "xs"}, {overflow, "overflow"}, {P_, "P"}, {S_, "S"}}) {
    check_contiguous(t, name);
  }
  TORCH_CHECK(controller != kLSTM || (cs_.defined() && xs_.defined()),
              "memrnn native stack RNN: an LSTM controller needs cs and xs");
  const MemoryTraits mt = traits_of(memory);
  TORCH_CHECK(!mt.jumps || (jumps.has_value() && jumps->scalar_type() == at::kLong && jumps->is_contiguous()),
              "memrnn native stack RNN: the jump tape needs each row's shift (int64)");
  TORCH_CHECK(!mt.top_half || (P2.has_value() && P2->is_contiguous()),
              "memrnn native stack RNN: the DeQue needs its top half's buffer P2");
  TORCH_CHECK(!mt.windows || (P_.defined() && S_.defined()),
              "memrnn native stack RNN: the stratification memories need P and S");
  Dims d = dims_of(acts, z, w_z, w_head, heads, A, D, m, members);
  if (ring > 0) {  // without history: T from x, the buffers' steps checked here
    d.T = x.size(1);
    d.Th = 1;
    TORCH_CHECK(ring <= d.T && z.size(0) == ring + 1 && acts.size(0) == 1 && heads.size(0) == 1 &&
                    A.size(0) == 1 && (!cs_.defined() || (cs_.size(0) == ring + 1 && xs_.size(0) == 1)),
                "memrnn native stack RNN: without history z and cs hold ring + 1 = ", ring + 1,
                " steps, acts, heads, A and xs one");
    TORCH_CHECK(keep.size() == 6 && keep[0].dim() == 3 && keep[0].size(0) == d.T &&
                    keep[0].size(1) == d.N + d.mr && keep[0].size(2) == d.B,
                "memrnn native stack RNN: without history keep holds zout [T, N + mr, B] and the final ",
                "state's z, cs, P, S, P2 (empty where none)");
    for (const auto& t : keep) check_contiguous(t, "keep");
  }
  TORCH_CHECK(!lens.has_value() || (lens->scalar_type() == at::kLong && lens->is_contiguous() &&
                                    lens->numel() == d.B),
              "memrnn native stack RNN: lens must be ", d.B, " contiguous int64 lengths");
  check_mlp(d, mlp_w, &mlp_b, mlp_h, "mlp_h");
  check_recompute(d, memory, recompute, ring, z, saved, "forward");
  OneThread one;
  at::AutoDispatchBelowADInplaceOrView below_autograd;  // the loop's views and in-place steps: nothing recorded
  AT_DISPATCH_FLOATING_TYPES(acts.scalar_type(), "memrnn_stack_rnn_forward", [&] {
    forward_impl<scalar_t>(controller, activation, memory, value_act, want_overflow,
                           one.had_more(), d, x, w_x, b, acts, z, w_z, w_head, b_head, heads, A,
                           cs_, xs_, overflow, P_, S_, jumps ? jumps->data_ptr<int64_t>() : nullptr,
                           P2.value_or(at::Tensor()), mlp_w, mlp_b, mlp_h, live_of(live, ring > 0 ? d.T : acts.size(0)), ring,
                           (ring > 0 || recompute > 0) && lens.has_value() ? lens->data_ptr<int64_t>() : nullptr, keep,
                           recompute, saved);
  });
}

// dst[r, b] += y[b, s, r] for the outputs' gradient y [B, T, n] (any strides, e.g. expanded)
template <typename T>
void add_step(const at::Tensor& y, T* dst, int64_t s, int64_t n, int64_t B) {
  if (!y.defined()) return;
  const T* yp = y.data_ptr<T>() + s * y.stride(1);
  const int64_t sb = y.stride(0), sr = y.stride(2);
  for (int64_t r = 0; r < n; ++r) {
    T* d = dst + r * B;
    const T* yr = yp + r * sr;
    MEMRNN_SIMD
    for (int64_t b = 0; b < B; ++b) d[b] += yr[b * sb];
  }
}

// out[r] += Σ_b x[r, b] for x [R, B] with rows `stride` apart (skipped when out is undefined)
template <typename T>
void row_sums(const T* x, int64_t stride, const at::Tensor& out, int64_t R, int64_t B) {
  if (!out.defined()) return;
  T* o = out.data_ptr<T>();
  for (int64_t r = 0; r < R; ++r) {
    T acc = 0;
    const T* xr = x + r * stride;
    MEMRNN_SIMD_SUM(acc)
    for (int64_t b = 0; b < B; ++b) acc += xr[b];
    o[r] += acc;
  }
}

template <typename T>
void backward_impl(int64_t controller, int64_t activation, int64_t memory, int64_t value_act,
                   const Dims& d, const at::Tensor& acts, const at::Tensor& z,
                   const at::Tensor& w_z, const at::Tensor& w_head, const at::Tensor& heads,
                   const at::Tensor& A, const at::Tensor& cs, const at::Tensor& xs,
                   const at::Tensor& P, const at::Tensor& S, const at::Tensor& lens_t,
                   const at::Tensor& gyh, const at::Tensor& gyr, const at::Tensor& g_hT,
                   const at::Tensor& g_cT, const std::vector<at::Tensor>& gfin,
                   const at::Tensor& ga, const at::Tensor& ghd, const at::Tensor& gA,
                   const at::Tensor& gz, const at::Tensor& g_c, const std::vector<at::Tensor>& gm,
                   const at::Tensor& gb, const at::Tensor& gw_head, const at::Tensor& gb_head,
                   bool threaded, const at::Tensor& x, const at::Tensor& w_x,
                   const at::Tensor& gw_z, const at::Tensor& gw_x, const at::Tensor& gx,
                   const int64_t* jp, const at::Tensor& P2, const std::vector<at::Tensor>& mlp_w,
                   const std::vector<at::Tensor>& mlp_h, const std::vector<at::Tensor>& mlp_g,
                   const int64_t* live, int64_t recompute, const std::vector<at::Tensor>& saved) {
  const int64_t T_ = d.T, B = d.B, N = d.N, Z = d.Z, K = d.K, Ka = d.Ka, k = d.k, D = d.D, m = d.m;
  const int64_t G = d.G, mr = d.mr;
  const bool lstm = controller == kLSTM;
  const T* zp = z.data_ptr<T>();
  const T* hp = heads.data_ptr<T>();
  const T* Ap = A.data_ptr<T>();
  const T* ap = acts.data_ptr<T>();
  // Recomputed memory (the header's): z is a ring of rc + 1 slots the memory's steps are rerun
  // into, a block at a time; the controller's rows [h ; r] of every step are zc's (z's otherwise)
  const int64_t rc = recompute;
  const at::Tensor zc = rc > 0 ? saved[0] : z;
  const int64_t Zc = zc.size(1);
  const T* zcp = zc.data_ptr<T>();
  const T* csp = lstm ? cs.data_ptr<T>() : nullptr;
  const T* xsp = lstm ? xs.data_ptr<T>() : nullptr;
  const T* Pp = P.defined() ? P.data_ptr<T>() : nullptr;
  const T* P2p = P2.defined() ? P2.data_ptr<T>() : nullptr;
  const T* Sp = S.defined() ? S.data_ptr<T>() : nullptr;
  const int64_t* lens = lens_t.data_ptr<int64_t>();
  T* gap = ga.data_ptr<T>();
  T* ghp = ghd.data_ptr<T>();
  T* gAp = gA.data_ptr<T>();
  T* gzp = gz.data_ptr<T>();
  T* gcp = lstm ? g_c.data_ptr<T>() : nullptr;
  T* gzr = gzp + N * B;
  const Members mb(d.M, B);
  const at::Tensor w_z_t = w_z.transpose(-2, -1), w_head_t = w_head.transpose(-2, -1);
  std::vector<std::vector<at::Tensor>> mlp_wt;
  for (const auto& w : mlp_w) mlp_wt.push_back(mb.split(w.transpose(-2, -1)));
  const std::vector<at::Tensor> w_z_t_m = mb.split(w_z_t), w_head_t_m = mb.split(w_head_t);
  const std::vector<at::Tensor> gw_head_m = mb.split(gw_head), gb_head_m = mb.split(gb_head), gb_m = mb.split(gb);
  at::Tensor gz_ = gz;
  const at::Tensor gzh = gz.narrow(0, 0, N);
  at::Tensor gh = at::empty_like(gzh);
  T* ghh = gh.data_ptr<T>();
  // the memory's gradient state gm: cpu.py's kernels' start_backward buffers, updated in place
  // (each memory's native.h says what they hold)
  const MemoryTraits mt = traits_of(memory);
  std::vector<T> acc(B), c1(D * B), c2(D * B), c3(D * B), c4(D * B), sums(5 * B);
  std::vector<T> dq(mt.backward_rows * D * B);
  std::vector<T> cells(6 * m * B);  // actions tiled over a cell, their gradients per unit
  // the weights' and the inputs' gradients of steps lo..hi−1, whose ∂L/∂acts are done: one
  // product each over the block's n·B columns (member by member: its columns, its rows of x),
  // from the block's buffers b, which the loop filled step by step
  const BlockBuffers gbs(mb, G, ga.options()), zbs(mb, N + mr, ga.options());
  auto weights = [&, N, mr, G](int64_t lo, int64_t hi, int64_t b) {
    const int64_t n = hi - lo, nx = x.size(2), Bm = mb.Bm;
    for (int64_t i = 0; i < mb.count(); ++i) {
      const at::Tensor gb_ = gbs.block(b, i, n), zb = zbs.block(b, i, n);
      mb.w(gw_z, i).addmm_(gb_, zb.t());
      const at::Tensor xi = mb.M ? x.narrow(0, i * Bm, Bm) : x;
      if (gw_x.defined()) mb.w(gw_x, i).addmm_(gb_, xi.narrow(1, lo, n).transpose(0, 1).reshape({n * Bm, nx}));
      if (gx.defined()) {
        const at::Tensor gxi = mb.M ? gx.narrow(0, i * Bm, Bm) : gx;
        gxi.narrow(1, lo, n).copy_(at::mm(gb_.t(), mb.w(w_x, i)).view({n, Bm, nx}).transpose(0, 1));
      }
    }
  };
  Pipeline pipe(threaded);
  const std::vector<int64_t> starts = block_starts(T_);
  auto block = static_cast<int64_t>(starts.size()) - 2;  // the block being undone
  // recomputed memory: the block of steps c·rc .. c·rc + rc − 1 rerun into z's ring from its
  // checkpoint (the forward's steps, op for op; no overflow)
  T* zr = z.data_ptr<T>();
  const T* ckp = rc > 0 ? saved[1].data_ptr<T>() : nullptr;
  auto rerun = [&](int64_t c) {
    const int64_t lo = c * rc, hi = std::min(lo + rc, T_);
    std::copy(ckp + c * Z * B, ckp + c * Z * B + live_rows(live, lo, N, D, m, Z) * B, zr);
    for (int64_t s = lo; s < hi; ++s) {
      const MemoryForward<T> f{s - lo, rc, B, N, Z, D, m, false, Ap + s * k * B, hp + s * K * B + k * B,
                               zr, acc.data(), nullptr, nullptr, nullptr, jp, acc.data(), c1.data(),
                               c2.data(), cells.data(), dq.data(), live ? live + lo : nullptr};
      with_memory(memory, [&](auto mem) { decltype(mem)::template forward<T>(f); });
    }
  };
  for (int64_t s = T_ - 1; s >= 0; --s) {
    const int64_t t = s + 1;
    if (rc > 0 && (s == T_ - 1 || s % rc == rc - 1)) rerun(s / rc);
    const int64_t off = rc > 0 ? (s / rc) * rc : 0;  // the ring's first step (0 with history)
    add_step(gyh, gzp, s, N, B);  // ∂L/∂h_{s+1} and ∂L/∂r_{s+1} from the outputs
    add_step(gyr, gzr, s, mr, B);
    bool ends = false;
    for (int64_t b = 0; b < B; ++b) ends = ends || lens[b] == t;
    const int64_t cur = (T_ - 1 - s) % 2;  // the alternating buffers' current one
    const T* hs = hp + s * K * B;
    const T* as = Ap + s * k * B;
    const T* v = hs + k * B;
    T* gas = gAp + s * k * B;
    T* gh_s = ghp + s * K * B;
    T* gv = gh_s + k * B;
    const MemoryBackward<T> step{s - off, t, T_, B, N, Z, k, D, m, cur, as, v, zp, Pp, P2p, Sp, jp, gm, gas, gv,
                                 gzr, acc.data(), c1.data(), c2.data(), c3.data(), c4.data(), sums.data(),
                                 cells.data(), dq.data(), live ? live + off : nullptr};
    if (ends) {
      add_final<T>(g_hT, gzp, lens, t, B, N);
      if (lstm) add_final<T>(g_cT, gcp, lens, t, B, N);
      with_memory(memory, [&](auto mem) { decltype(mem)::template add_final_grads<T>(step, gfin, lens); });
    }
    // -- the memory's backward: ∂L/∂actions into gas, ∂L/∂v into gv, the state gradient moves
    with_memory(memory, [&](auto mem) { decltype(mem)::template backward<T>(step); });
    // -- the actions' and the value's activations
    if (mt.softmax) {
      MEMRNN_SIMD
      for (int64_t b = 0; b < B; ++b) {
        T tot = 0;
        for (int64_t r = 0; r < k; ++r) {
          const T tr = as[r * B + b] * gas[r * B + b];
          gh_s[r * B + b] = tr;
          tot += tr;
        }
        for (int64_t r = 0; r < k; ++r) gh_s[r * B + b] -= as[r * B + b] * tot;
      }
    } else {
      MEMRNN_SIMD
      for (int64_t j = 0; j < k * B; ++j) gh_s[j] = gas[j] * (as[j] - as[j] * as[j]);
    }
    if (value_act == kSigmoid) {
      MEMRNN_SIMD
      for (int64_t j = 0; j < (K - k) * B; ++j) gv[j] *= v[j] - v[j] * v[j];
    } else if (value_act == kTanh) {
      MEMRNN_SIMD
      for (int64_t j = 0; j < (K - k) * B; ++j) gv[j] *= T(1) - v[j] * v[j];
    }
    // -- the head, then the controller: g_h = ∂L/∂h_{s+1} = gzh + w_headᵀ ∂L/∂heads
    const at::Tensor ghd_s = ghd.select(0, s);
    const at::Tensor gha_s = ghd_s.narrow(0, 0, Ka);  // the head's rows (all of them without an MLP)
    mb.mm_out(gh, w_head_t_m, gha_s);
    if (!mlp_wt.empty()) mlp_backward<T>(mlp_wt, mlp_h, mlp_g, s, ghd_s.narrow(0, Ka, K - Ka), gh, mb);
    const at::Tensor h_t = zc.select(0, t).narrow(0, 0, N);
    mb.addmm_t_(gw_head_m, gha_s, h_t);
    T* gas_ = gap;  // ∂L/∂acts of step s (ga holds one step: the blocks' products read gbs)
    if (lstm) {
      const T* a = ap + s * G * B;
      const T* o = a;
      const T* i = a + N * B;
      const T* f = a + 2 * N * B;
      const T* g = a + 3 * N * B;
      const T* tc = xsp + s * N * B;  // tanh(c)
      const T* cp = csp + s * N * B;
      MEMRNN_SIMD
      for (int64_t j = 0; j < N * B; ++j) {
        const T g_h = ghh[j] + gzp[j];
        const T gc = gcp[j] + g_h * (o[j] - o[j] * tc[j] * tc[j]);
        gas_[j] = (o[j] - o[j] * o[j]) * tc[j] * g_h;
        gas_[N * B + j] = (i[j] - i[j] * i[j]) * g[j] * gc;
        gas_[2 * N * B + j] = (f[j] - f[j] * f[j]) * cp[j] * gc;
        gas_[3 * N * B + j] = (i[j] - i[j] * g[j] * g[j]) * gc;
        gcp[j] = gc * f[j];
      }
    } else {
      const T* h = zcp + t * Zc * B;
      MEMRNN_SIMD
      for (int64_t j = 0; j < N * B; ++j) {
        const T g_h = ghh[j] + gzp[j];
        T da;
        if (activation == kTanh) {
          da = T(1) - h[j] * h[j];
        } else if (activation == kSigmoid) {
          da = h[j] - h[j] * h[j];
        } else {
          da = h[j] > 0 ? T(1) : T(0);
        }
        gas_[j] = g_h * da;
      }
    }
    for (int64_t i = 0; i < mb.count(); ++i) {  // member i's columns into its biases' gradients
      row_sums(gas_ + i * mb.Bm, B, gb_m[i], G, mb.Bm);  // (skipped when gb is undefined)
      row_sums(gh_s + i * mb.Bm, B, gb_head_m[i], Ka, mb.Bm);
    }
    mb.mm_out(gz_, w_z_t_m, ga.select(0, 0));
    const int64_t lo = starts[block], n = starts[block + 1] - lo;
    gbs.load(gas_, block % 2, s - lo, n);
    zbs.load(zcp + s * Zc * B, block % 2, s - lo, n);
    if (s == lo) {
      pipe.run([&weights, lo, hi = lo + n, b = block % 2] { weights(lo, hi, b); });
      --block;
    }
  }
  pipe.finish();
}

void stack_rnn_backward(int64_t controller, int64_t activation, int64_t memory, int64_t value_act,
                        int64_t D, int64_t m, const std::optional<at::Tensor>& jumps, const at::Tensor& acts, const at::Tensor& z,
                        const at::Tensor& w_z, const at::Tensor& w_head, const at::Tensor& heads,
                        const at::Tensor& A, const std::optional<at::Tensor>& cs,
                        const std::optional<at::Tensor>& xs, const std::optional<at::Tensor>& P,
                        const std::optional<at::Tensor>& S, const at::Tensor& lens,
                        const std::optional<at::Tensor>& gyh, const std::optional<at::Tensor>& gyr,
                        const std::optional<at::Tensor>& g_hT,
                        const std::optional<at::Tensor>& g_cT,
                        const std::vector<std::optional<at::Tensor>>& gfin, const at::Tensor& ga,
                        const at::Tensor& ghd, const at::Tensor& gA, const at::Tensor& gz,
                        const at::Tensor& g_c, const std::vector<at::Tensor>& gm,
                        const std::optional<at::Tensor>& gb, const at::Tensor& gw_head,
                        const at::Tensor& gb_head, const at::Tensor& x, const at::Tensor& w_x,
                        const at::Tensor& gw_z, const std::optional<at::Tensor>& gw_x,
                        const std::optional<at::Tensor>& gx, const std::optional<at::Tensor>& P2,
                        const std::vector<at::Tensor>& mlp_w, const std::vector<at::Tensor>& mlp_h,
                        const std::vector<at::Tensor>& mlp_g, int64_t members,
                        const std::optional<at::Tensor>& live, int64_t recompute,
                        const std::vector<at::Tensor>& saved) {
  auto opt = [](const std::optional<at::Tensor>& t) { return t.value_or(at::Tensor()); };
  std::vector<at::Tensor> fin;
  for (const auto& t : gfin) fin.push_back(opt(t));
  while (fin.size() < 3) fin.emplace_back();
  const at::Tensor cs_ = opt(cs), xs_ = opt(xs), P_ = opt(P), S_ = opt(S);
  const at::Tensor gyh_ = opt(gyh), gyr_ = opt(gyr), g_hT_ = opt(g_hT), g_cT_ = opt(g_cT);
  for (const auto& [t, name] :
       {std::pair{acts, "acts"}, {z, "z"}, {heads, "heads"}, {A, "A"}, {cs_, "cs"}, {xs_, "xs"},
        {P_, "P"}, {S_, "S"}, {g_hT_, "g_hT"}, {g_cT_, "g_cT"},
        {fin[0], "gfin0"}, {fin[1], "gfin1"}, {fin[2], "gfin2"}, {ga, "ga"}, {ghd, "ghd"},
        {gA, "gA"}, {gz, "gz"}, {g_c, "g_c"}, {lens, "lens"}, {opt(gb), "gb"},
        {gw_head, "gw_head"}, {gb_head, "gb_head"}, {w_x, "w_x"}, {gw_z, "gw_z"},
        {opt(gw_x), "gw_x"}, {opt(gx), "gx"}}) {
    check_contiguous(t, name);
  }
  for (const auto& t : gm) check_contiguous(t, "gm");
  TORCH_CHECK(lens.scalar_type() == at::kLong, "memrnn native stack RNN: lens must be int64");
  const MemoryTraits mt = traits_of(memory);
  TORCH_CHECK(!mt.jumps || (jumps.has_value() && jumps->scalar_type() == at::kLong),
              "memrnn native stack RNN: the jump tape needs each row's shift (int64)");
  TORCH_CHECK(static_cast<int64_t>(gm.size()) == mt.grad_buffers,
              "memrnn native stack RNN: ", mt.grad_buffers, " gradient buffers expected");
  const Dims d = dims_of(acts, z, w_z, w_head, heads, A, D, m, members);
  TORCH_CHECK(ga.dim() == 3 && ga.size(0) == 1 && ga.size(1) == d.G && ga.size(2) == d.B,
              "memrnn native stack RNN: ga holds one step's ∂L/∂acts, [1, ", d.G, ", ", d.B, "]");
  check_mlp(d, mlp_w, nullptr, mlp_h, "mlp_h");
  check_mlp(d, mlp_w, nullptr, mlp_g, "mlp_g");
  check_recompute(d, memory, recompute, 0, z, saved, "backward");
  OneThread one;
  at::AutoDispatchBelowADInplaceOrView below_autograd;  // as the forward's
  AT_DISPATCH_FLOATING_TYPES(acts.scalar_type(), "memrnn_stack_rnn_backward", [&] {
    backward_impl<scalar_t>(controller, activation, memory, value_act, d, acts, z, w_z, w_head,
                            heads, A, cs_, xs_, P_, S_, lens, gyh_, gyr_, g_hT_, g_cT_, fin, ga,
                            ghd, gA, gz, g_c, gm, opt(gb), gw_head, gb_head, one.had_more(), x,
                            w_x, gw_z, opt(gw_x), opt(gx), jumps ? jumps->data_ptr<int64_t>() : nullptr,
                            opt(P2), mlp_w, mlp_h, mlp_g, live_of(live, acts.size(0)), recompute, saved);
  });
}

}  // namespace

TORCH_LIBRARY(memrnn_native, lib) {
  lib.def(
      "stack_rnn_forward(int controller, int activation, int memory, int value_act, "
      "bool want_overflow, int D, int m, Tensor? jumps, Tensor x, Tensor w_x, Tensor b, Tensor(a!) acts, "
      "Tensor(b!) z, Tensor w_z, "
      "Tensor w_head, Tensor b_head, Tensor(c!) heads, Tensor(d!) A, Tensor(e!)? cs, "
      "Tensor(f!)? xs, Tensor(g!) overflow, Tensor(h!)? P, Tensor(i!)? S, Tensor(j!)? P2, "
      "Tensor[] mlp_w, Tensor[] mlp_b, Tensor(k!)[] mlp_h, int members=0, Tensor? live=None, *, int ring=0, "
      "Tensor? lens=None, Tensor(l!)[] keep, int recompute=0, Tensor(m!)[] saved) -> ()",
      &stack_rnn_forward);
  lib.def(
      "stack_rnn_backward(int controller, int activation, int memory, int value_act, int D, "
      "int m, Tensor? jumps, Tensor acts, Tensor(o!) z, Tensor w_z, Tensor w_head, Tensor heads, Tensor A, "
      "Tensor? cs, Tensor? xs, Tensor? P, Tensor? S, Tensor lens, Tensor? gyh, Tensor? gyr, "
      "Tensor? g_hT, Tensor? g_cT, Tensor?[] gfin, Tensor(a!) ga, Tensor(b!) ghd, "
      "Tensor(c!) gA, Tensor(d!) gz, Tensor(e!) g_c, Tensor(f!)[] gm, Tensor(g!)? gb, "
      "Tensor(h!) gw_head, Tensor(i!) gb_head, Tensor x, Tensor w_x, Tensor(j!) gw_z, "
      "Tensor(k!)? gw_x, Tensor(l!)? gx, Tensor? P2, Tensor[] mlp_w, Tensor[] mlp_h, "
      "Tensor(m!)[] mlp_g, int members=0, Tensor? live=None, *, int recompute=0, Tensor(n!)[] saved) -> ()",
      &stack_rnn_backward);
}
