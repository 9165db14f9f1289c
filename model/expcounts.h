/*
 * expcounts.h - how often a MoE model routes to each of its experts: a
 * calibration's counts (ignis-calibrate), kept beside the model file as
 * `<model>.experts`, from which the worker pins the hottest experts
 * (--vram-pinned-expert-bytes; docs/adr/0039).
 *
 * The file is text, so that it can be read and shipped with the model:
 *
 *     ignis-expert-counts 1
 *     identity 0123456789abcdef     (mfile_identity of the model file)
 *     layers 8 experts 64
 *     <the 64 counts of layer 0, separated by spaces>
 *     ...                           (one line a layer)
 *
 * A file of another model (its identity), of other shapes, or malformed is
 * refused by name.
 */
#ifndef IGNIS_MODEL_EXPCOUNTS_H
#define IGNIS_MODEL_EXPCOUNTS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "mfile.h"

#define EXPCOUNTS_SUFFIX ".experts"

/* `<model_path>.experts` into out; IG_E_INVAL when it does not fit. */
int expcounts_path(char *out, size_t cap, const char *model_path, struct ig_errbuf *eb);
/* Write counts (layers x experts, layer-major) for model `f`, atomically. */
int expcounts_write(const char *path, const struct mfile *f, const uint64_t *counts,
                    struct ig_errbuf *eb);
/* Read them: *counts (malloc'd, layers x experts) on success; IG_E_NOTFOUND
 * when there is no such file; IG_E_INVAL naming the line when it is not
 * this model's or not well formed. */
int expcounts_read(const char *path, const struct mfile *f, uint64_t **counts,
                   struct ig_errbuf *eb);

#endif
