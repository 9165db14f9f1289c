/*
 * mfile.h - model files of our family (GGUF, architecture "ignis-hybrid"):
 * the description a file carries, checked against the tensors it holds, and
 * the writer of synthetic models with seeded random weights (ignis-mkmodel).
 *
 * The metadata keys are declared once (MFILE_KEYS in mfile.c); the reader and
 * the writer both walk that table. The tensor list is the model
 * description's (mdesc_for_each_tensor): a file must hold exactly those
 * tensors, with exactly those dims, in f32, f16 or bf16. docs/adr/0006.
 */
#ifndef IGNIS_GPU_WORKER_MFILE_H
#define IGNIS_GPU_WORKER_MFILE_H

#include <stdint.h>

#include "err.h"
#include "gguf.h"
#include "model.h"

#define MFILE_ARCH "ignis-hybrid"

struct mfile {
	struct gguf g;
	struct mdesc desc; /* shapes and figures from the file; name points into `name` */
	char name[64];
};

/* Open and check `path`. On success the caller owns `f` until mfile_close;
 * f->desc describes the file (weights and experts summed from its tensors). */
int mfile_open(struct mfile *f, const char *path, struct ig_errbuf *eb);
void mfile_close(struct mfile *f);

/* Element types a synthetic model can be written in. */
enum mfile_dtype {
	MFILE_BF16 = GGUF_TENSOR_BF16,
	MFILE_F16 = GGUF_TENSOR_F16,
	MFILE_F32 = GGUF_TENSOR_F32
};

/* Write a model of description `m` with weights drawn from `seed` (the same
 * seed gives the same bytes) to `path`, atomically. */
int mfile_write_synthetic(const struct mdesc *m, uint64_t seed, enum mfile_dtype dtype,
                          const char *path, struct ig_errbuf *eb);

#endif
