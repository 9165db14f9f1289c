/*
 * test_matvec_gpu.c - kern_matvec() on the device, for every tensor type a
 * model file holds, over a table of shapes.
 *
 * Exits 77 (meson's "skipped") when no CUDA device is visible.
 *
 *  1. Bit for bit against the host: kernels/quant_blocks.h's qb_row_dot
 *     replays the kernel's arithmetic (the same decoding source, the same
 *     fused multiply-adds, the same lanes and butterfly), so every output
 *     must equal it exactly. (The host test, suite 'unit', ties qb_row_dot to
 *     quant.c's decoding and to the cpu backend.)
 *  2. Batch invariance (the exactness contract): the same vector's outputs
 *     are the same bits launched alone (n_vec = 1), among 8, among 13 (two
 *     tiles of 8, the second short) and as the middle of 3 at an offset of
 *     the input buffer (a tile of 4 with one unused slot; for the plain
 *     types with odd n_in, an x that is only 4-byte aligned: the element
 *     path, not the vector one).
 *  3. Against the cpu backend's cop_matmul, the reference: within
 *     4 sqrt(m) 2^-24 sum|w x|, m = n_in/16 + n_in/32 + 16 (the host test
 *     explains the bound; the device adds nothing to it, being bit-equal to
 *     the host's replay).
 *
 * Weights are valid blocks (quant_quantize of uniform floats in [-1, 1));
 * x uniform in [-1, 1). Seeded (IGNIS_TEST_SEED overrides the default).
 *
 * `test_matvec_gpu --bench` also times each type on the 27B shape's FFN gate
 * (17408 rows of 5120) at n_vec 1, 4 and 8 and prints the weight bytes read
 * per second (a figure to hold against the card's copy rate; not a test).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu-worker/backend/cpu/cpu_ops.h"
#include "gpu_test.h"
#include "kernels/kernels.h"
#include "kernels/quant_blocks.h"
#include "model/quant.h"

#define DEFAULT_SEED UINT64_C(20261205)
#define NV           13 /* vectors in the input buffer */

struct shape {
	const char *name;
	uint32_t n_in;
	int n_out;
	int plain_only; /* n_in not whole blocks of the block types */
};

static const struct shape shapes[] = {
    {"one block row", 256, 64, 0},
    {"qwen3 0.6b q/o", 1024, 2048, 0},
    {"rows not a multiple of 4", 4096, 301, 0},
    {"27b-shape hidden", 5120, 1000, 0},
    {"27b-shape ffn down", 17408, 128, 0},
    {"short row", 13, 50, 1},
    {"odd row", 1001, 77, 1},
    {"n_in 4 mod 8", 4100, 33, 1},
};

static const uint32_t types[] = {QUANT_F32,  QUANT_F16,  QUANT_BF16, QUANT_Q8_0,
                                 QUANT_Q4_0, QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K};

#define CUDA_OK(call, label)                                                                       \
	do {                                                                                       \
		cudaError_t rc_ = (call);                                                          \
		if (rc_ != cudaSuccess) {                                                          \
			printf("FAIL %s %s: %s: %s\n", qt->name, sh->name, #call,                  \
			       cudaGetErrorString(rc_));                                           \
			goto label;                                                                \
		}                                                                                  \
	} while (0)

/* Launch on n_vec vectors starting at vector v0 of d_x, into d_y's first
 * n_vec rows, and copy them to host[v0 .. v0 + n_vec). */
static cudaError_t run(const struct quant_type *qt, const void *d_w, const float *d_x, float *d_y,
                       const struct shape *sh, int v0, int n_vec, float *host)
{
	cudaError_t rc = (cudaError_t)kern_matvec(d_w, qt->id, d_x + (size_t)v0 * sh->n_in, d_y,
	                                          (int)sh->n_in, sh->n_out, n_vec, NULL);

	if (rc == cudaSuccess)
		rc = cudaDeviceSynchronize();
	if (rc == cudaSuccess)
		rc = cudaMemcpy(host + (size_t)v0 * sh->n_out, d_y,
		                (size_t)n_vec * sh->n_out * sizeof(float), cudaMemcpyDeviceToHost);
	return rc;
}

/* Rows of y whose bits differ from ref; prints the first few. */
static size_t diff_bits(const struct quant_type *qt, const struct shape *sh, const char *what,
                        const float *y, const float *ref, int v0, int n_vec)
{
	size_t nbad = 0;

	for (int v = v0; v < v0 + n_vec; v++)
		for (int r = 0; r < sh->n_out; r++) {
			size_t i = (size_t)v * sh->n_out + (size_t)r;

			if (memcmp(&y[i], &ref[i], sizeof(float)) != 0 && nbad++ < 3)
				printf("  %s %s %s: vector %d row %d: device %.9g, host %.9g\n",
				       qt->name, sh->name, what, v, r, (double)y[i],
				       (double)ref[i]);
		}
	return nbad;
}

static int run_case(const struct quant_type *qt, const struct shape *sh, uint64_t *seed)
{
	const size_t row_bytes = (size_t)quant_row_bytes(qt->id, sh->n_in);
	const size_t wbytes = row_bytes * (size_t)sh->n_out;
	const size_t xn = (size_t)NV * sh->n_in, yn = (size_t)NV * (size_t)sh->n_out;
	float *src = malloc((size_t)sh->n_in * sizeof(float)), *x = malloc(xn * sizeof(float));
	float *ref = malloc(yn * sizeof(float)), *cpu = malloc(yn * sizeof(float));
	float *wdec = malloc((size_t)sh->n_in * sizeof(float));
	float *y_all = malloc(yn * sizeof(float)), *y_8 = malloc(yn * sizeof(float));
	float *y_1 = malloc(yn * sizeof(float)), *y_3 = malloc(yn * sizeof(float));
	uint8_t *wq = malloc(wbytes);
	void *d_w = NULL;
	float *d_x = NULL, *d_y = NULL;
	int bad = 1;

	if (!src || !x || !ref || !cpu || !wdec || !y_all || !y_8 || !y_1 || !y_3 || !wq) {
		printf("FAIL %s %s: out of host memory\n", qt->name, sh->name);
		goto out_free;
	}
	for (int r = 0; r < sh->n_out; r++) {
		for (uint32_t k = 0; k < sh->n_in; k++)
			src[k] = gt_next_unit(seed);
		quant_quantize(qt->id, src, wq + (size_t)r * row_bytes, sh->n_in);
	}
	for (size_t i = 0; i < xn; i++)
		x[i] = gt_next_unit(seed);
	/* the host's replay; the device takes the vector path where the host's
	 * alignment flag says, or the element one: the same bits either way */
	for (int v = 0; v < NV; v++)
		for (int r = 0; r < sh->n_out; r++)
			ref[(size_t)v * sh->n_out + (size_t)r] =
			    qb_row_dot(qt->id, wq + (size_t)r * row_bytes, x + (size_t)v * sh->n_in,
			               sh->n_in, qb_row_vec(qt->id, sh->n_in, 1));
	cop_matmul(NULL, (struct cop_w){.p = wq, .type = qt->id}, x, cpu, sh->n_in,
	           (size_t)sh->n_out, NV);

	CUDA_OK(cudaMalloc(&d_w, wbytes), out_free);
	CUDA_OK(cudaMalloc((void **)&d_x, xn * sizeof(float)), out_free);
	CUDA_OK(cudaMalloc((void **)&d_y, yn * sizeof(float)), out_free);
	CUDA_OK(cudaMemcpy(d_w, wq, wbytes, cudaMemcpyHostToDevice), out_free);
	CUDA_OK(cudaMemcpy(d_x, x, xn * sizeof(float), cudaMemcpyHostToDevice), out_free);

	CUDA_OK(run(qt, d_w, d_x, d_y, sh, 0, NV, y_all), out_free);
	CUDA_OK(run(qt, d_w, d_x, d_y, sh, 0, 8, y_8), out_free);
	for (int v = 0; v < NV; v++)
		CUDA_OK(run(qt, d_w, d_x, d_y, sh, v, 1, y_1), out_free);
	CUDA_OK(run(qt, d_w, d_x, d_y, sh, 5, 3, y_3), out_free);

	size_t nbad = diff_bits(qt, sh, "n_vec 13", y_all, ref, 0, NV);
	nbad += diff_bits(qt, sh, "n_vec 8", y_8, ref, 0, 8);
	nbad += diff_bits(qt, sh, "n_vec 1", y_1, ref, 0, NV);
	nbad += diff_bits(qt, sh, "n_vec 3 at 5", y_3, ref, 5, 3);

	const double tol = 4.0 * sqrt((double)sh->n_in / 16 + (double)sh->n_in / 32 + 16) * 0x1p-24;
	double worst = 0.0;
	for (int r = 0; r < sh->n_out; r++) {
		quant_dequantize(qt->id, wq + (size_t)r * row_bytes, wdec, sh->n_in);
		for (int v = 0; v < NV; v++) {
			const size_t i = (size_t)v * sh->n_out + (size_t)r;
			const float *xv = x + (size_t)v * sh->n_in;
			double scale = 0.0, err = fabs((double)y_all[i] - (double)cpu[i]);

			for (uint32_t k = 0; k < sh->n_in; k++)
				scale += fabs((double)wdec[k] * (double)xv[k]);
			if (scale > 0 && err / scale > worst)
				worst = err / scale;
			if (!(err <= tol * scale) && nbad++ < 3)
				printf("  %s %s: vector %d row %d: device %.9g, cpu %.9g\n",
				       qt->name, sh->name, v, r, (double)y_all[i], (double)cpu[i]);
		}
	}
	bad = nbad != 0;
	printf("%s %s %s (%u x %d): bits as the host's replay at n_vec 1, 3, 8, 13; "
	       "against cpu worst %.3g of sum|w x| (tolerance %.3g)\n",
	       bad ? "not ok" : "ok", qt->name, sh->name, sh->n_in, sh->n_out, worst, tol);

out_free:
	cudaFree(d_y);
	cudaFree(d_x);
	cudaFree(d_w);
	free(wq);
	free(y_3);
	free(y_1);
	free(y_8);
	free(y_all);
	free(wdec);
	free(cpu);
	free(ref);
	free(x);
	free(src);
	return bad;
}

/* The launcher's argument checks (no kernel runs but where said). */
static int check_args(void)
{
	const float *p = (const float *)(uintptr_t)256; /* never dereferenced */
	float *q = (float *)(uintptr_t)512;
	const float *odd = (const float *)(uintptr_t)258;
	const struct {
		const char *name;
		const void *w;
		unsigned type;
		const float *x;
		int n_in, n_out, n_vec, want;
	} rows[] = {
	    {"n_out 0 does nothing", p, QB_Q4_K, p, 256, 0, 1, 0},
	    {"n_vec 0 does nothing", p, QB_Q4_K, p, 256, 4, 0, 0},
	    {"unknown type", p, 3, p, 256, 4, 1, (int)cudaErrorInvalidValue},
	    {"n_in not whole blocks", p, QB_Q4_K, p, 128, 4, 1, (int)cudaErrorInvalidValue},
	    {"n_in 0", p, QB_F32, p, 0, 4, 1, (int)cudaErrorInvalidValue},
	    {"negative n_vec", p, QB_F32, p, 8, 4, -1, (int)cudaErrorInvalidValue},
	    {"Q4_K weights not 16-byte aligned", odd + 2, QB_Q4_K, p, 256, 4, 1,
	     (int)cudaErrorMisalignedAddress},
	    {"Q8_0 x not 16-byte aligned", p, QB_Q8_0, odd + 1, 32, 4, 1,
	     (int)cudaErrorMisalignedAddress},
	    {"F16 weights odd", (const uint8_t *)p + 1, QB_F16, p, 8, 4, 1,
	     (int)cudaErrorMisalignedAddress},
	};
	int bad = 0;

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		int got = kern_matvec(rows[i].w, rows[i].type, rows[i].x, q, rows[i].n_in,
		                      rows[i].n_out, rows[i].n_vec, NULL);

		if (got != rows[i].want) {
			printf("not ok argument check '%s': %d, want %d\n", rows[i].name, got,
			       rows[i].want);
			bad = 1;
		}
	}
	if (!bad)
		printf("ok argument checks\n");
	return bad;
}

/* The weight bytes per second of kern_matvec, `iters` launches timed with
 * events (after one warm-up), for one type and n_vec. */
static void bench_one(const struct quant_type *qt, int n_vec)
{
	const int n_in = 5120, n_out = 17408, iters = 20;
	const size_t wbytes = (size_t)quant_row_bytes(qt->id, (uint64_t)n_in) * (size_t)n_out;
	void *d_w = NULL;
	float *d_x = NULL, *d_y = NULL, ms = 0.0f;
	cudaEvent_t t0 = NULL, t1 = NULL;

	if (cudaMalloc(&d_w, wbytes) != cudaSuccess ||
	    cudaMalloc((void **)&d_x, (size_t)n_vec * n_in * sizeof(float)) != cudaSuccess ||
	    cudaMalloc((void **)&d_y, (size_t)n_vec * n_out * sizeof(float)) != cudaSuccess ||
	    cudaEventCreate(&t0) != cudaSuccess || cudaEventCreate(&t1) != cudaSuccess)
		goto out;
	/* zero weights and inputs: the timing does not depend on the values */
	cudaMemset(d_w, 0, wbytes);
	cudaMemset(d_x, 0, (size_t)n_vec * n_in * sizeof(float));
	kern_matvec(d_w, qt->id, d_x, d_y, n_in, n_out, n_vec, NULL);
	cudaEventRecord(t0, NULL);
	for (int i = 0; i < iters; i++)
		kern_matvec(d_w, qt->id, d_x, d_y, n_in, n_out, n_vec, NULL);
	cudaEventRecord(t1, NULL);
	if (cudaEventSynchronize(t1) == cudaSuccess &&
	    cudaEventElapsedTime(&ms, t0, t1) == cudaSuccess)
		printf("bench %s %d x %d n_vec %d: %.1f us, %.0f GB/s of weights\n", qt->name,
		       n_out, n_in, n_vec, 1e3 * ms / iters, (double)wbytes * iters / (ms * 1e6));
out:
	cudaEventDestroy(t1);
	cudaEventDestroy(t0);
	cudaFree(d_y);
	cudaFree(d_x);
	cudaFree(d_w);
}

int main(int argc, char **argv)
{
	uint64_t seed = gt_start(DEFAULT_SEED);

	int failed = check_args();
	uint64_t s = seed;
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		const struct quant_type *qt = quant_type_of(types[t]);

		for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
			if (qt->block_elems == 1 || !shapes[i].plain_only)
				failed |= run_case(qt, &shapes[i], &s);
	}
	if (argc > 1 && strcmp(argv[1], "--bench") == 0)
		for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
			for (int nv = 1; nv <= 8; nv *= 2)
				if (nv != 2)
					bench_one(quant_type_of(types[t]), nv);
	return failed ? 1 : 0;
}
