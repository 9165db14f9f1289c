/*
 * model.h - the model descriptions the VRAM plan needs.
 *
 * Two families share the plan's rules:
 *   DENSE (the 27B's rules): a dense feed-forward, every weight on the device,
 *         a fixed number of decode lanes, context adaptation;
 *   MOE   (Flash-Next's rules): mixture of experts behind a device expert
 *         cache fed from pinned host memory, 1..8 decode lanes.
 * The built-in reference models carry the figures of docs/design.md,
 * section 3; the tiny synthetic models have
 * descriptions of the same kind with scaled floors so that a cpu build
 * exercises every branch of the plan. Figures a model file will give exactly
 * (issue 4) are marked where they are carried rather than derived.
 */
#ifndef IGNIS_COMMON_MODEL_H
#define IGNIS_COMMON_MODEL_H

#include <stdbool.h>
#include <stdint.h>

enum mdesc_family { MDESC_DENSE = 1, MDESC_MOE = 2 };

enum mdesc_kv_format { MDESC_KV_BF16 = 1, MDESC_KV_COMPACT = 2 };

/* Expert classes: 2 projection shapes x 4 bit widths (docs/design.md, section 2):
 * 0..3 gate_up at 2, 2.5, 3 and 4 bits, 4..7 down at the same widths. One
 * expert is one gate_up record and one down record. */
#define MDESC_EXPERT_CLASSES 8
#define MDESC_EXPERT_WIDTHS  4

/* Tokens per KV page on every model. */
#define MDESC_PAGE_TOKENS 64u

struct mdesc {
	const char *name;  /* "qwen3.8-27b" */
	const char *alias; /* "27b" */
	const char *doc;
	enum mdesc_family family;

	/* Shapes. */
	uint32_t layers;      /* all layers */
	uint32_t full_layers; /* full-attention layers: the ones with KV */
	uint32_t hidden;
	uint32_t q_heads, kv_heads, head_dim;
	uint32_t vocab;
	uint32_t ffn_inter;         /* DENSE: intermediate size */
	uint32_t experts, top_k;    /* MOE: experts per layer, routed per token */
	uint32_t expert_inter;      /* MOE: expert intermediate size */
	uint32_t prefetch_width;    /* MOE: experts prefetched per decode step */
	uint32_t indexer_key_bytes; /* MOE compact format: indexer key bytes per
	                               full layer and token */
	uint32_t shared_inter;      /* MOE: the shared expert's intermediate size */
	uint32_t full_interval;     /* every full_interval-th layer is full attention */
	uint32_t lin_k_heads, lin_v_heads, lin_dk, lin_dv; /* gated delta rule */
	uint32_t conv_kernel;                              /* its short convolution */
	uint32_t rope_dims;                                /* rotary dims of head_dim */
	float rope_theta, rms_eps;

	/* Figures of the weights (bytes). */
	uint64_t weight_bytes;                /* on the device, experts excluded; 0: derived from
	                                       the tensor list at bf16 (mdesc_weight_bytes) */
	uint64_t expert_host_bytes;           /* MOE: every expert, pinned host; 0: derived */
	uint64_t heaviest_layer_expert_bytes; /* MOE: its experts' projections */
	uint64_t expert_table_bytes;          /* MOE: device routing/slot tables */
	uint32_t class_record_bytes[MDESC_EXPERT_CLASSES]; /* MOE, 4 KiB padded */
	uint64_t state_image_bytes;                        /* one sequence's fixed-size state */

	/* Lanes: DENSE has fixed_lanes (the lanes knob is refused); MOE takes
	 * 1..max_lanes with default_lanes. */
	uint32_t fixed_lanes, default_lanes, max_lanes;

	/* Per-model defaults of knobs. */
	uint32_t default_context;
	uint32_t default_chunk;
	uint32_t default_max_tokens;
	uint32_t default_retained_host; /* MOE; DENSE: two per lane */
	uint64_t default_kv_disk_bytes; /* 0: KV-disk off */

	/* MOE floors. */
	uint64_t cache_floor_bytes;  /* the expert cache's floor (12 GiB) */
	uint32_t offload_pool_pages; /* the offloaded pool's cap (8192 pages) */
};

/* The built-in descriptions, in a fixed order. */
extern const struct mdesc mdesc_builtin[];
extern const unsigned mdesc_nbuiltin;

/* By name or alias (case-sensitive), or NULL. */
const struct mdesc *mdesc_find(const char *name);
/* "qwen3.8-27b (27b), qwen3.8-flash-next (flash-next), ..." for messages. */
const char *mdesc_names(void);

/* KV bytes per token of a format, all full-attention layers:
 *   bf16:    full_layers x kv_heads x 2 roles x head_dim x 2 B
 *   compact: full_layers x kv_heads x 2 roles x 72 B x head_dim / 256
 *            + full_layers x indexer_key_bytes (MOE) */
uint64_t mdesc_kv_bytes_per_token(const struct mdesc *m, enum mdesc_kv_format f);
/* ... and per 64-token page. */
uint64_t mdesc_page_bytes(const struct mdesc *m, enum mdesc_kv_format f);
/* Pages for `tokens` tokens, rounded up. */
uint64_t mdesc_pages_for(uint64_t tokens);
/* Activation bytes of one token through one layer at its widest (the unit of
 * the workspace and decode lines; see model.c). */
uint64_t mdesc_token_activation_bytes(const struct mdesc *m);
/* MOE: bytes of one slot in every class (sum of the class records). */
uint64_t mdesc_class_set_bytes(const struct mdesc *m);
/* MOE: the fewest bytes one expert can take in the cache: its smallest
 * gate_up record and its smallest down record. */
uint64_t mdesc_min_expert_bytes(const struct mdesc *m);

/* True when layer `i` is a full-attention layer. */
bool mdesc_is_full_layer(const struct mdesc *m, uint32_t i);

/*
 * Every tensor of the family for these shapes, in file order (docs/adr/0006):
 * `fn(ctx, name, n_dims, dims, expert)`; dims[0] is the input (fastest)
 * dimension; `expert` marks the routed experts, which live in host memory.
 */
typedef void (*mdesc_tensor_fn)(void *ctx, const char *name, uint32_t n_dims,
                                const uint64_t dims[4], bool expert);
void mdesc_for_each_tensor(const struct mdesc *m, mdesc_tensor_fn fn, void *ctx);

/* Bytes of the device weights (experts excluded) and of every expert: as
 * carried, or derived from the tensor list at bf16 when the field is 0. */
uint64_t mdesc_weight_bytes(const struct mdesc *m);
uint64_t mdesc_expert_bytes(const struct mdesc *m);

#endif
