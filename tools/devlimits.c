/*
 * ignis-devlimits: the card's own limits, measured, against which the
 * device benchmarks are read (issue 29, item 7): the device-to-device copy
 * rate (the memory roofline), the pinned host<->device copy rate each way
 * (what a window copy can reach), a cuBLAS bf16 matrix product's rate (what
 * prefill can reach), and the time of a device-to-device copy of a state's
 * size.
 *
 * Each figure is timed with events around one operation, after warm-ups,
 * repeated, and the median taken; inputs are random (never zeros, which can
 * run faster than real data). Prints key=value lines, one figure a line,
 * that tools/gpu-check.sh folds into its summary:
 *   device=, cc=, sms=, mem_bytes=, l2_bytes=, driver=, runtime=
 *   d2d_copy_GBps       bytes copied per second, 1 GiB cudaMemcpy
 *   d2d_rw_GBps         the same counting bytes read plus bytes written
 *   h2d_pinned_GBps     256 MiB from cudaHostAlloc'd memory to the device
 *   d2h_pinned_GBps     and back
 *   gemm_bf16_tflops    8192x8192x8192 cublasGemmEx, bf16 in and out,
 *                       fp32 accumulation
 *   d2d_128MiB_ms, d2d_34MiB_ms   one copy of that size, milliseconds
 * Exit 0 when every figure was measured, 77 when there is no device, 1 on
 * any CUDA or cuBLAS failure (the line before says which call).
 *
 *   ignis-devlimits [--reps N]     (default 20 timed runs per figure)
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(call)                                                                                   \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "devlimits: %s: %s\n", #call, cudaGetErrorString(e_));     \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)
#define CB(call)                                                                                   \
	do {                                                                                       \
		cublasStatus_t s_ = (call);                                                        \
		if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
			fprintf(stderr, "devlimits: %s: cuBLAS status %d\n", #call, (int)s_);      \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

#define MIB      ((size_t)1 << 20)
#define WARMUPS  3
#define MAX_REPS 200

static int reps = 20;
static cudaEvent_t ev0, ev1;

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

/* One timed operation: what it does to the stream given. */
typedef void (*op_fn)(void *ctx, cudaStream_t st);

/* The median of `reps` timed runs of op, in milliseconds. */
static double median_ms(op_fn op, void *ctx, cudaStream_t st)
{
	float t[MAX_REPS];
	for (int i = 0; i < WARMUPS; i++)
		op(ctx, st);
	CK(cudaStreamSynchronize(st));
	for (int i = 0; i < reps; i++) {
		CK(cudaEventRecord(ev0, st));
		op(ctx, st);
		CK(cudaEventRecord(ev1, st));
		CK(cudaEventSynchronize(ev1));
		CK(cudaEventElapsedTime(&t[i], ev0, ev1));
	}
	qsort(t, (size_t)reps, sizeof t[0], cmp_float);
	return reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
}

struct copy {
	void *dst;
	const void *src;
	size_t bytes;
	enum cudaMemcpyKind kind;
};

static void op_copy(void *ctx, cudaStream_t st)
{
	struct copy *c = ctx;
	CK(cudaMemcpyAsync(c->dst, c->src, c->bytes, c->kind, st));
}

struct gemm {
	cublasHandle_t h;
	int n;
	const void *a, *b;
	void *c;
};

static void op_gemm(void *ctx, cudaStream_t st)
{
	struct gemm *g = ctx;
	const float one = 1.0f, zero = 0.0f;
	(void)st; /* the handle is bound to the stream */
	CB(cublasGemmEx(g->h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &one, g->a, CUDA_R_16BF,
	                g->n, g->b, CUDA_R_16BF, g->n, &zero, g->c, CUDA_R_16BF, g->n,
	                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/* Random bytes from xorshift64, or random bf16 in [-1, 1) when bf16. */
static void fill_random(void *p, size_t bytes, uint64_t seed, int bf16)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	if (bf16) {
		uint16_t *h = p;
		for (size_t i = 0; i < bytes / 2; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			float f = (float)(x >> 40) / (float)(1 << 23) - 1.0f;
			uint32_t u;
			memcpy(&u, &f, sizeof u);
			h[i] = (uint16_t)(u >> 16);
		}
	} else {
		uint64_t *w = p;
		for (size_t i = 0; i < bytes / 8; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			w[i] = x;
		}
	}
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
			reps = atoi(argv[++i]);
			if (reps < 1 || reps > MAX_REPS) {
				fprintf(stderr, "devlimits: --reps takes 1 to %d\n", MAX_REPS);
				return 2;
			}
		} else {
			fprintf(stderr, "usage: ignis-devlimits [--reps N]\n");
			return 2;
		}
	}
	int ndev = 0;
	cudaError_t e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess || ndev == 0) {
		printf("device=none\n");
		fprintf(stderr, "devlimits: no device (%s)\n",
		        e != cudaSuccess ? cudaGetErrorString(e) : "none found");
		return 77;
	}
	struct cudaDeviceProp prop;
	int drv = 0, rt = 0;
	CK(cudaGetDeviceProperties(&prop, 0));
	CK(cudaDriverGetVersion(&drv));
	CK(cudaRuntimeGetVersion(&rt));
	printf("device=%s\ncc=%d.%d\nsms=%d\nmem_bytes=%zu\nl2_bytes=%d\n", prop.name, prop.major,
	       prop.minor, prop.multiProcessorCount, prop.totalGlobalMem, prop.l2CacheSize);
	printf("driver=%d.%d\nruntime=%d.%d\nreps=%d\n", drv / 1000, drv % 1000 / 10, rt / 1000,
	       rt % 1000 / 10, reps);
	fflush(stdout);

	cudaStream_t st;
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(cudaEventCreate(&ev0));
	CK(cudaEventCreate(&ev1));

	/* Device-to-device: 1 GiB for the rate; then a state's sizes. */
	size_t big = 1024 * MIB, host_bytes = 256 * MIB;
	void *d0, *d1, *h;
	CK(cudaMalloc(&d0, big));
	CK(cudaMalloc(&d1, big));
	CK(cudaHostAlloc(&h, host_bytes, cudaHostAllocDefault));
	fill_random(h, host_bytes, 1, 0);
	for (size_t off = 0; off < big; off += host_bytes)
		CK(cudaMemcpy((char *)d0 + off, h, host_bytes, cudaMemcpyHostToDevice));

	struct copy c = {d1, d0, big, cudaMemcpyDeviceToDevice};
	double ms = median_ms(op_copy, &c, st);
	printf("d2d_copy_GBps=%.1f\nd2d_rw_GBps=%.1f\n", (double)big / ms / 1e6,
	       2.0 * (double)big / ms / 1e6);
	c.bytes = 128 * MIB;
	printf("d2d_128MiB_ms=%.4f\n", median_ms(op_copy, &c, st));
	c.bytes = 34 * MIB; /* 35,651,584 bytes */
	printf("d2d_34MiB_ms=%.4f\n", median_ms(op_copy, &c, st));
	fflush(stdout);

	/* Pinned host <-> device, each way. */
	c = (struct copy){d1, h, host_bytes, cudaMemcpyHostToDevice};
	ms = median_ms(op_copy, &c, st);
	printf("h2d_pinned_GBps=%.1f\n", (double)host_bytes / ms / 1e6);
	c = (struct copy){h, d1, host_bytes, cudaMemcpyDeviceToHost};
	ms = median_ms(op_copy, &c, st);
	printf("d2h_pinned_GBps=%.1f\n", (double)host_bytes / ms / 1e6);
	fflush(stdout);
	CK(cudaFree(d1));
	CK(cudaFree(d0));

	/* bf16 GEMM, 8192 cube, fp32 accumulation, random operands. */
	int n = 8192;
	size_t mat = (size_t)n * n * 2; /* 128 MiB, as the pinned buffer */
	struct gemm g = {.n = n};
	void *a, *b, *cm;
	CK(cudaMalloc(&a, mat));
	CK(cudaMalloc(&b, mat));
	CK(cudaMalloc(&cm, mat));
	fill_random(h, mat, 2, 1);
	CK(cudaMemcpy(a, h, mat, cudaMemcpyHostToDevice));
	fill_random(h, mat, 3, 1);
	CK(cudaMemcpy(b, h, mat, cudaMemcpyHostToDevice));
	CB(cublasCreate(&g.h));
	CB(cublasSetStream(g.h, st));
	g.a = a, g.b = b, g.c = cm;
	ms = median_ms(op_gemm, &g, st);
	CK(cudaGetLastError());
	printf("gemm_bf16_ms=%.4f\ngemm_bf16_tflops=%.1f\n", ms,
	       2.0 * n * (double)n * n / ms / 1e9);
	CB(cublasDestroy(g.h));
	CK(cudaFree(cm));
	CK(cudaFree(b));
	CK(cudaFree(a));
	CK(cudaFreeHost(h));
	CK(cudaEventDestroy(ev1));
	CK(cudaEventDestroy(ev0));
	CK(cudaStreamDestroy(st));
	return 0;
}
