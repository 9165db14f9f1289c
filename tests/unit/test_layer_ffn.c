/*
 * test_layer_ffn.c - the feed-forward half against a double-precision
 * reference, for both families; bit-identical whether tokens come as one
 * chunk or one by one and at any thread count; top-k ties to the lower id.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/gguf.h"
#include "gpu-worker/backend/cpu/layer_ffn.h"

static uint64_t rng_s;

static float rnd(float scale)
{
	rng_s = rng_s * 6364136223846793005ull + 1442695040888963407ull;
	return ((float)(rng_s >> 40) / (float)(1u << 24) * 2.0f - 1.0f) * scale;
}

static uint16_t *bf16_rand(size_t n, float scale, float base)
{
	uint16_t *w = malloc(n * 2);

	for (size_t i = 0; i < n; i++)
		w[i] = gguf_f32_to_bf16(base + rnd(scale));
	return w;
}

static double bf(uint16_t h)
{
	return gguf_bf16_to_f32(h);
}

/* a bf16 matrix's elements */
#define W(m) ((const uint16_t *)(m).p)

struct set {
	struct lffn_weights w;
	uint16_t *all[12];
	int n;
};

static const uint16_t *add(struct set *s, uint16_t *p)
{
	s->all[s->n++] = p;
	return p;
}

static void make(const struct mdesc *m, struct set *s)
{
	size_t h = m->hidden;

	memset(s, 0, sizeof(*s));
	s->w.norm = COP_W_BF16(add(s, bf16_rand(h, 0.1f, 1.0f)));
	if (m->family == MDESC_DENSE) {
		s->w.gate = COP_W_BF16(add(s, bf16_rand(h * m->ffn_inter, 0.08f, 0)));
		s->w.up = COP_W_BF16(add(s, bf16_rand(h * m->ffn_inter, 0.08f, 0)));
		s->w.down = COP_W_BF16(add(s, bf16_rand(h * m->ffn_inter, 0.05f, 0)));
		return;
	}
	s->w.router = COP_W_BF16(add(s, bf16_rand(h * m->experts, 0.2f, 0)));
	s->w.gate_exps = COP_W_BF16(add(s, bf16_rand(h * m->expert_inter * m->experts, 0.08f, 0)));
	s->w.up_exps = COP_W_BF16(add(s, bf16_rand(h * m->expert_inter * m->experts, 0.08f, 0)));
	s->w.down_exps = COP_W_BF16(add(s, bf16_rand(h * m->expert_inter * m->experts, 0.1f, 0)));
	s->w.shexp_gate = COP_W_BF16(add(s, bf16_rand(h, 0.1f, 0)));
	s->w.gate_sh = COP_W_BF16(add(s, bf16_rand(h * m->shared_inter, 0.08f, 0)));
	s->w.up_sh = COP_W_BF16(add(s, bf16_rand(h * m->shared_inter, 0.08f, 0)));
	s->w.down_sh = COP_W_BF16(add(s, bf16_rand(h * m->shared_inter, 0.1f, 0)));
}

static void drop(struct set *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->all[i]);
}

/* the same math in double, one token; `ids` are the experts to use */
static void reference(const struct mdesc *m, const struct lffn_weights *w, const float *x_in,
                      double *out, const uint32_t *ids)
{
	size_t h = m->hidden;
	double ss = 0, xn[1024];

	for (size_t i = 0; i < h; i++)
		ss += (double)x_in[i] * x_in[i];
	for (size_t i = 0; i < h; i++)
		xn[i] = (double)x_in[i] / sqrt(ss / (double)h + m->rms_eps) * bf(W(w->norm)[i]);
	for (size_t i = 0; i < h; i++)
		out[i] = x_in[i];
	if (m->family == MDESC_DENSE) {
		for (size_t o = 0; o < h; o++) {
			double acc = 0;

			for (size_t j = 0; j < m->ffn_inter; j++) {
				double g = 0, u = 0;

				for (size_t i = 0; i < h; i++) {
					g += bf(W(w->gate)[j * h + i]) * xn[i];
					u += bf(W(w->up)[j * h + i]) * xn[i];
				}
				acc += bf(W(w->down)[o * m->ffn_inter + j]) * (g / (1 + exp(-g)) * u);
			}
			out[o] += acc;
		}
		return;
	}
	{
		double p[64], mx = -1e300, sum = 0, kept = 0, sg = 0;

		for (uint32_t e = 0; e < m->experts; e++) {
			p[e] = 0;
			for (size_t i = 0; i < h; i++)
				p[e] += bf(W(w->router)[e * h + i]) * xn[i];
			mx = p[e] > mx ? p[e] : mx;
		}
		for (uint32_t e = 0; e < m->experts; e++)
			sum += (p[e] = exp(p[e] - mx));
		for (uint32_t r = 0; r < m->top_k; r++)
			kept += p[ids[r]] / sum;
		for (size_t i = 0; i < h; i++)
			sg += bf(W(w->shexp_gate)[i]) * xn[i];
		sg = 1 / (1 + exp(-sg));
		for (size_t o = 0; o < h; o++) {
			for (uint32_t r = 0; r < m->top_k; r++) {
				size_t blk = h * m->expert_inter, e = ids[r];
				double acc = 0;

				for (size_t j = 0; j < m->expert_inter; j++) {
					double g = 0, u = 0;

					for (size_t i = 0; i < h; i++) {
						g += bf(W(w->gate_exps)[e * blk + j * h + i]) * xn[i];
						u += bf(W(w->up_exps)[e * blk + j * h + i]) * xn[i];
					}
					acc += bf(W(w->down_exps)[e * blk + o * m->expert_inter + j]) *
					       (g / (1 + exp(-g)) * u);
				}
				out[o] += p[ids[r]] / sum / kept * acc;
			}
			{
				double acc = 0;

				for (size_t j = 0; j < m->shared_inter; j++) {
					double g = 0, u = 0;

					for (size_t i = 0; i < h; i++) {
						g += bf(W(w->gate_sh)[j * h + i]) * xn[i];
						u += bf(W(w->up_sh)[j * h + i]) * xn[i];
					}
					acc += bf(W(w->down_sh)[o * m->shared_inter + j]) *
					       (g / (1 + exp(-g)) * u);
				}
				out[o] += sg * acc;
			}
		}
	}
}

static void run(const struct mdesc *m, const struct set *s, const float *x0, float *x, uint32_t n,
                uint32_t chunk, int threads, uint32_t *chosen)
{
	struct cpool *pool;
	struct ig_errbuf eb;
	void *scratch = malloc(lffn_scratch_bytes(m, chunk));

	assert_int_equal(cpool_create(&pool, threads, &eb), IG_E_OK);
	memcpy(x, x0, (size_t)n * m->hidden * sizeof(float));
	for (uint32_t t = 0; t < n; t += chunk)
		assert_int_equal(lffn_forward(m, &s->w, 0, NULL, x + (size_t)t * m->hidden,
		                              n - t < chunk ? n - t : chunk, scratch, pool,
		                              chosen ? chosen + (size_t)t * m->top_k : NULL, &eb),
		                 IG_E_OK);
	cpool_destroy(pool);
	free(scratch);
}

static void test_family(const char *name)
{
	const struct mdesc *m = mdesc_find(name);
	const uint32_t n = 12;
	size_t len = (size_t)n * m->hidden;
	float *x0 = malloc(len * sizeof(float)), *a = malloc(len * sizeof(float));
	float *b = malloc(len * sizeof(float)), *c = malloc(len * sizeof(float));
	uint32_t chosen[12 * 8];
	double worst = 0;
	struct set s;

	rng_s = 20261129u;
	printf("# %s: seed 20261129\n", name);
	make(m, &s);
	for (size_t i = 0; i < len; i++)
		x0[i] = rnd(1.0f);
	run(m, &s, x0, a, n, n, 1, chosen);
	run(m, &s, x0, b, n, 1, 2, NULL);
	run(m, &s, x0, c, n, 5, 3, NULL);
	/* one chunk, one by one, chunks of 5; 1, 2, 3 threads: the same bits */
	assert_memory_equal(a, b, len * sizeof(float));
	assert_memory_equal(a, c, len * sizeof(float));
	for (uint32_t t = 0; t < n; t++) {
		double ref[1024];

		reference(m, &s.w, x0 + (size_t)t * m->hidden, ref,
		          m->family == MDESC_MOE ? chosen + (size_t)t * m->top_k : NULL);
		for (size_t i = 0; i < m->hidden; i++) {
			double d =
			    fabs(ref[i] - a[(size_t)t * m->hidden + i]) / (fabs(ref[i]) + 1e-3);

			worst = d > worst ? d : worst;
		}
	}
	printf("# %s: worst relative difference from the double reference %.2e\n", name, worst);
	assert_true(worst < 2e-3);
	drop(&s);
	free(x0);
	free(a);
	free(b);
	free(c);
}

static void test_dense(void **state)
{
	(void)state;
	test_family("tiny-dense");
}

static void test_moe(void **state)
{
	(void)state;
	test_family("tiny-moe");
}

static void test_ties_go_to_the_lower_id(void **state)
{
	const struct mdesc *m = mdesc_find("tiny-moe");
	size_t h = m->hidden;
	float *x = calloc(h, sizeof(float)), *y = malloc(h * sizeof(float));
	uint32_t chosen[8];
	struct set s;

	(void)state;
	rng_s = 7;
	make(m, &s);
	/* a zero router: every expert ties; the lowest ids win, in order */
	memset((void *)s.w.router.p, 0, h * m->experts * 2);
	for (size_t i = 0; i < h; i++)
		x[i] = 0.5f;
	run(m, &s, x, y, 1, 1, 1, chosen);
	for (uint32_t r = 0; r < m->top_k; r++)
		assert_int_equal(chosen[r], r);
	drop(&s);
	free(x);
	free(y);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_dense),
	    cmocka_unit_test(test_moe),
	    cmocka_unit_test(test_ties_go_to_the_lower_id),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
