/*
 * quant_blocks.h - ggml's tensor types decoded a piece at a time, and the
 * matrix-vector product's summation order, in one source that nvcc compiles
 * for the device (kernels/matvec.cu) and a C compiler for the host
 * (tests/gpu/test_quant_blocks_host.c): the host replays the kernel's exact
 * arithmetic, so a test here pins the bits a device must give.
 *
 * Usable from C17, C++ and CUDA. Everything is a static inline function,
 * __host__ __device__ under nvcc. Under __CUDA_ARCH__ (the device pass) loads
 * are vector loads and floating point goes through the _rn intrinsics; on a
 * host, loads are memcpy and floating point is plain C, which must be
 * compiled with -ffp-contract=off (as model/quant.c and the cpu backend
 * are). Every operation is named (qb_mul, qb_sub, qb_fma), so neither
 * compiler may fuse or reorder anything: both sides do the same IEEE
 * operations on the same floats.
 *
 * THE UNIT. A row of n_in weights is cut into units, the piece one lane of a
 * warp decodes at once: up to 16 elements as runs of 4 consecutive elements
 * (so x is read as float4s).
 *
 *   type   unit   units/block  a unit's runs (element offsets in the block)
 *   F32      8        -        8u, 8u+4 (the row's last unit may be short)
 *   F16      8        -        8u, 8u+4 (idem)
 *   BF16     8        -        8u, 8u+4 (idem)
 *   Q8_0     8        4        8i, 8i+4                        (i = 0..3)
 *   Q4_0     8        4        4i (low nibbles), 16+4i (high)  (i = 0..3)
 *   Q4_K    16       16        64p+l, +4 (low), 64p+32+l, +4 (high)
 *                              with p = i/4, l = 8(i%4)        (i = 0..15)
 *   Q5_K    16       16        as Q4_K
 *   Q6_K    16       16        128n+l + 0, 32, 64, 96
 *                              with n = i/8, l = 4(i%8)        (i = 0..15)
 *
 * Unit u of a row is unit u % (units/block) of block u / (units/block).
 * Each unit's weights are decoded exactly as model/quant.c decodes them
 * (the same float operations in the same order, no fused multiply-add), so
 * qb_unit gives the same bits as quant_dequantize.
 *
 * THE ORDER (qb_row_dot; kernels/matvec.cu does the same, lane for lane).
 * One output y = sum_k W[k] * x[k] over a row, with U units:
 *
 *   1. 32 lane sums: lane l (0..31) starts at +0 and takes units l, l + 32,
 *      l + 64, ... (all u < U) in increasing u; within a unit, its elements
 *      in the order of the runs above (increasing element index), each one
 *      acc = fma(w, x, acc), a single rounding;
 *   2. a butterfly: for off = 16, 8, 4, 2, 1, every lane l takes
 *      s[l] = s[l] + s[l ^ off] (the device's __shfl_xor_sync); the result
 *      is s[0] (every lane holds it: IEEE addition commutes).
 *
 * The order depends on the type and n_in alone: never on the other rows, the
 * number of vectors, the launch shape or the device. That is the exactness
 * contract's batch invariance (gpu-worker/backend/backend.h): a vector's
 * outputs are the same bits whether it is multiplied alone or among others.
 * It is not the cpu backend's order (16 lanes over elements, no fused
 * multiply-add: gpu-worker/backend/cpu/cpu_ops.h), so the two agree within a
 * tolerance (tests/gpu/test_quant_blocks_host.c states it), not in bits.
 *
 * Alignment (the device's vector loads): a Q4_K or Q5_K row is 16-byte
 * aligned when the matrix is (144 and 176 are multiples of 16) and its
 * header is read as one 16-byte load, its quants as 8-byte loads; Q8_0 (34
 * bytes), Q4_0 (18) and Q6_K (210) blocks are only 2-byte aligned in a row,
 * so they are read 16 bits at a time. F32, F16 and BF16 units are one or two
 * 16-byte loads when `vec` says the row and x are 16-byte aligned (n_in a
 * multiple of 8), else element by element. x is read 16 bytes at a time when
 * `vec` is set (always for the block types: n_in is a multiple of 32).
 */
#ifndef IGNIS_KERNELS_QUANT_BLOCKS_H
#define IGNIS_KERNELS_QUANT_BLOCKS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define QB_FN static __host__ __device__ __forceinline__
#else
#define QB_FN static inline
#endif

/* ggml's type numbers (model/quant.h's enum quant_type_id: never renumber;
 * kernels/ is a leaf and does not include model/). */
#define QB_F32  0u
#define QB_F16  1u
#define QB_Q4_0 2u
#define QB_Q8_0 8u
#define QB_Q4_K 12u
#define QB_Q5_K 13u
#define QB_Q6_K 14u
#define QB_BF16 30u

/* The warp's lanes: part of the order above. */
#define QB_LANES 32
/* The most elements a unit holds, and the most runs of 4. */
#define QB_UNIT_MAX 16
#define QB_RUNS_MAX 4
/* A plain type's unit (F32, F16, BF16). */
#define QB_PLAIN_UNIT 8

/* ---- the type's shape ---- */

/* Elements and bytes a block holds (1 element for F32, F16, BF16), and the
 * units a block is cut into (0 for the plain types: their units are 8
 * elements of the row). 0 elements: not a type read here. */
QB_FN uint32_t qb_block_elems(uint32_t type)
{
	switch (type) {
	case QB_F32:
	case QB_F16:
	case QB_BF16:
		return 1;
	case QB_Q8_0:
	case QB_Q4_0:
		return 32;
	case QB_Q4_K:
	case QB_Q5_K:
	case QB_Q6_K:
		return 256;
	}
	return 0;
}

QB_FN uint32_t qb_block_bytes(uint32_t type)
{
	switch (type) {
	case QB_F32:
		return 4;
	case QB_F16:
	case QB_BF16:
		return 2;
	case QB_Q8_0:
		return 34;
	case QB_Q4_0:
		return 18;
	case QB_Q4_K:
		return 144;
	case QB_Q5_K:
		return 176;
	case QB_Q6_K:
		return 210;
	}
	return 0;
}

QB_FN int qb_is_plain(uint32_t type)
{
	return type == QB_F32 || type == QB_F16 || type == QB_BF16;
}

QB_FN uint32_t qb_units_per_block(uint32_t type)
{
	switch (type) {
	case QB_Q8_0:
	case QB_Q4_0:
		return 4;
	case QB_Q4_K:
	case QB_Q5_K:
	case QB_Q6_K:
		return 16;
	}
	return 0;
}

/* The elements of a whole unit (a plain row's last unit may hold fewer). */
QB_FN int qb_unit_elems(uint32_t type)
{
	return qb_is_plain(type) || qb_units_per_block(type) == 4 ? 8 : 16;
}

/* The units of a row of n_in elements (n_in whole blocks of the type). */
QB_FN uint32_t qb_row_units(uint32_t type, uint32_t n_in)
{
	if (qb_is_plain(type))
		return (n_in + QB_PLAIN_UNIT - 1) / QB_PLAIN_UNIT;
	return n_in / qb_block_elems(type) * qb_units_per_block(type);
}

/* ---- named float operations: never fused, never reordered ---- */

QB_FN float qb_f32_of(uint32_t u)
{
#ifdef __CUDA_ARCH__
	return __uint_as_float(u);
#else
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
#endif
}

QB_FN float qb_mul(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fmul_rn(a, b);
#else
	return a * b;
#endif
}

QB_FN float qb_sub(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fsub_rn(a, b);
#else
	return a - b;
#endif
}

QB_FN float qb_add(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fadd_rn(a, b);
#else
	return a + b;
#endif
}

/* a * b + c, rounded once (fmaf is correctly rounded in C99, as fma.rn is). */
QB_FN float qb_fma(float a, float b, float c)
{
#ifdef __CUDA_ARCH__
	return __fmaf_rn(a, b, c);
#else
	return fmaf(a, b, c);
#endif
}

/* (float)v for -2^22 <= v < 2^22, exactly, in an integer add and a float
 * subtraction (full rate on the device, where an int-to-float conversion is
 * a quarter-rate instruction): 0x4B400000 is 1.5 * 2^23, whose ulp is 1, so
 * adding v to its bits gives 1.5 * 2^23 + v, and the subtraction is exact.
 * The same value as the conversion, so the same bits as quant.c's casts. */
QB_FN float qb_int(int32_t v)
{
	return qb_sub(qb_f32_of(0x4B400000u + (uint32_t)v), 12582912.0f);
}

/* IEEE half to float, exactly. The host follows model/quant.c's
 * quant_f16_to_f32 (a NaN made quiet); the device uses the hardware
 * conversion, the same value for every half that is not a NaN (a NaN weight
 * gives a NaN either way, maybe another one). */
QB_FN float qb_f16(uint32_t h)
{
#ifdef __CUDA_ARCH__
	return __half2float(__ushort_as_half((unsigned short)h));
#else
	uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;

	if (exp != 0 && exp != 31)
		return qb_f32_of(sign | ((exp + 112u) << 23) | (man << 13));
	if (exp == 0) {
		uint32_t s = 0;

		if (man == 0)
			return qb_f32_of(sign);
		while (!(man & 0x400u)) { /* a subnormal half is a normal float */
			man <<= 1;
			s++;
		}
		return qb_f32_of(sign | ((113u - s) << 23) | ((man & 0x3ffu) << 13));
	}
	return qb_f32_of(sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0));
#endif
}

QB_FN float qb_bf16(uint32_t h)
{
	return qb_f32_of((h & 0xffffu) << 16);
}

/* ---- loads (little-endian words; the device's are aligned as named) ---- */

/* 16 bits at a 2-byte aligned address. */
QB_FN uint32_t qb_ld16(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
	return *(const uint16_t *)p;
#else
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8);
#endif
}

/* 32 bits at a 4-byte aligned address. */
QB_FN uint32_t qb_ld32(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
	return *(const uint32_t *)p;
#else
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
	       ((uint32_t)p[3] << 24);
#endif
}

/* 32 bits at a 2-byte aligned address (two 16-bit loads). */
QB_FN uint32_t qb_ld32_a2(const uint8_t *p)
{
	return qb_ld16(p) | (qb_ld16(p + 2) << 16);
}

/* 64 bits at an 8-byte aligned address. */
QB_FN void qb_ld64(const uint8_t *p, uint32_t out[2])
{
#ifdef __CUDA_ARCH__
	const uint2 v = *(const uint2 *)p;

	out[0] = v.x;
	out[1] = v.y;
#else
	for (int i = 0; i < 2; i++)
		out[i] = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) |
		         ((uint32_t)p[4 * i + 2] << 16) | ((uint32_t)p[4 * i + 3] << 24);
#endif
}

/* 128 bits at a 16-byte aligned address. */
QB_FN void qb_ld128(const uint8_t *p, uint32_t out[4])
{
#ifdef __CUDA_ARCH__
	const uint4 v = *(const uint4 *)p;

	out[0] = v.x;
	out[1] = v.y;
	out[2] = v.z;
	out[3] = v.w;
#else
	qb_ld64(p, out);
	qb_ld64(p + 8, out + 2);
#endif
}

/* Byte k of little-endian words. */
QB_FN uint32_t qb_byte(const uint32_t *w, int k)
{
	return (w[k >> 2] >> (8 * (k & 3))) & 0xffu;
}

/* ---- units: decode one into w[], with its runs' offsets in the row ---- */

/* Q8_0, unit i of the block at b: x = q * d. */
QB_FN void qb_unit_q8_0(const uint8_t *b, int i, float *w)
{
	const float d = qb_f16(qb_ld16(b));
	const uint32_t q[2] = {qb_ld32_a2(b + 2 + 8 * i), qb_ld32_a2(b + 6 + 8 * i)};

	for (int k = 0; k < 8; k++)
		w[k] = qb_mul(qb_int((int32_t)(int8_t)qb_byte(q, k)), d);
}

/* Q4_0: bytes 4i..4i+3 of the quants, low nibbles (elements 4i + k) first,
 * then high ones (16 + 4i + k): x = (q - 8) * d. */
QB_FN void qb_unit_q4_0(const uint8_t *b, int i, float *w)
{
	const float d = qb_f16(qb_ld16(b));
	const uint32_t q = qb_ld32_a2(b + 2 + 4 * i);

	for (int k = 0; k < 4; k++) {
		w[k] = qb_mul(qb_int((int32_t)((q >> (8 * k)) & 15u) - 8), d);
		w[4 + k] = qb_mul(qb_int((int32_t)((q >> (8 * k + 4)) & 15u) - 8), d);
	}
}

/* Scale and min j (0..7) of a Q4_K/Q5_K block: quant.c's scale_min_k4 on the
 * 12 bytes after the two halves (header words 1..3, bytes s[0..11]). Byte
 * j % 4 of a word by a shift, not an indexed array, and both cases computed
 * then selected, so that a warp whose lanes hold different j neither spills
 * the header to local memory nor diverges. */
QB_FN void qb_scale_min_k4(const uint32_t *hdr, int j, uint32_t *sc, uint32_t *m)
{
	const uint32_t sh = 8u * (uint32_t)(j & 3);
	const uint32_t a = (hdr[1] >> sh) & 0xffu;      /* s[j % 4] */
	const uint32_t b = (hdr[2] >> sh) & 0xffu;      /* s[j % 4 + 4] */
	const uint32_t c = (hdr[3] >> sh) & 0xffu;      /* s[j % 4 + 8] */
	const uint32_t lo_sc = a & 63u, lo_m = b & 63u; /* j < 4 */
	const uint32_t hi_sc = (c & 0x0fu) | ((a >> 6) << 4), hi_m = (c >> 4) | ((b >> 6) << 4);

	*sc = j < 4 ? lo_sc : hi_sc;
	*m = j < 4 ? lo_m : hi_m;
}

/* Q4_K (five = 0) and Q5_K (five = 1): unit i covers bytes l..l+7 of the
 * quants' quarter p (p = i / 4, l = 8 (i % 4)): low nibbles are elements
 * 64p + l + k of sub-block 2p, high ones 64p + 32 + l + k of sub-block
 * 2p + 1; x = (d * sc) * q - (dmin * m), each product rounded (quant.c's
 * d1 * (float)q - m1), with Q5_K's fifth bit adding 16 to q. */
QB_FN void qb_unit_k45(const uint8_t *b, int i, int five, float *w)
{
	const int p = i >> 2, l = 8 * (i & 3);
	uint32_t hdr[4], q[2], qh[2] = {0, 0}, sc, m;

	qb_ld128(b, hdr);
	qb_ld64(b + (five ? 48 : 16) + 32 * p + l, q);
	if (five)
		qb_ld64(b + 16 + l, qh);
	const float d = qb_f16(hdr[0] & 0xffffu), dmin = qb_f16(hdr[0] >> 16);
	qb_scale_min_k4(hdr, 2 * p, &sc, &m);
	const float d1 = qb_mul(d, qb_int((int32_t)sc)), m1 = qb_mul(dmin, qb_int((int32_t)m));
	qb_scale_min_k4(hdr, 2 * p + 1, &sc, &m);
	const float d2 = qb_mul(d, qb_int((int32_t)sc)), m2 = qb_mul(dmin, qb_int((int32_t)m));

	for (int k = 0; k < 8; k++) {
		const uint32_t byte = qb_byte(q, k), hb = qb_byte(qh, k) >> (2 * p);
		const int32_t lo = (int32_t)((byte & 15u) + ((hb & 1u) << 4));
		const int32_t hi = (int32_t)((byte >> 4) + ((hb & 2u) << 3));

		w[k] = qb_sub(qb_mul(d1, qb_int(lo)), m1);
		w[8 + k] = qb_sub(qb_mul(d2, qb_int(hi)), m2);
	}
}

/* Q6_K: unit i is l = 4 (i % 8) .. l + 3 of half n = i / 8; element
 * 128n + 32s + l + k (s = 0..3) takes scale 8n + l / 16 + 2s and the 6-bit
 * q from ql and qh as quant.c's q1..q4; x = (d * sc) * (q - 32). */
QB_FN void qb_unit_q6_k(const uint8_t *b, int i, float *w)
{
	const int n = i >> 3, l = 4 * (i & 7);
	const uint32_t qa = qb_ld32_a2(b + 64 * n + l), qc = qb_ld32_a2(b + 64 * n + 32 + l);
	const uint32_t qh = qb_ld32_a2(b + 128 + 32 * n + l);
	const uint32_t scw[2] = {qb_ld32_a2(b + 192 + 8 * n), qb_ld32_a2(b + 196 + 8 * n)};
	const float d = qb_f16(qb_ld16(b + 208));

	for (int s = 0; s < 4; s++) {
		const int32_t sc = (int32_t)(int8_t)qb_byte(scw, l / 16 + 2 * s);
		const float ds = qb_mul(d, qb_int(sc));
		const uint32_t lo = (s & 1) ? qc : qa, shift = (s & 2) ? 4u : 0u;

		for (int k = 0; k < 4; k++) {
			const uint32_t q4 = (lo >> (8 * k + shift)) & 15u;
			const uint32_t q2 = (qh >> (8 * k + 2 * s)) & 3u;

			w[4 * s + k] = qb_mul(ds, qb_int((int32_t)(q4 | (q2 << 4)) - 32));
		}
	}
}

/* A plain type's unit u of a row: elements 8u .. 8u + n - 1 (n = 8 but for
 * a row's short last unit). `vec`: the unit is whole and 16-byte aligned. */
QB_FN void qb_unit_plain(uint32_t type, const uint8_t *row, uint32_t u, int n, int vec, float *w)
{
	if (type == QB_F32) {
		const uint8_t *p = row + 32 * (size_t)u;

		if (vec) {
			uint32_t v[8];

			qb_ld128(p, v);
			qb_ld128(p + 16, v + 4);
			for (int k = 0; k < 8; k++)
				w[k] = qb_f32_of(v[k]);
		} else {
			for (int k = 0; k < n; k++)
				w[k] = qb_f32_of(qb_ld32(p + 4 * k));
		}
		return;
	}
	const uint8_t *p = row + 16 * (size_t)u;
	uint32_t v[4];

	if (vec) {
		qb_ld128(p, v);
		for (int k = 0; k < 8; k++) {
			const uint32_t h = (v[k >> 1] >> (16 * (k & 1))) & 0xffffu;

			w[k] = type == QB_F16 ? qb_f16(h) : qb_bf16(h);
		}
	} else {
		for (int k = 0; k < n; k++) {
			const uint32_t h = qb_ld16(p + 2 * k);

			w[k] = type == QB_F16 ? qb_f16(h) : qb_bf16(h);
		}
	}
}

/*
 * Decode unit u of a row (n_in elements of `type` at `row`) into w[0..n),
 * and the row offsets of its runs of 4 into off[]; returns n, the unit's
 * elements (16 or 8, or less for a plain row's last unit), w[k] being
 * element off[k / 4] + k % 4. `vec`: plain rows are 16-byte aligned with
 * n_in a multiple of 8 (ignored for the block types, whose loads are fixed).
 * The row must be 16-byte aligned for Q4_K and Q5_K and for the plain
 * types' vector path, 4-byte for F32, 2-byte for the rest.
 */
QB_FN int qb_unit(uint32_t type, const uint8_t *row, uint32_t u, uint32_t n_in, int vec, float *w,
                  uint32_t *off)
{
	if (qb_is_plain(type)) {
		const uint32_t e = QB_PLAIN_UNIT * u;
		const int n = n_in - e < QB_PLAIN_UNIT ? (int)(n_in - e) : QB_PLAIN_UNIT;

		qb_unit_plain(type, row, u, n, vec, w);
		off[0] = e;
		off[1] = e + 4;
		return n;
	}
	const uint32_t upb = qb_units_per_block(type), blk = u / upb;
	const int i = (int)(u % upb);
	const uint8_t *b = row + (size_t)blk * qb_block_bytes(type);
	const uint32_t e = blk * qb_block_elems(type);

	switch (type) {
	case QB_Q8_0:
		qb_unit_q8_0(b, i, w);
		off[0] = e + 8 * i;
		off[1] = e + 8 * i + 4;
		return 8;
	case QB_Q4_0:
		qb_unit_q4_0(b, i, w);
		off[0] = e + 4 * i;
		off[1] = e + 16 + 4 * i;
		return 8;
	case QB_Q4_K:
	case QB_Q5_K: {
		const uint32_t base = e + 64 * (i >> 2) + 8 * (i & 3);

		qb_unit_k45(b, i, type == QB_Q5_K, w);
		off[0] = base;
		off[1] = base + 4;
		off[2] = base + 32;
		off[3] = base + 36;
		return 16;
	}
	case QB_Q6_K: {
		const uint32_t base = e + 128 * (i >> 3) + 4 * (i & 7);

		qb_unit_q6_k(b, i, w);
		for (int s = 0; s < 4; s++)
			off[s] = base + 32 * s;
		return 16;
	}
	}
	return 0;
}

/*
 * Step 1 of the order for one unit: acc = fma(w[k], x[off[k / 4] + k % 4],
 * acc) for k = 0 .. n - 1, in increasing k; returns acc. `vec`: n is a
 * multiple of 4 and x 16-byte aligned at every run (the device reads a run
 * as one float4; the same values, the same sums).
 */
QB_FN float qb_unit_dot(const float *w, const uint32_t *off, int n, const float *x, int vec,
                        float acc)
{
	if (vec) {
		for (int r = 0; r < n / 4; r++) {
#ifdef __CUDA_ARCH__
			const float4 v = *(const float4 *)(x + off[r]);
			const float xr[4] = {v.x, v.y, v.z, v.w};
#else
			const float *xr = x + off[r];
#endif
			for (int k = 0; k < 4; k++)
				acc = qb_fma(w[4 * r + k], xr[k], acc);
		}
		return acc;
	}
	for (int k = 0; k < n; k++)
		acc = qb_fma(w[k], x[off[k >> 2] + (k & 3)], acc);
	return acc;
}

/* The row's vector paths (see qb_unit and qb_unit_dot): the block types
 * always, the plain ones when n_in is a multiple of 8 and both the matrix
 * and x are 16-byte aligned (`aligned`). */
QB_FN int qb_row_vec(uint32_t type, uint32_t n_in, int aligned)
{
	return !qb_is_plain(type) || (aligned && n_in % QB_PLAIN_UNIT == 0);
}

/*
 * One output, the device's way (the order above), on one row: the host's
 * replay of kernels/matvec.cu. `vec` as qb_row_vec gives it (the same value
 * either way; the device takes the vector path whenever it may).
 */
QB_FN float qb_row_dot(uint32_t type, const uint8_t *row, const float *x, uint32_t n_in, int vec)
{
	const uint32_t units = qb_row_units(type, n_in);
	float s[QB_LANES], t[QB_LANES], w[QB_UNIT_MAX];
	uint32_t off[QB_RUNS_MAX];

	for (int l = 0; l < QB_LANES; l++) {
		float acc = 0.0f;

		for (uint32_t u = (uint32_t)l; u < units; u += QB_LANES) {
			const int n = qb_unit(type, row, u, n_in, vec, w, off);

			acc = qb_unit_dot(w, off, n, x, vec, acc);
		}
		s[l] = acc;
	}
	for (int o = QB_LANES / 2; o >= 1; o /= 2) {
		for (int l = 0; l < QB_LANES; l++)
			t[l] = qb_add(s[l], s[l ^ o]);
		for (int l = 0; l < QB_LANES; l++)
			s[l] = t[l];
	}
	return s[0];
}

#endif
