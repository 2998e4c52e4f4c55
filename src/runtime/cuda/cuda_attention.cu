// The CUDA AttentionKernel: launches the per-thread code of attention_math.h
// over segment pairs and stages the interface's float32 host buffers through
// device memory (bf16 inputs, float32 outputs). See fcp/cuda_attention.h.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "attention_math.h"
#include "fcp/cuda_attention.h"
#include "fcp/error.h"
#include "footprint.h"

namespace fcp {
namespace {

using gpu::Footprint;
using gpu::KernelDims;
using gpu::PairDesc;

void Check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw Error(ErrorCode::kBackend,
                std::string("cuda: ") + what + ": " + cudaGetErrorString(status));
}

// ---- device kernels ----------------------------------------------------------

__global__ void ToBf16Kernel(const float* in, uint16_t* out, int64_t n) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x)
    out[t] = gpu::FloatToBf16(in[t]);
}

// blockIdx.y picks the pair (pairs[order[y]]); x threads stride its work.
__global__ void ForwardKernel(KernelDims d, const PairDesc* pairs, const int32_t* order,
                              const uint16_t* q, const uint16_t* k, const uint16_t* v, float* o,
                              float* lse) {
  const PairDesc p = pairs[order[blockIdx.y]];
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;;
       t += int64_t{gridDim.x} * blockDim.x) {
    int64_t i;
    int32_t h;
    if (!gpu::ThreadWork(d, p, t, &i, &h)) return;
    gpu::ForwardRow(d, p, i, h, q, k, v, o, lse);
  }
}

__global__ void BackwardQueryKernel(KernelDims d, const PairDesc* pairs, const uint16_t* q,
                                    const uint16_t* k, const uint16_t* v, const uint16_t* d_o,
                                    const float* lse, const float* delta, float* dq) {
  const PairDesc p = pairs[blockIdx.y];
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;;
       t += int64_t{gridDim.x} * blockDim.x) {
    int64_t i;
    int32_t h;
    if (!gpu::ThreadWork(d, p, t, &i, &h)) return;
    gpu::BackwardQueryRow(d, p, i, h, q, k, v, d_o, lse, delta, dq);
  }
}

__global__ void BackwardKeyKernel(KernelDims d, const PairDesc* pairs, const uint16_t* q,
                                  const uint16_t* k, const uint16_t* v, const uint16_t* d_o,
                                  const float* lse, const float* delta, float* dk, float* dv) {
  const PairDesc p = pairs[blockIdx.y];
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;;
       t += int64_t{gridDim.x} * blockDim.x) {
    int64_t j;
    int32_t g;
    if (!gpu::KeyThreadWork(d, p, t, &j, &g)) return;
    gpu::BackwardKeyRow(d, p, j, g, q, k, v, d_o, lse, delta, dk, dv);
  }
}

// Deterministic pseudo-random bf16 in [-1, 1) (benchmark inputs).
__global__ void FillKernel(uint16_t* out, int64_t n, uint32_t seed) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(t) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    out[t] = gpu::FloatToBf16(static_cast<float>(x & 0xffffffu) / 8388608.0f - 1.0f);
  }
}

__global__ void SetKernel(float* out, int64_t n, float value) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < n;
       t += int64_t{gridDim.x} * blockDim.x)
    out[t] = value;
}

// ---- host side ------------------------------------------------------------

// Grow-only device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }
  template <typename T>
  T* Get(int64_t count) {
    const int64_t bytes = std::max<int64_t>(count, 1) * static_cast<int64_t>(sizeof(T));
    if (bytes > bytes_) {
      Check(cudaFree(ptr_), "cudaFree");
      ptr_ = nullptr;
      bytes_ = 0;
      Check(cudaMalloc(&ptr_, static_cast<size_t>(bytes)), "cudaMalloc");
      bytes_ = bytes;
    }
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

KernelDims KernelDimsOf(const AttentionDims& dims, const Mask& mask) {
  dims.validate();
  mask.validate();
  if (dims.head_dim > gpu::kMaxHeadDim)
    throw Error(ErrorCode::kInvalidArgument, "cuda attention: head_dim " +
                                                 std::to_string(dims.head_dim) + " exceeds " +
                                                 std::to_string(gpu::kMaxHeadDim));
  const int32_t kind = mask.kind == MaskKind::kCausal ? gpu::kMaskCausal
                       : mask.kind == MaskKind::kFull ? gpu::kMaskFull
                                                      : gpu::kMaskSlidingWindow;
  return {dims.heads_q, dims.heads_kv, dims.head_dim, dims.scale, kind, mask.window};
}

constexpr int64_t kMaxGridY = 65535;

dim3 GridFor(int64_t work, int32_t threads, size_t pairs) {
  const int64_t blocks = (work + threads - 1) / threads;
  return dim3(static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 1 << 20)),
              static_cast<unsigned>(pairs));
}

// The forward over `pairs` (host copy; `dev_pairs` is the device copy), one
// launch per wave of pairs with disjoint query rows (at most 65535 pairs).
void LaunchForward(cudaStream_t stream, int32_t threads, const KernelDims& d,
                   const std::vector<PairDesc>& pairs, const PairDesc* dev_pairs,
                   DeviceBuffer& order_buffer, const uint16_t* q, const uint16_t* k,
                   const uint16_t* v, float* o, float* lse) {
  std::vector<int32_t> order;
  std::vector<std::pair<size_t, size_t>> launches;  // (first index in order, count)
  for (const auto& wave : gpu::ForwardWaves(pairs))
    for (size_t b = 0; b < wave.size(); b += kMaxGridY) {
      const size_t n = std::min<size_t>(kMaxGridY, wave.size() - b);
      launches.push_back({order.size(), n});
      order.insert(order.end(), wave.begin() + static_cast<std::ptrdiff_t>(b),
                   wave.begin() + static_cast<std::ptrdiff_t>(b + n));
    }
  int32_t* dev_order = order_buffer.Get<int32_t>(static_cast<int64_t>(order.size()));
  // From pageable memory: the call returns once `order` has been read.
  Check(cudaMemcpyAsync(dev_order, order.data(), order.size() * sizeof(int32_t),
                        cudaMemcpyHostToDevice, stream),
        "copy pair order");
  for (const auto& [first, count] : launches) {
    int64_t max_work = 0;
    for (size_t x = first; x < first + count; ++x)
      max_work = std::max(max_work, pairs[static_cast<size_t>(order[x])].q_len * d.heads_q);
    ForwardKernel<<<GridFor(max_work, threads, count), threads, 0, stream>>>(
        d, dev_pairs, dev_order + first, q, k, v, o, lse);
    Check(cudaGetLastError(), "forward kernel launch");
  }
}

// The backward over `pairs`, a query pass (dq) and a key pass (dk, dv);
// each thread adds its row's total atomically, so every pair can share a
// launch.
void LaunchBackward(cudaStream_t stream, int32_t threads, const KernelDims& d,
                    const std::vector<PairDesc>& pairs, const PairDesc* dev_pairs,
                    const uint16_t* q, const uint16_t* k, const uint16_t* v, const uint16_t* d_o,
                    const float* lse, const float* delta, float* dq, float* dk, float* dv) {
  int64_t q_work = 0, k_work = 0;
  for (const PairDesc& p : pairs) {
    q_work = std::max(q_work, p.q_len * d.heads_q);
    k_work = std::max(k_work, p.k_len * d.heads_kv);
  }
  for (size_t b = 0; b < pairs.size(); b += kMaxGridY) {
    const size_t n = std::min<size_t>(kMaxGridY, pairs.size() - b);
    BackwardQueryKernel<<<GridFor(q_work, threads, n), threads, 0, stream>>>(
        d, dev_pairs + b, q, k, v, d_o, lse, delta, dq);
    Check(cudaGetLastError(), "backward query kernel launch");
    BackwardKeyKernel<<<GridFor(k_work, threads, n), threads, 0, stream>>>(
        d, dev_pairs + b, q, k, v, d_o, lse, delta, dk, dv);
    Check(cudaGetLastError(), "backward key kernel launch");
  }
}

class CudaAttentionKernel final : public AttentionKernel {
 public:
  using AttentionKernel::Backward;  // the bfloat16 overloads: not on CUDA (they throw)
  using AttentionKernel::Forward;
  explicit CudaAttentionKernel(const CudaKernelOptions& options) : options_(options) {
    options_.validate();
    const int32_t devices = CudaDeviceCount();
    if (options_.device >= devices)
      throw Error(ErrorCode::kBackend, "cuda attention: no CUDA device " +
                                           std::to_string(options_.device) + " (" +
                                           std::to_string(devices) + " found)");
    Check(cudaSetDevice(options_.device), "cudaSetDevice");
    Check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaAttentionKernel() override { cudaStreamDestroy(stream_); }

  void Forward(const AttentionDims& dims, const Mask& mask, std::span<const SegmentPair> pairs,
               const ForwardBuffers& io) override {
    const KernelDims d = KernelDimsOf(dims, mask);
    const Footprint f = gpu::FootprintOf(pairs);
    if (f.pairs.empty()) return;
    Check(cudaSetDevice(options_.device), "cudaSetDevice");
    const int64_t qn = f.q_rows * dims.q_row_floats(), kn = f.k_rows * dims.kv_row_floats();
    uint16_t* q = Upload(io.q + f.q_begin * dims.q_row_floats(), qn, q_);
    uint16_t* k = Upload(io.k + f.k_begin * dims.kv_row_floats(), kn, k_);
    uint16_t* v = Upload(io.v + f.k_begin * dims.kv_row_floats(), kn, v_);
    float* o = CopyIn(io.o + f.q_begin * dims.q_row_floats(), qn, o_);
    float* lse = CopyIn(io.lse + f.q_begin * dims.heads_q, f.q_rows * dims.heads_q, lse_);
    PairDesc* dev_pairs = CopyPairs(f.pairs);

    LaunchForward(stream_, options_.threads_per_block, d, f.pairs, dev_pairs, order_, q, k, v, o,
                  lse);
    // Copies to pageable host memory block the host, so the wait that drives
    // the caller's communication comes first.
    Finish("forward");
    CopyOut(o, io.o + f.q_begin * dims.q_row_floats(), qn);
    CopyOut(lse, io.lse + f.q_begin * dims.heads_q, f.q_rows * dims.heads_q);
    Check(cudaStreamSynchronize(stream_), "forward copy-out");
  }

  void Backward(const AttentionDims& dims, const Mask& mask, std::span<const SegmentPair> pairs,
                const BackwardBuffers& io) override {
    const KernelDims d = KernelDimsOf(dims, mask);
    const Footprint f = gpu::FootprintOf(pairs);
    if (f.pairs.empty()) return;
    Check(cudaSetDevice(options_.device), "cudaSetDevice");
    const int64_t qn = f.q_rows * dims.q_row_floats(), kn = f.k_rows * dims.kv_row_floats();
    const int64_t qoff = f.q_begin * dims.q_row_floats(), koff = f.k_begin * dims.kv_row_floats();
    const int64_t loff = f.q_begin * dims.heads_q, ln = f.q_rows * dims.heads_q;
    uint16_t* q = Upload(io.q + qoff, qn, q_);
    uint16_t* k = Upload(io.k + koff, kn, k_);
    uint16_t* v = Upload(io.v + koff, kn, v_);
    uint16_t* d_o = Upload(io.d_o + qoff, qn, do_);
    const float* lse = CopyIn(io.lse + loff, ln, lse_);
    const float* delta = CopyIn(io.delta + loff, ln, delta_);
    float* dq = CopyIn(io.dq + qoff, qn, o_);
    float* dk = CopyIn(io.dk + koff, kn, dk_);
    float* dv = CopyIn(io.dv + koff, kn, dv_);
    PairDesc* dev_pairs = CopyPairs(f.pairs);
    LaunchBackward(stream_, options_.threads_per_block, d, f.pairs, dev_pairs, q, k, v, d_o, lse,
                   delta, dq, dk, dv);
    Finish("backward");
    CopyOut(dq, io.dq + qoff, qn);
    CopyOut(dk, io.dk + koff, kn);
    CopyOut(dv, io.dv + koff, kn);
    Check(cudaStreamSynchronize(stream_), "backward copy-out");
  }

 private:
  // Waits for the stream, driving the caller's communication meanwhile.
  void Finish(const char* what) {
    if (options_.progress) {
      cudaError_t status;
      while ((status = cudaStreamQuery(stream_)) == cudaErrorNotReady) options_.progress();
      Check(status, what);
    } else {
      Check(cudaStreamSynchronize(stream_), what);
    }
  }

  // float32 host rows -> bf16 device rows (through a float32 staging buffer).
  uint16_t* Upload(const float* host, int64_t n, DeviceBuffer& target) {
    float* staging = CopyIn(host, n, staging_);
    uint16_t* out = target.Get<uint16_t>(n);
    const int64_t blocks = std::clamp<int64_t>((n + 255) / 256, 1, 4096);
    ToBf16Kernel<<<static_cast<unsigned>(blocks), 256, 0, stream_>>>(staging, out, n);
    Check(cudaGetLastError(), "bf16 conversion launch");
    // The staging buffer is reused by the next upload; stream order makes
    // the conversion read it first.
    return out;
  }
  float* CopyIn(const float* host, int64_t n, DeviceBuffer& target) {
    float* dev = target.Get<float>(n);
    Check(cudaMemcpyAsync(dev, host, static_cast<size_t>(n) * sizeof(float), cudaMemcpyHostToDevice,
                          stream_),
          "copy to device");
    return dev;
  }
  void CopyOut(const float* dev, float* host, int64_t n) {
    Check(cudaMemcpyAsync(host, dev, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost,
                          stream_),
          "copy to host");
  }
  PairDesc* CopyPairs(const std::vector<PairDesc>& pairs) {
    PairDesc* dev = pairs_.Get<PairDesc>(static_cast<int64_t>(pairs.size()));
    Check(cudaMemcpyAsync(dev, pairs.data(), pairs.size() * sizeof(PairDesc),
                          cudaMemcpyHostToDevice, stream_),
          "copy pairs");
    return dev;
  }

  CudaKernelOptions options_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer staging_, q_, k_, v_, do_, o_, lse_, delta_, dk_, dv_, pairs_, order_;
};

}  // namespace

int32_t CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device / no driver" status
    return 0;
  }
  return count;
}

namespace {

// Times `launch` on `stream` with CUDA events: one warm-up, then `repeats`.
double TimeOnStream(cudaStream_t stream, int32_t repeats, const std::function<void()>& launch) {
  launch();
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&stop), "cudaEventCreate");
  Check(cudaEventRecord(start, stream), "cudaEventRecord");
  for (int32_t r = 0; r < repeats; ++r) launch();
  Check(cudaEventRecord(stop, stream), "cudaEventRecord");
  Check(cudaEventSynchronize(stop), "timing");
  float ms = 0;
  Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms * 1e-3 / repeats;
}

unsigned FillBlocks(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + 255) / 256, 1, 4096));
}

}  // namespace

CudaAttentionTiming TimeCudaAttention(const AttentionDims& dims, const Mask& mask, int64_t tokens,
                                      int32_t repeats, bool backward,
                                      const CudaKernelOptions& options) {
  options.validate();
  const KernelDims d = KernelDimsOf(dims, mask);
  if (tokens < 1 || repeats < 1)
    throw Error(ErrorCode::kInvalidArgument,
                "time cuda attention: tokens and repeats must be >= 1");
  if (options.device >= CudaDeviceCount())
    throw Error(ErrorCode::kBackend,
                "time cuda attention: no CUDA device " + std::to_string(options.device));
  Check(cudaSetDevice(options.device), "cudaSetDevice");
  cudaStream_t stream;
  Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  const int64_t qn = tokens * dims.q_row_floats(), kn = tokens * dims.kv_row_floats(),
                ln = tokens * dims.heads_q;
  DeviceBuffer qb, kb, vb, dob, ob, lseb, deltab, dqb, dkb, dvb, pairb, orderb;
  uint16_t *q = qb.Get<uint16_t>(qn), *k = kb.Get<uint16_t>(kn), *v = vb.Get<uint16_t>(kn),
           *d_o = dob.Get<uint16_t>(qn);
  float *o = ob.Get<float>(qn), *lse = lseb.Get<float>(ln), *delta = deltab.Get<float>(ln);
  FillKernel<<<FillBlocks(qn), 256, 0, stream>>>(q, qn, 1);
  FillKernel<<<FillBlocks(kn), 256, 0, stream>>>(k, kn, 2);
  FillKernel<<<FillBlocks(kn), 256, 0, stream>>>(v, kn, 3);
  FillKernel<<<FillBlocks(qn), 256, 0, stream>>>(d_o, qn, 4);
  SetKernel<<<FillBlocks(ln), 256, 0, stream>>>(delta, ln, 0.1f);
  Check(cudaGetLastError(), "fill launch");
  // One sequence as one block pair: the plan's diagonal pair of a block.
  const std::vector<PairDesc> pairs = {{0, 0, 0, 0, tokens, tokens}};
  PairDesc* dev_pairs = pairb.Get<PairDesc>(1);
  Check(cudaMemcpyAsync(dev_pairs, pairs.data(), sizeof(PairDesc), cudaMemcpyHostToDevice, stream),
        "copy pairs");
  CudaAttentionTiming t;
  auto forward = [&] {
    SetKernel<<<FillBlocks(ln), 256, 0, stream>>>(lse, ln, gpu::NegInf());
    LaunchForward(stream, options.threads_per_block, d, pairs, dev_pairs, orderb, q, k, v, o, lse);
  };
  t.forward_s = TimeOnStream(stream, repeats, forward);
  if (backward) {
    float *dq = dqb.Get<float>(qn), *dk = dkb.Get<float>(kn), *dv = dvb.Get<float>(kn);
    t.backward_s = TimeOnStream(stream, repeats, [&] {
      LaunchBackward(stream, options.threads_per_block, d, pairs, dev_pairs, q, k, v, d_o, lse,
                     delta, dq, dk, dv);
    });
  }
  Check(cudaStreamSynchronize(stream), "benchmark");
  cudaStreamDestroy(stream);
  return t;
}

double MeasureBf16MatmulRate(int32_t device, int64_t n, int32_t repeats) {
  if (n < 16 || repeats < 1)
    throw Error(ErrorCode::kInvalidArgument, "bf16 matmul rate: n >= 16, repeats >= 1");
  if (device < 0 || device >= CudaDeviceCount())
    throw Error(ErrorCode::kBackend, "bf16 matmul rate: no CUDA device " + std::to_string(device));
  Check(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t stream;
  Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorCode::kBackend, "cublasCreate failed");
  cublasSetStream(handle, stream);
  DeviceBuffer ab, bb, cb;
  uint16_t *a = ab.Get<uint16_t>(n * n), *b = bb.Get<uint16_t>(n * n), *c = cb.Get<uint16_t>(n * n);
  FillKernel<<<FillBlocks(n * n), 256, 0, stream>>>(a, n * n, 5);
  FillKernel<<<FillBlocks(n * n), 256, 0, stream>>>(b, n * n, 6);
  const float alpha = 1.0f, beta = 0.0f;
  const int dim = static_cast<int>(n);
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  const double s = TimeOnStream(stream, repeats, [&] {
    const cublasStatus_t st = cublasGemmEx(
        handle, CUBLAS_OP_N, CUBLAS_OP_N, dim, dim, dim, &alpha, a, CUDA_R_16BF, dim, b,
        CUDA_R_16BF, dim, &beta, c, CUDA_R_16BF, dim, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) status = st;
  });
  cublasDestroy(handle);
  cudaStreamDestroy(stream);
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorCode::kBackend,
                "bf16 matmul rate: cublasGemmEx failed (status " + std::to_string(status) + ")");
  return 2.0 * static_cast<double>(n) * n * n / s;
}

std::string CudaDeviceName(int32_t device) {
  if (device < 0 || device >= CudaDeviceCount())
    throw Error(ErrorCode::kBackend, "cuda: no CUDA device " + std::to_string(device));
  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return prop.name;
}

void CudaKernelOptions::validate() const {
  if (device < 0)
    throw Error(ErrorCode::kInvalidArgument,
                "cuda kernel options: device " + std::to_string(device) + " < 0");
  if (threads_per_block < 32 || threads_per_block > 1024 || threads_per_block % 32 != 0)
    throw Error(ErrorCode::kInvalidArgument, "cuda kernel options: threads_per_block " +
                                                 std::to_string(threads_per_block) +
                                                 " is not a multiple of 32 in [32, 1024]");
}

std::unique_ptr<AttentionKernel> MakeCudaAttentionKernel(const CudaKernelOptions& options) {
  return std::make_unique<CudaAttentionKernel>(options);
}

}  // namespace fcp
