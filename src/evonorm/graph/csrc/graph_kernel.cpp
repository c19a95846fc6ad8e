// A compiled graph layer on the CPU: the whole layer run one sample at a time, in cache.
//
// Every statistic of a sample-based layer (layer, instance, group) is per sample, so one sample's values
// for every node fit in a few hundred kB and each node is a short loop over memory that is already in cache;
// the tensor is read once and the output written once. Backward recomputes the sample's element-wise values
// from the input and the few numbers per sample forward kept (its statistics), then runs a reverse sweep with
// autograd's rules for each primitive (maximum's half gradient at ties, sign(0) = +1 in the division guard,
// abs' gradient 0 at 0).
//
// Values have one of three shapes within a sample: FULL (C x HW), CH (one per channel: v0, v1, a group or
// instance statistic) or SC (one: zero, a layer statistic), the shapes the plain primitives give (their
// statistics keep the reduced axes as size 1). Statistics accumulate in double.
//
// A program is an int64 tensor of rows (op, axes, a, b), one per node after the four inputs (x, zero, v0,
// v1), arguments by row index + 4; the last row is the output. Besides the primitives it has two fused steps:
// NORM, (h - mean_I(h)) / (std_I(h) + eps) in three passes forward and two back, and SWISH, h * sigmoid(v h)
// (b = -1: v = 1) in one.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

// glibc's vector math (libmvec): declared SIMD-callable so that loops over exp, log and tanh vectorize
// without -ffast-math (whose finite-math rules would break NaN and inf, which the search must see).
extern "C" {
__attribute__((simd("notinbranch"))) float expf(float) noexcept;
__attribute__((simd("notinbranch"))) double exp(double) noexcept;
__attribute__((simd("notinbranch"))) float logf(float) noexcept;
__attribute__((simd("notinbranch"))) double log(double) noexcept;
__attribute__((simd("notinbranch"))) float tanhf(float) noexcept;
__attribute__((simd("notinbranch"))) double tanh(double) noexcept;
}

#define ALWAYS_INLINE inline __attribute__((always_inline))  // the vector loops need their bodies inlined

namespace {

enum Op : int64_t { ADD, MUL, DIV, MAX, SWISH, NEG, SIGMOID, TANH, EXP, LOG, ABS, SQUARE, SQRT, MEAN, STD, RMS, NORM };
enum Axes : int64_t { LAYER, INSTANCE, GROUP };
enum Kind : int { SC, CH, FULL };
constexpr int kInputs = 4;

inline float vexp(float v) { return expf(v); }
inline double vexp(double v) { return exp(v); }
inline float vlog(float v) { return logf(v); }
inline double vlog(double v) { return log(v); }
inline float vtanh(float v) { return tanhf(v); }
inline double vtanh(double v) { return tanh(v); }
template <typename T> inline T sign(T v) { return v > 0 ? T(1) : (v < 0 ? T(-1) : T(0)); }  // torch.sign

struct Step {
  int64_t op, axes, a, b;
  int kind;
};

struct Program {
  std::vector<Step> steps;
  std::vector<int> kind;   // per node: SC, CH or FULL
  std::vector<char> need;  // per node: depends on x, v0 or v1 (a gradient must reach it)
  // per node: depends on x. The others (v0, v1 and what is made of them alone) are the same for every sample:
  // their gradients are summed over the samples first and then taken back to v0 and v1 once, in the order
  // autograd sums a broadcast, so that an infinite value meets one finite sum (inf), not +inf and -inf (NaN).
  std::vector<char> dep;
  std::vector<int64_t> ioff;  // where a needed sample-independent node's per-sample gradient goes (-1: none)
  int64_t indep_len = 0;
  int64_t C, HW, groups;
  // What forward keeps per sample for backward, in doubles: each statistic's and NORM's per-set numbers
  // (mean; NORM's mu, sigma, d) at moff, then each statistic's value at soff (-1: not kept). Backward then
  // recomputes only the element-wise nodes.
  std::vector<int64_t> moff, soff;
  int64_t mu_len = 0, saved_len = 0;
  bool indep_steps = false;  // a step made of v0 and v1 alone needs a gradient (then backward has a second sweep)
  // An output max(y, zero) of a full-shape y (the seed layers' relu) joins the affine: the steps run are the
  // first `run`, and the affine reads node `out`.
  bool relu_out = false;
  int64_t run = 0, out = 0;

  int64_t len(int node) const { return kind[node] == FULL ? C * HW : (kind[node] == CH ? C : 1); }
};

Program make_program(const at::Tensor& prog, int64_t C, int64_t HW, int64_t groups) {
  TORCH_CHECK(prog.dim() == 2 && prog.size(1) == 4 && prog.scalar_type() == at::kLong, "program: (M, 4) int64");
  Program p{{}, {FULL, SC, CH, CH}, {1, 0, 1, 1}, {1, 0, 0, 0}, {}, 0, C, HW, groups};
  auto r = prog.accessor<int64_t, 2>();
  for (int64_t i = 0; i < prog.size(0); ++i) {
    Step s{r[i][0], r[i][1], r[i][2], r[i][3], SC};
    int64_t id = kInputs + i;
    TORCH_CHECK(s.op >= ADD && s.op <= NORM && s.a >= 0 && s.a < id && s.b < id, "program: bad row ", i);
    TORCH_CHECK(s.op < MEAN ? s.axes == 0 : (s.axes >= LAYER && s.axes <= GROUP), "program: bad axes at row ", i);
    int ka = p.kind[s.a];
    bool binary = s.op <= SWISH && s.b >= 0;
    if (s.op <= SWISH) {
      TORCH_CHECK(s.b >= 0 || s.op == SWISH, "program: binary op without a second argument at row ", i);
      s.kind = binary ? std::max(ka, p.kind[s.b]) : ka;
    } else if (s.op < MEAN) {
      s.kind = ka;
    } else if (s.op == NORM) {
      TORCH_CHECK(ka == FULL && s.axes <= GROUP, "program: NORM needs a full-shape argument at row ", i);
      s.kind = FULL;
    } else {
      s.kind = s.axes == LAYER ? SC : (s.axes == INSTANCE ? std::min(ka, int(CH)) : (ka == SC ? SC : CH));
    }
    p.kind.push_back(s.kind);
    p.need.push_back(p.need[s.a] || (binary && p.need[s.b]));
    p.dep.push_back(p.dep[s.a] || (binary && p.dep[s.b]));
    p.steps.push_back(s);
  }
  TORCH_CHECK(!p.steps.empty(), "program: no nodes");
  int64_t nodes = kInputs + int64_t(p.steps.size());
  std::vector<char> used(nodes, 0);  // v0 and v1 count only where a step reads them
  for (const Step& s : p.steps) {
    used[s.a] = 1;
    if (s.b >= 0) used[s.b] = 1;
  }
  p.ioff.assign(nodes, -1);
  for (int64_t i = 2; i < nodes; ++i) {
    if (p.need[i] && !p.dep[i] && (i >= kInputs || used[i])) {
      p.ioff[i] = p.indep_len;
      p.indep_len += p.len(int(i));
    }
  }
  for (int64_t i = kInputs; i < nodes; ++i) p.indep_steps = p.indep_steps || (p.need[i] && !p.dep[i]);
  p.moff.assign(nodes, -1);
  p.soff.assign(nodes, -1);
  for (int64_t i = kInputs; i < nodes; ++i) {
    if (p.steps[i - kInputs].op >= MEAN) {
      p.moff[i] = p.mu_len;
      p.mu_len += 3 * C;
    }
  }
  const Step& last = p.steps.back();
  p.relu_out = last.op == MAX && last.b == 1 && last.a >= kInputs && p.kind[last.a] == FULL;
  p.run = int64_t(p.steps.size()) - (p.relu_out ? 1 : 0);
  p.out = p.relu_out ? last.a : nodes - 1;
  p.saved_len = p.mu_len;
  for (int64_t i = kInputs; i < nodes; ++i) {
    int64_t op = p.steps[i - kInputs].op;
    if (op >= MEAN && op != NORM) {
      p.soff[i] = p.saved_len;
      p.saved_len += p.len(int(i));
    }
  }
  return p;
}

inline int64_t offset(int kind, int64_t c, int64_t HW) { return kind == FULL ? c * HW : (kind == CH ? c : 0); }

// ---- element-wise ops: forward and vector-Jacobian products ----------------------------------------------

constexpr int64_t kShortRow = 32;  // below this, a vector loop's set-up and horizontal sum cost more than they save

// sum over j < n of f(j) (f may also store), as a vector loop only for long rows
template <typename A, typename F>
ALWAYS_INLINE A row_sum(int64_t n, F f) {
  A s = 0;
  if (n < kShortRow) {
    for (int64_t j = 0; j < n; ++j) s += f(j);
  } else {
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; ++j) s += f(j);
  }
  return s;
}

template <typename T>
ALWAYS_INLINE T unary_fwd(int64_t op, T a, T eps) {
  switch (op) {
    case NEG: return -a;
    case SIGMOID: return T(1) / (T(1) + vexp(-a));
    case TANH: return vtanh(a);
    case EXP: return vexp(a);
    case LOG: return sign(a) * vlog(std::abs(a) + eps);
    case ABS: return std::abs(a);
    case SQUARE: return a * a;
    default: return sign(a) * std::sqrt(std::abs(a));  // SQRT
  }
}

template <typename T, int OP>
void unary_loop(const T* a, T* y, int64_t n, T eps) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = unary_fwd<T>(OP, a[i], eps);
}

template <typename T>
void unary_forward(int64_t op, const T* a, T* y, int64_t n, T eps) {
  switch (op) {
    case NEG: return unary_loop<T, NEG>(a, y, n, eps);
    case SIGMOID: return unary_loop<T, SIGMOID>(a, y, n, eps);
    case TANH: return unary_loop<T, TANH>(a, y, n, eps);
    case EXP: return unary_loop<T, EXP>(a, y, n, eps);
    case LOG: return unary_loop<T, LOG>(a, y, n, eps);
    case ABS: return unary_loop<T, ABS>(a, y, n, eps);
    case SQUARE: return unary_loop<T, SQUARE>(a, y, n, eps);
    default: return unary_loop<T, SQRT>(a, y, n, eps);
  }
}

// d/da of each unary op times g, given a and y (autograd's formulas for the plain primitives)
template <typename T, int OP>
ALWAYS_INLINE T unary_vjp(T a, T y, T g, T eps) {
  switch (OP) {
    case NEG: return -g;
    case SIGMOID: return g * (T(1) - y) * y;
    case TANH: return g * (T(1) - y * y);
    case EXP: return g * y;
    case LOG: { T s = sign(a); return g * s / (std::abs(a) + eps) * s; }
    case ABS: return g * sign(a);
    case SQUARE: return g * a + g * a;
    default: { T s = sign(a); return g * s / (std::sqrt(std::abs(a)) * T(2)) * s; }  // SQRT: NaN at 0, as autograd
  }
}

template <typename T, int OP>
void unary_back_loop(const T* a, const T* y, const T* g, T* ga, int64_t n, T eps) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) ga[i] += unary_vjp<T, OP>(a[i], y[i], g[i], eps);
}

template <typename T>
void unary_backward(int64_t op, const T* a, const T* y, const T* g, T* ga, int64_t n, T eps) {
  switch (op) {
    case NEG: return unary_back_loop<T, NEG>(a, y, g, ga, n, eps);
    case SIGMOID: return unary_back_loop<T, SIGMOID>(a, y, g, ga, n, eps);
    case TANH: return unary_back_loop<T, TANH>(a, y, g, ga, n, eps);
    case EXP: return unary_back_loop<T, EXP>(a, y, g, ga, n, eps);
    case LOG: return unary_back_loop<T, LOG>(a, y, g, ga, n, eps);
    case ABS: return unary_back_loop<T, ABS>(a, y, g, ga, n, eps);
    case SQUARE: return unary_back_loop<T, SQUARE>(a, y, g, ga, n, eps);
    default: return unary_back_loop<T, SQRT>(a, y, g, ga, n, eps);
  }
}

template <typename T, int OP>
ALWAYS_INLINE T binary_fwd(T a, T b, T eps) {
  switch (OP) {
    case ADD: return a + b;
    case MUL: return a * b;
    case DIV: return a / (b + (b >= 0 ? eps : -eps));  // sign(0) = +1: the divisor is never 0
    case MAX: return (a != a || b != b) ? a + b : (a < b ? b : a);  // NaN-propagating, as torch.maximum
    default: return a * (T(1) / (T(1) + vexp(-(b * a))));  // SWISH
  }
}

// (da, db) times g; y is the op's value
template <typename T, int OP>
ALWAYS_INLINE void binary_vjp(T a, T b, T y, T g, T eps, T& da, T& db) {
  switch (OP) {
    case ADD: da = g; db = g; break;
    case MUL: da = g * b; db = g * a; break;
    case DIV: { T d = b + (b >= 0 ? eps : -eps); da = g / d; db = -(g * (y / d)); break; }
    case MAX: {  // ties share the gradient equally; exactly 0 for the smaller (autograd's rule)
      T w = a == b ? g * T(0.5) : g;
      da = a < b ? T(0) : w;
      db = a > b ? T(0) : w;
      break;
    }
    default: {  // SWISH: y = a s, s = sigmoid(b a): dy/da = s + b a s (1 - s), dy/db = a^2 s (1 - s)
      T sg = T(1) / (T(1) + vexp(-(b * a)));
      T gz = g * a * sg * (T(1) - sg);  // the gradient of b a
      da = g * sg + gz * b;
      db = gz * a;
    }
  }
}

// out (kind of the node) = f(a, b) with a and b broadcast from their kinds; one row per channel
template <typename T, int OP>
void binary_forward_op(const T* A, int ka, const T* B, int kb, T* Y, int ky, int64_t C, int64_t HW, T eps) {
  int64_t nc = ky == SC ? 1 : C, nh = ky == FULL ? HW : 1;
  for (int64_t c = 0; c < nc; ++c) {
    const T* pa = A + offset(ka, c, HW);
    const T* pb = B + offset(kb, c, HW);
    T* py = Y + c * nh;
    if (ka == FULL && kb == FULL) {
#pragma omp simd
      for (int64_t h = 0; h < nh; ++h) py[h] = binary_fwd<T, OP>(pa[h], pb[h], eps);
    } else if (ka == FULL) {
      T bv = pb[0];
#pragma omp simd
      for (int64_t h = 0; h < nh; ++h) py[h] = binary_fwd<T, OP>(pa[h], bv, eps);
    } else if (kb == FULL) {
      T av = pa[0];
#pragma omp simd
      for (int64_t h = 0; h < nh; ++h) py[h] = binary_fwd<T, OP>(av, pb[h], eps);
    } else {
      py[0] = binary_fwd<T, OP>(pa[0], pb[0], eps);
    }
  }
}

// ga, gb += the op's vector-Jacobian product, summed over the axes a or b was broadcast along; NA / NB: whether
// the gradient of a / b is wanted (template flags, so that the loops have no branch and vectorize)
template <typename T, int OP, bool NA, bool NB>
void binary_backward_op(const T* A, int ka, const T* B, int kb, const T* Y, const T* G, int ky, T* GA, T* GB,
                        int64_t C, int64_t HW, T eps) {
  int64_t nc = ky == SC ? 1 : C, nh = ky == FULL ? HW : 1;
  for (int64_t c = 0; c < nc; ++c) {
    const T* pa = A + offset(ka, c, HW);
    const T* pb = B + offset(kb, c, HW);
    const T* py = Y + c * nh;
    const T* pg = G + c * nh;
    T* qa = NA ? GA + offset(ka, c, HW) : nullptr;
    T* qb = NB ? GB + offset(kb, c, HW) : nullptr;
    if (nh == 1) {
      T da, db;
      binary_vjp<T, OP>(pa[0], pb[0], py[0], pg[0], eps, da, db);
      if (NA) qa[0] += da;
      if (NB) qb[0] += db;
    } else if (ka == ky && kb == ky) {
#pragma omp simd
      for (int64_t h = 0; h < nh; ++h) {
        T da, db;
        binary_vjp<T, OP>(pa[h], pb[h], py[h], pg[h], eps, da, db);
        if (NA) qa[h] += da;
        if (NB) qb[h] += db;
      }
    } else if (ka == ky) {  // b broadcast along (h, w): its gradient is a sum
      T bv = pb[0];
      T sb = row_sum<T>(nh, [&](int64_t h) {
        T da, db;
        binary_vjp<T, OP>(pa[h], bv, py[h], pg[h], eps, da, db);
        if (NA) qa[h] += da;
        return NB ? db : T(0);
      });
      if (NB) qb[0] += sb;
    } else {
      T av = pa[0];
      T sa = row_sum<T>(nh, [&](int64_t h) {
        T da, db;
        binary_vjp<T, OP>(av, pb[h], py[h], pg[h], eps, da, db);
        if (NB) qb[h] += db;
        return NA ? da : T(0);
      });
      if (NA) qa[0] += sa;
    }
  }
}

template <typename T, int OP>
void binary_backward_flags(const T* A, int ka, const T* B, int kb, const T* Y, const T* G, int ky, T* GA, T* GB,
                           int64_t C, int64_t HW, T eps) {
  if (GA && GB) return binary_backward_op<T, OP, true, true>(A, ka, B, kb, Y, G, ky, GA, GB, C, HW, eps);
  if (GA) return binary_backward_op<T, OP, true, false>(A, ka, B, kb, Y, G, ky, GA, GB, C, HW, eps);
  if (GB) return binary_backward_op<T, OP, false, true>(A, ka, B, kb, Y, G, ky, GA, GB, C, HW, eps);
}

// ---- statistics -------------------------------------------------------------------------------------------

// The reduction sets of a statistic of a value of kind ka: `sets` sets of `rows` rows of `cols` contiguous
// elements; set s starts at s * rows * cols. The statistic's value of set s goes to `rows` outputs
// (group statistics are one value per channel) or 1 (layer: one value; instance: rows == 1).
struct Sets {
  int64_t sets, rows, cols, out_per_set;
};

Sets reduction_sets(int64_t axes, int ka, int64_t C, int64_t HW, int64_t groups) {
  int64_t cols = ka == FULL ? HW : 1;
  int64_t chans = ka == SC ? 1 : C;
  if (axes == LAYER) return {1, chans, cols, 1};
  if (axes == INSTANCE) return {chans, 1, cols, 1};
  if (ka == SC) return {1, 1, 1, 1};  // a group statistic of a one-channel value: over (h, w) only
  return {groups, C / groups, cols, C / groups};
}

template <typename T>
void stat_forward(int64_t op, const T* A, T* Y, double* mu, const Sets& s, T eps) {
  int64_t k = s.rows * s.cols;
  for (int64_t i = 0; i < s.sets; ++i) {
    const T* a = A + i * k;
    double sum = op == RMS ? row_sum<double>(k, [&](int64_t j) { return double(a[j]) * double(a[j]); })
                           : row_sum<double>(k, [&](int64_t j) { return double(a[j]); });
    double m = sum / double(k), r;
    if (op == MEAN) {
      r = m;
    } else if (op == RMS) {
      r = std::sqrt(m + double(eps));
    } else {  // STD: sqrt(biased variance + eps), the variance about the mean in a second pass
      double ss = row_sum<double>(k, [&](int64_t j) {
        double d = double(a[j]) - m;
        return d * d;
      });
      r = std::sqrt(ss / double(k) + double(eps));
    }
    mu[i] = m;
    for (int64_t o = 0; o < s.out_per_set; ++o) Y[i * s.out_per_set + o] = T(r);
  }
}

template <typename T>
void stat_backward(int64_t op, const T* A, const T* Y, const T* G, const double* mu, T* GA, const Sets& s) {
  int64_t k = s.rows * s.cols;
  for (int64_t i = 0; i < s.sets; ++i) {
    double g = 0;
    for (int64_t o = 0; o < s.out_per_set; ++o) g += double(G[i * s.out_per_set + o]);
    const T* a = A + i * k;
    T* ga = GA + i * k;
    if (op == MEAN) {
      T w = T(g / double(k));
#pragma omp simd
      for (int64_t j = 0; j < k; ++j) ga[j] += w;
    } else {  // d std / d a = (a - mu) / (k std); d rms / d a = a / (k rms)
      T w = T(g / (double(k) * double(Y[i * s.out_per_set])));
      T m = op == STD ? T(mu[i]) : T(0);
#pragma omp simd
      for (int64_t j = 0; j < k; ++j) ga[j] += (a[j] - m) * w;
    }
  }
}

// NORM: y = (h - mu) / d per set, d = sigma + eps, sigma = sqrt(var + eps); (mu, sigma, d) kept per set in ms,
// or taken from there when `known`
template <typename T>
void norm_forward(const T* A, T* Y, double* ms, const Sets& s, T eps, bool known) {
  int64_t k = s.rows * s.cols;
  for (int64_t i = 0; i < s.sets; ++i) {
    const T* a = A + i * k;
    T* y = Y + i * k;
    if (known) {
      T mt = T(ms[3 * i]), inv = T(1.0 / ms[3 * i + 2]);
#pragma omp simd
      for (int64_t j = 0; j < k; ++j) y[j] = (a[j] - mt) * inv;
      continue;
    }
    double m = row_sum<double>(k, [&](int64_t j) { return double(a[j]); }) / double(k);
    double ss = row_sum<double>(k, [&](int64_t j) {
      double d = double(a[j]) - m;
      return d * d;
    });
    double sigma = std::sqrt(ss / double(k) + double(eps)), d = sigma + double(eps);
    ms[3 * i] = m;
    ms[3 * i + 1] = sigma;
    ms[3 * i + 2] = d;
    T mt = T(m), inv = T(1.0 / d);
#pragma omp simd
    for (int64_t j = 0; j < k; ++j) y[j] = (a[j] - mt) * inv;
  }
}

// dh = (g - mean(g)) / d - (h - mu) sum(g (h - mu)) / (d^2 k sigma): d/dh through the mean, the std and the division
template <typename T>
void norm_backward(const T* A, const T* G, const double* ms, T* GA, const Sets& s) {
  int64_t k = s.rows * s.cols;
  for (int64_t i = 0; i < s.sets; ++i) {
    const T *a = A + i * k, *g = G + i * k;
    T* ga = GA + i * k;
    double sigma = ms[3 * i + 1], d = ms[3 * i + 2];
    T mt = T(ms[3 * i]);
    double sg = row_sum<double>(k, [&](int64_t j) { return double(g[j]); });
    double sgh = row_sum<double>(k, [&](int64_t j) { return double(g[j]) * double(a[j] - mt); });
    T inv = T(1.0 / d), mean_g = T(sg / double(k)), coef = T(sgh / (double(k) * sigma * d * d));
#pragma omp simd
    for (int64_t j = 0; j < k; ++j) ga[j] += (g[j] - mean_g) * inv - (a[j] - mt) * coef;
  }
}

// ---- one sample ---------------------------------------------------------------------------------------------

template <typename T>
struct Workspace {
  std::vector<T> vals, grads;
  std::vector<double> mu;  // the per-set numbers (Program::moff) of the sample at hand
  std::vector<int64_t> voff;

  explicit Workspace(const Program& p) : mu(p.mu_len) {
    int64_t nodes = kInputs + int64_t(p.steps.size()), v = 0;
    voff.resize(nodes);
    for (int64_t i = 0; i < nodes; ++i) {
      voff[i] = v;
      v += i < kInputs ? (i == 1) : p.len(int(i));  // of the inputs only zero lives here
    }
    vals.resize(v);
    grads.resize(v);
  }
  T* val(int64_t i) { return vals.data() + voff[i]; }
  T* grad(int64_t i) { return grads.data() + voff[i]; }
  // zeros where gradients will be added: the nodes a gradient reaches among those run, except a full-shape
  // output, whose gradient the affine's backward sets
  void zero_grads(const Program& p) {
    for (int64_t i = kInputs; i < kInputs + p.run; ++i)
      if (p.need[i] && !(i == p.out && p.kind[i] == FULL)) std::fill(grad(i), grad(i) + p.len(int(i)), T(0));
  }
};

// where node i's values are for one sample: x's sample, zero (in the workspace), v0, v1, the workspace's,
// or SWISH's constant v = 1 (i = -1)
template <typename T>
const T* node_value(int64_t i, Workspace<T>& w, const T* x, const T* v0, const T* v1) {
  static const T one = T(1);
  return i < 0 ? &one : (i == 0 ? x : (i == 2 ? v0 : (i == 3 ? v1 : w.val(i))));
}

inline int node_kind(const Program& p, int64_t i) { return i < 0 ? int(SC) : p.kind[i]; }

template <typename T>
void binary_forward(int64_t op, const T* A, int ka, const T* B, int kb, T* Y, int ky, int64_t C, int64_t HW, T eps) {
  switch (op) {
    case ADD: return binary_forward_op<T, ADD>(A, ka, B, kb, Y, ky, C, HW, eps);
    case MUL: return binary_forward_op<T, MUL>(A, ka, B, kb, Y, ky, C, HW, eps);
    case DIV: return binary_forward_op<T, DIV>(A, ka, B, kb, Y, ky, C, HW, eps);
    case MAX: return binary_forward_op<T, MAX>(A, ka, B, kb, Y, ky, C, HW, eps);
    default: return binary_forward_op<T, SWISH>(A, ka, B, kb, Y, ky, C, HW, eps);
  }
}

template <typename T>
void binary_backward(int64_t op, const T* A, int ka, const T* B, int kb, const T* Y, const T* G, int ky, T* GA,
                     T* GB, int64_t C, int64_t HW, T eps) {
  switch (op) {
    case ADD: return binary_backward_flags<T, ADD>(A, ka, B, kb, Y, G, ky, GA, GB, C, HW, eps);
    case MUL: return binary_backward_flags<T, MUL>(A, ka, B, kb, Y, G, ky, GA, GB, C, HW, eps);
    case DIV: return binary_backward_flags<T, DIV>(A, ka, B, kb, Y, G, ky, GA, GB, C, HW, eps);
    case MAX: return binary_backward_flags<T, MAX>(A, ka, B, kb, Y, G, ky, GA, GB, C, HW, eps);
    default: return binary_backward_flags<T, SWISH>(A, ka, B, kb, Y, G, ky, GA, GB, C, HW, eps);
  }
}

// every node's value for one sample (node 0 is the sample of x itself). `saved`: what forward kept of this
// sample (backward: statistics are read, not recomputed), or nullptr (forward: they are computed and, with
// `keep`, written there)
template <typename T>
void sample_forward(const Program& p, Workspace<T>& w, const T* x, const T* v0, const T* v1, T eps,
                    const double* saved, double* keep) {
  if (saved) std::copy(saved, saved + p.mu_len, w.mu.begin());
  w.val(1)[0] = T(0);
  auto value = [&](int64_t i) { return node_value<T>(i, w, x, v0, v1); };
  auto kind = [&](int64_t i) { return node_kind(p, i); };
  for (int64_t k = 0; k < p.run; ++k) {
    const Step& s = p.steps[k];
    int64_t id = kInputs + int64_t(k);
    T* y = w.val(id);
    if (s.op <= SWISH) {
      binary_forward<T>(s.op, value(s.a), kind(s.a), value(s.b), kind(s.b), y, s.kind, p.C, p.HW, eps);
    } else if (s.op < MEAN) {
      unary_forward<T>(s.op, value(s.a), y, p.len(int(s.a)), eps);
    } else if (s.op == NORM) {
      norm_forward<T>(value(s.a), y, w.mu.data() + p.moff[id], reduction_sets(s.axes, FULL, p.C, p.HW, p.groups), eps,
                      saved != nullptr);
    } else if (saved) {
      std::copy(saved + p.soff[id], saved + p.soff[id] + p.len(int(id)), y);
    } else {
      stat_forward<T>(s.op, value(s.a), y, w.mu.data() + p.moff[id],
                      reduction_sets(s.axes, p.kind[s.a], p.C, p.HW, p.groups), s.op == MEAN ? T(0) : eps);
    }
  }
  if (keep) {
    std::copy(w.mu.begin(), w.mu.end(), keep);
    for (int64_t k = 0; k < p.run; ++k) {
      int64_t id = kInputs + k;
      if (p.soff[id] >= 0) std::copy(w.val(id), w.val(id) + p.len(int(id)), keep + p.soff[id]);
    }
  }
}

// y * weight + bias per channel, y broadcast from the output node's kind; max(y, 0) * weight + bias with `relu`
template <typename T>
void affine(const T* y, int ky, bool relu, const T* weight, const T* bias, T* out, int64_t C, int64_t HW) {
  for (int64_t c = 0; c < C; ++c) {
    T wc = weight[c], bc = bias[c];
    T* o = out + c * HW;
    if (relu) {
      const T* yc = y + c * HW;
#pragma omp simd
      for (int64_t h = 0; h < HW; ++h) o[h] = (yc[h] < T(0) ? T(0) : yc[h]) * wc + bc;  // NaN stays NaN
    } else if (ky == FULL) {
      const T* yc = y + c * HW;
#pragma omp simd
      for (int64_t h = 0; h < HW; ++h) o[h] = yc[h] * wc + bc;
    } else {
      T v = y[offset(ky, c, HW)] * wc + bc;
      for (int64_t h = 0; h < HW; ++h) o[h] = v;
    }
  }
}

// max(a, 0) * w + b, backward for one channel: g = dy * w * (1 above 0, 1/2 at a tie, 0 below: maximum's rule;
// g is the output's gradient, set here first); sd = sum(dy) and sdy = sum(dy * max(a, 0)) for dbias and dweight.
// The sums are in T: mixing float masks with double lanes does not vectorize.
template <typename T>
ALWAYS_INLINE void relu_affine_backward(const T* a, const T* dy, T w, T* g, int64_t n, double& sd, double& sdy) {
  T s = 0, sy = 0;
#pragma omp simd reduction(+ : s, sy)
  for (int64_t h = 0; h < n; ++h) {
    T av = a[h], f = av == T(0) ? T(0.5) : T(1);
    g[h] = dy[h] * w * (av < T(0) ? T(0) : f);
    s += dy[h];
    sy += dy[h] * (av < T(0) ? T(0) : av);  // NaN stays NaN
  }
  sd = double(s);
  sdy = double(sy);
}

template <typename T>
std::vector<at::Tensor> forward_impl(const at::Tensor& x, const at::Tensor& v0, const at::Tensor& v1,
                                     const at::Tensor& weight, const at::Tensor& bias, const Program& p, double eps) {
  int64_t N = x.size(0), C = p.C, HW = p.HW;
  at::Tensor out = at::empty_like(x);
  at::Tensor saved = at::empty({N, p.saved_len}, x.options().dtype(at::kDouble));
  double* sp = saved.data_ptr<double>();
  const T *xp = x.data_ptr<T>(), *v0p = v0.data_ptr<T>(), *v1p = v1.data_ptr<T>();
  const T *wp = weight.data_ptr<T>(), *bp = bias.data_ptr<T>();
  T* op = out.data_ptr<T>();
  int out_kind = p.kind[p.out];
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    Workspace<T> w(p);
    for (int64_t n = begin; n < end; ++n) {
      const T* xs = xp + n * C * HW;
      sample_forward<T>(p, w, xs, v0p, v1p, T(eps), nullptr, sp + n * p.saved_len);
      affine<T>(w.val(p.out), out_kind, p.relu_out, wp, bp, op + n * C * HW, C, HW);
    }
  });
  return {out, saved};
}

// One step's vector-Jacobian products, added to its arguments' gradients (grad(i): nullptr where none is wanted).
template <typename T, typename V, typename G>
void step_backward(const Program& p, int64_t k, Workspace<T>& w, V value, G grad, T e) {
  const Step& s = p.steps[k];
  int64_t id = kInputs + k, C = p.C, HW = p.HW;
  auto kind = [&](int64_t i) { return node_kind(p, i); };
  const T* g = w.grad(id);
  if (s.op <= SWISH) {
    binary_backward<T>(s.op, value(s.a), kind(s.a), value(s.b), kind(s.b), w.val(id), g, s.kind, grad(s.a),
                       grad(s.b), C, HW, e);
  } else if (s.op < MEAN) {
    if (T* ga = grad(s.a)) unary_backward<T>(s.op, value(s.a), w.val(id), g, ga, p.len(int(s.a)), e);
  } else if (s.op == NORM) {
    if (T* ga = grad(s.a))
      norm_backward<T>(value(s.a), g, w.mu.data() + p.moff[id], ga, reduction_sets(s.axes, FULL, C, HW, p.groups));
  } else if (T* ga = grad(s.a)) {
    stat_backward<T>(s.op, value(s.a), w.val(id), g, w.mu.data() + p.moff[id], ga,
                     reduction_sets(s.axes, p.kind[s.a], C, HW, p.groups));
  }
}

template <typename T>
std::vector<at::Tensor> backward_impl(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& v0,
                                      const at::Tensor& v1, const at::Tensor& weight, const at::Tensor& saved,
                                      const Program& p, double eps) {
  int64_t N = x.size(0), C = p.C, HW = p.HW, out_id = p.out;
  TORCH_CHECK(saved.dim() == 2 && saved.size(0) == N && saved.size(1) == p.saved_len && saved.is_contiguous() &&
              saved.scalar_type() == at::kDouble, "saved: what forward returned for this input");
  const double* sv = saved.data_ptr<double>();
  at::Tensor dx = at::empty_like(x);
  int64_t row = 2 * C + p.indep_len;  // per sample: dweight, dbias, the sample-independent nodes' gradients
  std::vector<double> part(N * row);
  const T *xp = x.data_ptr<T>(), *v0p = v0.data_ptr<T>(), *v1p = v1.data_ptr<T>(), *wp = weight.data_ptr<T>();
  const T* gp = dy.data_ptr<T>();
  T* dxp = dx.data_ptr<T>();
  int ko = p.kind[out_id];
  T e = T(eps);
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    Workspace<T> w(p);
    std::vector<T> gin(2 * C);  // this sample's gradients of v0 and v1
    for (int64_t n = begin; n < end; ++n) {
      const T* xs = xp + n * C * HW;
      const T* dys = gp + n * C * HW;
      T* dxs = dxp + n * C * HW;
      double* ps = part.data() + n * row;
      sample_forward<T>(p, w, xs, v0p, v1p, e, sv + n * p.saved_len, nullptr);
      w.zero_grads(p);
      std::fill(dxs, dxs + C * HW, T(0));
      std::fill(gin.begin(), gin.end(), T(0));
      auto value = [&](int64_t i) { return node_value<T>(i, w, xs, v0p, v1p); };
      auto grad = [&](int64_t i) -> T* {
        if (i < 0 || !p.need[i]) return nullptr;
        return i == 0 ? dxs : (i < kInputs ? gin.data() + (i - 2) * C : w.grad(i));
      };
      // the affine: dbias = sum dy, dweight = sum dy * y, and the output node's gradient dy * weight
      const T* y = w.val(out_id);
      T* gy = w.grad(out_id);
      for (int64_t c = 0; c < C; ++c) {
        const T* d = dys + c * HW;
        double sd, sdy;
        if (p.relu_out) {  // y = max(a, 0)
          relu_affine_backward<T>(y + c * HW, d, wp[c], gy + c * HW, HW, sd, sdy);
        } else if (ko == FULL) {
          sd = row_sum<double>(HW, [&](int64_t h) { return double(d[h]); });
          const T* yc = y + c * HW;
          T* g = gy + c * HW;
          T wc = wp[c];
          sdy = row_sum<double>(HW, [&](int64_t h) {
            g[h] = d[h] * wc;
            return double(d[h]) * double(yc[h]);
          });
        } else {
          sd = row_sum<double>(HW, [&](int64_t h) { return double(d[h]); });
          T yv = y[offset(ko, c, HW)];  // products first, as autograd sums them (an infinite y: inf or NaN alike)
          sdy = row_sum<double>(HW, [&](int64_t h) { return double(d[h] * yv); });
          gy[offset(ko, c, HW)] += T(sd) * wp[c];
        }
        ps[c] = sdy;
        ps[C + c] = sd;
      }
      for (int64_t k = p.run - 1; k >= 0; --k)
        if (p.need[kInputs + k] && p.dep[kInputs + k]) step_backward<T>(p, k, w, value, grad, e);
      for (int64_t i = 2; i < int64_t(p.ioff.size()); ++i) {
        if (p.ioff[i] < 0) continue;
        const T* gi = i < kInputs ? gin.data() + (i - 2) * C : w.grad(i);
        std::copy(gi, gi + p.len(int(i)), ps + 2 * C + p.ioff[i]);
      }
    }
  });
  auto sum_over_samples = [&](int64_t at, int64_t len, T* out) {  // in the samples' order, whatever the threads
    for (int64_t j = 0; j < len; ++j) {
      double acc = 0;
      for (int64_t n = 0; n < N; ++n) acc += part[n * row + at + j];
      out[j] = T(acc);
    }
  };
  at::Tensor dw = at::empty({C}, x.options()), db = at::empty({C}, x.options());
  sum_over_samples(0, C, dw.data_ptr<T>());
  sum_over_samples(C, C, db.data_ptr<T>());
  // the sample-independent nodes: their summed gradients, taken back to v0 and v1 once
  at::Tensor dv0 = at::zeros({C}, x.options()), dv1 = at::zeros({C}, x.options());
  T* gv[kInputs] = {nullptr, nullptr, dv0.data_ptr<T>(), dv1.data_ptr<T>()};
  if (N > 0) {
    Workspace<T> w(p);
    if (p.indep_steps) {
      sample_forward<T>(p, w, xp, v0p, v1p, e, sv, nullptr);
      w.zero_grads(p);
    }
    for (int64_t i = 2; i < int64_t(p.ioff.size()); ++i)
      if (p.ioff[i] >= 0) sum_over_samples(2 * C + p.ioff[i], p.len(int(i)), i < kInputs ? gv[i] : w.grad(i));
    auto value = [&](int64_t i) { return node_value<T>(i, w, xp, v0p, v1p); };
    auto grad = [&](int64_t i) -> T* {
      if (i < 0 || !p.need[i] || p.dep[i]) return nullptr;
      return i < kInputs ? gv[i] : w.grad(i);
    };
    for (int64_t k = p.run - 1; k >= 0 && p.indep_steps; --k)
      if (p.need[kInputs + k] && !p.dep[kInputs + k]) step_backward<T>(p, k, w, value, grad, e);
  }
  return {dx, dv0, dv1, dw, db};
}

// the program for x's shape, after checking x and the per-channel weight
Program program_for(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& prog, int64_t groups) {
  TORCH_CHECK(x.dim() == 4 && x.is_contiguous() && x.device().is_cpu(), "x: a contiguous NCHW CPU tensor");
  TORCH_CHECK(weight.numel() == x.size(1), "weight: one per channel");
  TORCH_CHECK(groups > 0 && x.size(1) % groups == 0, "groups must divide the channels");
  return make_program(prog, x.size(1), x.size(2) * x.size(3), groups);
}

std::vector<at::Tensor> graph_forward(const at::Tensor& x, const at::Tensor& v0, const at::Tensor& v1,
                                      const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& prog,
                                      int64_t groups, double eps) {
  Program p = program_for(x, weight, prog, groups);
  TORCH_CHECK(bias.numel() == x.size(1), "bias: one per channel");
  return AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "graph_forward", [&] {
    return forward_impl<scalar_t>(x, v0.contiguous(), v1.contiguous(), weight.contiguous(), bias.contiguous(), p, eps);
  });
}

std::vector<at::Tensor> graph_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& v0,
                                       const at::Tensor& v1, const at::Tensor& weight, const at::Tensor& saved,
                                       const at::Tensor& prog, int64_t groups, double eps) {
  Program p = program_for(x, weight, prog, groups);
  TORCH_CHECK(dy.sizes() == x.sizes() && dy.is_contiguous(), "dy: contiguous, the shape of x");
  return AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "graph_backward", [&] {
    return backward_impl<scalar_t>(dy, x, v0.contiguous(), v1.contiguous(), weight.contiguous(), saved, p, eps);
  });
}

}  // namespace

// The ops are declared, and their CPU kernels registered apart (not as one catch-all kernel), so that a shape-only
// ("fake") implementation can stand beside them: torch.compile then traces a model through the layer, with the
// program as one more input tensor (`evonorm.graph.cpp.compiled_layer`).
TORCH_LIBRARY(evonorm_graph, m) {
  m.def("forward(Tensor x, Tensor v0, Tensor v1, Tensor weight, Tensor bias, Tensor program, int groups, "
        "float eps) -> Tensor[]");
  m.def("backward(Tensor dy, Tensor x, Tensor v0, Tensor v1, Tensor weight, Tensor saved, Tensor program, "
        "int groups, float eps) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(evonorm_graph, CPU, m) {
  m.impl("forward", graph_forward);
  m.impl("backward", graph_backward);
}
