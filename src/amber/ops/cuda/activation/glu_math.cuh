// The gated activations' math in fp32, shared by the GLU passes (activation.cu) and the
// products that apply a GLU in their epilogue (glu_gemm.cu), so both give one result.
#pragma once

namespace amber::cuda {

// The exponential through ex2.approx and a fast divide: within a few ulp of the IEEE
// forms (well inside the f32 tests' 1e-5) at a fraction of their instructions; the
// SwiGLU kernels at a Kohaku row width were bound by issue, not by memory.
struct Silu {
  __device__ static float value(float x) { return __fdividef(x, 1.0f + __expf(-x)); }
  __device__ static float derivative(float x) {
    const float s = __fdividef(1.0f, 1.0f + __expf(-x));
    return s * (1.0f + x * (1.0f - s));
  }
};

struct GeluTanh {
  __device__ static float value(float x) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
  }
  __device__ static float derivative(float x) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    const float th = tanhf(u);
    const float du = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
  }
};

// The GLU's backward at one (gate, value) pair of gate_up, given dh: the gradients of
// the gate and of the value. One definition for every kernel that writes or quantizes
// dgate_up, so their results agree bit for bit.
template <class Act>
__device__ __forceinline__ void glu_backward_pair(float gate, float value, float dh, float& dgate, float& dvalue) {
  dgate = dh * value * Act::derivative(gate);
  dvalue = dh * Act::value(gate);
}

}  // namespace amber::cuda
