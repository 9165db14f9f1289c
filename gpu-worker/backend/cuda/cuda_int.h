/*
 * cuda_int.h - what the cuda backend's files share: its open state's
 * compute stream and memory books (be_cuda.c) for the model's entries
 * (model_cuda.c), and the table entries model_cuda.c gives. Inside
 * gpu-worker/backend/cuda/ only.
 */
#ifndef IGNIS_GPU_WORKER_CUDA_INT_H
#define IGNIS_GPU_WORKER_CUDA_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "gpu-worker/backend/backend.h"
#include "gpu-worker/backend/devmem.h"

/* The compute stream of an open cuda backend: the rounds' kernels and the
 * synchronous copies run on it. */
cudaStream_t be_cuda_compute(struct be *b);
/* The device's live allocations (the regions a bind is handed are checked
 * against them). */
const struct devmem *be_cuda_mem(struct be *b);

/* A runtime call's failure, named ("what: cudaErrorX (its text)"), the
 * thread's last error taken. */
int be_cuda_fail(struct ig_errbuf *eb, int code, cudaError_t e, const char *what);

/* The model's entries (model_cuda.c). */
int be_cuda_model_bind(struct be *b, struct mfile *f, const struct be_placer *placer,
                       const struct be_bind_opts *o, struct be_model *m, struct ig_errbuf *eb);
int be_cuda_model_needs(struct be *b, const struct mfile *f, const struct be_bind_opts *o,
                        struct be_needs *n, struct ig_errbuf *eb);
void be_cuda_model_release(struct be *b, struct be_model *m);
int be_cuda_seq_init(struct be *b, const struct be_model *m, struct be_seq *s,
                     struct ig_errbuf *eb);
void be_cuda_seq_release(struct be *b, const struct be_model *m, struct be_seq *s);
void be_cuda_seq_image(struct be *b, const struct be_model *m, const struct be_seq *s,
                       const struct kvpool *kv, enum mdesc_kv_format fmt, uint32_t last_token,
                       uint64_t sampler_bytes, struct seqimg_header *h, void **pages_out);
void be_cuda_expert_stats(struct be *b, const struct be_model *m, struct be_expert_stats *st);
uint64_t be_cuda_expert_counts(struct be *b, const struct be_model *m, uint64_t *out,
                               uint64_t n);
int be_cuda_round(struct be *b, const struct be_model *m, const struct be_step *steps,
                  uint32_t n_steps, enum mdesc_kv_format fmt, const struct kvpool *kv,
                  uint64_t context, float *logits, struct ig_errbuf *eb);

#endif
