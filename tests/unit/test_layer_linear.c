/*
 * test_layer_linear.c - the gated delta rule layer on the cpu backend
 * (gpu-worker/backend/cpu/layer_linear.h), at the tiny-dense shapes with seeded random
 * bf16 weights (IGNIS_TEST_SEED, printed).
 *
 *  - accuracy: 40 tokens against a plain double-precision copy of the math,
 *    on the outputs and on the whole state (S and conv);
 *  - exactness: one chunk of 40, 40 single tokens and chunks of 7 give the
 *    same bits in x and in the state; so do pools of 1, 2 and 3 threads; and
 *    a state copied out after 17 tokens into fresh memory continues with the
 *    same bits as the uninterrupted run (what lets a moved sequence resume);
 *  - shapes that are not a linear layer's are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <math.h>

#include <cmocka.h>

#include "gpu-worker/backend/cpu/cpu_pool.h"
#include "common/err.h"
#include "model/gguf.h"
#include "gpu-worker/backend/cpu/layer_linear.h"
#include "common/model.h"

#define DEFAULT_SEED 0x11a7e5edu
#define N_TOK        40u
#define SAVE_AT      17u /* tokens before the state is copied out (test_resume) */
/* Relative tolerance against the double reference: fp32 sums of at most a
 * few hundred terms stay within a few 1e-6; 1e-4 leaves room for the
 * recurrence carrying errors over 40 tokens. */
#define REL_TOL 1e-4

/* ---- helpers --------------------------------------------------------------- */

#include "testutil.h"

/* ---- the layer's inputs ------------------------------------------------------ */

/* Weights of one layer, each tensor its own allocation (ASan sees overruns). */
struct fix {
	const struct mdesc *m;
	size_t hidden, lk, lv, dk, dv, K, qkv;
	uint16_t *attn_norm, *wqkv, *wz, *wba, *conv, *a_log, *dt_bias, *norm, *wout;
	struct llin_weights w;
	float *x; /* [N_TOK][hidden], the input stream */
};

/* The state's sizes, from the description's one function (model.h). */
static size_t s_floats(const struct mdesc *m)
{
	struct mdesc_lin_state ls;

	assert_true(mdesc_lin_state(m, &ls));
	return (size_t)ls.s_floats;
}

static size_t conv_floats(const struct mdesc *m)
{
	struct mdesc_lin_state ls;

	assert_true(mdesc_lin_state(m, &ls));
	return (size_t)ls.conv_floats;
}

static uint16_t *rand_bf16(struct rng *r, size_t n, float lo, float hi)
{
	uint16_t *p = xmalloc(n * sizeof(*p));

	for (size_t i = 0; i < n; i++)
		p[i] = gguf_f32_to_bf16(rng_unif(r, lo, hi));
	return p;
}

static void fix_init(struct fix *f, const char *what)
{
	struct rng r = {test_seed(what)};
	float sh, so;

	f->m = mdesc_find("tiny-dense");
	assert_non_null(f->m);
	f->hidden = f->m->hidden;
	f->lk = f->m->lin_k_heads;
	f->lv = f->m->lin_v_heads;
	f->dk = f->m->lin_dk;
	f->dv = f->m->lin_dv;
	f->K = f->m->conv_kernel;
	f->qkv = 2 * f->lk * f->dk + f->lv * f->dv;
	/* Matrices uniform in [-1, 1)/sqrt(fan-in), norms near 1 (ADR 0006); the
	 * conv taps, a_log and dt_bias small enough that nothing saturates. */
	sh = 1.0f / sqrtf((float)f->hidden);
	so = 1.0f / sqrtf((float)(f->lv * f->dv));
	f->attn_norm = rand_bf16(&r, f->hidden, 0.9f, 1.1f);
	f->wqkv = rand_bf16(&r, f->hidden * f->qkv, -sh, sh);
	f->wz = rand_bf16(&r, f->hidden * f->lv * f->dv, -sh, sh);
	f->wba = rand_bf16(&r, f->hidden * 2 * f->lv, -sh, sh);
	f->conv = rand_bf16(&r, f->K * f->qkv, -0.5f, 0.5f);
	f->a_log = rand_bf16(&r, f->lv, -1.0f, 1.0f);
	f->dt_bias = rand_bf16(&r, f->lv, -0.5f, 0.5f);
	f->norm = rand_bf16(&r, f->dv, 0.9f, 1.1f);
	f->wout = rand_bf16(&r, f->lv * f->dv * f->hidden, -so, so);
	f->w = (struct llin_weights){.attn_norm = COP_W_BF16(f->attn_norm),
	                             .qkv = COP_W_BF16(f->wqkv),
	                             .z = COP_W_BF16(f->wz),
	                             .ba = COP_W_BF16(f->wba),
	                             .conv = COP_W_BF16(f->conv),
	                             .a_log = COP_W_BF16(f->a_log),
	                             .dt_bias = COP_W_BF16(f->dt_bias),
	                             .norm = COP_W_BF16(f->norm),
	                             .out = COP_W_BF16(f->wout)};
	f->x = xmalloc(N_TOK * f->hidden * sizeof(float));
	for (size_t i = 0; i < N_TOK * f->hidden; i++)
		f->x[i] = rng_unif(&r, -1.0f, 1.0f);
}

static void fix_release(struct fix *f)
{
	free(f->attn_norm);
	free(f->wqkv);
	free(f->wz);
	free(f->wba);
	free(f->conv);
	free(f->a_log);
	free(f->dt_bias);
	free(f->norm);
	free(f->wout);
	free(f->x);
}

/* One run's results: the stream after the layer and the state. */
struct run {
	float *x;
	struct linstate st;
};

static void run_init(const struct fix *f, struct run *r)
{
	r->x = xmalloc(N_TOK * f->hidden * sizeof(float));
	memcpy(r->x, f->x, N_TOK * f->hidden * sizeof(float));
	r->st.S = xmalloc(s_floats(f->m) * sizeof(float));
	r->st.conv = xmalloc(conv_floats(f->m) * sizeof(float));
	linstate_zero(f->m, &r->st);
}

static void run_release(struct run *r)
{
	free(r->x);
	free(r->st.S);
	free(r->st.conv);
}

/* Tokens [from, to) of r->x through the layer in chunks of `chunk`. */
static void run_tokens(const struct fix *f, struct run *r, uint32_t from, uint32_t to,
                       uint32_t chunk, struct cpool *pool)
{
	size_t bytes = llin_scratch_bytes(f->m, chunk);
	void *scratch;

	assert_true(bytes > 0 && bytes % 64 == 0);
	scratch = aligned_alloc(64, bytes);
	assert_non_null(scratch);
	for (uint32_t t = from; t < to; t += chunk) {
		uint32_t n = to - t < chunk ? to - t : chunk;

		assert_int_equal(
		    llin_forward(f->m, &f->w, &r->st, r->x + t * f->hidden, n, scratch, pool), 0);
	}
	free(scratch);
}

static void assert_same_run(const struct fix *f, const struct run *a, const struct run *b,
                            const char *what)
{
	if (memcmp(a->x, b->x, N_TOK * f->hidden * sizeof(float)))
		fail_msg("%s: x differs", what);
	if (memcmp(a->st.S, b->st.S, s_floats(f->m) * sizeof(float)))
		fail_msg("%s: S differs", what);
	if (memcmp(a->st.conv, b->st.conv, conv_floats(f->m) * sizeof(float)))
		fail_msg("%s: conv state differs", what);
}

/* ---- the double-precision reference ------------------------------------------ */

static double wd(const uint16_t *w, size_t i)
{
	return (double)gguf_bf16_to_f32(w[i]);
}

static double silu_d(double y)
{
	return y / (1.0 + exp(-y));
}

/* y[o] = sum_i w[o * n_in + i] * x[i] */
static void ref_matvec(const uint16_t *w, const double *x, double *y, size_t n_in, size_t n_out)
{
	for (size_t o = 0; o < n_out; o++) {
		double s = 0.0;

		for (size_t i = 0; i < n_in; i++)
			s += wd(w, o * n_in + i) * x[i];
		y[o] = s;
	}
}

static void ref_rmsnorm(double *x, const uint16_t *w, size_t n, double eps)
{
	double ss = 0.0, r;

	for (size_t i = 0; i < n; i++)
		ss += x[i] * x[i];
	r = 1.0 / sqrt(ss / (double)n + eps);
	for (size_t i = 0; i < n; i++)
		x[i] = x[i] * r * wd(w, i);
}

static void ref_l2norm(double *x, size_t n, double scale)
{
	double ss = 0.0, r;

	for (size_t i = 0; i < n; i++)
		ss += x[i] * x[i];
	r = 1.0 / sqrt(ss + 1e-6);
	for (size_t i = 0; i < n; i++)
		x[i] = x[i] * r * scale;
}

/* The reference's run: x [N_TOK][hidden], S [lv][dk][dv], conv [qkv][K-1]. */
struct ref {
	double *x, *S, *conv;
};

static void ref_run(const struct fix *f, struct ref *out)
{
	size_t H = f->hidden, lvdv = f->lv * f->dv, keep = f->K - 1;
	double eps = (double)f->m->rms_eps;
	double *xn = xmalloc(H * sizeof(double)), *qkv = xmalloc(f->qkv * sizeof(double));
	double *z = xmalloc(lvdv * sizeof(double)), *ba = xmalloc(2 * f->lv * sizeof(double));
	double *o = xmalloc(lvdv * sizeof(double)), *y = xmalloc(H * sizeof(double));
	double *q = xmalloc(f->dk * sizeof(double)), *k = xmalloc(f->dk * sizeof(double));
	double *kv = xmalloc(f->dv * sizeof(double));

	out->x = xmalloc(N_TOK * H * sizeof(double));
	out->S = calloc(f->lv * f->dk * f->dv, sizeof(double));
	out->conv = calloc(f->qkv * keep + 1, sizeof(double));
	assert_non_null(out->S);
	assert_non_null(out->conv);
	for (size_t i = 0; i < N_TOK * H; i++)
		out->x[i] = f->x[i];

	for (size_t t = 0; t < N_TOK; t++) {
		double *xt = out->x + t * H;

		memcpy(xn, xt, H * sizeof(double));
		ref_rmsnorm(xn, f->attn_norm, H, eps);
		ref_matvec(f->wqkv, xn, qkv, H, f->qkv);
		ref_matvec(f->wz, xn, z, H, lvdv);
		ref_matvec(f->wba, xn, ba, H, 2 * f->lv);
		for (size_t c = 0; c < f->qkv; c++) {
			double *win = out->conv + c * keep, acc = 0.0;

			for (size_t i = 0; i < keep; i++)
				acc += wd(f->conv, c * f->K + i) * win[i];
			acc += wd(f->conv, c * f->K + keep) * qkv[c];
			for (size_t i = 0; i + 1 < keep; i++)
				win[i] = win[i + 1];
			if (keep)
				win[keep - 1] = qkv[c];
			qkv[c] = silu_d(acc);
		}
		for (size_t h = 0; h < f->lv; h++) {
			size_t kh = h / (f->lv / f->lk);
			const double *v = qkv + 2 * f->lk * f->dk + h * f->dv;
			double *S = out->S + h * f->dk * f->dv, *oh = o + h * f->dv;
			double beta = 1.0 / (1.0 + exp(-ba[h]));
			double sa = ba[f->lv + h] + wd(f->dt_bias, h);
			double g = -exp(wd(f->a_log, h)) * (sa > 20.0 ? sa : log1p(exp(sa)));
			double alpha = exp(g);

			memcpy(q, qkv + kh * f->dk, f->dk * sizeof(double));
			memcpy(k, qkv + f->lk * f->dk + kh * f->dk, f->dk * sizeof(double));
			ref_l2norm(q, f->dk, 1.0 / sqrt((double)f->dk));
			ref_l2norm(k, f->dk, 1.0);
			for (size_t i = 0; i < f->dk * f->dv; i++)
				S[i] *= alpha;
			for (size_t j = 0; j < f->dv; j++) {
				double s = 0.0;

				for (size_t i = 0; i < f->dk; i++)
					s += S[i * f->dv + j] * k[i];
				kv[j] = (v[j] - s) * beta;
			}
			for (size_t i = 0; i < f->dk; i++)
				for (size_t j = 0; j < f->dv; j++)
					S[i * f->dv + j] += k[i] * kv[j];
			for (size_t j = 0; j < f->dv; j++) {
				double s = 0.0;

				for (size_t i = 0; i < f->dk; i++)
					s += S[i * f->dv + j] * q[i];
				oh[j] = s;
			}
			ref_rmsnorm(oh, f->norm, f->dv, eps);
			for (size_t j = 0; j < f->dv; j++)
				oh[j] *= silu_d(z[h * f->dv + j]);
		}
		ref_matvec(f->wout, o, y, lvdv, H);
		for (size_t i = 0; i < H; i++)
			xt[i] += y[i];
	}
	free(xn);
	free(qkv);
	free(z);
	free(ba);
	free(o);
	free(y);
	free(q);
	free(k);
	free(kv);
}

static void ref_release(struct ref *r)
{
	free(r->x);
	free(r->S);
	free(r->conv);
}

/* |got - want| <= REL_TOL * (|want| + rms(want)) element-wise: relative, with
 * the vector's scale as the floor for elements near zero. */
static void assert_close(const float *got, const double *want, size_t n, const char *what)
{
	double ss = 0.0, rms, worst = 0.0;
	size_t at = 0;

	for (size_t i = 0; i < n; i++)
		ss += want[i] * want[i];
	rms = sqrt(ss / (double)n);
	assert_true(rms > 0.0);
	for (size_t i = 0; i < n; i++) {
		double err = fabs((double)got[i] - want[i]) / (fabs(want[i]) + rms);

		if (!(err <= worst)) {
			worst = err;
			at = i;
		}
	}
	print_message("# %s: worst relative error %.3g at %zu (rms %.3g)\n", what, worst, at, rms);
	if (!(worst <= REL_TOL))
		fail_msg("%s: element %zu is %.9g, reference %.9g", what, at, (double)got[at],
		         want[at]);
}

/* ---- the tests ----------------------------------------------------------------- */

static void test_reference(void **state)
{
	struct fix f;
	struct run r;
	struct ref want;
	float *delta;

	(void)state;
	fix_init(&f, "reference");
	run_init(&f, &r);
	run_tokens(&f, &r, 0, N_TOK, N_TOK, NULL);
	ref_run(&f, &want);

	/* The layer's own output (x after minus x before), then everything. */
	delta = xmalloc(N_TOK * f.hidden * sizeof(float));
	for (size_t i = 0; i < N_TOK * f.hidden; i++) {
		delta[i] = r.x[i] - f.x[i];
		want.x[i] -= (double)f.x[i];
	}
	assert_close(delta, want.x, N_TOK * f.hidden, "layer output");
	assert_close(r.st.S, want.S, s_floats(f.m), "state S");
	assert_close(r.st.conv, want.conv, conv_floats(f.m), "conv state");

	free(delta);
	ref_release(&want);
	run_release(&r);
	fix_release(&f);
}

static void test_chunking(void **state)
{
	static const uint32_t chunks[] = {1, 7, 16, 39};
	struct fix f;
	struct run one;

	(void)state;
	fix_init(&f, "chunking");
	run_init(&f, &one);
	run_tokens(&f, &one, 0, N_TOK, N_TOK, NULL);
	for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
		struct run other;
		char what[64];

		run_init(&f, &other);
		run_tokens(&f, &other, 0, N_TOK, chunks[c], NULL);
		snprintf(what, sizeof(what), "chunks of %u vs one chunk", chunks[c]);
		assert_same_run(&f, &one, &other, what);
		run_release(&other);
	}
	run_release(&one);
	fix_release(&f);
}

static void test_threads(void **state)
{
	struct fix f;
	struct run base;

	(void)state;
	fix_init(&f, "threads");
	run_init(&f, &base);
	run_tokens(&f, &base, 0, N_TOK, 7, NULL);
	for (int n = 1; n <= 3; n++) {
		struct cpool *p = pool_of(n);
		struct run other;
		char what[64];

		run_init(&f, &other);
		run_tokens(&f, &other, 0, N_TOK, 7, p);
		snprintf(what, sizeof(what), "%d threads vs inline", n);
		assert_same_run(&f, &base, &other, what);
		run_release(&other);
		cpool_destroy(p);
	}
	run_release(&base);
	fix_release(&f);
}

static void test_resume(void **state)
{
	struct fix f;
	struct run whole, moved;
	float *saved_S, *saved_conv;
	size_t nS, nC;

	(void)state;
	fix_init(&f, "resume");
	nS = s_floats(f.m);
	nC = conv_floats(f.m);
	run_init(&f, &whole);
	run_tokens(&f, &whole, 0, N_TOK, N_TOK, NULL);

	/* 17 tokens, save the state, poison the old memory, restore elsewhere. */
	run_init(&f, &moved);
	run_tokens(&f, &moved, 0, SAVE_AT, 5, NULL);
	saved_S = xmalloc(nS * sizeof(float));
	saved_conv = xmalloc(nC * sizeof(float));
	memcpy(saved_S, moved.st.S, nS * sizeof(float));
	memcpy(saved_conv, moved.st.conv, nC * sizeof(float));
	memset(moved.st.S, 0xff, nS * sizeof(float));
	memset(moved.st.conv, 0xff, nC * sizeof(float));
	free(moved.st.S);
	free(moved.st.conv);
	moved.st.S = xmalloc(nS * sizeof(float));
	moved.st.conv = xmalloc(nC * sizeof(float));
	linstate_zero(f.m, &moved.st);
	memcpy(moved.st.S, saved_S, nS * sizeof(float));
	memcpy(moved.st.conv, saved_conv, nC * sizeof(float));
	run_tokens(&f, &moved, SAVE_AT, N_TOK, 4, NULL);
	assert_same_run(&f, &whole, &moved, "resumed after 17 tokens vs uninterrupted");

	free(saved_S);
	free(saved_conv);
	run_release(&moved);
	run_release(&whole);
	fix_release(&f);
}

static void test_refused(void **state)
{
	struct fix f;
	struct mdesc bad;
	struct run r;
	float x0;

	(void)state;
	fix_init(&f, "refused");
	run_init(&f, &r);
	x0 = r.x[0];
	/* n_tok 0 does nothing. */
	assert_int_equal(llin_forward(f.m, &f.w, &r.st, r.x, 0, NULL, NULL), 0);
	bad = *f.m;
	bad.lin_k_heads = 3; /* 4 value heads are not a multiple of 3 */
	assert_int_equal(llin_forward(&bad, &f.w, &r.st, r.x, 1, NULL, NULL), IG_E_INVAL);
	assert_int_equal(llin_scratch_bytes(&bad, 1), 0);
	bad = *f.m;
	bad.conv_kernel = 0;
	assert_int_equal(llin_forward(&bad, &f.w, &r.st, r.x, 1, NULL, NULL), IG_E_INVAL);
	assert_true(r.x[0] == x0);
	run_release(&r);
	fix_release(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reference), cmocka_unit_test(test_chunking),
	    cmocka_unit_test(test_threads),   cmocka_unit_test(test_resume),
	    cmocka_unit_test(test_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
