/*
 * test_arena.c - KV-RAM (kvstore-daemon/arena.h): placement and policy as
 * scripts of operations with the invariants checked after every step;
 * checksums, retries and refusals; reopen byte for byte; a corrupted header
 * or index refused; and faults: a child process that holds the arena is
 * SIGKILLed between reserve and commit, after k of n commits for every k, at
 * random points of a seeded loop (IGNIS_TEST_SEED), and in the middle of
 * creating the object. Every acknowledgement the child made (sent through a
 * pipe after the call returned) must hold after the parent reopens.
 *
 * Each test has its own object /dev/shm/ignis-test-arena-<pid>-<tag> of a
 * few MiB, removed by its teardown.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "kvstore-daemon/arena.h"
#include "common/knobs.h"
#include "kvram/kvcopy.h"

#define DEFAULT_SEED 20240611u
#define BLK          ((uint64_t)ARENA_BLOCK)
#define MAXSEQ       64

/* The documented layout (arena.c), pinned here: on shared memory. */
#define HDR_VERSION  8
#define HDR_NBLOCKS  24
#define HDR_CHECK    72
#define SLOTDESC     128
#define HDR_SEQ_OFF  40
#define HDR_WIN_OFF  48
#define HDR_DATA_OFF 56
#define SREC_BYTES   96
#define SREC_STATE   0
#define SREC_SEQ     8
#define SREC_IMAGE   32
#define SREC_FIRST   48
#define SREC_WFIRST  44
#define SREC_CHECK   64
#define WREC_BYTES   16
#define WREC_TAG     8

/* ---- helpers ---- */

struct tctx {
	char name[96];
	char path[128];
};

static int setup(void **state)
{
	const char *tag = *state;
	struct tctx *t = calloc(1, sizeof(*t));

	if (!t)
		return -1;
	snprintf(t->name, sizeof(t->name), "ignis-test-arena-%ld-%s", (long)getpid(), tag);
	snprintf(t->path, sizeof(t->path), "/dev/shm/%s", t->name);
	(void)arena_unlink(t->name, NULL);
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct tctx *t = *state;

	(void)arena_unlink(t->name, NULL);
	free(t);
	return 0;
}

static uint64_t mix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The bytes of window k of seq: a pure function, so any process can check
 * them. */
static void pattern(uint8_t *dst, uint64_t len, uint64_t seq, uint32_t k)
{
	uint64_t s = seq * 0x100003ull + k;

	for (uint64_t i = 0; i < len; i += 8) {
		uint64_t v = mix(&s);

		memcpy(dst + i, &v, len - i < 8 ? len - i : 8);
	}
}

static bool pattern_ok(const uint8_t *src, uint64_t len, uint64_t seq, uint32_t k)
{
	uint64_t s = seq * 0x100003ull + k;

	for (uint64_t i = 0; i < len; i += 8) {
		uint64_t v = mix(&s);

		if (memcmp(src + i, &v, len - i < 8 ? len - i : 8) != 0)
			return false;
	}
	return true;
}

static struct arena_meta meta_of(uint64_t seq, uint32_t cls, uint64_t image, uint32_t window)
{
	return (struct arena_meta){.seq = seq,
	                           .model_id = 0xabcdef00u + seq,
	                           .kv_format = 3,
	                           .cls = cls,
	                           .image_bytes = image,
	                           .window_bytes = window,
	                           .windows = (uint32_t)((image + window - 1) / window)};
}

static uint64_t wlen(const struct arena_meta *m, uint32_t k)
{
	uint64_t left = m->image_bytes - (uint64_t)k * m->window_bytes;

	return left < m->window_bytes ? left : m->window_bytes;
}

/* Fill every window of a reserved extent with its pattern. */
static void fill(void *base, uint64_t offset, const struct arena_meta *m)
{
	for (uint32_t k = 0; k < m->windows; k++)
		pattern((uint8_t *)base + offset + (uint64_t)k * m->window_bytes, wlen(m, k),
		        m->seq, k);
}

static uint64_t sum_of(void *base, uint64_t offset, const struct arena_meta *m, uint32_t k)
{
	return kvcopy_sum((uint8_t *)base + offset + (uint64_t)k * m->window_bytes, wlen(m, k));
}

static int commit_k(struct arena *a, uint64_t offset, const struct arena_meta *m, uint32_t k,
                    struct ig_errbuf *eb)
{
	return arena_commit(a, m->seq, k, wlen(m, k), sum_of(arena_base(a), offset, m, k), eb);
}

/* Reserve, fill and commit the first `n` windows (all: m->windows). */
static uint64_t put(struct arena *a, const struct arena_meta *m, uint32_t n)
{
	struct ig_errbuf eb = {0};
	uint64_t off = 0;

	if (arena_reserve(a, m, &off, &eb))
		fail_msg("reserve seq %" PRIu64 ": %s", m->seq, eb.msg);
	fill(arena_base(a), off, m);
	for (uint32_t k = 0; k < n; k++)
		if (commit_k(a, off, m, k, &eb))
			fail_msg("commit seq %" PRIu64 " window %u: %s", m->seq, k, eb.msg);
	return off;
}

static struct arena *open_ok(const char *name, uint64_t bytes)
{
	struct ig_errbuf eb = {0};
	struct arena *a = NULL;

	if (arena_open(&a, name, bytes, &eb))
		fail_msg("arena_open(%s, %" PRIu64 "): %s", name, bytes, eb.msg);
	return a;
}

static int cmp_info(const void *x, const void *y)
{
	const struct arena_info *p = x, *q = y;

	return p->offset < q->offset ? -1 : p->offset > q->offset;
}

/*
 * The invariants, from outside: extents inside the data, block-aligned,
 * sized ceil(image / block), disjoint; used = their sum; free + used =
 * total; largest_free = the largest gap; the counts.
 */
static void check(struct arena *a)
{
	static struct arena_info l[MAXSEQ + 1];
	struct arena_stats st;
	uint64_t data_off, end, at, used = 0, largest = 0;
	uint32_t n, complete = 0;

	arena_stats(a, &st);
	n = arena_list(a, l, MAXSEQ + 1);
	assert_true(n <= MAXSEQ);
	data_off = arena_map_bytes(a) - st.bytes;
	end = arena_map_bytes(a);
	assert_int_equal(data_off % BLK, 0);
	qsort(l, n, sizeof(l[0]), cmp_info);
	at = data_off;
	for (uint32_t i = 0; i < n; i++) {
		if (l[i].offset < at || (l[i].offset - data_off) % BLK != 0 ||
		    l[i].reserved != (l[i].meta.image_bytes + BLK - 1) / BLK * BLK ||
		    l[i].offset + l[i].reserved > end)
			fail_msg("seq %" PRIu64 ": extent [%" PRIu64 ", +%" PRIu64
			         ") is misplaced or overlaps (previous end %" PRIu64 ")",
			         l[i].meta.seq, l[i].offset, l[i].reserved, at);
		if (l[i].offset - at > largest)
			largest = l[i].offset - at;
		at = l[i].offset + l[i].reserved;
		used += l[i].reserved;
		assert_true(l[i].committed <= l[i].meta.windows);
		assert_int_equal(l[i].complete, l[i].committed == l[i].meta.windows);
		complete += l[i].complete;
	}
	if (end - at > largest)
		largest = end - at;
	assert_int_equal(st.used_bytes, used);
	assert_int_equal(st.free_bytes + st.used_bytes, st.bytes);
	assert_int_equal(st.largest_free, largest);
	assert_int_equal(st.sequences, n);
	assert_int_equal(st.complete, complete);
}

/* Every committed window of seq: where get says, hashing to its checksum,
 * holding its pattern. Returns the committed count. */
static uint32_t verify(struct arena *a, uint64_t seq)
{
	static struct arena_window w[ARENA_MAX_WINDOWS];
	struct arena_info info;
	struct ig_errbuf eb = {0};
	const uint8_t *base = arena_base(a);
	uint32_t done = 0;

	if (arena_get(a, seq, &info, w, ARENA_MAX_WINDOWS, &eb))
		fail_msg("get seq %" PRIu64 ": %s", seq, eb.msg);
	for (uint32_t k = 0; k < info.meta.windows; k++) {
		assert_int_equal(w[k].offset, info.offset + (uint64_t)k * info.meta.window_bytes);
		if (!w[k].len) {
			assert_int_equal(w[k].sum, 0);
			continue;
		}
		done++;
		assert_int_equal(w[k].len, wlen(&info.meta, k));
		if (kvcopy_sum(base + w[k].offset, w[k].len) != w[k].sum)
			fail_msg("seq %" PRIu64 " window %u: bytes do not hash to the record", seq,
			         k);
		if (!pattern_ok(base + w[k].offset, w[k].len, seq, k))
			fail_msg("seq %" PRIu64 " window %u: bytes are not the ones written", seq,
			         k);
	}
	assert_int_equal(done, info.committed);
	return done;
}

static uint64_t data_off_of(struct arena *a)
{
	struct arena_stats st;

	arena_stats(a, &st);
	return arena_map_bytes(a) - st.bytes;
}

/* ---- placement and policy ---- */

enum op { RES, COMMIT_ALL, DROP, GET, VICTIM };

struct step {
	enum op op;
	uint64_t seq;
	uint64_t image; /* RES */
	uint32_t window;
	uint32_t cls;
	int err;
	int64_t block; /* RES: the block first fit gives; VICTIM: expected seq */
};

static void run_script(struct arena *a, const struct step *s, size_t n, const char *what)
{
	struct arena_meta metas[MAXSEQ];
	uint64_t offs[MAXSEQ];
	uint64_t data_off = data_off_of(a);

	memset(metas, 0, sizeof(metas));
	for (size_t i = 0; i < n; i++) {
		struct ig_errbuf eb = {0};
		struct arena_meta m;
		uint64_t off = 0;
		int err = 0;

		switch (s[i].op) {
		case RES:
			m = meta_of(s[i].seq, s[i].cls, s[i].image, s[i].window);
			err = arena_reserve(a, &m, &off, &eb);
			if (!err) {
				if (s[i].block >= 0 && off != data_off + (uint64_t)s[i].block * BLK)
					fail_msg("%s step %zu: seq %" PRIu64 " at block %" PRIu64
					         ", want %" PRId64,
					         what, i, s[i].seq, (off - data_off) / BLK,
					         s[i].block);
				fill(arena_base(a), off, &m);
				metas[s[i].seq] = m;
				offs[s[i].seq] = off;
			}
			break;
		case COMMIT_ALL:
			for (uint32_t k = 0; !err && k < metas[s[i].seq].windows; k++)
				err = commit_k(a, offs[s[i].seq], &metas[s[i].seq], k, &eb);
			break;
		case DROP:
			err = arena_drop(a, s[i].seq, &eb);
			break;
		case GET:
			err = arena_get(a, s[i].seq, NULL, NULL, 0, &eb);
			break;
		case VICTIM:
			if (arena_pick_victim_ex(a, s[i].seq, NULL, 0, NULL, NULL) !=
			    (uint64_t)s[i].block)
				fail_msg("%s step %zu: victim (except %" PRIu64 ") %" PRIu64
				         ", want %" PRId64,
				         what, i, s[i].seq,
				         arena_pick_victim_ex(a, s[i].seq, NULL, 0, NULL, NULL),
				         s[i].block);
			break;
		}
		if (err != s[i].err)
			fail_msg("%s step %zu (op %d seq %" PRIu64 "): %s, want %s (%s)", what, i,
			         (int)s[i].op, s[i].seq, ig_err_name(err), ig_err_name(s[i].err),
			         eb.msg);
		check(a);
	}
}

#define I ARENA_INTERACTIVE
#define A ARENA_AGENT

static void test_placement(void **state)
{
	struct tctx *t = *state;
	/* 16 blocks; first fit from the lowest address. */
	static const struct step s[] = {
	    {RES, 1, 4 * BLK, 65536, I, IG_E_OK, 0},
	    {RES, 2, 8 * BLK - 1, 65536, I, IG_E_OK, 4},
	    {RES, 3, 4 * BLK + 1, 65536, I, IG_E_NOSPACE, -1}, /* 4 free */
	    {RES, 3, 4 * BLK, 65536, I, IG_E_OK, 12},
	    {RES, 4, 1, 65536, I, IG_E_NOSPACE, -1}, /* full */
	    {RES, 2, 1, 1, I, IG_E_BUSY, -1},
	    {DROP, 1, 0, 0, 0, IG_E_OK, 0},
	    {DROP, 1, 0, 0, 0, IG_E_NOTFOUND, 0},
	    {RES, 5, 3 * BLK, 100000, I, IG_E_OK, 0},
	    {RES, 6, 2 * BLK, 65536, I, IG_E_NOSPACE, -1}, /* 1 block free */
	    {RES, 6, 1, 1, I, IG_E_OK, 3},
	    {DROP, 2, 0, 0, 0, IG_E_OK, 0},
	    {RES, 7, BLK + 1, 30000, A, IG_E_OK, 4},
	    {RES, 8, 6 * BLK + 1, 65536, I, IG_E_NOSPACE, -1}, /* 6 at 6..11 */
	    {RES, 8, 6 * BLK, 4096, I, IG_E_OK, 6},
	    {COMMIT_ALL, 7, 0, 0, 0, IG_E_OK, 0},
	    {COMMIT_ALL, 8, 0, 0, 0, IG_E_OK, 0},
	    {DROP, 5, 0, 0, 0, IG_E_OK, 0},
	    {DROP, 3, 0, 0, 0, IG_E_OK, 0},
	    {RES, 9, 4 * BLK, 65536, I, IG_E_OK, 12},
	    {RES, 10, 3 * BLK, 65536, I, IG_E_OK, 0},
	    {DROP, 8, 0, 0, 0, IG_E_OK, 0},
	    {DROP, 6, 0, 0, 0, IG_E_OK, 0},
	    {RES, 11, 9 * BLK, 65536, I, IG_E_NOSPACE, -1}, /* 1 + 6 free apart */
	    {RES, 11, 7 * BLK, 65536, I, IG_E_NOSPACE, -1},
	    {RES, 11, 6 * BLK, 65536, I, IG_E_OK, 6},
	    {RES, 12, 1, 1, I, IG_E_OK, 3},
	    {DROP, 7, 0, 0, 0, IG_E_OK, 0},
	    {DROP, 9, 0, 0, 0, IG_E_OK, 0},
	    {DROP, 10, 0, 0, 0, IG_E_OK, 0},
	    {DROP, 11, 0, 0, 0, IG_E_OK, 0},
	    {DROP, 12, 0, 0, 0, IG_E_OK, 0},
	    {RES, 13, 16 * BLK, 65536, I, IG_E_OK, 0},
	    {DROP, 13, 0, 0, 0, IG_E_OK, 0},
	};
	struct arena *a = open_ok(t->name, 16 * BLK);
	struct arena_stats st;

	run_script(a, s, sizeof(s) / sizeof(s[0]), "placement");
	arena_stats(a, &st);
	assert_int_equal(st.bytes, 16 * BLK);
	assert_int_equal(st.free_bytes, st.bytes);
	assert_int_equal(st.largest_free, st.bytes);
	assert_int_equal(st.reserves, 12);
	assert_int_equal(st.drops, 12);
	assert_int_equal(st.refusals_full, 6);
	assert_int_equal(st.commits, 3 + 96);
	arena_close(a);
}

static void test_victims(void **state)
{
	struct tctx *t = *state;
	/* VICTIM: .seq is `except`, .block the expected victim. */
	static const struct step s[] = {
	    {VICTIM, 0, 0, 0, 0, IG_E_OK, 0}, /* none held */
	    {RES, 1, BLK, 65536, I, IG_E_OK, 0},
	    {RES, 2, BLK, 65536, A, IG_E_OK, 1},
	    {RES, 3, BLK, 65536, A, IG_E_OK, 2}, /* stays incomplete */
	    {RES, 4, BLK, 65536, I, IG_E_OK, 3},
	    {RES, 5, BLK, 65536, A, IG_E_OK, 4},
	    {VICTIM, 0, 0, 0, 0, IG_E_OK, 0}, /* none complete */
	    {COMMIT_ALL, 1, 0, 0, 0, IG_E_OK, 0},
	    {VICTIM, 0, 0, 0, 0, IG_E_OK, 1},
	    {VICTIM, 1, 0, 0, 0, IG_E_OK, 0}, /* the only one is excepted */
	    {COMMIT_ALL, 4, 0, 0, 0, IG_E_OK, 0},
	    {COMMIT_ALL, 2, 0, 0, 0, IG_E_OK, 0},
	    {COMMIT_ALL, 5, 0, 0, 0, IG_E_OK, 0},
	    /* agents first, least recently used first */
	    {VICTIM, 0, 0, 0, 0, IG_E_OK, 2},
	    {GET, 2, 0, 0, 0, IG_E_OK, 0},
	    {VICTIM, 0, 0, 0, 0, IG_E_OK, 5},
	    {VICTIM, 5, 0, 0, 0, IG_E_OK, 2},
	    {DROP, 5, 0, 0, 0, IG_E_OK, 0},
	    {VICTIM, 0, 0, 0, 0, IG_E_OK, 2},
	    {VICTIM, 2, 0, 0, 0, IG_E_OK, 1}, /* then interactive, LRU */
	    {DROP, 2, 0, 0, 0, IG_E_OK, 0},
	    {VICTIM, 0, 0, 0, 0, IG_E_OK, 1},
	    {GET, 1, 0, 0, 0, IG_E_OK, 0},
	    {VICTIM, 0, 0, 0, 0, IG_E_OK, 4},
	    {VICTIM, 4, 0, 0, 0, IG_E_OK, 1},
	    {GET, 9, 0, 0, 0, IG_E_NOTFOUND, 0},
	    {DROP, 4, 0, 0, 0, IG_E_OK, 0},
	    {DROP, 1, 0, 0, 0, IG_E_OK, 0},
	    {VICTIM, 0, 0, 0, 0, IG_E_OK, 0}, /* 3 is incomplete */
	    {COMMIT_ALL, 3, 0, 0, 0, IG_E_OK, 0},
	    {VICTIM, 0, 0, 0, 0, IG_E_OK, 3},
	};
	struct arena *a = open_ok(t->name, 8 * BLK);

	run_script(a, s, sizeof(s) / sizeof(s[0]), "victims");
	arena_close(a);
}

/* Would an extent fit once every complete sequence were given up? What a
 * give-up for room asks first, so that nothing is given up for room it
 * cannot make: sequences being written stay, and so does their place. */
static void test_fits_if_given_up(void **state)
{
	struct tctx *t = *state;
	static const struct step s[] = {
	    {RES, 1, 2 * BLK, 65536, A, IG_E_OK, 0}, {COMMIT_ALL, 1, 0, 0, 0, IG_E_OK, 0},
	    {RES, 2, BLK, 65536, A, IG_E_OK, 2}, /* stays incomplete */
	    {RES, 3, 2 * BLK, 65536, I, IG_E_OK, 3}, {COMMIT_ALL, 3, 0, 0, 0, IG_E_OK, 0},
	    {RES, 4, 3 * BLK, 65536, A, IG_E_OK, 5}, /* stays incomplete */
	};
	struct arena *a = open_ok(t->name, 8 * BLK);
	struct ig_errbuf eb = {0};

	run_script(a, s, sizeof(s) / sizeof(s[0]), "fits");
	assert_true(arena_fits_if_given_up(a, 1));
	assert_true(arena_fits_if_given_up(a, 2 * BLK));
	assert_false(arena_fits_if_given_up(a, 2 * BLK + 1)); /* 0-1 and 3-4, 2 between */
	assert_false(arena_fits_if_given_up(a, 9 * BLK));
	check(a); /* a question: nothing given up */
	assert_int_equal(arena_get(a, 1, NULL, NULL, 0, &eb), IG_E_OK);
	assert_int_equal(arena_get(a, 3, NULL, NULL, 0, &eb), IG_E_OK);
	assert_int_equal(arena_drop(a, 2, &eb), IG_E_OK);
	assert_true(arena_fits_if_given_up(a, 5 * BLK));
	assert_false(arena_fits_if_given_up(a, 6 * BLK));
	assert_int_equal(arena_drop(a, 4, &eb), IG_E_OK);
	assert_true(arena_fits_if_given_up(a, 8 * BLK));
	check(a);
	arena_close(a);
}

/* The daemon's order: an interactive sequence the caller ranks as an agent
 * (its TTL ran out) goes before a newer agent; skipped ones are passed over. */
static bool rank_seq1_as_agent(void *ctx, uint64_t seq)
{
	(void)ctx;
	return seq == 1;
}

static void test_victims_ex(void **state)
{
	struct tctx *t = *state;
	static const struct step s[] = {
	    {RES, 1, BLK, 65536, I, IG_E_OK, 0},  {RES, 2, BLK, 65536, A, IG_E_OK, 1},
	    {COMMIT_ALL, 1, 0, 0, 0, IG_E_OK, 0}, {COMMIT_ALL, 2, 0, 0, 0, IG_E_OK, 0},
	    {VICTIM, 0, 0, 0, 0, IG_E_OK, 2}, /* the agent, as arena_pick_victim_ex with nothing
	                                         skipped */
	};
	struct arena *a = open_ok(t->name, 8 * BLK);
	const uint64_t skip1[] = {1}, skip12[] = {1, 2};

	run_script(a, s, sizeof(s) / sizeof(s[0]), "victims_ex");
	assert_int_equal(arena_pick_victim_ex(a, 0, NULL, 0, NULL, NULL), 2);
	/* 1 now ranks as an agent and was used earlier */
	assert_int_equal(arena_pick_victim_ex(a, 0, NULL, 0, rank_seq1_as_agent, NULL), 1);
	assert_int_equal(arena_pick_victim_ex(a, 0, skip1, 1, rank_seq1_as_agent, NULL), 2);
	assert_int_equal(arena_pick_victim_ex(a, 2, skip1, 1, rank_seq1_as_agent, NULL), 0);
	assert_int_equal(arena_pick_victim_ex(a, 0, skip12, 2, NULL, NULL), 0);
	arena_close(a);
}

static void test_full_figures(void **state)
{
	struct tctx *t = *state;
	struct arena *a = open_ok(t->name, 4 * BLK + 1000); /* rounds down to 4 blocks */
	struct arena_meta m = meta_of(1, I, 5 * BLK, 65536);
	struct ig_errbuf eb = {0};
	struct arena_stats st;
	uint64_t off = 0;

	assert_int_equal(arena_reserve(a, &m, &off, &eb), IG_E_NOSPACE);
	assert_non_null(strstr(eb.msg, "327680")); /* needs */
	assert_non_null(strstr(eb.msg, "262144")); /* largest free, and the total */
	m = meta_of(2, I, BLK, 65536);
	put(a, &m, 1);
	m = meta_of(3, I, 3 * BLK + 1, 65536);
	assert_int_equal(arena_reserve(a, &m, &off, &eb), IG_E_NOSPACE);
	assert_non_null(strstr(eb.msg, "262144 bytes (4 blocks)"));
	assert_non_null(
	    strstr(eb.msg, "largest free extent is 196608 bytes, 196608 free of 262144"));
	arena_stats(a, &st);
	assert_int_equal(st.refusals_full, 2);
	assert_int_equal(st.sequences, 1);
	check(a);
	arena_close(a);
}

/* Windows smaller than a block can use the window records up first: that
 * is "tier full" too, naming the index. */
static void test_index_full(void **state)
{
	static struct arena_window w[ARENA_MAX_WINDOWS];
	struct tctx *t = *state;
	struct arena *a = open_ok(t->name, 64 * BLK); /* 64 + 4096 window records */
	struct arena_meta big = meta_of(1, A, BLK, 16), m;
	struct ig_errbuf eb = {0};
	struct arena_info info;
	uint64_t off;

	assert_int_equal(big.windows, ARENA_MAX_WINDOWS);
	put(a, &big, big.windows);
	assert_int_equal(verify(a, 1), ARENA_MAX_WINDOWS);
	assert_int_equal(arena_get(a, 1, &info, w, 10, &eb), IG_E_OK);
	assert_true(info.complete);
	m = meta_of(2, A, BLK, 16);
	assert_int_equal(arena_reserve(a, &m, &off, &eb), IG_E_NOSPACE);
	assert_non_null(strstr(eb.msg, "window records"));
	m = meta_of(3, A, 2 * BLK, 65536); /* 2 of the 64 left */
	put(a, &m, 2);
	for (uint64_t s = 4; s < 4 + 61; s++) {
		m = meta_of(s, A, BLK, 65536);
		put(a, &m, 1);
	}
	m = meta_of(99, A, 1, 1);
	assert_int_equal(arena_reserve(a, &m, &off, &eb), IG_E_NOSPACE);
	check(a);
	arena_close(a);
}

static void test_refusals(void **state)
{
	static const struct {
		struct arena_meta m;
		int err;
	} rows[] = {
	    {{0, 1, 0, I, 100, 100, 1}, IG_E_INVAL},   /* seq 0 */
	    {{1, 1, 0, 2, 100, 100, 1}, IG_E_INVAL},   /* class */
	    {{1, 1, 0, I, 0, 100, 0}, IG_E_INVAL},     /* no image */
	    {{1, 1, 0, I, 100, 0, 1}, IG_E_INVAL},     /* no window */
	    {{1, 1, 0, I, 100, 30, 3}, IG_E_INVAL},    /* windows: 4 */
	    {{1, 1, 0, I, 100, 30, 5}, IG_E_INVAL},    /* windows: 4 */
	    {{1, 1, 0, I, 4097, 1, 4097}, IG_E_INVAL}, /* > MAX */
	    {{1, 1, 0, I, 100, 30, 4}, IG_E_OK},
	    {{1, 1, 0, I, 100, 30, 4}, IG_E_BUSY}, /* held */
	    {{2, 1, 0, A, 4096, 1, 4096}, IG_E_OK},
	    {{3, 1, 0, A, 16 * BLK, 1u << 20, 1}, IG_E_NOSPACE}, /* window > image is fine */
	    {{3, 1, 0, A, 14 * BLK - 5000, 1u << 20, 1}, IG_E_OK},
	};
	struct tctx *t = *state;
	struct arena *a = open_ok(t->name, 16 * BLK);
	struct ig_errbuf eb = {0};
	uint64_t off;

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		int err = arena_reserve(a, &rows[i].m, &off, &eb);

		if (err != rows[i].err)
			fail_msg("row %zu: %s, want %s (%s)", i, ig_err_name(err),
			         ig_err_name(rows[i].err), eb.msg);
		check(a);
	}
	/* commit: unknown seq, window past the end, wrong length */
	assert_int_equal(arena_commit(a, 77, 0, 30, 0, &eb), IG_E_NOTFOUND);
	assert_int_equal(arena_commit(a, 1, 4, 30, 0, &eb), IG_E_INVAL);
	assert_int_equal(arena_commit(a, 1, 3, 30, 0, &eb), IG_E_INVAL); /* the last is 10 */
	assert_non_null(strstr(eb.msg, "is 10 bytes, not 30"));
	assert_int_equal(arena_drop(a, 77, &eb), IG_E_NOTFOUND);
	assert_int_equal(arena_get(a, 77, NULL, NULL, 0, &eb), IG_E_NOTFOUND);
	arena_close(a);
}

static void test_commit_checksum(void **state)
{
	static struct arena_window w[8];
	static uint8_t out[BLK];
	struct tctx *t = *state;
	struct arena *a = open_ok(t->name, 16 * BLK);
	struct arena_meta m = meta_of(5, I, 2 * BLK + 100, 65536); /* 3 windows */
	struct ig_errbuf eb = {0};
	struct arena_map cm = {0};
	struct arena_info info;
	struct arena_stats st;
	uint64_t off = put(a, &m, 0), good = sum_of(arena_base(a), off, &m, 0), bad = good ^ 1;
	uint64_t sums[8], got = 0;

	/* The daemon records the writer's checksum without reading the bytes
	 * (ADR 0015): a wrong one is committed, and the reader's check while
	 * copying out is what refuses the bytes. */
	assert_int_equal(arena_commit(a, 5, 0, BLK, bad, &eb), IG_E_OK);
	assert_int_equal(arena_map_open(&cm, t->name, &eb), IG_E_OK);
	/* the sums the daemon hands the reader (kv_seq's sums) */
	assert_int_equal(arena_get(a, 5, &info, w, 8, &eb), IG_E_OK);
	assert_int_equal(info.meta.windows, 3);
	assert_int_equal(w[0].sum, bad);
	assert_int_equal(w[1].sum, 0); /* not committed */
	assert_int_equal(w[2].sum, 0);
	assert_false(kvcopy_check(out, (uint8_t *)cm.base + off, BLK, w[0].sum, &got));
	assert_int_equal(got, good);
	assert_true(memcmp(out, (uint8_t *)cm.base + off, BLK) == 0); /* copied all the same */
	assert_int_equal(arena_drop(a, 5, &eb), IG_E_OK);
	assert_int_equal(arena_get(a, 5, &info, w, 8, &eb), IG_E_NOTFOUND);
	off = put(a, &m, 0);
	assert_int_equal(arena_get(a, 5, &info, w, 8, &eb), IG_E_OK);
	assert_int_equal(info.committed, 0);
	assert_int_equal(w[0].len, 0);
	assert_int_equal(w[0].sum, 0);
	arena_stats(a, &st);
	assert_int_equal(st.commits, 1);

	assert_int_equal(arena_commit(a, 5, 0, BLK, good, &eb), IG_E_OK);
	assert_int_equal(arena_commit(a, 5, 0, BLK, good, &eb), IG_E_OK); /* a retry */
	arena_stats(a, &st);
	assert_int_equal(st.commits, 2);
	assert_int_equal(arena_commit(a, 5, 0, BLK, bad, &eb), IG_E_INVAL); /* committed */
	assert_non_null(strstr(eb.msg, "is committed with"));
	/* the window 2 (100 bytes) out of order, then window 1 */
	assert_int_equal(commit_k(a, off, &m, 2, &eb), IG_E_OK);
	assert_int_equal(arena_get(a, 5, &info, w, 8, &eb), IG_E_OK);
	assert_int_equal(info.committed, 2);
	assert_false(info.complete);
	assert_int_equal(w[1].len, 0);
	assert_int_equal(w[2].len, 100);
	assert_int_equal(arena_pick_victim_ex(a, 0, NULL, 0, NULL, NULL), 0);
	assert_int_equal(commit_k(a, off, &m, 1, &eb), IG_E_OK);
	assert_int_equal(verify(a, 5), 3);
	assert_int_equal(arena_pick_victim_ex(a, 0, NULL, 0, NULL, NULL), 5);
	/* every recorded checksum, and each window passes through the mapping */
	assert_int_equal(arena_get(a, 5, &info, w, 8, &eb), IG_E_OK);
	for (uint32_t k = 0; k < 3; k++)
		sums[k] = w[k].sum;
	for (uint32_t k = 0; k < 3; k++)
		assert_true(kvcopy_check(out, (uint8_t *)cm.base + off + (uint64_t)k * BLK,
		                         wlen(&m, k), sums[k], NULL));
	/* bytes changed after commit: the reader refuses them */
	((uint8_t *)arena_base(a))[off + BLK + 7] ^= 0x40;
	assert_false(kvcopy_check(out, (uint8_t *)cm.base + off + BLK, BLK, sums[1], NULL));
	((uint8_t *)arena_base(a))[off + BLK + 7] ^= 0x40;
	assert_int_equal(verify(a, 5), 3);
	/* get with a small cap writes only cap windows */
	memset(w, 0xee, sizeof(w));
	assert_int_equal(arena_get(a, 5, &info, w, 1, &eb), IG_E_OK);
	assert_int_equal(w[0].len, BLK);
	assert_int_equal(w[1].len, 0xeeeeeeeeeeeeeeeeull);
	arena_map_close(&cm);
	check(a);
	arena_close(a);
}

/* The worker's mapping sees and writes the same bytes; the index is not
 * its to write (it only reads it). */
static void test_map_client(void **state)
{
	struct tctx *t = *state;
	struct arena_map cm = {0}, none;
	struct ig_errbuf eb = {0};
	struct arena *a;
	struct arena_meta m = meta_of(9, A, 3 * 4096, 4096);
	uint64_t off;

	assert_int_equal(arena_map_open(&none, t->name, &eb), IG_E_NOTFOUND);
	assert_null(none.base);
	arena_map_close(&none);
	arena_map_close(&none);
	a = open_ok(t->name, 8 * BLK);
	assert_int_equal(arena_map_open(&cm, t->name, &eb), IG_E_OK);
	assert_int_equal(cm.bytes, arena_map_bytes(a));
	assert_int_equal((uintptr_t)cm.base % 4096, 0);
	assert_int_equal(arena_reserve(a, &m, &off, &eb), IG_E_OK);
	fill(cm.base, off, &m); /* the worker writes */
	for (uint32_t k = 0; k < 3; k++)
		assert_int_equal(commit_k(a, off, &m, k, &eb), IG_E_OK);
	assert_int_equal(verify(a, 9), 3);
	assert_memory_equal((uint8_t *)cm.base + off, (uint8_t *)arena_base(a) + off, 3 * 4096);
	assert_memory_equal(cm.base, arena_base(a), 256); /* the same header */
	arena_map_close(&cm);
	arena_map_close(&cm);
	arena_close(a);
	assert_int_equal(arena_map_open(&cm, "bad/name", &eb), IG_E_INVAL);
}

struct snap {
	struct arena_info l[MAXSEQ];
	uint32_t n;
};

static void snap_of(struct arena *a, struct snap *s)
{
	s->n = arena_list(a, s->l, MAXSEQ);
	qsort(s->l, s->n, sizeof(s->l[0]), cmp_info);
}

static void test_reopen(void **state)
{
	struct tctx *t = *state;
	struct arena *a = open_ok(t->name, 32 * BLK);
	struct arena_meta m1 = meta_of(1, A, 3 * BLK + 17, 50000), m2 = meta_of(2, I, 5000, 1000),
	                  m3 = meta_of(3, I, 2 * BLK, 65536), m4 = meta_of(4, A, BLK, 4096);
	struct ig_errbuf eb = {0};
	struct arena_stats st;
	static struct snap before, after;
	uint64_t off2, victim;
	uint8_t *copy;
	size_t map;

	put(a, &m1, m1.windows);
	off2 = put(a, &m2, 2); /* partial: kept */
	put(a, &m3, 0);        /* none committed: reclaimed */
	put(a, &m4, m4.windows);
	assert_int_equal(arena_get(a, 1, NULL, NULL, 0, &eb), IG_E_OK); /* 4 is LRU now */
	victim = arena_pick_victim_ex(a, 0, NULL, 0, NULL, NULL);
	assert_int_equal(victim, 4);
	arena_drop(a, 3, &eb);
	put(a, &m3, 0); /* again: a fresh generation in the same place */
	snap_of(a, &before);
	map = arena_map_bytes(a);
	copy = malloc(map);
	assert_non_null(copy);
	memcpy(copy, arena_base(a), map);
	arena_close(a);
	arena_close(NULL);

	a = open_ok(t->name, 32 * BLK);
	arena_stats(a, &st);
	assert_int_equal(st.recovered_sequences, 3);
	assert_int_equal(st.reclaimed_sequences, 1);
	assert_int_equal(st.reserves, 0);
	snap_of(a, &after);
	assert_int_equal(after.n, 3);
	for (uint32_t i = 0, j = 0; i < before.n; i++) {
		if (before.l[i].meta.seq == 3)
			continue;
		assert_memory_equal(&before.l[i], &after.l[j], sizeof(after.l[j]));
		j++;
	}
	/* every data byte of the kept extents, byte for byte */
	for (uint32_t i = 0; i < after.n; i++)
		assert_memory_equal((uint8_t *)arena_base(a) + after.l[i].offset,
		                    copy + after.l[i].offset, after.l[i].reserved);
	assert_int_equal(verify(a, 1), m1.windows);
	assert_int_equal(verify(a, 2), 2);
	assert_int_equal(verify(a, 4), m4.windows);
	assert_int_equal(arena_get(a, 3, NULL, NULL, 0, &eb), IG_E_NOTFOUND);
	/* LRU survived: the gets above used 1, 2, 4 in that order */
	assert_int_equal(arena_pick_victim_ex(a, 0, NULL, 0, NULL, NULL), 1);
	/* the partial one can be finished after the restart */
	for (uint32_t k = 2; k < m2.windows; k++)
		assert_int_equal(commit_k(a, off2, &m2, k, &eb), IG_E_OK);
	assert_int_equal(verify(a, 2), m2.windows);
	check(a);
	/* new reservations do not collide with kept ones */
	m4 = meta_of(5, A, 20 * BLK, 65536);
	put(a, &m4, 20);
	check(a);
	arena_close(a);
	a = open_ok(t->name, 32 * BLK);
	arena_stats(a, &st);
	assert_int_equal(st.recovered_sequences, 4);
	assert_int_equal(st.reclaimed_sequences, 0);
	assert_int_equal(verify(a, 5), 20);
	check(a);
	arena_close(a);
	free(copy);
}

/* Change the object behind a closed arena. */
static uint8_t *poke_map(const char *path, size_t *len)
{
	int fd = open(path, O_RDWR);
	struct stat st;
	void *p;

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED);
	close(fd);
	*len = (size_t)st.st_size;
	return p;
}

static void expect_refused(const char *name, uint64_t bytes, int want, const char *needle)
{
	struct ig_errbuf eb = {0};
	struct arena *a = (struct arena *)1;
	int err = arena_open(&a, name, bytes, &eb);

	if (err != want)
		fail_msg("open: %s, want %s (%s)", ig_err_name(err), ig_err_name(want), eb.msg);
	assert_null(a);
	if (needle && !strstr(eb.msg, needle))
		fail_msg("open refused with \"%s\", which does not say \"%s\"", eb.msg, needle);
}

static void rec_check(uint8_t *r)
{
	uint64_t c = XXH64(r + 4, SREC_CHECK - 4, 0);

	memcpy(r + SREC_CHECK, &c, 8);
}

/* ---- retained host slots ---- */

#define SLOT_BYTES 100000u /* two blocks of stride */

static struct arena_slot_meta smeta(uint64_t key, uint32_t kind, uint32_t cls, uint64_t bytes)
{
	return (struct arena_slot_meta){.key = key,
	                                .model_id = 7,
	                                .image_bytes = bytes,
	                                .kind = kind,
	                                .cls = cls,
	                                .tokens = (uint32_t)(key * 10)};
}

static struct arena *open_slots_ok(const char *name, uint64_t bytes, uint32_t slots)
{
	struct ig_errbuf eb = {0};
	struct arena *a = NULL;

	if (arena_open_slots(&a, name, bytes, slots, SLOT_BYTES, &eb))
		fail_msg("open %s with %u slots: %s", name, slots, eb.msg);
	return a;
}

/* Capture, fill with the key's pattern, publish; the slot index. */
static uint32_t slot_put(struct arena *a, uint64_t key, uint32_t kind, uint32_t cls,
                         uint64_t *gave_up_key)
{
	struct arena_slot_meta m = smeta(key, kind, cls, SLOT_BYTES - key);
	struct arena_slot_info in, up;
	struct ig_errbuf eb = {0};
	uint8_t *p;

	if (arena_slot_capture(a, &m, NULL, NULL, &in, &up, &eb))
		fail_msg("capture key %" PRIu64 ": %s", key, eb.msg);
	assert_int_equal(in.state, ARENA_SLOT_WRITING);
	p = (uint8_t *)arena_base(a) + in.offset;
	pattern(p, m.image_bytes, key, 99);
	if (arena_slot_publish(a, in.slot, in.gen, kvcopy_sum(p, m.image_bytes), &eb))
		fail_msg("publish key %" PRIu64 ": %s", key, eb.msg);
	if (gave_up_key)
		*gave_up_key = up.state == ARENA_SLOT_HELD ? up.meta.key : 0;
	return in.slot;
}

/* The slot of `key` is held, its bytes are its pattern and match its sum. */
static void slot_same(struct arena *a, uint64_t key)
{
	static uint8_t want[SLOT_BYTES];
	struct arena_slot_info in;
	struct ig_errbuf eb = {0};
	const uint8_t *p;

	if (arena_slot_claim(a, key, 7, 0, &in, &eb))
		fail_msg("claim key %" PRIu64 ": %s", key, eb.msg);
	p = (const uint8_t *)arena_base(a) + in.offset;
	assert_int_equal(in.meta.image_bytes, SLOT_BYTES - key);
	assert_int_equal(in.meta.tokens, key * 10);
	pattern(want, in.meta.image_bytes, key, 99);
	assert_memory_equal(p, want, in.meta.image_bytes);
	assert_int_equal(kvcopy_sum(p, in.meta.image_bytes), in.sum);
}

/* The slots sit in one block before the sequences' data, block-aligned,
 * and --reuse-kv-ram-bytes stays the sequences' room; the life of a slot:
 * capture, publish, claim (also through a client's mapping), drop. */
static void test_slots_basic(void **state)
{
	static uint8_t out[SLOT_BYTES];
	struct tctx *t = *state;
	struct arena *a = open_slots_ok(t->name, 16 * BLK, 3);
	struct arena_meta m = meta_of(5, I, 16 * BLK, 65536); /* the whole data room */
	struct arena_slot_meta sm = smeta(1, ARENA_CHECKPOINT, A, 5000);
	struct arena_slot_info in, in2, up, seen, list[8];
	struct ig_errbuf eb = {0};
	struct arena_map cm = {0};
	struct arena_stats st;
	uint64_t off;

	arena_stats(a, &st);
	assert_int_equal(st.bytes, 16 * BLK);
	assert_int_equal(st.slots, 3);
	assert_int_equal(st.slots_free, 3);
	assert_int_equal(st.slot_bytes, SLOT_BYTES);
	off = put(a, &m, m.windows); /* the slots took nothing of the sequences' room */
	assert_int_equal(arena_slot_list(a, 0, list, 8), 3);
	for (uint32_t i = 0; i < 3; i++) {
		assert_int_equal(list[i].slot, i);
		assert_int_equal(list[i].state, ARENA_SLOT_FREE);
		assert_int_equal(list[i].offset % BLK, 0);
		assert_true(list[i].offset + SLOT_BYTES <= off); /* before the data */
		if (i)
			assert_int_equal(list[i].offset, list[i - 1].offset + 2 * BLK);
	}
	assert_int_equal(arena_map_bytes(a), off + 16 * BLK);

	/* capture: the lowest free slot, writing */
	assert_int_equal(arena_slot_capture(a, &sm, NULL, NULL, &in, &up, &eb), IG_E_OK);
	assert_int_equal(in.slot, 0);
	assert_int_equal(in.state, ARENA_SLOT_WRITING);
	assert_int_equal(up.state, ARENA_SLOT_FREE);
	assert_true(in.gen != 0);
	/* not claimable while written; the same key again is a duplicate */
	assert_int_equal(arena_slot_claim(a, 1, 7, 0, &in2, &eb), IG_E_NOTFOUND);
	assert_int_equal(arena_slot_capture(a, &sm, NULL, NULL, &in2, &up, &eb), IG_E_BUSY);
	assert_non_null(strstr(eb.msg, "slot 0 already is writing"));
	pattern((uint8_t *)arena_base(a) + in.offset, 5000, 1, 99);
	assert_int_equal(arena_slot_publish(a, in.slot, in.gen + 1, 5, &eb), IG_E_NOTFOUND);
	assert_int_equal(arena_slot_publish(a, in.slot, in.gen,
	                                    kvcopy_sum((uint8_t *)arena_base(a) + in.offset, 5000),
	                                    &eb),
	                 IG_E_OK);
	assert_int_equal(arena_slot_publish(a, in.slot, in.gen,
	                                    kvcopy_sum((uint8_t *)arena_base(a) + in.offset, 5000),
	                                    &eb),
	                 IG_E_OK); /* a retry */
	assert_int_equal(arena_slot_publish(a, in.slot, in.gen, 5, &eb), IG_E_INVAL);
	/* the same key is another slot's when the kind or model differs */
	sm.kind = ARENA_PREFIX;
	assert_int_equal(arena_slot_capture(a, &sm, NULL, NULL, &in2, &up, &eb), IG_E_OK);
	assert_int_equal(in2.slot, 1);
	assert_int_equal(arena_slot_drop(a, in2.slot, in2.gen, &eb), IG_E_OK);
	assert_int_equal(arena_slot_drop(a, in2.slot, in2.gen, &eb), IG_E_NOTFOUND);
	/* claim: by key and model (and kind) */
	assert_int_equal(arena_slot_claim(a, 1, 8, 0, &in2, &eb), IG_E_NOTFOUND);
	assert_int_equal(arena_slot_claim(a, 1, 7, ARENA_PREFIX, &in2, &eb), IG_E_NOTFOUND);
	assert_int_equal(arena_slot_claim(a, 1, 7, ARENA_CHECKPOINT, &in2, &eb), IG_E_OK);
	assert_int_equal(in2.slot, 0);
	assert_int_equal(in2.gen, in.gen);
	assert_int_equal(in2.meta.tokens, 10);
	/* the reader's way: copy out checked, then the slot still under its gen */
	assert_int_equal(arena_map_open(&cm, t->name, &eb), IG_E_OK);
	assert_true(kvcopy_check(out, (uint8_t *)cm.base + in2.offset, 5000, in2.sum, NULL));
	assert_int_equal(arena_map_slot(&cm, 0, &seen, &eb), IG_E_OK);
	assert_int_equal(seen.state, ARENA_SLOT_HELD);
	assert_int_equal(seen.gen, in.gen);
	assert_int_equal(seen.sum, in2.sum);
	assert_int_equal(seen.offset, in2.offset);
	assert_int_equal(arena_map_slot(&cm, 1, &seen, &eb), IG_E_OK);
	assert_int_equal(seen.state, ARENA_SLOT_FREE);
	assert_int_equal(arena_map_slot(&cm, 3, &seen, &eb), IG_E_NOTFOUND);
	/* refusals, each counted as a skip */
	sm = smeta(9, ARENA_CHECKPOINT, I, SLOT_BYTES + 1);
	assert_int_equal(arena_slot_capture(a, &sm, NULL, NULL, &in2, &up, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "does not fit a slot of 100000 bytes"));
	sm = smeta(0, ARENA_CHECKPOINT, I, 1);
	assert_int_equal(arena_slot_capture(a, &sm, NULL, NULL, &in2, &up, &eb), IG_E_INVAL);
	sm = smeta(9, 3, I, 1);
	assert_int_equal(arena_slot_capture(a, &sm, NULL, NULL, &in2, &up, &eb), IG_E_INVAL);
	arena_stats(a, &st);
	assert_int_equal(st.slots_held, 1);
	assert_int_equal(st.slots_free, 2);
	assert_int_equal(st.slot_captures, 2);
	assert_int_equal(st.slot_publishes, 1);
	assert_int_equal(st.slot_claims, 1);
	assert_int_equal(st.slot_claim_misses, 3);
	assert_int_equal(st.slot_skips_duplicate, 1);
	assert_int_equal(st.slot_skips_size, 1);
	/* the sequences are untouched by all of it */
	assert_int_equal(verify(a, 5), m.windows);
	arena_map_close(&cm);
	check(a);
	arena_close(a);

	/* no slots: a capture is skipped, counted */
	assert_int_equal(arena_unlink(t->name, &eb), IG_E_OK);
	a = open_ok(t->name, 16 * BLK);
	sm = smeta(1, ARENA_CHECKPOINT, A, 10);
	assert_int_equal(arena_slot_capture(a, &sm, NULL, NULL, &in, &up, &eb), IG_E_NOSPACE);
	assert_non_null(strstr(eb.msg, "--reuse-retained-host 0"));
	arena_stats(a, &st);
	assert_int_equal(st.slot_skips_none, 1);
	arena_close(a);
}

static bool slot_ttl_expired(void *ctx, uint32_t slot)
{
	return slot == *(uint32_t *)ctx;
}

/* The give-up order as a table: four slots filled in a given order (the
 * last filled is the most recently used), then claims that touch some,
 * then one more capture: which key is given up. */
static void test_slots_give_up_order(void **state)
{
	static const struct {
		const char *why;
		struct {
			uint64_t key;
			uint32_t kind, cls;
		} fill[4];
		uint64_t touch[2]; /* claimed after the fill, in order (0: none) */
		uint32_t ttl_slot; /* slot ranked as agent by the TTL (9: none) */
		uint64_t gives_up;
	} cases[] = {
	    {"a checkpoint before a prefix, whatever the class",
	     {{1, ARENA_PREFIX, A},
	      {2, ARENA_CHECKPOINT, I},
	      {3, ARENA_PREFIX, A},
	      {4, ARENA_PREFIX, I}},
	     {0, 0},
	     9,
	     2},
	    {"among checkpoints, agent before interactive",
	     {{1, ARENA_CHECKPOINT, I},
	      {2, ARENA_CHECKPOINT, A},
	      {3, ARENA_CHECKPOINT, I},
	      {4, ARENA_PREFIX, A}},
	     {0, 0},
	     9,
	     2},
	    {"among equals, the least recently used",
	     {{1, ARENA_CHECKPOINT, A},
	      {2, ARENA_CHECKPOINT, A},
	      {3, ARENA_PREFIX, A},
	      {4, ARENA_CHECKPOINT, A}},
	     {0, 0},
	     9,
	     1},
	    {"a claim makes a slot recently used",
	     {{1, ARENA_CHECKPOINT, A},
	      {2, ARENA_CHECKPOINT, A},
	      {3, ARENA_PREFIX, A},
	      {4, ARENA_CHECKPOINT, A}},
	     {1, 2},
	     9,
	     4},
	    {"an interactive slot idle past the TTL ranks as agent",
	     {{1, ARENA_CHECKPOINT, I},
	      {2, ARENA_CHECKPOINT, I},
	      {3, ARENA_CHECKPOINT, I},
	      {4, ARENA_PREFIX, A}},
	     {0, 0},
	     2,
	     3},
	    {"prefixes only: agent, then LRU",
	     {{1, ARENA_PREFIX, I},
	      {2, ARENA_PREFIX, A},
	      {3, ARENA_PREFIX, A},
	      {4, ARENA_PREFIX, I}},
	     {0, 0},
	     9,
	     2},
	};
	struct tctx *t = *state;

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct arena_slot_meta m = smeta(50, ARENA_PREFIX, I, 10);
		struct arena_slot_info in, up;
		struct ig_errbuf eb = {0};
		struct arena_stats st;
		struct arena *a;
		uint32_t ttl = cases[c].ttl_slot;

		(void)arena_unlink(t->name, NULL);
		a = open_slots_ok(t->name, 4 * BLK, 4);
		for (int i = 0; i < 4; i++)
			assert_int_equal(slot_put(a, cases[c].fill[i].key, cases[c].fill[i].kind,
			                          cases[c].fill[i].cls, NULL),
			                 (uint32_t)i);
		for (int i = 0; i < 2 && cases[c].touch[i]; i++)
			assert_int_equal(arena_slot_claim(a, cases[c].touch[i], 7, 0, &in, &eb),
			                 IG_E_OK);
		assert_int_equal(arena_slot_capture(a, &m, slot_ttl_expired, &ttl, &in, &up, &eb),
		                 IG_E_OK);
		if (up.state != ARENA_SLOT_HELD || up.meta.key != cases[c].gives_up)
			fail_msg("%s: gave up key %" PRIu64 " (state %u), want %" PRIu64,
			         cases[c].why, up.meta.key, up.state, cases[c].gives_up);
		assert_int_equal(in.slot, up.slot); /* the new capture takes its place */
		assert_int_equal(in.offset, up.offset);
		assert_int_equal(arena_slot_claim(a, cases[c].gives_up, 7, 0, &in, &eb),
		                 IG_E_NOTFOUND);
		for (int i = 0; i < 4; i++)
			if (cases[c].fill[i].key != cases[c].gives_up)
				slot_same(a, cases[c].fill[i].key);
		arena_stats(a, &st);
		assert_int_equal(st.slot_given_up, 1);
		arena_close(a);
	}

	/* a slot being written is never given up: all four writing, skipped */
	{
		struct tctx *tt = *state;
		struct arena_slot_info in, up;
		struct ig_errbuf eb = {0};
		struct arena_stats st;
		struct arena *a;

		(void)arena_unlink(tt->name, NULL);
		a = open_slots_ok(tt->name, 4 * BLK, 4);
		for (uint64_t k = 1; k <= 4; k++) {
			struct arena_slot_meta m = smeta(k, ARENA_CHECKPOINT, A, 10);

			assert_int_equal(arena_slot_capture(a, &m, NULL, NULL, &in, &up, &eb),
			                 IG_E_OK);
		}
		{
			struct arena_slot_meta m = smeta(5, ARENA_PREFIX, I, 10);

			assert_int_equal(arena_slot_capture(a, &m, NULL, NULL, &in, &up, &eb),
			                 IG_E_NOSPACE);
			assert_non_null(
			    strstr(eb.msg, "all 4 retained host slots are being written"));
		}
		arena_stats(a, &st);
		assert_int_equal(st.slot_skips_busy, 1);
		assert_int_equal(st.slots_writing, 4);
		arena_close(a);
	}
}

/* Over a reopen: held slots kept byte for byte, a capture not published
 * freed, a damaged record freed and counted; another slot count refused. */
static void test_slots_reopen(void **state)
{
	struct tctx *t = *state;
	struct arena *a = open_slots_ok(t->name, 8 * BLK, 4);
	struct arena_meta m = meta_of(3, A, 3 * BLK, 65536);
	struct arena_slot_meta sm = smeta(3, ARENA_PREFIX, A, 77);
	struct arena_slot_info in, up;
	struct ig_errbuf eb = {0};
	struct arena_stats st;
	uint8_t *p;
	size_t len;

	slot_put(a, 1, ARENA_CHECKPOINT, I, NULL);
	slot_put(a, 2, ARENA_PREFIX, A, NULL);
	assert_int_equal(arena_slot_capture(a, &sm, NULL, NULL, &in, &up, &eb), IG_E_OK);
	slot_put(a, 4, ARENA_CHECKPOINT, A, NULL);
	put(a, &m, m.windows);
	arena_close(a);

	a = open_slots_ok(t->name, 8 * BLK, 4);
	arena_stats(a, &st);
	assert_int_equal(st.slots_recovered, 3);
	assert_int_equal(st.slots_lost, 0);
	assert_int_equal(st.slots_held, 3);
	assert_int_equal(st.slots_free, 1); /* slot 2: captured, never published */
	slot_same(a, 1);
	slot_same(a, 2);
	slot_same(a, 4);
	assert_int_equal(verify(a, 3), m.windows);
	/* generations stay unique across the reopen */
	sm.key = 5;
	assert_int_equal(arena_slot_capture(a, &sm, NULL, NULL, &in, &up, &eb), IG_E_OK);
	assert_int_equal(in.slot, 2);
	{
		struct arena_slot_info list[4];

		assert_int_equal(arena_slot_list(a, 0, list, 4), 4);
		for (int i = 0; i < 4; i++)
			for (int j = 0; j < i; j++)
				assert_true(list[i].gen != list[j].gen);
	}
	arena_close(a);

	/* another count or size: refused, naming both */
	a = NULL;
	assert_int_equal(arena_open_slots(&a, t->name, 8 * BLK, 5, SLOT_BYTES, &eb), IG_E_CONFIG);
	assert_non_null(strstr(eb.msg, "holds 4 retained host slots of 100000 bytes, asked for 5"));
	assert_non_null(strstr(eb.msg, "--reuse-retained-host"));
	assert_int_equal(arena_open_slots(&a, t->name, 8 * BLK, 4, SLOT_BYTES + 1, &eb),
	                 IG_E_CONFIG);
	assert_int_equal(arena_open(&a, t->name, 8 * BLK, &eb), IG_E_CONFIG);
	assert_int_equal(arena_open_slots(&a, t->name, 8 * BLK, 4, 0, &eb), IG_E_CONFIG);

	/* a held record damaged in place: freed at the next open, counted */
	p = poke_map(t->path, &len);
	p[4096 + 0 * 96 + 20] ^= 1; /* slot 0's key, under its checksum */
	munmap(p, len);
	a = open_slots_ok(t->name, 8 * BLK, 4);
	arena_stats(a, &st);
	assert_int_equal(st.slots_lost, 1);
	assert_int_equal(st.slots_held, 2);
	assert_int_equal(arena_slot_claim(a, 1, 7, 0, &in, &eb), IG_E_NOTFOUND);
	slot_same(a, 2);
	slot_same(a, 4);
	assert_int_equal(verify(a, 3), m.windows);
	arena_close(a);
}

static void test_refused_at_open(void **state)
{
	struct tctx *t = *state;
	struct arena *a = open_ok(t->name, 16 * BLK), *b = NULL;
	struct arena_meta m1 = meta_of(1, A, 2 * BLK, 65536), m2 = meta_of(2, A, BLK, 4096);
	struct ig_errbuf eb = {0};
	uint64_t seq_off;
	uint8_t *p, *orig;
	size_t len;
	int fd;

	put(a, &m1, 2);
	put(a, &m2, 3);
	/* a second daemon on the same object */
	assert_int_equal(arena_open(&b, t->name, 16 * BLK, &eb), IG_E_BUSY);
	assert_non_null(strstr(eb.msg, "held by another process"));
	arena_close(a);

	p = poke_map(t->path, &len);
	orig = malloc(len);
	assert_non_null(orig);
	memcpy(orig, p, len);
	memcpy(&seq_off, p + HDR_SEQ_OFF, 8);
	assert_int_equal(seq_off, 4096);

	expect_refused(t->name, 17 * BLK, IG_E_CONFIG, "holds 1048576 bytes, asked for 1114112");
	expect_refused(t->name, 0, IG_E_CONFIG, NULL);
	expect_refused("no/slash", 16 * BLK, IG_E_INVAL, NULL);
	expect_refused("", 16 * BLK, IG_E_INVAL, NULL);
	/* the header: a foreign magic, another version (a flipped bit in it is
	 * repaired: test_damaged_header) */
	p[0] = 'X';
	expect_refused(t->name, 16 * BLK, IG_E_CONFIG, "not an Ignis KV-RAM arena");
	p[0] = 'I';
	p[HDR_VERSION] = 1; /* version 1's window checksums were XXH64 */
	expect_refused(t->name, 16 * BLK, IG_E_CONFIG, "layout version 1");
	p[HDR_VERSION] = 2;
	/* a damaged header on an object of another size than the one asked:
	 * nothing to rebuild it from */
	p[HDR_NBLOCKS] ^= 1;
	expect_refused(t->name, 17 * BLK, IG_E_KV_LOST, "header is corrupt");
	p[HDR_NBLOCKS] ^= 1;
	/* refusals changed nothing (damaged index records are dropped one by
	 * one: test_damaged_records) */
	assert_memory_equal(p, orig, len);
	/* owner-only */
	assert_int_equal(chmod(t->path, 0644), 0);
	expect_refused(t->name, 16 * BLK, IG_E_PERM, "owner-only");
	assert_int_equal(chmod(t->path, 0600), 0);
	a = open_ok(t->name, 16 * BLK);
	assert_int_equal(verify(a, 1), 2);
	assert_int_equal(verify(a, 2), 3);
	arena_close(a);
	munmap(p, len);
	free(orig);

	/* something else under the name */
	assert_int_equal(arena_unlink(t->name, &eb), IG_E_OK);
	assert_int_equal(arena_unlink(t->name, &eb), IG_E_NOTFOUND);
	fd = open(t->path, O_CREAT | O_EXCL | O_RDWR, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "hello", 5), 5);
	expect_refused(t->name, 16 * BLK, IG_E_CONFIG, "not an Ignis KV-RAM arena");
	assert_int_equal(ftruncate(fd, 1 << 20), 0);
	expect_refused(t->name, 16 * BLK, IG_E_CONFIG, "not an Ignis KV-RAM arena");
	close(fd);
	/* larger than /dev/shm: refused at open with the figures, nothing left */
	assert_int_equal(arena_unlink(t->name, &eb), IG_E_OK);
	expect_refused(t->name, 1ull << 46, IG_E_CONFIG, "free of");
	assert_int_equal(access(t->path, F_OK), -1);
}

/*
 * One damaged sequence record costs that sequence alone: the open drops it
 * (reported with its record and why, counted), serves every other one byte
 * for byte, and gives its room back. Each row damages the object as the
 * same puts left it; a reopen afterwards finds nothing more to drop.
 */
enum damage { D_IMAGE_BIT, D_STATE, D_TAG, D_OVERLAP, D_DUPLICATE, D_OUTSIDE, D_TWO };

static void damage(uint8_t *p, uint64_t seq_off, uint64_t win_off, enum damage d)
{
	uint8_t *r0 = p + seq_off, *r1 = r0 + SREC_BYTES, *r3 = r0 + 3 * SREC_BYTES;
	uint64_t word;
	uint32_t w32;

	switch (d) {
	case D_IMAGE_BIT: /* the case: one bit of seq 1's image_bytes */
		r0[SREC_IMAGE] ^= 1;
		break;
	case D_STATE:
		r0[SREC_STATE] = 7;
		break;
	case D_TAG: /* seq 1's window 1 tagged with a generation nobody has */
		word = 12345;
		memcpy(p + win_off + 1 * WREC_BYTES + WREC_TAG, &word, 8);
		break;
	case D_OVERLAP: /* a whole record of seq 33 over seq 1's extent */
		memcpy(r3, r0, SREC_BYTES);
		word = 33;
		memcpy(r3 + SREC_SEQ, &word, 8);
		rec_check(r3);
		break;
	case D_DUPLICATE: /* seq 2 again, in room nobody uses */
		memcpy(r3, r1, SREC_BYTES);
		word = 12;
		memcpy(r3 + SREC_FIRST, &word, 8);
		w32 = 200;
		memcpy(r3 + SREC_WFIRST, &w32, 4);
		rec_check(r3);
		break;
	case D_OUTSIDE: /* an extent past the data, under a valid checksum */
		word = 1000;
		memcpy(r0 + SREC_FIRST, &word, 8);
		rec_check(r0);
		break;
	case D_TWO:
		r0[SREC_IMAGE] ^= 1;
		r1[SREC_FIRST] ^= 2;
		break;
	}
}

static void test_damaged_records(void **state)
{
	static const struct {
		enum damage d;
		const char *name;
		uint32_t n_lost;
		uint64_t lost[2];   /* sequences gone */
		uint32_t record[2]; /* the records reported */
		const char *why;
	} rows[] = {
	    {D_IMAGE_BIT, "image_bytes bit", 1, {1}, {0}, "checksum"},
	    {D_STATE, "state", 1, {1}, {0}, "state 7"},
	    {D_TAG, "stray tag", 1, {1}, {0}, "window 1 belongs to generation 12345"},
	    {D_OVERLAP, "overlap", 1, {0}, {3}, "overlaps another"},
	    {D_DUPLICATE, "duplicate", 1, {0}, {3}, "seq 2 is also held by record 1"},
	    {D_OUTSIDE, "outside", 1, {1}, {0}, "outside the data"},
	    {D_TWO, "two records", 2, {1, 2}, {0, 1}, "checksum"},
	};
	struct tctx *t = *state;
	struct arena *a = open_ok(t->name, 16 * BLK);
	struct arena_meta m[3] = {meta_of(1, A, 2 * BLK, 65536), meta_of(2, A, BLK, 4096),
	                          meta_of(3, I, 3 * BLK, 65536)};
	uint64_t seq_off, win_off;
	uint8_t *p, *orig;
	size_t len;

	for (int i = 0; i < 3; i++)
		put(a, &m[i], m[i].windows);
	arena_close(a);
	p = poke_map(t->path, &len);
	orig = malloc(len);
	assert_non_null(orig);
	memcpy(orig, p, len);
	memcpy(&seq_off, p + HDR_SEQ_OFF, 8);
	memcpy(&win_off, p + HDR_WIN_OFF, 8);
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		struct arena_damage dmg[4];
		struct ig_errbuf eb = {0};
		struct arena_stats st;
		uint32_t n, n_gone = 0;

		memcpy(p, orig, len);
		damage(p, seq_off, win_off, rows[r].d);
		a = open_ok(t->name, 16 * BLK);
		arena_stats(a, &st);
		if (st.damaged_sequences != rows[r].n_lost)
			fail_msg("%s: %" PRIu64 " records dropped, want %u", rows[r].name,
			         st.damaged_sequences, rows[r].n_lost);
		n = arena_damaged(a, dmg, 4);
		assert_int_equal(n, rows[r].n_lost);
		for (uint32_t i = 0; i < n; i++) {
			assert_int_equal(dmg[i].record, rows[r].record[i]);
			if (!strstr(dmg[i].why, rows[r].why))
				fail_msg("%s: record %u dropped because \"%s\", want \"%s\"",
				         rows[r].name, dmg[i].record, dmg[i].why, rows[r].why);
		}
		for (int i = 0; i < 3; i++) {
			bool gone = false;

			for (uint32_t j = 0; j < rows[r].n_lost; j++)
				gone |= rows[r].lost[j] == m[i].seq;
			if (gone) {
				n_gone++;
				assert_int_equal(arena_get(a, m[i].seq, NULL, NULL, 0, &eb),
				                 IG_E_NOTFOUND);
			} else if (verify(a, m[i].seq) != m[i].windows) {
				fail_msg("%s: seq %" PRIu64 " is not whole", rows[r].name,
				         m[i].seq);
			}
		}
		assert_int_equal(arena_get(a, 33, NULL, NULL, 0, &eb), IG_E_NOTFOUND);
		assert_int_equal(st.sequences, 3 - n_gone);
		check(a);
		/* the room of a lost sequence is free again */
		for (uint32_t j = 0; j < rows[r].n_lost; j++)
			if (rows[r].lost[j]) {
				put(a, &m[rows[r].lost[j] - 1], m[rows[r].lost[j] - 1].windows);
				assert_int_equal(verify(a, rows[r].lost[j]),
				                 m[rows[r].lost[j] - 1].windows);
			}
		check(a);
		arena_close(a);
		/* dropped for good: the next open finds nothing damaged */
		a = open_ok(t->name, 16 * BLK);
		arena_stats(a, &st);
		assert_int_equal(st.damaged_sequences, 0);
		assert_int_equal(arena_damaged(a, dmg, 4), 0);
		for (int i = 0; i < 3; i++)
			assert_int_equal(verify(a, m[i].seq), m[i].windows);
		check(a);
		arena_close(a);
	}
	munmap(p, len);
	free(orig);
}

/*
 * The header page holds nothing the configuration does not give (the
 * layout follows from the bytes and slots asked) but three counters the
 * recovery takes again from the records: a damaged one is rewritten, said
 * so, and every sequence is served. A client's mapping, which never writes
 * the index, refuses it until the daemon has.
 */
static void test_damaged_header(void **state)
{
	static const struct {
		size_t at;
		uint8_t bit;
		const char *what;
	} rows[] = {
	    {HDR_NBLOCKS, 1, "header"},
	    {HDR_CHECK + 3, 0x10, "header"},
	    {SLOTDESC + 8, 4, "retained slots' descriptor"},
	};
	struct tctx *t = *state;
	struct arena *a = open_ok(t->name, 16 * BLK);
	struct arena_meta m1 = meta_of(1, A, 2 * BLK, 65536), m2 = meta_of(2, I, BLK, 4096);
	struct arena_map cm;
	uint8_t *p, *orig;
	size_t len;

	put(a, &m1, m1.windows);
	put(a, &m2, 5);
	assert_null(arena_repaired(a));
	arena_close(a);
	p = poke_map(t->path, &len);
	orig = malloc(len);
	assert_non_null(orig);
	memcpy(orig, p, len);
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		struct ig_errbuf eb = {0};
		struct arena_stats st;
		const char *said;

		p[rows[r].at] ^= rows[r].bit;
		assert_int_equal(arena_map_open(&cm, t->name, &eb), IG_E_KV_LOST);
		a = open_ok(t->name, 16 * BLK);
		said = arena_repaired(a);
		if (!said || !strstr(said, rows[r].what))
			fail_msg("row %zu: repaired \"%s\", want \"%s\"", r,
			         said ? said : "(nothing)", rows[r].what);
		arena_stats(a, &st);
		assert_int_equal(st.recovered_sequences, 2);
		assert_int_equal(st.damaged_sequences, 0);
		assert_int_equal(verify(a, 1), m1.windows);
		assert_int_equal(verify(a, 2), 5);
		check(a);
		/* the layout, as it was */
		assert_memory_equal(p, orig, 80);
		assert_memory_equal(p + SLOTDESC, orig + SLOTDESC, 48);
		assert_int_equal(arena_map_open(&cm, t->name, &eb), IG_E_OK);
		arena_map_close(&cm);
		arena_close(a);
		a = open_ok(t->name, 16 * BLK);
		assert_null(arena_repaired(a));
		arena_close(a);
	}
	munmap(p, len);
	free(orig);
}

/* ---- faults: a child holds the arena and is killed ---- */

enum {
	ACK_OPEN = 1,
	ACK_RESERVED,
	ACK_COMMITTED,
	ACK_DROP_INTENT,
	ACK_DROPPED,
	ACK_DONE,
	ACK_ERROR
};

struct ack {
	uint32_t op, k;
	uint64_t seq, xxh;
};

static void send_ack(int fd, uint32_t op, uint64_t seq, uint32_t k, uint64_t xxh)
{
	struct ack x = {op, k, seq, xxh};

	if (write(fd, &x, sizeof(x)) != (ssize_t)sizeof(x))
		_exit(3);
}

struct child {
	pid_t pid;
	int rd;
};

static struct child spawn(void (*fn)(int wr, const char *name, uint64_t arg), const char *name,
                          uint64_t arg)
{
	struct child c;
	int fds[2];

	assert_int_equal(pipe(fds), 0);
	c.pid = fork();
	assert_true(c.pid >= 0);
	if (c.pid == 0) {
		close(fds[0]);
		fn(fds[1], name, arg);
		_exit(0);
	}
	close(fds[1]);
	c.rd = fds[0];
	return c;
}

/* Read one ack, blocking; false at EOF. */
static bool read_ack(int fd, struct ack *x)
{
	size_t got = 0;

	while (got < sizeof(*x)) {
		ssize_t n = read(fd, (char *)x + got, sizeof(*x) - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		got += (size_t)n;
	}
	return true;
}

static void wait_op(struct child *c, uint32_t op, struct ack *x)
{
	do {
		if (!read_ack(c->rd, x))
			fail_msg("the child ended before acknowledging op %u", op);
		if (x->op == ACK_ERROR)
			fail_msg("the child failed: %s", ig_err_name((int)x->xxh));
	} while (x->op != op);
}

static void kill_child(struct child *c)
{
	int status;

	kill(c->pid, SIGKILL);
	assert_int_equal(waitpid(c->pid, &status, 0), c->pid);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		fail_msg("the child was not killed but ended with status %#x", status);
}

static struct arena *child_open(int wr, const char *name, uint64_t bytes)
{
	struct ig_errbuf eb;
	struct arena *a = NULL;
	int err = arena_open(&a, name, bytes, &eb);

	if (err) {
		send_ack(wr, ACK_ERROR, 0, 0, (uint64_t)err);
		_exit(2);
	}
	send_ack(wr, ACK_OPEN, 0, 0, 0);
	return a;
}

#define FAULT_BYTES (16 * BLK)

/* Reserve seq 2 and complete it, then reserve seq 1, fill it and wait. */
static void child_reserve_only(int wr, const char *name, uint64_t arg)
{
	struct arena *a = child_open(wr, name, FAULT_BYTES);
	struct arena_meta m2 = meta_of(2, I, 2 * BLK, 65536), m1 = meta_of(1, I, 3 * BLK, 65536);
	struct ig_errbuf eb;
	uint64_t off;

	(void)arg;
	if (arena_reserve(a, &m2, &off, &eb))
		_exit(4);
	fill(arena_base(a), off, &m2);
	for (uint32_t k = 0; k < m2.windows; k++)
		if (commit_k(a, off, &m2, k, &eb))
			_exit(5);
		else
			send_ack(wr, ACK_COMMITTED, 2, k, sum_of(arena_base(a), off, &m2, k));
	if (arena_reserve(a, &m1, &off, &eb))
		_exit(4);
	fill(arena_base(a), off, &m1);
	send_ack(wr, ACK_RESERVED, 1, 0, 0);
	for (;;)
		pause();
}

static void test_fault_reserved_not_committed(void **state)
{
	struct tctx *t = *state;
	struct arena *a = open_ok(t->name, FAULT_BYTES), *b = NULL;
	struct ig_errbuf eb = {0};
	struct arena_stats st;
	struct child c;
	struct ack x;

	arena_close(a);
	c = spawn(child_reserve_only, t->name, 0);
	wait_op(&c, ACK_RESERVED, &x);
	/* while the child holds it, nobody else opens it */
	assert_int_equal(arena_open(&b, t->name, FAULT_BYTES, &eb), IG_E_BUSY);
	kill_child(&c);
	close(c.rd);
	a = open_ok(t->name, FAULT_BYTES);
	arena_stats(a, &st);
	assert_int_equal(st.recovered_sequences, 1);
	assert_int_equal(st.reclaimed_sequences, 1);
	assert_int_equal(arena_get(a, 1, NULL, NULL, 0, &eb), IG_E_NOTFOUND);
	assert_int_equal(verify(a, 2), 2);
	assert_int_equal(st.used_bytes, 2 * BLK);
	check(a);
	arena_close(a);
}

#define MID_WINDOWS 5

/* Reserve seq 7 of MID_WINDOWS windows, fill them all, commit the first
 * `arg`, and wait. */
static void child_commit_k(int wr, const char *name, uint64_t arg)
{
	struct arena *a = child_open(wr, name, FAULT_BYTES);
	struct arena_meta m = meta_of(7, A, 4 * BLK + 3, (uint32_t)(BLK - 1));
	struct ig_errbuf eb;
	uint64_t off;

	if (m.windows != MID_WINDOWS || arena_reserve(a, &m, &off, &eb))
		_exit(4);
	fill(arena_base(a), off, &m);
	send_ack(wr, ACK_RESERVED, 7, 0, off);
	for (uint32_t k = 0; k < arg; k++) {
		if (commit_k(a, off, &m, k, &eb))
			_exit(5);
		send_ack(wr, ACK_COMMITTED, 7, k, sum_of(arena_base(a), off, &m, k));
	}
	send_ack(wr, ACK_DONE, 0, 0, 0); /* wait to be killed */
	for (;;)
		pause();
}

/* Read acks into buf until one of op `until` (0: until EOF); returns how
 * many. An error ack fails the test. */
static size_t collect(struct child *c, uint32_t until, struct ack *buf, size_t cap)
{
	size_t n = 0;
	struct ack x;

	while (read_ack(c->rd, &x)) {
		if (x.op == ACK_ERROR)
			fail_msg("the child failed: %s", ig_err_name((int)x.xxh));
		if (n == cap)
			fail_msg("more than %zu acks", cap);
		buf[n++] = x;
		if (x.op == until)
			return n;
	}
	if (until)
		fail_msg("the child ended before acknowledging op %u", until);
	return n;
}

static void test_fault_mid_commit(void **state)
{
	static struct arena_window w[MID_WINDOWS];
	struct tctx *t = *state;

	/* killed after n of MID_WINDOWS commits, for every n */
	for (uint32_t n = 0; n <= MID_WINDOWS; n++) {
		struct arena_meta m = meta_of(7, A, 4 * BLK + 3, (uint32_t)(BLK - 1));
		uint64_t acked[MID_WINDOWS] = {0}, off = 0;
		struct ig_errbuf eb = {0};
		struct arena_info info;
		struct arena_stats st;
		struct ack acks[16];
		struct arena *a;
		struct child c;
		size_t na;

		a = open_ok(t->name, FAULT_BYTES);
		arena_close(a);
		c = spawn(child_commit_k, t->name, n);
		na = collect(&c, ACK_DONE, acks, 16);
		kill_child(&c);
		close(c.rd);
		for (size_t i = 0; i < na; i++) {
			if (acks[i].op == ACK_RESERVED)
				off = acks[i].xxh;
			if (acks[i].op == ACK_COMMITTED)
				acked[acks[i].k] = acks[i].xxh;
		}
		a = open_ok(t->name, FAULT_BYTES);
		arena_stats(a, &st);
		if (n == 0) {
			/* nothing committed: the reservation is reclaimed */
			assert_int_equal(st.recovered_sequences, 0);
			assert_int_equal(st.reclaimed_sequences, 1);
			assert_int_equal(arena_get(a, 7, NULL, NULL, 0, &eb), IG_E_NOTFOUND);
			assert_int_equal(st.used_bytes, 0);
		} else {
			assert_int_equal(st.recovered_sequences, 1);
			assert_int_equal(st.reclaimed_sequences, 0);
			assert_int_equal(arena_get(a, 7, &info, w, MID_WINDOWS, &eb), IG_E_OK);
			assert_int_equal(info.offset, off);
			assert_int_equal(info.committed, n);
			assert_int_equal(info.complete, n == MID_WINDOWS);
			assert_memory_equal(&info.meta, &m, sizeof(m));
			for (uint32_t k = 0; k < MID_WINDOWS; k++)
				assert_int_equal(w[k].sum, k < n ? acked[k] : 0);
			assert_int_equal(verify(a, 7), n);
			/* incomplete: never a victim */
			assert_int_equal(arena_pick_victim_ex(a, 0, NULL, 0, NULL, NULL),
			                 n == MID_WINDOWS ? 7 : 0);
			/* the worker may finish it: the bytes are still in place */
			for (uint32_t k = n; k < MID_WINDOWS; k++)
				assert_int_equal(commit_k(a, off, &m, k, &eb), IG_E_OK);
			assert_int_equal(verify(a, 7), MID_WINDOWS);
		}
		check(a);
		arena_close(a);
		assert_int_equal(arena_unlink(t->name, &eb), IG_E_OK);
	}
}

/* Killed at random points of a loop of operations. */
#define RAND_BYTES  (32 * BLK)
#define RAND_ROUNDS 60
#define RAND_MAXW   64
#define RAND_HELD   64

struct held {
	struct arena_meta m;
	uint64_t off;
};

static uint32_t held_find(const struct held *h, uint32_t n, uint64_t seq)
{
	for (uint32_t i = 0; i < n; i++)
		if (h[i].m.seq == seq)
			return i;
	return n;
}

/* Drop seq, announcing it first and acknowledging it after. */
static void child_drop(int wr, struct arena *a, uint64_t seq)
{
	struct ig_errbuf eb;

	send_ack(wr, ACK_DROP_INTENT, seq, 0, 0);
	if (arena_drop(a, seq, &eb))
		_exit(7);
	send_ack(wr, ACK_DROPPED, seq, 0, 0);
}

/* Drop h[i] and forget it. */
static void child_drop_held(int wr, struct arena *a, struct held *h, uint32_t *n, uint32_t i)
{
	child_drop(wr, a, h[i].m.seq);
	h[i] = h[--*n];
}

/* Commit windows of h from `from`, in order, up to `to`; ack each. */
static void child_commit(int wr, struct arena *a, const struct held *h, uint32_t from, uint32_t to)
{
	struct ig_errbuf eb;

	for (uint32_t k = from; k < to; k++) {
		uint64_t x = sum_of(arena_base(a), h->off, &h->m, k);

		if (arena_commit(a, h->m.seq, k, wlen(&h->m, k), x, &eb))
			_exit(5);
		send_ack(wr, ACK_COMMITTED, h->m.seq, k, x);
	}
}

static void child_random(int wr, const char *name, uint64_t arg)
{
	static const uint32_t windows[] = {4096, 7000, 16384, 65536, 100000};
	static struct arena_info l[RAND_HELD];
	static struct arena_window w[RAND_MAXW];
	static struct held h[RAND_HELD];
	struct arena *a = child_open(wr, name, RAND_BYTES);
	uint64_t rng = arg, next = (arg >> 40) << 24; /* ids unique per round */
	struct ig_errbuf eb;
	uint32_t n = arena_list(a, l, RAND_HELD);

	for (uint32_t i = 0; i < n; i++) {
		h[i].m = l[i].meta;
		h[i].off = l[i].offset;
	}
	for (;;) {
		uint32_t r = (uint32_t)(mix(&rng) % 16), i = n ? (uint32_t)(mix(&rng) % n) : 0;

		if (r < 7) {
			struct arena_meta m =
			    meta_of(++next, (uint32_t)(mix(&rng) % 2), 1 + mix(&rng) % (3 * BLK),
			            windows[mix(&rng) % (sizeof(windows) / sizeof(windows[0]))]);
			uint64_t off;
			int err = arena_reserve(a, &m, &off, &eb);

			if (err == IG_E_NOSPACE && n) {
				uint64_t v = arena_pick_victim_ex(a, 0, NULL, 0, NULL, NULL);

				child_drop_held(wr, a, h, &n, v ? held_find(h, n, v) : i);
				continue;
			}
			if (err)
				_exit(4);
			send_ack(wr, ACK_RESERVED, m.seq, m.windows, 0);
			fill(arena_base(a), off, &m);
			h[n].m = m;
			h[n].off = off;
			n++;
			/* one in eight stays partial */
			child_commit(wr, a, &h[n - 1], 0,
			             mix(&rng) % 8 ? m.windows : (uint32_t)(mix(&rng) % m.windows));
		} else if (r < 10 && n) {
			child_drop_held(wr, a, h, &n, i);
		} else if (r < 12 && n) {
			if (arena_get(a, h[i].m.seq, NULL, w, RAND_MAXW, &eb))
				_exit(8);
		} else if (r < 13 && n) {
			/* a retried commit of a committed window changes nothing */
			if (arena_get(a, h[i].m.seq, NULL, w, RAND_MAXW, &eb))
				_exit(8);
			for (uint32_t k = 0; k < h[i].m.windows; k++)
				if (w[k].len &&
				    arena_commit(a, h[i].m.seq, k, w[k].len, w[k].sum, &eb))
					_exit(9);
		} else if (r < 14 && n) {
			uint64_t v = arena_pick_victim_ex(a, 0, NULL, 0, NULL, NULL);

			if (v)
				child_drop_held(wr, a, h, &n, held_find(h, n, v));
		} else if (n) {
			/* finish a partial one (from this round or a killed one) */
			uint32_t done = 0;

			if (arena_get(a, h[i].m.seq, NULL, w, RAND_MAXW, &eb))
				_exit(8);
			while (done < h[i].m.windows && w[done].len)
				done++;
			child_commit(wr, a, &h[i], done, h[i].m.windows);
		}
	}
}

/*
 * The parent's book of what the child acknowledged: a sequence whose drop
 * was acknowledged must be gone; one whose drop was only announced may be
 * either; otherwise every acknowledged window must be there with its
 * checksum and bytes. Whatever is there must be whole (every committed
 * window hashes right and holds its pattern) and have a committed window.
 */
struct model {
	uint64_t seq;
	uint32_t windows;
	bool intent, dropped;
	uint64_t mask; /* acknowledged windows */
	uint64_t x[RAND_MAXW];
};

struct book {
	struct model md[4096];
	uint32_t n;
};

static struct model *book_find(struct book *b, uint64_t seq, bool add)
{
	for (uint32_t i = 0; i < b->n; i++)
		if (b->md[i].seq == seq)
			return &b->md[i];
	if (!add)
		return NULL;
	assert_true(b->n < 4096);
	memset(&b->md[b->n], 0, sizeof(b->md[0]));
	b->md[b->n].seq = seq;
	return &b->md[b->n++];
}

static void book_apply(struct book *b, const struct ack *acks, size_t na, const char *what)
{
	for (size_t i = 0; i < na; i++) {
		struct model *e = book_find(b, acks[i].seq, acks[i].op == ACK_RESERVED);

		switch (acks[i].op) {
		case ACK_OPEN:
		case ACK_DONE:
			break;
		case ACK_RESERVED:
			e->windows = acks[i].k;
			break;
		case ACK_COMMITTED:
			assert_non_null(e);
			assert_true(acks[i].k < RAND_MAXW);
			e->mask |= 1ull << acks[i].k;
			e->x[acks[i].k] = acks[i].xxh;
			break;
		case ACK_DROP_INTENT:
			assert_non_null(e);
			e->intent = true;
			break;
		case ACK_DROPPED:
			assert_non_null(e);
			e->dropped = true;
			break;
		default:
			fail_msg("%s: unexpected ack %u", what, acks[i].op);
		}
	}
}

/* Check the reopened arena against the book, then make the book what is
 * there. Returns how many sequences are held. */
static uint32_t book_check(struct book *b, struct arena *a, const char *what)
{
	static struct arena_info l[MAXSEQ];
	static struct arena_window w[RAND_MAXW];
	static struct model next[MAXSEQ];
	struct ig_errbuf eb = {0};
	struct arena_stats st;
	uint32_t nl, nn = 0;

	for (uint32_t i = 0; i < b->n; i++) {
		struct model *e = &b->md[i];
		int err = arena_get(a, e->seq, NULL, w, RAND_MAXW, &eb);

		if (err && err != IG_E_NOTFOUND)
			fail_msg("%s: get %" PRIu64 ": %s", what, e->seq, eb.msg);
		if (e->dropped && !err)
			fail_msg("%s: seq %" PRIu64 " was dropped, yet is back", what, e->seq);
		if (e->intent || e->dropped)
			continue;
		if (e->mask && err)
			fail_msg("%s: seq %" PRIu64 " lost with acknowledged windows", what,
			         e->seq);
		for (uint32_t k = 0; k < RAND_MAXW; k++)
			if ((e->mask >> k) & 1u && (w[k].len == 0 || w[k].sum != e->x[k]))
				fail_msg("%s: seq %" PRIu64 " window %u was acknowledged and is "
				         "not there",
				         what, e->seq, k);
	}
	nl = arena_list(a, l, MAXSEQ);
	arena_stats(a, &st);
	assert_int_equal(st.recovered_sequences, nl);
	for (uint32_t i = 0; i < nl; i++) {
		struct model *e = book_find(b, l[i].meta.seq, false);
		uint32_t done;

		if (!e || e->dropped)
			fail_msg("%s: seq %" PRIu64 " is held but was never reserved or was "
			         "dropped",
			         what, l[i].meta.seq);
		assert_int_equal(l[i].meta.windows, e->windows);
		done = verify(a, l[i].meta.seq);
		if (done == 0)
			fail_msg("%s: seq %" PRIu64 " kept with no committed window", what,
			         l[i].meta.seq);
		assert_int_equal(arena_get(a, l[i].meta.seq, NULL, w, RAND_MAXW, &eb), IG_E_OK);
		memset(&next[nn], 0, sizeof(next[nn]));
		next[nn].seq = l[i].meta.seq;
		next[nn].windows = l[i].meta.windows;
		for (uint32_t k = 0; k < l[i].meta.windows; k++)
			if (w[k].len) {
				next[nn].mask |= 1ull << k;
				next[nn].x[k] = w[k].sum;
			}
		nn++;
	}
	check(a);
	memcpy(b->md, next, nn * sizeof(next[0]));
	b->n = nn;
	return nl;
}

static void test_fault_random(void **state)
{
	static struct book b;
	static struct ack acks[1 << 16];
	struct tctx *t = *state;
	const char *env = getenv("IGNIS_TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : DEFAULT_SEED, rng;
	uint64_t total_acks = 0, total_kept = 0, total_reclaimed = 0;
	struct arena *a;

	print_message("# fault-random: seed %" PRIu64 " (set IGNIS_TEST_SEED to try another)\n",
	              seed);
	rng = seed;
	b.n = 0;
	a = open_ok(t->name, RAND_BYTES);
	arena_close(a);
	for (uint32_t round = 0; round < RAND_ROUNDS; round++) {
		struct timespec delay = {0, (long)(mix(&rng) % 5000) * 1000};
		struct arena_stats st;
		struct child c;
		char what[96];
		size_t na;

		snprintf(what, sizeof(what), "seed %" PRIu64 " round %u", seed, round);
		c = spawn(child_random, t->name,
		          ((uint64_t)(round + 1) << 40) | (mix(&rng) & ((1ull << 40) - 1)));
		(void)fcntl(c.rd, F_SETPIPE_SZ, 1 << 20); /* the child seldom waits on it */
		nanosleep(&delay, NULL);
		kill_child(&c);
		na = collect(&c, 0, acks, sizeof(acks) / sizeof(acks[0]));
		close(c.rd);
		total_acks += na;
		book_apply(&b, acks, na, what);
		a = open_ok(t->name, RAND_BYTES);
		arena_stats(a, &st);
		total_reclaimed += st.reclaimed_sequences;
		total_kept += book_check(&b, a, what);
		arena_close(a);
	}
	print_message("# fault-random: %d rounds, %" PRIu64 " acks checked, %" PRIu64
	              " sequences kept, %" PRIu64 " reservations reclaimed\n",
	              RAND_ROUNDS, total_acks, total_kept, total_reclaimed);
}

/*
 * Killed at every crash point in turn (arena.c's ARENA_CRASH_POINTS): the
 * child recovers an arena holding a partial sequence P and a reservation Z
 * with nothing committed, then runs a fixed script that reuses a dropped
 * sequence's slot, extent and window records; it SIGKILLs itself at its Nth
 * crash point, for N = 1, 2, ... until the script ends first.
 */
extern long arena__crash_countdown;

#define SCRIPT_P 11
#define SCRIPT_Z 12

static void child_reserve(int wr, struct arena *a, struct held *h, uint32_t commits)
{
	static struct arena_window w[RAND_MAXW];
	struct ig_errbuf eb;

	if (arena_reserve(a, &h->m, &h->off, &eb))
		_exit(4);
	send_ack(wr, ACK_RESERVED, h->m.seq, h->m.windows, 0);
	fill(arena_base(a), h->off, &h->m);
	child_commit(wr, a, h, 0, commits);
	if (arena_get(a, h->m.seq, NULL, w, RAND_MAXW, &eb))
		_exit(8);
}

static void child_script(int wr, const char *name, uint64_t arg)
{
	/* after recovery Z's block, slot and window record are free: 101 takes
	 * them; 103 then takes 101's block, slot and (committed) records */
	struct held h101 = {meta_of(101, I, 3 * 4096, 4096), 0},
	            h102 = {meta_of(102, A, 2 * BLK, 65536), 0},
	            h103 = {meta_of(103, A, BLK, 32768), 0},
	            p = {meta_of(SCRIPT_P, A, 4 * 4096, 4096), 0};
	struct ig_errbuf eb;
	struct arena_info info;
	struct arena *a;

	arena__crash_countdown = (long)arg;
	a = child_open(wr, name, FAULT_BYTES);
	child_reserve(wr, a, &h101, h101.m.windows);
	child_reserve(wr, a, &h102, 1);
	child_drop(wr, a, 101);
	child_reserve(wr, a, &h103, h103.m.windows);
	if (h103.off != h101.off)
		_exit(10);
	/* a retried commit, then P finished, then 102 dropped */
	if (arena_commit(a, 103, 0, 32768, sum_of(arena_base(a), h103.off, &h103.m, 0), &eb))
		_exit(9);
	if (arena_get(a, SCRIPT_P, &info, NULL, 0, &eb))
		_exit(8);
	p.off = info.offset;
	child_commit(wr, a, &p, 2, 4);
	child_drop(wr, a, 102);
	send_ack(wr, ACK_DONE, 0, 0, 0);
	for (;;)
		pause();
}

static void test_fault_every_point(void **state)
{
	static struct book b;
	struct tctx *t = *state;
	struct ig_errbuf eb = {0};
	long points = 0;
	bool ended = false;

	for (long nth = 1; !ended; nth++) {
		struct arena_meta mp = meta_of(SCRIPT_P, A, 4 * 4096, 4096),
		                  mz = meta_of(SCRIPT_Z, I, BLK, 65536);
		struct ack acks[64];
		struct arena *a;
		struct child c;
		char what[64];
		uint64_t offp;
		size_t na;

		snprintf(what, sizeof(what), "crash point %ld", nth);
		(void)arena_unlink(t->name, NULL);
		a = open_ok(t->name, FAULT_BYTES);
		offp = put(a, &mp, 2);
		put(a, &mz, 0);
		b.n = 0;
		book_find(&b, SCRIPT_P, true)->windows = mp.windows;
		book_find(&b, SCRIPT_Z, true)->windows = mz.windows;
		for (uint32_t k = 0; k < 2; k++) {
			b.md[0].mask |= 1ull << k;
			b.md[0].x[k] = sum_of(arena_base(a), offp, &mp, k);
		}
		arena_close(a);

		c = spawn(child_script, t->name, (uint64_t)nth);
		na = 0;
		while (na < 64 && read_ack(c.rd, &acks[na])) {
			if (acks[na].op == ACK_ERROR)
				fail_msg("%s: the child failed: %s", what,
				         ig_err_name((int)acks[na].xxh));
			if (acks[na++].op == ACK_DONE) {
				ended = true;
				break;
			}
		}
		kill_child(&c);
		close(c.rd);
		book_apply(&b, acks, na, what);
		a = open_ok(t->name, FAULT_BYTES);
		book_check(&b, a, what);
		if (ended) {
			/* the whole script ran: P complete, 102 gone, 103 whole */
			assert_int_equal(verify(a, SCRIPT_P), 4);
			assert_int_equal(verify(a, 103), 2);
			assert_int_equal(arena_get(a, 102, NULL, NULL, 0, &eb), IG_E_NOTFOUND);
			assert_int_equal(arena_get(a, SCRIPT_Z, NULL, NULL, 0, &eb), IG_E_NOTFOUND);
		}
		arena_close(a);
		points = nth - 1;
	}
	print_message("# fault-every-point: killed at each of %ld crash points\n", points);
	assert_true(points >= 30);
}

/*
 * Retained slots killed at every crash point: the child recovers an arena
 * whose slot 2 was captured and never published, captures and publishes
 * key 4 into it, captures key 5 (which gives up key 1, the checkpoint),
 * publishes it, claims key 2 and drops key 4. Whatever the instant: every
 * held slot's bytes match its checksum, key 2 is always held, and a
 * publish acknowledged is held until the script itself removes it.
 */
#define ACK_SLOT_PUB 50u

static void child_slot_put(int wr, struct arena *a, uint64_t key, uint32_t kind, uint64_t *gen)
{
	struct arena_slot_meta m = smeta(key, kind, A, SLOT_BYTES - key);
	struct arena_slot_info in, up;
	struct ig_errbuf eb;
	uint8_t *p;

	if (arena_slot_capture(a, &m, NULL, NULL, &in, &up, &eb))
		_exit(20);
	p = (uint8_t *)arena_base(a) + in.offset;
	pattern(p, m.image_bytes, key, 99);
	if (arena_slot_publish(a, in.slot, in.gen, kvcopy_sum(p, m.image_bytes), &eb))
		_exit(21);
	*gen = in.gen;
	send_ack(wr, ACK_SLOT_PUB, key, in.slot, in.gen);
}

static void child_slot_script(int wr, const char *name, uint64_t arg)
{
	struct arena_slot_info in;
	struct ig_errbuf eb;
	struct arena *a = NULL;
	uint64_t gen4, gen5;

	arena__crash_countdown = (long)arg;
	if (arena_open_slots(&a, name, 4 * BLK, 3, SLOT_BYTES, &eb)) {
		send_ack(wr, ACK_ERROR, 0, 0, IG_E_INVAL);
		_exit(2);
	}
	send_ack(wr, ACK_OPEN, 0, 0, 0);
	child_slot_put(wr, a, 4, ARENA_PREFIX, &gen4);
	child_slot_put(wr, a, 5, ARENA_PREFIX, &gen5);
	if (arena_slot_claim(a, 2, 7, 0, &in, &eb))
		_exit(22);
	if (arena_slot_drop(a, 2, gen4, &eb))
		_exit(23);
	send_ack(wr, ACK_DONE, 0, 0, 0);
	for (;;)
		pause();
}

static void test_fault_slots_every_point(void **state)
{
	struct tctx *t = *state;
	long points = 0;
	bool ended = false;

	for (long nth = 1; !ended; nth++) {
		struct arena_slot_meta m3 = smeta(3, ARENA_CHECKPOINT, I, 10);
		struct arena_slot_info in, up, list[3];
		struct ig_errbuf eb = {0};
		bool pub4 = false, pub5 = false, held[6] = {false};
		struct ack acks[16];
		struct arena *a;
		struct child c;
		size_t na = 0;

		(void)arena_unlink(t->name, NULL);
		a = open_slots_ok(t->name, 4 * BLK, 3);
		slot_put(a, 1, ARENA_CHECKPOINT, A, NULL);
		slot_put(a, 2, ARENA_PREFIX, I, NULL);
		assert_int_equal(arena_slot_capture(a, &m3, NULL, NULL, &in, &up, &eb), IG_E_OK);
		arena_close(a);

		c = spawn(child_slot_script, t->name, (uint64_t)nth);
		while (na < 16 && read_ack(c.rd, &acks[na])) {
			if (acks[na].op == ACK_ERROR)
				fail_msg("crash point %ld: the child failed", nth);
			if (acks[na].op == ACK_SLOT_PUB) {
				pub4 |= acks[na].seq == 4;
				pub5 |= acks[na].seq == 5;
			}
			if (acks[na++].op == ACK_DONE) {
				ended = true;
				break;
			}
		}
		kill_child(&c);
		close(c.rd);

		a = open_slots_ok(t->name, 4 * BLK, 3);
		assert_int_equal(arena_slot_list(a, 0, list, 3), 3);
		for (int i = 0; i < 3; i++) {
			const uint8_t *p = (const uint8_t *)arena_base(a) + list[i].offset;

			if (list[i].state != ARENA_SLOT_HELD)
				continue;
			if (list[i].meta.key < 1 || list[i].meta.key > 5 || list[i].meta.key == 3)
				fail_msg("crash point %ld: slot %d holds key %" PRIu64, nth, i,
				         list[i].meta.key);
			if (held[list[i].meta.key])
				fail_msg("crash point %ld: key %" PRIu64 " held twice", nth,
				         list[i].meta.key);
			held[list[i].meta.key] = true;
			if (kvcopy_sum(p, list[i].meta.image_bytes) != list[i].sum)
				fail_msg("crash point %ld: slot %d (key %" PRIu64
				         ") is held but its bytes do not match its sum",
				         nth, i, list[i].meta.key);
		}
		if (!held[2])
			fail_msg("crash point %ld: key 2 (never given up) is gone", nth);
		if (pub4 && !pub5 && !held[4])
			fail_msg("crash point %ld: key 4's publish was acknowledged, it is gone",
			         nth);
		if (pub5 && !held[5])
			fail_msg("crash point %ld: key 5's publish was acknowledged, it is gone",
			         nth);
		if (ended)
			assert_true(!held[1] && !held[4] && held[5]);
		arena_close(a);
		points = nth - 1;
	}
	print_message("# fault-slots: killed at each of %ld crash points\n", points);
	assert_true(points >= 15);
}

/* Killed while creating the object: the name holds a whole arena or
 * nothing. */
static void child_create(int wr, const char *name, uint64_t arg)
{
	(void)child_open(wr, name, arg);
	for (;;)
		pause();
}

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void test_fault_create(void **state)
{
	struct tctx *t = *state;
	uint64_t rng = DEFAULT_SEED, whole = 0, span;
	struct ig_errbuf eb = {0};
	struct child c;
	struct ack x[2];
	double t0;

	/* how long a whole creation takes here: kill within 1.5 times that */
	t0 = now_us();
	c = spawn(child_create, t->name, 128 * BLK);
	collect(&c, ACK_OPEN, x, 2);
	span = (uint64_t)((now_us() - t0) * 1.5) + 1;
	kill_child(&c);
	close(c.rd);
	assert_int_equal(arena_unlink(t->name, &eb), IG_E_OK);
	for (int round = 0; round < 20; round++) {
		struct timespec delay = {0, (long)(mix(&rng) % span) * 1000};
		struct arena_stats st;
		struct arena *a;

		c = spawn(child_create, t->name, 128 * BLK);
		nanosleep(&delay, NULL);
		kill_child(&c);
		whole += collect(&c, 0, x, 2);
		close(c.rd);
		a = open_ok(t->name, 128 * BLK);
		arena_stats(a, &st);
		assert_int_equal(st.sequences, 0);
		assert_int_equal(st.free_bytes, 128 * BLK);
		check(a);
		arena_close(a);
		assert_int_equal(arena_unlink(t->name, &eb), IG_E_OK);
	}
	print_message("# fault-create: a creation takes ~%" PRIu64 " us; %" PRIu64
	              " of 20 children had opened before the kill\n",
	              span * 2 / 3, whole);
}

/* The knob table's ranges (common/knobs.h) are the tier's: --reuse-kv-ram-bytes
 * takes what arena_open takes, no more and no less, and KV-disk on takes
 * one window, the ARENA_BLOCK the daemon gives kvdisk_open as its least. */
static void test_knob_ranges(void **state)
{
	struct tctx *t = *state;
	struct knob_range ram[2], disk[3];
	struct arena *a = NULL;
	struct ig_errbuf eb = {0};
	char want[128];

	assert_int_equal(knob_ranges(KNOB_REUSE_KV_RAM_BYTES, ram, 2), 1);
	snprintf(want, sizeof(want), "the arena takes %" PRIu64 " to %" PRIu64 " bytes", ram[0].lo,
	         ram[0].hi);
	assert_int_equal(arena_open(&a, t->name, ram[0].lo - 1, &eb), IG_E_CONFIG);
	assert_non_null(strstr(eb.msg, want));
	assert_int_equal(arena_open(&a, t->name, ram[0].hi + 1, &eb), IG_E_CONFIG);
	assert_non_null(strstr(eb.msg, want));
	a = open_ok(t->name, ram[0].lo);
	arena_close(a);

	assert_int_equal(knob_ranges(KNOB_REUSE_KV_DISK_BYTES, disk, 3), 2);
	assert_int_equal(disk[0].lo, 0);
	assert_int_equal(disk[0].hi, 0);
	assert_int_equal(disk[1].lo, ARENA_BLOCK);
	assert_true(disk[1].hi == UINT64_MAX);
}

/* ---- registration ---- */

#define T(f, tag) cmocka_unit_test_prestate_setup_teardown(f, setup, teardown, (void *)(tag))

/* An argument runs only the tests whose names match it (cmocka's filter). */
int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    T(test_placement, "placement"),
	    T(test_victims, "victims"),
	    T(test_victims_ex, "victims-ex"),
	    T(test_fits_if_given_up, "fits"),
	    T(test_full_figures, "full"),
	    T(test_index_full, "index"),
	    T(test_refusals, "refusals"),
	    T(test_commit_checksum, "checksum"),
	    T(test_map_client, "map"),
	    T(test_reopen, "reopen"),
	    T(test_refused_at_open, "corrupt"),
	    T(test_knob_ranges, "knob-ranges"),
	    T(test_damaged_records, "damaged"),
	    T(test_damaged_header, "damaged-header"),
	    T(test_slots_basic, "slots"),
	    T(test_slots_give_up_order, "slots-order"),
	    T(test_slots_reopen, "slots-reopen"),
	    T(test_fault_reserved_not_committed, "fault-a"),
	    T(test_fault_mid_commit, "fault-b"),
	    T(test_fault_random, "fault-c"),
	    T(test_fault_every_point, "fault-d"),
	    T(test_fault_create, "fault-create"),
	    T(test_fault_slots_every_point, "fault-slots"),
	};

	if (argc > 1)
		cmocka_set_test_filter(argv[1]);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
