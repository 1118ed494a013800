/* The tensor workloads of benchmarks/tensor_cpu.py in plain C.
 *
 * Built by the script with `gcc -O3 -march=native -ffast-math -shared -fPIC`
 * and called through ctypes.  -ffast-math lets gcc vectorise the loops that
 * call expf/tanhf through glibc's vector math library (libmvec: the
 * _ZGV*expf/_ZGV*tanhf entry points), and reassociate the reductions of
 * softmax into vector lanes: this is the "C with fast math and a vector libm"
 * line that irc is measured against.  Every function writes into a buffer
 * the caller allocated, as irc does with out=.
 */

#include <math.h>
#include <stdint.h>

/* out = 1 / (1 + exp(-(a*b + c))) */
void sigmoid_fma(const float *restrict a, const float *restrict b, const float *restrict c,
                 float *restrict out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = 1.0f / (1.0f + expf(-(a[i] * b[i] + c[i])));
}

/* out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
void gelu_tanh(const float *restrict x, float *restrict out, int64_t n)
{
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        out[i] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
    }
}

/* softmax along each row of a rows x cols row-major matrix */
void softmax_rows(const float *restrict x, float *restrict out, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * cols;
        float *dst = out + r * cols;
        float m = -INFINITY;
        for (int64_t j = 0; j < cols; j++)
            m = row[j] > m ? row[j] : m;
        float s = 0.0f;
        for (int64_t j = 0; j < cols; j++) {
            float e = expf(row[j] - m);
            dst[j] = e;
            s += e;
        }
        float inv = 1.0f / s;
        for (int64_t j = 0; j < cols; j++)
            dst[j] *= inv;
    }
}

/* C = A B, A: m x k, B: k x n, row-major; the plain i-k-j loop that gcc vectorises
 * (no blocking: a reference point for a compiler's untuned loop, not a BLAS) */
void matmul_ikj(const float *restrict a, const float *restrict b, float *restrict c,
                int64_t m, int64_t k, int64_t n)
{
    for (int64_t i = 0; i < m; i++) {
        float *ci = c + i * n;
        for (int64_t j = 0; j < n; j++)
            ci[j] = 0.0f;
        for (int64_t p = 0; p < k; p++) {
            float aip = a[i * k + p];
            const float *bp = b + p * n;
            for (int64_t j = 0; j < n; j++)
                ci[j] += aip * bp[j];
        }
    }
}
