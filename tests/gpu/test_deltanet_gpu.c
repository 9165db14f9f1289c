/*
 * test_deltanet_gpu.c - kern_lin_conv and kern_lin_recur (kernels/
 * deltanet.cu) on the device, against the cpu backend's layer
 * (gpu-worker/backend/cpu/layer_linear.c), for each storage layout of b and
 * a (FUSED, SPLIT, GROUPED), both key-head mappings, both decay storages,
 * the three weight-vector types, S in registers and in the state.
 *
 * Exits 77 (meson's "skipped") when no CUDA device is visible.
 *
 * Per case, a sequence of 9 tokens on a random initial state (linear layer
 * 1 of a two-layer state, so the layer offset counts):
 *  1. Against the cpu: llin_forward on the tokens gives x and the state;
 *     the device gets the same projections (computed here with the same
 *     cop_* calls as llin_forward, so the same bits), runs the two kernels,
 *     and lin_out and the residual add are done here as llin_forward does
 *     them. x and the state must agree within 1e-4 of each array's largest
 *     magnitude plus 1e-4 relative: the device does the cpu's operations in
 *     the cpu's order, only expf and log1pf differ by a few ulp.
 *  2. The exactness contract, bit for bit against the 9-token launch: the
 *     same tokens as launches of 4 then 5, as 9 single-token launches, and
 *     as the second segment of a launch whose first segment is another
 *     sequence (3 tokens, its own state, rows before ours): the convolved
 *     qkv, o and the state must be the same bits, and layer 0 of the state
 *     untouched.
 *
 * Seeded (IGNIS_TEST_SEED overrides the default).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "common/model.h"
#include "gpu-worker/backend/cpu/cpu_ops.h"
#include "gpu-worker/backend/cpu/layer_linear.h"
#include "gpu_test.h"
#include "kernels/kernels.h"
#include "model/linstate.h"
#include "model/quant.h"

#define DEFAULT_SEED UINT64_C(20261207)
#define N_TOK        9 /* our sequence's tokens */
#define N_OTHER      3 /* the other sequence's, rows 0 .. 2 */
#define ROWS         (N_OTHER + N_TOK)
#define EPS          1e-6f

struct tcase {
	const char *name;
	enum mdesc_arch arch;
	uint32_t lk, lv, dk, dv, K, hidden;
	uint32_t conv_type, vec_type; /* QUANT_F32, QUANT_F16 or QUANT_BF16 */
};

static const struct tcase cases[] = {
    {"ours: fused, 2/4 heads, 16x32", MDESC_ARCH_IGNIS, 2, 4, 16, 32, 4, 64, QUANT_BF16, QUANT_F32},
    {"qwen35: split, tiled, 2/6 heads, 48x24", MDESC_ARCH_QWEN35, 2, 6, 48, 24, 4, 64, QUANT_F16,
     QUANT_BF16},
    {"qwen3next: grouped, 2/4 heads, 160x40 (S in memory)", MDESC_ARCH_QWEN3NEXT, 2, 4, 160, 40, 3,
     64, QUANT_F32, QUANT_F16},
    {"qwen3.5 heads: 16/32, 128x128", MDESC_ARCH_QWEN35, 16, 32, 128, 128, 4, 128, QUANT_BF16,
     QUANT_BF16},
};

static float *randv(size_t n, float scale, float offset, uint64_t *s)
{
	float *v = malloc((n ? n : 1) * sizeof(float));

	for (size_t i = 0; v && i < n; i++)
		v[i] = offset + scale * gt_next_unit(s);
	return v;
}

/* n floats stored as `type` (bf16 truncated, f16 rounded): the bytes both
 * sides read. */
static void *store_as(uint32_t type, const float *f, size_t n)
{
	if (type == QUANT_F32) {
		float *p = malloc(n * sizeof(float));

		if (p)
			memcpy(p, f, n * sizeof(float));
		return p;
	}
	uint16_t *p = malloc(n * sizeof(uint16_t));

	for (size_t i = 0; p && i < n; i++) {
		uint32_t u;

		memcpy(&u, &f[i], sizeof(u));
		p[i] = type == QUANT_F16 ? quant_f32_to_f16(f[i]) : (uint16_t)(u >> 16);
	}
	return p;
}

static size_t type_bytes(uint32_t type)
{
	return type == QUANT_F32 ? 4 : 2;
}

/* A vector of weights on the device. */
static void *to_device(const void *h, size_t bytes)
{
	void *d = NULL;

	if (cudaMalloc(&d, bytes) != cudaSuccess)
		return NULL;
	if (cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
		cudaFree(d);
		return NULL;
	}
	return d;
}

/* Everything one case's device runs share. */
struct dev {
	struct kern_lin l; /* without segments */
	float *d_qkv, *d_z, *d_ba, *d_o;
	unsigned char *d_state; /* two slots */
	struct kern_seg *d_segs;
	size_t slot_bytes, qkv_bytes, z_bytes, ba_bytes, o_bytes;
	/* the host copies uploaded before every run */
	const float *qkv, *z, *ba, *state;
};

/* Upload the raw inputs and the initial states. */
static cudaError_t dev_reset(const struct dev *d)
{
	cudaError_t rc = cudaMemcpy(d->d_qkv, d->qkv, d->qkv_bytes, cudaMemcpyHostToDevice);

	if (rc == cudaSuccess)
		rc = cudaMemcpy(d->d_z, d->z, d->z_bytes, cudaMemcpyHostToDevice);
	if (rc == cudaSuccess)
		rc = cudaMemcpy(d->d_ba, d->ba, d->ba_bytes, cudaMemcpyHostToDevice);
	if (rc == cudaSuccess)
		rc = cudaMemcpy(d->d_state, d->state, 2 * d->slot_bytes, cudaMemcpyHostToDevice);
	if (rc == cudaSuccess)
		rc = cudaMemset(d->d_o, 0, d->o_bytes);
	return rc;
}

/* One launch of both kernels over `n` segments: {row0, n_tok, slot}. */
static cudaError_t dev_launch(struct dev *d, const uint32_t (*segs)[3], uint32_t n)
{
	struct kern_seg hs[2];
	struct kern_lin l = d->l;
	cudaError_t rc;

	memset(hs, 0, sizeof(hs));
	for (uint32_t i = 0; i < n; i++) {
		hs[i].pos0 = 0;
		hs[i].row0 = segs[i][0];
		hs[i].n_tok = segs[i][1];
		hs[i].d_state = d->d_state + (size_t)segs[i][2] * d->slot_bytes;
	}
	rc = cudaMemcpy(d->d_segs, hs, n * sizeof(hs[0]), cudaMemcpyHostToDevice);
	if (rc != cudaSuccess)
		return rc;
	l.d_segs = d->d_segs;
	l.n_segs = n;
	rc = (cudaError_t)kern_lin_conv(&l, NULL);
	if (rc == cudaSuccess)
		rc = (cudaError_t)kern_lin_recur(&l, NULL);
	if (rc == cudaSuccess)
		rc = cudaDeviceSynchronize();
	return rc;
}

/* A run's results: the convolved qkv, o and both slots' states. */
struct result {
	float *qkv, *o, *state;
};

static cudaError_t dev_fetch(const struct dev *d, struct result *r)
{
	cudaError_t rc = cudaMemcpy(r->qkv, d->d_qkv, d->qkv_bytes, cudaMemcpyDeviceToHost);

	if (rc == cudaSuccess)
		rc = cudaMemcpy(r->o, d->d_o, d->o_bytes, cudaMemcpyDeviceToHost);
	if (rc == cudaSuccess)
		rc = cudaMemcpy(r->state, d->d_state, 2 * d->slot_bytes, cudaMemcpyDeviceToHost);
	return rc;
}

/* Elements whose bits differ; prints the first few. */
static size_t diff_bits(const char *what, const float *a, const float *b, size_t n)
{
	size_t bad = 0;

	for (size_t i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && bad++ < 3)
			printf("  %s [%zu]: %.9g, want %.9g\n", what, i, (double)a[i],
			       (double)b[i]);
	return bad;
}

/* Elements off by more than 1e-4 max|ref| + 1e-4 |ref|. */
static size_t diff_tol(const char *what, const float *got, const float *ref, size_t n)
{
	double maxabs = 0.0, worst = 0.0;
	size_t bad = 0;

	for (size_t i = 0; i < n; i++)
		maxabs = fmax(maxabs, fabs((double)ref[i]));
	for (size_t i = 0; i < n; i++) {
		double e = fabs((double)got[i] - (double)ref[i]);

		worst = fmax(worst, e);
		if (!(e <= 1e-4 * maxabs + 1e-4 * fabs((double)ref[i])) && bad++ < 3)
			printf("  %s [%zu]: device %.9g, cpu %.9g\n", what, i, (double)got[i],
			       (double)ref[i]);
	}
	printf("  %s: largest difference %.3g (largest magnitude %.3g)\n", what, worst, maxabs);
	return bad;
}

static int run_case(const struct tcase *tc, uint64_t *seed)
{
	struct mdesc m;
	struct mdesc_lin_state ls;
	int failed = 1;

	memset(&m, 0, sizeof(m));
	m.arch = tc->arch;
	m.layers = 2;
	m.hidden = tc->hidden;
	m.lin_k_heads = tc->lk;
	m.lin_v_heads = tc->lv;
	m.lin_dk = tc->dk;
	m.lin_dv = tc->dv;
	m.conv_kernel = tc->K;
	m.rms_eps = EPS;
	if (!mdesc_lin_state(&m, &ls))
		return 1;

	const size_t H = tc->hidden, lv = tc->lv, r = tc->lv / tc->lk, dv = tc->dv;
	const size_t lvdv = lv * dv, qkv = 2 * (size_t)tc->lk * tc->dk + lvdv;
	const enum mdesc_lin_ba lay = mdesc_lin_ba(&m);
	const size_t ba_rows = lay == MDESC_BA_SPLIT ? lv : 2 * lv;
	const size_t slot_floats = 2 * ls.layer_floats;
	const float wscale = 1.0f / sqrtf((float)H);

	printf("%s\n", tc->name);

	/* The weights: matrices F32, vectors in the case's types. */
	float *attn_norm = randv(H, 0.1f, 1.0f, seed);
	float *w_qkv = randv(qkv * H, wscale, 0.0f, seed);
	float *w_z = randv(lvdv * H, wscale, 0.0f, seed);
	float *w_ba = randv(ba_rows * H, wscale, 0.0f, seed);
	float *w_alpha = randv(lv * H, wscale, 0.0f, seed);
	float *w_out = randv(H * lvdv, 1.0f / sqrtf((float)lvdv), 0.0f, seed);
	float *conv_f = randv(qkv * tc->K, 0.5f, 0.0f, seed);
	float *alog_f = randv(lv, 1.0f, 0.0f, seed);
	float *dtb_f = randv(lv, 1.0f, 0.0f, seed);
	float *norm_f = randv(dv, 0.2f, 1.0f, seed);
	float *x = randv(N_TOK * H, 1.0f, 0.0f, seed);
	float *state0 = randv(2 * slot_floats, 0.3f, 0.0f, seed);
	float *other_qkv = randv(N_OTHER * qkv, 1.0f, 0.0f, seed);
	float *other_z = randv(N_OTHER * lvdv, 1.0f, 0.0f, seed);
	float *other_ba = randv(N_OTHER * 2 * lv, 1.0f, 0.0f, seed);

	if (mdesc_lin_a_neg(&m)) /* the file holds -exp(A_log) */
		for (size_t h = 0; h < lv; h++)
			alog_f[h] = -expf(alog_f[h]);
	void *conv_w = store_as(tc->conv_type, conv_f, qkv * tc->K);
	void *alog_w = store_as(tc->vec_type, alog_f, lv);
	void *dtb_w = store_as(tc->vec_type, dtb_f, lv);
	void *norm_w = store_as(tc->vec_type, norm_f, dv);

	struct llin_weights w = {
	    .attn_norm = {attn_norm, QUANT_F32},
	    .qkv = {w_qkv, QUANT_F32},
	    .z = {w_z, QUANT_F32},
	    .ba = {w_ba, QUANT_F32},
	    .alpha = {w_alpha, QUANT_F32},
	    .conv = {conv_w, tc->conv_type},
	    .a_log = {alog_w, tc->vec_type},
	    .dt_bias = {dtb_w, tc->vec_type},
	    .norm = {norm_w, tc->vec_type},
	    .out = {w_out, QUANT_F32},
	};

	/* The projections, as llin_forward_segs computes them. */
	float *xn = malloc(N_TOK * H * sizeof(float));
	float *p_qkv = malloc(N_TOK * qkv * sizeof(float));
	float *p_z = malloc(N_TOK * lvdv * sizeof(float));
	float *p_ba = malloc(N_TOK * 2 * lv * sizeof(float));

	cop_rmsnorm_rows(x, attn_norm, xn, N_TOK, H, EPS);
	cop_matmul(NULL, w.qkv, xn, p_qkv, H, qkv, N_TOK);
	cop_matmul(NULL, w.z, xn, p_z, H, lvdv, N_TOK);
	if (lay == MDESC_BA_SPLIT) {
		cop_matmul(NULL, w.ba, xn, p_ba, H, lv, N_TOK);
		cop_matmul(NULL, w.alpha, xn, p_ba + N_TOK * lv, H, lv, N_TOK);
	} else {
		cop_matmul(NULL, w.ba, xn, p_ba, H, 2 * lv, N_TOK);
	}

	/* The device's rows: the other sequence's, then ours. b and a of value
	 * head h placed by the layout (layer_args.h), from the cpu's layout. */
	const size_t ba_stride = lay == MDESC_BA_SPLIT ? lv : 2 * lv;
	const size_t a_off = lay == MDESC_BA_SPLIT ? ROWS * lv : lay == MDESC_BA_GROUPED ? r : lv;
	float *h_qkv = malloc(ROWS * qkv * sizeof(float));
	float *h_z = malloc(ROWS * lvdv * sizeof(float));
	float *h_ba = calloc(ROWS * 2 * lv, sizeof(float));

	memcpy(h_qkv, other_qkv, N_OTHER * qkv * sizeof(float));
	memcpy(h_qkv + N_OTHER * qkv, p_qkv, N_TOK * qkv * sizeof(float));
	memcpy(h_z, other_z, N_OTHER * lvdv * sizeof(float));
	memcpy(h_z + N_OTHER * lvdv, p_z, N_TOK * lvdv * sizeof(float));
	for (size_t row = 0; row < ROWS; row++)
		for (size_t h = 0; h < lv; h++) {
			const size_t at = lay == MDESC_BA_GROUPED ? h / r * 2 * r + h % r : h;
			float b, a;

			if (row < N_OTHER) {
				b = other_ba[row * 2 * lv + h];
				a = other_ba[row * 2 * lv + lv + h];
			} else {
				const size_t t = row - N_OTHER;

				if (lay == MDESC_BA_SPLIT) {
					b = p_ba[t * lv + h];
					a = p_ba[(N_TOK + t) * lv + h];
				} else if (lay == MDESC_BA_GROUPED) {
					b = p_ba[t * 2 * lv + at];
					a = p_ba[t * 2 * lv + at + r];
				} else {
					b = p_ba[t * 2 * lv + h];
					a = p_ba[t * 2 * lv + lv + h];
				}
			}
			h_ba[row * ba_stride + at] = b;
			h_ba[row * ba_stride + a_off + at] = a;
		}

	/* The cpu: our sequence's state in slot 0, linear layer 1. */
	float *x_cpu = malloc(N_TOK * H * sizeof(float));
	float *st_cpu = malloc(slot_floats * sizeof(float));
	size_t sbytes = (llin_scratch_bytes(&m, N_TOK) + 63) / 64 * 64;
	void *scratch = aligned_alloc(64, sbytes);

	memcpy(x_cpu, x, N_TOK * H * sizeof(float));
	memcpy(st_cpu, state0, slot_floats * sizeof(float));
	struct linstate lst = linstate_layer(&ls, st_cpu, 1);
	if (llin_forward(&m, &w, &lst, x_cpu, N_TOK, scratch, NULL) != 0) {
		printf("FAIL %s: llin_forward refused the shapes\n", tc->name);
		goto out;
	}

	/* The device. */
	struct dev d;
	memset(&d, 0, sizeof(d));
	d.slot_bytes = slot_floats * sizeof(float);
	d.qkv_bytes = ROWS * qkv * sizeof(float);
	d.z_bytes = d.o_bytes = ROWS * lvdv * sizeof(float);
	d.ba_bytes = ROWS * 2 * lv * sizeof(float);
	d.qkv = h_qkv;
	d.z = h_z;
	d.ba = h_ba;
	d.state = state0;
	void *d_conv = to_device(conv_w, qkv * tc->K * type_bytes(tc->conv_type));
	void *d_alog = to_device(alog_w, lv * type_bytes(tc->vec_type));
	void *d_dtb = to_device(dtb_w, lv * type_bytes(tc->vec_type));
	void *d_norm = to_device(norm_w, dv * type_bytes(tc->vec_type));
	cudaError_t rc = cudaSuccess;

	if (!d_conv || !d_alog || !d_dtb || !d_norm ||
	    cudaMalloc((void **)&d.d_qkv, d.qkv_bytes) != cudaSuccess ||
	    cudaMalloc((void **)&d.d_z, d.z_bytes) != cudaSuccess ||
	    cudaMalloc((void **)&d.d_ba, d.ba_bytes) != cudaSuccess ||
	    cudaMalloc((void **)&d.d_o, d.o_bytes) != cudaSuccess ||
	    cudaMalloc((void **)&d.d_state, 2 * d.slot_bytes) != cudaSuccess ||
	    cudaMalloc((void **)&d.d_segs, 2 * sizeof(struct kern_seg)) != cudaSuccess) {
		printf("FAIL %s: device allocation\n", tc->name);
		goto dev_out;
	}
	d.l = (struct kern_lin){
	    .lk = tc->lk,
	    .lv = tc->lv,
	    .dk = tc->dk,
	    .dv = tc->dv,
	    .conv_kernel = tc->K,
	    .qkv = (uint32_t)qkv,
	    .grouped = lay == MDESC_BA_GROUPED,
	    .tiled = mdesc_lin_tiled(&m),
	    .a_neg = mdesc_lin_a_neg(&m),
	    .eps = EPS,
	    .conv = {d_conv, tc->conv_type},
	    .a_log = {d_alog, tc->vec_type},
	    .dt_bias = {d_dtb, tc->vec_type},
	    .norm = {d_norm, tc->vec_type},
	    .lin_index = 1,
	    .layer_floats = ls.layer_floats,
	    .s_floats = ls.s_floats,
	    .n_tok = ROWS,
	    .d_qkv = d.d_qkv,
	    .d_z = d.d_z,
	    .d_o = d.d_o,
	    .d_b = d.d_ba,
	    .d_a = d.d_ba + a_off,
	    .ba_stride = (uint32_t)ba_stride,
	};

	struct result res[4];
	for (int i = 0; i < 4; i++) {
		res[i].qkv = malloc(d.qkv_bytes);
		res[i].o = malloc(d.o_bytes);
		res[i].state = malloc(2 * d.slot_bytes);
	}
	static const uint32_t whole[1][3] = {{N_OTHER, N_TOK, 0}};
	static const uint32_t four[1][3] = {{N_OTHER, 4, 0}}, five[1][3] = {{N_OTHER + 4, 5, 0}};
	static const uint32_t batch[2][3] = {{0, N_OTHER, 1}, {N_OTHER, N_TOK, 0}};
	const char *run_name[4] = {"9 at once", "4 + 5", "9 single tokens", "beside another"};

	/* 0: 9 at once; 1: 4 then 5; 2: 9 single tokens; 3: in a batch */
	for (int run = 0; run < 4 && rc == cudaSuccess; run++) {
		rc = dev_reset(&d);
		if (rc != cudaSuccess)
			break;
		if (run == 0) {
			rc = dev_launch(&d, whole, 1);
		} else if (run == 1) {
			rc = dev_launch(&d, four, 1);
			if (rc == cudaSuccess)
				rc = dev_launch(&d, five, 1);
		} else if (run == 2) {
			for (uint32_t t = 0; t < N_TOK && rc == cudaSuccess; t++) {
				const uint32_t one[1][3] = {{N_OTHER + t, 1, 0}};

				rc = dev_launch(&d, one, 1);
			}
		} else {
			rc = dev_launch(&d, batch, 2);
		}
		if (rc == cudaSuccess)
			rc = dev_fetch(&d, &res[run]);
	}
	if (rc != cudaSuccess) {
		printf("FAIL %s: %s\n", tc->name, cudaGetErrorString(rc));
		goto res_out;
	}

	size_t bad = 0;
	/* 1. against the cpu: lin_out and the residual add as llin does them */
	{
		float *y = malloc(N_TOK * H * sizeof(float)),
		      *x_dev = malloc(N_TOK * H * sizeof(float));

		cop_matmul(NULL, w.out, res[0].o + N_OTHER * lvdv, y, lvdv, H, N_TOK);
		cop_add(x, y, x_dev, N_TOK * H);
		bad += diff_tol("x", x_dev, x_cpu, N_TOK * H);
		bad += diff_tol("S", res[0].state + ls.layer_floats, st_cpu + ls.layer_floats,
		                ls.s_floats);
		bad += diff_tol("conv state", res[0].state + ls.layer_floats + ls.s_floats,
		                st_cpu + ls.layer_floats + ls.s_floats, ls.conv_floats);
		free(y);
		free(x_dev);
	}
	/* layer 0 and the unused slot untouched by a launch of slot 0 alone */
	bad += diff_bits("layer 0", res[0].state, state0, ls.layer_floats);
	bad += diff_bits("slot 1", res[0].state + slot_floats, state0 + slot_floats, slot_floats);
	/* 2. the exactness contract */
	for (int run = 1; run < 4; run++) {
		char what[96];

		snprintf(what, sizeof(what), "%s: qkv", run_name[run]);
		bad += diff_bits(what, res[run].qkv + N_OTHER * qkv, res[0].qkv + N_OTHER * qkv,
		                 N_TOK * qkv);
		snprintf(what, sizeof(what), "%s: o", run_name[run]);
		bad += diff_bits(what, res[run].o + N_OTHER * lvdv, res[0].o + N_OTHER * lvdv,
		                 N_TOK * lvdv);
		snprintf(what, sizeof(what), "%s: state", run_name[run]);
		bad += diff_bits(what, res[run].state, res[0].state, slot_floats);
	}
	if (bad)
		printf("FAIL %s: %zu elements off\n", tc->name, bad);
	else
		printf("ok %s\n", tc->name);
	failed = bad != 0;

res_out:
	for (int i = 0; i < 4; i++) {
		free(res[i].qkv);
		free(res[i].o);
		free(res[i].state);
	}
dev_out:
	cudaFree(d_conv);
	cudaFree(d_alog);
	cudaFree(d_dtb);
	cudaFree(d_norm);
	cudaFree(d.d_qkv);
	cudaFree(d.d_z);
	cudaFree(d.d_ba);
	cudaFree(d.d_o);
	cudaFree(d.d_state);
	cudaFree(d.d_segs);
out:
	free(attn_norm);
	free(w_qkv);
	free(w_z);
	free(w_ba);
	free(w_alpha);
	free(w_out);
	free(conv_f);
	free(alog_f);
	free(dtb_f);
	free(norm_f);
	free(x);
	free(state0);
	free(other_qkv);
	free(other_z);
	free(other_ba);
	free(conv_w);
	free(alog_w);
	free(dtb_w);
	free(norm_w);
	free(xn);
	free(p_qkv);
	free(p_z);
	free(p_ba);
	free(h_qkv);
	free(h_z);
	free(h_ba);
	free(x_cpu);
	free(st_cpu);
	free(scratch);
	return failed;
}

/* The launchers' refusals (no launch reaches the device). */
static int check_args(void)
{
	float f[4] = {0};
	struct kern_seg seg;
	struct kern_lin l = {
	    .lk = 1,
	    .lv = 1,
	    .dk = 1,
	    .dv = 1,
	    .conv_kernel = 2,
	    .qkv = 3,
	    .eps = EPS,
	    .conv = {f, QUANT_F32},
	    .a_log = {f, QUANT_F32},
	    .dt_bias = {f, QUANT_F32},
	    .norm = {f, QUANT_F32},
	    .layer_floats = 4,
	    .s_floats = 1,
	    .d_segs = &seg,
	    .n_segs = 1,
	    .n_tok = 1,
	    .d_qkv = f,
	    .d_z = f,
	    .d_o = f,
	    .d_b = f,
	    .d_a = f,
	    .ba_stride = 1,
	};
	struct kern_lin b;
	int failed = 0;

#define REFUSED(field, value, fn)                                                                  \
	do {                                                                                       \
		b = l;                                                                             \
		b.field = value;                                                                   \
		if (fn(&b, NULL) != (int)cudaErrorInvalidValue) {                                  \
			printf("FAIL %s with %s = %s accepted\n", #fn, #field, #value);            \
			failed = 1;                                                                \
		}                                                                                  \
	} while (0)
	REFUSED(dk, 257, kern_lin_recur);
	REFUSED(dv, 257, kern_lin_conv);
	REFUSED(qkv, 4, kern_lin_conv);
	REFUSED(lv, 3, kern_lin_recur); /* qkv no longer 2 lk dk + lv dv */
	REFUSED(conv_kernel, 0, kern_lin_conv);
	REFUSED(conv_kernel, 17, kern_lin_conv);
	REFUSED(layer_floats, 3, kern_lin_conv);
	REFUSED(conv.type, 2u, kern_lin_conv);
	REFUSED(norm.type, 12u, kern_lin_recur);
	REFUSED(d_z, NULL, kern_lin_recur);
	REFUSED(ba_stride, 0, kern_lin_recur);
#undef REFUSED
	if (kern_lin_conv(NULL, NULL) != (int)cudaErrorInvalidValue) {
		printf("FAIL kern_lin_conv(NULL) accepted\n");
		failed = 1;
	}
	return failed;
}

int main(void)
{
	uint64_t seed = gt_start(DEFAULT_SEED);

	int failed = check_args();
	uint64_t s = seed;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		failed |= run_case(&cases[i], &s);
	return failed ? 1 : 0;
}
