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
#include <stddef.h>
#include <stdint.h>

enum mdesc_family { MDESC_DENSE = 1, MDESC_MOE = 2 };

/* How KV vectors are stored (model/kvfmt.h writes and reads them). The
 * number travels in sequence images and names the layout with its rotation:
 * never renumber, never reuse one.
 *   BF16      the exact one, every other is measured against it.
 *   COMPACT1  the first compact code (a plain 2-bit scalar code a group of
 *             64); no longer served, kept to measure the new one against.
 *   FP8       e4m3 with a scale per vector.
 *   COMPACT   the 2-bit code after a rotation (E8 lattice, docs/adr/0046),
 *             the same bytes as COMPACT1. */
enum mdesc_kv_format {
	MDESC_KV_BF16 = 1,
	MDESC_KV_COMPACT1 = 2,
	MDESC_KV_FP8 = 3,
	MDESC_KV_COMPACT = 4,
};
#define MDESC_KV_FORMAT_LAST MDESC_KV_COMPACT

/* Both compact codes: one fp16 scale and 16 bytes of codes a group of 64
 * values, 18 bytes; 72 B a head of 256. The plan sizes pages from these,
 * the encoder writes them: one definition. */
#define MDESC_KV_GROUP       64u
#define MDESC_KV_GROUP_BYTES 18u
/* fp8: head_dim bytes of e4m3 and one fp32 scale. */
#define MDESC_KV_FP8_SCALE_BYTES 4u

/*
 * The tokenizer a model's ids belong to: a model file's
 * "tokenizer.ggml.model" (model/mfile.c), by name. Never renumber.
 *   NONE   "none": token ids only; no text, no stop strings, no end of
 *          sequence (a request runs to its cap).
 *   BYTES  "bytes": the byte-level tokenizer of our synthetic models
 *          (model/tokenizer.h): exactly MDESC_BYTES_VOCAB ids, 0..255
 *          the bytes, then four specials, <|eos|> MDESC_BYTES_EOS.
 *   GPT2   "gpt2": the byte-level BPE a real model file carries
 *          (model/bpe.h: its tokens, merges and end-of-generation ids come
 *          from the file; the eos below is the file's eos_token_id).
 * A file naming another tokenizer is refused (docs/adr/0025).
 */
enum mdesc_tokenizer { MDESC_TOK_NONE = 1, MDESC_TOK_BYTES = 2, MDESC_TOK_GPT2 = 3 };

#define MDESC_BYTES_VOCAB 260u
#define MDESC_BYTES_EOS   257u

/* The gpt2 vocabulary of our synthetic files in llama.cpp's layouts
 * (model/mfile.c writes it): GPT-2's 256 byte characters (id b is the byte
 * b), then <|endoftext|>, <|im_start|> and <|im_end|>, its eos; more rows
 * are padding. No merges: a text is one token a byte. */
#define MDESC_SYNTH_GPT2_VOCAB 259u
#define MDESC_SYNTH_GPT2_EOS   258u

/* Expert classes: 2 projection shapes x 4 bit widths (docs/design.md, section 2):
 * 0..3 gate_up at 2, 2.5, 3 and 4 bits, 4..7 down at the same widths. One
 * expert is one gate_up record and one down record. */
#define MDESC_EXPERT_CLASSES 8
#define MDESC_EXPERT_WIDTHS  4

/* An expert record (one class's bytes of one expert) is padded to whole
 * 4 KiB, the host page: the expert cache carves a class's slots record after
 * record from its region, so every slot, and every record copied into one,
 * starts on a 4 KiB boundary of it, and the reference's class figures
 * (docs/design.md, section 2) are whole multiples. mdesc's class_record_bytes,
 * model/mfile.c's classes and the expert cache's check all pad with this one
 * macro (a constant expression for a constant argument). */
#define MDESC_EXPERT_RECORD_ALIGN 4096u
#define MDESC_EXPERT_RECORD_PAD(bytes)                                                             \
	(((uint64_t)(bytes) + MDESC_EXPERT_RECORD_ALIGN - 1u) / MDESC_EXPERT_RECORD_ALIGN *        \
	 MDESC_EXPERT_RECORD_ALIGN)

/* Tokens per KV page on every model. */
#define MDESC_PAGE_TOKENS 64u

/*
 * The layout a model file uses (its general.architecture):
 *   IGNIS      "ignis-hybrid": ours (ignis.* keys), hybrid layers, the output
 *              gate in attn_q, an output matrix of its own;
 *   QWEN3      "qwen3": llama.cpp's Qwen3 (qwen3.* keys): every layer full
 *              attention with QK-norm, no output gate, the output matrix tied
 *              to the embedding when the file has none (docs/adr/0031);
 *   QWEN35     "qwen35": llama.cpp's dense hybrid (Qwen3.5's 27B kind);
 *   QWEN35MOE  "qwen35moe": its MoE hybrid;
 *   QWEN3NEXT  "qwen3next": Qwen3-Next's MoE hybrid (docs/adr/0033).
 * The three hybrids compute what ours computes; they differ in names and
 * storage: mdesc_tensor_name, mdesc_lin_ba, mdesc_lin_tiled,
 * mdesc_lin_a_neg. Never renumber (a state image's model id hashes it).
 */
enum mdesc_arch {
	MDESC_ARCH_IGNIS = 0,
	MDESC_ARCH_QWEN3 = 1,
	MDESC_ARCH_QWEN35 = 2,
	MDESC_ARCH_QWEN35MOE = 3,
	MDESC_ARCH_QWEN3NEXT = 4,
};
#define MDESC_ARCH_COUNT 5

/* How a linear layer's beta and alpha projections are stored:
 *   FUSED   ours: lin_ba [hidden -> 2 lv], every b then every a;
 *   SPLIT   qwen35*: ssm_beta and ssm_alpha, [hidden -> lv] each;
 *   GROUPED qwen3next: ssm_ba [hidden -> 2 lv], per key head its r = lv/lk
 *           b then its r a. */
enum mdesc_lin_ba { MDESC_BA_FUSED = 0, MDESC_BA_SPLIT = 1, MDESC_BA_GROUPED = 2 };

struct mdesc {
	const char *name;  /* "qwen3.8-27b" */
	const char *alias; /* "27b" */
	const char *doc;
	enum mdesc_family family;
	enum mdesc_arch arch;

	/* Shapes. */
	uint32_t layers;      /* all layers */
	uint32_t full_layers; /* full-attention layers: the ones with KV */
	uint32_t hidden;
	uint32_t q_heads, kv_heads, head_dim;
	uint32_t vocab;
	enum mdesc_tokenizer tokenizer; /* what the ids mean (text, end of sequence) */
	uint32_t eos_id;                /* GPT2: the file's eos_token_id (UINT32_MAX: none) */
	uint32_t ffn_inter;             /* DENSE: intermediate size */
	uint32_t experts, top_k;        /* MOE: experts per layer, routed per token */
	uint32_t expert_inter;          /* MOE: expert intermediate size */
	uint32_t prefetch_width;        /* MOE: experts prefetched per decode step */
	uint32_t indexer_key_bytes;     /* MOE compact format: indexer key bytes per
	                                   full layer and token */
	uint32_t shared_inter;          /* MOE: the shared expert's intermediate size */
	uint32_t full_interval;         /* every full_interval-th layer is full attention */
	uint32_t lin_k_heads, lin_v_heads, lin_dk, lin_dv; /* gated delta rule */
	uint32_t conv_kernel;                              /* its short convolution */
	uint32_t rope_dims;                                /* rotary dims of head_dim */
	bool attn_ungated;   /* attn_q holds the query only (no output gate) */
	bool tied_output;    /* no output matrix: the embedding's rows give the logits */
	uint32_t mtp_layers; /* a llama.cpp file's multi-token-prediction blocks after the
	                        trunk (blk.<layers>...): not run, their tensors not read */
	float rope_theta, rms_eps;

	/* Figures of the weights (bytes). */
	uint64_t weight_bytes;                /* on the device, experts excluded; 0: derived from
	                                       the tensor list at bf16 (mdesc_weight_bytes) */
	uint64_t expert_host_bytes;           /* MOE: every expert, pinned host; 0: derived */
	uint64_t heaviest_layer_expert_bytes; /* MOE: its experts' projections */
	uint64_t expert_table_bytes;          /* MOE: device routing/slot tables */
	uint32_t class_record_bytes[MDESC_EXPERT_CLASSES]; /* MOE: MDESC_EXPERT_RECORD_PAD */
	uint64_t state_image_bytes; /* one sequence's fixed-size state image, carried; 0:
	                               derived (mdesc_state_image_bytes) */

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

/* Bytes of one KV head's vector (a key or a value of head_dim values) in a
 * format: bf16 head_dim x 2; compact head_dim / 64 groups of 18 bytes (0
 * when head_dim is not a multiple of 64: the format does not suit it). */
/* The format's name ("bf16", "compact1", "fp8", "compact"); NULL for a
 * number that is none. */
const char *mdesc_kv_format_name(enum mdesc_kv_format f);
/* The format named `name` (as mdesc_kv_format_name spells it); 0 when none. */
enum mdesc_kv_format mdesc_kv_format_parse(const char *name);
/* A 2-bit compact code (COMPACT or COMPACT1): the page also holds the MoE
 * family's indexer keys. */
bool mdesc_kv_compact(enum mdesc_kv_format f);
uint64_t mdesc_kv_head_bytes(enum mdesc_kv_format f, uint32_t head_dim);
/* KV bytes per token of a format, all full-attention layers:
 *   full_layers x kv_heads x 2 roles x mdesc_kv_head_bytes
 *   + full_layers x indexer_key_bytes (compact only: the MoE indexer's keys)
 * i.e. bf16 full_layers x kv_heads x 2 x head_dim x 2 B, compact
 * full_layers x kv_heads x 2 x 72 B x head_dim / 256 + the indexer's. */
uint64_t mdesc_kv_bytes_per_token(const struct mdesc *m, enum mdesc_kv_format f);
/* ... and per 64-token page: the end of the page layout of model/kvfmt.h
 * (kvfmt_page_bytes gives the same figure from the layout; test_kvfmt). */
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
 * One sequence's linear-attention state, the one place its size is
 * computed (its inner layout is model/linstate.h's; the image carries
 * it beside the pages; the plan reserves it per lane and retained slot):
 * per linear layer (every layer mdesc_is_full_layer is not)
 *   S     lin_v_heads x lin_dk x lin_dv fp32 (the delta rule's state), then
 *   conv  (conv_kernel - 1) x qkv fp32, qkv = 2 lin_k_heads lin_dk +
 *         lin_v_heads lin_dv (the short convolution's last inputs).
 */
struct mdesc_lin_state {
	uint64_t s_floats, conv_floats; /* of one layer */
	uint64_t layer_floats;          /* s_floats + conv_floats */
	uint32_t layers;                /* linear layers */
	uint64_t floats;                /* layers x layer_floats: one sequence */
	uint64_t bytes;                 /* floats x 4 */
	uint64_t image_bytes;           /* bytes + MDESC_STATE_IMAGE_HEADER */
};

/* Room a state image keeps beside the state for its header and the sampler
 * state, rounded to a 4 KiB page (seqimg.h's header is 128 bytes). */
#define MDESC_STATE_IMAGE_HEADER 4096u

/* Fill *out for `m`. False, *out zeroed, when a figure would pass 2^64 bytes
 * (mfile_check_desc refuses such shapes); full_interval 0 counts every layer
 * as linear. */
bool mdesc_lin_state(const struct mdesc *m, struct mdesc_lin_state *out);
/* One sequence's fixed-size state image: state_image_bytes when the
 * description carries it (the reference models' figures, docs/design.md,
 * section 3), else mdesc_lin_state's image_bytes. */
uint64_t mdesc_state_image_bytes(const struct mdesc *m);

/*
 * The compact formats' residual window (docs/adr/0047): a sequence's first
 * `sinks` positions (the attention sinks) and its newest `window` positions
 * are read by attention in bf16, the rest from their coded pages. The bf16
 * copies are part of the sequence's fixed-size state, after its linear
 * states at mdesc_kv_window_offset, laid out per full-attention layer, role
 * (K, V) and KV head: sinks + window slots of head_dim bf16 values, position
 * p in slot p (p < sinks) or sinks + p % window. window 0: none (sinks
 * unused).
 */
#define MDESC_KV_SINKS_DEFAULT  32 /* the knobs' defaults (common/knobs.h) */
#define MDESC_KV_WINDOW_DEFAULT 512
uint64_t mdesc_kv_window_bytes(const struct mdesc *m, uint32_t sinks, uint32_t window);
/* Where the window starts in a sequence's state: its linear states' bytes,
 * rounded up to 64. */
uint64_t mdesc_kv_window_offset(const struct mdesc *m);
/* A sequence's fixed-size state on the device: its linear states, and the
 * window after them when window > 0. */
uint64_t mdesc_seq_state_bytes(const struct mdesc *m, uint32_t sinks, uint32_t window);

/* "none", "bytes" (the model file's tokenizer.ggml.model); "?" for another
 * value. */
const char *mdesc_tokenizer_name(enum mdesc_tokenizer t);
/* The kind named by the `len` bytes at `name`; false for none of ours. */
bool mdesc_tokenizer_of(const char *name, size_t len, enum mdesc_tokenizer *out);
/* The id that ends a generation: MDESC_BYTES_EOS with the byte-level
 * tokenizer, UINT32_MAX (none) otherwise. */
uint32_t mdesc_eos(const struct mdesc *m);

/*
 * Every tensor of the family for these shapes, in file order (docs/adr/0006):
 * `fn(ctx, name, n_dims, dims, expert)`; dims[0] is the input (fastest)
 * dimension; `expert` marks the routed experts, which the plan keeps off the
 * weights line (they are the expert cache's: docs/adr/0039).
 */
typedef void (*mdesc_tensor_fn)(void *ctx, const char *name, uint32_t n_dims,
                                const uint64_t dims[4], bool expert);
void mdesc_for_each_tensor(const struct mdesc *m, mdesc_tensor_fn fn, void *ctx);

/* "ignis-hybrid", "qwen3", ... (general.architecture); NULL for none. */
const char *mdesc_arch_name(enum mdesc_arch a);
/* The storage conventions of a layout's linear layers (enum mdesc_lin_ba
 * above; tiled: value head h reads key head h mod lk, where ours and
 * qwen3next read h / (lv / lk); a_neg: the decay tensor holds -exp(A_log),
 * ours holds A_log). */
enum mdesc_lin_ba mdesc_lin_ba(const struct mdesc *m);
bool mdesc_lin_tiled(const struct mdesc *m);
bool mdesc_lin_a_neg(const struct mdesc *m);
/*
 * The name a file of m's layout gives a tensor we call `what` in layer
 * `layer` (-1: none): "blk.3.ffn_norm.weight" for ours, the same tensor
 * "blk.3.post_attention_norm.weight" in a qwen35 file, lin_a_log "blk.N.ssm_a",
 * lin_dt_bias "blk.N.ssm_dt.bias". Our names: those of
 * mdesc_for_each_tensor's ignis-hybrid list, and lin_beta/lin_alpha for a
 * SPLIT layout. Truncated to `cap`.
 */
void mdesc_tensor_name(const struct mdesc *m, int layer, const char *what, char *out, size_t cap);

/* True when a file of m's layout holds tensor `name` (n_dims) in F32 at
 * any dtype: in llama.cpp's layouts, what its converter always writes so
 * (vectors, norms, the routers, the convolution); in ours, nothing. The
 * synthetic writer (mfile_tensor_type) and the derived figures below follow
 * this one rule. */
bool mdesc_tensor_f32(const struct mdesc *m, const char *name, uint32_t n_dims);

/* Bytes of the device weights (experts excluded) and of every expert: as
 * carried, or derived from the tensor list when the field is 0, as a bf16
 * synthetic file holds them (bf16, but F32 where mdesc_tensor_f32 says): a
 * built-in's plan has the figures of the file the supervisor writes for it. */
uint64_t mdesc_weight_bytes(const struct mdesc *m);
uint64_t mdesc_expert_bytes(const struct mdesc *m);

#endif
