/*
 * kernels.h - the CUDA kernels' launchers: what the cuda backend calls.
 *
 * kernels/ is a leaf of the tree (tests/unit/layering.sh): it includes
 * nothing of ours but common/, knows no backend table and no model, and
 * computes on device pointers it is handed. The cuda backend links it and
 * decides what runs when (the worker's table library links it today; the
 * backend's own entries go to gpu-worker/backend/cuda/, which may include
 * this header and the table's).
 *
 * One operation per .cu file (rmsnorm_f32.cu, ...), each exporting one host
 * launcher with plain C types, so C code calls it without CUDA headers. The
 * reference a launcher is checked against is the cpu backend's op of the same
 * name (gpu-worker/backend/cpu/cpu_ops.h), at a tolerance each test states:
 * there is no separate host copy of a kernel here. One exception, by design:
 * quant_blocks.h (the block types' decoding and kern_matvec's summation
 * order) is a single source compiled for the device and for the host, so
 * that a host test pins the kernel's exact bits (tests/gpu/
 * test_quant_blocks_host.c) and the device test compares them bit for bit.
 *
 * Launchers: device pointers are prefixed `d_` and stay owned by the caller;
 * `stream` is a cudaStream_t (NULL: the legacy default stream). A launcher
 * only enqueues work: it returns 0 or the cudaError_t value of a rejected
 * argument or a failed launch; errors of the kernel itself surface at the
 * caller's next synchronisation. This library, and so these launchers, is
 * built only when the build has CUDA (IGNIS_HAVE_CUDA in version.h).
 */
#ifndef IGNIS_KERNELS_H
#define IGNIS_KERNELS_H

#include <stdint.h>

#include "layer_args.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * RMSNorm over each of `rows` rows of `cols` contiguous floats (cop_rmsnorm's
 * formula, summed in another order):
 *
 *   y[r][c] = x[r][c] / sqrt(mean_c(x[r][c]^2) + eps) * w[c]
 *
 * `d_x` and `d_y` hold rows * cols floats (they may be the same buffer: the
 * kernel reads a row fully before it writes it), `d_w` holds cols floats.
 * rows == 0 does nothing; rows < 0 or cols < 1 is cudaErrorInvalidValue.
 */
int kern_rmsnorm_f32(const float *d_x, const float *d_w, float *d_y, int rows, int cols, float eps,
                     void *stream);

/*
 * y = W x for `n_vec` vectors at once, W a weight matrix read in place in
 * one of the types a model file holds: `type` is ggml's number (model/quant.h:
 * F32 0, F16 1, Q4_0 2, Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14, BF16 30).
 *
 *   d_w  n_out rows of n_in elements, GGUF's [n_in, n_out] layout: each row
 *        whole blocks of the type (quant_row_bytes(type, n_in) bytes), the
 *        rows back to back;
 *   d_x  n_vec vectors of n_in floats, back to back ([n_vec][n_in]);
 *   d_y  n_vec rows of n_out floats ([n_vec][n_out]):
 *
 *   y[v][r] = sum_k W[r][k] * x[v][k]
 *
 * in the fixed order of kernels/quant_blocks.h (qb_row_dot replays it on a
 * host, bit for bit): it depends on the type and n_in alone, so a vector's
 * outputs are the same bits whatever n_vec and whichever other vectors share
 * the launch (the exactness contract). Not the cpu backend's order
 * (cop_matmul): the two agree within the tolerance the tests state.
 *
 * Alignment: d_w 16 bytes for Q4_K and Q5_K, 4 for F32, 2 for the rest;
 * d_x 16 bytes for the block types, 4 for the plain ones (cudaMalloc's
 * pointers are 256-byte aligned; an expert's slice of a [n_in, n_out, e]
 * tensor keeps its matrix's alignment). Plain rows are read 16 bytes at a
 * time when n_in is a multiple of 8 and both pointers are 16-byte aligned.
 * n_out or n_vec 0 does nothing; an unknown type, n_in < 1 or not whole
 * blocks, a negative count or a NULL pointer is cudaErrorInvalidValue; a
 * misaligned pointer cudaErrorMisalignedAddress. d_y must not overlap d_w
 * or d_x.
 */
int kern_matvec(const void *d_w, unsigned type, const float *d_x, float *d_y, int n_in, int n_out,
                int n_vec, void *stream);

/* ---- the layer kernels of a round (struct kern_attn, kern_lin:
 * layer_args.h). Each computes what the cpu backend's layer does, in fp32,
 * each output element's sums in an order fixed by the shapes alone. ---- */

/*
 * Row r of a [n_in, n_rows_of_w] matrix of weights in any type kern_matvec
 * reads, decoded exactly (quant_blocks.h), for each of n_rows tokens:
 * d_out[t][0..n_in) = W[d_tokens[t]][0..n_in). The embedding's lookup.
 */
int kern_embed(const void *d_w, unsigned type, int n_in, const uint32_t *d_tokens, int n_rows,
               float *d_out, void *stream);

/*
 * cop_rmsnorm (cpu_ops.h) over `rows` rows of `cols` floats, the weight a
 * vector as the file holds it (struct kern_vec): y[r] = rmsnorm(x[src(r)])
 * with src(r) = r, or d_rows[r] when d_rows is not NULL (the head's rows:
 * the last token of each step that wants logits). d_y may equal d_x when
 * d_rows is NULL.
 */
int kern_rmsnorm(const float *d_x, struct kern_vec w, float *d_y, int rows, int cols, float eps,
                 const uint32_t *d_rows, void *stream);

/* d_x[i] += d_y[i] for i < n (the residual add). */
int kern_add(float *d_x, const float *d_y, uint64_t n, void *stream);

/* d_out[i] = silu(d_gate[i]) * d_up[i] (cop_swiglu); d_out may be either
 * input. */
int kern_swiglu(const float *d_gate, const float *d_up, float *d_out, uint64_t n, void *stream);

/*
 * Full attention (struct kern_attn): its device scratch for n_tok rows of
 * sequences up to max_pos positions, then the three steps in this order on
 * one stream (layer_args.h says what each does). Tables the formats need on
 * the device (the compact format's codebook) are built once by
 * kern_kvfmt_init, which the backend calls at open (idempotent; 0 or a
 * cudaError_t). Each step's kernel keeps a (row, head)'s softmax state in
 * registers and shared memory, so the scratch is 0 bytes today (d_scratch
 * may be NULL); callers size it with kern_attn_scratch_bytes all the same,
 * so that a kernel splitting positions over blocks may take some later
 * (kernels/attention.cu says how its bits would stay the same).
 */
uint64_t kern_attn_scratch_bytes(uint32_t head_dim, uint32_t q_heads, uint32_t n_tok,
                                 uint64_t max_pos);
int kern_kvfmt_init(void);
int kern_attn_prep(const struct kern_attn *a, void *stream);
int kern_attn(const struct kern_attn *a, void *stream);
int kern_attn_window_store(const struct kern_attn *a, void *stream);

/*
 * The gated delta rule (struct kern_lin): the convolution over each
 * segment's tokens in order (in place in d_qkv, sliding each segment's conv
 * state), then the recurrence per segment and value head over its tokens in
 * order (S updated in place, o gated and normed into d_o).
 */
int kern_lin_conv(const struct kern_lin *l, void *stream);
int kern_lin_recur(const struct kern_lin *l, void *stream);

#ifdef __cplusplus
}
#endif

#endif
