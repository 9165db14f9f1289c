/* mfile.c - model files of the ignis-hybrid family (see mfile.h). */
#include "mfile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "bpe.h"
#include "chat.h"
#include "quant.h"

/*
 * The metadata of a model file: X(key, mdesc field, type, family, min, max).
 * family 0: every model; MDESC_DENSE or MDESC_MOE: that family only. min and
 * max bound integers (FLOAT32 values must be finite and above 0). Keys under
 * "ignis." are ours; the writer emits them in this order (never reorder: the
 * tiny models' bytes are pinned by tests/unit/test_mfile.c).
 *   max_lanes <= 64: the scheduler's lane masks are 64 bits.
 *   rope.dimension_count >= 2: the rotary pairs of layer_full.c.
 *   block_count, expert_count: MFILE_LAYERS_MAX, MFILE_EXPERTS_MAX (mfile.h).
 */
#define D MFILE_DIM_MAX
#define MFILE_KEYS(X)                                                                              \
	X("ignis.block_count", layers, U32, 0, 1, MFILE_LAYERS_MAX)                                \
	X("ignis.full_attention_interval", full_interval, U32, 0, 1, D)                            \
	X("ignis.embedding_length", hidden, U32, 0, 1, D)                                          \
	X("ignis.attention.head_count", q_heads, U32, 0, 1, D)                                     \
	X("ignis.attention.head_count_kv", kv_heads, U32, 0, 1, D)                                 \
	X("ignis.attention.key_length", head_dim, U32, 0, 1, D)                                    \
	X("ignis.rope.dimension_count", rope_dims, U32, 0, 2, D)                                   \
	X("ignis.rope.freq_base", rope_theta, F32, 0, 0, 0)                                        \
	X("ignis.attention.layer_norm_rms_epsilon", rms_eps, F32, 0, 0, 0)                         \
	X("ignis.vocab_size", vocab, U32, 0, 1, D)                                                 \
	X("ignis.linear.key_head_count", lin_k_heads, U32, 0, 1, D)                                \
	X("ignis.linear.value_head_count", lin_v_heads, U32, 0, 1, D)                              \
	X("ignis.linear.key_length", lin_dk, U32, 0, 1, D)                                         \
	X("ignis.linear.value_length", lin_dv, U32, 0, 1, D)                                       \
	X("ignis.linear.conv_kernel", conv_kernel, U32, 0, 1, D)                                   \
	X("ignis.feed_forward_length", ffn_inter, U32, MDESC_DENSE, 1, D)                          \
	X("ignis.expert_count", experts, U32, MDESC_MOE, 1, MFILE_EXPERTS_MAX)                     \
	X("ignis.expert_used_count", top_k, U32, MDESC_MOE, 1, D)                                  \
	X("ignis.expert_feed_forward_length", expert_inter, U32, MDESC_MOE, 1, D)                  \
	X("ignis.expert_shared_feed_forward_length", shared_inter, U32, MDESC_MOE, 1, D)           \
	X("ignis.expert_prefetch_width", prefetch_width, U32, MDESC_MOE, 0, D)                     \
	X("ignis.indexer_key_bytes", indexer_key_bytes, U32, MDESC_MOE, 0, D)                      \
	X("ignis.context_length", default_context, U32, 0, 1, D)                                   \
	X("ignis.prefill_chunk", default_chunk, U32, 0, 1, D)                                      \
	X("ignis.default_max_tokens", default_max_tokens, U32, 0, 1, D)                            \
	X("ignis.decode_lanes", default_lanes, U32, 0, 1, 64)                                      \
	X("ignis.max_decode_lanes", max_lanes, U32, 0, 1, 64)                                      \
	X("ignis.retained_host_slots", default_retained_host, U32, MDESC_MOE, 0, D)                \
	X("ignis.kv_disk_bytes", default_kv_disk_bytes, U64, 0, 0, UINT64_MAX)                     \
	X("ignis.expert_cache_floor_bytes", cache_floor_bytes, U64, MDESC_MOE, 0, UINT64_MAX)      \
	X("ignis.offload_pool_pages", offload_pool_pages, U32, MDESC_MOE, 1, D)

#define MFILE__T_U32 GGUF_TYPE_UINT32
#define MFILE__T_U64 GGUF_TYPE_UINT64
#define MFILE__T_F32 GGUF_TYPE_FLOAT32
#define MFILE__ROW(k, f, t, fam, lo, hi)                                                           \
	{k, #f, MFILE__T_##t, fam, offsetof(struct mdesc, f), lo, hi},
const struct mfile_key mfile_keys[] = {MFILE_KEYS(MFILE__ROW)};
#undef MFILE__ROW
#undef D
const size_t mfile_nkeys = sizeof(mfile_keys) / sizeof(mfile_keys[0]);

const struct mfile_key *mfile_key_find(const char *name)
{
	for (size_t i = 0; i < mfile_nkeys; i++)
		if (!strcmp(name, mfile_keys[i].key) || !strcmp(name, mfile_keys[i].field))
			return &mfile_keys[i];
	return NULL;
}

bool mfile_key_applies(const struct mfile_key *k, enum mdesc_family family)
{
	return k->family == 0 || k->family == (int)family;
}

uint64_t mfile_key_get(const struct mdesc *m, const struct mfile_key *k)
{
	const char *p = (const char *)m + k->offset;
	uint32_t u32;
	uint64_t u64;

	if (k->type == GGUF_TYPE_UINT32) {
		memcpy(&u32, p, 4);
		return u32;
	}
	if (k->type == GGUF_TYPE_UINT64) {
		memcpy(&u64, p, 8);
		return u64;
	}
	return 0;
}

static float mfile__key_f32(const struct mdesc *m, const struct mfile_key *k)
{
	float f;

	memcpy(&f, (const char *)m + k->offset, 4);
	return f;
}

bool mfile_same_shape(const struct mdesc *a, const struct mdesc *b)
{
	if (a->family != b->family || a->tokenizer != b->tokenizer || a->arch != b->arch ||
	    a->attn_ungated != b->attn_ungated || a->tied_output != b->tied_output)
		return false;
	for (size_t i = 0; i < mfile_nkeys; i++) {
		const struct mfile_key *k = &mfile_keys[i];

		if (!mfile_key_applies(k, a->family))
			continue;
		if (k->type == GGUF_TYPE_FLOAT32 ? mfile__key_f32(a, k) != mfile__key_f32(b, k)
		                                 : mfile_key_get(a, k) != mfile_key_get(b, k))
			return false;
	}
	return true;
}

/* A key as messages name it, "%s (%s)": "ignis.attention.head_count (q_heads)". */
#define KF(field)    mfile_key_find(#field)->key, #field
#define INCONSISTENT "inconsistent description: "

/* Every layer full attention (llama.cpp's qwen3): the linear layers' keys
 * have nothing to describe. */
static bool mfile__no_linear(const struct mdesc *d)
{
	return d->full_interval == 1;
}

static bool mfile__lin_key(const struct mfile_key *k)
{
	return k->offset == offsetof(struct mdesc, lin_k_heads) ||
	       k->offset == offsetof(struct mdesc, lin_v_heads) ||
	       k->offset == offsetof(struct mdesc, lin_dk) ||
	       k->offset == offsetof(struct mdesc, lin_dv) ||
	       k->offset == offsetof(struct mdesc, conv_kernel);
}

int mfile_check_desc(const struct mdesc *d, struct ig_errbuf *eb)
{
	struct mdesc_lin_state lin;

	for (size_t i = 0; i < mfile_nkeys; i++) {
		const struct mfile_key *k = &mfile_keys[i];
		uint64_t v;

		if (!mfile_key_applies(k, d->family) || (mfile__no_linear(d) && mfile__lin_key(k)))
			continue;
		if (k->type == GGUF_TYPE_FLOAT32) {
			float f = mfile__key_f32(d, k);

			if (!(f > 0.0f) || !isfinite(f))
				return ig_errf(eb, IG_E_INVAL,
				               INCONSISTENT
				               "%s (%s) is %g; accepted: a finite number "
				               "above 0",
				               k->key, k->field, (double)f);
			continue;
		}
		v = mfile_key_get(d, k);
		if (v < k->min || v > k->max)
			return ig_errf(eb, IG_E_INVAL,
			               INCONSISTENT "%s (%s) is %llu; accepted: %llu to %llu",
			               k->key, k->field, (unsigned long long)v,
			               (unsigned long long)k->min, (unsigned long long)k->max);
	}
	if (d->tokenizer != MDESC_TOK_NONE && d->tokenizer != MDESC_TOK_BYTES &&
	    d->tokenizer != MDESC_TOK_GPT2)
		return ig_errf(eb, IG_E_INVAL,
		               INCONSISTENT MFILE_TOKENIZER_KEY " (tokenizer) is %d; accepted: "
		                                                "none, bytes, gpt2",
		               (int)d->tokenizer);
	if (d->tokenizer == MDESC_TOK_BYTES && d->vocab != MDESC_BYTES_VOCAB)
		return ig_errf(eb, IG_E_INVAL,
		               INCONSISTENT MFILE_TOKENIZER_KEY
		               " (tokenizer) 'bytes' is the "
		               "byte-level tokenizer of %u ids; %s (%s) is %u: accepted: "
		               "vocab %u, or tokenizer 'none' (token ids only)",
		               MDESC_BYTES_VOCAB, KF(vocab), d->vocab, MDESC_BYTES_VOCAB);
	if (d->q_heads % d->kv_heads)
		return ig_errf(eb, IG_E_INVAL,
		               INCONSISTENT "%s (%s) %u is not a multiple of %s (%s) %u",
		               KF(q_heads), d->q_heads, KF(kv_heads), d->kv_heads);
	if (!mfile__no_linear(d) && d->lin_v_heads % d->lin_k_heads)
		return ig_errf(eb, IG_E_INVAL,
		               INCONSISTENT "%s (%s) %u is not a multiple of %s (%s) %u",
		               KF(lin_v_heads), d->lin_v_heads, KF(lin_k_heads), d->lin_k_heads);
	if (d->rope_dims % 2 || d->rope_dims > d->head_dim)
		return ig_errf(eb, IG_E_INVAL,
		               INCONSISTENT "%s (%s) %u is odd or larger than %s (%s) %u",
		               KF(rope_dims), d->rope_dims, KF(head_dim), d->head_dim);
	if (d->head_dim % MDESC_KV_GROUP)
		return ig_errf(eb, IG_E_INVAL,
		               INCONSISTENT "%s (%s) %u is not a multiple of %u (the compact KV "
		                            "format's group)",
		               KF(head_dim), d->head_dim, MDESC_KV_GROUP);
	if (d->layers < d->full_interval)
		return ig_errf(eb, IG_E_INVAL,
		               INCONSISTENT "%s (%s) %u is below %s (%s) %u: no full-attention "
		                            "layer",
		               KF(layers), d->layers, KF(full_interval), d->full_interval);
	if (d->default_lanes > d->max_lanes)
		return ig_errf(eb, IG_E_INVAL, INCONSISTENT "%s (%s) %u exceeds %s (%s) %u",
		               KF(default_lanes), d->default_lanes, KF(max_lanes), d->max_lanes);
	if (d->family == MDESC_MOE && d->top_k > d->experts)
		return ig_errf(eb, IG_E_INVAL, INCONSISTENT "%s (%s) %u exceeds %s (%s) %u",
		               KF(top_k), d->top_k, KF(experts), d->experts);
	/* an expert's class record (4 bits per weight of hidden x expert_inter x 2)
	 * is a uint32 figure */
	if (d->family == MDESC_MOE && (uint64_t)d->hidden * d->expert_inter > UINT32_MAX - 4096u)
		return ig_errf(eb, IG_E_INVAL,
		               INCONSISTENT "%s (%s) x %s (%s) is over 2^32: an expert's class "
		                            "record does not fit its figure",
		               KF(hidden), KF(expert_inter));
	/* the fixed-size state (mdesc_lin_state) must not wrap */
	if (!mdesc_lin_state(d, &lin))
		return ig_errf(eb, IG_E_INVAL,
		               INCONSISTENT "the linear-attention state of these shapes (value "
		                            "heads x key length x value length x layers) exceeds "
		                            "2^64 bytes");
	return IG_E_OK;
}
#undef KF
#undef INCONSISTENT

/* ---- reading -------------------------------------------------------------- */

/* ---- llama.cpp's layouts --------------------------------------------------- */

/* The key "<arch>.<suffix>" into key[] (the layout f->desc.arch names):
 * found, or absent (an error when `required`). */
static int mfile__arch_key(const struct mfile *f, const char *suffix, bool required, char *key,
                           size_t cap, bool *found, struct ig_errbuf *eb)
{
	snprintf(key, cap, "%s.%s", mdesc_arch_name(f->desc.arch), suffix);
	*found = gguf_find_kv(&f->g, key) != NULL;
	if (!*found && required)
		return ig_errf(eb, IG_E_INVAL, "'%s': key %s is missing", f->g.path, key);
	return IG_E_OK;
}

/* A uint32 key, lo to hi; `def` when absent and not required. */
static int mfile__arch_u32_in(const struct mfile *f, const char *suffix, bool required,
                              uint32_t def, uint32_t lo, uint32_t hi, uint32_t *out,
                              struct ig_errbuf *eb)
{
	char key[96];
	bool found;
	int rc = mfile__arch_key(f, suffix, required, key, sizeof key, &found, eb);

	*out = def;
	if (rc || !found)
		return rc;
	rc = gguf_get_u32(&f->g, key, out, eb);
	if (!rc && (*out < lo || *out > hi))
		return ig_errf(eb, IG_E_INVAL, "'%s': %s is %u; accepted: %u to %u", f->g.path, key,
		               *out, lo, hi);
	return rc ? ig_errprefix(eb, "'%s'", f->g.path) : IG_E_OK;
}

/* A uint32 key, lo to MFILE_DIM_MAX. */
static int mfile__arch_u32_from(const struct mfile *f, const char *suffix, bool required,
                                uint32_t def, uint32_t lo, uint32_t *out, struct ig_errbuf *eb)
{
	return mfile__arch_u32_in(f, suffix, required, def, lo, MFILE_DIM_MAX, out, eb);
}

static int mfile__arch_u32(const struct mfile *f, const char *suffix, bool required, uint32_t def,
                           uint32_t *out, struct ig_errbuf *eb)
{
	return mfile__arch_u32_from(f, suffix, required, def, 1, out, eb);
}

/*
 * The layers a file states against what its tensor table holds (mfile.h,
 * MFILE_LAYER_MIN_TENSORS): `blocks` of which `mtp` are MTP blocks (each at
 * least one tensor), the rest layers. Checked as soon as the count is
 * known, before anything walks the layers: a file of a few KB stating 2^24
 * blocks is refused here, naming `key`, not after a walk of 2^24 layers.
 */
static int mfile__blocks_fit(const struct mfile *f, const char *key, uint32_t blocks, uint32_t mtp,
                             struct ig_errbuf *eb)
{
	size_t n = f->g.n_tensors, most = n > mtp ? (n - mtp) / MFILE_LAYER_MIN_TENSORS : 0;

	if (blocks - mtp <= most)
		return IG_E_OK;
	return ig_errf(eb, IG_E_INVAL,
	               "'%s': %s is %u but the file's %zu tensors hold at most %zu layers (a "
	               "layer has at least %u tensors); accepted: 1 to %zu",
	               f->g.path, key, blocks, n, most, MFILE_LAYER_MIN_TENSORS, most);
}

/* A float32 key; `def` when absent and not required. */
static int mfile__arch_f32(const struct mfile *f, const char *suffix, bool required, float def,
                           float *out, struct ig_errbuf *eb)
{
	char key[96];
	bool found;
	int rc = mfile__arch_key(f, suffix, required, key, sizeof key, &found, eb);

	*out = def;
	if (rc || !found)
		return rc;
	rc = gguf_get_f32(&f->g, key, out, eb);
	return rc ? ig_errprefix(eb, "'%s'", f->g.path) : IG_E_OK;
}

/*
 * Which layers are full attention: "<arch>.attention.recurrent_layers" (a
 * bool per block, MTP blocks included) when the file has it, else
 * "<arch>.full_attention_interval" (default 4, as llama.cpp). We run the
 * periodic pattern (layer i full when (i + 1) % interval == 0): an array
 * that is not one is refused, saying so.
 */
static int mfile__pattern(struct mfile *f, uint32_t blocks, struct ig_errbuf *eb)
{
	struct mdesc *d = &f->desc;
	char key[96];
	bool found;
	struct gguf_arr arr;
	const uint8_t *rec;
	uint32_t interval = 0;
	int rc =
	    mfile__arch_key(f, "attention.recurrent_layers", false, key, sizeof key, &found, eb);

	if (rc)
		return rc;
	if (!found)
		return mfile__arch_u32(f, "full_attention_interval", false, 4, &d->full_interval,
		                       eb);
	rc = gguf_get_arr(&f->g, key, GGUF_TYPE_BOOL, &arr, eb);
	if (rc)
		return ig_errprefix(eb, "'%s'", f->g.path);
	if (arr.n != blocks)
		return ig_errf(eb, IG_E_INVAL, "'%s': %s has %llu entries; the file has %u blocks",
		               f->g.path, key, (unsigned long long)arr.n, blocks);
	rec = arr.data;
	for (uint32_t i = 0; i < d->layers && !interval; i++)
		if (!rec[i])
			interval = i + 1;
	for (uint32_t i = 0; i < d->layers; i++)
		if (!interval || (rec[i] != 0) != ((i + 1) % interval != 0))
			return ig_errf(
			    eb, IG_E_INVAL,
			    "'%s': %s: layer %u is %s; Ignis runs one full-attention layer "
			    "every N (layer i full when (i + 1) %% N == 0), with at least "
			    "one",
			    f->g.path, key, i, rec[i] ? "linear" : "full attention");
	d->full_interval = interval;
	return IG_E_OK;
}

/* The keys of a hybrid (qwen35, qwen35moe, qwen3next) beyond qwen3's and
 * its MTP blocks: the layer pattern, the gated delta rule, the experts. */
static int mfile__meta_hybrid(struct mfile *f, uint32_t blocks, struct ig_errbuf *eb)
{
	struct mdesc *d = &f->desc;
	const char *arch = mdesc_arch_name(d->arch);
	uint32_t inner, ff = 0;
	int rc;

	d->attn_ungated = false;
	if ((rc = mfile__pattern(f, blocks, eb)) ||
	    (rc = mfile__arch_u32(f, "ssm.conv_kernel", true, 0, &d->conv_kernel, eb)) ||
	    (rc = mfile__arch_u32(f, "ssm.state_size", true, 0, &d->lin_dk, eb)) ||
	    (rc = mfile__arch_u32(f, "ssm.group_count", true, 0, &d->lin_k_heads, eb)) ||
	    (rc = mfile__arch_u32(f, "ssm.time_step_rank", true, 0, &d->lin_v_heads, eb)) ||
	    (rc = mfile__arch_u32(f, "ssm.inner_size", true, 0, &inner, eb)))
		return rc;
	/* llama.cpp's graphs take the value head's length to be the state size */
	if ((uint64_t)d->lin_v_heads * d->lin_dk != inner)
		return ig_errf(eb, IG_E_INVAL,
		               "'%s': %s.ssm.inner_size %u is not ssm.time_step_rank %u x "
		               "ssm.state_size %u (the value heads' length must be the key heads')",
		               f->g.path, arch, inner, d->lin_v_heads, d->lin_dk);
	d->lin_dv = d->lin_dk;
	if (d->arch == MDESC_ARCH_QWEN35) {
		d->family = MDESC_DENSE;
		return mfile__arch_u32(f, "feed_forward_length", true, 0, &d->ffn_inter, eb);
	}
	d->family = MDESC_MOE;
	if ((rc = mfile__arch_u32(f, "feed_forward_length", false, 0, &ff, eb)) ||
	    (rc = mfile__arch_u32_in(f, "expert_count", true, 0, 1, MFILE_EXPERTS_MAX, &d->experts,
	                             eb)) ||
	    (rc = mfile__arch_u32(f, "expert_used_count", true, 0, &d->top_k, eb)) ||
	    (rc =
	         mfile__arch_u32(f, "expert_feed_forward_length", true, 0, &d->expert_inter, eb)) ||
	    (rc = mfile__arch_u32(f, "expert_shared_feed_forward_length", ff == 0, ff,
	                          &d->shared_inter, eb)))
		return rc;
	/* Ignis's MoE knobs, which a llama.cpp file does not carry (ADR 0033) */
	d->prefetch_width = d->top_k;
	d->indexer_key_bytes = 0;
	d->default_retained_host = MFILE_LLAMA_MOE_RETAINED_HOST;
	d->offload_pool_pages = MFILE_LLAMA_MOE_POOL_PAGES;
	d->cache_floor_bytes = MFILE_LLAMA_MOE_FLOOR;
	return IG_E_OK;
}

/*
 * llama.cpp's layouts: "qwen3" (a dense transformer: every layer full
 * attention with QK-norm and NeoX RoPE over the whole head, no output gate,
 * SwiGLU) and the hybrids "qwen35", "qwen35moe", "qwen3next" (gated full
 * attention every N layers, the gated delta rule between, a dense or MoE
 * feed-forward); the output tied to the embedding when the file has no
 * output.weight. What such a file does not carry, Ignis's per-model knobs,
 * takes the defaults of docs/adr/0031 and 0033; the context is the file's
 * context_length.
 */
static int mfile__meta_llama(struct mfile *f, enum mdesc_arch arch, struct ig_errbuf *eb)
{
	struct mdesc *d = &f->desc;
	const struct gguf_tensor *embd = gguf_find_tensor(&f->g, "token_embd.weight");
	const char *an = mdesc_arch_name(arch);
	struct gguf_str s;
	char key[96];
	uint32_t vlen, blocks;
	int rc;

	d->arch = arch;
	d->family = MDESC_DENSE;
	if ((rc =
	         mfile__arch_u32_in(f, "block_count", true, 0, 1, MFILE_LAYERS_MAX, &blocks, eb)) ||
	    (rc = mfile__arch_u32(f, "embedding_length", true, 0, &d->hidden, eb)) ||
	    (rc = mfile__arch_u32(f, "attention.head_count", true, 0, &d->q_heads, eb)) ||
	    (rc = mfile__arch_u32(f, "attention.head_count_kv", false, d->q_heads, &d->kv_heads,
	                          eb)) ||
	    (rc = mfile__arch_u32(f, "attention.key_length", false, d->hidden / d->q_heads,
	                          &d->head_dim, eb)) ||
	    (rc = mfile__arch_u32(f, "attention.value_length", false, d->head_dim, &vlen, eb)) ||
	    (rc = mfile__arch_u32(f, "rope.dimension_count", false, d->head_dim, &d->rope_dims,
	                          eb)) ||
	    (rc = mfile__arch_u32(f, "context_length", true, 0, &d->default_context, eb)) ||
	    (rc = mfile__arch_f32(f, "rope.freq_base", false, 10000.0f, &d->rope_theta, eb)) ||
	    (rc = mfile__arch_f32(f, "attention.layer_norm_rms_epsilon", true, 0, &d->rms_eps, eb)))
		return rc;
	if (vlen != d->head_dim)
		return ig_errf(
		    eb, IG_E_INVAL,
		    "'%s': %s.attention.value_length %u must equal the key length %u (as "
		    "llama.cpp's %s requires)",
		    f->g.path, an, vlen, d->head_dim, an);
	/* a hybrid's MTP blocks are counted in block_count */
	if (arch != MDESC_ARCH_QWEN3 &&
	    (rc = mfile__arch_u32_from(f, "nextn_predict_layers", false, 0, 0, &d->mtp_layers, eb)))
		return rc;
	if (d->mtp_layers >= blocks)
		return ig_errf(
		    eb, IG_E_INVAL,
		    "'%s': %s.nextn_predict_layers %u leaves no layer of %s.block_count %u",
		    f->g.path, an, d->mtp_layers, an, blocks);
	d->layers = blocks - d->mtp_layers;
	snprintf(key, sizeof key, "%s.block_count", an);
	if ((rc = mfile__blocks_fit(f, key, blocks, d->mtp_layers, eb)))
		return rc;
	if (arch == MDESC_ARCH_QWEN3) {
		d->attn_ungated = true;
		d->full_interval = 1;
		if ((rc = mfile__arch_u32(f, "feed_forward_length", true, 0, &d->ffn_inter, eb)))
			return rc;
		if (d->rope_dims != d->head_dim)
			return ig_errf(
			    eb, IG_E_INVAL,
			    "'%s': qwen3.rope.dimension_count %u must equal the key length "
			    "%u (as llama.cpp's qwen3 requires)",
			    f->g.path, d->rope_dims, d->head_dim);
	} else if ((rc = mfile__meta_hybrid(f, blocks, eb))) {
		return rc;
	}
	if (!embd || embd->n_dims != 2)
		return ig_errf(eb, IG_E_INVAL,
		               "'%s': tensor 'token_embd.weight' (2 dims) is missing", f->g.path);
	if (embd->dims[1] > MFILE_DIM_MAX)
		return ig_errf(eb, IG_E_INVAL,
		               "'%s': a vocabulary of %llu rows; accepted: up to %u", f->g.path,
		               (unsigned long long)embd->dims[1], MFILE_DIM_MAX);
	d->vocab = (uint32_t)embd->dims[1];
	d->tied_output = gguf_find_tensor(&f->g, "output.weight") == NULL;
	if (d->family == MDESC_DENSE) {
		d->default_lanes = d->max_lanes = MFILE_QWEN3_LANES;
	} else {
		d->default_lanes = MFILE_LLAMA_MOE_LANES;
		d->max_lanes = MFILE_LLAMA_MOE_MAX_LANES;
	}
	d->default_chunk = MFILE_QWEN3_CHUNK;
	d->default_max_tokens = MFILE_QWEN3_MAX_TOKENS;
	if (gguf_get_str(&f->g, "general.name", &s, eb) == IG_E_OK)
		snprintf(f->name, sizeof(f->name), "%.*s", (int)(s.len > 63 ? 63 : s.len), s.ptr);
	else
		snprintf(f->name, sizeof(f->name), "%s", f->g.path);
	d->name = d->alias = f->name;
	d->doc = "a llama.cpp model file";
	rc = gguf_get_str(&f->g, MFILE_TOKENIZER_KEY, &s, eb);
	if (rc || s.len != 4 || memcmp(s.ptr, "gpt2", 4))
		return ig_errf(eb, IG_E_INVAL,
		               "'%s': a %s file carries its vocabulary (" MFILE_TOKENIZER_KEY
		               " gpt2)",
		               f->g.path, an);
	d->tokenizer = MDESC_TOK_GPT2;
	return IG_E_OK;
}

static int mfile__meta(struct mfile *f, struct ig_errbuf *eb)
{
	struct mdesc *d = &f->desc;
	struct gguf_str s;
	int rc;

	rc = gguf_get_str(&f->g, "general.architecture", &s, eb);
	if (rc)
		return ig_errprefix(eb, "'%s' is not a model file", f->g.path);
	for (int a = MDESC_ARCH_QWEN3; a < MDESC_ARCH_COUNT; a++)
		if (s.len == strlen(mdesc_arch_name(a)) &&
		    !memcmp(s.ptr, mdesc_arch_name(a), s.len))
			return mfile__meta_llama(f, (enum mdesc_arch)a, eb);
	if (s.len != strlen(MFILE_ARCH) || memcmp(s.ptr, MFILE_ARCH, s.len))
		return ig_errf(eb, IG_E_INVAL,
		               "'%s' is a '%.*s' model; accepted: architecture " MFILE_ARCHS,
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
	/* the tokenizer: stated by every file (ignis-mkmodel writes it), never
	 * guessed from the vocabulary (docs/adr/0025) */
	rc = gguf_get_str(&f->g, MFILE_TOKENIZER_KEY, &s, eb);
	if (rc == IG_E_NOTFOUND)
		return ig_errf(eb, IG_E_INVAL,
		               "'%s' names no tokenizer (no key " MFILE_TOKENIZER_KEY
		               "); accepted: none (token ids only), bytes (the byte-level "
		               "tokenizer) or gpt2 (a byte-level BPE)",
		               f->g.path);
	if (rc)
		return rc;
	if (!mdesc_tokenizer_of(s.ptr, s.len, &d->tokenizer))
		return ig_errf(eb, IG_E_INVAL,
		               "'%s': " MFILE_TOKENIZER_KEY " '%.*s'; accepted: none (token ids "
		               "only), bytes (the byte-level tokenizer) or gpt2 (a byte-level BPE)",
		               f->g.path, (int)(s.len > 32 ? 32 : s.len), s.ptr);

	for (size_t i = 0; i < mfile_nkeys; i++) {
		const struct mfile_key *k = &mfile_keys[i];
		char *field = (char *)d + k->offset;
		uint32_t u32 = 0;
		uint64_t u64 = 0;
		float f32 = 0;

		if (!mfile_key_applies(k, d->family))
			continue;
		if (k->type == GGUF_TYPE_UINT32) {
			rc = gguf_get_u32(&f->g, k->key, &u32, eb);
			memcpy(field, &u32, 4);
		} else if (k->type == GGUF_TYPE_UINT64) {
			rc = gguf_get_u64(&f->g, k->key, &u64, eb);
			memcpy(field, &u64, 8);
		} else {
			rc = gguf_get_f32(&f->g, k->key, &f32, eb);
			memcpy(field, &f32, 4);
		}
		if (rc)
			return ig_errprefix(eb, "'%s'", f->g.path);
	}
	return IG_E_OK;
}

/*
 * The figures summed from the tensors: device weights, experts, and the
 * heaviest layer's experts. One accountant for a file's tensors (their real
 * bytes) and for a synthetic description's (dims x the dtype's size).
 */
struct mfile__sum {
	uint64_t layer_experts[2]; /* layer index + 1, its expert bytes so far */
};

static void mfile__account(struct mdesc *d, struct mfile__sum *s, const char *name,
                           uint64_t n_bytes, bool expert)
{
	unsigned layer;

	if (!expert) {
		d->weight_bytes += n_bytes;
		return;
	}
	d->expert_host_bytes += n_bytes;
	if (sscanf(name, "blk.%u.", &layer) == 1) {
		if (s->layer_experts[0] != layer + 1u) {
			s->layer_experts[0] = layer + 1u;
			s->layer_experts[1] = 0;
		}
		s->layer_experts[1] += n_bytes;
		if (s->layer_experts[1] > d->heaviest_layer_expert_bytes)
			d->heaviest_layer_expert_bytes = s->layer_experts[1];
	}
}

struct mfile__check {
	struct mfile *f;
	struct ig_errbuf *eb;
	int rc;
	uint64_t expected;
	struct mfile__sum sum;
};

static void mfile__check_one(void *ctx, const char *name, uint32_t n_dims, const uint64_t dims[4],
                             bool expert)
{
	struct mfile__check *c = ctx;
	const struct gguf_tensor *t;

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
	mfile__account(&c->f->desc, &c->sum, name, t->n_bytes, expert);
}

/* Figures the file does not state, derived from its shapes (ADR 0006). The
 * figures summed from tensors start at 0. */
static void mfile__derive(struct mdesc *d)
{
	d->weight_bytes = 0;
	d->expert_host_bytes = 0;
	d->heaviest_layer_expert_bytes = 0;
	d->full_layers = 0;
	for (uint32_t i = 0; i < d->layers; i++)
		if (mdesc_is_full_layer(d, i))
			d->full_layers++;
	/* the fixed-size state image is derived where it is needed
	 * (mdesc_state_image_bytes): a file carries no such figure */
	d->state_image_bytes = 0;
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

		d->class_record_bytes[c] = (uint32_t)MDESC_EXPERT_RECORD_PAD(b);
	}
}

/*
 * A MoE file's expert classes are its own (docs/adr/0033; ours too, 0039): a class
 * is a projection and the tensor type(s) it is stored in, its record one
 * expert's bytes of it, 4 KiB padded: classes 0..3 the distinct gate+up
 * pairs of types met over the layers, 4..7 the distinct down types (a
 * Q4_K_M file: gate_up Q4_K; down Q4_K and Q6_K), the rest 0. `type_of`
 * gives a tensor's type by name. More than four of either is refused.
 */
static int mfile__real_classes(struct mdesc *d, uint32_t (*type_of)(void *ctx, const char *name),
                               void *ctx, struct ig_errbuf *eb)
{
	uint32_t gu_key[MDESC_EXPERT_WIDTHS], dn_key[MDESC_EXPERT_WIDTHS];
	unsigned n_gu = 0, n_dn = 0;
	char nm[64];

	memset(d->class_record_bytes, 0, sizeof d->class_record_bytes);
	for (uint32_t l = 0; l < d->layers; l++) {
		uint32_t tg, tu, td, key;
		uint64_t b;
		unsigned i;

		mdesc_tensor_name(d, (int)l, "ffn_gate_exps", nm, sizeof nm);
		tg = type_of(ctx, nm);
		mdesc_tensor_name(d, (int)l, "ffn_up_exps", nm, sizeof nm);
		tu = type_of(ctx, nm);
		mdesc_tensor_name(d, (int)l, "ffn_down_exps", nm, sizeof nm);
		td = type_of(ctx, nm);
		key = tg << 16 | tu;
		for (i = 0; i < n_gu && gu_key[i] != key; i++)
			;
		if (i == n_gu) {
			if (n_gu == MDESC_EXPERT_WIDTHS)
				return ig_errf(
				    eb, IG_E_INVAL,
				    "the experts' gate and up projections come in more than "
				    "%u pairs of types; accepted: up to %u",
				    MDESC_EXPERT_WIDTHS, MDESC_EXPERT_WIDTHS);
			gu_key[n_gu++] = key;
			b = (quant_row_bytes(tg, d->hidden) + quant_row_bytes(tu, d->hidden)) *
			    d->expert_inter;
			d->class_record_bytes[i] = (uint32_t)MDESC_EXPERT_RECORD_PAD(b);
		}
		for (i = 0; i < n_dn && dn_key[i] != td; i++)
			;
		if (i == n_dn) {
			if (n_dn == MDESC_EXPERT_WIDTHS)
				return ig_errf(eb, IG_E_INVAL,
				               "the experts' down projections come in more than %u "
				               "types; accepted: up to %u",
				               MDESC_EXPERT_WIDTHS, MDESC_EXPERT_WIDTHS);
			dn_key[n_dn++] = td;
			b = quant_row_bytes(td, d->expert_inter) * (uint64_t)d->hidden;
			d->class_record_bytes[MDESC_EXPERT_WIDTHS + i] =
			    (uint32_t)MDESC_EXPERT_RECORD_PAD(b);
		}
	}
	return IG_E_OK;
}

static uint32_t mfile__file_type(void *ctx, const char *name)
{
	const struct gguf_tensor *t = gguf_find_tensor(ctx, name);

	return t ? t->type : GGUF_TENSOR_BF16;
}

/* A tensor of an MTP block: "blk.<i>." with i past the trunk's layers. */
static bool mfile__is_mtp(const struct mdesc *d, const char *name)
{
	unsigned layer;

	return d->mtp_layers && sscanf(name, "blk.%u.", &layer) == 1 && layer >= d->layers &&
	       layer - d->layers < d->mtp_layers;
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

/* A gpt2 vocabulary: it must open (model/bpe.h) and hold exactly the
 * embedding's rows; its eos is the description's. A chat template, when
 * the file has one, must be one we render (model/chat.h). */
static int mfile__vocab(struct mfile *f, struct ig_errbuf *eb)
{
	const struct gguf_kv *tmpl = gguf_find_kv(&f->g, "tokenizer.chat_template");
	struct chat_template ct;
	struct bpe *b;
	int rc;

	if (tmpl && (tmpl->type != GGUF_TYPE_STRING ||
	             chat_template_of(tmpl->v.str.ptr, tmpl->v.str.len, &ct, eb)))
		return tmpl->type != GGUF_TYPE_STRING
		           ? ig_errf(eb, IG_E_INVAL,
		                     "'%s': tokenizer.chat_template is not a string", f->g.path)
		           : ig_errprefix(eb, "'%s': tokenizer.chat_template", f->g.path);
	rc = bpe_open(&b, &f->g, eb);

	if (rc)
		return ig_errprefix(eb, "'%s'", f->g.path);
	if (bpe_info(b)->n_tokens != f->desc.vocab)
		rc = ig_errf(eb, IG_E_INVAL,
		             "'%s': the vocabulary has %u tokens and the embedding %u rows; they "
		             "must be equal",
		             f->g.path, bpe_info(b)->n_tokens, f->desc.vocab);
	f->desc.eos_id = bpe_info(b)->eos;
	bpe_close(b);
	return rc;
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
	if (!rc) {
		rc = mfile_check_desc(&f->desc, eb);
		if (rc)
			ig_errprefix(eb, "'%s'", path);
	}
	/* llama.cpp's layouts were checked as their block_count was read */
	if (!rc && f->desc.arch == MDESC_ARCH_IGNIS)
		rc = mfile__blocks_fit(f, "ignis.block_count (layers)", f->desc.layers, 0, eb);
	if (rc)
		goto out_close;
	mfile__derive(&f->desc);
	memset(&c, 0, sizeof(c));
	c.f = f;
	c.eb = eb;
	mdesc_for_each_tensor(&f->desc, mfile__check_one, &c);
	rc = c.rc;
	/* the MTP blocks' tensors are not read (and not checked) */
	for (size_t i = 0; i < f->g.n_tensors; i++)
		if (mfile__is_mtp(&f->desc, gguf_tensor_at(&f->g, i)->name))
			f->mtp_tensors++;
	if (!rc && c.expected != f->g.n_tensors - f->mtp_tensors) {
		/* every expected tensor is there: name one that is not expected */
		struct mfile__find find = {.f = f};

		for (size_t i = 0; i < f->g.n_tensors && !rc; i++) {
			find.name = gguf_tensor_at(&f->g, i)->name;
			find.found = false;
			mdesc_for_each_tensor(&f->desc, mfile__find_one, &find);
			if (!find.found && !mfile__is_mtp(&f->desc, find.name))
				rc = ig_errf(eb, IG_E_INVAL,
				             "'%s': tensor '%s' is not part of a %s model", path,
				             find.name, mdesc_arch_name(f->desc.arch));
		}
		if (!rc)
			rc = ig_errf(eb, IG_E_INVAL,
			             "'%s': %zu tensors where the description has %llu", path,
			             (size_t)f->g.n_tensors, (unsigned long long)c.expected);
	}

	if (!rc && f->desc.family == MDESC_MOE &&
	    (rc = mfile__real_classes(&f->desc, mfile__file_type, &f->g, eb)))
		ig_errprefix(eb, "'%s'", path);
	if (!rc && f->desc.tokenizer == MDESC_TOK_GPT2)
		rc = mfile__vocab(f, eb);
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

uint64_t mfile_identity(const struct mfile *f)
{
	const struct gguf *g = &f->g;
	uint64_t head = g->data_offset < g->size ? g->data_offset : g->size;
	uint64_t rest = g->size - head, piece = rest < 65536 ? rest : 65536;
	uint64_t v[4] = {XXH3_64bits(g->base, head), (uint64_t)g->size,
	                 XXH3_64bits(g->base + head, piece),
	                 XXH3_64bits(g->base + g->size - piece, piece)};

	return XXH3_64bits(v, sizeof(v));
}

/* ---- synthetic models ------------------------------------------------------ */

/* splitmix64's increment: the stream's i-th output (from 1) mixes the start
 * plus i of these, so any element is reached without drawing the ones before. */
#define MFILE_GAMMA 0x9e3779b97f4a7c15ull

/* splitmix64's output for the state `z` (already advanced by the increment). */
static inline uint64_t mfile__mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

enum mfile__kind { MFILE__MATRIX, MFILE__NORM, MFILE__A_LOG, MFILE__A_NEG, MFILE__DT_BIAS };

void mfile_synthetic_fill(uint64_t seed, enum mfile_dtype dtype, const char *name, uint64_t fan_in,
                          uint64_t first, size_t n, void *out)
{
	unsigned char *o = out;
	float v[256];

	for (size_t done = 0; done < n;) {
		size_t k = n - done < 256 ? n - done : 256;

		mfile_synthetic_values(seed, name, fan_in, first + done, k, v);
		for (size_t i = 0; i < k; i++, done++) {
			uint16_t h;

			switch (dtype) {
			case MFILE_F32:
				memcpy(o + 4 * done, &v[i], 4);
				break;
			case MFILE_F16:
				h = gguf_f32_to_f16(v[i]);
				memcpy(o + 2 * done, &h, 2);
				break;
			default:
				h = gguf_f32_to_bf16(v[i]);
				memcpy(o + 2 * done, &h, 2);
				break;
			}
		}
	}
}

void mfile_synthetic_values(uint64_t seed, const char *name, uint64_t fan_in, uint64_t first,
                            size_t n, float *out)
{
	enum mfile__kind kind = MFILE__MATRIX;
	uint64_t state = seed;
	float scale = 1.0f / sqrtf((float)fan_in);

	size_t len = strlen(name);

	if (strstr(name, "norm") || strstr(name, "gate_inp_shexp"))
		kind = MFILE__NORM;
	else if (strstr(name, "a_log"))
		kind = MFILE__A_LOG;
	else if (len >= 6 && !strcmp(name + len - 6, ".ssm_a"))
		kind = MFILE__A_NEG; /* llama.cpp's: -exp(A_log) */
	else if (strstr(name, "dt_bias") || strstr(name, "ssm_dt"))
		kind = MFILE__DT_BIAS;
	/* each tensor its own stream: the seed and the name */
	for (const char *p = name; *p; p++)
		state = state * 1099511628211ull ^ (unsigned char)*p;
	/* element i is the (i+1)-th output: each element is computed from its
	 * own index, no chain from one to the next */
	state += (first + 1u) * MFILE_GAMMA;
	/* uniform in [-1, 1) / sqrt(fan_in); norms near 1; decay logs in (0, 2.8] */
	for (size_t i = 0; i < n; i++) {
		uint64_t z = mfile__mix(state + i * MFILE_GAMMA);
		float u = (float)(z >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
		float v;

		switch (kind) {
		case MFILE__NORM:
			v = 1.0f + 0.05f * u;
			break;
		case MFILE__A_LOG:
			v = 1.4f + 1.4f * u;
			break;
		case MFILE__A_NEG:
			v = -expf(1.4f + 1.4f * u);
			break;
		case MFILE__DT_BIAS:
			v = 0.1f * u;
			break;
		default:
			v = u * scale;
			break;
		}
		out[i] = v;
	}
}

/* llama.cpp's use_more_bits: the first and last eighth of n, and every
 * third between. */
static bool mfile__more_bits(uint32_t i, uint32_t n)
{
	return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* A Q4_K_M file's type for a matrix whose rows are whole Q4_K blocks, by
 * llama.cpp's recipe (its llama_tensor_get_type, the rules that apply to
 * these layouts): the output (and a tied embedding, which serves as it)
 * Q6_K; attn_v and attn_qkv Q6_K on use_more_bits of their index among
 * them (one per layer in llama.cpp's layouts, one per full layer in ours);
 * every ffn_down (dense, the experts', the shared expert's) Q6_K on
 * use_more_bits of its layer; the rest Q4_K. */
static uint32_t mfile__q4_k_m(const struct mdesc *m, const char *name)
{
	unsigned layer = 0;
	bool in_layer = sscanf(name, "blk.%u.", &layer) == 1;

	if (!strcmp(name, "output.weight") ||
	    (m->tied_output && !strcmp(name, "token_embd.weight")))
		return GGUF_TENSOR_Q6_K;
	if (in_layer && (strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight"))) {
		uint32_t i = layer, n = m->layers;

		if (m->arch == MDESC_ARCH_IGNIS) { /* attn_v in the full layers only */
			i = (layer + 1) / m->full_interval - 1;
			n = m->layers / m->full_interval;
		}
		return mfile__more_bits(i, n) ? GGUF_TENSOR_Q6_K : GGUF_TENSOR_Q4_K;
	}
	if (in_layer && strstr(name, "ffn_down"))
		return mfile__more_bits(layer, m->layers) ? GGUF_TENSOR_Q6_K : GGUF_TENSOR_Q4_K;
	return GGUF_TENSOR_Q4_K;
}

uint32_t mfile_tensor_type(const struct mdesc *m, enum mfile_dtype dtype, const char *name,
                           uint32_t n_dims, const uint64_t dims[4])
{
	const struct quant_type *q =
	    quant_type_of(dtype == MFILE_Q4_K_M ? GGUF_TENSOR_Q4_K : (uint32_t)dtype);

	/* llama.cpp's layouts: what its converter always writes in F32 (vectors,
	 * norms, the routers, the convolution) */
	if (mdesc_tensor_f32(m, name, n_dims))
		return GGUF_TENSOR_F32;
	if (!q || q->block_elems == 1)
		return (uint32_t)dtype;
	if (n_dims < 2 || dims[0] % q->block_elems || strstr(name, "norm") ||
	    strstr(name, "_conv") || strstr(name, "gate_inp"))
		return GGUF_TENSOR_BF16;
	return dtype == MFILE_Q4_K_M ? mfile__q4_k_m(m, name) : (uint32_t)dtype;
}

/* One synthetic write (or description): the writer, the stream's settings and
 * the progress so far. */
struct mfile__gen {
	struct gguf_writer *w;
	enum mfile_dtype dtype;
	uint64_t seed;
	const struct mfile_wopts *o;
	uint64_t done, total; /* tensor bytes generated, of all */
	uint64_t n_tensors;
	struct mdesc *desc;    /* describe: the figures summed here, or NULL */
	const struct mdesc *m; /* the description being written */
	struct mfile__sum sum;
};

/* Bytes [offset, offset + n) of a block type's tensor: the blocks that hold
 * them, encoded a run at a time (the writer's chunks need not fall on
 * blocks). */
static int mfile__fill_blocks(const struct mfile__gen *g, const struct gguf_tensor *t,
                              const struct quant_type *q, uint64_t offset, uint8_t *buf, size_t n,
                              struct ig_errbuf *eb)
{
	enum { RUN = 64 }; /* blocks a run */
	float *v = malloc((size_t)RUN * q->block_elems * sizeof(float));
	uint8_t *enc = malloc((size_t)RUN * q->block_bytes);
	uint64_t b0 = offset / q->block_bytes,
	         b1 = (offset + n + q->block_bytes - 1) / q->block_bytes;

	if (!v || !enc) {
		free(v);
		free(enc);
		return ig_errf(eb, IG_E_NOMEM, "no memory to encode tensor '%s'", t->name);
	}
	for (uint64_t b = b0; b < b1; b += RUN) {
		uint64_t nb = b1 - b < RUN ? b1 - b : RUN;
		uint64_t from = b * q->block_bytes, to = (b + nb) * q->block_bytes;
		uint64_t lo = from > offset ? from : offset, hi = to < offset + n ? to : offset + n;

		mfile_synthetic_values(g->seed, t->name, t->dims[0], b * q->block_elems,
		                       (size_t)(nb * q->block_elems), v);
		quant_quantize(q->id, v, enc, nb * q->block_elems);
		memcpy(buf + (lo - offset), enc + (lo - from), (size_t)(hi - lo));
	}
	free(v);
	free(enc);
	return 0;
}

/* The type tensor `name` takes in the file being made. */
static uint32_t mfile__type(const struct mfile__gen *g, const char *name, uint32_t n_dims,
                            const uint64_t dims[4])
{
	return mfile_tensor_type(g->m, g->dtype, name, n_dims, dims);
}

/* A widened file's F32 bytes [offset, offset + n): the values tensor t
 * decodes to at the type it would have (mfile_wopts.widen), encoded and
 * decoded a run of whole blocks at a time (a row is whole blocks). */
static int mfile__fill_widened(const struct mfile__gen *g, const struct gguf_tensor *t,
                               uint64_t offset, uint8_t *buf, size_t n, struct ig_errbuf *eb)
{
	enum { RUN = 64 }; /* blocks a run */
	const struct quant_type *q = quant_type_of(mfile__type(g, t->name, t->n_dims, t->dims));
	size_t be = q->block_elems;
	float *v = malloc(RUN * be * sizeof(float));
	uint8_t *enc = malloc((size_t)RUN * q->block_bytes);
	uint64_t e0 = offset / 4, e1 = (offset + n) / 4; /* the writer cuts on elements */

	if (!v || !enc) {
		free(v);
		free(enc);
		return ig_errf(eb, IG_E_NOMEM, "no memory to widen tensor '%s'", t->name);
	}
	for (uint64_t b = e0 / be; b * be < e1; b += RUN) {
		uint64_t from = b * be, to = from + RUN * be;
		uint64_t lo = from > e0 ? from : e0, hi = to < e1 ? to : e1;

		mfile_synthetic_values(g->seed, t->name, t->dims[0], from, RUN * be, v);
		quant_quantize(q->id, v, enc, RUN * be);
		quant_dequantize(q->id, enc, v, RUN * be);
		memcpy(buf + (lo - e0) * 4, v + (lo - from), (size_t)(hi - lo) * 4);
	}
	free(v);
	free(enc);
	return 0;
}

static int mfile__fill(void *ctx, const struct gguf_tensor *t, uint64_t offset, void *buf, size_t n,
                       struct ig_errbuf *eb)
{
	struct mfile__gen *g = ctx;
	const struct quant_type *q = quant_type_of(t->type);

	if (g->o && g->o->stop && *g->o->stop)
		return ig_errf(eb, IG_E_IO, "interrupted at tensor '%s' (%llu of %llu bytes made)",
		               t->name, (unsigned long long)g->done, (unsigned long long)g->total);
	if (g->o && g->o->widen) {
		int rc = mfile__fill_widened(g, t, offset, buf, n, eb);

		if (rc)
			return rc;
	} else if (q->block_elems > 1) {
		int rc = mfile__fill_blocks(g, t, q, offset, buf, n, eb);

		if (rc)
			return rc;
	} else {
		mfile_synthetic_fill(g->seed, (enum mfile_dtype)t->type, t->name, t->dims[0],
		                     offset / q->block_bytes, n / q->block_bytes, buf);
	}
	g->done += n;
	if (g->o && g->o->progress)
		g->o->progress(g->o->progress_ctx, g->done, g->total);
	return 0;
}

static void mfile__add_one(void *ctx, const char *name, uint32_t n_dims, const uint64_t dims[4],
                           bool expert)
{
	struct mfile__gen *g = ctx;
	uint32_t type = g->o && g->o->widen ? GGUF_TENSOR_F32 : mfile__type(g, name, n_dims, dims);
	uint64_t bytes = quant_row_bytes(type, dims[0]);

	for (uint32_t i = 1; i < n_dims; i++)
		bytes *= dims[i]; /* checked by mfile_check_desc's bounds and the writer */
	g->total += bytes;
	g->n_tensors++;
	if (g->desc)
		mfile__account(g->desc, &g->sum, name, bytes, expert);
	gguf_writer_add_tensor_fill(g->w, name, type, n_dims, dims, mfile__fill, g);
}

/* The synthetic gpt2 vocabulary of a qwen3 file: GPT-2's 256 byte
 * characters in byte order (so id b is the byte b), then <|endoftext|>,
 * <|im_start|> and <|im_end|> (control), then "[PAD<id>]" (unused) up to
 * the model's rows; no merges. Its bos and padding are <|endoftext|>, its
 * eos <|im_end|>, as in Qwen3's files. */
static void mfile__synthetic_vocab(struct gguf_writer *w, uint32_t n, const char *tmpl)
{
	static const char *const specials[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
	char(*text)[16] = calloc(n, sizeof(*text));
	const char **toks = calloc(n, sizeof(*toks));
	int32_t *types = calloc(n, sizeof(*types));

	if (!text || !toks || !types) {
		/* the writer's first failure: every later add and the write refuse */
		ig_errf(&w->err, IG_E_NOMEM, "no memory for a vocabulary of %u tokens", n);
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (i < 256) {
			uint32_t cp = bpe_byte_char(i);

			if (cp < 0x80)
				text[i][0] = (char)cp;
			else {
				text[i][0] = (char)(0xc0 | cp >> 6);
				text[i][1] = (char)(0x80 | (cp & 0x3f));
			}
			types[i] = BPE_NORMAL;
		} else if (i < 256 + 3) {
			snprintf(text[i], sizeof text[i], "%s", specials[i - 256]);
			types[i] = BPE_CONTROL;
		} else {
			snprintf(text[i], sizeof text[i], "[PAD%u]", i);
			types[i] = BPE_UNUSED;
		}
		toks[i] = text[i];
	}
	gguf_writer_add_str(w, MFILE_TOKENIZER_KEY, "gpt2");
	gguf_writer_add_str(w, "tokenizer.ggml.pre", "qwen2");
	gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, n);
	gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n);
	gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", NULL, 0);
	gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 256);
	gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", MFILE_QWEN3_EOS);
	gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", 256);
	gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", false);
	/* ChatML, as Qwen2.5's template writes it (no thinking switch), unless
	 * the caller gives another */
	gguf_writer_add_str(
	    w, "tokenizer.chat_template",
	    tmpl ? tmpl
	         : "{% for message in messages %}{{'<|im_start|>' + message['role'] + "
	           "'\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% "
	           "if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif "
	           "%}");
out:
	free(text);
	free(toks);
	free(types);
}

/* M-RoPE's sections for `pairs` rotary pairs, as Qwen3.5's [11, 11, 10, 0]
 * for 32: section j holds the pairs i with i % 3 == j, so each pair takes
 * its angle from a section (with a text position in all three, the same
 * angle NeoX gives it). */
static void mfile__rope_sections(uint32_t pairs, int32_t out[4])
{
	for (uint32_t j = 0; j < 3; j++)
		out[j] = (int32_t)((pairs + 2 - j) / 3);
	out[3] = 0;
}

/* A file of llama.cpp's layouts as its converter writes one: the keys of
 * the architecture, the synthetic vocabulary, the tensors (1-D ones and the
 * convolution in F32, no output.weight: tied). */
static int mfile__build_llama(const struct mdesc *m, struct mfile__gen *g, struct ig_errbuf *eb)
{
	struct gguf_writer *w = g->w;
	const char *an = mdesc_arch_name(m->arch);
	bool hybrid = m->arch != MDESC_ARCH_QWEN3;
	char k[96];

#define KEY(suffix) (snprintf(k, sizeof k, "%s.%s", an, (suffix)), k)
	if (!m->tied_output || m->tokenizer != MDESC_TOK_GPT2 || m->vocab < MFILE_QWEN3_VOCAB ||
	    m->mtp_layers ||
	    (hybrid ? m->attn_ungated || m->lin_dk != m->lin_dv ||
	                  m->family != (m->arch == MDESC_ARCH_QWEN35 ? MDESC_DENSE : MDESC_MOE)
	            : m->family != MDESC_DENSE || m->full_interval != 1 || !m->attn_ungated ||
	                  m->rope_dims != m->head_dim))
		return ig_errf(eb, IG_E_INVAL,
		               "synthetic model '%s': not a %s shape (mfile_as_layout makes one)",
		               m->name, an);
	gguf_writer_add_str(w, "general.architecture", an);
	gguf_writer_add_str(w, "general.name", m->name);
	gguf_writer_add_u32(w, KEY("block_count"), m->layers);
	gguf_writer_add_u32(w, KEY("context_length"), m->default_context);
	gguf_writer_add_u32(w, KEY("embedding_length"), m->hidden);
	gguf_writer_add_u32(w, KEY("feed_forward_length"),
	                    m->family == MDESC_DENSE ? m->ffn_inter : m->shared_inter);
	gguf_writer_add_u32(w, KEY("attention.head_count"), m->q_heads);
	gguf_writer_add_u32(w, KEY("attention.head_count_kv"), m->kv_heads);
	gguf_writer_add_u32(w, KEY("attention.key_length"), m->head_dim);
	gguf_writer_add_u32(w, KEY("attention.value_length"), m->head_dim);
	gguf_writer_add_u32(w, KEY("rope.dimension_count"), m->rope_dims);
	gguf_writer_add_f32(w, KEY("rope.freq_base"), m->rope_theta);
	gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), m->rms_eps);
	if (hybrid) {
		if (m->arch != MDESC_ARCH_QWEN3NEXT) {
			int32_t sec[4];

			mfile__rope_sections(m->rope_dims / 2, sec);
			gguf_writer_add_arr(w, KEY("rope.dimension_sections"), GGUF_TYPE_INT32, sec,
			                    4);
		}
		gguf_writer_add_u32(w, KEY("full_attention_interval"), m->full_interval);
		gguf_writer_add_u32(w, KEY("ssm.conv_kernel"), m->conv_kernel);
		gguf_writer_add_u32(w, KEY("ssm.state_size"), m->lin_dk);
		gguf_writer_add_u32(w, KEY("ssm.group_count"), m->lin_k_heads);
		gguf_writer_add_u32(w, KEY("ssm.time_step_rank"), m->lin_v_heads);
		gguf_writer_add_u32(w, KEY("ssm.inner_size"), m->lin_v_heads * m->lin_dv);
		if (m->family == MDESC_MOE) {
			gguf_writer_add_u32(w, KEY("expert_count"), m->experts);
			gguf_writer_add_u32(w, KEY("expert_used_count"), m->top_k);
			gguf_writer_add_u32(w, KEY("expert_feed_forward_length"), m->expert_inter);
			gguf_writer_add_u32(w, KEY("expert_shared_feed_forward_length"),
			                    m->shared_inter);
		}
	}
#undef KEY
	gguf_writer_add_u64(w, "ignis.seed", g->seed);
	mfile__synthetic_vocab(w, m->vocab, g->o ? g->o->chat_template : NULL);
	mdesc_for_each_tensor(m, mfile__add_one, g);
	if (w->err.code) {
		if (eb)
			*eb = w->err;
		return ig_errprefix(eb, "synthetic model '%s'", m->name);
	}
	return IG_E_OK;
}

int mfile_as_layout(const struct mdesc *src, enum mdesc_arch arch, struct mdesc *out,
                    struct ig_errbuf *eb)
{
	const char *an = mdesc_arch_name(arch);

	if (arch == MDESC_ARCH_IGNIS || !an)
		return ig_errf(eb, IG_E_INVAL,
		               "mfile_as_layout: %d is not one of llama.cpp's layouts", (int)arch);
	if (src->family !=
	    (arch == MDESC_ARCH_QWEN3 || arch == MDESC_ARCH_QWEN35 ? MDESC_DENSE : MDESC_MOE))
		return ig_errf(eb, IG_E_INVAL,
		               "model '%s' is %s; the %s layout is %s (accepted: qwen3 and qwen35 "
		               "for a dense model, qwen35moe and qwen3next for a moe one)",
		               src->name, src->family == MDESC_DENSE ? "dense" : "moe", an,
		               arch == MDESC_ARCH_QWEN3 || arch == MDESC_ARCH_QWEN35 ? "dense"
		                                                                     : "moe");
	if (arch != MDESC_ARCH_QWEN3 && src->lin_dk != src->lin_dv)
		return ig_errf(eb, IG_E_INVAL,
		               "model '%s': linear key length %u and value length %u differ; "
		               "llama.cpp's %s takes them equal",
		               src->name, src->lin_dk, src->lin_dv, an);
	*out = *src;
	out->arch = arch;
	out->tied_output = true;
	out->mtp_layers = 0;
	out->tokenizer = MDESC_TOK_GPT2;
	out->eos_id = MFILE_QWEN3_EOS;
	if (out->vocab < MFILE_QWEN3_VOCAB)
		out->vocab = MFILE_QWEN3_VOCAB;
	out->default_chunk = MFILE_QWEN3_CHUNK;
	out->default_max_tokens = MFILE_QWEN3_MAX_TOKENS;
	out->weight_bytes = out->state_image_bytes = 0;
	if (arch == MDESC_ARCH_QWEN3) {
		out->attn_ungated = true;
		out->full_interval = 1;
		out->full_layers = src->layers;
		out->lin_k_heads = out->lin_v_heads = out->lin_dk = out->lin_dv = 0;
		out->conv_kernel = 0;
		out->rope_dims = src->head_dim;
	} else {
		out->attn_ungated = false;
	}
	if (out->family == MDESC_DENSE) {
		out->fixed_lanes = out->default_lanes = out->max_lanes = MFILE_QWEN3_LANES;
	} else {
		out->fixed_lanes = 0;
		out->default_lanes = MFILE_LLAMA_MOE_LANES;
		out->max_lanes = MFILE_LLAMA_MOE_MAX_LANES;
		out->prefetch_width = out->top_k;
		out->indexer_key_bytes = 0;
		out->default_retained_host = MFILE_LLAMA_MOE_RETAINED_HOST;
		out->default_kv_disk_bytes = 0;
		out->offload_pool_pages = MFILE_LLAMA_MOE_POOL_PAGES;
		out->cache_floor_bytes = MFILE_LLAMA_MOE_FLOOR;
		out->expert_host_bytes = out->heaviest_layer_expert_bytes = 0;
	}
	return IG_E_OK;
}

void mfile_as_qwen3(const struct mdesc *src, struct mdesc *out)
{
	struct mdesc dense = *src;

	dense.family = MDESC_DENSE; /* qwen3 is dense; its shapes are src's */
	mfile_as_layout(&dense, MDESC_ARCH_QWEN3, out, NULL);
}

/* Check `m` and fill the writer: the metadata, then every tensor as a
 * producer. The caller releases the writer. */
static int mfile__build(const struct mdesc *m, struct mfile__gen *g, struct ig_errbuf *eb)
{
	struct gguf_writer *w = g->w;
	int rc;

	g->m = m;
	rc = mfile_check_desc(m, eb);
	if (rc)
		return ig_errprefix(eb, "synthetic model '%s'", m->name);
	if (m->arch != MDESC_ARCH_IGNIS)
		return mfile__build_llama(m, g, eb);
	if (m->tokenizer == MDESC_TOK_GPT2)
		return ig_errf(eb, IG_E_INVAL,
		               "synthetic model '%s': an " MFILE_ARCH
		               " file has no gpt2 vocabulary to "
		               "write (tokenizer bytes or none; the qwen3 layout writes one)",
		               m->name);
	gguf_writer_add_str(w, "general.architecture", MFILE_ARCH);
	gguf_writer_add_str(w, "general.name", m->name);
	gguf_writer_add_str(w, "ignis.family", m->family == MDESC_DENSE ? "dense" : "moe");
	gguf_writer_add_str(w, MFILE_TOKENIZER_KEY, mdesc_tokenizer_name(m->tokenizer));
	gguf_writer_add_u64(w, "ignis.seed", g->seed);
	for (size_t i = 0; i < mfile_nkeys; i++) {
		const struct mfile_key *k = &mfile_keys[i];

		if (!mfile_key_applies(k, m->family))
			continue;
		if (k->type == GGUF_TYPE_UINT32)
			gguf_writer_add_u32(w, k->key, (uint32_t)mfile_key_get(m, k));
		else if (k->type == GGUF_TYPE_UINT64)
			gguf_writer_add_u64(w, k->key, mfile_key_get(m, k));
		else
			gguf_writer_add_f32(w, k->key, mfile__key_f32(m, k));
	}
	mdesc_for_each_tensor(m, mfile__add_one, g);
	if (w->err.code) {
		if (eb)
			*eb = w->err;
		return ig_errprefix(eb, "synthetic model '%s'", m->name);
	}
	return IG_E_OK;
}

/* The type a tensor of the description being made takes (its dims are
 * the tensor list's). */
struct mfile__named {
	const char *name;
	uint32_t type;
	bool found;
	const struct mfile__gen *g;
};

static void mfile__type_one(void *ctx, const char *name, uint32_t n_dims, const uint64_t dims[4],
                            bool expert)
{
	struct mfile__named *x = ctx;

	(void)expert;
	if (!x->found && !strcmp(name, x->name)) {
		x->found = true;
		x->type = mfile__type(x->g, name, n_dims, dims);
	}
}

static uint32_t mfile__gen_type(void *ctx, const char *name)
{
	const struct mfile__gen *g = ctx;
	struct mfile__named x = {name, GGUF_TENSOR_BF16, false, g};

	mdesc_for_each_tensor(g->m, mfile__type_one, &x);
	return x.type;
}

int mfile_synthetic_describe(const struct mdesc *m, enum mfile_dtype dtype,
                             struct mfile_synthetic *out, struct ig_errbuf *eb)
{
	return mfile_synthetic_describe_opts(m, dtype, NULL, out, eb);
}

int mfile_synthetic_describe_opts(const struct mdesc *m, enum mfile_dtype dtype,
                                  const struct mfile_wopts *o, struct mfile_synthetic *out,
                                  struct ig_errbuf *eb)
{
	struct gguf_writer w;
	struct mfile__gen g = {.w = &w, .dtype = dtype, .o = o, .desc = &out->desc};
	int rc;

	memset(out, 0, sizeof(*out));
	out->desc.family = m->family;
	out->desc.tokenizer = m->tokenizer;
	out->desc.arch = m->arch;
	out->desc.attn_ungated = m->attn_ungated;
	out->desc.tied_output = m->tied_output;
	out->desc.eos_id = m->eos_id;
	for (size_t i = 0; i < mfile_nkeys; i++)
		if (mfile_key_applies(&mfile_keys[i], m->family))
			memcpy((char *)&out->desc + mfile_keys[i].offset,
			       (const char *)m + mfile_keys[i].offset,
			       mfile_keys[i].type == GGUF_TYPE_UINT64 ? 8 : 4);
	out->desc.name = out->desc.alias = m->name;
	out->desc.doc = "a model file";
	gguf_writer_init(&w);
	rc = mfile_check_desc(&out->desc, NULL);
	if (!rc)
		mfile__derive(&out->desc); /* before the sums, which it zeroes */
	rc = mfile__build(m, &g, eb);
	if (!rc && m->family == MDESC_MOE)
		rc = mfile__real_classes(&out->desc, mfile__gen_type, &g, eb);
	if (!rc)
		rc = gguf_writer_file_size(&w, &out->file_bytes, eb);
	if (!rc) {
		out->n_tensors = g.n_tensors;
		out->data_bytes = g.total;
	}
	gguf_writer_release(&w);
	return rc;
}

int mfile_write_synthetic_opts(const struct mdesc *m, uint64_t seed, enum mfile_dtype dtype,
                               const char *path, const struct mfile_wopts *o, struct ig_errbuf *eb)
{
	struct gguf_writer w;
	struct mfile__gen g = {.w = &w, .dtype = dtype, .seed = seed, .o = o};
	int rc;

	gguf_writer_init(&w);
	if (o) {
		w.chunk_bytes = o->chunk_bytes;
		w.write_fn = o->write_fn;
		w.sparse = o->sparse;
	}
	rc = mfile__build(m, &g, eb);
	if (!rc)
		rc = gguf_writer_write(&w, path, eb);
	gguf_writer_release(&w);
	return rc;
}

int mfile_write_synthetic(const struct mdesc *m, uint64_t seed, enum mfile_dtype dtype,
                          const char *path, struct ig_errbuf *eb)
{
	return mfile_write_synthetic_opts(m, seed, dtype, path, NULL, eb);
}
