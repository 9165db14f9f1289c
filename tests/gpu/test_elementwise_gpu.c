/*
 * test_elementwise_gpu.c - kernels/elementwise.cu on the device against the
 * cpu backend's ops (gpu-worker/backend/cpu/cpu_ops.h), the reference:
 *
 *  1. kern_embed against cop_row, bit for bit, for every tensor type a model
 *     file holds (rows from quant_quantize: valid blocks), with tokens in
 *     any order and repeated, d_out 16-byte aligned (float4 stores) and not
 *     (scalar ones); odd row lengths of the plain types take the element
 *     loads. The decoding is exact (kernels/quant_blocks.h replays quant.c),
 *     so no tolerance.
 *  2. kern_rmsnorm against cop_rmsnorm on the weight decoded by cop_at, for
 *     F32, F16 and BF16 weights: |gpu - cpu| <= RTOL |cpu| + ATOL (the sum
 *     of squares is summed in another order; the rest of the formula is the
 *     cpu's step for step, so the bound of tests/gpu/test_rmsnorm_gpu.c
 *     holds). Batch invariance, bit for bit: each row's output is the same
 *     launched among all rows, alone (rows = 1), gathered among 7 (d_rows)
 *     and in place.
 *  3. kern_add against cop_add, bit for bit (one rounded add), aligned and
 *     not, and in place on itself.
 *  4. kern_swiglu against cop_swiglu: the device's expf is within 2 ulp,
 *     the libm's within 1, and the add, divide and multiply after it round
 *     on each side, so |gpu - cpu| <= SW_RTOL |cpu| + SW_ATOL (16 units of
 *     2^-24 relative; the worst distance in ulp is printed, typically 1 or
 *     2); and the in-place result (d_out = d_gate) is bit for bit the
 *     out-of-place one.
 *
 * Exits 77 (meson's "skipped") when no CUDA device is visible. Inputs are
 * pseudo-random from a printed seed (IGNIS_TEST_SEED overrides it).
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
#include "model/quant.h"

#define DEFAULT_SEED UINT64_C(20261206)
#define RTOL         1e-5
#define ATOL         1e-6
#define SW_RTOL      (16.0 * 0x1p-24)
#define SW_ATOL      0x1p-146 /* a subnormal result rounds absolutely */

#define CUDA_OK(call, label)                                                                       \
	do {                                                                                       \
		cudaError_t rc_ = (call);                                                          \
		if (rc_ != cudaSuccess) {                                                          \
			printf("FAIL %s: %s: %s\n", what, #call, cudaGetErrorString(rc_));         \
			goto label;                                                                \
		}                                                                                  \
	} while (0)

/* The floats of a and b that differ in bits; prints the first few. */
static size_t diff_bits(const char *what, const float *a, const float *b, size_t n)
{
	size_t nbad = 0;

	for (size_t i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && nbad++ < 3)
			printf("  %s: element %zu: device %.9g, reference %.9g\n", what, i,
			       (double)a[i], (double)b[i]);
	return nbad;
}

/* ---- kern_embed ---- */

struct embed_shape {
	const char *name;
	uint32_t n_in;
	uint32_t vocab;
	int n_tok;
	int plain_only; /* n_in not whole blocks of the block types */
};

static const struct embed_shape embed_shapes[] = {
    {"one K block", 256, 37, 19, 0},
    {"27b-shape hidden", 5120, 11, 9, 0},
    {"qwen3 0.6b hidden", 1024, 300, 64, 0},
    {"short row", 13, 20, 9, 1},
    {"odd row", 1001, 7, 5, 1},
    {"n_in 4 mod 8", 4100, 5, 6, 1},
};

static const uint32_t types[] = {QUANT_F32,  QUANT_F16,  QUANT_BF16, QUANT_Q8_0,
                                 QUANT_Q4_0, QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K};

static int embed_case(const struct quant_type *qt, const struct embed_shape *sh, uint64_t *seed)
{
	char what[128];
	const size_t row_bytes = (size_t)quant_row_bytes(qt->id, sh->n_in);
	const size_t wbytes = row_bytes * sh->vocab, on = (size_t)sh->n_tok * sh->n_in;
	float *src = malloc(sh->n_in * sizeof(float)), *ref = malloc(on * sizeof(float));
	float *y = malloc(on * sizeof(float)), *y1 = malloc(on * sizeof(float));
	uint32_t *tok = malloc((size_t)sh->n_tok * sizeof(uint32_t));
	uint8_t *wq = malloc(wbytes);
	void *d_w = NULL;
	uint32_t *d_tok = NULL;
	float *d_out = NULL;
	int bad = 1;

	snprintf(what, sizeof(what), "embed %s %s", qt->name, sh->name);
	if (!src || !ref || !y || !y1 || !tok || !wq) {
		printf("FAIL %s: out of host memory\n", what);
		goto out;
	}
	for (uint32_t r = 0; r < sh->vocab; r++) {
		for (uint32_t k = 0; k < sh->n_in; k++)
			src[k] = gt_next_unit(seed);
		quant_quantize(qt->id, src, wq + (size_t)r * row_bytes, sh->n_in);
	}
	/* any order, the last row, and repeats */
	for (int t = 0; t < sh->n_tok; t++)
		tok[t] = (uint32_t)(gt_next_u64(seed) % sh->vocab);
	tok[0] = sh->vocab - 1;
	if (sh->n_tok > 2)
		tok[sh->n_tok - 1] = tok[1];
	for (int t = 0; t < sh->n_tok; t++)
		cop_row((struct cop_w){.p = wq, .type = qt->id}, sh->n_in, tok[t],
		        ref + (size_t)t * sh->n_in);

	CUDA_OK(cudaMalloc(&d_w, wbytes), out);
	CUDA_OK(cudaMalloc((void **)&d_tok, (size_t)sh->n_tok * sizeof(uint32_t)), out);
	CUDA_OK(cudaMalloc((void **)&d_out, (on + 1) * sizeof(float)), out);
	CUDA_OK(cudaMemcpy(d_w, wq, wbytes, cudaMemcpyHostToDevice), out);
	CUDA_OK(
	    cudaMemcpy(d_tok, tok, (size_t)sh->n_tok * sizeof(uint32_t), cudaMemcpyHostToDevice),
	    out);

	/* d_out aligned, then one float in (4-byte aligned: scalar stores) */
	CUDA_OK((cudaError_t)kern_embed(d_w, qt->id, (int)sh->n_in, d_tok, sh->n_tok, d_out, NULL),
	        out);
	CUDA_OK(cudaDeviceSynchronize(), out);
	CUDA_OK(cudaMemcpy(y, d_out, on * sizeof(float), cudaMemcpyDeviceToHost), out);
	CUDA_OK(
	    (cudaError_t)kern_embed(d_w, qt->id, (int)sh->n_in, d_tok, sh->n_tok, d_out + 1, NULL),
	    out);
	CUDA_OK(cudaDeviceSynchronize(), out);
	CUDA_OK(cudaMemcpy(y1, d_out + 1, on * sizeof(float), cudaMemcpyDeviceToHost), out);

	size_t nbad = diff_bits(what, y, ref, on) + diff_bits(what, y1, ref, on);
	bad = nbad != 0;
	printf("%s %s (%u of %u rows, %d tokens): bits as cop_row, d_out aligned and not\n",
	       bad ? "not ok" : "ok", what, sh->n_in, sh->vocab, sh->n_tok);
out:
	cudaFree(d_out);
	cudaFree(d_tok);
	cudaFree(d_w);
	free(wq);
	free(tok);
	free(y1);
	free(y);
	free(ref);
	free(src);
	return bad;
}

/* ---- kern_rmsnorm ---- */

struct norm_shape {
	const char *name;
	int rows, cols;
	float scale; /* x uniform in [-scale, scale) */
	float eps;
};

static const struct norm_shape norm_shapes[] = {
    {"one element", 7, 1, 1.0f, 1e-6f},
    {"head dim", 16, 128, 1.0f, 1e-6f},
    {"cols not a multiple of 32", 7, 100, 1.0f, 1e-6f},
    {"one past a block", 9, 1025, 1.0f, 1e-6f},
    {"27b-shape hidden", 8, 5120, 1.0f, 1e-6f},
    {"ragged passes", 7, 5000, 1.0f, 1e-6f},
    {"large values", 8, 3000, 1000.0f, 1e-6f},
    {"eps dominates", 8, 777, 1e-4f, 1e-5f},
};

/* The weight vector in `type`, from floats in [0.5, 1.5). */
static void make_weight(uint32_t type, int cols, uint64_t *seed, void *out)
{
	for (int c = 0; c < cols; c++) {
		float v = 1.0f + 0.5f * gt_next_unit(seed);
		uint32_t u;

		if (type == QUANT_F32) {
			((float *)out)[c] = v;
		} else if (type == QUANT_F16) {
			((uint16_t *)out)[c] = quant_f32_to_f16(v);
		} else {
			memcpy(&u, &v, sizeof(u));
			((uint16_t *)out)[c] = (uint16_t)(u >> 16);
		}
	}
}

#define GATHER 7

static int norm_case(uint32_t wtype, const struct norm_shape *sh, uint64_t *seed)
{
	char what[128];
	const size_t n = (size_t)sh->rows * (size_t)sh->cols, xbytes = n * sizeof(float);
	const size_t wsz = wtype == QUANT_F32 ? 4 : 2, gbytes = GATHER * sh->cols * sizeof(float);
	float *x = malloc(xbytes), *wf = malloc(sh->cols * sizeof(float)), *ref = malloc(xbytes);
	float *y = malloc(xbytes), *y1 = malloc(xbytes), *yin = malloc(xbytes),
	      *yg = malloc(gbytes);
	void *w = malloc(wsz * sh->cols), *d_w = NULL;
	float *d_x = NULL, *d_y = NULL;
	uint32_t gidx[GATHER], *d_rows = NULL;
	struct kern_vec dv = {.d_p = NULL, .type = wtype};
	int bad = 1;

	snprintf(what, sizeof(what), "rmsnorm %s %s", quant_type_of(wtype)->name, sh->name);
	if (!x || !wf || !ref || !y || !y1 || !yin || !yg || !w) {
		printf("FAIL %s: out of host memory\n", what);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		x[i] = sh->scale * gt_next_unit(seed);
	make_weight(wtype, sh->cols, seed, w);
	for (int c = 0; c < sh->cols; c++)
		wf[c] = cop_at((struct cop_w){.p = w, .type = wtype}, (size_t)c);
	cop_rmsnorm_rows(x, wf, ref, (size_t)sh->rows, (size_t)sh->cols, sh->eps);
	for (int k = 0; k < GATHER; k++) /* any order, repeats */
		gidx[k] = (uint32_t)((5 * k + 3) % sh->rows);

	CUDA_OK(cudaMalloc(&d_w, wsz * sh->cols), out);
	CUDA_OK(cudaMalloc((void **)&d_x, xbytes), out);
	/* d_y holds every row, and the GATHER rows of the gathered launch */
	CUDA_OK(cudaMalloc((void **)&d_y, xbytes > gbytes ? xbytes : gbytes), out);
	CUDA_OK(cudaMalloc((void **)&d_rows, sizeof(gidx)), out);
	CUDA_OK(cudaMemcpy(d_w, w, wsz * sh->cols, cudaMemcpyHostToDevice), out);
	CUDA_OK(cudaMemcpy(d_x, x, xbytes, cudaMemcpyHostToDevice), out);
	CUDA_OK(cudaMemcpy(d_rows, gidx, sizeof(gidx), cudaMemcpyHostToDevice), out);
	dv.d_p = d_w;

	/* all rows */
	CUDA_OK((cudaError_t)kern_rmsnorm(d_x, dv, d_y, sh->rows, sh->cols, sh->eps, NULL, NULL),
	        out);
	CUDA_OK(cudaDeviceSynchronize(), out);
	CUDA_OK(cudaMemcpy(y, d_y, xbytes, cudaMemcpyDeviceToHost), out);
	/* each row alone */
	for (int r = 0; r < sh->rows; r++) {
		const size_t o = (size_t)r * (size_t)sh->cols;

		CUDA_OK((cudaError_t)kern_rmsnorm(d_x + o, dv, d_y + o, 1, sh->cols, sh->eps, NULL,
		                                  NULL),
		        out);
	}
	CUDA_OK(cudaDeviceSynchronize(), out);
	CUDA_OK(cudaMemcpy(y1, d_y, xbytes, cudaMemcpyDeviceToHost), out);
	/* gathered: GATHER rows of d_x into the first rows of d_y */
	CUDA_OK((cudaError_t)kern_rmsnorm(d_x, dv, d_y, GATHER, sh->cols, sh->eps, d_rows, NULL),
	        out);
	CUDA_OK(cudaDeviceSynchronize(), out);
	CUDA_OK(cudaMemcpy(yg, d_y, gbytes, cudaMemcpyDeviceToHost), out);
	/* in place */
	CUDA_OK((cudaError_t)kern_rmsnorm(d_x, dv, d_x, sh->rows, sh->cols, sh->eps, NULL, NULL),
	        out);
	CUDA_OK(cudaDeviceSynchronize(), out);
	CUDA_OK(cudaMemcpy(yin, d_x, xbytes, cudaMemcpyDeviceToHost), out);

	double worst = 0.0;
	size_t nbad = 0;
	for (size_t i = 0; i < n; i++) {
		double err = fabs((double)y[i] - (double)ref[i]);
		double lim = RTOL * fabs((double)ref[i]) + ATOL;
		double rel = err / (fabs((double)ref[i]) + ATOL);

		if (rel > worst)
			worst = rel;
		if (!(err <= lim) && nbad++ < 3) /* NaN fails too */
			printf("  %s: row %zu col %zu: gpu %.9g cpu %.9g\n", what,
			       i / (size_t)sh->cols, i % (size_t)sh->cols, (double)y[i],
			       (double)ref[i]);
	}
	nbad += diff_bits("rows 1 against all rows", y1, y, n);
	nbad += diff_bits("in place against out of place", yin, y, n);
	for (int k = 0; k < GATHER; k++)
		nbad += diff_bits("gathered against all rows", yg + (size_t)k * sh->cols,
		                  y + (size_t)gidx[k] * sh->cols, (size_t)sh->cols);
	bad = nbad != 0;
	printf("%s %s (%d x %d): worst relative error %.3g; bits the same alone, gathered, "
	       "in place\n",
	       bad ? "not ok" : "ok", what, sh->rows, sh->cols, worst);
out:
	cudaFree(d_rows);
	cudaFree(d_y);
	cudaFree(d_x);
	cudaFree(d_w);
	free(w);
	free(yg);
	free(yin);
	free(y1);
	free(y);
	free(ref);
	free(wf);
	free(x);
	return bad;
}

/* ---- kern_add, kern_swiglu ---- */

static const uint64_t ew_sizes[] = {
    1, 3, 4, 1000, 4097, (UINT64_C(1) << 20) + 5, (UINT64_C(1) << 22) + 3};

/* The distance of two floats in ulp (their places in the ordered floats). */
static uint64_t ulps(float a, float b)
{
	uint32_t ua, ub;
	int64_t oa, ob;

	memcpy(&ua, &a, sizeof(ua));
	memcpy(&ub, &b, sizeof(ub));
	oa = (ua & 0x80000000u) ? -(int64_t)(ua & 0x7fffffffu) : (int64_t)ua;
	ob = (ub & 0x80000000u) ? -(int64_t)(ub & 0x7fffffffu) : (int64_t)ub;
	return (uint64_t)(oa > ob ? oa - ob : ob - oa);
}

/* Gates over the activation's range, with its edges: zeros, where expf(-g)
 * overflows (g < -88.7), subnormal results. */
static float next_gate(uint64_t *s, uint64_t i)
{
	static const float edge[] = {0.0f,   -0.0f,  1e-30f, -1e-30f, 88.0f,
	                             -88.0f, -88.5f, -90.0f, 100.0f,  -87.0f};

	if (i % 97 == 5)
		return edge[(i / 97) % (sizeof(edge) / sizeof(edge[0]))];
	return 20.0f * gt_next_unit(s);
}

/* One size, inputs at element offset `off` of the buffers (off 1: not
 * 16-byte aligned, the scalar path). */
static int ew_case(uint64_t n, int off, uint64_t *seed)
{
	char what[128];
	const size_t bytes = (size_t)(n + 1) * sizeof(float);
	float *a = malloc(bytes), *b = malloc(bytes), *ref = malloc(bytes), *got = malloc(bytes);
	float *got2 = malloc(bytes);
	float *d_a = NULL, *d_b = NULL, *d_o = NULL;
	size_t nbad = 0;
	int bad = 1;

	snprintf(what, sizeof(what), "add/swiglu n %" PRIu64 " offset %d", n, off);
	if (!a || !b || !ref || !got || !got2) {
		printf("FAIL %s: out of host memory\n", what);
		goto out;
	}
	CUDA_OK(cudaMalloc((void **)&d_a, bytes), out);
	CUDA_OK(cudaMalloc((void **)&d_b, bytes), out);
	CUDA_OK(cudaMalloc((void **)&d_o, bytes), out);

	/* kern_add: d_a += d_b, then d_b += d_b (in place on itself) */
	for (uint64_t i = 0; i < n; i++) {
		a[i] = 100.0f * gt_next_unit(seed);
		b[i] = gt_next_unit(seed);
	}
	CUDA_OK(cudaMemcpy(d_a + off, a, n * sizeof(float), cudaMemcpyHostToDevice), out);
	CUDA_OK(cudaMemcpy(d_b + off, b, n * sizeof(float), cudaMemcpyHostToDevice), out);
	CUDA_OK((cudaError_t)kern_add(d_a + off, d_b + off, n, NULL), out);
	CUDA_OK((cudaError_t)kern_add(d_b + off, d_b + off, n, NULL), out);
	CUDA_OK(cudaDeviceSynchronize(), out);
	CUDA_OK(cudaMemcpy(got, d_a + off, n * sizeof(float), cudaMemcpyDeviceToHost), out);
	CUDA_OK(cudaMemcpy(got2, d_b + off, n * sizeof(float), cudaMemcpyDeviceToHost), out);
	cop_add(a, b, ref, (size_t)n);
	nbad += diff_bits("add against cop_add", got, ref, (size_t)n);
	cop_add(b, b, ref, (size_t)n);
	nbad += diff_bits("add in place on itself against cop_add", got2, ref, (size_t)n);

	/* kern_swiglu: out of place, then in place into the gate */
	for (uint64_t i = 0; i < n; i++) {
		a[i] = next_gate(seed, i);
		b[i] = 2.0f * gt_next_unit(seed);
	}
	CUDA_OK(cudaMemcpy(d_a + off, a, n * sizeof(float), cudaMemcpyHostToDevice), out);
	CUDA_OK(cudaMemcpy(d_b + off, b, n * sizeof(float), cudaMemcpyHostToDevice), out);
	CUDA_OK((cudaError_t)kern_swiglu(d_a + off, d_b + off, d_o + off, n, NULL), out);
	CUDA_OK((cudaError_t)kern_swiglu(d_a + off, d_b + off, d_a + off, n, NULL), out);
	CUDA_OK(cudaDeviceSynchronize(), out);
	CUDA_OK(cudaMemcpy(got, d_o + off, n * sizeof(float), cudaMemcpyDeviceToHost), out);
	CUDA_OK(cudaMemcpy(got2, d_a + off, n * sizeof(float), cudaMemcpyDeviceToHost), out);
	cop_swiglu(a, b, ref, (size_t)n);
	nbad += diff_bits("swiglu in place against out of place", got2, got, (size_t)n);

	uint64_t worst_ulp = 0, n_exact = 0;
	for (uint64_t i = 0; i < n; i++) {
		double err = fabs((double)got[i] - (double)ref[i]);
		uint64_t d = ulps(got[i], ref[i]);

		if (d > worst_ulp)
			worst_ulp = d;
		n_exact += d == 0;
		if (!(err <= SW_RTOL * fabs((double)ref[i]) + SW_ATOL) &&
		    !(isnan(got[i]) && isnan(ref[i])) && nbad++ < 3)
			printf("  %s: swiglu element %" PRIu64
			       " (g %.9g u %.9g): gpu %.9g cpu %.9g\n",
			       what, i, (double)a[i], (double)b[i], (double)got[i], (double)ref[i]);
	}
	bad = nbad != 0;
	printf("%s %s: add bits as cop_add; swiglu worst %" PRIu64 " ulp from cop_swiglu "
	       "(%.4f%% exact), in place the same bits\n",
	       bad ? "not ok" : "ok", what, worst_ulp, 100.0 * (double)n_exact / (double)n);
out:
	cudaFree(d_o);
	cudaFree(d_b);
	cudaFree(d_a);
	free(got2);
	free(got);
	free(ref);
	free(b);
	free(a);
	return bad;
}

/* ---- the launchers' argument checks (no kernel runs) ---- */

static int check(const char *name, int got, int want)
{
	if (got == want)
		return 0;
	printf("not ok argument check '%s': %d, want %d\n", name, got, want);
	return 1;
}

static int check_args(void)
{
	float *p = (float *)(uintptr_t)256; /* never dereferenced */
	const uint32_t *tp = (const uint32_t *)(uintptr_t)1024;
	const struct kern_vec w32 = {.d_p = p, .type = QUANT_F32};
	const struct kern_vec wq = {.d_p = p, .type = QUANT_Q8_0};
	const struct kern_vec wodd = {.d_p = (const uint8_t *)p + 1, .type = QUANT_BF16};
	const struct kern_vec wnull = {.d_p = NULL, .type = QUANT_F32};
	const int inval = (int)cudaErrorInvalidValue, mis = (int)cudaErrorMisalignedAddress;
	int bad = 0;

	bad |=
	    check("embed n_rows 0 does nothing", kern_embed(p, QUANT_Q4_K, 256, tp, 0, p, NULL), 0);
	bad |= check("embed unknown type", kern_embed(p, 3, 256, tp, 1, p, NULL), inval);
	bad |= check("embed n_in not whole blocks", kern_embed(p, QUANT_Q4_K, 128, tp, 1, p, NULL),
	             inval);
	bad |= check("embed n_in 0", kern_embed(p, QUANT_F32, 0, tp, 1, p, NULL), inval);
	bad |= check("embed negative n_rows", kern_embed(p, QUANT_F32, 8, tp, -1, p, NULL), inval);
	bad |= check("embed NULL tokens", kern_embed(p, QUANT_F32, 8, NULL, 1, p, NULL), inval);
	bad |= check("embed NULL weights", kern_embed(NULL, QUANT_F32, 8, tp, 1, p, NULL), inval);
	bad |= check("embed NULL out", kern_embed(p, QUANT_F32, 8, tp, 1, NULL, NULL), inval);
	bad |= check("embed Q5_K not 16-byte aligned",
	             kern_embed((const uint8_t *)p + 8, QUANT_Q5_K, 256, tp, 1, p, NULL), mis);
	bad |= check("embed F16 odd",
	             kern_embed((const uint8_t *)p + 1, QUANT_F16, 8, tp, 1, p, NULL), mis);

	bad |= check("rmsnorm rows 0 does nothing",
	             kern_rmsnorm(p, w32, p, 0, 16, 1e-6f, NULL, NULL), 0);
	bad |= check("rmsnorm rows -1", kern_rmsnorm(p, w32, p, -1, 16, 1e-6f, NULL, NULL), inval);
	bad |= check("rmsnorm cols 0", kern_rmsnorm(p, w32, p, 1, 0, 1e-6f, NULL, NULL), inval);
	bad |= check("rmsnorm NULL x", kern_rmsnorm(NULL, w32, p, 1, 16, 1e-6f, NULL, NULL), inval);
	bad |= check("rmsnorm NULL weight", kern_rmsnorm(p, wnull, p, 1, 16, 1e-6f, NULL, NULL),
	             inval);
	bad |= check("rmsnorm block-type weight", kern_rmsnorm(p, wq, p, 1, 32, 1e-6f, NULL, NULL),
	             inval);
	bad |= check("rmsnorm gather in place", kern_rmsnorm(p, w32, p, 1, 16, 1e-6f, tp, NULL),
	             inval);
	bad |= check("rmsnorm BF16 weight odd", kern_rmsnorm(p, wodd, p, 1, 16, 1e-6f, NULL, NULL),
	             mis);

	bad |= check("add n 0 does nothing", kern_add(p, p, 0, NULL), 0);
	bad |= check("add NULL x", kern_add(NULL, p, 4, NULL), inval);
	bad |= check("add NULL y", kern_add(p, NULL, 4, NULL), inval);
	bad |= check("swiglu n 0 does nothing", kern_swiglu(p, p, p, 0, NULL), 0);
	bad |= check("swiglu NULL gate", kern_swiglu(NULL, p, p, 4, NULL), inval);
	bad |= check("swiglu NULL up", kern_swiglu(p, NULL, p, 4, NULL), inval);
	bad |= check("swiglu NULL out", kern_swiglu(p, p, NULL, 4, NULL), inval);
	if (!bad)
		printf("ok argument checks\n");
	return bad;
}

int main(void)
{
	uint64_t seed = gt_start(DEFAULT_SEED);

	int failed = check_args();
	uint64_t s = seed;
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		const struct quant_type *qt = quant_type_of(types[t]);

		for (size_t i = 0; i < sizeof(embed_shapes) / sizeof(embed_shapes[0]); i++)
			if (qt->block_elems == 1 || !embed_shapes[i].plain_only)
				failed |= embed_case(qt, &embed_shapes[i], &s);
	}
	static const uint32_t wtypes[] = {QUANT_F32, QUANT_F16, QUANT_BF16};
	for (size_t t = 0; t < sizeof(wtypes) / sizeof(wtypes[0]); t++)
		for (size_t i = 0; i < sizeof(norm_shapes) / sizeof(norm_shapes[0]); i++)
			failed |= norm_case(wtypes[t], &norm_shapes[i], &s);
	for (size_t i = 0; i < sizeof(ew_sizes) / sizeof(ew_sizes[0]); i++)
		for (int off = 0; off <= 1; off++)
			failed |= ew_case(ew_sizes[i], off, &s);
	return failed ? 1 : 0;
}
