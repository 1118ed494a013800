/* The benchmark kernels of benchmarks/kernels/*.ir in plain C, for
 * benchmarks/scalar_loops.py: built with gcc -O3 -march=native -ffp-contract=off
 * into a shared object and called through ctypes, like the irc JIT's code.
 * Same algorithms, same types, same iteration order; -ffp-contract=off keeps
 * the float results identical to irc's (which never contracts a*b+c into an FMA
 * unless asked for fast math). */
#include <stdint.h>

int64_t mandelbrot(int32_t *counts, int64_t h, int64_t w, int32_t max_iter) {
    double dy = 3.0 / (double)h, dx = 3.0 / (double)w;
    int64_t total = 0;
    for (int64_t i = 0; i < h; i++) {
        double cy = -1.5 + (double)i * dy;
        for (int64_t j = 0; j < w; j++) {
            double cx = -2.0 + (double)j * dx;
            double zr = 0.0, zi = 0.0;
            int32_t k = 0;
            while (zr * zr + zi * zi <= 4.0 && k < max_iter) {
                double re = zr * zr - zi * zi + cx;
                zi = 2.0 * zr * zi + cy;
                zr = re;
                k++;
            }
            counts[i * w + j] = k;
            total += k;
        }
    }
    return total;
}

int64_t collatz(int64_t limit) {
    int64_t total = 0;
    for (int64_t n = 1; n < limit; n++) {
        int64_t x = n;
        while (x != 1) {
            x = (x % 2 == 0) ? x / 2 : 3 * x + 1;
            total++;
        }
    }
    return total;
}

int64_t sieve(int8_t *flags, int64_t n) {
    for (int64_t k = 0; k < n; k++) flags[k] = 1;
    for (int64_t k = 0; k < n && k < 2; k++) flags[k] = 0;
    for (int64_t p = 2; p * p < n; p++)
        if (flags[p])
            for (int64_t m = p * p; m < n; m += p) flags[m] = 0;
    int64_t count = 0;
    for (int64_t k = 0; k < n; k++) count += flags[k];
    return count;
}

int64_t add2(int64_t a, int64_t b) { return a + b; }
