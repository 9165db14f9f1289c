/*
 * test_kvdisk.c - KV-disk on LMDB: round trips byte for byte at several
 * window shapes, the ceiling ("tier full" at once, nothing written), the
 * volume rule, duplicates, drops, lists and stats, reopening; records
 * damaged on disk (bytes flipped in data.mdb, headers rewritten with a
 * consistent checksum, records removed) reported lost and never served;
 * processes killed with SIGKILL mid-put leave every acknowledged sequence
 * and nothing partial; sequences written and read a window at a time
 * (streams: a move straight from or to the device); a volume another file
 * fills after the open, data.mdb's blocks taken as on a filesystem without
 * fallocate: "tier full", never a SIGBUS (a tmpfs in a mount namespace of a
 * child; skipped where none can be made).
 *
 * The on-disk record layout is pinned here on purpose (HDR, the offsets
 * below): a change to kvdisk.c's layout must show up as a test change.
 * Randomness takes a printed seed (IGNIS_TEST_SEED to try another).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <lmdb.h>
#include <xxhash.h>

#include "kvram/kvcopy.h"
#include "kvstore-daemon/kvdisk.h"

#define DEFAULT_SEED 20250611ull
#define MiB          (1ull << 20)
#define KiB          (1ull << 10)

/* The record header as kvdisk.c writes it (on disk: never renumber). */
#define HDR         88u
#define OFF_VERSION 4u
#define OFF_KIND    6u
#define OFF_PUTID   16u
#define OFF_MODEL   24u
#define OFF_KVFMT   40u
#define OFF_WBYTES  48u
#define OFF_WINDOW  56u
#define OFF_LEN     64u
#define OFF_XXH     72u
#define OFF_HXXH    80u
#define SEQREC      UINT32_MAX /* "the sequence record" in edits below */

/* ---- helpers ------------------------------------------------------------ */

static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t seed_of(void)
{
	const char *env = getenv("IGNIS_TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : DEFAULT_SEED;

	print_message("# kvdisk: seed %" PRIu64 " (set IGNIS_TEST_SEED to try another)\n", seed);
	return seed;
}

static char *tmpdir(void)
{
	const char *t = getenv("TMPDIR");
	char *p = malloc(4096);

	assert_non_null(p);
	snprintf(p, 4096, "%s/ignis-kvdisk-XXXXXX", t && t[0] ? t : "/tmp");
	assert_non_null(mkdtemp(p));
	return p;
}

static void rmdir_all(char *dir)
{
	const char *names[] = {"data.mdb", "lock.mdb", "kvdisk.state"};
	char p[4200];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
		unlink(p);
	}
	rmdir(dir);
	free(dir);
}

static struct kvdisk *open_ok(const char *dir, uint64_t ceiling)
{
	struct ig_errbuf eb = {0};
	struct kvdisk *d = NULL;
	int rc = kvdisk_open(&d, dir, ceiling, 4096, KVDISK_OPEN_IGNORE_VOLUME, &eb);

	if (rc)
		fail_msg("kvdisk_open(%s): %s: %s", dir, ig_err_name(rc), eb.msg);
	return d;
}

/* A sequence's image, placed at `off` inside a larger buffer (as in the
 * arena), bytes a function of (seq, position). */
struct img {
	struct arena_meta m;
	unsigned char *buf;
	uint64_t off;
	struct arena_window w[ARENA_MAX_WINDOWS];
};

/* The image's bytes: 8 at a time from (seq, salt, position). */
static void fill(unsigned char *p, uint64_t seq, uint64_t salt, uint64_t n)
{
	for (uint64_t i = 0; i < n; i += 8) {
		uint64_t z =
		    (seq * 0x100000001b3ull) ^ (salt << 48) ^ ((i >> 3) * 0x9e3779b97f4a7c15ull);

		z ^= z >> 29;

		for (uint64_t j = 0; j < 8 && i + j < n; j++)
			p[i + j] = (unsigned char)(z >> (8 * j));
	}
}

static struct img *img_make(uint64_t seq, uint64_t image, uint32_t window, uint64_t salt)
{
	struct img *g = calloc(1, sizeof(*g));

	assert_non_null(g);
	g->off = 4096 + (seq % 7) * 64;
	g->buf = malloc(g->off + image);
	assert_non_null(g->buf);
	memset(g->buf, 0xee, g->off);
	fill(g->buf + g->off, seq, salt, image);
	g->m = (struct arena_meta){.seq = seq,
	                           .model_id = 0x1234abcd5678ef00ull + (salt & 1),
	                           .kv_format = 1,
	                           .cls = (uint32_t)(seq & 1),
	                           .image_bytes = image,
	                           .window_bytes = window,
	                           .windows = (uint32_t)((image + window - 1) / window)};
	for (uint32_t k = 0; k < g->m.windows; k++) {
		uint64_t at = (uint64_t)k * window;
		uint64_t len = image - at < window ? image - at : window;

		g->w[k] =
		    (struct arena_window){g->off + at, len, kvcopy_sum(g->buf + g->off + at, len)};
	}
	return g;
}

static void img_free(struct img *g)
{
	free(g->buf);
	free(g);
}

static uint64_t stored_of(const struct arena_meta *m)
{
	return (uint64_t)HDR * (m->windows + 1) + m->image_bytes;
}

static void put_ok(struct kvdisk *d, const struct img *g)
{
	struct ig_errbuf eb = {0};
	int rc = kvdisk_put(d, &g->m, g->buf, g->w, &eb);

	if (rc)
		fail_msg("put seq %" PRIu64 ": %s: %s", g->m.seq, ig_err_name(rc), eb.msg);
}

/* Read `g`'s sequence back and compare every byte and its identity. */
static void get_same(struct kvdisk *d, const struct img *g)
{
	struct ig_errbuf eb = {0};
	struct arena_meta m;
	unsigned char *dst = malloc(g->m.image_bytes + 64);
	static uint64_t sums[ARENA_MAX_WINDOWS];
	int rc;

	assert_non_null(dst);
	memset(dst + g->m.image_bytes, 0x5a, 64);
	memset(sums, 0, sizeof(sums));
	rc = kvdisk_get(d, g->m.seq, &m, dst, g->m.image_bytes, sums, &eb);
	if (rc)
		fail_msg("get seq %" PRIu64 ": %s: %s", g->m.seq, ig_err_name(rc), eb.msg);
	assert_memory_equal(&m, &g->m, sizeof(m));
	assert_memory_equal(dst, g->buf + g->off, g->m.image_bytes);
	for (int i = 0; i < 64; i++)
		assert_int_equal(dst[g->m.image_bytes + i], 0x5a); /* nothing past the image */
	for (uint32_t k = 0; k < g->m.windows; k++) /* each window's checksum, as put */
		assert_int_equal(sums[k], g->w[k].sum);
	free(dst);
}

static int get_rc(struct kvdisk *d, uint64_t seq, uint64_t image, struct ig_errbuf *eb)
{
	unsigned char *dst = malloc(image ? image : 1);
	int rc;

	assert_non_null(dst);
	rc = kvdisk_get(d, seq, NULL, dst, image, NULL, eb);
	free(dst);
	return rc;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- raw access to the environment (the test's own LMDB handle) -------- */

static void putbe64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (56 - 8 * i));
}

static void put64le(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get64le(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

struct raw {
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi seq, win;
};

static void raw_open(struct raw *r, const char *dir)
{
	assert_int_equal(mdb_env_create(&r->env), 0);
	assert_int_equal(mdb_env_set_maxdbs(r->env, 2), 0);
	assert_int_equal(mdb_env_open(r->env, dir, 0, 0600), 0);
	assert_int_equal(mdb_txn_begin(r->env, NULL, 0, &r->txn), 0);
	assert_int_equal(mdb_dbi_open(r->txn, "seq", 0, &r->seq), 0);
	assert_int_equal(mdb_dbi_open(r->txn, "win", 0, &r->win), 0);
}

static void raw_close(struct raw *r)
{
	assert_int_equal(mdb_txn_commit(r->txn), 0);
	mdb_env_close(r->env);
}

static void raw_key(unsigned char kb[16], MDB_val *k, uint64_t seq, uint32_t win)
{
	putbe64(kb, seq);
	putbe64(kb + 8, win);
	k->mv_data = kb;
	k->mv_size = win == SEQREC ? 8 : 16;
}

/* How a test damages one record. */
struct edit {
	const char *name;
	uint32_t window;   /* SEQREC: the sequence record */
	uint32_t off;      /* header field, or HDR + n for payload byte n */
	uint64_t add;      /* added to the 8 (or 1) bytes there */
	bool rehash;       /* recompute the header's checksum (a consistent forgery) */
	bool payload_xxh;  /* also set the header's payload checksum to the new bytes' */
	const char *want;  /* in the KV_LOST message */
	const char *where; /* and this too, unless NULL */
};

static void raw_edit(const char *dir, uint64_t seq, const struct edit *e)
{
	unsigned char kb[16], *val;
	struct raw r;
	MDB_val k, v;

	raw_open(&r, dir);
	raw_key(kb, &k, seq, e->window);
	assert_int_equal(mdb_get(r.txn, e->window == SEQREC ? r.seq : r.win, &k, &v), 0);
	val = malloc(v.mv_size);
	assert_non_null(val);
	memcpy(val, v.mv_data, v.mv_size);
	if (e->off >= HDR)
		val[e->off] = (unsigned char)(val[e->off] + e->add);
	else if (e->off == OFF_VERSION || e->off == OFF_KIND)
		val[e->off] = (unsigned char)(val[e->off] + e->add);
	else
		put64le(val + e->off, get64le(val + e->off) + e->add);
	if (e->payload_xxh)
		put64le(val + OFF_XXH, kvcopy_sum(val + HDR, v.mv_size - HDR));
	if (e->rehash)
		put64le(val + OFF_HXXH, XXH64(val, 80, 0));
	v.mv_data = val;
	assert_int_equal(mdb_put(r.txn, e->window == SEQREC ? r.seq : r.win, &k, &v, 0), 0);
	free(val);
	raw_close(&r);
}

static void raw_del(const char *dir, uint64_t seq, uint32_t win)
{
	unsigned char kb[16];
	struct raw r;
	MDB_val k;

	raw_open(&r, dir);
	raw_key(kb, &k, seq, win);
	assert_int_equal(mdb_del(r.txn, win == SEQREC ? r.seq : r.win, &k, NULL), 0);
	raw_close(&r);
}

/* Window records of `seq` in the environment, counted with raw LMDB. */
static unsigned raw_count(const char *dir, uint64_t seq)
{
	unsigned char kb[16];
	unsigned n = 0;
	struct raw r;
	MDB_cursor *c;
	MDB_val k, v;

	raw_open(&r, dir);
	raw_key(kb, &k, seq, 0);
	assert_int_equal(mdb_cursor_open(r.txn, r.win, &c), 0);
	for (int rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE); !rc;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
		unsigned char want[8];

		putbe64(want, seq);
		if (memcmp(k.mv_data, want, 8))
			break;
		n++;
	}
	mdb_cursor_close(c);
	raw_key(kb, &k, seq, SEQREC);
	if (!mdb_get(r.txn, r.seq, &k, &v))
		n++;
	raw_close(&r);
	return n;
}

/* Flip a byte of data.mdb itself at the first place `needle` occurs
 * (+ `delta`). */
static void flip_in_file(const char *dir, const void *needle, size_t n, long delta)
{
	char p[4200];
	struct stat sb;
	unsigned char *map, *at, b;
	int fd;

	if (!needle)
		abort(); /* (tells gcc -fsanitize what cmocka's asserts do not) */
	snprintf(p, sizeof(p), "%s/data.mdb", dir);
	fd = open(p, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &sb), 0);
	map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(map != MAP_FAILED);
	at = memmem(map, (size_t)sb.st_size, needle, n);
	assert_non_null(at);
	/* the needle occurs once: each record was written once */
	assert_null(memmem(at + 1, (size_t)sb.st_size - (size_t)(at + 1 - map), needle, n));
	b = (unsigned char)(at[delta] ^ 0x20);
	assert_int_equal(pwrite(fd, &b, 1, (at - map) + delta), 1);
	munmap(map, (size_t)sb.st_size);
	close(fd);
}

/* Write kvdisk.state as a machine that stopped under boot `boot` would
 * have left it (format pinned: kvdisk.c, kvdisk__state_write). */
static void write_state(const char *dir, const char *state, const char *boot)
{
	char p[4200], line[80];
	int n = snprintf(line, sizeof(line), "kvdisk-state 1 %-5s %-36s ", state, boot);
	FILE *f;

	snprintf(line + n, sizeof(line) - (size_t)n, "%016" PRIx64 "\n", XXH64(line, (size_t)n, 0));
	snprintf(p, sizeof(p), "%s/kvdisk.state", dir);
	f = fopen(p, "w");
	assert_non_null(f);
	assert_int_equal(fputs(line, f) >= 0, 1);
	fclose(f);
}

/* ---- round trips ------------------------------------------------------- */

static const struct shape {
	const char *name;
	uint32_t window;
	uint64_t image;
} shapes[] = {
    {"one whole window", 64 * KiB, 64 * KiB},
    {"one short window", 64 * KiB, 1000},
    {"one byte", 4096, 1},
    {"4 windows of 256 KiB, exact", 256 * KiB, 1 * MiB},
    {"5 windows of 256 KiB, the last short", 256 * KiB, 1 * MiB + 4097},
    {"3 windows of 1 MiB, the last one byte", 1 * MiB, 2 * MiB + 1},
    {"301 windows of 4 KiB", 4096, 4096 * 300 + 7},
    {"2 windows of 3 MiB, the last short", 3 * MiB, 5 * MiB + 12345},
    {"an odd window size", 100003, 100003 * 3 + 17},
};
#define N_SHAPES (sizeof(shapes) / sizeof(shapes[0]))

static void test_roundtrip_and_reopen(void **state)
{
	struct img *g[N_SHAPES];
	struct kvdisk_stats st;
	struct kvdisk_seq ls[N_SHAPES + 1];
	uint64_t used = 0;
	char *dir = tmpdir();
	struct kvdisk *d = open_ok(dir, 64 * MiB);

	(void)state;
	for (size_t i = 0; i < N_SHAPES; i++) {
		g[i] = img_make(100 + i, shapes[i].image, shapes[i].window, i);
		put_ok(d, g[i]);
		used += stored_of(&g[i]->m);
	}
	for (size_t i = 0; i < N_SHAPES; i++) {
		print_message("# %s\n", shapes[i].name);
		get_same(d, g[i]);
	}
	kvdisk_stats(d, &st);
	assert_int_equal(st.sequences, N_SHAPES);
	assert_int_equal(st.used_bytes, used);
	assert_int_equal(st.writes, N_SHAPES);
	assert_int_equal(st.reads, N_SHAPES);
	assert_int_equal(st.ceiling_bytes, 64 * MiB);
	kvdisk_close(d);

	/* a restarted daemon serves every acknowledged window, byte for byte */
	d = open_ok(dir, 64 * MiB);
	kvdisk_stats(d, &st);
	assert_int_equal(st.sequences, N_SHAPES);
	assert_int_equal(st.used_bytes, used);
	assert_int_equal(st.lost, 0);
	assert_int_equal(kvdisk_list(d, ls, N_SHAPES + 1), N_SHAPES);
	for (size_t i = 0; i < N_SHAPES; i++) {
		assert_memory_equal(&ls[i].meta, &g[i]->m, sizeof(ls[i].meta));
		assert_int_equal(ls[i].stored_bytes, stored_of(&g[i]->m));
		get_same(d, g[i]);
	}
	kvdisk_close(d);
	kvdisk_close(NULL); /* idempotent on nothing */
	for (size_t i = 0; i < N_SHAPES; i++)
		img_free(g[i]);
	rmdir_all(dir);
}

/* ---- the ceiling ------------------------------------------------------- */

static void test_tier_full_at_once(void **state)
{
	struct ig_errbuf eb = {0};
	struct kvdisk_stats st;
	char *dir = tmpdir();
	struct kvdisk *d = open_ok(dir, 1 * MiB);
	struct img *a = img_make(1, 600 * KiB, 256 * KiB, 0);
	struct img *b = img_make(2, 500 * KiB, 256 * KiB, 0);
	struct img *c;
	uint64_t left;
	double t;
	int rc;

	(void)state;
	assert_true(kvdisk_fits(d, &a->m));
	put_ok(d, a);
	assert_false(kvdisk_fits(d, &b->m)); /* the question a put would answer */
	t = now_s();
	rc = kvdisk_put(d, &b->m, b->buf, b->w, &eb);
	t = now_s() - t;
	assert_int_equal(rc, IG_E_NOSPACE);
	assert_non_null(strstr(eb.msg, "tier full"));
	assert_non_null(strstr(eb.msg, "nothing written"));
	assert_true(t < 0.1); /* at once: arithmetic, no I/O */
	kvdisk_stats(d, &st);
	assert_int_equal(st.refusals_full, 1);
	assert_int_equal(st.used_bytes, stored_of(&a->m));
	assert_int_equal(st.sequences, 1);
	assert_int_equal(get_rc(d, 2, b->m.image_bytes, &eb), IG_E_NOTFOUND);

	/* exactly up to the ceiling fits; one byte more does not */
	left = 1 * MiB - stored_of(&a->m);
	c = img_make(3, left - 2 * HDR + 1, 512 * KiB, 0);
	assert_false(kvdisk_fits(d, &c->m));
	assert_int_equal(kvdisk_put(d, &c->m, c->buf, c->w, &eb), IG_E_NOSPACE);
	img_free(c);
	c = img_make(3, left - 2 * HDR, 512 * KiB, 0);
	assert_true(kvdisk_fits(d, &c->m));
	put_ok(d, c);
	assert_false(kvdisk_fits(d, &c->m)); /* the ceiling is reached */
	kvdisk_stats(d, &st);
	assert_int_equal(st.used_bytes, 1 * MiB);
	assert_int_equal(st.refusals_full, 2);
	kvdisk_close(d);

	/* nothing of the refused one reached LMDB */
	assert_int_equal(raw_count(dir, 2), 0);
	d = open_ok(dir, 1 * MiB);
	get_same(d, a);
	get_same(d, c);
	kvdisk_stats(d, &st);
	assert_int_equal(st.used_bytes, 1 * MiB);
	kvdisk_close(d);

	/* a ceiling under one window is refused at open */
	d = (struct kvdisk *)1;
	assert_int_equal(kvdisk_open(&d, dir, 1000, 4096, KVDISK_OPEN_IGNORE_VOLUME, &eb),
	                 IG_E_CONFIG);
	assert_null(d);
	assert_non_null(strstr(eb.msg, "under one window"));
	img_free(a);
	img_free(b);
	img_free(c);
	rmdir_all(dir);
}

/* The volume rule: ceiling = min(flag, free + data.mdb's own blocks - 10
 * GiB), IG_E_CONFIG when that is under one window. The volume is the real
 * one under $TMPDIR, so the expected figures are computed from statvfs. */
static void test_volume_rule(void **state)
{
	struct ig_errbuf eb = {0};
	struct kvdisk_stats st;
	struct statvfs vs;
	struct kvdisk *d = NULL;
	char *dir = tmpdir();
	uint64_t room, vol, slack = 512 * MiB; /* other writers on a shared volume */
	int rc;

	(void)state;
	assert_int_equal(statvfs(dir, &vs), 0);
	room = (uint64_t)vs.f_bavail * vs.f_frsize;
	vol = room > KVDISK_VOLUME_RESERVE ? room - KVDISK_VOLUME_RESERVE : 0;
	print_message("# volume room %" PRIu64 " B, so min(flag, %" PRIu64 ")\n", room, vol);

	/* a flag larger than the volume gives the volume's figure */
	rc = kvdisk_open(&d, dir, 1ull << 60, 4096, 0, &eb);
	if (vol < 4096 + slack) {
		assert_int_equal(rc, IG_E_CONFIG);
		assert_non_null(strstr(eb.msg, "reserved"));
	} else {
		assert_int_equal(rc, IG_E_OK);
		kvdisk_stats(d, &st);
		print_message("# ceiling %" PRIu64 "\n", st.ceiling_bytes);
		assert_true(st.ceiling_bytes + slack > vol && st.ceiling_bytes < vol + slack);
		kvdisk_close(d);

		/* a flag under it is the ceiling */
		assert_int_equal(kvdisk_open(&d, dir, 8 * MiB, 4096, 0, &eb), IG_E_OK);
		kvdisk_stats(d, &st);
		assert_int_equal(st.ceiling_bytes, 8 * MiB);
		kvdisk_close(d);
	}
	/* a window larger than the volume's figure: refused, with the figures */
	rc = kvdisk_open(&d, dir, 1ull << 60, room + 1, false, &eb);
	assert_int_equal(rc, IG_E_CONFIG);
	assert_null(d);
	assert_non_null(strstr(eb.msg, "under one window"));
	assert_non_null(strstr(eb.msg, dir));
	rmdir_all(dir);
}

/* ---- duplicates, drops, lists, stats, bad input ------------------------ */

static void test_busy_drop_list_stat(void **state)
{
	struct ig_errbuf eb = {0};
	struct kvdisk_stats st;
	struct kvdisk_seq ls[8], one;
	struct img *g[5], *dup;
	char *dir = tmpdir();
	struct kvdisk *d = open_ok(dir, 16 * MiB);
	uint64_t used = 0;

	(void)state;
	for (int i = 0; i < 5; i++) {
		/* inserted out of order; listed in seq order */
		g[i] = img_make((uint64_t)(5 - i) * 1000 + 7, (uint64_t)(i + 1) * 70000, 65536, i);
		put_ok(d, g[i]);
		used += stored_of(&g[i]->m);
	}
	/* the same seq again: BUSY, the first one untouched */
	dup = img_make(g[2]->m.seq, 1000, 4096, 99);
	assert_int_equal(kvdisk_put(d, &dup->m, dup->buf, dup->w, &eb), IG_E_BUSY);
	assert_non_null(strstr(eb.msg, "already on disk"));
	get_same(d, g[2]);

	assert_int_equal(kvdisk_list(d, ls, 8), 5);
	for (int i = 0; i < 5; i++) {
		assert_memory_equal(&ls[i].meta, &g[4 - i]->m, sizeof(ls[i].meta));
		assert_int_equal(ls[i].stored_bytes, stored_of(&g[4 - i]->m));
	}
	assert_int_equal(kvdisk_list(d, ls, 2), 2);
	assert_int_equal(ls[1].meta.seq, g[3]->m.seq);

	assert_int_equal(kvdisk_stat(d, g[1]->m.seq, &one, &eb), IG_E_OK);
	assert_memory_equal(&one.meta, &g[1]->m, sizeof(one.meta));
	assert_int_equal(one.stored_bytes, stored_of(&g[1]->m));
	assert_int_equal(kvdisk_stat(d, 424242, &one, &eb), IG_E_NOTFOUND);

	assert_int_equal(kvdisk_drop(d, g[0]->m.seq, &eb), IG_E_OK);
	used -= stored_of(&g[0]->m);
	assert_int_equal(get_rc(d, g[0]->m.seq, g[0]->m.image_bytes, &eb), IG_E_NOTFOUND);
	assert_int_equal(kvdisk_drop(d, g[0]->m.seq, &eb), IG_E_NOTFOUND);
	/* the dropped seq may be put again */
	put_ok(d, g[0]);
	get_same(d, g[0]);
	assert_int_equal(kvdisk_drop(d, g[0]->m.seq, &eb), IG_E_OK);

	kvdisk_stats(d, &st);
	assert_int_equal(st.sequences, 4);
	assert_int_equal(st.used_bytes, used);
	assert_int_equal(st.writes, 6);
	assert_int_equal(st.reads, 2);
	assert_int_equal(st.drops, 2);
	assert_int_equal(st.lost, 0);
	assert_int_equal(st.refusals_full, 0);
	kvdisk_close(d);
	d = open_ok(dir, 16 * MiB);
	kvdisk_stats(d, &st);
	assert_int_equal(st.sequences, 4);
	assert_int_equal(st.used_bytes, used);
	kvdisk_close(d);
	for (int i = 0; i < 5; i++)
		img_free(g[i]);
	img_free(dup);
	rmdir_all(dir);
}

static void test_second_open_busy(void **state)
{
	struct ig_errbuf eb = {0};
	char *dir = tmpdir();
	struct kvdisk *d = open_ok(dir, 4 * MiB), *d2 = NULL;

	(void)state;
	assert_int_equal(kvdisk_open(&d2, dir, 4 * MiB, 4096, KVDISK_OPEN_IGNORE_VOLUME, &eb),
	                 IG_E_BUSY);
	assert_null(d2);
	assert_non_null(strstr(eb.msg, "another process"));
	kvdisk_close(d);
	d = open_ok(dir, 4 * MiB);
	kvdisk_close(d);
	rmdir_all(dir);
}

static void test_bad_input(void **state)
{
	struct ig_errbuf eb = {0};
	struct kvdisk_stats st;
	char *dir = tmpdir();
	struct kvdisk *d = open_ok(dir, 16 * MiB);
	struct img *g = img_make(9, 300 * KiB, 128 * KiB, 0);
	static struct img bad;
	unsigned char small[16];
	static const struct {
		const char *name;
		int field; /* 0 seq, 1 windows, 2 a window's length, 3 a checksum */
	} rows[] = {{"seq 0", 0}, {"window count", 1}, {"window length", 2}, {"checksum", 3}};

	(void)state;
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		print_message("# %s\n", rows[r].name);
		bad = *g;
		if (rows[r].field == 0)
			bad.m.seq = 0;
		else if (rows[r].field == 1)
			bad.m.windows++;
		else if (rows[r].field == 2)
			bad.w[1].len--;
		else
			bad.w[2].sum ^= 1;
		assert_int_equal(kvdisk_put(d, &bad.m, bad.buf, bad.w, &eb), IG_E_INVAL);
	}
	assert_non_null(strstr(eb.msg, "window 2")); /* the checksum row names it */
	/* nothing was left behind by any of them */
	kvdisk_stats(d, &st);
	assert_int_equal(st.used_bytes, 0);
	assert_int_equal(st.sequences, 0);
	put_ok(d, g);
	assert_int_equal(kvdisk_get(d, 9, NULL, small, sizeof(small), NULL, &eb), IG_E_INVAL);
	get_same(d, g); /* a short destination loses nothing */
	kvdisk_close(d);
	img_free(g);
	rmdir_all(dir);
}

/* ---- damage ------------------------------------------------------------ */

/* Three sequences, B in the middle with 3 windows; B damaged by `damage`,
 * then B must be reported lost naming `want` (and `window` unless NULL),
 * gone after, and A and C served. */
static void damage_case(void (*damage)(const char *dir, const struct img *b, const void *arg),
                        const void *arg, const char *want, const char *window)
{
	struct ig_errbuf eb = {0};
	struct kvdisk_stats st;
	struct kvdisk_seq ls[4];
	char *dir = tmpdir();
	struct kvdisk *d = open_ok(dir, 16 * MiB);
	struct img *a = img_make(11, 200 * KiB, 64 * KiB, 1);
	struct img *b = img_make(22, 200 * KiB, 80 * KiB, 2);
	struct img *c = img_make(33, 100 * KiB, 64 * KiB, 3);
	int rc;

	put_ok(d, a);
	put_ok(d, b);
	put_ok(d, c);
	kvdisk_close(d);
	damage(dir, b, arg);
	d = open_ok(dir, 16 * MiB);
	rc = get_rc(d, 22, b->m.image_bytes, &eb);
	print_message("#   -> %s: %s\n", ig_err_name(rc), eb.msg);
	assert_int_equal(rc, IG_E_KV_LOST);
	assert_non_null(strstr(eb.msg, "seq 22"));
	assert_non_null(strstr(eb.msg, want));
	if (window)
		assert_non_null(strstr(eb.msg, window));
	assert_int_equal(get_rc(d, 22, b->m.image_bytes, &eb), IG_E_NOTFOUND);
	get_same(d, a);
	get_same(d, c);
	kvdisk_stats(d, &st);
	assert_int_equal(st.lost, 1);
	assert_int_equal(st.sequences, 2);
	assert_int_equal(st.used_bytes, stored_of(&a->m) + stored_of(&c->m));
	assert_int_equal(kvdisk_list(d, ls, 4), 2);
	kvdisk_close(d);
	assert_int_equal(raw_count(dir, 22), 0); /* every record of it gone */
	img_free(a);
	img_free(b);
	img_free(c);
	rmdir_all(dir);
}

static void damage_edit(const char *dir, const struct img *b, const void *arg)
{
	raw_edit(dir, b->m.seq, arg);
}

/* Header fields rewritten through LMDB; with `rehash` the forgery is
 * consistent with its header checksum, so only the field checks catch it. */
static const struct edit edits[] = {
    {"model id (foreign)", 1, OFF_MODEL, 1, true, false, "foreign: model", "window 1"},
    {"KV format (foreign)", 2, OFF_KVFMT, 1, true, false, "foreign: model", "window 2"},
    {"layout version (foreign)", 0, OFF_VERSION, 1, true, false, "foreign: layout", "window 0"},
    {"window size (foreign)", 1, OFF_WBYTES, 1, true, false, "foreign: its shape", "window 1"},
    {"put id (stale)", 1, OFF_PUTID, 1, true, false, "stale", "window 1"},
    {"window index", 1, OFF_WINDOW, 1, true, false, "does not match its key", "window 1"},
    {"length", 2, OFF_LEN, 1, true, false, "torn", "window 2"},
    {"payload checksum field", 1, OFF_XXH, 1, true, false, "corrupt: the payload", "window 1"},
    {"header byte, unhashed", 1, OFF_MODEL, 1, false, false, "corrupt header", "window 1"},
    {"payload byte", 1, HDR + 777, 1, false, false, "corrupt: the payload", "window 1"},
    {"payload and its checksum (digest)", 1, HDR + 5, 1, true, true, "digest", NULL},
    {"sequence record's model id", SEQREC, OFF_MODEL, 1, true, false, "foreign: model", "window 0"},
    {"sequence record, unhashed", SEQREC, OFF_LEN, 1, false, false, "sequence record", NULL},
};

static void test_damaged_records(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
		print_message("# %s\n", edits[i].name);
		damage_case(damage_edit, &edits[i], edits[i].want, edits[i].where);
	}
}

/* Bytes flipped in data.mdb itself, found by searching for what was written. */
static void damage_flip_payload(const char *dir, const struct img *b, const void *arg)
{
	(void)arg;
	/* 64 bytes from the middle of window 1: unique to this record */
	flip_in_file(dir, b->buf + b->off + b->m.window_bytes + 1000, 64, 10);
}

static void damage_flip_header(const char *dir, const struct img *b, const void *arg)
{
	const long field = *(const long *)arg;
	unsigned char hdr[64];
	struct raw r;
	unsigned char kb[16];
	MDB_val k, v;

	/* the header of window 2 as written, read with raw LMDB to find it */
	raw_open(&r, dir);
	raw_key(kb, &k, b->m.seq, 2);
	assert_int_equal(mdb_get(r.txn, r.win, &k, &v), 0);
	memcpy(hdr, v.mv_data, sizeof(hdr));
	raw_close(&r);
	flip_in_file(dir, hdr, sizeof(hdr), field);
}

static void test_flipped_bytes_in_file(void **state)
{
	static const long image_bytes_field = 32, magic = 1;

	(void)state;
	print_message("# a payload byte\n");
	damage_case(damage_flip_payload, NULL, "corrupt: the payload", "window 1");
	print_message("# a header byte\n");
	damage_case(damage_flip_header, &image_bytes_field, "corrupt header", "window 2");
	print_message("# the magic\n");
	damage_case(damage_flip_header, &magic, "bad magic", "window 2");
}

static void damage_del_window(const char *dir, const struct img *b, const void *arg)
{
	(void)arg;
	raw_del(dir, b->m.seq, 1);
}

static void damage_del_seqrec(const char *dir, const struct img *b, const void *arg)
{
	(void)arg;
	raw_del(dir, b->m.seq, SEQREC);
}

/* A torn sequence is found by open's scan: dropped there, counted lost, and
 * reported lost to the first who asks. */
static void test_torn_found_at_open(void **state)
{
	(void)state;
	print_message("# a window record missing\n");
	damage_case(damage_del_window, NULL, "lost and dropped at open: torn: window 1 missing",
	            NULL);
	print_message("# the sequence record missing\n");
	damage_case(damage_del_seqrec, NULL, "without a sequence record", NULL);
}

/* After a machine crash (the state file says open under another boot), open
 * checks every window's header; a damaged one is dropped before anyone asks.
 * After a clean close, the same damage waits for a read. */
static void test_unclean_stop(void **state)
{
	static const long image_bytes_field = 32;
	struct ig_errbuf eb = {0};
	struct kvdisk_stats st;
	struct kvdisk_seq ls[4];
	uint64_t n;
	char *dir = tmpdir();
	struct kvdisk *d = open_ok(dir, 16 * MiB);
	struct img *a = img_make(11, 200 * KiB, 64 * KiB, 1);
	struct img *b = img_make(22, 200 * KiB, 80 * KiB, 2);
	char p[4200];
	int fd;

	(void)state;
	put_ok(d, a);
	put_ok(d, b);
	kvdisk_close(d);
	damage_flip_header(dir, b, &image_bytes_field);

	/* left open under another boot: the machine stopped */
	write_state(dir, "dirty", "00000000-0000-0000-0000-000000000000");
	d = open_ok(dir, 16 * MiB);
	kvdisk_stats(d, &st);
	assert_int_equal(st.lost, 1); /* another boot: the header walk found it */
	assert_int_equal(st.sequences, 1);
	assert_int_equal(kvdisk_list(d, ls, 4), 1);
	assert_int_equal(kvdisk_verify(d, 22, &n, &eb), IG_E_KV_LOST);
	assert_non_null(strstr(eb.msg, "dropped at open"));
	assert_non_null(strstr(eb.msg, "corrupt header"));
	assert_int_equal(kvdisk_verify(d, 22, &n, &eb), IG_E_NOTFOUND);
	get_same(d, a);
	kvdisk_close(d);

	/* LMDB's own meta pages destroyed by the crash: started afresh */
	snprintf(p, sizeof(p), "%s/data.mdb", dir);
	fd = open(p, O_WRONLY);
	assert_true(fd >= 0);
	{
		unsigned char junk[8192];

		memset(junk, 0xa5, sizeof(junk));
		assert_int_equal(pwrite(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
	}
	close(fd);
	/* ... refused after a clean close (a damaged disk, not a crash) */
	write_state(dir, "clean", "00000000-0000-0000-0000-000000000000");
	d = (struct kvdisk *)1;
	assert_int_equal(kvdisk_open(&d, dir, 16 * MiB, 4096, KVDISK_OPEN_IGNORE_VOLUME, &eb),
	                 IG_E_IO);
	assert_null(d);
	assert_non_null(strstr(eb.msg, "LMDB"));
	assert_non_null(strstr(eb.msg, "remove the directory"));
	/* ... started empty after a crash */
	write_state(dir, "dirty", "00000000-0000-0000-0000-000000000000");
	d = open_ok(dir, 16 * MiB);
	kvdisk_stats(d, &st);
	assert_int_equal(st.sequences, 0);
	assert_int_equal(st.used_bytes, 0);
	put_ok(d, a);
	get_same(d, a);
	kvdisk_close(d);
	img_free(a);
	img_free(b);
	rmdir_all(dir);
}

static void test_clean_and_same_boot_trusted(void **state)
{
	static const long image_bytes_field = 32;
	struct ig_errbuf eb = {0};
	struct kvdisk_stats st;
	char boot[64] = "";
	char *dir = tmpdir();
	struct kvdisk *d = open_ok(dir, 16 * MiB);
	struct img *a = img_make(11, 200 * KiB, 64 * KiB, 1);
	struct img *b = img_make(22, 200 * KiB, 80 * KiB, 2);
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

	(void)state;
	if (f) {
		if (!fgets(boot, sizeof(boot), f))
			boot[0] = '\0';
		fclose(f);
	}
	boot[strcspn(boot, "\n")] = '\0';
	put_ok(d, a);
	put_ok(d, b);
	kvdisk_close(d);
	damage_flip_header(dir, b, &image_bytes_field);
	if (strlen(boot) == 36)
		write_state(dir, "dirty", boot); /* a process killed on this boot */
	d = open_ok(dir, 16 * MiB);
	kvdisk_stats(d, &st);
	assert_int_equal(st.sequences, 2); /* no header walk: found on read */
	assert_int_equal(st.lost, 0);
	assert_int_equal(get_rc(d, 22, b->m.image_bytes, &eb), IG_E_KV_LOST);
	get_same(d, a);
	kvdisk_close(d);
	img_free(a);
	img_free(b);
	rmdir_all(dir);
}

static void test_verify(void **state)
{
	struct ig_errbuf eb = {0};
	struct kvdisk_stats st;
	uint64_t n;
	char *dir = tmpdir();
	struct kvdisk *d = open_ok(dir, 16 * MiB);
	struct img *g[3];

	(void)state;
	for (int i = 0; i < 3; i++) {
		g[i] = img_make((uint64_t)i + 1, (uint64_t)(i + 1) * 100 * KiB, 64 * KiB, i);
		put_ok(d, g[i]);
	}
	assert_int_equal(kvdisk_verify(d, 0, &n, &eb), IG_E_OK);
	assert_int_equal(n, g[0]->m.windows + g[1]->m.windows + g[2]->m.windows);
	assert_int_equal(kvdisk_verify(d, 2, &n, &eb), IG_E_OK);
	assert_int_equal(n, g[1]->m.windows);
	assert_int_equal(kvdisk_verify(d, 77, &n, &eb), IG_E_NOTFOUND);
	kvdisk_close(d);
	flip_in_file(dir, g[1]->buf + g[1]->off + 70 * KiB, 64, 3);
	d = open_ok(dir, 16 * MiB);
	assert_int_equal(kvdisk_verify(d, 0, &n, &eb), IG_E_KV_LOST);
	assert_non_null(strstr(eb.msg, "seq 2 window 1"));
	assert_int_equal(kvdisk_verify(d, 0, &n, &eb), IG_E_OK);
	assert_int_equal(n, g[0]->m.windows + g[2]->m.windows);
	kvdisk_stats(d, &st);
	assert_int_equal(st.lost, 1);
	assert_int_equal(st.sequences, 2);
	get_same(d, g[0]);
	get_same(d, g[2]);
	kvdisk_close(d);
	for (int i = 0; i < 3; i++)
		img_free(g[i]);
	rmdir_all(dir);
}

/* ---- kill -9 ------------------------------------------------------------ */

enum { MSG_PUTTING = 1, MSG_ACKED = 2, MSG_DROPPING = 3 };

struct note {
	uint32_t op;
	uint32_t pad;
	uint64_t seq;
};

/* The shape of seq `s` in the fault tests: 1..16 windows of 64 KiB, the
 * last one short. */
static uint64_t fault_image(uint64_t s)
{
	return 64 * KiB * (1 + mix(s) % 16) - mix(s ^ 7) % (64 * KiB - 1);
}

static void child_loop(const char *dir, uint64_t first, int fd)
{
	struct ig_errbuf eb = {0};
	struct kvdisk_seq ls[64];
	struct kvdisk *d = NULL;
	uint32_t nl;

	if (kvdisk_open(&d, dir, 16 * MiB, 4096, KVDISK_OPEN_IGNORE_VOLUME, &eb))
		_exit(3);
	/* what earlier children left goes first, so the store stays small */
	nl = kvdisk_list(d, ls, 64);
	for (uint32_t i = 0; i < nl; i++) {
		struct note n = {MSG_DROPPING, 0, ls[i].meta.seq};

		if (write(fd, &n, sizeof(n)) != sizeof(n))
			_exit(5);
		if (kvdisk_drop(d, ls[i].meta.seq, &eb))
			_exit(6);
	}
	for (uint64_t s = first;; s++) {
		struct img *g = img_make(s, fault_image(s), 64 * KiB, 0);
		struct note n = {MSG_PUTTING, 0, s};

		if (write(fd, &n, sizeof(n)) != sizeof(n))
			_exit(5);
		if (kvdisk_put(d, &g->m, g->buf, g->w, &eb))
			_exit(4);
		n.op = MSG_ACKED;
		if (write(fd, &n, sizeof(n)) != sizeof(n))
			_exit(5);
		img_free(g);
		if (s >= first + 6) { /* and the oldest of its own */
			n = (struct note){MSG_DROPPING, 0, s - 6};
			if (write(fd, &n, sizeof(n)) != sizeof(n))
				_exit(5);
			if (kvdisk_drop(d, s - 6, &eb))
				_exit(6);
		}
	}
}

static void test_kill9_mid_put(void **state)
{
	enum { ROUNDS = 40, MAXN = 1 << 16 };
	uint64_t seed = seed_of(), rng = seed;
	static uint8_t acked[MAXN], dropping[MAXN];
	char *dir = tmpdir();
	uint64_t first = 1, total = 0;
	int mid_put = 0;

	(void)state;
	memset(acked, 0, sizeof(acked));
	memset(dropping, 0, sizeof(dropping));
	for (int round = 0; round < ROUNDS; round++) {
		struct ig_errbuf eb = {0};
		struct kvdisk_stats st;
		struct kvdisk_seq ls[64];
		struct note n = {0, 0, 0};
		bool in_put = false;
		uint64_t last = first - 1, used = 0, checked, present = 0;
		unsigned delay_us;
		int fds[2], status;
		struct kvdisk *d;
		uint32_t nl;
		pid_t pid;

		rng = mix(rng);
		delay_us = 2000 + (unsigned)(rng % 30000);
		assert_int_equal(pipe(fds), 0);
		fflush(NULL);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			close(fds[0]);
			child_loop(dir, first, fds[1]);
		}
		close(fds[1]);
		usleep(delay_us);
		assert_int_equal(kill(pid, SIGKILL), 0);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (!WIFSIGNALED(status))
			fail_msg("round %d: the child ended on its own (status %d)", round, status);
		while (read(fds[0], &n, sizeof(n)) == sizeof(n)) {
			assert_true(n.seq < MAXN - 1);
			in_put = n.op == MSG_PUTTING;
			if (n.op == MSG_PUTTING)
				continue;
			if (n.op == MSG_ACKED) {
				acked[n.seq] = 1;
				if (n.seq > last)
					last = n.seq;
			} else {
				dropping[n.seq] = 1;
			}
		}
		close(fds[0]);
		mid_put += in_put;

		/* every acknowledged sequence is there, byte for byte */
		d = open_ok(dir, 16 * MiB);
		for (uint64_t s = 1; s <= last; s++)
			if (acked[s] && !dropping[s]) {
				struct img *g = img_make(s, fault_image(s), 64 * KiB, 0);

				get_same(d, g);
				img_free(g);
				present++;
			}
		/* and nothing else but one being dropped (whole) or the put the
		 * kill interrupted after its commit (whole), every record checked */
		nl = kvdisk_list(d, ls, 64);
		for (uint32_t i = 0; i < nl; i++) {
			uint64_t s = ls[i].meta.seq;
			struct img *g = img_make(s, fault_image(s), 64 * KiB, 0);

			assert_true(acked[s] || s == last + 1);
			get_same(d, g);
			img_free(g);
			used += ls[i].stored_bytes;
		}
		assert_true(nl >= present);
		assert_int_equal(kvdisk_verify(d, 0, &checked, &eb), IG_E_OK);
		kvdisk_stats(d, &st);
		assert_int_equal(st.lost, 0);
		assert_int_equal(st.sequences, nl);
		assert_int_equal(st.used_bytes, used);
		total += last + 1 - first;
		print_message("# round %d: killed after %u us%s, seqs %" PRIu64 "..%" PRIu64
		              " acknowledged, %u on disk\n",
		              round, delay_us, in_put ? " inside a put" : "", first, last, nl);
		for (uint32_t i = 0; i < nl; i++)
			if (ls[i].meta.seq > last)
				last = ls[i].meta.seq;
		first = last + 1;
		kvdisk_close(d);
	}
	print_message("# %" PRIu64 " sequences acknowledged across %d kills, %d inside a put\n",
	              total, ROUNDS, mid_put);
	rmdir_all(dir);
}

/* A kill between two windows of one put: the child's source for window 2
 * is unreadable, and touching it turns into SIGKILL, with windows 0 and 1
 * already copied into the open transaction. */
static void die_now(int sig)
{
	(void)sig;
	kill(getpid(), SIGKILL);
}

static void test_kill9_between_windows(void **state)
{
	struct ig_errbuf eb = {0};
	struct kvdisk_stats st;
	char *dir = tmpdir();
	struct img *a = img_make(1, 150 * KiB, 64 * KiB, 0);
	int status;
	pid_t pid;
	struct kvdisk *d;

	(void)state;
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		const uint64_t wb = 64 * KiB, image = 5 * wb - 100;
		struct sigaction sa;
		struct arena_meta m = {2, 0x77, 1, 0, image, (uint32_t)wb, 5};
		struct arena_window w[5];
		unsigned char *src;

		d = NULL;
		if (kvdisk_open(&d, dir, 8 * MiB, 4096, KVDISK_OPEN_IGNORE_VOLUME, &eb) ||
		    kvdisk_put(d, &a->m, a->buf, a->w, &eb))
			_exit(3);
		src =
		    mmap(NULL, 5 * wb, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (src == MAP_FAILED)
			_exit(4);
		for (uint64_t i = 0; i < image; i++)
			src[i] = (unsigned char)(i * 13);
		for (uint32_t k = 0; k < 5; k++) {
			uint64_t len = k < 4 ? wb : image - 4 * wb;

			w[k] = (struct arena_window){k * wb, len, kvcopy_sum(src + k * wb, len)};
		}
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = die_now;
		sigaction(SIGSEGV, &sa, NULL);
		sigaction(SIGBUS, &sa, NULL);
		if (mprotect(src + 2 * wb, wb, PROT_NONE))
			_exit(5);
		(void)kvdisk_put(d, &m, src, w, &eb);
		_exit(6); /* not reached */
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	print_message("# child: %s %d\n", WIFSIGNALED(status) ? "signal" : "exit",
	              WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
	/* under ASan its own SEGV report may come first: the child dies either
	 * way without committing */
	assert_true(WIFSIGNALED(status) || WEXITSTATUS(status) != 3);
	assert_false(WIFEXITED(status) && WEXITSTATUS(status) == 6);

	assert_int_equal(raw_count(dir, 2), 0); /* nothing of seq 2, not a window */
	d = open_ok(dir, 8 * MiB);
	get_same(d, a);
	assert_int_equal(get_rc(d, 2, 5 * 64 * KiB, &eb), IG_E_NOTFOUND);
	kvdisk_stats(d, &st);
	assert_int_equal(st.lost, 0);
	assert_int_equal(st.sequences, 1);
	assert_int_equal(st.used_bytes, stored_of(&a->m));
	kvdisk_close(d);
	img_free(a);
	rmdir_all(dir);
}

/* ---- streams: a window at a time ------------------------------------------ */

static void wput_ok(struct kvdisk *d, const struct img *g, uint32_t k, bool want_whole)
{
	struct ig_errbuf eb = {0};
	bool whole = !want_whole;
	int rc = kvdisk_wput(d, g->m.seq, k, g->buf + g->w[k].offset, g->w[k].len, g->w[k].sum,
	                     &whole, &eb);

	if (rc)
		fail_msg("wput seq %" PRIu64 " window %u: %s: %s", g->m.seq, k, ig_err_name(rc),
		         eb.msg);
	assert_int_equal(whole, want_whole);
}

/* Window k read back alone: its bytes and checksum. */
static void rwindow_same(struct kvdisk *d, const struct img *g, uint32_t k)
{
	struct ig_errbuf eb = {0};
	unsigned char *dst = malloc(g->m.window_bytes + 16);
	uint64_t len = 0, sum = 0;
	int rc;

	assert_non_null(dst);
	memset(dst, 0x5a, g->m.window_bytes + 16);
	rc = kvdisk_rwindow(d, g->m.seq, k, dst, g->m.window_bytes, &len, &sum, &eb);
	if (rc)
		fail_msg("rwindow seq %" PRIu64 " window %u: %s: %s", g->m.seq, k, ig_err_name(rc),
		         eb.msg);
	assert_int_equal(len, g->w[k].len);
	assert_int_equal(sum, g->w[k].sum);
	assert_memory_equal(dst, g->buf + g->w[k].offset, len);
	assert_int_equal(dst[len], 0x5a); /* nothing past the window */
	free(dst);
}

/* A sequence written a window at a time is not held until its last window;
 * then it reads back whole (kvdisk_get) and a window at a time (rsums,
 * rwindow). Out of order, a wrong checksum, a second begin after a window,
 * a put or a fetch of it midway: refused, nothing of it served. */
static void test_stream_write_read(void **state)
{
	struct ig_errbuf eb = {0};
	struct kvdisk_stats st;
	struct kvdisk_seq ds;
	struct arena_meta m;
	static uint64_t sums[ARENA_MAX_WINDOWS];
	char *dir = tmpdir();
	struct kvdisk *d = open_ok(dir, 8 * MiB);
	struct img *a = img_make(3, 300 * KiB + 17, 64 * KiB, 0);
	bool whole = false;
	int rc;

	(void)state;
	assert_int_equal(a->m.windows, 5);
	assert_int_equal(kvdisk_wbegin(d, &a->m, &eb), IG_E_OK);
	assert_true(kvdisk_writing(d, 3));
	assert_int_equal(kvdisk_wbegin(d, &a->m, &eb), IG_E_OK); /* resent: the same */
	rc = kvdisk_wput(d, 3, 1, a->buf + a->w[1].offset, a->w[1].len, a->w[1].sum, &whole, &eb);
	assert_int_equal(rc, IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "window 0 comes next"));
	rc = kvdisk_wput(d, 3, 0, a->buf + a->w[0].offset, a->w[0].len, a->w[0].sum ^ 1, &whole,
	                 &eb);
	assert_int_equal(rc, IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "nothing written"));
	wput_ok(d, a, 0, false);
	wput_ok(d, a, 0, false); /* the same window again: a no-op */
	assert_int_equal(kvdisk_wbegin(d, &a->m, &eb), IG_E_BUSY);
	assert_int_equal(kvdisk_put(d, &a->m, a->buf, a->w, &eb), IG_E_BUSY);
	wput_ok(d, a, 1, false);
	/* not held midway: not listed, not served, not counted */
	assert_int_equal(kvdisk_stat(d, 3, &ds, &eb), IG_E_NOTFOUND);
	assert_int_equal(get_rc(d, 3, a->m.image_bytes, &eb), IG_E_NOTFOUND);
	assert_int_equal(kvdisk_rsums(d, 3, &m, sums, &eb), IG_E_NOTFOUND);
	kvdisk_stats(d, &st);
	assert_int_equal(st.sequences, 0);
	assert_int_equal(st.used_bytes, 0);
	for (uint32_t k = 2; k < 5; k++)
		wput_ok(d, a, k, k == 4);
	assert_false(kvdisk_writing(d, 3));
	kvdisk_stats(d, &st);
	assert_int_equal(st.sequences, 1);
	assert_int_equal(st.used_bytes, stored_of(&a->m));
	get_same(d, a);
	assert_int_equal(kvdisk_rsums(d, 3, &m, sums, &eb), IG_E_OK);
	assert_memory_equal(&m, &a->m, sizeof(m));
	for (uint32_t k = 0; k < 5; k++) {
		assert_int_equal(sums[k], a->w[k].sum);
		rwindow_same(d, a, 4 - k); /* any order */
	}
	assert_int_equal(
	    kvdisk_rwindow(d, 3, 5, sums, sizeof(sums), &m.image_bytes, &m.model_id, &eb),
	    IG_E_INVAL);
	/* it survives a reopen like any put */
	kvdisk_close(d);
	d = open_ok(dir, 8 * MiB);
	get_same(d, a);
	kvdisk_stats(d, &st);
	assert_int_equal(st.lost, 0);
	kvdisk_close(d);
	img_free(a);
	rmdir_all(dir);
}

/* The ceiling counts a write under way as a whole at its begin; an abort
 * (or a drop) erases what it wrote and gives its room back. */
static void test_stream_ceiling_and_abort(void **state)
{
	struct ig_errbuf eb = {0};
	struct kvdisk_stats st;
	char *dir = tmpdir();
	struct img *b = img_make(5, 200 * KiB, 64 * KiB, 1);
	struct img *c = img_make(6, 200 * KiB, 64 * KiB, 2);
	struct kvdisk *d = open_ok(dir, stored_of(&b->m) + stored_of(&c->m) - 1);

	(void)state;
	assert_true(kvdisk_fits(d, &c->m));
	assert_int_equal(kvdisk_wbegin(d, &b->m, &eb), IG_E_OK);
	wput_ok(d, b, 0, false);
	wput_ok(d, b, 1, false);
	assert_false(kvdisk_fits(d, &c->m)); /* the write under way counts whole */
	assert_int_equal(kvdisk_wbegin(d, &c->m, &eb), IG_E_NOSPACE);
	assert_non_null(strstr(eb.msg, "tier full"));
	assert_int_equal(kvdisk_put(d, &c->m, c->buf, c->w, &eb), IG_E_NOSPACE);
	assert_true(kvdisk_wabort(d, 5));
	assert_true(kvdisk_fits(d, &c->m));
	assert_false(kvdisk_wabort(d, 5));
	assert_int_equal(kvdisk_wbegin(d, &c->m, &eb), IG_E_OK);
	wput_ok(d, c, 0, false);
	assert_int_equal(kvdisk_drop(d, 6, &eb), IG_E_OK); /* a drop aborts it too */
	assert_false(kvdisk_writing(d, 6));
	kvdisk_stats(d, &st);
	assert_int_equal(st.sequences, 0);
	assert_int_equal(st.used_bytes, 0);
	put_ok(d, b); /* the room is back */
	kvdisk_close(d);
	assert_int_equal(raw_count(dir, 6), 0); /* nothing of the aborted one */
	assert_int_equal(raw_count(dir, 5), b->m.windows + 1);
	img_free(b);
	img_free(c);
	rmdir_all(dir);
}

/* A process killed between two windows of a write: the next open erases
 * the windows it wrote (they have no sequence record), the same sequence
 * can be written again, the others are untouched. */
static void test_stream_killed_midway(void **state)
{
	struct ig_errbuf eb = {0};
	struct kvdisk_stats st;
	char *dir = tmpdir();
	struct img *a = img_make(7, 100 * KiB, 64 * KiB, 0);
	struct img *b = img_make(8, 300 * KiB, 64 * KiB, 1);
	struct kvdisk *d;
	int status;
	pid_t pid;

	(void)state;
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		bool whole;

		d = NULL;
		if (kvdisk_open(&d, dir, 8 * MiB, 4096, KVDISK_OPEN_IGNORE_VOLUME, &eb) ||
		    kvdisk_put(d, &a->m, a->buf, a->w, &eb) || kvdisk_wbegin(d, &b->m, &eb))
			_exit(3);
		for (uint32_t k = 0; k < 3; k++)
			if (kvdisk_wput(d, 8, k, b->buf + b->w[k].offset, b->w[k].len, b->w[k].sum,
			                &whole, &eb))
				_exit(4);
		kill(getpid(), SIGKILL);
		_exit(5);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	assert_int_equal(raw_count(dir, 8), 3); /* three windows, no sequence record */
	d = open_ok(dir, 8 * MiB);
	get_same(d, a);
	assert_int_equal(get_rc(d, 8, b->m.image_bytes, &eb), IG_E_KV_LOST);
	kvdisk_stats(d, &st);
	assert_int_equal(st.sequences, 1);
	assert_int_equal(st.used_bytes, stored_of(&a->m));
	/* written again from the start */
	assert_int_equal(kvdisk_wbegin(d, &b->m, &eb), IG_E_OK);
	for (uint32_t k = 0; k < b->m.windows; k++)
		wput_ok(d, b, k, k + 1 == b->m.windows);
	get_same(d, b);
	kvdisk_close(d);
	img_free(a);
	img_free(b);
	rmdir_all(dir);
}

/* A payload byte flipped on disk: rsums (headers only) still agrees, the
 * window's own read finds it, reports it lost and drops the sequence. */
static void test_stream_read_corrupt(void **state)
{
	struct ig_errbuf eb = {0};
	struct arena_meta m;
	static uint64_t sums[ARENA_MAX_WINDOWS];
	unsigned char buf[80 * 1024];
	char *dir = tmpdir();
	struct kvdisk *d = open_ok(dir, 8 * MiB);
	struct img *b = img_make(22, 200 * KiB, 80 * KiB, 2);
	uint64_t len, sum;

	(void)state;
	put_ok(d, b);
	kvdisk_close(d);
	damage_flip_payload(dir, b, NULL); /* window 1 */
	d = open_ok(dir, 8 * MiB);
	assert_int_equal(kvdisk_rsums(d, 22, &m, sums, &eb), IG_E_OK);
	rwindow_same(d, b, 0);
	assert_int_equal(kvdisk_rwindow(d, 22, 1, buf, sizeof(buf), &len, &sum, &eb), IG_E_KV_LOST);
	assert_non_null(strstr(eb.msg, "window 1"));
	assert_non_null(strstr(eb.msg, "corrupt: the payload"));
	assert_int_equal(kvdisk_rsums(d, 22, &m, sums, &eb), IG_E_NOTFOUND);
	kvdisk_close(d);
	img_free(b);
	rmdir_all(dir);
}

/* ---- a full volume ------------------------------------------------------ */

/* The child's checks: a failed one says where and what, and ends the child
 * with 10 (cmocka's own asserts would carry on in the child). */
#define CHILD_CHECK(c, ...)                                                                        \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "child: %s:%d: %s: ", __FILE__, __LINE__, #c);             \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			_exit(10);                                                                 \
		}                                                                                  \
	} while (0)

/* A tmpfs of `size` at `dir`, seen by this process alone: a mount namespace
 * of its own (root's; else an unprivileged user's, inside a user namespace
 * that maps it to itself). False when this machine allows neither. */
static bool child_tmpfs(const char *dir, const char *size)
{
	uid_t uid = getuid();
	gid_t gid = getgid();
	char map[64];
	int fd;

	if (unshare(CLONE_NEWNS) != 0) {
		if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
			return false;
		fd = open("/proc/self/setgroups", O_WRONLY);
		if (fd >= 0) {
			(void)!write(fd, "deny", 4);
			close(fd);
		}
		snprintf(map, sizeof(map), "%u %u 1", (unsigned)uid, (unsigned)uid);
		fd = open("/proc/self/uid_map", O_WRONLY);
		if (fd < 0 || write(fd, map, strlen(map)) < 0)
			return false;
		close(fd);
		snprintf(map, sizeof(map), "%u %u 1", (unsigned)gid, (unsigned)gid);
		fd = open("/proc/self/gid_map", O_WRONLY);
		if (fd < 0 || write(fd, map, strlen(map)) < 0)
			return false;
		close(fd);
	}
	/* nothing mounted here reaches the parent's namespace */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		return false;
	return mount("tmpfs", dir, "tmpfs", 0, size) == 0;
}

/* Fill the volume of `path` with a file of that name, to 0 bytes free. */
static void child_fill(const char *path)
{
	static unsigned char chunk[1 << 16];
	struct statvfs vs;
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);

	CHILD_CHECK(fd >= 0, "%s", strerror(errno));
	memset(chunk, 0xf1, sizeof(chunk));
	while (write(fd, chunk, sizeof(chunk)) > 0)
		;
	close(fd);
	CHILD_CHECK(statvfs(path, &vs) == 0 && vs.f_bavail == 0, "%llu blocks free",
	            (unsigned long long)vs.f_bavail);
}

/* get_same for the child. */
static void child_same(struct kvdisk *d, const struct img *g)
{
	struct ig_errbuf eb = {0};
	struct arena_meta m;
	unsigned char *dst = malloc(g->m.image_bytes);
	int rc;

	CHILD_CHECK(dst, "no memory");
	rc = kvdisk_get(d, g->m.seq, &m, dst, g->m.image_bytes, NULL, &eb);
	CHILD_CHECK(rc == IG_E_OK, "get seq %" PRIu64 ": %s: %s", g->m.seq, ig_err_name(rc),
	            eb.msg);
	CHILD_CHECK(!memcmp(&m, &g->m, sizeof(m)) &&
	                !memcmp(dst, g->buf + g->off, g->m.image_bytes),
	            "seq %" PRIu64 " differs", g->m.seq);
	free(dst);
}

/* The issue-26 case in a child on an 80 MiB tmpfs, the blocks taken as on
 * a filesystem without fallocate (KVDISK_OPEN_NO_FALLOCATE: pages populated;
 * with KVDISK_OPEN_NO_POPULATE, zeros written, as on an older kernel):
 * the volume filled by another file after the open; puts into the blocks
 * open reserved succeed, then one the volume cannot back is refused "tier
 * full" (the path and the bytes named, counted once), nothing written, the
 * process alive; a write a window at a time likewise, and its abort erases
 * what it wrote; a drop and a reopen on the full volume work (the margin
 * every put keeps backed); every acknowledged sequence reads back; with room
 * freed, puts are taken again. Before the fix the first put on the full
 * volume was a SIGBUS. */
static void child_full_volume(const char *vol, unsigned how)
{
	enum { MAXS = 64 };
	struct ig_errbuf eb = {0};
	struct kvdisk_stats st;
	struct kvdisk *d = NULL;
	struct img *g[MAXS + 1] = {0};
	char kv[4200], filler[4200];
	uint32_t n = 0, k;
	bool whole = false;
	int rc;

	snprintf(kv, sizeof(kv), "%s/kv", vol);
	snprintf(filler, sizeof(filler), "%s/filler", vol);
	rc = kvdisk_open(&d, kv, 512 * MiB, 4096, KVDISK_OPEN_IGNORE_VOLUME | how, &eb);
	CHILD_CHECK(rc == IG_E_OK, "open: %s: %s", ig_err_name(rc), eb.msg);
	child_fill(filler);

	/* 2 MiB sequences, 8 windows: into the open's 64 MiB, then refused */
	for (n = 0; n < MAXS; n++) {
		g[n] = img_make(n + 1, 2 * MiB, 256 * KiB, 0);
		rc = kvdisk_put(d, &g[n]->m, g[n]->buf, g[n]->w, &eb);
		if (rc)
			break;
	}
	CHILD_CHECK(n >= 20 && n < MAXS, "%u puts taken", n);
	CHILD_CHECK(rc == IG_E_NOSPACE, "%s: %s", ig_err_name(rc), eb.msg);
	CHILD_CHECK(strstr(eb.msg, "tier full") && strstr(eb.msg, kv) &&
	                strstr(eb.msg, "cannot back") && strstr(eb.msg, "nothing written") &&
	                strstr(eb.msg, strerror(ENOSPC)),
	            "%s", eb.msg);
	kvdisk_stats(d, &st);
	CHILD_CHECK(st.refusals_full == 1 && st.sequences == n, "refusals %" PRIu64 ", %u held",
	            st.refusals_full, st.sequences);
	CHILD_CHECK(kvdisk_stat(d, n + 1, &(struct kvdisk_seq){0}, &eb) == IG_E_NOTFOUND,
	            "the refused put left something");

	/* a window at a time: refused at some window, the abort erases it */
	g[MAXS] = img_make(900, 16 * MiB, 256 * KiB, 1);
	CHILD_CHECK(kvdisk_wbegin(d, &g[MAXS]->m, &eb) == IG_E_OK, "wbegin: %s", eb.msg);
	for (k = 0; k < g[MAXS]->m.windows; k++) {
		const struct arena_window *w = &g[MAXS]->w[k];

		rc = kvdisk_wput(d, 900, k, g[MAXS]->buf + w->offset, w->len, w->sum, &whole, &eb);
		if (rc)
			break;
	}
	CHILD_CHECK(rc == IG_E_NOSPACE && k < g[MAXS]->m.windows, "window %u: %s: %s", k,
	            ig_err_name(rc), eb.msg);
	CHILD_CHECK(strstr(eb.msg, "tier full") && strstr(eb.msg, "seq 900 window"), "%s", eb.msg);
	CHILD_CHECK(kvdisk_wabort(d, 900), "no write of seq 900 under way");
	kvdisk_stats(d, &st);
	CHILD_CHECK(st.refusals_full == 2, "refusals %" PRIu64, st.refusals_full);

	/* a drop on the full volume */
	rc = kvdisk_drop(d, 1, &eb);
	CHILD_CHECK(rc == IG_E_OK, "drop: %s: %s", ig_err_name(rc), eb.msg);
	for (uint32_t i = 1; i < n; i++)
		child_same(d, g[i]);

	/* a reopen on the full volume: every sequence, nothing lost (the
	 * aborted stream's windows were erased, not left to open's scan) */
	kvdisk_close(d);
	rc = kvdisk_open(&d, kv, 512 * MiB, 4096, KVDISK_OPEN_IGNORE_VOLUME | how, &eb);
	CHILD_CHECK(rc == IG_E_OK, "reopen on the full volume: %s: %s", ig_err_name(rc), eb.msg);
	kvdisk_stats(d, &st);
	CHILD_CHECK(st.lost == 0 && st.sequences == n - 1, "lost %" PRIu64 ", %u held", st.lost,
	            st.sequences);
	for (uint32_t i = 1; i < n; i++)
		child_same(d, g[i]);

	/* room again: the refused put and the stream are taken */
	CHILD_CHECK(unlink(filler) == 0, "%s", strerror(errno));
	rc = kvdisk_put(d, &g[n]->m, g[n]->buf, g[n]->w, &eb);
	CHILD_CHECK(rc == IG_E_OK, "put with room: %s: %s", ig_err_name(rc), eb.msg);
	CHILD_CHECK(kvdisk_wbegin(d, &g[MAXS]->m, &eb) == IG_E_OK, "wbegin: %s", eb.msg);
	for (k = 0; k < g[MAXS]->m.windows; k++) {
		const struct arena_window *w = &g[MAXS]->w[k];

		rc = kvdisk_wput(d, 900, k, g[MAXS]->buf + w->offset, w->len, w->sum, &whole, &eb);
		CHILD_CHECK(rc == IG_E_OK, "window %u with room: %s", k, eb.msg);
	}
	CHILD_CHECK(whole, "seq 900 not whole");
	for (uint32_t i = 1; i <= n; i++)
		child_same(d, g[i]);
	child_same(d, g[MAXS]);
	kvdisk_close(d);
	for (uint32_t i = 0; i <= MAXS; i++)
		if (g[i])
			img_free(g[i]);
	_exit(0);
}

static void full_volume_case(unsigned how)
{
	char *dir = tmpdir();
	char vol[4200];
	int status = 0;
	pid_t pid;

	snprintf(vol, sizeof(vol), "%s/vol", dir);
	assert_int_equal(mkdir(vol, 0700), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* a signal kills the child, for the parent to see: cmocka's
		 * handler would carry on with the next test in it */
		signal(SIGBUS, SIG_DFL);
		signal(SIGSEGV, SIG_DFL);
		if (!child_tmpfs(vol, "size=80m"))
			_exit(77);
		child_full_volume(vol, how);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	rmdir(vol);
	rmdir_all(dir);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
		print_message("# kvdisk: no mount namespace here (not root, no user namespaces): "
		              "the full-volume case is skipped\n");
		skip();
	}
	if (WIFSIGNALED(status))
		fail_msg("the child died of signal %d (%s) on the full volume", WTERMSIG(status),
		         strsignal(WTERMSIG(status)));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("the child failed (exit %d): see its message above", WEXITSTATUS(status));
}

static void test_full_volume_no_fallocate(void **state)
{
	(void)state;
	full_volume_case(KVDISK_OPEN_NO_FALLOCATE);
}

static void test_full_volume_zeros(void **state)
{
	(void)state;
	full_volume_case(KVDISK_OPEN_NO_FALLOCATE | KVDISK_OPEN_NO_POPULATE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_roundtrip_and_reopen),
	    cmocka_unit_test(test_tier_full_at_once),
	    cmocka_unit_test(test_volume_rule),
	    cmocka_unit_test(test_busy_drop_list_stat),
	    cmocka_unit_test(test_second_open_busy),
	    cmocka_unit_test(test_bad_input),
	    cmocka_unit_test(test_damaged_records),
	    cmocka_unit_test(test_flipped_bytes_in_file),
	    cmocka_unit_test(test_torn_found_at_open),
	    cmocka_unit_test(test_unclean_stop),
	    cmocka_unit_test(test_clean_and_same_boot_trusted),
	    cmocka_unit_test(test_verify),
	    cmocka_unit_test(test_kill9_mid_put),
	    cmocka_unit_test(test_kill9_between_windows),
	    cmocka_unit_test(test_stream_write_read),
	    cmocka_unit_test(test_stream_ceiling_and_abort),
	    cmocka_unit_test(test_stream_killed_midway),
	    cmocka_unit_test(test_stream_read_corrupt),
	    cmocka_unit_test(test_full_volume_no_fallocate),
	    cmocka_unit_test(test_full_volume_zeros),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
