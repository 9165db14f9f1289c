/*
 * arena.c - KV-RAM (see arena.h): one shared-memory object under /dev/shm
 * holding a header page, the index of what is where, and the data blocks.
 *
 * This file owns the crash consistency of the object's index; the layout
 * below is declared in kvram/kvram_layout.h, which a client's mapping
 * (kvram/kvram.c) checks too. The daemon is the only index writer (an flock()
 * on the object keeps a second daemon out); clients map it and touch data
 * bytes only.
 *
 * On-shm layout (version 2). On shared memory that outlives the process:
 * never renumber; a change of layout bumps ARENA_LAYOUT_VERSION and an old
 * object is refused by name, never reinterpreted.
 *
 *   offset         bytes            what
 *   0              4096             header (struct arena_hdr at 0, the
 *                                   retained slots' descriptor at 128)
 *   srec_off=4096  slots * 96       retained slot records (arena_rslot)
 *   seq_off        seq_cap * 96     sequence records (struct arena_srec)
 *   win_off        win_cap * 16     window records (struct arena_wrec)
 *   sdata_off      slots * stride   retained slots' bytes; sdata_off is the
 *                                   first multiple of ARENA_BLOCK past the
 *                                   index, stride slot_bytes rounded up to
 *                                   ARENA_BLOCK
 *   data_off       n_blocks * 64 KiB data blocks, right after the slots: so
 *                                   every slot and every extent is page- and
 *                                   block-aligned (cudaHostRegister, DMA)
 * With no slots, srec_off = seq_off and sdata_off = data_off.
 *
 *   header  0  8  magic "IGNISKVR"
 *           8  4  layout version (2)
 *          12  4  block bytes (65,536)
 *          16  8  asked bytes (the flag as given; reopen compares it)
 *          24  8  n_blocks = asked / block (rounded down: a "100K" flag
 *                 gives one block, not an error)
 *          32  4  seq_cap   36  4  win_cap
 *          40  8  seq_off   48  8  win_off   56  8  data_off
 *          64  8  map_bytes (the object's size)
 *          72  8  XXH64 of bytes 0..71 (a torn or scribbled header is
 *                 refused, not trusted)
 *          80  8  next_gen   88  8  use_clock   96  8  opens
 *                 (counters, stored atomically; recovery also takes the
 *                 maximum over the records, so they need no checksum)
 *
 *   sequence record (96 B)
 *           0  4  state: 0 free, 1 live (stored last on reserve, first on
 *                 drop, with release order)
 *           4  4  windows      8  8  seq      16  8  model_id
 *          24  4  kv_format   28  4  class    32  8  image_bytes
 *          40  4  window_bytes
 *          44  4  wfirst: its first window record
 *          48  8  first_block
 *          56  8  gen: this reservation's generation, unique in the object
 *          64  8  XXH64 of bytes 4..63
 *          72  8  last_use (LRU clock; one aligned 8-byte store)
 *          80 16  zero
 *
 *   slots descriptor (at 128; its own checksum, fixed at creation)
 *         128  4  slots       132  4  record bytes (96)
 *         136  8  slot_bytes  144  8  stride
 *         152  8  srec_off    160  8  sdata_off
 *         168  8  XXH64 of bytes 128..167
 *
 *   retained slot record (96 B)
 *           0  4  state: 0 free, 1 writing, 2 held (stored last on capture
 *                 and publish, first on give-up and drop, release order)
 *           4  4  kind (1 checkpoint, 2 prefix)   8  4  class
 *          12  4  tokens      16  8  key       24  8  model_id
 *          32  8  image_bytes 40  8  sum (checksum of the image, once held)
 *          48  8  gen: this capture's generation (the sequences' counter)
 *          56  8  XXH64 of bytes 4..55
 *          64  8  last_use    72 24  zero
 *
 *   window record (16 B)
 *           0  8  checksum of the window's bytes (XXH3-64, seed 0:
 *                 kvcopy_sum; layout 1 had XXH64)
 *           8  8  tag: the owning reservation's gen once committed, else 0
 *                 (stored last, release order)
 *
 * Capacities. A reservation takes at least one block, so seq_cap =
 * min(n_blocks, ARENA_SEQ_CAP) never runs out before the blocks do on an
 * arena of up to 4 GiB, and beyond that only for tens of thousands of tiny
 * images (96 B a record: 6 MiB of index at most). Window records: a sequence
 * takes `windows` contiguous records, and win_cap = n_blocks +
 * ARENA_MAX_WINDOWS: windows of at least one block (real ones are 12-16 MiB)
 * never run short of records before the blocks run short, one sequence of
 * ARENA_MAX_WINDOWS windows always fits, and the table costs 16 B per 64 KiB
 * block (0.025%). Smaller windows may run the table out first: a reserve
 * that gets no index room is "tier full" (IG_E_NOSPACE) naming the index.
 *
 * Placement: first fit (lowest address) for ceil(image_bytes / ARENA_BLOCK)
 * contiguous blocks, and the same for the window records. Simple,
 * deterministic (tests predict offsets) and, with images of a few sizes,
 * as good as best fit; fragmentation shows as largest_free < free_bytes,
 * and the daemon gives up victims until a reserve fits.
 *
 * Crash consistency (kill -9 at any instant). The pages belong to the
 * kernel, so a killed process loses no store it made; what matters is the
 * order and torn multi-field updates. Every mutation ends (or, for drop,
 * consists of) one aligned release store of a single word:
 *   reserve: clear the range's window tags, write the record's fields and
 *            checksum, then state = live. Killed earlier: the slot is
 *            still free and nothing points at the cleared records.
 *   commit:  write the window's sum (the writer's, taken while it copied
 *            the bytes in: ADR 0015), then tag = gen; only then is the
 *            commit acknowledged. Killed earlier: the window is simply not
 *            committed.
 *   drop:    state = free. The stale fields and tags left behind are
 *            ignored (free slot) and cleared by the next reserve of the range.
 *   get:     last_use, one 8-byte store; torn never.
 * Free space, the live list and committed counts are never stored: open
 * derives them from the records. Recovery validates every live record
 * (checksum, meta, bounds, overlaps of extents and window ranges, window
 * tags in {0, gen}, unique seq); one that fails costs its own sequence
 * alone: it is dropped (state = free, as a drop) and noted with its record
 * and what failed (arena_damaged), and the rest is served, as KV-disk
 * drops a bad record (ADR 0020). Then it keeps every sequence with a
 * committed window and frees reservations with none. The header page holds
 * only the layout, which follows from the configuration, and counters the
 * recovery takes again from the records: a header or slots descriptor that
 * fails its checksum on an object of the configured size is rewritten
 * (arena_repaired); on an object of another size it is refused (IG_E_KV_LOST,
 * naming it). Data bytes are not re-hashed at open: a committed
 * window's bytes are never rewritten by a correct writer, and the reader
 * checks them on the way out (arena.h, step 4; ADR 0015).
 *
 * One daemon at a time: arena_open takes flock(LOCK_EX | LOCK_NB) on the
 * object and holds it while open; a second opener gets IG_E_BUSY. The
 * kernel drops the lock with the holder, so a kill -9 never leaves it held.
 * The crash points (ARENA_CRASH_POINTS, below) let the tests kill a child
 * after every ordered step of a script, not only at random instants.
 *
 * Creation is atomic too: the object is built as an O_TMPFILE in /dev/shm
 * (locked, sized, allocated with posix_fallocate, header written) and only
 * then linked under its name, so a creator killed midway leaves nothing
 * behind and a name always holds a whole header.
 *
 * Memory. statvfs("/dev/shm") is checked before creation and
 * posix_fallocate allocates every page for real, so a /dev/shm too small is
 * refused at open with the figures, never a SIGBUS later; the mapping is
 * MAP_POPULATE'd (creation or reopen) so the first touch is paid at start.
 * The pages are not mlock'ed: on the cuda backend the worker's
 * cudaHostRegister pins them.
 */
#define _GNU_SOURCE
#include "arena.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <xxhash.h>

#include "kvram/kvram_layout.h"


/*
 * Crash points: after every step of a mutation whose order matters (and in
 * the middle of a record's field writes, for a torn record). A test build
 * (-DARENA_CRASH_POINTS, tests/unit/test_arena.c only) kills the process
 * with SIGKILL at the Nth one it passes, for every N, so that a kill -9
 * between those steps is tried, not hoped for. The countdown is the one
 * mutable global, and it exists in that build only.
 */
#ifdef ARENA_CRASH_POINTS
#include <signal.h>
extern long arena__crash_countdown;
long arena__crash_countdown;
#define CRASH_POINT()                                                                              \
	do {                                                                                       \
		if (arena__crash_countdown > 0 && --arena__crash_countdown == 0)                   \
			raise(SIGKILL);                                                            \
	} while (0)
#else
#define CRASH_POINT() ((void)0)
#endif


/* A used/free map over n units (blocks or window records); 1 = used. The
 * padding bits of the last word are kept set so a zero word is 64 free
 * units. */
struct bmap {
	uint64_t *w;
	uint64_t n;
};

struct arena {
	int fd;
	uint8_t *base;
	uint64_t map_bytes;
	struct arena_hdr *hdr;
	struct arena_rslot *rs; /* retained slot records */
	uint8_t *sdata;         /* their bytes */
	uint32_t n_slots;
	uint64_t slot_bytes, slot_stride;
	struct arena_srec *srec;
	struct arena_wrec *wrec;
	uint8_t *data;
	uint64_t n_blocks;
	uint32_t seq_cap, win_cap;
	char name[ARENA_NAME_MAX + 1];

	/* derived at open, never stored */
	struct bmap blocks, wins;
	uint32_t *live;      /* slots of live records, dense */
	uint32_t *live_pos;  /* slot -> index in live */
	uint32_t *committed; /* slot -> committed windows */
	uint32_t *free_slots;
	uint32_t n_live, n_free_slots;
	uint64_t used_blocks;

	struct arena_stats st; /* counters since open */
	/* what the open found damaged: the first records dropped, and what of
	 * the header page it rebuilt ("" when nothing) */
	struct arena_damage damage[ARENA_DAMAGE_DETAILS];
	char repaired[160];
};

/* ---- the used/free map ---- */

static int bm_init(struct bmap *b, uint64_t n)
{
	uint64_t words = (n + 63) / 64;

	b->n = n;
	b->w = calloc(words ? words : 1, sizeof(uint64_t));
	if (!b->w)
		return -1;
	if (n % 64)
		b->w[words - 1] = ~0ull << (n % 64);
	return 0;
}

static void bm_release(struct bmap *b)
{
	free(b->w);
	b->w = NULL;
}

static bool bm_get(const struct bmap *b, uint64_t i)
{
	return (b->w[i / 64] >> (i % 64)) & 1u;
}

static void bm_put(struct bmap *b, uint64_t start, uint64_t len, bool used)
{
	for (uint64_t i = start; i < start + len; i++) {
		if (used)
			b->w[i / 64] |= 1ull << (i % 64);
		else
			b->w[i / 64] &= ~(1ull << (i % 64));
	}
}

/* True when [start, start + len) is inside the map and all free. */
static bool bm_free_range(const struct bmap *b, uint64_t start, uint64_t len)
{
	if (start > b->n || len > b->n - start)
		return false;
	for (uint64_t i = start; i < start + len; i++)
		if (bm_get(b, i))
			return false;
	return true;
}

/* Visit free runs in address order; stop when `fn` returns true. */
static bool bm_runs(const struct bmap *b, bool (*fn)(uint64_t, uint64_t, void *), void *ctx)
{
	uint64_t i = 0, start = 0, run = 0;

	while (i < b->n) {
		uint64_t word = b->w[i / 64];

		if (i % 64 == 0 && word == ~0ull) {
			if (run && fn(start, run, ctx))
				return true;
			run = 0;
			i += 64;
		} else if (i % 64 == 0 && word == 0) {
			if (!run)
				start = i;
			run += 64;
			i += 64;
		} else if ((word >> (i % 64)) & 1u) {
			if (run && fn(start, run, ctx))
				return true;
			run = 0;
			i++;
		} else {
			if (!run)
				start = i;
			run++;
			i++;
		}
	}
	return run && fn(start, run, ctx);
}

struct fit {
	uint64_t want, at, largest;
};

static bool fit_first(uint64_t start, uint64_t len, void *ctx)
{
	struct fit *f = ctx;

	if (len >= f->want) {
		f->at = start;
		return true;
	}
	return false;
}

static bool fit_largest(uint64_t start, uint64_t len, void *ctx)
{
	struct fit *f = ctx;

	(void)start;
	if (len > f->largest)
		f->largest = len;
	return false;
}

static bool bm_first_fit(const struct bmap *b, uint64_t want, uint64_t *at)
{
	struct fit f = {.want = want};

	if (want == 0 || want > b->n || !bm_runs(b, fit_first, &f))
		return false;
	*at = f.at;
	return true;
}

static uint64_t bm_largest(const struct bmap *b)
{
	struct fit f = {0};

	bm_runs(b, fit_largest, &f);
	return f.largest;
}

/* ---- layout ---- */


/* Largest asked size we accept: keeps win_cap within 32 bits and every
 * product in range (2^32 blocks of 64 KiB = 256 TiB). */
#define ARENA_BYTES_MAX (((uint64_t)UINT32_MAX - ARENA_MAX_WINDOWS) * ARENA_BLOCK)

static uint64_t blocks_of(uint64_t image_bytes)
{
	return (image_bytes + ARENA_BLOCK - 1) / ARENA_BLOCK;
}

static uint64_t window_len(const struct arena_srec *r, uint32_t k)
{
	uint64_t at = (uint64_t)k * r->window_bytes;
	uint64_t left = r->image_bytes - at;

	return left < r->window_bytes ? left : r->window_bytes;
}

/* Why `m` is malformed, or NULL. */
static const char *meta_problem(const struct arena_meta *m)
{
	if (m->seq == 0)
		return "seq 0 is not a sequence id";
	if (m->cls != ARENA_INTERACTIVE && m->cls != ARENA_AGENT)
		return "class is neither interactive (0) nor agent (1)";
	if (m->image_bytes == 0)
		return "image_bytes is 0";
	if (m->window_bytes == 0)
		return "window_bytes is 0";
	if (m->windows > ARENA_MAX_WINDOWS)
		return "more windows than ARENA_MAX_WINDOWS (4096)";
	if (m->windows != (m->image_bytes + m->window_bytes - 1) / m->window_bytes)
		return "windows is not ceil(image_bytes / window_bytes)";
	return NULL;
}

/* Write the header's layout fields and the slots descriptor for `l` (the
 * counters are left as they are). */
static void hdr_fill(uint8_t *base, uint64_t bytes, const struct layout *l)
{
	struct arena_hdr *h = (struct arena_hdr *)base;
	struct arena_slotdesc *d = (struct arena_slotdesc *)(base + ARENA_SLOTDESC_OFF);

	memcpy(h->magic, arena_magic, sizeof(arena_magic));
	h->version = ARENA_LAYOUT_VERSION;
	h->block = ARENA_BLOCK;
	h->asked_bytes = bytes;
	h->n_blocks = l->n_blocks;
	h->seq_cap = l->seq_cap;
	h->win_cap = l->win_cap;
	h->seq_off = l->seq_off;
	h->win_off = l->win_off;
	h->data_off = l->data_off;
	h->map_bytes = l->map_bytes;
	h->check = hdr_check(h);
	d->count = l->slots;
	d->rec_bytes = sizeof(struct arena_rslot);
	d->slot_bytes = l->slot_bytes;
	d->stride = l->stride;
	d->srec_off = l->srec_off;
	d->sdata_off = l->sdata_off;
	d->check = sd_check(d);
}

/* ---- the daemon's side ---- */

static int books_init(struct arena *a)
{
	if (bm_init(&a->blocks, a->n_blocks) || bm_init(&a->wins, a->win_cap))
		return -1;
	a->live = calloc(a->seq_cap, sizeof(uint32_t));
	a->live_pos = calloc(a->seq_cap, sizeof(uint32_t));
	a->committed = calloc(a->seq_cap, sizeof(uint32_t));
	a->free_slots = calloc(a->seq_cap, sizeof(uint32_t));
	if (!a->live || !a->live_pos || !a->committed || !a->free_slots)
		return -1;
	return 0;
}

static void books_add(struct arena *a, uint32_t slot)
{
	const struct arena_srec *r = &a->srec[slot];
	uint64_t nb = blocks_of(r->image_bytes);

	bm_put(&a->blocks, r->first_block, nb, true);
	bm_put(&a->wins, r->wfirst, r->windows, true);
	a->used_blocks += nb;
	a->live_pos[slot] = a->n_live;
	a->live[a->n_live++] = slot;
}

static void books_remove(struct arena *a, uint32_t slot)
{
	const struct arena_srec *r = &a->srec[slot];
	uint64_t nb = blocks_of(r->image_bytes);
	uint32_t at = a->live_pos[slot], last = a->live[--a->n_live];

	bm_put(&a->blocks, r->first_block, nb, false);
	bm_put(&a->wins, r->wfirst, r->windows, false);
	a->used_blocks -= nb;
	a->live[at] = last;
	a->live_pos[last] = at;
	a->committed[slot] = 0;
	a->free_slots[a->n_free_slots++] = slot;
}

static int find_slot(const struct arena *a, uint64_t seq, uint32_t *slot)
{
	for (uint32_t i = 0; i < a->n_live; i++)
		if (a->srec[a->live[i]].seq == seq) {
			*slot = a->live[i];
			return 0;
		}
	return -1;
}

static int cmp_u64_pair(const void *x, const void *y)
{
	const uint64_t *p = x, *q = y;

	if (p[0] != q[0])
		return p[0] < q[0] ? -1 : 1;
	return p[1] < q[1] ? -1 : p[1] > q[1];
}

/* Why live record `s` cannot be served, checked on its own and against the
 * books of the records kept before it (false: sound; *done its committed
 * windows). */
static bool srec_damaged(const struct arena *a, uint32_t s, char *why, size_t cap, uint32_t *done)
{
	const struct arena_srec *r = &a->srec[s];
	uint32_t state = atomic_load_explicit(&r->state, memory_order_acquire);
	struct arena_meta m;
	const char *bad;
	uint64_t nb;

	*done = 0;
	if (state != SREC_LIVE) {
		snprintf(why, cap, "state %u", state);
		return true;
	}
	if (r->check != srec_check(r)) {
		snprintf(why, cap, "checksum %016" PRIx64 ", stored %016" PRIx64, srec_check(r),
		         r->check);
		return true;
	}
	m = (struct arena_meta){.seq = r->seq,
	                        .model_id = r->model_id,
	                        .kv_format = r->kv_format,
	                        .cls = r->cls,
	                        .image_bytes = r->image_bytes,
	                        .window_bytes = r->window_bytes,
	                        .windows = r->windows};
	if ((bad = meta_problem(&m))) {
		snprintf(why, cap, "seq %" PRIu64 ": %s", r->seq, bad);
		return true;
	}
	if (r->gen == 0) {
		snprintf(why, cap, "seq %" PRIu64 ": generation 0", r->seq);
		return true;
	}
	nb = blocks_of(r->image_bytes);
	if (!bm_free_range(&a->blocks, r->first_block, nb)) {
		snprintf(why, cap,
		         "seq %" PRIu64 ": extent of %" PRIu64 " blocks at block %" PRIu64
		         " is outside the data or overlaps another",
		         r->seq, nb, r->first_block);
		return true;
	}
	if (!bm_free_range(&a->wins, r->wfirst, r->windows)) {
		snprintf(why, cap,
		         "seq %" PRIu64 ": window records %u..+%u are outside the table or "
		         "overlap another's",
		         r->seq, r->wfirst, r->windows);
		return true;
	}
	for (uint32_t k = 0; k < r->windows; k++) {
		uint64_t tag =
		    atomic_load_explicit(&a->wrec[r->wfirst + k].tag, memory_order_acquire);

		if (tag == r->gen) {
			(*done)++;
		} else if (tag != 0) {
			snprintf(why, cap,
			         "seq %" PRIu64 ": window %u belongs to generation %" PRIu64,
			         r->seq, k, tag);
			return true;
		}
	}
	return false;
}

/* Drop damaged record `s` (one word, like arena_drop) and note why. */
static void srec_drop_damaged(struct arena *a, uint32_t s, const char *why)
{
	uint64_t n = a->st.damaged_sequences++;

	if (n < ARENA_DAMAGE_DETAILS) {
		a->damage[n].record = s;
		a->damage[n].seq = a->srec[s].seq;
		snprintf(a->damage[n].why, sizeof(a->damage[n].why), "%s", why);
	}
	atomic_store_explicit(&a->srec[s].state, SREC_FREE, memory_order_release);
	CRASH_POINT();
}

/*
 * Validate the index and derive the books from it. A record that does not
 * hold together (its state, checksum, meta, extent or window tags; a seq
 * held twice) costs its own sequence alone: it is dropped, noted
 * (arena_damaged) and every other sequence is kept, as KV-disk drops a bad
 * record; its owner finds it held nowhere and prefills it again. Records
 * are taken in index order, so of two that overlap, or hold the same seq,
 * the later goes. Then free reservations with no committed window.
 */
static int recover(struct arena *a, const char *path, struct ig_errbuf *eb)
{
	uint64_t max_gen = 0, max_use = 0, (*seqs)[2] = NULL;
	uint32_t n = 0;

	seqs = calloc(a->seq_cap ? a->seq_cap : 1, sizeof(*seqs));
	if (!seqs)
		return ig_errf(eb, IG_E_NOMEM, "KV-RAM arena \"%s\": no memory to recover", path);
	for (uint32_t s = 0; s < a->seq_cap; s++) {
		struct arena_srec *r = &a->srec[s];
		char why[160];
		uint32_t done;

		if (atomic_load_explicit(&r->state, memory_order_acquire) == SREC_FREE)
			continue;
		if (srec_damaged(a, s, why, sizeof(why), &done)) {
			srec_drop_damaged(a, s, why);
			continue;
		}
		books_add(a, s);
		a->committed[s] = done;
		seqs[n][0] = r->seq;
		seqs[n][1] = s;
		n++;
		if (r->gen > max_gen)
			max_gen = r->gen;
		if (atomic_load(&r->last_use) > max_use)
			max_use = atomic_load(&r->last_use);
	}
	qsort(seqs, n, sizeof(*seqs), cmp_u64_pair);
	for (uint32_t i = 1, first = 0; i < n; i++) {
		char why[160];

		if (seqs[i][0] != seqs[first][0]) {
			first = i;
			continue;
		}
		snprintf(why, sizeof(why), "seq %" PRIu64 " is also held by record %u", seqs[i][0],
		         (unsigned)seqs[first][1]);
		srec_drop_damaged(a, (uint32_t)seqs[i][1], why);
		books_remove(a, (uint32_t)seqs[i][1]);
	}
	free(seqs);

	/* Free reservations with nothing committed. */
	for (uint32_t i = 0; i < a->n_live;) {
		uint32_t s = a->live[i];

		if (a->committed[s] == 0) {
			atomic_store_explicit(&a->srec[s].state, SREC_FREE, memory_order_release);
			CRASH_POINT();
			books_remove(a, s); /* moves the last live one to i */
			a->st.reclaimed_sequences++;
		} else {
			i++;
		}
	}
	a->st.recovered_sequences = a->n_live;
	/* Retained slots: a cache of recomputable state, so a record that does
	 * not hold together is freed and counted, not a reason to refuse the
	 * arena; a capture never published is freed. */
	for (uint32_t i = 0; i < a->n_slots; i++) {
		struct arena_rslot *r = &a->rs[i];
		uint32_t state = atomic_load_explicit(&r->state, memory_order_acquire);

		if (state == ARENA_SLOT_FREE)
			continue;
		if (state == ARENA_SLOT_HELD && r->check == rslot_check(r) && r->gen != 0 &&
		    r->key != 0 && r->image_bytes >= 1 && r->image_bytes <= a->slot_bytes &&
		    (r->kind == ARENA_CHECKPOINT || r->kind == ARENA_PREFIX) &&
		    r->cls <= ARENA_AGENT) {
			a->st.slots_recovered++;
			if (r->gen > max_gen)
				max_gen = r->gen;
			if (atomic_load(&r->last_use) > max_use)
				max_use = atomic_load(&r->last_use);
			continue;
		}
		if (state != ARENA_SLOT_WRITING)
			a->st.slots_lost++;
		atomic_store_explicit(&r->state, ARENA_SLOT_FREE, memory_order_release);
		CRASH_POINT();
	}
	if (atomic_load(&a->hdr->next_gen) <= max_gen)
		atomic_store(&a->hdr->next_gen, max_gen + 1);
	CRASH_POINT();
	if (atomic_load(&a->hdr->use_clock) <= max_use)
		atomic_store(&a->hdr->use_clock, max_use + 1);
	CRASH_POINT();
	return IG_E_OK;
}

static void free_slots_fill(struct arena *a)
{
	/* lowest slot on top */
	a->n_free_slots = 0;
	for (uint32_t s = a->seq_cap; s-- > 0;)
		if (atomic_load(&a->srec[s].state) == SREC_FREE)
			a->free_slots[a->n_free_slots++] = s;
}

/* Check that /dev/shm can hold `need` more bytes. */
static int shm_room(const char *path, uint64_t need, struct ig_errbuf *eb)
{
	struct statvfs vfs;

	if (statvfs(ARENA_DIR, &vfs) != 0)
		return ig_errf(eb, IG_E_IO, "KV-RAM arena \"%s\": statvfs " ARENA_DIR ": %s", path,
		               strerror(errno));
	if ((uint64_t)vfs.f_bavail * vfs.f_frsize < need)
		return ig_errf(eb, IG_E_CONFIG,
		               "KV-RAM arena \"%s\" needs %" PRIu64 " bytes but " ARENA_DIR
		               " has %" PRIu64 " free of %" PRIu64
		               ": lower --reuse-kv-ram-bytes or enlarge " ARENA_DIR
		               " (mount -o remount,size=...)",
		               path, need, (uint64_t)vfs.f_bavail * vfs.f_frsize,
		               (uint64_t)vfs.f_blocks * vfs.f_frsize);
	return IG_E_OK;
}

static int allocate(int fd, const char *path, uint64_t bytes, struct ig_errbuf *eb)
{
	int e = posix_fallocate(fd, 0, (off_t)bytes);

	if (e == ENOSPC || e == ENOMEM)
		return ig_errf(eb, IG_E_CONFIG,
		               "KV-RAM arena \"%s\": " ARENA_DIR " could not allocate %" PRIu64
		               " bytes (%s): lower --reuse-kv-ram-bytes or enlarge " ARENA_DIR,
		               path, bytes, strerror(e));
	if (e)
		return ig_errf(eb, IG_E_IO, "KV-RAM arena \"%s\": posix_fallocate: %s", path,
		               strerror(e));
	return IG_E_OK;
}

/* Create the object as an unnamed file, build it, then give it its name.
 * IG_E_BUSY when someone else linked the name first (the caller retries the
 * open). On success a->fd is locked and a->base maps it. */
static int create(struct arena *a, const char *path, uint64_t bytes, const struct layout *l,
                  struct ig_errbuf *eb)
{
	char proc[64];
	struct arena_hdr *h;
	void *base = NULL;
	int fd, err;

	err = shm_room(path, l->map_bytes, eb);
	if (err)
		return err;
	fd = open(ARENA_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return ig_errf(eb, IG_E_IO,
		               "KV-RAM arena \"%s\": open(O_TMPFILE) in " ARENA_DIR ": %s", path,
		               strerror(errno));
	if (fchmod(fd, 0600) != 0 || flock(fd, LOCK_EX | LOCK_NB) != 0 ||
	    ftruncate(fd, (off_t)l->map_bytes) != 0) {
		err = ig_errf(eb, IG_E_IO, "KV-RAM arena \"%s\": preparing the object: %s", path,
		              strerror(errno));
		goto out_close;
	}
	CRASH_POINT();
	err = allocate(fd, path, l->map_bytes, eb);
	if (err)
		goto out_close;
	CRASH_POINT();
	err = kvram_map_fd(fd, l->map_bytes, &base, path, eb);
	if (err)
		goto out_close;
	/* Fresh tmpfs pages are zero: every record is free, every tag 0. */
	h = base;
	hdr_fill(base, bytes, l);
	atomic_store(&h->next_gen, 1);
	atomic_store(&h->use_clock, 1);
	atomic_store(&h->opens, 0);
	CRASH_POINT();
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	CRASH_POINT();
	if (linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) != 0 &&
	    (errno == EEXIST || linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH) != 0)) {
		if (errno == EEXIST)
			err =
			    ig_errf(eb, IG_E_BUSY, "KV-RAM arena \"%s\" appeared meanwhile", path);
		else
			err = ig_errf(eb, IG_E_IO,
			              "KV-RAM arena \"%s\": linking it into " ARENA_DIR ": %s",
			              path, strerror(errno));
		goto out_unmap;
	}
	a->fd = fd;
	a->base = base;
	return IG_E_OK;

out_unmap:
	munmap(base, l->map_bytes);
out_close:
	close(fd);
	return err;
}

/* Open an existing object; IG_E_NOTFOUND when there is none. */
static int reopen(struct arena *a, const char *path, uint64_t bytes, uint32_t slots,
                  uint64_t slot_bytes, struct ig_errbuf *eb)
{
	static _Thread_local uint8_t page[ARENA_HDR_BYTES];
	const struct arena_hdr *hp = (const struct arena_hdr *)page;
	const char *repair = NULL;
	struct layout l;
	struct stat st;
	void *base = NULL;
	uint64_t map;
	ssize_t got;
	int fd, err;

	fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		if (errno == ENOENT)
			return ig_errf(eb, IG_E_NOTFOUND, "KV-RAM arena \"%s\" does not exist",
			               path);
		return ig_errf(eb, errno == EACCES || errno == ELOOP ? IG_E_PERM : IG_E_IO,
		               "KV-RAM arena \"%s\": open: %s", path, strerror(errno));
	}
	err = kvram_owner_ok(fd, path, &st, eb);
	if (err)
		goto out_close;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		err = ig_errf(eb, errno == EWOULDBLOCK ? IG_E_BUSY : IG_E_IO,
		              "KV-RAM arena \"%s\" is held by another process (%s): is another "
		              "kvstore daemon running on it?",
		              path, strerror(errno));
		goto out_close;
	}
	memset(page, 0, sizeof(page));
	got = pread(fd, page, sizeof(page), 0);
	if (got != (ssize_t)sizeof(page)) {
		err = ig_errf(eb, IG_E_CONFIG,
		              "\"%s\" is not an Ignis KV-RAM arena (%lld bytes long): refusing to "
		              "touch it; remove it or choose another name",
		              path, (long long)st.st_size);
		goto out_close;
	}
	err = kvram_hdr_ok(page, path, bytes, slots, slot_bytes, (uint64_t)st.st_size, &repair, eb);
	if (err)
		goto out_close;
	if (repair)
		layout_of(bytes, slots, slot_bytes, &l);
	map = repair ? l.map_bytes : hp->map_bytes;
	err = allocate(fd, path, map, eb);
	if (err)
		goto out_close;
	err = kvram_map_fd(fd, map, &base, path, eb);
	if (err)
		goto out_close;
	if (repair) {
		/* rebuilt from what was asked; the counters are taken again
		 * from the records by the recovery. Killed midway, the next
		 * open finds it damaged still and does the same. */
		snprintf(a->repaired, sizeof(a->repaired),
		         "%s failed its checksum: rebuilt from the configuration (%" PRIu64
		         " bytes, %u retained slots of %" PRIu64 " bytes)",
		         repair, bytes, slots, slot_bytes);
		hdr_fill(base, bytes, &l);
		CRASH_POINT();
	}
	a->fd = fd;
	a->base = base;
	return IG_E_OK;

out_close:
	close(fd);
	return err;
}

int arena_open(struct arena **out, const char *name, uint64_t bytes, struct ig_errbuf *eb)
{
	return arena_open_slots(out, name, bytes, 0, 0, eb);
}

int arena_open_slots(struct arena **out, const char *name, uint64_t bytes, uint32_t slots,
                     uint64_t slot_bytes, struct ig_errbuf *eb)
{
	char path[sizeof(ARENA_DIR) + ARENA_NAME_MAX + 2];
	struct layout l;
	struct arena *a;
	int err = IG_E_OK;

	*out = NULL;
	err = kvram_name_ok(name, eb);
	if (err)
		return err;
	kvram_path_of(path, sizeof(path), name);
	if (bytes < ARENA_BLOCK || bytes > ARENA_BYTES_MAX)
		return ig_errf(eb, IG_E_CONFIG,
		               "KV-RAM arena \"%s\": %" PRIu64 " bytes asked; the arena takes "
		               "%u to %" PRIu64 " bytes",
		               path, bytes, ARENA_BLOCK, ARENA_BYTES_MAX);
	if (slots > ARENA_SLOTS_MAX || slot_bytes > ARENA_SLOT_BYTES_MAX ||
	    (slots == 0) != (slot_bytes == 0))
		return ig_errf(eb, IG_E_CONFIG,
		               "KV-RAM arena \"%s\": %u retained host slots of %" PRIu64
		               " bytes asked; accepted: 0 slots, or 1..%u slots of 1..%llu bytes",
		               path, slots, slot_bytes, ARENA_SLOTS_MAX, ARENA_SLOT_BYTES_MAX);
	layout_of(bytes, slots, slot_bytes, &l);
	a = calloc(1, sizeof(*a));
	if (!a)
		return ig_errf(eb, IG_E_NOMEM, "KV-RAM arena \"%s\": no memory", path);
	a->fd = -1;
	snprintf(a->name, sizeof(a->name), "%s", name);
	/* Absent: create; created by another meanwhile: open that one. */
	for (int tries = 0; tries < 3; tries++) {
		err = reopen(a, path, bytes, slots, slot_bytes, eb);
		if (err != IG_E_NOTFOUND)
			break;
		err = create(a, path, bytes, &l, eb);
		if (err != IG_E_BUSY)
			break;
	}
	if (err)
		goto out_free;
	a->map_bytes = l.map_bytes;
	a->hdr = (struct arena_hdr *)a->base;
	a->srec = (struct arena_srec *)(a->base + l.seq_off);
	a->rs = (struct arena_rslot *)(a->base + l.srec_off);
	a->sdata = a->base + l.sdata_off;
	a->n_slots = l.slots;
	a->slot_bytes = l.slot_bytes;
	a->slot_stride = l.stride;
	a->wrec = (struct arena_wrec *)(a->base + l.win_off);
	a->data = a->base + l.data_off;
	a->n_blocks = l.n_blocks;
	a->seq_cap = l.seq_cap;
	a->win_cap = l.win_cap;
	a->st.bytes = l.n_blocks * ARENA_BLOCK;
	if (books_init(a)) {
		err = ig_errf(eb, IG_E_NOMEM, "KV-RAM arena \"%s\": no memory for the books", path);
		goto out_close;
	}
	err = recover(a, path, eb);
	if (err)
		goto out_close;
	free_slots_fill(a);
	atomic_fetch_add(&a->hdr->opens, 1);
	CRASH_POINT();
	*out = a;
	return IG_E_OK;

out_close:
	arena_close(a);
	return err;
out_free:
	free(a);
	return err;
}

void arena_close(struct arena *a)
{
	if (!a)
		return;
	if (a->base)
		munmap(a->base, a->map_bytes);
	if (a->fd >= 0)
		close(a->fd); /* drops the lock */
	bm_release(&a->blocks);
	bm_release(&a->wins);
	free(a->live);
	free(a->live_pos);
	free(a->committed);
	free(a->free_slots);
	free(a);
}

int arena_unlink(const char *name, struct ig_errbuf *eb)
{
	char path[sizeof(ARENA_DIR) + ARENA_NAME_MAX + 2];
	int err = kvram_name_ok(name, eb);

	if (err)
		return err;
	kvram_path_of(path, sizeof(path), name);
	if (unlink(path) != 0)
		return ig_errf(eb, errno == ENOENT ? IG_E_NOTFOUND : IG_E_IO,
		               "removing KV-RAM arena \"%s\": %s", path, strerror(errno));
	return IG_E_OK;
}

uint32_t arena_damaged(const struct arena *a, struct arena_damage *out, uint32_t cap)
{
	uint32_t n = (uint32_t)a->st.damaged_sequences;

	for (uint32_t i = 0; i < n && i < cap && i < ARENA_DAMAGE_DETAILS; i++)
		out[i] = a->damage[i];
	return n;
}

const char *arena_repaired(const struct arena *a)
{
	return a->repaired[0] ? a->repaired : NULL;
}

void *arena_base(struct arena *a)
{
	return a->base;
}

uint64_t arena_map_bytes(const struct arena *a)
{
	return a->map_bytes;
}

static uint64_t tick(struct arena *a)
{
	uint64_t t = atomic_fetch_add(&a->hdr->use_clock, 1);

	CRASH_POINT();
	return t;
}

int arena_reserve(struct arena *a, const struct arena_meta *meta, uint64_t *offset,
                  struct ig_errbuf *eb)
{
	const char *why = meta_problem(meta);
	struct arena_srec *r;
	uint64_t nb, first = 0, wfirst = 0, gen;
	uint32_t slot;

	if (why)
		return ig_errf(eb, IG_E_INVAL, "KV-RAM reserve of seq %" PRIu64 ": %s", meta->seq,
		               why);
	if (find_slot(a, meta->seq, &slot) == 0)
		return ig_errf(eb, IG_E_BUSY, "KV-RAM reserve: seq %" PRIu64 " is already held",
		               meta->seq);
	nb = blocks_of(meta->image_bytes);
	if (!bm_first_fit(&a->blocks, nb, &first)) {
		a->st.refusals_full++;
		return ig_errf(
		    eb, IG_E_NOSPACE,
		    "KV-RAM full: seq %" PRIu64 " needs %" PRIu64 " bytes (%" PRIu64
		    " blocks); the largest free extent is %" PRIu64 " bytes, %" PRIu64
		    " free of %" PRIu64,
		    meta->seq, nb * ARENA_BLOCK, nb, bm_largest(&a->blocks) * ARENA_BLOCK,
		    (a->n_blocks - a->used_blocks) * ARENA_BLOCK, a->n_blocks * ARENA_BLOCK);
	}
	if (a->n_free_slots == 0) {
		a->st.refusals_full++;
		return ig_errf(eb, IG_E_NOSPACE,
		               "KV-RAM full: seq %" PRIu64 ": the index holds %u sequences, "
		               "its most",
		               meta->seq, a->seq_cap);
	}
	if (!bm_first_fit(&a->wins, meta->windows, &wfirst)) {
		a->st.refusals_full++;
		return ig_errf(eb, IG_E_NOSPACE,
		               "KV-RAM full: seq %" PRIu64 " needs %u window records; the index "
		               "has %" PRIu64 " contiguous free of %u (windows smaller than %u "
		               "bytes use them up before the blocks)",
		               meta->seq, meta->windows, bm_largest(&a->wins), a->win_cap,
		               ARENA_BLOCK);
	}
	slot = a->free_slots[--a->n_free_slots];
	r = &a->srec[slot];
	gen = atomic_fetch_add(&a->hdr->next_gen, 1);
	CRASH_POINT();
	for (uint32_t k = 0; k < meta->windows; k++) {
		atomic_store_explicit(&a->wrec[wfirst + k].tag, 0, memory_order_relaxed);
		a->wrec[wfirst + k].sum = 0;
	}
	CRASH_POINT();
	r->windows = meta->windows;
	r->seq = meta->seq;
	r->model_id = meta->model_id;
	CRASH_POINT(); /* a torn record */
	r->kv_format = meta->kv_format;
	r->cls = meta->cls;
	r->image_bytes = meta->image_bytes;
	r->window_bytes = meta->window_bytes;
	r->wfirst = (uint32_t)wfirst;
	r->first_block = first;
	r->gen = gen;
	r->check = srec_check(r);
	CRASH_POINT();
	atomic_store_explicit(&r->last_use, tick(a), memory_order_relaxed);
	CRASH_POINT();
	r->pad[0] = r->pad[1] = 0;
	/* the commit point */
	atomic_store_explicit(&r->state, SREC_LIVE, memory_order_release);
	CRASH_POINT();
	books_add(a, slot);
	a->committed[slot] = 0;
	a->st.reserves++;
	*offset = (uint64_t)(a->data - a->base) + first * ARENA_BLOCK;
	return IG_E_OK;
}

int arena_commit(struct arena *a, uint64_t seq, uint32_t k, uint64_t len, uint64_t sum,
                 struct ig_errbuf *eb)
{
	struct arena_srec *r;
	struct arena_wrec *w;
	uint64_t want;
	uint32_t slot;

	if (find_slot(a, seq, &slot) != 0)
		return ig_errf(eb, IG_E_NOTFOUND, "KV-RAM commit: seq %" PRIu64 " is not held",
		               seq);
	r = &a->srec[slot];
	if (k >= r->windows)
		return ig_errf(eb, IG_E_INVAL,
		               "KV-RAM commit: seq %" PRIu64 " has %u windows, no window %u", seq,
		               r->windows, k);
	want = window_len(r, k);
	if (len != want)
		return ig_errf(eb, IG_E_INVAL,
		               "KV-RAM commit: window %u of seq %" PRIu64 " is %" PRIu64
		               " bytes, not %" PRIu64,
		               k, seq, want, len);
	w = &a->wrec[r->wfirst + k];
	if (atomic_load_explicit(&w->tag, memory_order_acquire) == r->gen && w->sum != sum)
		return ig_errf(eb, IG_E_INVAL,
		               "KV-RAM commit: window %u of seq %" PRIu64 " is committed with sum "
		               "%016" PRIx64 ", not %016" PRIx64,
		               k, seq, w->sum, sum);
	/* The bytes are not hashed here: the writer took their checksum while
	 * copying them in (kvcopy.h) and every reader checks them while copying
	 * them out (ADR 0015). */
	if (atomic_load_explicit(&w->tag, memory_order_acquire) == r->gen)
		return IG_E_OK; /* a retried commit */
	w->sum = sum;
	CRASH_POINT();
	/* the commit point: from here the window is acknowledged */
	atomic_store_explicit(&w->tag, r->gen, memory_order_release);
	CRASH_POINT();
	a->committed[slot]++;
	a->st.commits++;
	return IG_E_OK;
}

static void info_of(const struct arena *a, uint32_t slot, struct arena_info *info)
{
	const struct arena_srec *r = &a->srec[slot];

	memset(info, 0, sizeof(*info));
	info->meta.seq = r->seq;
	info->meta.model_id = r->model_id;
	info->meta.kv_format = r->kv_format;
	info->meta.cls = r->cls;
	info->meta.image_bytes = r->image_bytes;
	info->meta.window_bytes = r->window_bytes;
	info->meta.windows = r->windows;
	info->offset = (uint64_t)(a->data - a->base) + r->first_block * ARENA_BLOCK;
	info->reserved = blocks_of(r->image_bytes) * ARENA_BLOCK;
	info->committed = a->committed[slot];
	info->complete = a->committed[slot] == r->windows;
	info->last_use = atomic_load_explicit(&r->last_use, memory_order_relaxed);
}

int arena_get(struct arena *a, uint64_t seq, struct arena_info *info, struct arena_window *w,
              uint32_t cap, struct ig_errbuf *eb)
{
	struct arena_srec *r;
	uint32_t slot;

	if (find_slot(a, seq, &slot) != 0)
		return ig_errf(eb, IG_E_NOTFOUND, "KV-RAM: seq %" PRIu64 " is not held", seq);
	r = &a->srec[slot];
	atomic_store_explicit(&r->last_use, tick(a), memory_order_relaxed);
	CRASH_POINT();
	if (info)
		info_of(a, slot, info);
	for (uint32_t k = 0; w && k < cap && k < r->windows; k++) {
		const struct arena_wrec *x = &a->wrec[r->wfirst + k];
		bool done = atomic_load_explicit(&x->tag, memory_order_acquire) == r->gen;

		w[k].offset = (uint64_t)(a->data - a->base) + r->first_block * ARENA_BLOCK +
		              (uint64_t)k * r->window_bytes;
		w[k].len = done ? window_len(r, k) : 0;
		w[k].sum = done ? x->sum : 0;
	}
	return IG_E_OK;
}

int arena_drop(struct arena *a, uint64_t seq, struct ig_errbuf *eb)
{
	uint32_t slot;

	if (find_slot(a, seq, &slot) != 0)
		return ig_errf(eb, IG_E_NOTFOUND, "KV-RAM drop: seq %" PRIu64 " is not held", seq);
	/* the commit point: one word */
	atomic_store_explicit(&a->srec[slot].state, SREC_FREE, memory_order_release);
	CRASH_POINT();
	books_remove(a, slot);
	a->st.drops++;
	return IG_E_OK;
}

uint32_t arena_list(struct arena *a, struct arena_info *out, uint32_t cap)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < a->n_live && n < cap; i++)
		info_of(a, a->live[i], &out[n++]);
	return n;
}

uint64_t arena_pick_victim_ex(struct arena *a, uint64_t except, const uint64_t *skip,
                              uint32_t n_skip, bool (*as_agent)(void *ctx, uint64_t seq), void *ctx)
{
	const struct arena_srec *best = NULL;
	uint32_t best_cls = 0;

	for (uint32_t i = 0; i < a->n_live; i++) {
		uint32_t s = a->live[i];
		const struct arena_srec *r = &a->srec[s];
		uint32_t cls = r->cls;
		bool passed = r->seq == except;

		for (uint32_t j = 0; j < n_skip; j++)
			passed |= r->seq == skip[j];
		if (passed || a->committed[s] != r->windows)
			continue;
		if (cls != ARENA_AGENT && as_agent && as_agent(ctx, r->seq))
			cls = ARENA_AGENT;
		if (!best || (cls == ARENA_AGENT && best_cls != ARENA_AGENT) ||
		    (cls == best_cls && atomic_load(&r->last_use) < atomic_load(&best->last_use))) {
			best = r;
			best_cls = cls;
		}
	}
	return best ? best->seq : 0;
}

bool arena_fits_if_given_up(struct arena *a, uint64_t bytes)
{
	uint64_t words = (a->blocks.n + 63) / 64, at;
	struct bmap b = {.n = a->blocks.n};
	bool fits;

	if (bytes == 0 || blocks_of(bytes) > a->n_blocks)
		return false;
	b.w = malloc((words ? words : 1) * sizeof(uint64_t));
	if (!b.w)
		return false;
	memcpy(b.w, a->blocks.w, words * sizeof(uint64_t));
	for (uint32_t i = 0; i < a->n_live; i++) {
		const struct arena_srec *r = &a->srec[a->live[i]];

		if (a->committed[a->live[i]] == r->windows)
			bm_put(&b, r->first_block, blocks_of(r->image_bytes), false);
	}
	fits = bm_first_fit(&b, blocks_of(bytes), &at);
	bm_release(&b);
	return fits;
}

void arena_stats(struct arena *a, struct arena_stats *st)
{
	*st = a->st;
	st->bytes = a->n_blocks * ARENA_BLOCK;
	st->used_bytes = a->used_blocks * ARENA_BLOCK;
	st->free_bytes = st->bytes - st->used_bytes;
	st->largest_free = bm_largest(&a->blocks) * ARENA_BLOCK;
	st->sequences = a->n_live;
	st->slots = a->n_slots;
	st->slot_bytes = a->slot_bytes;
	st->slots_free = st->slots_writing = st->slots_held = 0;
	for (uint32_t i = 0; i < a->n_slots; i++)
		switch (rslot_state(&a->rs[i])) {
		case ARENA_SLOT_WRITING:
			st->slots_writing++;
			break;
		case ARENA_SLOT_HELD:
			st->slots_held++;
			break;
		default:
			st->slots_free++;
		}
	st->complete = 0;
	for (uint32_t i = 0; i < a->n_live; i++)
		if (a->committed[a->live[i]] == a->srec[a->live[i]].windows)
			st->complete++;
}

/* ---- retained host slots ---- */

static void rslot_info(const struct arena *a, uint32_t i, const struct arena_rslot *r,
                       uint32_t state, struct arena_slot_info *out)
{
	memset(out, 0, sizeof(*out));
	out->slot = i;
	out->state = state;
	out->offset = (uint64_t)(a->sdata - a->base) + (uint64_t)i * a->slot_stride;
	if (state == ARENA_SLOT_FREE)
		return;
	out->meta = (struct arena_slot_meta){.key = r->key,
	                                     .model_id = r->model_id,
	                                     .image_bytes = r->image_bytes,
	                                     .kind = r->kind,
	                                     .cls = r->cls,
	                                     .tokens = r->tokens};
	out->gen = r->gen;
	out->sum = state == ARENA_SLOT_HELD ? r->sum : 0;
	out->last_use = atomic_load_explicit(&r->last_use, memory_order_relaxed);
}

/* The held slot to give up first: checkpoints before prefixes, agent (or
 * an interactive one `as_agent` says ranks as agent) before interactive,
 * then least recently used; -1 when none is held. */
static int rslot_pick(const struct arena *a, bool (*as_agent)(void *ctx, uint32_t slot), void *ctx)
{
	int best = -1;
	uint32_t best_kind = 0, best_cls = 0;
	uint64_t best_use = 0;

	for (uint32_t i = 0; i < a->n_slots; i++) {
		const struct arena_rslot *r = &a->rs[i];
		uint32_t kind, cls;
		uint64_t use;

		if (rslot_state(r) != ARENA_SLOT_HELD)
			continue;
		kind = r->kind == ARENA_CHECKPOINT ? 0 : 1;
		cls = r->cls == ARENA_AGENT || (as_agent && as_agent(ctx, i)) ? 0 : 1;
		use = atomic_load_explicit(&r->last_use, memory_order_relaxed);
		if (best < 0 || kind < best_kind || (kind == best_kind && cls < best_cls) ||
		    (kind == best_kind && cls == best_cls && use < best_use)) {
			best = (int)i;
			best_kind = kind;
			best_cls = cls;
			best_use = use;
		}
	}
	return best;
}

int arena_slot_capture(struct arena *a, const struct arena_slot_meta *m,
                       bool (*as_agent)(void *ctx, uint32_t slot), void *ctx,
                       struct arena_slot_info *out, struct arena_slot_info *given_up,
                       struct ig_errbuf *eb)
{
	struct arena_rslot *r;
	int pick = -1;
	uint64_t gen;

	if (given_up)
		memset(given_up, 0, sizeof(*given_up));
	if (!m->key || (m->kind != ARENA_CHECKPOINT && m->kind != ARENA_PREFIX) ||
	    m->cls > ARENA_AGENT || !m->image_bytes)
		return ig_errf(eb, IG_E_INVAL,
		               "retained slot capture: key %" PRIu64 ", kind %u, class %u, %" PRIu64
		               " bytes; accepted: a key != 0, kind 1 (checkpoint) or 2 (prefix), "
		               "class 0 (interactive) or 1 (agent), at least 1 byte",
		               m->key, m->kind, m->cls, m->image_bytes);
	if (a->n_slots == 0) {
		a->st.slot_skips_none++;
		return ig_errf(eb, IG_E_NOSPACE,
		               "retained slot capture skipped: there are no retained host slots "
		               "(--reuse-retained-host 0)");
	}
	if (m->image_bytes > a->slot_bytes) {
		a->st.slot_skips_size++;
		return ig_errf(eb, IG_E_INVAL,
		               "retained slot capture skipped: an image of %" PRIu64
		               " bytes does not fit a slot of %" PRIu64 " bytes",
		               m->image_bytes, a->slot_bytes);
	}
	for (uint32_t i = 0; i < a->n_slots; i++) {
		r = &a->rs[i];
		if (rslot_state(r) != ARENA_SLOT_FREE && r->key == m->key &&
		    r->model_id == m->model_id && r->kind == m->kind) {
			a->st.slot_skips_duplicate++;
			return ig_errf(
			    eb, IG_E_BUSY,
			    "retained slot capture skipped: slot %u already %s key %016" PRIx64, i,
			    rslot_state(r) == ARENA_SLOT_HELD ? "holds" : "is writing", m->key);
		}
		if (pick < 0 && rslot_state(r) == ARENA_SLOT_FREE)
			pick = (int)i;
	}
	if (pick < 0) {
		pick = rslot_pick(a, as_agent, ctx);
		if (pick < 0) {
			a->st.slot_skips_busy++;
			return ig_errf(
			    eb, IG_E_NOSPACE,
			    "retained slot capture skipped: all %u retained host slots are "
			    "being written",
			    a->n_slots);
		}
		r = &a->rs[pick];
		if (given_up)
			rslot_info(a, (uint32_t)pick, r, ARENA_SLOT_HELD, given_up);
		/* the give-up point: one word */
		atomic_store_explicit(&r->state, ARENA_SLOT_FREE, memory_order_release);
		CRASH_POINT();
		a->st.slot_given_up++;
	}
	r = &a->rs[pick];
	gen = atomic_fetch_add(&a->hdr->next_gen, 1);
	CRASH_POINT();
	r->kind = m->kind;
	r->cls = m->cls;
	r->tokens = m->tokens;
	r->key = m->key;
	CRASH_POINT(); /* a torn record (still free) */
	r->model_id = m->model_id;
	r->image_bytes = m->image_bytes;
	r->sum = 0;
	r->gen = gen;
	r->check = rslot_check(r);
	r->pad[0] = r->pad[1] = r->pad[2] = 0;
	CRASH_POINT();
	atomic_store_explicit(&r->last_use, tick(a), memory_order_relaxed);
	CRASH_POINT();
	atomic_store_explicit(&r->state, ARENA_SLOT_WRITING, memory_order_release);
	CRASH_POINT();
	a->st.slot_captures++;
	rslot_info(a, (uint32_t)pick, r, ARENA_SLOT_WRITING, out);
	return IG_E_OK;
}

int arena_slot_publish(struct arena *a, uint32_t slot, uint64_t gen, uint64_t sum,
                       struct ig_errbuf *eb)
{
	struct arena_rslot *r;
	uint32_t state;

	if (slot >= a->n_slots)
		return ig_errf(eb, IG_E_NOTFOUND, "retained slot %u: there are %u", slot,
		               a->n_slots);
	r = &a->rs[slot];
	state = rslot_state(r);
	if (state == ARENA_SLOT_HELD && r->gen == gen) {
		if (r->sum == sum)
			return IG_E_OK; /* a retried publish */
		return ig_errf(eb, IG_E_INVAL,
		               "retained slot %u (generation %" PRIu64 ") is published with sum "
		               "%016" PRIx64 ", not %016" PRIx64,
		               slot, gen, r->sum, sum);
	}
	if (state != ARENA_SLOT_WRITING || r->gen != gen)
		return ig_errf(eb, IG_E_NOTFOUND,
		               "retained slot %u is not being written under generation %" PRIu64
		               " (given up or dropped meanwhile)",
		               slot, gen);
	r->sum = sum;
	r->check = rslot_check(r);
	CRASH_POINT();
	/* the publish point */
	atomic_store_explicit(&r->state, ARENA_SLOT_HELD, memory_order_release);
	CRASH_POINT();
	a->st.slot_publishes++;
	return IG_E_OK;
}

int arena_slot_claim(struct arena *a, uint64_t key, uint64_t model_id, uint32_t kind,
                     struct arena_slot_info *out, struct ig_errbuf *eb)
{
	for (uint32_t i = 0; i < a->n_slots; i++) {
		struct arena_rslot *r = &a->rs[i];

		if (rslot_state(r) != ARENA_SLOT_HELD || r->key != key || r->model_id != model_id ||
		    (kind && r->kind != kind))
			continue;
		atomic_store_explicit(&r->last_use, tick(a), memory_order_relaxed);
		CRASH_POINT();
		a->st.slot_claims++;
		rslot_info(a, i, r, ARENA_SLOT_HELD, out);
		return IG_E_OK;
	}
	a->st.slot_claim_misses++;
	return ig_errf(eb, IG_E_NOTFOUND,
	               "no retained slot holds key %016" PRIx64 " for model %016" PRIx64, key,
	               model_id);
}

int arena_slot_drop(struct arena *a, uint32_t slot, uint64_t gen, struct ig_errbuf *eb)
{
	struct arena_rslot *r;

	if (slot >= a->n_slots || rslot_state(&a->rs[slot]) == ARENA_SLOT_FREE ||
	    a->rs[slot].gen != gen)
		return ig_errf(eb, IG_E_NOTFOUND,
		               "retained slot %u does not hold generation %" PRIu64, slot, gen);
	r = &a->rs[slot];
	atomic_store_explicit(&r->state, ARENA_SLOT_FREE, memory_order_release);
	CRASH_POINT();
	return IG_E_OK;
}

uint32_t arena_slot_list(struct arena *a, uint32_t first, struct arena_slot_info *out, uint32_t cap)
{
	uint32_t n = 0;

	for (uint32_t i = first; i < a->n_slots && n < cap; i++)
		rslot_info(a, i, &a->rs[i], rslot_state(&a->rs[i]), &out[n++]);
	return n;
}

