/*
 * quant.h - the ggml tensor types Ignis reads, block by block.
 *
 * A GGUF file stores a weight matrix row by row; a row of a block type is a
 * run of blocks, each holding a fixed number of elements (32, or 256 for the
 * K-quants) in a fixed number of bytes. The layouts are ggml's, as its
 * converter and quantizer write them (ggml-common.h in llama.cpp's source):
 *
 *   type  ggml  elements  bytes  block
 *   F32     0       1       4    the float
 *   F16     1       1       2    IEEE half
 *   Q4_0    2      32      18    half d; 16 bytes of 4-bit q (element j in
 *                                the low nibble of byte j, j + 16 in the
 *                                high one); x = (q - 8) * d
 *   Q8_0    8      32      34    half d; 32 int8 q; x = q * d
 *   Q4_K   12     256     144    half d, half dmin; 12 bytes of eight 6-bit
 *                                scales and mins; 128 bytes of 4-bit q, 64
 *                                elements per 32 bytes (low nibbles, then
 *                                high); x = d * sc * q - dmin * m
 *   Q5_K   13     256     176    as Q4_K, and 32 bytes of fifth bits (qh)
 *   Q6_K   14     256     210    128 bytes of low 4 bits, 64 of high 2
 *                                bits, 16 int8 scales, half d;
 *                                x = d * sc * (q - 32)
 *   BF16   30       1       2    the upper half of a float
 *
 * Decoding is bit for bit ggml's (the same operations on the same floats,
 * in the same order, no fused multiply-add: -ffp-contract=off), which
 * tests/unit/test_quant.c checks against llama.cpp's own libggml-base on the
 * same bytes. Encoding (quant_quantize) is ours, for the synthetic model
 * files ignis-mkmodel writes: valid blocks of every type, not ggml's
 * quantizer's search; any blocks, ours or ggml's, decode the same here and
 * in llama.cpp.
 */
#ifndef IGNIS_MODEL_QUANT_H
#define IGNIS_MODEL_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* ggml's numbers (never renumber). */
enum quant_type_id {
	QUANT_F32 = 0,
	QUANT_F16 = 1,
	QUANT_Q4_0 = 2,
	QUANT_Q8_0 = 8,
	QUANT_Q4_K = 12,
	QUANT_Q5_K = 13,
	QUANT_Q6_K = 14,
	QUANT_BF16 = 30,
};

/* The elements of a K-quant super-block. */
#define QUANT_QK_K 256u
/* The largest block, in elements: a block decodes into this many floats. */
#define QUANT_BLOCK_MAX QUANT_QK_K

struct quant_type {
	uint32_t id;           /* enum quant_type_id */
	const char *name;      /* ggml's: "Q4_K" */
	uint32_t block_elems;  /* elements a block holds (1 for F32, F16, BF16) */
	uint32_t block_bytes;  /* its bytes */
};

/* The type, or NULL when Ignis does not read it. */
const struct quant_type *quant_type_of(uint32_t id);
/* "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K": for refusals. */
const char *quant_accepted(void);
/* The bytes of a row of `n` elements; 0 when the type is not read or `n` is
 * not a whole number of its blocks. */
uint64_t quant_row_bytes(uint32_t id, uint64_t n);

/* Decode `n` elements (whole blocks; the type read) from `src` into `dst`. */
void quant_dequantize(uint32_t id, const void *src, float *dst, uint64_t n);
/* Encode `n` elements (whole blocks) of `src` into `dst` (ours: see above). */
void quant_quantize(uint32_t id, const float *src, void *dst, uint64_t n);

/* IEEE half <-> float, exactly (to: round to nearest even). */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);

#endif
