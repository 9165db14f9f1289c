/* model.c - built-in model descriptions and the arithmetic on them (see model.h). */
#include "model.h"

#include <stdio.h>
#include <string.h>

#define KiB 1024ull
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)

/*
 * Tiny models: their weights and experts are derived from the tensor list
 * (mdesc_for_each_tensor) at bf16, and their fixed-size state image from
 * the linear layers' shapes (mdesc_lin_state).
 */
#define TINY_HIDDEN 256u
#define TINY_HEADS  4u
#define TINY_KV     2u
#define TINY_HD     64u
#define TINY_VOCAB  MDESC_BYTES_VOCAB /* the byte-level tokenizer */
#define TINY_LAYERS 4u                /* tiny-dense: 1 full + 3 linear */
#define TINY_MOE_LAYERS                                                                            \
	8u /* tiny-moe: 2 full + 6 linear, so that the staging ring                                \
	      (two layers' experts) is a quarter of all experts */
#define TINY_DENSE_INTER  512u
#define TINY_MOE_EXPERTS  32u
#define TINY_MOE_INTER    64u
#define TINY_EXPERT_BYTES (3ull * TINY_HIDDEN * TINY_MOE_INTER * 2u)

const struct mdesc mdesc_builtin[] = {
    {
        .name = "qwen3.8-27b",
        .alias = "27b",
        .doc = "the 27B: dense, 64 layers (16 full attention), 8 fixed decode lanes",
        .family = MDESC_DENSE,
        .layers = 64,
        .full_layers = 16,
        .hidden = 5120,
        .q_heads = 24,
        .kv_heads = 4,
        .head_dim = 256,
        .vocab = 151936, /* the Qwen3 tokenizer */
        /* ids only: a description holds no vocabulary; a file of the model
         * brings its own BPE (docs/adr/0025, 0030) */
        .tokenizer = MDESC_TOK_NONE,
        .ffn_inter = 17408,
        .full_interval = 4,
        /* Not among the reference figures (docs/design.md, section 3): the
         * Qwen3-Next-style linear attention shapes of our synthetic
         * reference models (ADR 0006). */
        .lin_k_heads = 16,
        .lin_v_heads = 48,
        .lin_dk = 128,
        .lin_dv = 128,
        .conv_kernel = 4,
        .rope_dims = 64, /* partial rotary: a quarter of head_dim 256 */
        .rope_theta = 10000000.0f,
        .rms_eps = 1e-6f,
        /* Carried: the reference gives "~16.03 GiB" (docs/design.md,
         * section 3); a model file (issue 4) gives the exact figure. */
        .weight_bytes = 1603ull * GiB / 100u,
        .state_image_bytes = 232532224, /* docs/design.md, section 3 */
        .fixed_lanes = 8,
        .default_lanes = 8,
        .max_lanes = 8,
        .default_context = 131072,
        .default_chunk = 1024,
        .default_max_tokens = 38912,
        .default_retained_host = 0, /* two per lane */
        .default_kv_disk_bytes = 0, /* KV-disk off */
    },
    {
        .name = "qwen3.8-flash-next",
        .alias = "flash-next",
        .doc = "Flash-Next: 512 experts per layer (top-10) behind a device expert cache",
        .family = MDESC_MOE,
        .layers = 48,
        .full_layers = 12,
        .hidden = 2560,
        .q_heads = 24,
        .kv_heads = 2,
        .head_dim = 256,
        .vocab = 151936,
        .tokenizer = MDESC_TOK_NONE,
        .experts = 512,
        .top_k = 10,
        .expert_inter = 640,
        .prefetch_width = 16,
        .indexer_key_bytes = 64, /* 768 B per token over 12 full layers */
        .shared_inter = 640,     /* "one shared expert", sized as the routed ones */
        .full_interval = 4,
        .lin_k_heads = 16,
        .lin_v_heads = 32,
        .lin_dk = 128,
        .lin_dv = 128,
        .conv_kernel = 4,
        .rope_dims = 64,
        .rope_theta = 10000000.0f,
        .rms_eps = 1e-6f,
        /* Carried from docs/design.md, section 3, until a model file gives them. */
        .weight_bytes = 5022463744ull,
        .expert_host_bytes = 37795446784ull,
        /* The staging ring is 2 x this = 1,574,895,616 B (docs/design.md, section 2). */
        .heaviest_layer_expert_bytes = 787447808ull,
        /* Residency fixed 1,577,852,928 B = ring + these tables. */
        .expert_table_bytes = 1577852928ull - 2ull * 787447808ull,
        .class_record_bytes = {827392, 1032192, 1236992, 1646592, 417792, 520192, 622592, 827392},
        .state_image_bytes = 130014272, /* docs/design.md, section 3 */
        .fixed_lanes = 0,
        .default_lanes = 3,
        .max_lanes = 8,
        .default_context = 131072,
        .default_chunk = 8192,
        .default_max_tokens = 38912,
        .default_retained_host = 8,
        .default_kv_disk_bytes = 4 * GiB,
        .cache_floor_bytes = 12 * GiB,
        .offload_pool_pages = 8192, /* 524,288 tokens */
    },
    {
        .name = "tiny-dense",
        .alias = "tiny-dense",
        .doc = "synthetic, the 27B's rules at a few MB: 4 layers (1 full), 4 fixed lanes",
        .family = MDESC_DENSE,
        .layers = TINY_LAYERS,
        .full_layers = 1,
        .hidden = TINY_HIDDEN,
        .q_heads = TINY_HEADS,
        .kv_heads = TINY_KV,
        .head_dim = TINY_HD,
        .vocab = TINY_VOCAB,
        .tokenizer = MDESC_TOK_BYTES,
        .ffn_inter = TINY_DENSE_INTER,
        .full_interval = 4,
        .lin_k_heads = 2,
        .lin_v_heads = TINY_HEADS,
        .lin_dk = TINY_HD,
        .lin_dv = TINY_HD,
        .conv_kernel = 4,
        .rope_dims = 16,
        .rope_theta = 10000.0f,
        .rms_eps = 1e-6f,
        .weight_bytes = 0,      /* derived from the tensor list */
        .state_image_bytes = 0, /* derived: 219,136 B */
        .fixed_lanes = 4,
        .default_lanes = 4,
        .max_lanes = 4,
        .default_context = 2048,
        .default_chunk = 128,
        .default_max_tokens = 256,
        .default_retained_host = 0,
        .default_kv_disk_bytes = 0,
    },
    {
        .name = "tiny-moe",
        .alias = "tiny-moe",
        .doc = "synthetic, Flash-Next's rules at a few MB: 8 layers of 32 experts (top-2)",
        .family = MDESC_MOE,
        .layers = TINY_MOE_LAYERS,
        .full_layers = 2,
        .hidden = TINY_HIDDEN,
        .q_heads = TINY_HEADS,
        .kv_heads = TINY_KV,
        .head_dim = TINY_HD,
        .vocab = TINY_VOCAB,
        .tokenizer = MDESC_TOK_BYTES,
        .experts = TINY_MOE_EXPERTS,
        .top_k = 2,
        .expert_inter = TINY_MOE_INTER,
        .prefetch_width = 2,
        .indexer_key_bytes = 16,
        .shared_inter = TINY_MOE_INTER,
        .full_interval = 4,
        .lin_k_heads = 2,
        .lin_v_heads = TINY_HEADS,
        .lin_dk = TINY_HD,
        .lin_dv = TINY_HD,
        .conv_kernel = 4,
        .rope_dims = 16,
        .rope_theta = 10000.0f,
        .rms_eps = 1e-6f,
        .weight_bytes = 0,      /* derived from the tensor list */
        .expert_host_bytes = 0, /* derived from the tensor list */
        .heaviest_layer_expert_bytes = TINY_MOE_EXPERTS * TINY_EXPERT_BYTES,
        .expert_table_bytes = TINY_MOE_LAYERS * TINY_MOE_EXPERTS * 64u,
        /* the classes of its file (docs/adr/0039): gate_up (256 -> 2 x 64) and
         * down (64 -> 256), each one class in bf16 */
        .class_record_bytes = {MDESC_EXPERT_RECORD_PAD(2 * 64 * 256 * 2), 0, 0, 0,
                               MDESC_EXPERT_RECORD_PAD(256 * 64 * 2), 0, 0, 0},
        .state_image_bytes = 0, /* derived: 434,176 B */
        .fixed_lanes = 0,
        .default_lanes = 2,
        .max_lanes = 8,
        .default_context = 2048,
        .default_chunk = 128,
        .default_max_tokens = 256,
        .default_retained_host = 4,
        .default_kv_disk_bytes = 16 * MiB,
        .cache_floor_bytes = 2 * MiB, /* the 12 GiB floor, scaled */
        .offload_pool_pages = 128,    /* four default contexts, as 8192 is on Flash-Next */
    },
    {
        /* The embedded default (the model knob's default): tiny-dense's shapes
         * in llama.cpp's qwen3 layout, exactly what mfile_as_qwen3 makes of
         * tiny-dense (test_mfile holds it to that), so that the file the
         * supervisor writes for it carries the synthetic gpt2 vocabulary and
         * a ChatML template, and /v1/chat/completions serves it. */
        .name = "tiny-chat",
        .alias = "tiny-chat",
        .doc = "synthetic, the embedded default: tiny-dense's shapes in llama.cpp's qwen3 "
               "layout (4 full-attention layers) with a BPE vocabulary and a ChatML template",
        .family = MDESC_DENSE,
        .arch = MDESC_ARCH_QWEN3,
        .layers = TINY_LAYERS,
        .full_layers = TINY_LAYERS, /* qwen3: every layer full attention */
        .hidden = TINY_HIDDEN,
        .q_heads = TINY_HEADS,
        .kv_heads = TINY_KV,
        .head_dim = TINY_HD,
        .vocab = TINY_VOCAB, /* the 259 ids of MDESC_SYNTH_GPT2_VOCAB, one row of padding */
        .tokenizer = MDESC_TOK_GPT2,
        .eos_id = MDESC_SYNTH_GPT2_EOS, /* <|im_end|> */
        .ffn_inter = TINY_DENSE_INTER,
        .full_interval = 1,
        .rope_dims = TINY_HD, /* qwen3 rotates the whole head */
        .attn_ungated = true,
        .tied_output = true,
        .rope_theta = 10000.0f,
        .rms_eps = 1e-6f,
        .weight_bytes = 0,      /* derived from the tensor list (norms in F32) */
        .state_image_bytes = 0, /* derived: no linear layer, the header's 4,096 B */
        .fixed_lanes = 4,
        .default_lanes = 4,
        .max_lanes = 4,
        .default_context = 2048,
        /* a qwen3 file carries none of Ignis's knobs: these are the ones it
         * gets (MFILE_QWEN3_LANES, _CHUNK, _MAX_TOKENS), so the plan of this
         * description is the plan of its file */
        .default_chunk = 512,
        .default_max_tokens = 512,
        .default_retained_host = 0,
        .default_kv_disk_bytes = 0,
    },
};
const unsigned mdesc_nbuiltin = sizeof(mdesc_builtin) / sizeof(mdesc_builtin[0]);

const struct mdesc *mdesc_find(const char *name)
{
	for (unsigned i = 0; i < mdesc_nbuiltin; i++)
		if (!strcmp(name, mdesc_builtin[i].name) || !strcmp(name, mdesc_builtin[i].alias))
			return &mdesc_builtin[i];
	return NULL;
}

const char *mdesc_names(void)
{
	return "qwen3.8-27b (alias 27b), qwen3.8-flash-next (alias flash-next), tiny-dense, "
	       "tiny-moe, tiny-chat";
}

static const char *const mdesc__kv_names[] = {
    [MDESC_KV_BF16] = "bf16",
    [MDESC_KV_COMPACT1] = "compact1",
    [MDESC_KV_FP8] = "fp8",
    [MDESC_KV_COMPACT] = "compact",
};

const char *mdesc_kv_format_name(enum mdesc_kv_format f)
{
	if ((unsigned)f > MDESC_KV_FORMAT_LAST)
		return NULL;
	return mdesc__kv_names[f];
}

enum mdesc_kv_format mdesc_kv_format_parse(const char *name)
{
	for (unsigned f = 1; f <= MDESC_KV_FORMAT_LAST; f++)
		if (mdesc__kv_names[f] && !strcmp(mdesc__kv_names[f], name))
			return (enum mdesc_kv_format)f;
	return 0;
}

bool mdesc_kv_compact(enum mdesc_kv_format f)
{
	return f == MDESC_KV_COMPACT || f == MDESC_KV_COMPACT1;
}

uint64_t mdesc_kv_head_bytes(enum mdesc_kv_format f, uint32_t head_dim)
{
	if (f == MDESC_KV_BF16)
		return 2ull * head_dim;
	if (f == MDESC_KV_FP8)
		return head_dim ? (uint64_t)head_dim + MDESC_KV_FP8_SCALE_BYTES : 0;
	if (!mdesc_kv_compact(f) || head_dim % MDESC_KV_GROUP)
		return 0;
	return (uint64_t)head_dim / MDESC_KV_GROUP * MDESC_KV_GROUP_BYTES;
}

uint64_t mdesc_kv_bytes_per_token(const struct mdesc *m, enum mdesc_kv_format f)
{
	uint64_t head_roles = (uint64_t)m->full_layers * m->kv_heads * 2u;
	uint64_t b = head_roles * mdesc_kv_head_bytes(f, m->head_dim);

	/* 72 B per KV head and role at head dim 256 (docs/design.md, section 3),
	 * and on the MoE family the indexer's keys. */
	if (mdesc_kv_compact(f))
		b += (uint64_t)m->full_layers * m->indexer_key_bytes;
	return b;
}

uint64_t mdesc_page_bytes(const struct mdesc *m, enum mdesc_kv_format f)
{
	return MDESC_PAGE_TOKENS * mdesc_kv_bytes_per_token(m, f);
}

uint64_t mdesc_pages_for(uint64_t tokens)
{
	return (tokens + MDESC_PAGE_TOKENS - 1) / MDESC_PAGE_TOKENS;
}

uint64_t mdesc_token_activation_bytes(const struct mdesc *m)
{
	/* One token through one layer, buffers live at once at the widest point:
	 * the residual stream (fp32), its normed copy (bf16), the q/k/v
	 * projections and the attention output (bf16), and the feed-forward's
	 * gate, up and activated products (bf16): dense, or the top-k routed
	 * experts plus the shared one, with the router's logits (fp32). */
	uint64_t b = (uint64_t)m->hidden * 4u + (uint64_t)m->hidden * 2u;

	b += (uint64_t)(m->q_heads + 2u * m->kv_heads) * m->head_dim * 2u;
	b += (uint64_t)m->q_heads * m->head_dim * 2u;
	if (m->family == MDESC_DENSE)
		b += 3ull * m->ffn_inter * 2u;
	else
		b += 3ull * (m->top_k + 1u) * m->expert_inter * 2u + (uint64_t)m->experts * 4u;
	return b;
}

uint64_t mdesc_class_set_bytes(const struct mdesc *m)
{
	uint64_t b = 0;

	for (int i = 0; i < MDESC_EXPERT_CLASSES; i++)
		b += m->class_record_bytes[i];
	return b;
}

uint64_t mdesc_min_expert_bytes(const struct mdesc *m)
{
	uint64_t gu = 0, dn = 0;

	/* a class of 0 bytes is one a file does not have (mfile.c) */
	for (int i = 0; i < MDESC_EXPERT_WIDTHS; i++) {
		uint64_t g = m->class_record_bytes[i],
		         d = m->class_record_bytes[MDESC_EXPERT_WIDTHS + i];

		if (g && (!gu || g < gu))
			gu = g;
		if (d && (!dn || d < dn))
			dn = d;
	}
	return gu + dn;
}

bool mdesc_is_full_layer(const struct mdesc *m, uint32_t i)
{
	return (i + 1) % m->full_interval == 0;
}

bool mdesc_lin_state(const struct mdesc *m, struct mdesc_lin_state *out)
{
	struct mdesc_lin_state s = {0};
	uint64_t qkv = 2ull * m->lin_k_heads * m->lin_dk + (uint64_t)m->lin_v_heads * m->lin_dv;

	memset(out, 0, sizeof(*out));
	/* every full_interval-th layer is full attention (mdesc_is_full_layer) */
	s.layers = m->layers - (m->full_interval ? m->layers / m->full_interval : 0);
	if (__builtin_mul_overflow((uint64_t)m->lin_v_heads * m->lin_dk, (uint64_t)m->lin_dv,
	                           &s.s_floats) ||
	    __builtin_mul_overflow(m->conv_kernel ? (uint64_t)m->conv_kernel - 1u : 0u, qkv,
	                           &s.conv_floats) ||
	    __builtin_add_overflow(s.s_floats, s.conv_floats, &s.layer_floats) ||
	    __builtin_mul_overflow(s.layer_floats, (uint64_t)s.layers, &s.floats) ||
	    __builtin_mul_overflow(s.floats, (uint64_t)sizeof(float), &s.bytes) ||
	    __builtin_add_overflow(s.bytes, (uint64_t)MDESC_STATE_IMAGE_HEADER, &s.image_bytes))
		return false;
	*out = s;
	return true;
}

uint64_t mdesc_state_image_bytes(const struct mdesc *m)
{
	struct mdesc_lin_state s;

	if (m->state_image_bytes)
		return m->state_image_bytes;
	mdesc_lin_state(m, &s);
	return s.image_bytes;
}

uint64_t mdesc_kv_window_bytes(const struct mdesc *m, uint32_t sinks, uint32_t window)
{
	if (!window)
		return 0;
	return ((uint64_t)sinks + window) * m->full_layers * m->kv_heads * 2u * m->head_dim * 2u;
}

uint64_t mdesc_kv_window_offset(const struct mdesc *m)
{
	struct mdesc_lin_state s;

	mdesc_lin_state(m, &s);
	return (s.bytes + 63u) & ~(uint64_t)63u;
}

uint64_t mdesc_seq_state_bytes(const struct mdesc *m, uint32_t sinks, uint32_t window)
{
	struct mdesc_lin_state s;

	if (window)
		return mdesc_kv_window_offset(m) + mdesc_kv_window_bytes(m, sinks, window);
	mdesc_lin_state(m, &s);
	return s.bytes;
}

const char *mdesc_tokenizer_name(enum mdesc_tokenizer t)
{
	switch (t) {
	case MDESC_TOK_NONE:
		return "none";
	case MDESC_TOK_BYTES:
		return "bytes";
	case MDESC_TOK_GPT2:
		return "gpt2";
	}
	return "?";
}

bool mdesc_tokenizer_of(const char *name, size_t len, enum mdesc_tokenizer *out)
{
	static const enum mdesc_tokenizer all[] = {MDESC_TOK_NONE, MDESC_TOK_BYTES, MDESC_TOK_GPT2};

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		const char *n = mdesc_tokenizer_name(all[i]);

		if (strlen(n) == len && !memcmp(n, name, len)) {
			*out = all[i];
			return true;
		}
	}
	return false;
}

uint32_t mdesc_eos(const struct mdesc *m)
{
	if (m->tokenizer == MDESC_TOK_GPT2)
		return m->eos_id;
	return m->tokenizer == MDESC_TOK_BYTES ? MDESC_BYTES_EOS : UINT32_MAX;
}

/* One tensor: "blk.<layer>.<what>" or a global name. */
const char *mdesc_arch_name(enum mdesc_arch a)
{
	static const char *const names[MDESC_ARCH_COUNT] = {"ignis-hybrid", "qwen3", "qwen35",
	                                                    "qwen35moe", "qwen3next"};

	return (unsigned)a < MDESC_ARCH_COUNT ? names[a] : NULL;
}

enum mdesc_lin_ba mdesc_lin_ba(const struct mdesc *m)
{
	switch (m->arch) {
	case MDESC_ARCH_QWEN35:
	case MDESC_ARCH_QWEN35MOE:
		return MDESC_BA_SPLIT;
	case MDESC_ARCH_QWEN3NEXT:
		return MDESC_BA_GROUPED;
	default:
		return MDESC_BA_FUSED;
	}
}

bool mdesc_lin_tiled(const struct mdesc *m)
{
	return m->arch == MDESC_ARCH_QWEN35 || m->arch == MDESC_ARCH_QWEN35MOE;
}

bool mdesc_lin_a_neg(const struct mdesc *m)
{
	return m->arch == MDESC_ARCH_QWEN35 || m->arch == MDESC_ARCH_QWEN35MOE ||
	       m->arch == MDESC_ARCH_QWEN3NEXT;
}

/* Our name, llama.cpp's (the hybrids'), and its suffix. */
static const struct {
	const char *ours, *theirs, *suffix;
} mdesc__llama_names[] = {
    {"ffn_norm", "post_attention_norm", ".weight"},
    {"lin_qkv", "attn_qkv", ".weight"},
    {"lin_z", "attn_gate", ".weight"},
    {"lin_ba", "ssm_ba", ".weight"},
    {"lin_beta", "ssm_beta", ".weight"},
    {"lin_alpha", "ssm_alpha", ".weight"},
    {"lin_conv", "ssm_conv1d", ".weight"},
    {"lin_a_log", "ssm_a", ""},
    {"lin_dt_bias", "ssm_dt", ".bias"},
    {"lin_norm", "ssm_norm", ".weight"},
    {"lin_out", "ssm_out", ".weight"},
};

void mdesc_tensor_name(const struct mdesc *m, int layer, const char *what, char *out, size_t cap)
{
	const char *name = what, *suffix = ".weight";

	/* qwen3 has no linear layers and keeps ffn_norm; the hybrids rename */
	if (m->arch != MDESC_ARCH_IGNIS && m->arch != MDESC_ARCH_QWEN3)
		for (size_t i = 0; i < sizeof(mdesc__llama_names) / sizeof(mdesc__llama_names[0]);
		     i++)
			if (!strcmp(what, mdesc__llama_names[i].ours)) {
				name = mdesc__llama_names[i].theirs;
				suffix = mdesc__llama_names[i].suffix;
				break;
			}
	if (layer >= 0)
		snprintf(out, cap, "blk.%d.%s%s", layer, name, suffix);
	else
		snprintf(out, cap, "%s%s", name, suffix);
}

static void mdesc__t(const struct mdesc *m, mdesc_tensor_fn fn, void *ctx, int layer,
                     const char *what, uint32_t n, uint64_t d0, uint64_t d1, uint64_t d2,
                     bool expert)
{
	const uint64_t dims[4] = {d0, d1, d2, 1};
	char name[64];

	mdesc_tensor_name(m, layer, what, name, sizeof name);
	fn(ctx, name, n, dims, expert);
}

void mdesc_for_each_tensor(const struct mdesc *m, mdesc_tensor_fn fn, void *ctx)
{
	uint64_t h = m->hidden,
	         qkv = 2ull * m->lin_k_heads * m->lin_dk + (uint64_t)m->lin_v_heads * m->lin_dv;

#define T(...) mdesc__t(m, fn, ctx, __VA_ARGS__)
	T(-1, "token_embd", 2, h, m->vocab, 1, false);
	for (uint32_t i = 0; i < m->layers; i++) {
		int l = (int)i;

		T(l, "attn_norm", 1, h, 1, 1, false);
		if (mdesc_is_full_layer(m, i)) {
			/* the query projection carries the output gate: 2 x q_heads x hd
			 * (ungated: q_heads x hd) */
			T(l, "attn_q", 2, h,
			  (m->attn_ungated ? 1ull : 2ull) * m->q_heads * m->head_dim, 1, false);
			T(l, "attn_k", 2, h, (uint64_t)m->kv_heads * m->head_dim, 1, false);
			T(l, "attn_v", 2, h, (uint64_t)m->kv_heads * m->head_dim, 1, false);
			T(l, "attn_q_norm", 1, m->head_dim, 1, 1, false);
			T(l, "attn_k_norm", 1, m->head_dim, 1, 1, false);
			T(l, "attn_output", 2, (uint64_t)m->q_heads * m->head_dim, h, 1, false);
		} else {
			T(l, "lin_qkv", 2, h, qkv, 1, false);
			T(l, "lin_z", 2, h, (uint64_t)m->lin_v_heads * m->lin_dv, 1, false);
			if (mdesc_lin_ba(m) == MDESC_BA_SPLIT) {
				T(l, "lin_beta", 2, h, m->lin_v_heads, 1, false);
				T(l, "lin_alpha", 2, h, m->lin_v_heads, 1, false);
			} else {
				T(l, "lin_ba", 2, h, 2ull * m->lin_v_heads, 1, false);
			}
			T(l, "lin_conv", 2, m->conv_kernel, qkv, 1, false);
			T(l, "lin_a_log", 1, m->lin_v_heads, 1, 1, false);
			T(l, "lin_dt_bias", 1, m->lin_v_heads, 1, 1, false);
			T(l, "lin_norm", 1, m->lin_dv, 1, 1, false);
			T(l, "lin_out", 2, (uint64_t)m->lin_v_heads * m->lin_dv, h, 1, false);
		}
		T(l, "ffn_norm", 1, h, 1, 1, false);
		if (m->family == MDESC_DENSE) {
			T(l, "ffn_gate", 2, h, m->ffn_inter, 1, false);
			T(l, "ffn_up", 2, h, m->ffn_inter, 1, false);
			T(l, "ffn_down", 2, m->ffn_inter, h, 1, false);
		} else {
			/* experts are the slowest dimension: one expert is contiguous */
			T(l, "ffn_gate_inp", 2, h, m->experts, 1, false);
			T(l, "ffn_gate_exps", 3, h, m->expert_inter, m->experts, true);
			T(l, "ffn_up_exps", 3, h, m->expert_inter, m->experts, true);
			T(l, "ffn_down_exps", 3, m->expert_inter, h, m->experts, true);
			T(l, "ffn_gate_inp_shexp", 1, h, 1, 1, false);
			T(l, "ffn_gate_shexp", 2, h, m->shared_inter, 1, false);
			T(l, "ffn_up_shexp", 2, h, m->shared_inter, 1, false);
			T(l, "ffn_down_shexp", 2, m->shared_inter, h, 1, false);
		}
	}
	T(-1, "output_norm", 1, h, 1, 1, false);
	if (!m->tied_output)
		T(-1, "output", 2, h, m->vocab, 1, false);
#undef T
}

bool mdesc_tensor_f32(const struct mdesc *m, const char *name, uint32_t n_dims)
{
	return m->arch != MDESC_ARCH_IGNIS &&
	       (n_dims == 1 || strstr(name, "_norm.weight") || strstr(name, "ffn_gate_inp") ||
	        strstr(name, "ssm_conv1d"));
}

struct mdesc__sum {
	const struct mdesc *m;
	uint64_t device, experts;
};

static void mdesc__add(void *ctx, const char *name, uint32_t n_dims, const uint64_t dims[4],
                       bool expert)
{
	struct mdesc__sum *s = ctx;
	uint64_t b = mdesc_tensor_f32(s->m, name, n_dims) ? 4 : 2; /* else bf16 */

	for (uint32_t i = 0; i < n_dims; i++)
		b *= dims[i];
	if (expert)
		s->experts += b;
	else
		s->device += b;
}

uint64_t mdesc_weight_bytes(const struct mdesc *m)
{
	struct mdesc__sum s = {m, 0, 0};

	if (m->weight_bytes)
		return m->weight_bytes;
	mdesc_for_each_tensor(m, mdesc__add, &s);
	return s.device;
}

uint64_t mdesc_expert_bytes(const struct mdesc *m)
{
	struct mdesc__sum s = {m, 0, 0};

	if (m->family != MDESC_MOE || m->expert_host_bytes)
		return m->expert_host_bytes;
	mdesc_for_each_tensor(m, mdesc__add, &s);
	return s.experts;
}
