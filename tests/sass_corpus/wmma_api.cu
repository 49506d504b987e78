// archs: all
// The nvcuda::wmma API (fragments, load/store, mma_sync) for f16, int8, and on Ampere and later
// bf16, tf32 and double inputs.
#include <mma.h>

using namespace nvcuda;

extern "C" __global__ void wmma_f16_s8(float* d, int* di, const half* a, const half* b, const signed char* ia,
                                       const signed char* ib)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);

    wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> ga;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> gb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, int> iacc;
    wmma::fill_fragment(iacc, 0);
    wmma::load_matrix_sync(ga, ia, 16);
    wmma::load_matrix_sync(gb, ib, 16);
    wmma::mma_sync(iacc, ga, gb, iacc, true);
    wmma::store_matrix_sync(di, iacc, 16, wmma::mem_col_major);
}

#if __CUDA_ARCH__ >= 800
extern "C" __global__ void wmma_ampere(float* d, double* dd, const __nv_bfloat16* a, const float* t, const double* x)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 1.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, a + 256, 16);
    wmma::mma_sync(acc, fa, fb, acc);

    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> ta;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> tb;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> tacc;
    wmma::load_matrix_sync(ta, t, 8);
    wmma::load_matrix_sync(tb, t + 128, 8);
    for (int i = 0; i < ta.num_elements; ++i) {
        ta.x[i] = wmma::__float_to_tf32(ta.x[i]);
    }
    wmma::load_matrix_sync(tacc, d, 16, wmma::mem_row_major);
    wmma::mma_sync(tacc, ta, tb, tacc);
    for (int i = 0; i < acc.num_elements; ++i) {
        acc.x[i] += tacc.x[i];
    }
    wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);

    wmma::fragment<wmma::matrix_a, 8, 8, 4, double, wmma::row_major> xa;
    wmma::fragment<wmma::matrix_b, 8, 8, 4, double, wmma::col_major> xb;
    wmma::fragment<wmma::accumulator, 8, 8, 4, double> xacc;
    wmma::fill_fragment(xacc, 0.0);
    wmma::load_matrix_sync(xa, x, 4);
    wmma::load_matrix_sync(xb, x + 32, 4);
    wmma::mma_sync(xacc, xa, xb, xacc);
    wmma::store_matrix_sync(dd, xacc, 8, wmma::mem_row_major);
}
#endif
