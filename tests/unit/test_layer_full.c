/*
 * test_layer_full.c - one full-attention layer over the paged KV pool
 * (gpu-worker/backend/cpu/layer_full.h), on tiny-dense shapes.
 *
 *  - accuracy: bf16 KV against a double-precision reference that keeps its
 *    keys and values contiguous (rounded through bf16, as stored);
 *  - exactness: 150 tokens as one chunk, as 150 single tokens and as chunks
 *    of 13 give the same bits in x and in the KV pages, for bf16 and compact,
 *    with 1, 2 and 3 threads;
 *  - compact against bf16: the cosine of the layer outputs (printed);
 *  - refusals: arguments the layer turns down with IG_E_INVAL.
 * The sequence's 3 pages cross page boundaries and are deliberately out of
 * order in the pool. Random inputs come from IGNIS_TEST_SEED (printed).
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
#include "gpu-worker/backend/kvpool.h"
#include "gpu-worker/backend/cpu/layer_full.h"
#include "common/model.h"

#define DEFAULT_SEED 0x1a7e4f11u
#define N_TOK        150u /* crosses two page boundaries */
#define POOL_PAGES   6u

/* ---- helpers --------------------------------------------------------------- */

#include "testutil.h"

static uint16_t *rand_bf16(struct rng *r, size_t n, float lo, float hi)
{
	uint16_t *w = xmalloc(n * sizeof(*w));

	for (size_t i = 0; i < n; i++)
		w[i] = gguf_f32_to_bf16(rng_unif(r, lo, hi));
	return w;
}

/* ---- the fixture: weights, inputs, a KV pool per format -------------------- */

struct fix {
	const struct mdesc *m;
	uint16_t *t[7]; /* the tensors, in struct lfull_weights order */
	struct lfull_weights w;
	float *x0; /* [N_TOK][hidden] */
};

static void fix_init(struct fix *f)
{
	const char *env = getenv("IGNIS_TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : DEFAULT_SEED;
	struct rng r = {seed};
	const struct mdesc *m = mdesc_find("tiny-dense");
	size_t h, qd, kvd;
	float a;

	print_message("# layer-full: seed %" PRIu64 " (set IGNIS_TEST_SEED to try another)\n",
	              seed);
	assert_non_null(m);
	f->m = m;
	h = m->hidden;
	qd = (size_t)m->q_heads * m->head_dim;
	kvd = (size_t)m->kv_heads * m->head_dim;
	a = 1.0f / sqrtf((float)h); /* keeps projections near unit scale */
	f->t[0] = rand_bf16(&r, h, 0.5f, 1.5f);
	f->t[1] = rand_bf16(&r, h * 2 * qd, -2 * a, 2 * a);
	f->t[2] = rand_bf16(&r, h * kvd, -2 * a, 2 * a);
	f->t[3] = rand_bf16(&r, h * kvd, -2 * a, 2 * a);
	f->t[4] = rand_bf16(&r, m->head_dim, 0.5f, 1.5f);
	f->t[5] = rand_bf16(&r, m->head_dim, 0.5f, 1.5f);
	f->t[6] = rand_bf16(&r, qd * h, -2 * a, 2 * a);
	f->w =
	    (struct lfull_weights){COP_W_BF16(f->t[0]), COP_W_BF16(f->t[1]), COP_W_BF16(f->t[2]),
	                           COP_W_BF16(f->t[3]), COP_W_BF16(f->t[4]), COP_W_BF16(f->t[5]),
	                           COP_W_BF16(f->t[6])};
	f->x0 = xmalloc((size_t)N_TOK * h * sizeof(float));
	for (size_t i = 0; i < (size_t)N_TOK * h; i++)
		f->x0[i] = rng_unif(&r, -1.0f, 1.0f);
}

static void fix_release(struct fix *f)
{
	for (int i = 0; i < 7; i++)
		free(f->t[i]);
	free(f->x0);
}

struct kvset {
	enum mdesc_kv_format fmt;
	unsigned char *region;
	uint64_t region_bytes;
	struct kvpool kv;
	struct kvseq seq;
};

/* A pool of POOL_PAGES pages; the sequence's 3 pages are taken after a dummy
 * reservation (freed again) and then rotated, so the table is not in order. */
static void kvset_init(struct kvset *s, const struct mdesc *m, enum mdesc_kv_format fmt)
{
	struct ig_errbuf eb = {0};
	struct kvseq dummy = {0};
	uint64_t pb = mdesc_page_bytes(m, fmt);
	int err = 0;
	uint32_t t0;

	memset(s, 0, sizeof(*s));
	s->fmt = fmt;
	s->region_bytes = pb * POOL_PAGES;
	s->region = xmalloc(s->region_bytes);
	assert_int_equal(kvpool_init(&s->kv, s->region, pb, POOL_PAGES, &eb), IG_E_OK);
	assert_true(kvpool_try_reserve(&s->kv, &dummy, 1, 2, &err));
	assert_true(kvpool_try_reserve(&s->kv, &s->seq, 2, (uint32_t)mdesc_pages_for(N_TOK), &err));
	kvpool_free(&s->kv, &dummy);
	assert_int_equal(s->seq.n_pages, 3);
	t0 = s->seq.table[0];
	s->seq.table[0] = s->seq.table[1];
	s->seq.table[1] = s->seq.table[2];
	s->seq.table[2] = t0;
	assert_false(s->seq.table[0] < s->seq.table[1] && s->seq.table[1] < s->seq.table[2]);
	assert_false(s->seq.table[0] > s->seq.table[1] && s->seq.table[1] > s->seq.table[2]);
	{
		const struct kvseq *live[1] = {&s->seq};

		if (!kvpool_check(&s->kv, live, 1, &eb))
			fail_msg("kvpool_check: %s", eb.msg);
	}
}

static void kvset_release(struct kvset *s)
{
	kvpool_free(&s->kv, &s->seq);
	kvpool_release(&s->kv);
	free(s->region);
}

/* The layer over all N_TOK tokens in chunks of `chunk` with `threads`
 * threads, from a zeroed pool: x into x_out, the pool's bytes into pages_out
 * (NULL: not kept). */
static void run_layer(const struct fix *f, struct kvset *s, uint32_t chunk, int threads,
                      float *x_out, unsigned char *pages_out)
{
	const struct mdesc *m = f->m;
	struct cpool *pool = pool_of(threads);
	void *scratch = xmalloc(lfull_scratch_bytes(m, chunk, N_TOK));

	memset(s->region, 0, s->region_bytes);
	memcpy(x_out, f->x0, (size_t)N_TOK * m->hidden * sizeof(float));
	for (uint32_t p0 = 0; p0 < N_TOK; p0 += chunk) {
		uint32_t n = N_TOK - p0 < chunk ? N_TOK - p0 : chunk;

		assert_int_equal(lfull_forward(m, 0, &f->w, s->fmt, &s->kv, &s->seq, p0,
		                               x_out + (size_t)p0 * m->hidden, n, scratch, pool),
		                 0);
	}
	if (pages_out)
		memcpy(pages_out, s->region, s->region_bytes);
	free(scratch);
	cpool_destroy(pool);
}

/* ---- the double-precision reference ----------------------------------------- */

static double bf(uint16_t h)
{
	return (double)gguf_bf16_to_f32(h);
}

static double round_bf16(double v)
{
	return (double)gguf_bf16_to_f32(gguf_f32_to_bf16((float)v));
}

static void ref_rmsnorm(double *x, const uint16_t *w, size_t n, double eps)
{
	double ss = 0;

	for (size_t i = 0; i < n; i++)
		ss += x[i] * x[i];
	ss = 1.0 / sqrt(ss / (double)n + eps);
	for (size_t i = 0; i < n; i++)
		x[i] = x[i] * ss * bf(w[i]);
}

static void ref_rope(double *q, size_t rot, uint64_t pos, double theta)
{
	size_t hh = rot / 2;

	for (size_t i = 0; i < hh; i++) {
		double ang = (double)pos * pow(theta, -2.0 * (double)i / (double)rot);
		double a = q[i], b = q[i + hh];

		q[i] = a * cos(ang) - b * sin(ang);
		q[i + hh] = a * sin(ang) + b * cos(ang);
	}
}

static void ref_matvec(const uint16_t *w, const double *x, double *y, size_t n_in, size_t n_out)
{
	for (size_t o = 0; o < n_out; o++) {
		double s = 0;

		for (size_t i = 0; i < n_in; i++)
			s += bf(w[o * n_in + i]) * x[i];
		y[o] = s;
	}
}

/* out [N_TOK][hidden]: the layer's output (what it adds to x). */
static void ref_layer(const struct fix *f, double *out)
{
	const struct mdesc *m = f->m;
	size_t h = m->hidden, hd = m->head_dim, qd = m->q_heads * hd, kvd = m->kv_heads * hd;
	double *xn = xmalloc(h * sizeof(double));
	double *qg = xmalloc((size_t)N_TOK * 2 * qd * sizeof(double));
	double *K = xmalloc((size_t)N_TOK * kvd * sizeof(double));
	double *V = xmalloc((size_t)N_TOK * kvd * sizeof(double));
	double *o = xmalloc(qd * sizeof(double));
	double *sc = xmalloc(N_TOK * sizeof(double));

	for (size_t t = 0; t < N_TOK; t++) {
		double *q = qg + t * 2 * qd, *k = K + t * kvd, *v = V + t * kvd;

		for (size_t i = 0; i < h; i++)
			xn[i] = f->x0[t * h + i];
		ref_rmsnorm(xn, f->w.attn_norm.p, h, m->rms_eps);
		ref_matvec(f->w.attn_q.p, xn, q, h, 2 * qd);
		ref_matvec(f->w.attn_k.p, xn, k, h, kvd);
		ref_matvec(f->w.attn_v.p, xn, v, h, kvd);
		for (size_t hh = 0; hh < m->q_heads; hh++) {
			ref_rmsnorm(q + hh * 2 * hd, f->w.attn_q_norm.p, hd, m->rms_eps);
			ref_rope(q + hh * 2 * hd, m->rope_dims, t, m->rope_theta);
		}
		for (size_t kh = 0; kh < m->kv_heads; kh++) {
			ref_rmsnorm(k + kh * hd, f->w.attn_k_norm.p, hd, m->rms_eps);
			ref_rope(k + kh * hd, m->rope_dims, t, m->rope_theta);
		}
		for (size_t i = 0; i < kvd; i++) {
			k[i] = round_bf16(k[i]);
			v[i] = round_bf16(v[i]);
		}
	}
	for (size_t t = 0; t < N_TOK; t++) {
		for (size_t hh = 0; hh < m->q_heads; hh++) {
			const double *q = qg + t * 2 * qd + hh * 2 * hd, *g = q + hd;
			size_t kh = hh / (m->q_heads / m->kv_heads);
			double mx = -INFINITY, sum = 0;

			for (size_t j = 0; j <= t; j++) {
				double s = 0;

				for (size_t d = 0; d < hd; d++)
					s += q[d] * K[j * kvd + kh * hd + d];
				sc[j] = s / sqrt((double)hd);
				mx = sc[j] > mx ? sc[j] : mx;
			}
			for (size_t j = 0; j <= t; j++)
				sum += (sc[j] = exp(sc[j] - mx));
			for (size_t d = 0; d < hd; d++) {
				double a = 0;

				for (size_t j = 0; j <= t; j++)
					a += sc[j] / sum * V[j * kvd + kh * hd + d];
				o[hh * hd + d] = a / (1.0 + exp(-g[d]));
			}
		}
		ref_matvec(f->w.attn_output.p, o, out + t * h, qd, h);
	}
	free(xn);
	free(qg);
	free(K);
	free(V);
	free(o);
	free(sc);
}

/* ---- tests --------------------------------------------------------------------- */

static void test_bf16_vs_reference(void **state)
{
	struct fix f;
	struct kvset s;
	size_t n;
	float *x;
	double *ref, num = 0, den = 0, maxrel = 0;

	(void)state;
	fix_init(&f);
	kvset_init(&s, f.m, MDESC_KV_BF16);
	n = (size_t)N_TOK * f.m->hidden;
	x = xmalloc(n * sizeof(float));
	ref = xmalloc(n * sizeof(double));
	run_layer(&f, &s, N_TOK, 2, x, NULL);
	ref_layer(&f, ref);
	for (size_t t = 0; t < N_TOK; t++) {
		double tn = 0, td = 0;

		for (size_t i = 0; i < f.m->hidden; i++) {
			size_t k = t * f.m->hidden + i;
			double got = (double)x[k] - (double)f.x0[k];

			tn += (got - ref[k]) * (got - ref[k]);
			td += ref[k] * ref[k];
		}
		num += tn;
		den += td;
		if (sqrt(tn / td) > maxrel)
			maxrel = sqrt(tn / td);
	}
	print_message("# bf16 vs double: relative error %.3g overall, %.3g worst token\n",
	              sqrt(num / den), maxrel);
	assert_true(den > 0);
	/* bf16 K/V in both; what is left is fp32 rounding and the rare K or V
	 * element whose fp32 and double values round to different bf16. */
	assert_true(sqrt(num / den) < 1e-3);
	assert_true(maxrel < 3e-3);
	free(x);
	free(ref);
	kvset_release(&s);
	fix_release(&f);
}

/* Exactness across chunkings and thread counts, in one format. */
static void check_exact(enum mdesc_kv_format fmt)
{
	static const struct {
		uint32_t chunk;
		int threads;
	} rows[] = {
	    {N_TOK, 1}, {N_TOK, 2}, {N_TOK, 3}, {1, 1}, {1, 3}, {13, 1}, {13, 2}, {13, 3},
	};
	struct fix f;
	struct kvset s;
	size_t n;
	float *x0, *x;
	unsigned char *p0, *p;

	fix_init(&f);
	kvset_init(&s, f.m, fmt);
	n = (size_t)N_TOK * f.m->hidden;
	x0 = xmalloc(n * sizeof(float));
	x = xmalloc(n * sizeof(float));
	p0 = xmalloc(s.region_bytes);
	p = xmalloc(s.region_bytes);
	run_layer(&f, &s, rows[0].chunk, rows[0].threads, x0, p0);
	for (size_t r = 1; r < sizeof(rows) / sizeof(rows[0]); r++) {
		run_layer(&f, &s, rows[r].chunk, rows[r].threads, x, p);
		if (memcmp(x, x0, n * sizeof(float)) != 0)
			fail_msg("format %d, chunk %u, %d threads: x differs", (int)fmt,
			         rows[r].chunk, rows[r].threads);
		if (memcmp(p, p0, s.region_bytes) != 0)
			fail_msg("format %d, chunk %u, %d threads: KV pages differ", (int)fmt,
			         rows[r].chunk, rows[r].threads);
	}
	free(x0);
	free(x);
	free(p0);
	free(p);
	kvset_release(&s);
	fix_release(&f);
}

static void test_exact_bf16(void **state)
{
	(void)state;
	check_exact(MDESC_KV_BF16);
}

static void test_exact_compact(void **state)
{
	(void)state;
	check_exact(MDESC_KV_COMPACT);
}

static void test_compact_vs_bf16(void **state)
{
	struct fix f;
	struct kvset sb, sc;
	size_t n;
	float *xb, *xc;
	double dot = 0, nb = 0, nc = 0, cosv;

	(void)state;
	fix_init(&f);
	kvset_init(&sb, f.m, MDESC_KV_BF16);
	kvset_init(&sc, f.m, MDESC_KV_COMPACT);
	n = (size_t)N_TOK * f.m->hidden;
	xb = xmalloc(n * sizeof(float));
	xc = xmalloc(n * sizeof(float));
	run_layer(&f, &sb, 13, 2, xb, NULL);
	run_layer(&f, &sc, 13, 2, xc, NULL);
	for (size_t i = 0; i < n; i++) {
		double b = (double)xb[i] - f.x0[i], c = (double)xc[i] - f.x0[i];

		dot += b * c;
		nb += b * b;
		nc += c * c;
	}
	cosv = dot / sqrt(nb * nc);
	print_message("# compact vs bf16: cosine of the layer outputs %.4f\n", cosv);
	/* The format's own error, not the layer's: token 0 attends only itself,
	 * so its output carries V's error alone and measures ~0.94 (the per-vector
	 * cosine of docs/adr/0008); later tokens add K's error through the
	 * softmax weights, and the whole chunk measures 0.886..0.910 over seeds
	 * 1..12. 0.85 leaves room for other seeds and still fails a layout or
	 * decode mistake (which gives ~0). */
	assert_true(cosv > 0.85);
	free(xb);
	free(xc);
	kvset_release(&sb);
	kvset_release(&sc);
	fix_release(&f);
}

static void test_refused(void **state)
{
	struct fix f;
	struct kvset s;
	struct mdesc bad;
	float *x;
	void *scratch;
	size_t n;

	(void)state;
	fix_init(&f);
	kvset_init(&s, f.m, MDESC_KV_BF16);
	n = (size_t)8 * f.m->hidden;
	x = xmalloc(n * sizeof(float));
	memcpy(x, f.x0, n * sizeof(float));
	scratch = xmalloc(lfull_scratch_bytes(f.m, 8, 3 * 64));
	memset(s.region, 0x5a, s.region_bytes);

	/* A full index past the model's full layers. */
	assert_int_equal(
	    lfull_forward(f.m, 1, &f.w, MDESC_KV_BF16, &s.kv, &s.seq, 0, x, 1, scratch, NULL),
	    IG_E_INVAL);
	/* Positions past the sequence's pages (3 pages: 0 .. 191). */
	assert_int_equal(
	    lfull_forward(f.m, 0, &f.w, MDESC_KV_BF16, &s.kv, &s.seq, 188, x, 5, scratch, NULL),
	    IG_E_INVAL);
	/* Pages too small for the format: compact pages asked to hold bf16. */
	{
		struct kvset sc;

		kvset_init(&sc, f.m, MDESC_KV_COMPACT);
		assert_int_equal(lfull_forward(f.m, 0, &f.w, MDESC_KV_BF16, &sc.kv, &sc.seq, 0, x,
		                               1, scratch, NULL),
		                 IG_E_INVAL);
		kvset_release(&sc);
	}
	/* Shapes: q heads not a multiple of kv heads; odd rotary dims. */
	bad = *f.m;
	bad.kv_heads = 3;
	assert_int_equal(
	    lfull_forward(&bad, 0, &f.w, MDESC_KV_BF16, &s.kv, &s.seq, 0, x, 1, scratch, NULL),
	    IG_E_INVAL);
	bad = *f.m;
	bad.rope_dims = 15;
	assert_int_equal(
	    lfull_forward(&bad, 0, &f.w, MDESC_KV_BF16, &s.kv, &s.seq, 0, x, 1, scratch, NULL),
	    IG_E_INVAL);
	/* Nothing touched; n_tok 0 does nothing. */
	assert_int_equal(
	    lfull_forward(f.m, 0, &f.w, MDESC_KV_BF16, &s.kv, &s.seq, 0, x, 0, scratch, NULL), 0);
	assert_memory_equal(x, f.x0, n * sizeof(float));
	for (uint64_t i = 0; i < s.region_bytes; i++)
		if (s.region[i] != 0x5a)
			fail_msg("byte %" PRIu64 " of the pool touched", i);
	free(x);
	free(scratch);
	kvset_release(&s);
	fix_release(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bf16_vs_reference), cmocka_unit_test(test_exact_bf16),
	    cmocka_unit_test(test_exact_compact),     cmocka_unit_test(test_compact_vs_bf16),
	    cmocka_unit_test(test_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
