/*
 * test_rmsnorm_gpu.c - kern_rmsnorm_f32() on the device against the cpu
 * backend's cop_rmsnorm_rows() (gpu-worker/backend/cpu/cpu_ops.h), the
 * reference, over a table of shapes.
 *
 * Exits 77 (meson's "skipped") when no CUDA device is visible.
 *
 * Inputs are pseudo-random from a printed seed (IGNIS_TEST_SEED overrides
 * the fixed default, to repeat a run or to try others). Tolerance, per
 * element: |gpu - cpu| <= RTOL * |cpu| + ATOL. Both sides sum the squares in
 * fp32, in different orders (the cpu in 16 lanes and a fixed tree, the
 * device a strided slice per thread, then warp and block trees), and the
 * device takes rsqrtf (2 ulp) where the cpu divides by sqrtf. The device's
 * order replayed on the host (fused multiply-adds, shuffle trees, rsqrtf 2
 * ulp off) stays within 5e-7 relative of the cpu on every shape below.
 * RTOL = 1e-5 leaves a wide margin while still catching a dropped or doubled
 * element (at least 1/cols relative, over 6e-5 here). ATOL covers the
 * outputs near zero, where a relative bound means nothing.
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

#define RTOL         1e-5
#define ATOL         1e-6
#define DEFAULT_SEED UINT64_C(20261129)

struct shape {
	const char *name;
	int rows, cols;
	float scale; /* x uniform in [-scale, scale) */
	float eps;
};

static const struct shape shapes[] = {
    {"one element", 1, 1, 1.0f, 1e-6f},
    {"one warp", 3, 32, 1.0f, 1e-6f},
    {"cols not a multiple of 32", 7, 100, 1.0f, 1e-6f},
    {"under one block", 5, 1000, 1.0f, 1e-6f},
    {"one full block", 4, 1024, 1.0f, 1e-6f},
    {"one past a block", 3, 1025, 1.0f, 1e-6f},
    {"several passes", 2, 4096, 1.0f, 1e-6f},
    {"ragged passes", 9, 5000, 1.0f, 1e-6f},
    {"wide", 2, 16384, 1.0f, 1e-6f},
    {"many rows", 4096, 128, 1.0f, 1e-6f},
    {"large values", 8, 3000, 1000.0f, 1e-6f},
    {"eps dominates", 8, 777, 1e-4f, 1e-5f},
};

#define CUDA_OK(call, label)                                                                       \
	do {                                                                                       \
		cudaError_t rc_ = (call);                                                          \
		if (rc_ != cudaSuccess) {                                                          \
			printf("FAIL %s: %s: %s\n", sh->name, #call, cudaGetErrorString(rc_));     \
			goto label;                                                                \
		}                                                                                  \
	} while (0)

/* Runs one shape out of place and in place; returns 0 when both match. */
static int run_shape(const struct shape *sh, uint64_t *seed)
{
	size_t n = (size_t)sh->rows * (size_t)sh->cols;
	size_t xbytes = n * sizeof(float), wbytes = (size_t)sh->cols * sizeof(float);
	float *x = malloc(xbytes), *w = malloc(wbytes), *ref = malloc(xbytes), *y = malloc(xbytes);
	float *yin = malloc(xbytes);
	float *d_x = NULL, *d_w = NULL, *d_y = NULL;
	int bad = 1;

	if (!x || !w || !ref || !y || !yin) {
		printf("FAIL %s: out of host memory\n", sh->name);
		goto out_free;
	}
	for (size_t i = 0; i < n; i++)
		x[i] = sh->scale * gt_next_unit(seed);
	for (int c = 0; c < sh->cols; c++)
		w[c] = 1.0f + 0.5f * gt_next_unit(seed); /* [0.5, 1.5) */
	cop_rmsnorm_rows(x, w, ref, (size_t)sh->rows, (size_t)sh->cols, sh->eps);

	CUDA_OK(cudaMalloc((void **)&d_x, xbytes), out_free);
	CUDA_OK(cudaMalloc((void **)&d_w, wbytes), out_free);
	CUDA_OK(cudaMalloc((void **)&d_y, xbytes), out_free);
	CUDA_OK(cudaMemcpy(d_x, x, xbytes, cudaMemcpyHostToDevice), out_free);
	CUDA_OK(cudaMemcpy(d_w, w, wbytes, cudaMemcpyHostToDevice), out_free);

	CUDA_OK((cudaError_t)kern_rmsnorm_f32(d_x, d_w, d_y, sh->rows, sh->cols, sh->eps, NULL),
	        out_free);
	CUDA_OK(cudaDeviceSynchronize(), out_free);
	CUDA_OK(cudaMemcpy(y, d_y, xbytes, cudaMemcpyDeviceToHost), out_free);

	/* In place: d_x becomes its own output; the kernel is deterministic, so
	 * the bits must equal the out-of-place run. */
	CUDA_OK((cudaError_t)kern_rmsnorm_f32(d_x, d_w, d_x, sh->rows, sh->cols, sh->eps, NULL),
	        out_free);
	CUDA_OK(cudaDeviceSynchronize(), out_free);
	CUDA_OK(cudaMemcpy(yin, d_x, xbytes, cudaMemcpyDeviceToHost), out_free);

	double worst = 0.0;
	size_t nbad = 0;
	for (size_t i = 0; i < n; i++) {
		double err = fabs((double)y[i] - (double)ref[i]);
		double lim = RTOL * fabs((double)ref[i]) + ATOL;
		double rel = err / (fabs((double)ref[i]) + ATOL);

		if (rel > worst)
			worst = rel;
		if (!(err <= lim)) { /* NaN fails too */
			if (nbad++ < 5)
				printf("  %s: row %zu col %zu: gpu %.9g cpu %.9g\n", sh->name,
				       i / (size_t)sh->cols, i % (size_t)sh->cols, (double)y[i],
				       (double)ref[i]);
		}
	}
	if (memcmp(y, yin, xbytes) != 0) {
		printf("  %s: in place differs from out of place\n", sh->name);
		nbad++;
	}
	bad = nbad != 0;
	printf("%s %s (%d x %d): worst relative error %.3g, %zu bad\n", bad ? "not ok" : "ok",
	       sh->name, sh->rows, sh->cols, worst, nbad);

out_free:
	cudaFree(d_y);
	cudaFree(d_w);
	cudaFree(d_x);
	free(yin);
	free(y);
	free(ref);
	free(w);
	free(x);
	return bad;
}

/* The launcher's argument checks (no kernel runs). */
static int check_args(void)
{
	float *p = (float *)(uintptr_t)256; /* never dereferenced */
	int bad = 0;

	if (kern_rmsnorm_f32(p, p, p, 0, 16, 1e-6f, NULL) != 0) {
		printf("not ok rows 0 should do nothing\n");
		bad = 1;
	}
	if (kern_rmsnorm_f32(p, p, p, 1, 0, 1e-6f, NULL) != (int)cudaErrorInvalidValue) {
		printf("not ok cols 0 should be cudaErrorInvalidValue\n");
		bad = 1;
	}
	if (kern_rmsnorm_f32(p, p, p, -1, 16, 1e-6f, NULL) != (int)cudaErrorInvalidValue) {
		printf("not ok rows -1 should be cudaErrorInvalidValue\n");
		bad = 1;
	}
	if (!bad)
		printf("ok argument checks\n");
	return bad;
}

int main(void)
{
	uint64_t seed = gt_start(DEFAULT_SEED);
	printf("tolerance |gpu - cpu| <= %g * |cpu| + %g\n", RTOL, ATOL);

	int failed = check_args();
	uint64_t s = seed;
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
		failed |= run_shape(&shapes[i], &s);
	return failed ? 1 : 0;
}
