/*
 * test_seqimg.c - sequence images: written from scattered pages and read back
 * into other scattered pages at every pairing of window sizes, byte-identical;
 * foreign, stale, corrupt, oversized and overlong images refused by name;
 * an image of one KV format refused by a reader of any other; windows
 * through a mover (a device's copies) a piece at a time, the same bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvram/kvcopy.h"
#include "model/seqimg.h"

#define PAGES 7

struct seq {
	void *pages[PAGES];
	unsigned char *state, *sampler;
};

static const struct mdesc *model(void)
{
	return mdesc_find("tiny-dense");
}

static uint64_t page_bytes(void)
{
	return mdesc_page_bytes(model(), MDESC_KV_COMPACT);
}

/* The largest page of any format, bf16's: room for a page of each. */
static uint64_t max_page_bytes(void)
{
	return mdesc_page_bytes(model(), MDESC_KV_BF16);
}

static void seq_alloc(struct seq *s, unsigned seed)
{
	for (int i = 0; i < PAGES; i++) {
		s->pages[i] = malloc(max_page_bytes());
		for (uint64_t b = 0; b < max_page_bytes(); b++)
			((unsigned char *)s->pages[i])[b] = (unsigned char)(seed * 31 + i * 7 + b);
	}
	s->state = malloc(1000);
	s->sampler = malloc(24);
	for (int b = 0; b < 1000; b++)
		s->state[b] = (unsigned char)(seed + b * 3);
	for (int b = 0; b < 24; b++)
		s->sampler[b] = (unsigned char)(seed ^ b);
}

static void seq_free(struct seq *s)
{
	for (int i = 0; i < PAGES; i++)
		free(s->pages[i]);
	free(s->state);
	free(s->sampler);
}

static struct seqimg_header header(uint32_t pages)
{
	struct seqimg_header h = {0};

	snprintf(h.model, sizeof(h.model), "%s", model()->name);
	h.model_id = seqimg_model_id(model());
	h.kv_format = MDESC_KV_COMPACT;
	h.page_bytes = (uint32_t)page_bytes();
	h.tokens = pages * 64u - 5u;
	h.pages = pages;
	h.last_token = 104;
	h.state_bytes = 1000;
	h.sampler_bytes = 24;
	return h;
}

/* The whole image of header `h` through windows of `wsz` bytes into a flat
 * buffer. */
static unsigned char *write_as(struct seq *s, struct seqimg_header h, uint64_t wsz, uint64_t *len)
{
	struct seqimg_parts parts = {s->pages, s->state, s->sampler};
	struct seqimg_writer w;
	unsigned char *img;
	uint64_t n, off = 0;

	seqimg_writer_init(&w, &h, &parts);
	img = malloc(w.h.image_bytes);
	do {
		seqimg_write_window(&w, img + off,
		                    wsz < w.h.image_bytes - off ? wsz : w.h.image_bytes - off, &n);
		off += n;
	} while (n);
	assert_true(seqimg_writer_done(&w));
	*len = off;
	return img;
}

static unsigned char *write_all(struct seq *s, uint32_t pages, uint64_t wsz, uint64_t *len)
{
	return write_as(s, header(pages), wsz, len);
}

static void test_windows_of_every_size(void **state)
{
	static const uint64_t sizes[] = {1, 7, 128, 4095, 4608, 100000, UINT32_MAX};
	struct seq a, b;

	(void)state;
	seq_alloc(&a, 1);
	for (size_t wi = 0; wi < sizeof(sizes) / sizeof(sizes[0]); wi++) {
		uint64_t len;
		unsigned char *img = write_all(&a, PAGES, sizes[wi], &len);

		for (size_t ri = 0; ri < sizeof(sizes) / sizeof(sizes[0]); ri++) {
			struct seqimg_parts parts;
			struct seqimg_reader r;
			struct ig_errbuf eb;
			uint64_t off = 0;

			seq_alloc(&b, 99);
			parts = (struct seqimg_parts){b.pages, b.state, b.sampler};
			seqimg_reader_init(&r, model(), MDESC_KV_COMPACT, &parts, PAGES, 1000, 24);
			while (off < len) {
				uint64_t n = sizes[ri] < len - off ? sizes[ri] : len - off;

				if (seqimg_read_window(&r, img + off, n, &eb))
					fail_msg("write %llu / read %llu: %s",
					         (unsigned long long)sizes[wi],
					         (unsigned long long)sizes[ri], eb.msg);
				off += n;
			}
			assert_true(seqimg_reader_done(&r));
			assert_int_equal(r.h.tokens, PAGES * 64u - 5u);
			assert_int_equal(r.h.last_token, 104);
			for (int p = 0; p < PAGES; p++)
				assert_memory_equal(a.pages[p], b.pages[p], page_bytes());
			assert_memory_equal(a.state, b.state, 1000);
			assert_memory_equal(a.sampler, b.sampler, 24);
			seq_free(&b);
		}
		free(img);
	}
	seq_free(&a);
}

/* The one-pass variants: a window's checksum taken while it is gathered (or
 * scattered) is kvcopy_sum of its bytes, at any window size; the bytes are
 * the same as without. */
static void test_window_sums(void **state)
{
	static const uint64_t sizes[] = {1, 4095, 4608, 100000, UINT32_MAX};
	struct seq a, b;

	(void)state;
	seq_alloc(&a, 1);
	for (size_t wi = 0; wi < sizeof(sizes) / sizeof(sizes[0]); wi++) {
		uint64_t len, off = 0, n, sum;
		unsigned char *img = write_all(&a, PAGES, sizes[wi], &len);
		unsigned char *img2 = malloc(len);
		struct seqimg_header h = header(PAGES);
		struct seqimg_parts parts = {a.pages, a.state, a.sampler};
		struct seqimg_writer w;
		struct seqimg_reader r;
		struct ig_errbuf eb;

		assert_non_null(img2);
		seqimg_writer_init(&w, &h, &parts);
		do {
			uint64_t cap = sizes[wi] < len - off ? sizes[wi] : len - off;

			seqimg_write_window_sum(&w, img2 + off, cap, &n, &sum);
			if (n)
				assert_int_equal(sum, kvcopy_sum(img2 + off, n));
			off += n;
		} while (n);
		assert_int_equal(off, len);
		assert_memory_equal(img, img2, len);
		seq_alloc(&b, 99);
		parts = (struct seqimg_parts){b.pages, b.state, b.sampler};
		seqimg_reader_init(&r, model(), MDESC_KV_COMPACT, &parts, PAGES, 1000, 24);
		for (off = 0; off < len; off += n) {
			n = sizes[wi] < len - off ? sizes[wi] : len - off;
			assert_int_equal(seqimg_read_window_sum(&r, img2 + off, n, &sum, &eb),
			                 IG_E_OK);
			assert_int_equal(sum, kvcopy_sum(img2 + off, n));
		}
		assert_true(seqimg_reader_done(&r));
		for (int p = 0; p < PAGES; p++)
			assert_memory_equal(a.pages[p], b.pages[p], page_bytes());
		seq_free(&b);
		free(img2);
		free(img);
	}
	seq_free(&a);
}

static void test_refusals(void **state)
{
	static const struct {
		const char *name;
		int at;       /* byte to change, -1: none */
		unsigned val; /* its new value */
		const char *model;
		uint32_t room;
		const char *say;
	} rows[] = {
	    {"no magic", 0, 'X', "tiny-dense", PAGES, "not a sequence image"},
	    {"a stale layout", 8, 2, "tiny-dense", PAGES, "layout version 2"},
	    {"a corrupt header", 80, 0xff, "tiny-dense", PAGES, "checksum"},
	    {"another model", -1, 0, "tiny-moe", PAGES, "foreign sequence image"},
	    {"more pages than room", -1, 0, "tiny-dense", PAGES - 1, "room for 6"},
	};
	struct seq a, b;
	uint64_t len;
	unsigned char *img;

	(void)state;
	seq_alloc(&a, 5);
	seq_alloc(&b, 6);
	img = write_all(&a, PAGES, 4096, &len);
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		unsigned char *copy = malloc(len);
		struct seqimg_parts parts = {b.pages, b.state, b.sampler};
		struct seqimg_reader r;
		struct ig_errbuf eb;

		memcpy(copy, img, len);
		if (rows[i].at >= 0)
			copy[rows[i].at] = (unsigned char)rows[i].val;
		seqimg_reader_init(&r, mdesc_find(rows[i].model), MDESC_KV_COMPACT, &parts,
		                   rows[i].room, 1000, 24);
		if (seqimg_read_window(&r, copy, len, &eb) != IG_E_INVAL ||
		    !strstr(eb.msg, rows[i].say))
			fail_msg("%s: not refused with '%s' (%s)", rows[i].name, rows[i].say,
			         eb.msg);
		/* a refused reader takes nothing more */
		assert_int_equal(seqimg_read_window(&r, copy, 1, &eb), IG_E_INVAL);
		assert_false(seqimg_reader_done(&r));
		free(copy);
	}
	/* bytes past the end */
	{
		struct seqimg_parts parts = {b.pages, b.state, b.sampler};
		struct seqimg_reader r;
		struct ig_errbuf eb;
		unsigned char *longer = calloc(1, len + 3);

		memcpy(longer, img, len);
		seqimg_reader_init(&r, model(), MDESC_KV_COMPACT, &parts, PAGES, 1000, 24);
		assert_int_equal(seqimg_read_window(&r, longer, len + 3, &eb), IG_E_INVAL);
		assert_non_null(strstr(eb.msg, "past the end"));
		free(longer);
	}
	/* an image of another state size: another KV window (issue 28), fewer
	 * or more bytes than this reader's sequences hold, is not read */
	for (int d = -1; d <= 1; d += 2) {
		struct seqimg_parts parts = {b.pages, b.state, b.sampler};
		struct seqimg_reader r;
		struct ig_errbuf eb;

		seqimg_reader_init(&r, model(), MDESC_KV_COMPACT, &parts, PAGES,
		                   (uint64_t)(1000 + 64 * d), 24);
		assert_int_equal(seqimg_read_window(&r, img, len, &eb), IG_E_INVAL);
		assert_non_null(strstr(eb.msg, "1000 bytes of fixed-size state"));
		assert_non_null(strstr(eb.msg, "--model-kv-window"));
		assert_false(seqimg_reader_done(&r));
	}
	/* a truncated image is simply not done */
	{
		struct seqimg_parts parts = {b.pages, b.state, b.sampler};
		struct seqimg_reader r;
		struct ig_errbuf eb;

		seqimg_reader_init(&r, model(), MDESC_KV_COMPACT, &parts, PAGES, 1000, 24);
		assert_int_equal(seqimg_read_window(&r, img, len - 1, &eb), IG_E_OK);
		assert_false(seqimg_reader_done(&r));
	}
	free(img);
	seq_free(&a);
	seq_free(&b);
}

/*
 * An image is read in its own KV format only (issue 28). Written in each
 * format (its pages that format's size), it is read back whole by a reader
 * of that format and refused, naming the format, by a reader of each other
 * one; and refused the same with its header's page bytes forged to the
 * reader's, so that the format's number alone refuses it. compact1 and
 * compact have the same page bytes: only the number tells them apart, and
 * compact's number names its rotation seed too (common/model.h).
 */
static void test_formats_refused(void **state)
{
	struct seq a, b;
	uint32_t refused = 0;

	(void)state;
	assert_int_equal(mdesc_page_bytes(model(), MDESC_KV_COMPACT1),
	                 mdesc_page_bytes(model(), MDESC_KV_COMPACT));
	seq_alloc(&a, 3);
	for (unsigned w = 1; w <= MDESC_KV_FORMAT_LAST; w++)
		for (unsigned rd = 1; rd <= MDESC_KV_FORMAT_LAST; rd++)
			for (int forged = 0; forged < 2 && (!forged || w != rd); forged++) {
				struct seqimg_header h = header(PAGES);
				struct seqimg_parts parts;
				struct seqimg_reader r;
				struct ig_errbuf eb = {0};
				unsigned char *img;
				uint64_t len;
				int rc;

				h.kv_format = w;
				h.page_bytes = (uint32_t)mdesc_page_bytes(model(), forged ? rd : w);
				img = write_as(&a, h, 4096, &len);
				seq_alloc(&b, 4);
				parts = (struct seqimg_parts){b.pages, b.state, b.sampler};
				seqimg_reader_init(&r, model(), rd, &parts, PAGES, 1000, 24);
				rc = seqimg_read_window(&r, img, len, &eb);
				if (w == rd) {
					if (rc)
						fail_msg("%s read as itself: %s",
						         mdesc_kv_format_name(w), eb.msg);
					assert_true(seqimg_reader_done(&r));
					for (int p = 0; p < PAGES; p++)
						assert_memory_equal(a.pages[p], b.pages[p],
						                    h.page_bytes);
				} else if (rc != IG_E_INVAL || !strstr(eb.msg, "KV format")) {
					fail_msg("a %s image%s read as %s: not refused by its "
					         "format (%s)",
					         mdesc_kv_format_name(w),
					         forged ? " with the reader's page bytes" : "",
					         mdesc_kv_format_name(rd), eb.msg);
				} else {
					refused++;
				}
				seq_free(&b);
				free(img);
			}
	/* every ordered pair of four formats, twice */
	assert_int_equal(refused, 2 * 4 * 3);
	seq_free(&a);
}

/* A mover that copies each piece and keeps its books: how many pieces,
 * their bytes, that each lies inside one part of `s` (a page, the state,
 * the sampler state), and a failure injected at its Nth call (0: none). */
struct mv_log {
	const struct seq *s;
	uint64_t pieces, bytes, fail_at;
};

static bool in_one_part(const struct seq *s, const void *p, uint64_t n)
{
	const unsigned char *c = p;

	for (int i = 0; i < PAGES; i++)
		if (c >= (unsigned char *)s->pages[i] &&
		    c + n <= (unsigned char *)s->pages[i] + page_bytes())
			return true;
	return (c >= s->state && c + n <= s->state + 1000) ||
	       (c >= s->sampler && c + n <= s->sampler + 24);
}

static int mv_copy(void *ctx, void *dst, const void *src, uint64_t n, struct ig_errbuf *eb)
{
	struct mv_log *l = ctx;

	if (++l->pieces == l->fail_at)
		return ig_errf(eb, IG_E_IO, "piece %llu: injected", (unsigned long long)l->pieces);
	if (!in_one_part(l->s, dst, n) && !in_one_part(l->s, src, n))
		fail_msg("a piece of %llu bytes crosses a part", (unsigned long long)n);
	memcpy(dst, src, (size_t)n);
	l->bytes += n;
	return IG_E_OK;
}

/* The window through a mover (what a backend whose parts are device memory
 * runs): the same bytes as seqimg_write_window and read_windows_checked at
 * every window size, one piece per part a window touches, the header not
 * among them; a window that fails its checksum moves nothing; the mover's
 * failure stops the window and is its code, not IG_E_KV_LOST. */
static void test_movers(void **state)
{
	static const uint64_t sizes[] = {1, 128, 4095, 4608, 100000, UINT32_MAX};
	struct seq a, b;

	(void)state;
	seq_alloc(&a, 1);
	for (size_t wi = 0; wi < sizeof(sizes) / sizeof(sizes[0]); wi++) {
		uint64_t len, off = 0, n, sums[40000], k = 0;
		unsigned char *img = write_all(&a, PAGES, sizes[wi], &len), *img2 = malloc(len);
		struct seqimg_header h = header(PAGES);
		struct mv_log lw = {.s = &a}, lr;
		struct seqimg_mover mw = {mv_copy, &lw}, mr;
		struct seqimg_writer w;
		struct seqimg_reader r;
		struct ig_errbuf eb = {0};
		char why[200];

		assert_non_null(img2);
		assert_true(len / sizes[wi] < 40000 || sizes[wi] < 128);
		seqimg_writer_init(&w, &h, &(struct seqimg_parts){a.pages, a.state, a.sampler});
		do {
			uint64_t cap = sizes[wi] < len - off ? sizes[wi] : len - off;

			assert_int_equal(seqimg_write_window_by(&w, img2 + off, cap, &n, &mw, &eb),
			                 IG_E_OK);
			if (n && k < 40000)
				sums[k++] = kvcopy_sum(img2 + off, n);
			off += n;
		} while (n);
		assert_int_equal(off, len);
		assert_memory_equal(img, img2, len);
		assert_int_equal(lw.bytes, len - SEQIMG_HEADER_BYTES);
		/* a piece per part and per window boundary inside one: at least one
		 * per part, at most one more per window */
		assert_true(lw.pieces >= PAGES + 2);
		assert_true(lw.pieces <= PAGES + 2 + (len + sizes[wi] - 1) / sizes[wi]);
		if (sizes[wi] < 128) { /* too many windows for the sums: writing was the test */
			free(img2);
			free(img);
			continue;
		}
		seq_alloc(&b, 99);
		lr = (struct mv_log){.s = &b};
		mr = (struct seqimg_mover){mv_copy, &lr};
		seqimg_reader_init(&r, model(), MDESC_KV_COMPACT,
		                   &(struct seqimg_parts){b.pages, b.state, b.sampler}, PAGES, 1000,
		                   24);
		assert_int_equal(seqimg_read_windows_checked_by(&r, img2, 0, (uint32_t)k, sizes[wi],
		                                                len, sums, &mr, why, sizeof(why)),
		                 IG_E_OK);
		assert_true(seqimg_reader_done(&r));
		assert_int_equal(lr.bytes, len - SEQIMG_HEADER_BYTES);
		for (int p = 0; p < PAGES; p++)
			assert_memory_equal(a.pages[p], b.pages[p], page_bytes());
		assert_memory_equal(a.state, b.state, 1000);
		assert_memory_equal(a.sampler, b.sampler, 24);
		/* the last window's sum wrong: named, and none of its bytes moved */
		if (k > 1) {
			seq_free(&b);
			seq_alloc(&b, 99);
			lr = (struct mv_log){.s = &b};
			seqimg_reader_init(&r, model(), MDESC_KV_COMPACT,
			                   &(struct seqimg_parts){b.pages, b.state, b.sampler},
			                   PAGES, 1000, 24);
			sums[k - 1] ^= 1;
			assert_int_equal(seqimg_read_windows_checked_by(&r, img2, 0, (uint32_t)k,
			                                                sizes[wi], len, sums, &mr,
			                                                why, sizeof(why)),
			                 IG_E_KV_LOST);
			assert_non_null(strstr(why, "does not match its checksum"));
			assert_int_equal(lr.bytes, (k - 1) * sizes[wi] - SEQIMG_HEADER_BYTES);
			sums[k - 1] ^= 1;
		}
		/* the mover fails at its second piece: its code and message */
		seq_free(&b);
		seq_alloc(&b, 99);
		lr = (struct mv_log){.s = &b, .fail_at = 2};
		seqimg_reader_init(&r, model(), MDESC_KV_COMPACT,
		                   &(struct seqimg_parts){b.pages, b.state, b.sampler}, PAGES, 1000,
		                   24);
		assert_int_equal(seqimg_read_windows_checked_by(&r, img2, 0, (uint32_t)k, sizes[wi],
		                                                len, sums, &mr, why, sizeof(why)),
		                 IG_E_IO);
		assert_non_null(strstr(why, "piece 2: injected"));
		assert_false(seqimg_reader_done(&r));
		seq_free(&b);
		/* and the writer's: its code, the window torn there */
		lw = (struct mv_log){.s = &a, .fail_at = 2};
		seqimg_writer_init(&w, &h, &(struct seqimg_parts){a.pages, a.state, a.sampler});
		assert_int_equal(seqimg_write_window_by(&w, img2, len, &n, &mw, &eb), IG_E_IO);
		assert_non_null(strstr(eb.msg, "piece 2: injected"));
		free(img2);
		free(img);
	}
	seq_free(&a);
}

static void test_model_identity(void **state)
{
	(void)state;
	assert_int_not_equal(seqimg_model_id(mdesc_find("tiny-dense")),
	                     seqimg_model_id(mdesc_find("tiny-moe")));
	assert_int_not_equal(seqimg_model_id(mdesc_find("27b")),
	                     seqimg_model_id(mdesc_find("flash-next")));
	assert_int_equal(seqimg_model_id(mdesc_find("27b")),
	                 seqimg_model_id(mdesc_find("qwen3.8-27b")));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_windows_of_every_size),
	    cmocka_unit_test(test_window_sums),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_formats_refused),
	    cmocka_unit_test(test_model_identity),
	    cmocka_unit_test(test_movers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
