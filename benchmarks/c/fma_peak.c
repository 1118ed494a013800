/* The multiply-add peak of one core: GFLOP/s of independent fused multiply-add chains held in
 * registers, in the widest vectors the compiler targets (benchmarks/gemm.py builds this with
 * tensor_cpu.py's C flags: -march=native, or the --cpu level's): zmm with AVX-512, ymm with
 * AVX, xmm below (where the level has no FMA, a multiply and an add: its multiply-add peak).
 * CHAINS independent accumulators, with the two constants, fit the 16 registers AVX2 and SSE
 * have and cover the latency of two multiply-add units (4 cycles x 2 on today's x86-64 cores). */
#include <stdint.h>

#if defined(__AVX512F__)
#define VECTOR_BYTES 64
#elif defined(__AVX__)
#define VECTOR_BYTES 32
#else
#define VECTOR_BYTES 16
#endif
#define LANES (VECTOR_BYTES / 4)
#define CHAINS 12

typedef float vsf __attribute__((vector_size(VECTOR_BYTES)));

/* f32 lanes of one vector: flops a step = 2 * LANES * CHAINS. */
int fma_lanes(void) { return LANES; }
int fma_chains_count(void) { return CHAINS; }

/* Runs `steps` steps of CHAINS multiply-adds and returns a value that depends on every one,
 * so that none is optimised away. */
float fma_chains(int64_t steps) {
    vsf acc[CHAINS], scale, shift;
    for (int i = 0; i < LANES; i++) {
        scale[i] = 0.999999f;
        shift[i] = 1e-7f;
        for (int c = 0; c < CHAINS; c++)
            acc[c][i] = (float)(c + i);
    }
    for (int64_t s = 0; s < steps; s++) {
#pragma GCC unroll 12
        for (int c = 0; c < CHAINS; c++)
            acc[c] = acc[c] * scale + shift;
    }
    float sum = 0;
    for (int c = 0; c < CHAINS; c++)
        for (int i = 0; i < LANES; i++)
            sum += acc[c][i];
    return sum;
}
