/* mfile.c - model files of the ignis-hybrid family (see mfile.h). */
#include "mfile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The metadata of a model file: X(key, mdesc field, type, family).
 * family 0: every model; MDESC_DENSE or MDESC_MOE: that family only.
 * Keys under "ignis." are ours; the writer emits them in this order.
 */
#define MFILE_KEYS(X)                                                                              \
	X("ignis.block_count", layers, U32, 0)                                                     \
	X("ignis.full_attention_interval", full_interval, U32, 0)                                  \
	X("ignis.embedding_length", hidden, U32, 0)                                                \
	X("ignis.attention.head_count", q_heads, U32, 0)                                           \
	X("ignis.attention.head_count_kv", kv_heads, U32, 0)                                       \
	X("ignis.attention.key_length", head_dim, U32, 0)                                          \
	X("ignis.rope.dimension_count", rope_dims, U32, 0)                                         \
	X("ignis.rope.freq_base", rope_theta, F32, 0)                                              \
	X("ignis.attention.layer_norm_rms_epsilon", rms_eps, F32, 0)                               \
	X("ignis.vocab_size", vocab, U32, 0)                                                       \
	X("ignis.linear.key_head_count", lin_k_heads, U32, 0)                                      \
	X("ignis.linear.value_head_count", lin_v_heads, U32, 0)                                    \
	X("ignis.linear.key_length", lin_dk, U32, 0)                                               \
	X("ignis.linear.value_length", lin_dv, U32, 0)                                             \
	X("ignis.linear.conv_kernel", conv_kernel, U32, 0)                                         \
	X("ignis.feed_forward_length", ffn_inter, U32, MDESC_DENSE)                                \
	X("ignis.expert_count", experts, U32, MDESC_MOE)                                           \
	X("ignis.expert_used_count", top_k, U32, MDESC_MOE)                                        \
	X("ignis.expert_feed_forward_length", expert_inter, U32, MDESC_MOE)                        \
	X("ignis.expert_shared_feed_forward_length", shared_inter, U32, MDESC_MOE)                 \
	X("ignis.expert_prefetch_width", prefetch_width, U32, MDESC_MOE)                           \
	X("ignis.indexer_key_bytes", indexer_key_bytes, U32, MDESC_MOE)                            \
	X("ignis.context_length", default_context, U32, 0)                                         \
	X("ignis.prefill_chunk", default_chunk, U32, 0)                                            \
	X("ignis.default_max_tokens", default_max_tokens, U32, 0)                                  \
	X("ignis.decode_lanes", default_lanes, U32, 0)                                             \
	X("ignis.max_decode_lanes", max_lanes, U32, 0)                                             \
	X("ignis.retained_host_slots", default_retained_host, U32, MDESC_MOE)                      \
	X("ignis.kv_disk_bytes", default_kv_disk_bytes, U64, 0)                                    \
	X("ignis.expert_cache_floor_bytes", cache_floor_bytes, U64, MDESC_MOE)                     \
	X("ignis.offload_pool_pages", offload_pool_pages, U32, MDESC_MOE)

/* Largest shape a file may state: keeps every product of dims far from
 * overflow (2^24 ^ 3 < 2^63). */
#define MFILE_DIM_MAX (1u << 24)

/* ---- reading -------------------------------------------------------------- */

static int mfile__meta(struct mfile *f, struct ig_errbuf *eb)
{
	struct mdesc *d = &f->desc;
	struct gguf_str s;
	int rc;

	rc = gguf_get_str(&f->g, "general.architecture", &s, eb);
	if (rc)
		return ig_errprefix(eb, "'%s' is not a model of ours", f->g.path);
	if (s.len != strlen(MFILE_ARCH) || memcmp(s.ptr, MFILE_ARCH, s.len))
		return ig_errf(eb, IG_E_INVAL,
		               "'%s' is a '%.*s' model; accepted: architecture '" MFILE_ARCH "'",
		               f->g.path, (int)(s.len > 64 ? 64 : s.len), s.ptr);
	rc = gguf_get_str(&f->g, "ignis.family", &s, eb);
	if (rc)
		return ig_errprefix(eb, "'%s'", f->g.path);
	if (s.len == 5 && !memcmp(s.ptr, "dense", 5))
		d->family = MDESC_DENSE;
	else if (s.len == 3 && !memcmp(s.ptr, "moe", 3))
		d->family = MDESC_MOE;
	else
		return ig_errf(eb, IG_E_INVAL, "'%s': ignis.family '%.*s'; accepted: dense or moe",
		               f->g.path, (int)(s.len > 32 ? 32 : s.len), s.ptr);
	if (gguf_get_str(&f->g, "general.name", &s, eb) == IG_E_OK)
		snprintf(f->name, sizeof(f->name), "%.*s", (int)(s.len > 63 ? 63 : s.len), s.ptr);
	else
		snprintf(f->name, sizeof(f->name), "%s", f->g.path);
	d->name = d->alias = f->name;
	d->doc = "a model file";

#define MFILE__U32(field, key)                                                                     \
	rc = gguf_get_u32(&f->g, key, &d->field, eb);                                              \
	if (!rc && (d->field > MFILE_DIM_MAX))                                                     \
		rc = ig_errf(eb, IG_E_INVAL, "%s is %u; accepted: at most %u", key,                \
		             (unsigned)d->field, MFILE_DIM_MAX);
#define MFILE__U64(field, key) rc = gguf_get_u64(&f->g, key, &d->field, eb);
#define MFILE__F32(field, key) rc = gguf_get_f32(&f->g, key, &d->field, eb);
#define MFILE__READ(key, field, type, fam)                                                         \
	if ((fam) == 0 || (fam) == (int)d->family) {                                               \
		MFILE__##type(field, key) if (rc) return ig_errprefix(eb, "'%s'", f->g.path);      \
	}
	MFILE_KEYS(MFILE__READ)
#undef MFILE__READ
#undef MFILE__U32
#undef MFILE__U64
#undef MFILE__F32
	return IG_E_OK;
}

/* Shapes that the plan and the runtime divide by, or that must agree. */
static int mfile__shapes(struct mfile *f, struct ig_errbuf *eb)
{
	struct mdesc *d = &f->desc;
	const char *bad = NULL;

	if (!d->layers || !d->full_interval || !d->hidden || !d->q_heads || !d->kv_heads ||
	    !d->head_dim || !d->vocab || !d->lin_k_heads || !d->lin_v_heads || !d->lin_dk ||
	    !d->lin_dv || !d->conv_kernel || !d->default_context || !d->default_chunk ||
	    !d->default_max_tokens || !d->default_lanes || !d->max_lanes)
		bad = "a shape is 0";
	else if (d->q_heads % d->kv_heads)
		bad = "head_count is not a multiple of head_count_kv";
	else if (d->rope_dims > d->head_dim || d->rope_dims % 2)
		bad = "rope.dimension_count is odd or larger than key_length";
	else if (d->default_lanes > d->max_lanes || d->max_lanes > 64)
		bad = "decode_lanes exceeds max_decode_lanes, or that exceeds 64";
	else if (d->family == MDESC_DENSE && !d->ffn_inter)
		bad = "feed_forward_length is 0";
	else if (d->family == MDESC_MOE &&
	         (!d->experts || !d->top_k || d->top_k > d->experts || !d->expert_inter ||
	          !d->shared_inter || !d->offload_pool_pages))
		bad = "an expert shape is 0, or expert_used_count exceeds expert_count";
	if (bad)
		return ig_errf(eb, IG_E_INVAL, "'%s': inconsistent description: %s", f->g.path,
		               bad);
	return IG_E_OK;
}

struct mfile__check {
	struct mfile *f;
	struct ig_errbuf *eb;
	int rc;
	uint64_t expected;
	uint64_t layer_experts[2]; /* layer index + 1, its expert bytes so far */
};

static void mfile__check_one(void *ctx, const char *name, uint32_t n_dims, const uint64_t dims[4],
                             bool expert)
{
	struct mfile__check *c = ctx;
	struct mdesc *d = &c->f->desc;
	const struct gguf_tensor *t;
	unsigned layer;

	if (c->rc)
		return;
	c->expected++;
	t = gguf_find_tensor(&c->f->g, name);
	if (!t) {
		c->rc = ig_errf(c->eb, IG_E_INVAL,
		                "'%s': tensor '%s' is missing (expected dims [%llu, %llu, %llu])",
		                c->f->g.path, name, (unsigned long long)dims[0],
		                (unsigned long long)dims[1], (unsigned long long)dims[2]);
		return;
	}
	if (t->n_dims != n_dims || t->dims[0] != dims[0] || t->dims[1] != dims[1] ||
	    t->dims[2] != dims[2]) {
		c->rc =
		    ig_errf(c->eb, IG_E_INVAL,
		            "'%s': tensor '%s' has dims [%llu, %llu, %llu] (%u); the description "
		            "says [%llu, %llu, %llu] (%u)",
		            c->f->g.path, name, (unsigned long long)t->dims[0],
		            (unsigned long long)t->dims[1], (unsigned long long)t->dims[2],
		            t->n_dims, (unsigned long long)dims[0], (unsigned long long)dims[1],
		            (unsigned long long)dims[2], n_dims);
		return;
	}
	if (!expert) {
		d->weight_bytes += t->n_bytes;
		return;
	}
	d->expert_host_bytes += t->n_bytes;
	if (sscanf(name, "blk.%u.", &layer) == 1) {
		if (c->layer_experts[0] != layer + 1u) {
			c->layer_experts[0] = layer + 1u;
			c->layer_experts[1] = 0;
		}
		c->layer_experts[1] += t->n_bytes;
		if (c->layer_experts[1] > d->heaviest_layer_expert_bytes)
			d->heaviest_layer_expert_bytes = c->layer_experts[1];
	}
}

/* Figures the file does not state, derived from its shapes (ADR 0006). */
static void mfile__derive(struct mdesc *d)
{
	uint32_t lin = 0;

	d->full_layers = 0;
	for (uint32_t i = 0; i < d->layers; i++)
		if (mdesc_is_full_layer(d, i))
			d->full_layers++;
	lin = d->layers - d->full_layers;
	/* the fixed-size state: per linear layer the delta-rule state (v_heads x
	 * dk x dv fp32) and the convolution's last kernel-1 inputs (fp32 x qkv
	 * channels), and a 4 KiB image header */
	d->state_image_bytes =
	    (uint64_t)lin *
	        ((uint64_t)d->lin_v_heads * d->lin_dk * d->lin_dv +
	         (uint64_t)(d->conv_kernel - 1) *
	             (2ull * d->lin_k_heads * d->lin_dk + (uint64_t)d->lin_v_heads * d->lin_dv)) *
	        4u +
	    4096u;
	if (d->family == MDESC_DENSE) {
		d->fixed_lanes = d->default_lanes;
		return;
	}
	/* routing and slot tables: 64 B per expert and layer */
	d->expert_table_bytes = (uint64_t)d->layers * d->experts * 64u;
	/* class records: gate_up (hidden -> 2 x expert_inter) and down at 2, 2.5,
	 * 3 and 4 bits per weight, 4 KiB padded */
	for (int c = 0; c < MDESC_EXPERT_CLASSES; c++) {
		static const unsigned eighths[4] = {16, 20, 24, 32}; /* bits x 8 */
		uint64_t w = c < 4 ? 2ull * d->hidden * d->expert_inter
		                   : (uint64_t)d->expert_inter * d->hidden;
		uint64_t b = w * eighths[c % 4] / 64u;

		d->class_record_bytes[c] = (uint32_t)((b + 4095u) / 4096u * 4096u);
	}
}

struct mfile__find {
	struct mfile *f;
	const char *name;
	bool found;
};

static void mfile__find_one(void *ctx, const char *name, uint32_t n_dims, const uint64_t dims[4],
                            bool expert)
{
	struct mfile__find *x = ctx;

	(void)n_dims;
	(void)dims;
	(void)expert;
	if (!strcmp(name, x->name))
		x->found = true;
}

int mfile_open(struct mfile *f, const char *path, struct ig_errbuf *eb)
{
	struct mfile__check c;
	int rc;

	memset(f, 0, sizeof(*f));
	rc = gguf_open(&f->g, path, eb);
	if (rc)
		return rc;
	rc = mfile__meta(f, eb);
	if (!rc)
		rc = mfile__shapes(f, eb);
	if (rc)
		goto out_close;
	mfile__derive(&f->desc);
	f->desc.weight_bytes = 0;
	f->desc.expert_host_bytes = 0;
	memset(&c, 0, sizeof(c));
	c.f = f;
	c.eb = eb;
	mdesc_for_each_tensor(&f->desc, mfile__check_one, &c);
	rc = c.rc;
	if (!rc && c.expected != f->g.n_tensors) {
		/* every expected tensor is there: name one that is not expected */
		struct mfile__find find = {.f = f};

		for (size_t i = 0; i < f->g.n_tensors && !rc; i++) {
			find.name = gguf_tensor_at(&f->g, i)->name;
			find.found = false;
			mdesc_for_each_tensor(&f->desc, mfile__find_one, &find);
			if (!find.found)
				rc = ig_errf(eb, IG_E_INVAL,
				             "'%s': tensor '%s' is not part of an %s model", path,
				             find.name, MFILE_ARCH);
		}
		if (!rc)
			rc = ig_errf(eb, IG_E_INVAL,
			             "'%s': %zu tensors where the description has %llu", path,
			             (size_t)f->g.n_tensors, (unsigned long long)c.expected);
	}
	if (!rc)
		return IG_E_OK;
out_close:
	gguf_close(&f->g);
	return rc;
}

void mfile_close(struct mfile *f)
{
	gguf_close(&f->g);
}

/* ---- writing synthetic models ---------------------------------------------- */

struct mfile__gen {
	struct gguf_writer *w;
	enum mfile_dtype dtype;
	uint64_t seed;
	void **bufs;
	size_t nbufs, cap;
	int rc;
};

static uint64_t mfile__mix(uint64_t *s)
{
	/* splitmix64 */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void mfile__gen_one(void *ctx, const char *name, uint32_t n_dims, const uint64_t dims[4],
                           bool expert)
{
	struct mfile__gen *g = ctx;
	uint64_t n = 1, state = g->seed;
	size_t esize = g->dtype == MFILE_F32 ? 4 : 2;
	bool norm = strstr(name, "norm") != NULL || strstr(name, "gate_inp_shexp") != NULL;
	float scale;
	void *buf;

	(void)expert;
	if (g->rc)
		return;
	for (uint32_t i = 0; i < n_dims; i++)
		n *= dims[i];
	/* each tensor its own stream: the seed and the name */
	for (const char *p = name; *p; p++)
		state = state * 1099511628211ull ^ (unsigned char)*p;
	buf = malloc(n * esize);
	if (!buf || g->nbufs == g->cap) {
		free(buf);
		g->rc = IG_E_NOMEM;
		return;
	}
	g->bufs[g->nbufs++] = buf;
	/* uniform in [-1, 1) / sqrt(fan_in); norms near 1; decay logs in (0, 2.8] */
	scale = 1.0f / sqrtf((float)dims[0]);
	for (uint64_t i = 0; i < n; i++) {
		float u = (float)(mfile__mix(&state) >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
		float v = norm                      ? 1.0f + 0.05f * u
		          : strstr(name, "a_log")   ? 1.4f + 1.4f * u
		          : strstr(name, "dt_bias") ? 0.1f * u
		                                    : u * scale;

		if (g->dtype == MFILE_F32)
			memcpy((char *)buf + 4 * i, &v, 4);
		else {
			uint16_t h =
			    g->dtype == MFILE_BF16 ? gguf_f32_to_bf16(v) : gguf_f32_to_f16(v);

			memcpy((char *)buf + 2 * i, &h, 2);
		}
	}
	if (gguf_writer_add_tensor(g->w, name, (uint32_t)g->dtype, n_dims, dims, buf))
		g->rc = IG_E_INVAL;
}

int mfile_write_synthetic(const struct mdesc *m, uint64_t seed, enum mfile_dtype dtype,
                          const char *path, struct ig_errbuf *eb)
{
	struct gguf_writer w;
	struct mfile__gen g = {.w = &w, .dtype = dtype, .seed = seed};
	int rc = IG_E_OK;

	g.cap = 64u + 32u * m->layers;
	g.bufs = calloc(g.cap, sizeof(void *));
	if (!g.bufs)
		return ig_errf(eb, IG_E_NOMEM, "no memory for %s", m->name);
	gguf_writer_init(&w);
	gguf_writer_add_str(&w, "general.architecture", MFILE_ARCH);
	gguf_writer_add_str(&w, "general.name", m->name);
	gguf_writer_add_str(&w, "ignis.family", m->family == MDESC_DENSE ? "dense" : "moe");
	gguf_writer_add_str(&w, "tokenizer.ggml.model", "bytes");
	gguf_writer_add_u64(&w, "ignis.seed", seed);
#define MFILE__W_U32(field, key) gguf_writer_add_u32(&w, key, m->field);
#define MFILE__W_U64(field, key) gguf_writer_add_u64(&w, key, m->field);
#define MFILE__W_F32(field, key) gguf_writer_add_f32(&w, key, m->field);
#define MFILE__WRITE(key, field, type, fam)                                                        \
	if ((fam) == 0 || (fam) == (int)m->family) {                                               \
		MFILE__W_##type(field, key)                                                        \
	}
	MFILE_KEYS(MFILE__WRITE)
#undef MFILE__WRITE
	mdesc_for_each_tensor(m, mfile__gen_one, &g);
	if (g.rc)
		rc = ig_errf(eb, g.rc, "cannot build the tensors of %s", m->name);
	else
		rc = gguf_writer_write(&w, path, eb);
	gguf_writer_release(&w);
	for (size_t i = 0; i < g.nbufs; i++)
		free(g.bufs[i]);
	free(g.bufs);
	return rc;
}
