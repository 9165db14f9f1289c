/*
 * kvfmt.h - how KV vectors are stored: one KV head's vector (a key or a
 * value of head_dim values) in a format, and where every vector of a token
 * sits in its page.
 *
 *   bf16      head_dim x 2 bytes: the oracle every other format is
 *             measured by.
 *   fp8       head_dim + 4 bytes: an fp32 scale (max|x| / 448), then one
 *             e4m3 byte a value (nearest, ties to even).
 *   compact   72 bytes per head and role at head dim 256 (docs/design.md):
 *             18 bytes a group of 64 values, an fp16 scale and eight 16-bit
 *             codes of an E8 lattice codebook, after a fixed rotation of the
 *             group (kvfmt.c says how; docs/adr/0046 why).
 *   compact1  the same bytes, the first compact code: per group an fp16
 *             scale and 64 two-bit codes for {-1.5, -0.5, 0.5, 1.5} x scale
 *             (docs/adr/0008). Not served; kept to measure against.
 * Error against bf16: `ignis-bench kvformat` (docs/benchmarks.md).
 * The bytes of a vector are the description's (mdesc_kv_head_bytes, with
 * MDESC_KV_GROUP and MDESC_KV_GROUP_BYTES): the plan sizes pages from the
 * same figures the encoder writes.
 *
 * THE PAGE LAYOUT. A page holds MDESC_PAGE_TOKENS (64) tokens of ALL
 * full-attention layers. With hb = mdesc_kv_head_bytes(format, head_dim),
 * f the full-layer index (0 .. full_layers - 1: the f-th full-attention
 * layer of the model), s = pos % 64 the token's slot:
 *
 *   field                         offset in the page
 *   ----------------------------  ---------------------------------------------
 *   K of layer f, kv head kh,     (((f * 2 + 0) * kv_heads + kh) * 64 + s) * hb
 *   slot s
 *   V of layer f, kv head kh,     (((f * 2 + 1) * kv_heads + kh) * 64 + s) * hb
 *   slot s
 *   compact codes: the indexer    I + (f * 64 + s) * indexer_key_bytes, where
 *   key of layer f, slot s (the   I = full_layers * 2 * kv_heads * 64 * hb
 *   MoE family; not written yet)
 *   end (the page's bytes)        I + full_layers * 64 * indexer_key_bytes
 *                                 (compact codes), I (bf16, fp8)
 *
 * e.g. the 27B in bf16: hb = 512 B, 16 layers x 2 roles x 4 heads x 64 tokens
 * x 512 B = 2 MiB a page; in compact 16 x 2 x 4 x 64 x 72 B = 589,824 B.
 * The end is mdesc_page_bytes (the plan's page) by construction: both are
 * built from mdesc_kv_head_bytes and the same regions, and test_kvfmt checks
 * the figures agree and the regions tile the page. The page of position p is
 * seq->table[p / 64].
 *
 * On disk and on the wire (inside sequence images): never change a layout
 * without a new format number.
 */
#ifndef IGNIS_GPU_WORKER_KVFMT_H
#define IGNIS_GPU_WORKER_KVFMT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/model.h"

/* Store `x` (head_dim values) into `out` (mdesc_kv_head_bytes bytes; the
 * format suits head_dim). */
void kvfmt_encode(enum mdesc_kv_format f, const float *x, uint32_t head_dim, void *out);
/* Read a stored vector back into `x`. */
void kvfmt_decode(enum mdesc_kv_format f, const void *in, uint32_t head_dim, float *x);

/*
 * The rotated basis. A format may store R x for a fixed orthogonal R
 * (kvfmt_rotated); decoding then undoes R for every vector. Attention need
 * not: q . k = (R q) . (R k), and a weighted sum of values is R^-1 of the
 * same sum taken rotated. So attention rotates its query once, reads keys
 * and values with kvfmt_decode_rotated, and unrotates its output once: the
 * read per key is a table lookup per 8 values. For a format that does not
 * rotate, these are the identity and kvfmt_decode.
 */
bool kvfmt_rotated(enum mdesc_kv_format f);
/* x = R x, in place. */
void kvfmt_rotate(enum mdesc_kv_format f, float *x, uint32_t head_dim);
/* x = R^-1 x, in place. */
void kvfmt_unrotate(enum mdesc_kv_format f, float *x, uint32_t head_dim);
/* Read a stored vector back as R x. */
void kvfmt_decode_rotated(enum mdesc_kv_format f, const void *in, uint32_t head_dim, float *x);

/* Byte offset inside a page of full layer `full_index`'s role `role` (0 K,
 * 1 V), kv head `kh`, token slot `slot` (the layout above). */
uint64_t kvfmt_page_offset(const struct mdesc *m, enum mdesc_kv_format f, uint32_t full_index,
                           uint32_t role, uint32_t kh, uint32_t slot);
/* Byte offset of full layer `full_index`'s indexer key of token slot `slot`
 * (compact; indexer_key_bytes long). */
uint64_t kvfmt_page_indexer_offset(const struct mdesc *m, enum mdesc_kv_format f,
                                   uint32_t full_index, uint32_t slot);
/* Bytes of the K and V vectors of every full layer, head and slot (where
 * the indexer keys start). */
uint64_t kvfmt_page_kv_bytes(const struct mdesc *m, enum mdesc_kv_format f);
/* The layout's end: the bytes of a page, equal to mdesc_page_bytes(m, f). */
uint64_t kvfmt_page_bytes(const struct mdesc *m, enum mdesc_kv_format f);

#endif
