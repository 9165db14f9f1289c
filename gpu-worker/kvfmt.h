/*
 * kvfmt.h - how one KV head's vector (a key or a value of head_dim values) is
 * stored in a page.
 *
 *   bf16     head_dim x 2 bytes: the oracle every other format is measured by.
 *   compact  72 bytes per head and role at head dim 256 (docs/design.md),
 *            i.e. 18 bytes per 64 values: one fp16 scale, then 64 two-bit
 *            codes (four per byte, lowest bits first) for the levels
 *            {-1.5, -0.5, 0.5, 1.5} x scale; the encoder picks the scale
 *            of least squared error among 0.8..1.25 x the group's RMS and
 *            max|x| / 1.5.
 *            Error against bf16: see docs/adr/0008-compact-kv.md.
 *
 * On disk and on the wire (inside sequence images): never change a layout
 * without a new format number.
 */
#ifndef IGNIS_GPU_WORKER_KVFMT_H
#define IGNIS_GPU_WORKER_KVFMT_H

#include <stdint.h>

#include "model.h"

#define KVFMT_GROUP       64u /* compact: values per scale */
#define KVFMT_GROUP_BYTES 18u /* compact: 2 (fp16 scale) + 64 x 2 bits */

/* Bytes of one head's vector; 0 when head_dim does not suit the format
 * (compact needs a multiple of 64). */
uint64_t kvfmt_head_bytes(enum mdesc_kv_format f, uint32_t head_dim);
/* Store `x` (head_dim values) into `out` (kvfmt_head_bytes bytes). */
void kvfmt_encode(enum mdesc_kv_format f, const float *x, uint32_t head_dim, void *out);
/* Read a stored vector back into `x`. */
void kvfmt_decode(enum mdesc_kv_format f, const void *in, uint32_t head_dim, float *x);

#endif
