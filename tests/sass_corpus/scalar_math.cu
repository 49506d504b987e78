// archs: all
// Scalar arithmetic: the uniform datapath (loop-invariant math on kernel parameters), special
// functions (MUFU), the full-precision division slow path (CALL.REL to an internal subroutine),
// double precision, packed half/bf16 math, integer bit tricks and conversions.

extern "C" __global__ void uniform_loop(float* out, const float* in, int n, int stride, float scale)
{
    // Everything here except the loads depends only on parameters and blockIdx: uniform registers.
    const int base = blockIdx.x * stride + (n >> 2) * 3;
    const float s = scale * scale + 1.0f;
    float acc = 0.0f;
    for (int i = 0; i < n; ++i) {
        acc = fmaf(in[base + i * stride + threadIdx.x], s, acc);
    }
    if (n > 16) {
        acc *= 0.5f;
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

extern "C" __global__ void special_functions(float* out, const float* in)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float x = in[i];
    float r = __sinf(x) + __cosf(x) + __expf(x) + exp2f(x) + __log2f(x) + rsqrtf(x) + sqrtf(x);
    r += __fdividef(x, r) + __saturatef(x) + floorf(x) + truncf(r) + fminf(x, r) + fabsf(r);
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(x));
    r += t;
    r += 1.0f / x;   // IEEE division: FCHK plus a call to the slow path
    r += x / r;
    out[i] = r + static_cast<float>(__float2int_rn(x)) + __int2float_rz(i);
}

extern "C" __global__ void doubles(double* out, const double* in, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const double x = in[i];
    double r = fma(x, x, 1.0) * x + in[i + n];
    r = r / x;                  // DFMA-based division with a slow-path subroutine
    r += sqrt(r) + rint(x) + static_cast<double>(__double2float_rn(x));
    r += static_cast<double>(i) + __longlong_as_double(__double_as_longlong(x) ^ 1);
    out[i] = r > 2.0 ? r : -r;
}

extern "C" __global__ void packed_half(unsigned* out, const unsigned* a, const unsigned* b)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned x = a[i], y = b[i], r, e, m;
    asm("fma.rn.f16x2 %0, %1, %2, %1;" : "=r"(r) : "r"(x), "r"(y));
    asm("ex2.approx.f16x2 %0, %1;" : "=r"(e) : "r"(r));
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(m) : "r"(e), "r"(x));
    asm("sub.f16x2 %0, %1, %2;" : "=r"(r) : "r"(m), "r"(y));
#if __CUDA_ARCH__ >= 800
    asm("max.f16x2 %0, %1, %2;" : "=r"(r) : "r"(r), "r"(y));
    asm("fma.rn.bf16x2 %0, %1, %2, %1;" : "=r"(r) : "r"(r), "r"(y));
    asm("min.NaN.f16x2 %0, %1, %2;" : "=r"(r) : "r"(r), "r"(x));
#endif
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(__int_as_float(static_cast<int>(x))));
    out[i] = r ^ h;
}

extern "C" __global__ void integer_ops(unsigned* out, const unsigned* in, unsigned long long* wide, int d)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned x = in[i], y = in[i + 1];
    unsigned r = __popc(x) + __clz(y) + __brev(x) + __byte_perm(x, y, 0x5410) + __funnelshift_l(x, y, i);
    r += static_cast<unsigned>(__dp4a(static_cast<int>(x), static_cast<int>(y), i)) + __umulhi(x, y) + __sad(i, d, x);
    r += static_cast<unsigned>(__ffs(static_cast<int>(x))) + min(x, y) + (x / static_cast<unsigned>(d)) + (static_cast<int>(y) % d);
    const unsigned long long w = wide[i] * y + __umul64hi(wide[i], x);
    wide[i] = w + (w >> 33);
    out[i] = r ^ __vabsdiffu4(x, y);
}
