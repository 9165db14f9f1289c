/*
 * layer_args.h - what the cuda backend hands the layer kernels of a round:
 * the round's sequences (their positions, page tables and states, in device
 * memory) and each layer operation's dimensions, weights and buffers. Plain
 * C structs, the same under a C compiler and nvcc, so that
 * gpu-worker/backend/cuda/ fills them and kernels/ reads them.
 *
 * The arithmetic each kernel does is the cpu backend's of the same layer
 * (gpu-worker/backend/cpu/layer_full.c, layer_linear.c, layer_ffn.c; the
 * formats of model/kvfmt.h, the state layout of model/linstate.h), in fp32,
 * each output element summed in an order fixed by the shapes alone: a
 * token's results never depend on the other rows of the launch (the
 * exactness contract of gpu-worker/backend/backend.h). Not the cpu's order:
 * the two agree within the conformance suite's tolerances.
 *
 * Every pointer named d_* is device memory the caller owns; a launch reads
 * the struct itself by value (the launchers copy what the kernels need into
 * their parameters), so a struct on the host stack is fine.
 */
#ifndef IGNIS_KERNELS_LAYER_ARGS_H
#define IGNIS_KERNELS_LAYER_ARGS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A vector of weights (a norm, the convolution's taps, a decay or bias
 * vector) as the file holds it: F32 (0), F16 (1) or BF16 (30), read in
 * place; never a block type. */
struct kern_vec {
	const void *d_p;
	uint32_t type;
};

/* One sequence's part of a round (a prefill chunk or a decode token), in
 * device memory as an array the kernels index. Rows are the round's tokens
 * in step order: the segment's tokens are rows row0 .. row0 + n_tok - 1,
 * at positions pos0 .. pos0 + n_tok - 1. */
struct kern_seg {
	uint64_t pos0;
	uint32_t n_tok;
	uint32_t row0;
	const uint32_t *d_table; /* its page table: pool page of positions [64 i, 64 i + 64) */
	uint32_t n_pages;
	uint32_t pad_;
	/* its state slot (model/linstate.h: every linear layer's S and conv,
	 * then the compact formats' KV window at mdesc_kv_window_offset) */
	unsigned char *d_state;
};

/*
 * A full-attention layer's token mixer after its projections (layer_full.c
 * from the q/k norms to the attention output before attn_output):
 *
 *   d_qg  [n_tok][q_heads][qs]: per q head the query (head_dim), then its
 *         gate (head_dim) when gated (qs = 2 head_dim; else qs = head_dim)
 *   d_k, d_v [n_tok][kv_heads][head_dim]
 *   d_o   [n_tok][q_heads][head_dim]: the output
 *
 * kern_attn_prep normalises and rotates (RoPE) q and k in place, rotates q
 * into the format's basis (kvfmt_rotate), encodes every token's K and V
 * into its page slot, and, with a window, leaves in d_k and d_v the rotated
 * bf16-rounded copies the window keeps. kern_attn attends each token over
 * positions 0 .. its own (the window's, the chunk's own rows, or the pages,
 * as layer_full.c's kv_read), unrotates and gates the output.
 * kern_attn_window_store then writes the window's sinks and newest slots.
 */
struct kern_attn {
	/* shapes */
	uint32_t head_dim, q_heads, kv_heads, rope_dims;
	uint32_t gated; /* 1: attn_q holds a gate per head */
	float rope_theta, eps, scale;
	/* the KV format (enum mdesc_kv_format's value) and the page layout
	 * (model/kvfmt.h): page p at d_pool + p * page_bytes; K of full layer
	 * `full_index`, head kh, slot s at
	 * (((full_index * 2 + 0) * kv_heads + kh) * 64 + s) * head_bytes */
	uint32_t fmt;
	uint32_t full_index;
	uint64_t head_bytes;
	uint64_t page_bytes;
	unsigned char *d_pool;
	/* the norms (head_dim each) */
	struct kern_vec q_norm, k_norm;
	/* the compact formats' residual window: sinks + window slots per full
	 * layer, role and head of head_dim bf16 values at win_offset into each
	 * sequence's state (common/model.h's layout); window 0: none */
	uint32_t sinks, window;
	uint64_t win_offset;
	/* the round */
	const struct kern_seg *d_segs;
	uint32_t n_segs;
	const uint32_t *d_row_seg; /* per row: its segment */
	uint32_t n_tok;
	uint64_t max_pos; /* the longest segment's end: scratch per head */
	float *d_qg, *d_k, *d_v, *d_o;
	/* device scratch the caller sized with kern_attn_scratch_bytes */
	void *d_scratch;
};

/*
 * A linear-attention layer's token mixer after its projections
 * (layer_linear.c from the convolution to o before lin_out):
 *
 *   d_qkv [n_tok][qkv]   (qkv = 2 lk dk + lv dv; convolved in place)
 *   d_z   [n_tok][lv dv]
 *   b and a of row r, value head h: d_b[r * ba_stride + at(h)] and
 *         d_a[r * ba_stride + at(h)], at(h) = h, or for the GROUPED layout
 *         h / (lv / lk) * 2 (lv / lk) + h % (lv / lk)
 *   d_o   [n_tok][lv dv]: the gated, normed output
 *
 * Each segment's state: S and conv of linear layer `lin_index` at
 * d_state + lin_index * layer_floats floats (S s_floats floats, then conv).
 */
struct kern_lin {
	uint32_t lk, lv, dk, dv, conv_kernel, qkv;
	uint32_t grouped; /* b and a in the GROUPED layout (mdesc_lin_ba) */
	uint32_t tiled;   /* value head h reads key head h % lk (else h / (lv / lk)) */
	uint32_t a_neg;   /* a_log holds -exp(A) (mdesc_lin_a_neg) */
	float eps;
	struct kern_vec conv; /* [qkv][conv_kernel] taps */
	struct kern_vec a_log, dt_bias; /* [lv] */
	struct kern_vec norm;           /* [dv] */
	uint32_t lin_index;
	uint64_t layer_floats, s_floats;
	const struct kern_seg *d_segs;
	uint32_t n_segs;
	uint32_t n_tok;
	float *d_qkv, *d_z, *d_o;
	const float *d_b, *d_a;
	uint32_t ba_stride;
};

#ifdef __cplusplus
}
#endif

#endif
