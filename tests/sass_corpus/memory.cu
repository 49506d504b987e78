// archs: all
// Memory of every width and kind (global, shared, constant, local, generic), cache hints,
// runtime-indexed local arrays (LDL/STL), and calls to non-inlined and recursive functions.

__constant__ float table[64];

struct alignas(16) Quad { float x, y, z, w; };

extern "C" __global__ void widths(Quad* q, double2* d2, int2* i2, const unsigned char* bytes,
                                  short* shorts, const float* ro, float* out)
{
    __shared__ Quad sq[128];
    __shared__ double sd[128];
    __shared__ unsigned char sb[128];
    const int t = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + t;
    Quad v = q[i];                      // LDG.E.128
    double2 w = d2[i];                  // LDG.E.128 of doubles
    int2 p = i2[i];                     // LDG.E.64
    sq[t] = v;                          // STS.128
    sd[t] = w.x + w.y;                  // STS.64
    sb[t] = bytes[i];                   // LDG.E.U8 / STS.U8
    __syncthreads();
    Quad u = sq[(t + 1) & 127];         // LDS.128
    const double e = sd[127 - t];       // LDS.64
    const unsigned char c = sb[t ^ 5];  // LDS.U8
    shorts[i] = static_cast<short>(shorts[i] + c);          // LDG.E.S16 / STG.E.U16
    const float k = table[t & 63] + table[3];               // indexed and direct constant loads
    const float n = __ldg(ro + i) + __ldcs(ro + i + 1) + __ldcg(ro + i + 2);
    __stcs(out + i, n);
    q[i] = Quad{u.x + k, u.y, u.z, u.w + static_cast<float>(e)};
    i2[i] = make_int2(p.y, p.x);
    d2[i] = make_double2(w.y, e);
    asm volatile("prefetch.global.L2 [%0];" :: "l"(ro + i + 64));
    volatile float* sys = out;
    sys[i + 1] = k;                     // volatile store
}

extern "C" __global__ void generic_and_local(float* out, const float* in, const int* idx, int use_shared)
{
    __shared__ float tile[256];
    float local[32];
    const int t = threadIdx.x;
    tile[t] = in[t];
    #pragma unroll 1
    for (int j = 0; j < 32; ++j) {
        local[j] = in[t + j] * static_cast<float>(j);
    }
    __syncthreads();
    const float* src = use_shared ? tile : in;               // generic pointer: LD.E
    float* dst = use_shared ? tile + 128 : out + 1024;
    dst[t & 127] = src[(t + 7) & 255];                       // generic store: ST.E
    out[t] = local[idx[t] & 31] + local[(idx[t] >> 5) & 31]; // LDL after STL
}

extern "C" __device__ __noinline__ float polynomial(const float* coeffs, int n, float x)
{
    float r = 0.0f;
    for (int j = n - 1; j >= 0; --j) {
        r = fmaf(r, x, coeffs[j]);
    }
    return r;
}

__device__ __noinline__ unsigned fibonacci(unsigned n)
{
    return n < 2 ? n : fibonacci(n - 1) + fibonacci(n - 2);  // recursion needs a stack frame
}

extern "C" __global__ void calls(float* out, const float* coeffs, const unsigned* n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = polynomial(coeffs, static_cast<int>(n[0]), out[i]) + static_cast<float>(fibonacci(n[i] & 15));
}

__device__ __noinline__ float scratch_lookup(const float* in, const int* idx, int t)
{
    float buffer[16];  // runtime-indexed: lives in this function's own stack frame
    #pragma unroll 1
    for (int j = 0; j < 16; ++j) {
        buffer[j] = in[t + j];
    }
    return buffer[idx[t] & 15] * buffer[idx[t + 1] & 15];
}

extern "C" __global__ void nested_frames(float* out, const float* in, const int* idx)
{
    float mine[8];  // the kernel's own frame, below the callee's
    const int t = threadIdx.x;
    #pragma unroll 1
    for (int j = 0; j < 8; ++j) {
        mine[j] = in[t * 8 + j];
    }
    out[t] = scratch_lookup(in, idx, t) + mine[idx[t + 2] & 7];
}

__device__ __noinline__ float twice(float x) { return 2.0f * x; }
__device__ __noinline__ float square(float x) { return x * x; }
__device__ float (*const operations[2])(float) = {twice, square};

extern "C" __global__ void indirect(float* out, const int* selector)
{
    const int t = threadIdx.x;
    float x = out[t];
    switch (selector[t] & 15) {  // dense switch: a jump table and an indirect branch (BRX)
    case 0: x += 1.0f; break;
    case 1: x *= 3.0f; break;
    case 2: x = sqrtf(x); break;
    case 3: x -= 7.0f; break;
    case 4: x = __expf(x); break;
    case 5: x = -x; break;
    case 6: x = fabsf(x) + 2.0f; break;
    case 7: x = __sinf(x); break;
    case 8: x = __cosf(x) * 3.0f; break;
    case 9: x = __log2f(x); break;
    case 10: x = rsqrtf(x) - 1.0f; break;
    case 11: x = x * x * x; break;
    case 12: x = floorf(x); break;
    case 13: x = __fdividef(1.0f, x); break;
    default: x = 0.5f * x; break;
    }
    out[t] = operations[selector[t] >> 3 & 1](x);  // indirect call through a function pointer
}
