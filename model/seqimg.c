/* seqimg.c - sequence images, window by window (see seqimg.h). */
#include "seqimg.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <xxhash.h>

#include "common/bytes.h"
#include "kvram/kvcopy.h"

uint64_t seqimg_model_id(const struct mdesc *m)
{
	/* the shapes that give a state its meaning, as little-endian u32 */
	const uint32_t f[] = {
	    m->family,   m->layers,       m->full_layers, m->hidden,           m->q_heads,
	    m->kv_heads, m->head_dim,     m->vocab,       m->ffn_inter,        m->experts,
	    m->top_k,    m->expert_inter, m->lin_k_heads, m->lin_v_heads,      m->lin_dk,
	    m->lin_dv,   m->conv_kernel,  m->rope_dims,   m->indexer_key_bytes};
	unsigned char buf[sizeof(f) + 4];
	size_t n = sizeof(f);

	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		le_put32(buf + 4 * i, f[i]);
	/* the layout too (value-head order, decay storage differ): appended
	 * for llama.cpp's, so our own files' ids stay what they were */
	if (m->arch != MDESC_ARCH_IGNIS) {
		le_put32(buf + n, (uint32_t)m->arch);
		n += 4;
	}
	return XXH64(buf, n, 0x49474e4953ull /* "IGNIS" */);
}

static void seqimg__encode(unsigned char *b, const struct seqimg_header *h)
{
	memset(b, 0, SEQIMG_HEADER_BYTES);
	memcpy(b, "IGNISSEQ", 8);
	le_put32(b + 8, SEQIMG_LAYOUT_VERSION);
	le_put32(b + 12, SEQIMG_HEADER_BYTES);
	memcpy(b + 16, h->model, strnlen(h->model, sizeof(h->model)));
	le_put64(b + 64, h->model_id);
	le_put32(b + 72, h->kv_format);
	le_put32(b + 76, h->page_bytes);
	le_put64(b + 80, h->tokens);
	le_put32(b + 88, h->pages);
	le_put32(b + 92, h->last_token);
	le_put64(b + 96, h->state_bytes);
	le_put64(b + 104, h->sampler_bytes);
	le_put64(b + 112, h->image_bytes);
	le_put64(b + 120, XXH64(b, 120, 0));
}

/* The part that holds image offset `off` (past the header): a pointer into
 * it and how many bytes of that part follow. */
static unsigned char *seqimg__at(const struct seqimg_header *h, const struct seqimg_parts *p,
                                 uint64_t off, uint64_t *left)
{
	uint64_t kv = (uint64_t)h->pages * h->page_bytes;

	off -= SEQIMG_HEADER_BYTES;
	if (off < kv) {
		uint64_t page = off / h->page_bytes, in = off % h->page_bytes;

		*left = h->page_bytes - in;
		return (unsigned char *)p->pages[page] + in;
	}
	off -= kv;
	if (off < h->state_bytes) {
		*left = h->state_bytes - off;
		return (unsigned char *)p->state + off;
	}
	off -= h->state_bytes;
	*left = h->sampler_bytes - off;
	return (unsigned char *)p->sampler + off;
}

void seqimg_writer_init(struct seqimg_writer *w, const struct seqimg_header *h,
                        const struct seqimg_parts *parts)
{
	memset(w, 0, sizeof(*w));
	w->h = *h;
	w->h.image_bytes = SEQIMG_HEADER_BYTES + (uint64_t)h->pages * h->page_bytes +
	                   h->state_bytes + h->sampler_bytes;
	w->parts = *parts;
	seqimg__encode(w->header, &w->h);
}

/* How a window's pieces are copied: hashed on the way through `st` (one
 * pass), or by the caller's mover (the parts' pieces only; `moved` keeps
 * its failure apart from a refused image), or by memcpy. */
struct seqimg__how {
	struct kvcopy_stream *st;
	const struct seqimg_mover *mv;
	struct ig_errbuf *eb;
	int moved; /* the mover's failure; IG_E_OK: none */
};

/* Copy a piece, `part` when it is the parts' (not the header's). */
static int seqimg__copy(struct seqimg__how *how, bool part, void *dst, const void *src, uint64_t n)
{
	if (part && how->mv) {
		how->moved = how->mv->move(how->mv->ctx, dst, src, n, how->eb);
		return how->moved;
	}
	if (how->st)
		kvcopy_stream_copy(how->st, dst, src, n);
	else
		memcpy(dst, src, (size_t)n);
	return IG_E_OK;
}

static int seqimg__write(struct seqimg_writer *w, void *dst, uint64_t cap, uint64_t *n,
                         struct seqimg__how *how)
{
	unsigned char *out = dst;

	*n = 0;
	while (*n < cap && w->off < w->h.image_bytes) {
		uint64_t left, take;
		const unsigned char *src;
		bool part = w->off >= SEQIMG_HEADER_BYTES;
		int rc;

		if (!part) {
			src = w->header + w->off;
			left = SEQIMG_HEADER_BYTES - w->off;
		} else {
			src = seqimg__at(&w->h, &w->parts, w->off, &left);
		}
		take = left < cap - *n ? left : cap - *n;
		rc = seqimg__copy(how, part, out + *n, src, take);
		if (rc)
			return rc;
		*n += take;
		w->off += take;
	}
	return IG_E_OK;
}

void seqimg_write_window(struct seqimg_writer *w, void *dst, uint64_t cap, uint64_t *n)
{
	seqimg__write(w, dst, cap, n, &(struct seqimg__how){0});
}

void seqimg_write_window_sum(struct seqimg_writer *w, void *dst, uint64_t cap, uint64_t *n,
                             uint64_t *sum)
{
	struct kvcopy_stream st;

	kvcopy_stream_reset(&st);
	seqimg__write(w, dst, cap, n, &(struct seqimg__how){.st = &st});
	*sum = kvcopy_stream_sum(&st);
}

uint64_t seqimg_window_sum(const void *window, uint64_t n)
{
	return kvcopy_sum(window, n);
}

int seqimg_write_window_by(struct seqimg_writer *w, void *dst, uint64_t cap, uint64_t *n,
                           const struct seqimg_mover *mv, struct ig_errbuf *eb)
{
	return seqimg__write(w, dst, cap, n, &(struct seqimg__how){.mv = mv, .eb = eb});
}

void seqimg_reader_init(struct seqimg_reader *r, const struct mdesc *model,
                        enum mdesc_kv_format kv_format, const struct seqimg_parts *parts,
                        uint32_t max_pages, uint64_t max_state, uint64_t max_sampler)
{
	memset(r, 0, sizeof(*r));
	r->model = model;
	r->kv_format = kv_format;
	r->parts = *parts;
	r->max_pages = max_pages;
	r->max_state = max_state;
	r->max_sampler = max_sampler;
}

/* The header is complete: decode and check it. */
static int seqimg__check(struct seqimg_reader *r, struct ig_errbuf *eb)
{
	const unsigned char *b = r->header;
	struct seqimg_header *h = &r->h;
	uint64_t want_id = seqimg_model_id(r->model);
	uint32_t version = le_get32(b + 8);

	if (memcmp(b, "IGNISSEQ", 8))
		return ig_errf(eb, IG_E_INVAL, "not a sequence image (no IGNISSEQ magic)");
	if (version != SEQIMG_LAYOUT_VERSION || le_get32(b + 12) != SEQIMG_HEADER_BYTES)
		return ig_errf(eb, IG_E_INVAL,
		               "a stale sequence image: layout version %u; this worker reads %u",
		               version, SEQIMG_LAYOUT_VERSION);
	if (le_get64(b + 120) != XXH64(b, 120, 0))
		return ig_errf(eb, IG_E_INVAL,
		               "a corrupt sequence image: its header checksum fails");
	memcpy(h->model, b + 16, sizeof(h->model));
	h->model[sizeof(h->model) - 1] = '\0';
	h->model_id = le_get64(b + 64);
	h->kv_format = le_get32(b + 72);
	h->page_bytes = le_get32(b + 76);
	h->tokens = le_get64(b + 80);
	h->pages = le_get32(b + 88);
	h->last_token = le_get32(b + 92);
	h->state_bytes = le_get64(b + 96);
	h->sampler_bytes = le_get64(b + 104);
	h->image_bytes = le_get64(b + 112);
	if (h->model_id != want_id)
		return ig_errf(eb, IG_E_INVAL,
		               "a foreign sequence image: of model '%s' (identity %016" PRIx64
		               "); this worker runs '%s' (%016" PRIx64 ")",
		               h->model, h->model_id, r->model->name, want_id);
	if (h->kv_format != (uint32_t)r->kv_format ||
	    h->page_bytes != mdesc_page_bytes(r->model, r->kv_format))
		return ig_errf(eb, IG_E_INVAL,
		               "a sequence image in KV format %u with %u-byte pages; this worker "
		               "holds format %u with %" PRIu64 "-byte pages",
		               h->kv_format, h->page_bytes, (unsigned)r->kv_format,
		               mdesc_page_bytes(r->model, r->kv_format));
	/* the state exactly: it holds the linear states and, in a compact
	 * format, the residual window, whose size is the reader's
	 * configuration as much as the format is */
	if (h->state_bytes != r->max_state)
		return ig_errf(eb, IG_E_INVAL,
		               "a sequence image with %" PRIu64 " bytes of fixed-size state; this "
		               "worker's sequences hold %" PRIu64 " (their linear states, and in a "
		               "compact format the KV window of --model-kv-sinks and "
		               "--model-kv-window tokens: an image of another window is not read)",
		               h->state_bytes, r->max_state);
	if (h->pages > r->max_pages || h->sampler_bytes > r->max_sampler)
		return ig_errf(eb, IG_E_INVAL,
		               "a sequence image of %u pages, %" PRIu64 " state and %" PRIu64
		               " sampler bytes; room for %u, %" PRIu64 " and %" PRIu64,
		               h->pages, h->state_bytes, h->sampler_bytes, r->max_pages,
		               r->max_state, r->max_sampler);
	if (h->image_bytes != SEQIMG_HEADER_BYTES + (uint64_t)h->pages * h->page_bytes +
	                          h->state_bytes + h->sampler_bytes)
		return ig_errf(eb, IG_E_INVAL, "a sequence image whose size does not add up");
	return IG_E_OK;
}

static int seqimg__read(struct seqimg_reader *r, const void *src, uint64_t n,
                        struct seqimg__how *how, struct ig_errbuf *eb)
{
	const unsigned char *in = src;
	uint64_t done = 0;

	if (r->failed)
		return ig_errf(eb, IG_E_INVAL, "this sequence image was refused already");
	while (done < n) {
		uint64_t left, take;

		if (r->off < SEQIMG_HEADER_BYTES) {
			take = SEQIMG_HEADER_BYTES - r->off;
			take = take < n - done ? take : n - done;
			seqimg__copy(how, false, r->header + r->off, in + done, take);
			r->off += take;
			done += take;
			if (r->off == SEQIMG_HEADER_BYTES && seqimg__check(r, eb)) {
				r->failed = true;
				return IG_E_INVAL;
			}
			continue;
		}
		if (r->off >= r->h.image_bytes) {
			r->failed = true;
			return ig_errf(eb, IG_E_INVAL,
			               "%" PRIu64 " bytes past the end of a %" PRIu64 "-byte image",
			               n - done, r->h.image_bytes);
		}
		{
			unsigned char *dst = seqimg__at(&r->h, &r->parts, r->off, &left);

			take = left < n - done ? left : n - done;
			if (seqimg__copy(how, true, dst, in + done, take)) {
				r->failed = true; /* torn: take nothing more */
				return how->moved;
			}
		}
		r->off += take;
		done += take;
	}
	return IG_E_OK;
}

int seqimg_read_window(struct seqimg_reader *r, const void *src, uint64_t n, struct ig_errbuf *eb)
{
	return seqimg__read(r, src, n, &(struct seqimg__how){0}, eb);
}

int seqimg_read_window_sum(struct seqimg_reader *r, const void *src, uint64_t n, uint64_t *sum,
                           struct ig_errbuf *eb)
{
	struct kvcopy_stream st;
	int rc;

	kvcopy_stream_reset(&st);
	rc = seqimg__read(r, src, n, &(struct seqimg__how){.st = &st}, eb);
	*sum = kvcopy_stream_sum(&st);
	return rc;
}

int seqimg_read_windows_checked(struct seqimg_reader *r, const void *src, uint32_t k0,
                                uint32_t count, uint64_t window, uint64_t image_bytes,
                                const uint64_t *sums, char *why, size_t cap)
{
	return seqimg_read_windows_checked_by(r, src, k0, count, window, image_bytes, sums, NULL,
	                                      why, cap);
}

/* Without a mover each window is hashed as it is copied (one pass over
 * memory); with one, its bytes are summed where they are first, since the
 * mover's copies may land later (on a device's stream) and a window that
 * fails its sum then moves nothing. */
int seqimg_read_windows_checked_by(struct seqimg_reader *r, const void *src, uint32_t k0,
                                   uint32_t count, uint64_t window, uint64_t image_bytes,
                                   const uint64_t *sums, const struct seqimg_mover *mv, char *why,
                                   size_t cap)
{
	for (uint32_t i = 0; i < count; i++) {
		uint32_t k = k0 + i;
		uint64_t at = (uint64_t)k * window, sum = 0;
		uint64_t len = image_bytes - at < window ? image_bytes - at : window;
		const unsigned char *in = (const unsigned char *)src + (uint64_t)i * window;
		struct ig_errbuf eb = {0};
		struct kvcopy_stream st;
		struct seqimg__how how = {.mv = mv, .eb = &eb};
		int rc;

		if (at >= image_bytes) {
			snprintf(why, cap, "window %u starts past the image's %" PRIu64 " bytes", k,
			         image_bytes);
			return IG_E_KV_LOST;
		}
		if (mv && kvcopy_sum(in, len) != sums[k]) {
			snprintf(why, cap, "window %u does not match its checksum", k);
			return IG_E_KV_LOST;
		}
		if (!mv) {
			kvcopy_stream_reset(&st);
			how.st = &st;
		}
		rc = seqimg__read(r, in, len, &how, &eb);
		if (rc) {
			snprintf(why, cap, "%s", eb.msg);
			return how.moved ? how.moved : IG_E_KV_LOST;
		}
		if (!mv)
			sum = kvcopy_stream_sum(&st);
		if (!mv && sum != sums[k]) {
			snprintf(why, cap, "window %u does not match its checksum", k);
			return IG_E_KV_LOST;
		}
	}
	return IG_E_OK;
}
