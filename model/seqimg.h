/*
 * seqimg.h - a sequence's whole state as a versioned image, written and read
 * a window at a time, at any window size.
 *
 * The image is what moves to KV-RAM and KV-disk and back: restoring it gives
 * a bit-identical continuation. Its parts are gathered from (and scattered
 * back to) wherever they live: the KV pages are scattered across the pool by
 * the sequence's page table, the fixed-size state and the sampler state
 * elsewhere. Nothing is copied twice: a window is filled straight from the
 * parts and emptied straight into them.
 *
 * On disk and on the wire (little-endian; never renumber, never reorder):
 *
 *   offset size  field
 *        0    8  magic "IGNISSEQ"
 *        8    4  layout version (SEQIMG_LAYOUT_VERSION)
 *       12    4  header bytes (SEQIMG_HEADER_BYTES)
 *       16   48  model name, NUL-padded
 *       64    8  model identity: XXH64 of the model's shapes (seqimg_model_id)
 *       72    4  KV format (enum mdesc_kv_format)
 *       76    4  page bytes
 *       80    8  tokens in the sequence (its position)
 *       88    4  pages
 *       92    4  last token
 *       96    8  fixed-size state bytes
 *      104    8  sampler state bytes
 *      112    8  image bytes, header included
 *      120    8  XXH64 of bytes 0..119
 *      128       KV pages (pages x page bytes), then the fixed-size state,
 *                then the sampler state
 */
#ifndef IGNIS_GPU_WORKER_SEQIMG_H
#define IGNIS_GPU_WORKER_SEQIMG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/model.h"

#define SEQIMG_LAYOUT_VERSION 1u
#define SEQIMG_HEADER_BYTES   128u

struct seqimg_header {
	char model[48];
	uint64_t model_id;
	uint32_t kv_format, page_bytes;
	uint64_t tokens;
	uint32_t pages, last_token;
	uint64_t state_bytes, sampler_bytes;
	uint64_t image_bytes; /* set by seqimg_writer_init */
};

/* Where the parts live: pages[i] is the i-th page of the sequence (page_bytes
 * each), then the fixed-size state and the sampler state. The caller keeps
 * them valid, and unchanged, while a writer or reader uses them. */
struct seqimg_parts {
	void *const *pages;
	void *state;
	void *sampler;
};

/* The identity of a model's shapes: images of another model are refused. */
uint64_t seqimg_model_id(const struct mdesc *m);

struct seqimg_writer {
	struct seqimg_header h;
	struct seqimg_parts parts;
	unsigned char header[SEQIMG_HEADER_BYTES];
	uint64_t off;
};

/* Start writing the image of `h` (image_bytes is filled in) from `parts`. */
void seqimg_writer_init(struct seqimg_writer *w, const struct seqimg_header *h,
                        const struct seqimg_parts *parts);
/* Copy the next up to `cap` bytes of the image into `dst`; *n says how many
 * (0 when the image is complete). */
void seqimg_write_window(struct seqimg_writer *w, void *dst, uint64_t cap, uint64_t *n);
/* The same, the window's checksum (kvcopy_sum of the bytes written) taken in
 * the same pass: what a move out commits. */
void seqimg_write_window_sum(struct seqimg_writer *w, void *dst, uint64_t cap, uint64_t *n,
                             uint64_t *sum);
/* The checksum of a window's bytes where they lie (kvcopy_sum): what
 * seqimg_write_window_sum gives for them, for a window whose bytes arrived
 * by DMA rather than through a copy that hashed them on the way. */
uint64_t seqimg_window_sum(const void *window, uint64_t n);

/* How a window's bytes reach the parts or leave them, for parts a plain
 * memcpy cannot reach (a GPU backend's pages and state are device memory):
 * move() copies one piece, a contiguous run of `n` bytes inside one page,
 * the state or the sampler state, from `src` to `dst`, one call a piece in
 * image order (the cuda backend: one cudaMemcpyAsync each, on its transfer
 * stream). The header never goes through it: its bytes are the writer's and
 * the reader's own. IG_E_OK, or the copy's failure (its message in `eb`),
 * which stops the window there. */
struct seqimg_mover {
	int (*move)(void *ctx, void *dst, const void *src, uint64_t n, struct ig_errbuf *eb);
	void *ctx;
};
/* seqimg_write_window with each piece of the parts moved by `mv`. No
 * checksum: the bytes may not have landed when it returns (`mv` may only
 * have enqueued them); the caller takes kvcopy_sum of the window once they
 * have. IG_E_OK or the mover's failure (the window is then torn). */
int seqimg_write_window_by(struct seqimg_writer *w, void *dst, uint64_t cap, uint64_t *n,
                           const struct seqimg_mover *mv, struct ig_errbuf *eb);
static inline bool seqimg_writer_done(const struct seqimg_writer *w)
{
	return w->off == w->h.image_bytes;
}

struct seqimg_reader {
	struct seqimg_header h; /* valid once the header is in */
	struct seqimg_parts parts;
	const struct mdesc *model;
	enum mdesc_kv_format kv_format;
	uint32_t max_pages; /* room in parts.pages */
	uint64_t max_state, max_sampler;
	unsigned char header[SEQIMG_HEADER_BYTES];
	uint64_t off;
	bool failed;
};

/* Start reading an image for `model` in `kv_format` into `parts`, which have
 * room for `max_pages` pages and the given sampler bytes, and whose state is
 * `max_state` bytes: an image of another state size (another KV window) is
 * refused. */
void seqimg_reader_init(struct seqimg_reader *r, const struct mdesc *model,
                        enum mdesc_kv_format kv_format, const struct seqimg_parts *parts,
                        uint32_t max_pages, uint64_t max_state, uint64_t max_sampler);
/* Take the next `n` bytes of the image. The header is checked as soon as it
 * is complete: a foreign, stale or corrupt image is refused by name, and a
 * refused reader takes nothing more. Bytes past the image's end are refused. */
int seqimg_read_window(struct seqimg_reader *r, const void *src, uint64_t n, struct ig_errbuf *eb);
/* The same, the checksum of the `n` bytes taken in the same pass (a move in
 * compares it with the recorded one; on a mismatch the parts hold bytes that
 * must not be used). */
int seqimg_read_window_sum(struct seqimg_reader *r, const void *src, uint64_t n, uint64_t *sum,
                           struct ig_errbuf *eb);
/* Read `count` consecutive windows k0, k0 + 1, ... of an image of
 * `image_bytes` cut in windows of `window` bytes, from `src` (window k0
 * first), each checked against sums[k] in the same pass. IG_E_OK, or
 * IG_E_KV_LOST with the reason in `why` (a refused header, a mismatch): the
 * parts then hold bytes that must not be used. What a move in runs a window
 * at a time (be_img). */
int seqimg_read_windows_checked(struct seqimg_reader *r, const void *src, uint32_t k0,
                                uint32_t count, uint64_t window, uint64_t image_bytes,
                                const uint64_t *sums, char *why, size_t cap);
/* seqimg_read_windows_checked with each piece of the parts moved by `mv`:
 * each window's checksum is taken of its bytes at `src` before any of them
 * is moved (a window that fails it moves nothing), then its header bytes
 * are checked and its parts' pieces handed to `mv`. IG_E_OK, IG_E_KV_LOST
 * (the same reasons, in `why`), or the mover's failure code with its
 * message in `why`. */
int seqimg_read_windows_checked_by(struct seqimg_reader *r, const void *src, uint32_t k0,
                                   uint32_t count, uint64_t window, uint64_t image_bytes,
                                   const uint64_t *sums, const struct seqimg_mover *mv, char *why,
                                   size_t cap);
static inline bool seqimg_reader_done(const struct seqimg_reader *r)
{
	return !r->failed && r->off >= SEQIMG_HEADER_BYTES && r->off == r->h.image_bytes;
}

#endif
