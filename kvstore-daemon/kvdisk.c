/*
 * kvdisk.c - KV-disk (see kvdisk.h): whole sequences in one LMDB environment,
 * one record per window, every record self-checking.
 *
 * This file owns the on-disk record layout, the LMDB flags (ADR 0011), the
 * ceiling's accounting and the state file that tells a process restart from
 * a machine crash.
 *
 * Files in the directory: data.mdb and lock.mdb (LMDB's), kvdisk.state (ours:
 * flock()ed while open, so a second daemon is refused; it records whether
 * the environment was last left synced).
 *
 * Named LMDB databases, keys big-endian so that LMDB's memcmp order is
 * numeric order (a sequence's records sit together, windows in order):
 *   "win"  key (seq u64, window u64), 16 B  ->  header + the window's bytes
 *   "seq"  key seq u64, 8 B                 ->  header alone (the sequence
 *                                               record: it says "whole")
 *   "tick" key "tick"                       ->  a counter (kvdisk__tick)
 * A put writes every window record, then the sequence record, in one write
 * transaction: what a reader or a restarted daemon sees is all of it or none.
 * A stream (kvdisk_wbegin/kvdisk_wput: a move straight from the device)
 * writes one window record per transaction and the sequence record with the
 * last: until then the sequence is not held, and after a crash its window
 * records, having no sequence record, are erased by open's scan.
 *
 * Record header, 88 B, little-endian. On disk: never renumber; a change bumps
 * KVDISK_LAYOUT and older records read as foreign (lost, never served).
 *
 *   off size field
 *     0   4  magic "IGKV"
 *     4   2  layout version (1)
 *     6   2  kind: 1 window record, 2 sequence record
 *     8   8  seq
 *    16   8  put id: the LMDB transaction id of the put that wrote the
 *            sequence; every record of one put carries the same, so a stale
 *            window of an earlier sequence with the same id is told apart
 *    24   8  model_id
 *    32   8  image_bytes
 *    40   4  kv_format
 *    44   4  class
 *    48   4  window_bytes
 *    52   4  windows
 *    56   4  window index (UINT32_MAX in the sequence record)
 *    60   4  zero
 *    64   8  len: window record, the payload bytes after the header (the
 *            window's length); sequence record, the bytes of all the
 *            sequence's records, headers included (its stored_bytes)
 *    72   8  xxh: window record, the payload's checksum (kvcopy_sum:
 *            XXH3-64, seed 0, as KV-RAM's); sequence record, XXH64 of the
 *            windows' payload checksums in order (8 B LE each)
 *    80   8  XXH64 of bytes 0..79
 *
 * Invariants (kvdisk_check-like, verified by open's scan):
 *   - a sequence record exists only with all its `windows` window records,
 *     written by the same put, and its len equals their sizes plus its own;
 *   - used_bytes is the sum of the sizes of every record (LMDB values) of
 *     every sequence held; it never exceeds the ceiling through a put (a
 *     lower flag at reopen may leave it above: puts are refused until drops
 *     bring it under);
 *   - nothing is served whose header, key, lengths, put id, identity or
 *     payload checksum fail: such a sequence is dropped and reported lost.
 *
 * The ceiling is enforced by this accounting, before LMDB is touched.
 * LMDB's own overhead (B-tree pages, the free list, page rounding of each
 * overflow record: under 4 KiB a window) lives in the map's headroom above
 * the ceiling; MDB_MAP_FULL, should fragmentation still reach it, is "tier
 * full" with nothing written, as is a volume that cannot back the pages.
 *
 * Blocks under the map (kvdisk__room). With MDB_WRITEMAP LMDB writes
 * through a shared mapping of data.mdb, a sparse file the map's size: a
 * page the volume cannot back is a SIGBUS that kills the daemon, not an
 * error. So no write transaction begins before the pages it may take have
 * blocks: every page up to LMDB's last has them (LMDB wrote it), and before
 * each write transaction the blocks beyond are taken, in 64 MiB steps, by
 * fallocate or, on a filesystem without it (ext2, ext3 files without
 * extents, NFS before 4.2), by faulting those pages in writable ahead of
 * LMDB (MADV_POPULATE_WRITE: the filesystem backs them as it would for
 * LMDB's store, and a page it cannot back is EFAULT, not a signal), or by
 * writing zeros over them (older kernels; and the errno that says why).
 * Those pages are beyond LMDB's last and no transaction is open: nothing
 * of ours is there. A volume that cannot give them is "tier full", nothing
 * written. Each put leaves KVDISK_MARGIN backed beyond itself, so a drop,
 * or open after a restart, finds its pages on a volume that filled since.
 * Blocks once ours stay ours, so a volume that another process fills
 * between the reservation and the transaction changes nothing. Why this
 * rather than LMDB without MDB_WRITEMAP on such a filesystem, and what was
 * measured: ADR 0020, "A full volume".
 */
#define _GNU_SOURCE
#include "kvdisk.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <lmdb.h>
#include <xxhash.h>

#include "common/bytes.h"
#include "kvram/kvcopy.h"

#define KVDISK_MAGIC      "IGKV"
#define KVDISK_LAYOUT     2u /* 2: payload checksums are XXH3-64 (ADR 0015) */
#define KVDISK_HDR        88u
#define KVDISK_KIND_WIN   1u
#define KVDISK_KIND_SEQ   2u
#define KVDISK_SEQ_WINDOW UINT32_MAX

/* The map (the most the file can grow to) is the ceiling plus this headroom
 * for LMDB's overhead: a quarter, plus 64 MiB for small ceilings. Page
 * rounding is under 4 KiB a window (1.6% at 256 KiB windows), B-tree and
 * free-list pages far less; the rest is fragmentation of freed overflow
 * runs. Measured (ADR 0011) under churn at the ceiling: the file peaked at
 * 1.07-1.15x the ceiling with one window size, 1.33-1.38x with three mixed
 * window sizes; past the map a put is "tier full" (MDB_MAP_FULL, nothing
 * written). The map is virtual: blocks are taken only as pages are used,
 * and never out of the volume's reserve (kvdisk__ceiling). */
#define KVDISK_HEADROOM(c) ((c) / 4 + (64ull << 20))
/* Blocks are taken ahead of LMDB's last page in steps of this (fewer calls,
 * longer extents); a step the volume cannot give is cut to what the
 * transaction needs. */
#define KVDISK_GROW_STEP (64ull << 20)
/* What a write transaction that writes no record takes beyond LMDB's last
 * page (a drop, the erase of an abandoned stream, open's recovery, and the
 * tick after each), apart from the free list's record of the pages it frees
 * (8 B a page, counted for the whole file): its B-tree pages. A leaf holds
 * over 60 window records, so even a sequence of ARENA_MAX_WINDOWS records
 * dirties under 100 leaf and branch pages (400 KiB). */
#define KVDISK_DROP_ROOM (1ull << 20)
/* Kept backed beyond every put: four drops' room, so that a drop, or the
 * open after a restart, finds its pages backed on a volume that filled
 * since the put. */
#define KVDISK_MARGIN (4ull << 20)
/* Where the filesystem has no fallocate, blocks are taken this much at a
 * call: 64 calls a step. */
#define KVDISK_ZEROS (1u << 20)

#define KVDISK_STATE_FILE "kvdisk.state"
#define KVDISK_STATE_LEN  75 /* "kvdisk-state 1 dirty <36> <16>\n" */

struct kvdisk_hdr {
	uint32_t version, kind;
	uint64_t seq, put_id, model_id, image_bytes;
	uint32_t kv_format, cls, window_bytes, windows, window;
	uint64_t len, xxh;
};

/* A sequence dropped at open: reported (IG_E_KV_LOST) to the first who asks
 * for it, then forgotten. */
struct kvdisk_note {
	uint64_t seq;
	char why[200];
};

/* A write under way, a window at a time (kvdisk_wbegin). */
struct kvdisk_stream {
	bool open;
	struct arena_meta meta;
	uint64_t put_id; /* the first window's transaction id: every record's */
	uint64_t stored, last_sum;
	uint32_t next;     /* the window to write next */
	XXH64_state_t *xd; /* digest of the written windows' checksums */
};

struct kvdisk {
	MDB_env *env;
	MDB_dbi dseq, dwin, dtick;
	int state_fd, data_fd;
	bool can_fallocate; /* false: pages populated instead (kvdisk__back) */
	bool can_populate;  /* false: zeros written instead */
	unsigned flags;     /* KVDISK_OPEN_* */
	bool failed;        /* LMDB refused a commit or an abort midway: refuse work */
	char path[PATH_MAX];
	char boot[37];
	uint64_t ceiling, map_bytes, used;
	uint64_t alloc_end;   /* data.mdb has blocks below this */
	unsigned char *zeros; /* KVDISK_ZEROS of them (kvdisk__zeros) */
	uint32_t sequences;
	uint64_t writes, reads, refusals_full, lost, drops;
	XXH64_state_t *xd; /* digest of the windows' payload checksums */
	struct kvdisk_note *notes;
	uint32_t n_notes, cap_notes;
	struct kvdisk_stream streams[KVDISK_STREAMS];
	uint64_t pending; /* the bytes the writes under way will take */
};

/* ---- encoding ---------------------------------------------------------- */

static void kvdisk__encode(unsigned char *b, const struct kvdisk_hdr *h)
{
	memcpy(b, KVDISK_MAGIC, 4);
	le_put16(b + 4, h->version);
	le_put16(b + 6, h->kind);
	le_put64(b + 8, h->seq);
	le_put64(b + 16, h->put_id);
	le_put64(b + 24, h->model_id);
	le_put64(b + 32, h->image_bytes);
	le_put32(b + 40, h->kv_format);
	le_put32(b + 44, h->cls);
	le_put32(b + 48, h->window_bytes);
	le_put32(b + 52, h->windows);
	le_put32(b + 56, h->window);
	le_put32(b + 60, 0);
	le_put64(b + 64, h->len);
	le_put64(b + 72, h->xxh);
	le_put64(b + 80, XXH64(b, 80, 0));
}

/* Decode a record's header; false with `why` when it is not one of ours or
 * not intact. The layout version is decoded, not judged: callers say
 * "foreign" for another one. */
static bool kvdisk__decode(const MDB_val *v, struct kvdisk_hdr *h, char *why, size_t n)
{
	const unsigned char *b = v->mv_data;

	if (v->mv_size < KVDISK_HDR) {
		snprintf(why, n, "torn: the record holds %zu bytes, less than its %u-byte header",
		         v->mv_size, KVDISK_HDR);
		return false;
	}
	if (memcmp(b, KVDISK_MAGIC, 4)) {
		snprintf(why, n, "corrupt header: bad magic");
		return false;
	}
	if (le_get64(b + 80) != XXH64(b, 80, 0)) {
		snprintf(why, n, "corrupt header: its checksum does not match");
		return false;
	}
	h->version = le_get16(b + 4);
	h->kind = le_get16(b + 6);
	h->seq = le_get64(b + 8);
	h->put_id = le_get64(b + 16);
	h->model_id = le_get64(b + 24);
	h->image_bytes = le_get64(b + 32);
	h->kv_format = le_get32(b + 40);
	h->cls = le_get32(b + 44);
	h->window_bytes = le_get32(b + 48);
	h->windows = le_get32(b + 52);
	h->window = le_get32(b + 56);
	h->len = le_get64(b + 64);
	h->xxh = le_get64(b + 72);
	if (le_get32(b + 60)) {
		snprintf(why, n, "corrupt header: reserved field not zero");
		return false;
	}
	return true;
}

static void kvdisk__key_seq(unsigned char k[8], MDB_val *kv, uint64_t seq)
{
	be_put64(k, seq);
	kv->mv_data = k;
	kv->mv_size = 8;
}

static void kvdisk__key_win(unsigned char k[16], MDB_val *kv, uint64_t seq, uint32_t w)
{
	be_put64(k, seq);
	be_put64(k + 8, w);
	kv->mv_data = k;
	kv->mv_size = 16;
}

/* ---- sequence shapes --------------------------------------------------- */

static bool kvdisk__meta_ok(const struct arena_meta *m)
{
	return m->seq && m->image_bytes && m->window_bytes && m->windows &&
	       m->windows <= ARENA_MAX_WINDOWS &&
	       (m->image_bytes + m->window_bytes - 1) / m->window_bytes == m->windows;
}

static uint64_t kvdisk__win_len(const struct arena_meta *m, uint32_t k)
{
	uint64_t at = (uint64_t)k * m->window_bytes;

	return m->image_bytes - at < m->window_bytes ? m->image_bytes - at : m->window_bytes;
}

static uint64_t kvdisk__stored(const struct arena_meta *m)
{
	return (uint64_t)KVDISK_HDR * (m->windows + 1u) + m->image_bytes;
}

static void kvdisk__meta_of(const struct kvdisk_hdr *h, struct arena_meta *m)
{
	*m = (struct arena_meta){.seq = h->seq,
	                         .model_id = h->model_id,
	                         .kv_format = h->kv_format,
	                         .cls = h->cls,
	                         .image_bytes = h->image_bytes,
	                         .window_bytes = h->window_bytes,
	                         .windows = h->windows};
}

/* A sequence record, decoded and judged against its key. */
static bool kvdisk__seq_ok(uint64_t seq, const MDB_val *v, struct kvdisk_hdr *h, char *why,
                           size_t n)
{
	struct arena_meta m;

	if (!kvdisk__decode(v, h, why, n))
		return false;
	if (h->version != KVDISK_LAYOUT) {
		snprintf(why, n, "foreign: layout version %u (this build reads %u)", h->version,
		         KVDISK_LAYOUT);
		return false;
	}
	kvdisk__meta_of(h, &m);
	if (h->kind != KVDISK_KIND_SEQ || h->seq != seq || h->window != KVDISK_SEQ_WINDOW ||
	    v->mv_size != KVDISK_HDR) {
		snprintf(why, n, "corrupt: the sequence record does not match its key");
		return false;
	}
	if (!kvdisk__meta_ok(&m) || h->len != kvdisk__stored(&m)) {
		snprintf(why, n,
		         "corrupt: the sequence record's shape is impossible (%" PRIu64
		         " bytes in %u windows of %u, %" PRIu64 " stored)",
		         h->image_bytes, h->windows, h->window_bytes, h->len);
		return false;
	}
	return true;
}

/* Window record `k` of the sequence whose record is `sh`. */
static bool kvdisk__win_ok(const struct kvdisk_hdr *sh, uint32_t k, const MDB_val *v,
                           struct kvdisk_hdr *wh, char *why, size_t n)
{
	struct arena_meta m;
	uint64_t len;

	if (!kvdisk__decode(v, wh, why, n))
		return false;
	if (wh->version != sh->version) {
		snprintf(why, n, "foreign: layout version %u where the sequence has %u",
		         wh->version, sh->version);
		return false;
	}
	if (wh->kind != KVDISK_KIND_WIN || wh->seq != sh->seq || wh->window != k) {
		snprintf(why, n, "corrupt: the record does not match its key");
		return false;
	}
	if (wh->model_id != sh->model_id || wh->kv_format != sh->kv_format) {
		snprintf(why, n,
		         "foreign: model %016" PRIx64 " KV format %u where the sequence has "
		         "model %016" PRIx64 " KV format %u",
		         wh->model_id, wh->kv_format, sh->model_id, sh->kv_format);
		return false;
	}
	if (wh->put_id != sh->put_id) {
		snprintf(why, n, "stale: written by put %" PRIu64 ", the sequence by put %" PRIu64,
		         wh->put_id, sh->put_id);
		return false;
	}
	if (wh->cls != sh->cls || wh->image_bytes != sh->image_bytes ||
	    wh->window_bytes != sh->window_bytes || wh->windows != sh->windows) {
		snprintf(why, n, "foreign: its shape differs from the sequence record's");
		return false;
	}
	kvdisk__meta_of(sh, &m);
	len = kvdisk__win_len(&m, k);
	if (wh->len != len || v->mv_size != KVDISK_HDR + len) {
		snprintf(why, n,
		         "torn: %zu bytes stored, header says %" PRIu64 " of payload, the window "
		         "is %" PRIu64,
		         v->mv_size, wh->len, len);
		return false;
	}
	return true;
}

/* ---- copying ------------------------------------------------------------ */

/* Ask the kernel to read a large record's pages ahead (a cold 12 MiB
 * window is read in large requests rather than 128 KiB fault by fault).
 * Advisory: errors ignored. Not below 1 MiB: there the fault's own
 * read-around does as well, and the call cost 8% of a warm 256 KiB get. */
static void kvdisk__willneed(const void *p, uint64_t len)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)p & ~(pg - 1);

	if (len < (1u << 20))
		return;
	(void)madvise((void *)a, (uintptr_t)p + len - a, MADV_WILLNEED);
}

static void kvdisk__digest_add(XXH64_state_t *st, uint64_t x)
{
	unsigned char b[8];

	le_put64(b, x);
	XXH64_update(st, b, 8);
}

/* ---- notes of sequences lost at open ----------------------------------- */

static void kvdisk__note_add(struct kvdisk *d, uint64_t seq, const char *why)
{
	if (d->n_notes == d->cap_notes) {
		uint32_t cap = d->cap_notes ? 2 * d->cap_notes : 16;
		struct kvdisk_note *n = realloc(d->notes, cap * sizeof(*n));

		if (!n)
			return; /* the loss is still counted; only its story is dropped */
		d->notes = n;
		d->cap_notes = cap;
	}
	d->notes[d->n_notes].seq = seq;
	snprintf(d->notes[d->n_notes].why, sizeof(d->notes[0].why), "%s", why);
	d->n_notes++;
}

/* Take the note about `seq`, if any: true and the story in `why`. */
static bool kvdisk__note_take(struct kvdisk *d, uint64_t seq, char *why, size_t n)
{
	for (uint32_t i = 0; i < d->n_notes; i++)
		if (d->notes[i].seq == seq) {
			if (why)
				snprintf(why, n, "%s", d->notes[i].why);
			d->notes[i] = d->notes[--d->n_notes];
			return true;
		}
	return false;
}

/* ---- the state file ---------------------------------------------------- */

static void kvdisk__boot_id(char out[37])
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
	char b[64] = "";

	if (f) {
		if (!fgets(b, sizeof(b), f))
			b[0] = '\0';
		fclose(f);
	}
	b[strcspn(b, "\n")] = '\0';
	if (strlen(b) != 36)
		snprintf(b, sizeof(b), "%s", "unknown");
	snprintf(out, 37, "%s", b);
}

static int kvdisk__state_write(struct kvdisk *d, const char *state, struct ig_errbuf *eb)
{
	char line[KVDISK_STATE_LEN + 1];
	int n = snprintf(line, sizeof(line), "kvdisk-state 1 %-5s %-36s ", state, d->boot);

	snprintf(line + n, sizeof(line) - (size_t)n, "%016" PRIx64 "\n", XXH64(line, (size_t)n, 0));
	if (pwrite(d->state_fd, line, KVDISK_STATE_LEN, 0) != KVDISK_STATE_LEN ||
	    ftruncate(d->state_fd, KVDISK_STATE_LEN) != 0 || fdatasync(d->state_fd) != 0)
		return ig_errf(eb, IG_E_IO, "KV-disk at '%s': writing %s: %s", d->path,
		               KVDISK_STATE_FILE, strerror(errno));
	return IG_E_OK;
}

/* Lock the directory and judge how the environment was left: `unclean` when
 * it may hold writes the machine lost (it was open, unsynced, under another
 * boot), so that LMDB's own tree cannot be trusted blindly. A process that
 * was killed leaves its pages to the kernel: the same boot is clean. */
static int kvdisk__state_open(struct kvdisk *d, bool *unclean, struct ig_errbuf *eb)
{
	char p[PATH_MAX + 32], line[KVDISK_STATE_LEN + 1] = "", st[8] = "", boot[40] = "";
	unsigned long long sum = 0;
	struct stat sb;
	bool fresh, have_data, parsed = false;
	ssize_t n;
	int v = 0, used = 0;

	snprintf(p, sizeof(p), "%s/%s", d->path, KVDISK_STATE_FILE);
	fresh = stat(p, &sb) != 0;
	d->state_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (d->state_fd < 0)
		return ig_errf(eb, IG_E_IO, "KV-disk at '%s': opening %s: %s", d->path,
		               KVDISK_STATE_FILE, strerror(errno));
	if (flock(d->state_fd, LOCK_EX | LOCK_NB) != 0)
		return ig_errf(eb, IG_E_BUSY,
		               "KV-disk at '%s' is held by another process (its %s is locked); "
		               "stop it, or give this daemon another --reuse-kv-disk-path",
		               d->path, KVDISK_STATE_FILE);
	if (fresh) {
		int dfd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (dfd >= 0) {
			(void)fsync(dfd);
			close(dfd);
		}
	}
	n = pread(d->state_fd, line, KVDISK_STATE_LEN, 0);
	if (n == KVDISK_STATE_LEN &&
	    sscanf(line, "kvdisk-state %d %7s %39s %n", &v, st, boot, &used) == 3 &&
	    used == KVDISK_STATE_LEN - 17 && sscanf(line + used, "%16llx", &sum) == 1 &&
	    sum == XXH64(line, (size_t)used, 0) && v == 1)
		parsed = true;
	snprintf(p, sizeof(p), "%s/data.mdb", d->path);
	have_data = stat(p, &sb) == 0;
	kvdisk__boot_id(d->boot);
	if (!have_data)
		*unclean = false;
	else if (!parsed)
		*unclean = true;
	else if (!strcmp(st, "clean"))
		*unclean = false;
	else
		*unclean = strcmp(boot, d->boot) != 0 || !strcmp(d->boot, "unknown");
	return IG_E_OK;
}

/* ---- the ceiling -------------------------------------------------------- */

/* min(flag, room on the volume - the reserve), where the room counts the
 * blocks data.mdb already holds: our own data is not a reason to shrink. */
static int kvdisk__ceiling(struct kvdisk *d, uint64_t flag, uint64_t min_bytes, bool ignore_volume,
                           struct ig_errbuf *eb)
{
	char p[PATH_MAX + 32];
	struct statvfs vs;
	struct stat sb;
	uint64_t room, own = 0, vol = UINT64_MAX;

	d->ceiling = flag;
	if (!ignore_volume) {
		if (statvfs(d->path, &vs) != 0)
			return ig_errf(eb, IG_E_IO, "KV-disk at '%s': statvfs: %s", d->path,
			               strerror(errno));
		snprintf(p, sizeof(p), "%s/data.mdb", d->path);
		if (stat(p, &sb) == 0)
			own = (uint64_t)sb.st_blocks * 512u;
		room = (uint64_t)vs.f_bavail * vs.f_frsize + own;
		vol = room > KVDISK_VOLUME_RESERVE ? room - KVDISK_VOLUME_RESERVE : 0;
		if (vol < d->ceiling)
			d->ceiling = vol;
		if (d->ceiling < min_bytes)
			return ig_errf(
			    eb, IG_E_CONFIG,
			    "KV-disk at '%s': ceiling %" PRIu64 " B = min(--reuse-kv-disk-"
			    "bytes %" PRIu64 ", volume room %" PRIu64
			    " - %llu reserved) is under one window (%" PRIu64
			    " B); free space on the volume or move --reuse-kv-disk-path",
			    d->path, d->ceiling, flag, room, KVDISK_VOLUME_RESERVE, min_bytes);
	}
	if (d->ceiling < min_bytes)
		return ig_errf(eb, IG_E_CONFIG,
		               "KV-disk at '%s': --reuse-kv-disk-bytes %" PRIu64
		               " is under one window (%" PRIu64 " B)",
		               d->path, flag, min_bytes);
	/* LMDB's overhead comes out of the headroom, never out of the reserve:
	 * with the volume as the binding figure, the file stops at the ceiling
	 * and overhead shows as "tier full" somewhat before it */
	d->map_bytes = d->ceiling + KVDISK_HEADROOM(d->ceiling);
	if (d->map_bytes > vol)
		d->map_bytes = vol > d->ceiling ? vol : d->ceiling;
	return IG_E_OK;
}

/* ---- blocks under the map ----------------------------------------------- */

/* Where the filesystem has no fallocate: the pages [alloc_end, end) faulted
 * in writable through a mapping of our own (MADV_POPULATE_WRITE), which
 * makes the filesystem back each as LMDB's store would, but answers a page
 * it cannot back with EFAULT where the store would be a SIGBUS. The pages
 * keep their bytes. alloc_end follows as far as it got. 0 or an errno
 * (EINVAL: a kernel before 5.14, without it). */
static int kvdisk__populate(struct kvdisk *d, uint64_t end)
{
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t from = d->alloc_end / pg * pg, len = end - from;
	unsigned char *p =
	    mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, d->data_fd, (off_t)from);
	int rc = 0;

	if (p == MAP_FAILED)
		return errno;
	for (uint64_t at = 0; at < len && !rc; at += KVDISK_ZEROS) {
		uint64_t n = len - at < KVDISK_ZEROS ? len - at : KVDISK_ZEROS;

		if (madvise(p + at, n, MADV_POPULATE_WRITE) != 0)
			rc = errno;
		else
			d->alloc_end = from + at + n;
	}
	munmap(p, len);
	return rc;
}

/* Zeros written over [alloc_end, end): slower (a copy of every byte: the
 * measurements are in ADR 0020), but it works on every kernel and a block
 * the volume cannot give is an errno that says why (ENOSPC, EDQUOT, EIO). */
static int kvdisk__zeros(struct kvdisk *d, uint64_t end)
{
	while (d->alloc_end < end) {
		uint64_t n = end - d->alloc_end < KVDISK_ZEROS ? end - d->alloc_end : KVDISK_ZEROS;
		ssize_t w = pwrite(d->data_fd, d->zeros, (size_t)n, (off_t)d->alloc_end);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return errno;
		if (w == 0)
			return ENOSPC;
		d->alloc_end += (uint64_t)w;
	}
	return 0;
}

/* Give data.mdb blocks up to `end`, from alloc_end (which is past LMDB's
 * last page, so nothing there is read or kept): fallocate; where the
 * filesystem has none, the pages populated; where that fails (a page the
 * volume cannot back, an older kernel), zeros written, whose errno says
 * why. alloc_end follows as far as it got. 0 or an errno. */
static int kvdisk__back(struct kvdisk *d, uint64_t end)
{
	int rc;

	if (d->can_fallocate) {
		if (fallocate(d->data_fd, 0, (off_t)d->alloc_end, (off_t)(end - d->alloc_end)) ==
		    0) {
			d->alloc_end = end;
			return 0;
		}
		if (errno != EOPNOTSUPP && errno != ENOSYS)
			return errno;
		d->can_fallocate = false;
	}
	if (d->can_populate) {
		rc = kvdisk__populate(d, end);
		if (!rc)
			return 0;
		if (rc == EINVAL)
			d->can_populate = false;
	}
	return kvdisk__zeros(d, end);
}

/* Back the pages the next write transaction may take, before it begins:
 * LMDB's last page, then `bytes` of records in `records` records and LMDB's
 * own pages for them ((records + 8) x 2: leaves, branches, the free list),
 * then `margin` (KVDISK_MARGIN after a put, KVDISK_DROP_ROOM for a
 * transaction that writes no record) and the free list's record of every
 * page of the file so far (the most a drop writes). Pages LMDB will reuse
 * from its free list are backed already, but which it will reuse is its
 * choice: they are not counted on. Never while a write transaction is open:
 * zeros would land on its pages. 0, or an errno (ENOSPC, EDQUOT: the volume
 * cannot; *short_by the bytes it could not back). */
static int kvdisk__room(struct kvdisk *d, uint64_t bytes, uint32_t records, uint64_t margin,
                        uint64_t *short_by)
{
	MDB_envinfo info;
	MDB_stat st;
	uint64_t ps, last, need, end;
	int rc;

	*short_by = 0;
	rc = mdb_env_info(d->env, &info);
	if (!rc)
		rc = mdb_env_stat(d->env, &st);
	if (rc)
		return rc;
	ps = st.ms_psize;
	last = ((uint64_t)info.me_last_pgno + 1) * ps;
	if (d->alloc_end < last)
		d->alloc_end = last; /* LMDB wrote every page up to its last */
	need = last + bytes + (records ? ((uint64_t)records + 8u) * 2u * ps : 0);
	need += margin + need / (ps / 8u);
	if (need > d->map_bytes)
		need = d->map_bytes; /* past it, LMDB answers MDB_MAP_FULL */
	if (need <= d->alloc_end)
		return 0;
	end = (need + KVDISK_GROW_STEP - 1) / KVDISK_GROW_STEP * KVDISK_GROW_STEP;
	if (end > d->map_bytes)
		end = d->map_bytes;
	rc = kvdisk__back(d, end);
	if (rc && d->alloc_end < need)
		rc = kvdisk__back(d, need); /* what this one needs, not the step */
	if (d->alloc_end >= need)
		return 0;
	*short_by = need - d->alloc_end;
	return rc ? rc : EIO;
}

static bool kvdisk__full(int err)
{
	return err == ENOSPC || err == EDQUOT;
}

/* kvdisk__room's refusal, for `what` ("seq 5", "opening"). */
static int kvdisk__room_err(struct kvdisk *d, int err, uint64_t short_by, const char *what,
                            struct ig_errbuf *eb)
{
	if (kvdisk__full(err))
		return ig_errf(eb, IG_E_NOSPACE,
		               "KV-disk at '%s': tier full: the volume cannot back %" PRIu64
		               " more bytes of data.mdb for %s (%s%s); nothing written",
		               d->path, short_by, what, strerror(err),
		               d->can_fallocate ? "" : ", a filesystem without fallocate");
	return ig_errf(eb, IG_E_IO,
	               "KV-disk at '%s': giving data.mdb blocks for %s: %s; nothing written",
	               d->path, what, mdb_strerror(err));
}

/* ---- the environment ---------------------------------------------------- */

static bool kvdisk__damage(int rc)
{
	return rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND || rc == MDB_INVALID ||
	       rc == MDB_VERSION_MISMATCH || rc == MDB_INCOMPATIBLE || rc == MDB_BAD_TXN ||
	       rc == MDB_PANIC;
}

static void kvdisk__env_close(struct kvdisk *d)
{
	if (d->env)
		mdb_env_close(d->env);
	d->env = NULL;
	d->data_fd = -1;
}

/* Open the environment; *mrc the LMDB code when it fails. */
static int kvdisk__env_open(struct kvdisk *d, int *mrc, struct ig_errbuf *eb)
{
	/* MDB_WRITEMAP: a put copies each window straight into the file's pages
	 * (MDB_RESERVE), no heap copy of a whole sequence; MDB_NOSYNC: a commit
	 * is done once its pages are the kernel's (they survive a kill -9; a
	 * machine crash is handled by the state file and the checksums);
	 * MDB_NOTLS: read transactions are not tied to a thread. Readahead
	 * stays on (no MDB_NORDAHEAD): records are large and read in order.
	 * Why, and what was measured: docs/adr/0011-kv-disk-lmdb.md. */
	const unsigned flags = MDB_NOSYNC | MDB_WRITEMAP | MDB_NOTLS;
	MDB_txn *txn;
	uint64_t short_by;
	int rc, dead;

	*mrc = 0;
	rc = mdb_env_create(&d->env);
	if (!rc)
		rc = mdb_env_set_maxdbs(d->env, 3);
	if (!rc)
		rc = mdb_env_set_mapsize(d->env, d->map_bytes);
	if (!rc)
		rc = mdb_env_open(d->env, d->path, flags, 0600);
	if (rc)
		goto out_env;
	(void)mdb_reader_check(d->env, &dead);
	rc = mdb_env_get_fd(d->env, &d->data_fd);
	if (rc)
		goto out_env;
	/* blocks for this transaction and the erase open's recovery may do
	 * next: a drop's room, which the last put kept backed beyond itself
	 * (KVDISK_MARGIN), so a restart on a volume that filled since finds
	 * them */
	d->alloc_end = 0;
	d->can_fallocate = !(d->flags & KVDISK_OPEN_NO_FALLOCATE);
	d->can_populate = !(d->flags & KVDISK_OPEN_NO_POPULATE);
	rc = kvdisk__room(d, 0, 0, KVDISK_DROP_ROOM, &short_by);
	if (rc) {
		kvdisk__env_close(d);
		return kvdisk__room_err(d, rc, short_by, "opening", eb);
	}
	rc = mdb_txn_begin(d->env, NULL, 0, &txn);
	if (rc)
		goto out_env;
	rc = mdb_dbi_open(txn, "seq", MDB_CREATE, &d->dseq);
	if (!rc)
		rc = mdb_dbi_open(txn, "win", MDB_CREATE, &d->dwin);
	if (!rc)
		rc = mdb_dbi_open(txn, "tick", MDB_CREATE, &d->dtick);
	if (rc) {
		mdb_txn_abort(txn);
		goto out_env;
	}
	rc = mdb_txn_commit(txn);
	if (rc)
		goto out_env;
	return IG_E_OK;

out_env:
	*mrc = rc;
	kvdisk__env_close(d);
	return ig_errf(eb, IG_E_IO, "KV-disk at '%s': LMDB: %s", d->path, mdb_strerror(rc));
}

/* Start afresh: the environment was left by a machine crash in a state
 * LMDB itself cannot read. */
static int kvdisk__env_recreate(struct kvdisk *d, struct ig_errbuf *eb)
{
	char p[PATH_MAX + 32];
	int mrc;

	kvdisk__env_close(d);
	snprintf(p, sizeof(p), "%s/data.mdb", d->path);
	if (unlink(p) != 0 && errno != ENOENT)
		return ig_errf(eb, IG_E_IO, "KV-disk at '%s': removing data.mdb: %s", d->path,
		               strerror(errno));
	snprintf(p, sizeof(p), "%s/lock.mdb", d->path);
	(void)unlink(p);
	return kvdisk__env_open(d, &mrc, eb);
}

/* Delete every record of `seq` in `txn`; *bytes their sizes, *found whether
 * there was any. */
static int kvdisk__erase(struct kvdisk *d, MDB_txn *txn, uint64_t seq, uint64_t *bytes, bool *found)
{
	unsigned char kb[16], cur[16];
	MDB_val k, v;
	MDB_cursor *c;
	int rc;

	*bytes = 0;
	*found = false;
	kvdisk__key_seq(kb, &k, seq);
	rc = mdb_get(txn, d->dseq, &k, &v);
	if (!rc) {
		*bytes += v.mv_size;
		*found = true;
		rc = mdb_del(txn, d->dseq, &k, NULL);
	}
	if (rc && rc != MDB_NOTFOUND)
		return rc;
	rc = mdb_cursor_open(txn, d->dwin, &c);
	if (rc)
		return rc;
	for (;;) {
		kvdisk__key_win(kb, &k, seq, 0);
		rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
		if (rc || k.mv_size != 16 || be_get64(k.mv_data) != seq)
			break;
		memcpy(cur, k.mv_data, 16);
		*bytes += v.mv_size;
		*found = true;
		k.mv_data = cur;
		rc = mdb_del(txn, d->dwin, &k, NULL);
		if (rc)
			break;
	}
	mdb_cursor_close(c);
	return rc == MDB_NOTFOUND ? 0 : rc;
}

/* One more small commit after a transaction that freed pages. LMDB reuses a
 * page only two transactions after the one that freed it (the previous
 * meta page must stay whole), so without this the put that follows a drop
 * could not use the room the drop made and would grow the file instead:
 * measured, the file's peak under churn went from 1.18-1.27x the ceiling to
 * 1.07-1.15x with it. The record is a count of such ticks, nothing more. */
static void kvdisk__tick(struct kvdisk *d)
{
	unsigned char kb[4] = {'t', 'i', 'c', 'k'}, vb[8];
	MDB_val k = {sizeof(kb), kb}, v;
	MDB_txn *txn;
	uint64_t n = 0;

	if (mdb_txn_begin(d->env, NULL, 0, &txn))
		return;
	if (!mdb_get(txn, d->dtick, &k, &v) && v.mv_size == 8)
		n = le_get64(v.mv_data);
	le_put64(vb, n + 1);
	v = (MDB_val){sizeof(vb), vb};
	if (mdb_put(txn, d->dtick, &k, &v, 0)) {
		mdb_txn_abort(txn);
		return;
	}
	(void)mdb_txn_commit(txn); /* only an optimisation: failure costs room */
}

/* Drop `seq` in a transaction of its own; the figures follow. An LMDB code,
 * or an errno when the volume cannot back the pages the drop takes
 * (kvdisk__room: nothing dropped). */
static int kvdisk__drop_seq(struct kvdisk *d, uint64_t seq, bool *found)
{
	MDB_txn *txn;
	uint64_t bytes;
	int rc;

	*found = false;
	rc = kvdisk__room(d, 0, 0, KVDISK_DROP_ROOM, &bytes);
	if (!rc)
		rc = mdb_txn_begin(d->env, NULL, 0, &txn);
	if (rc)
		return rc;
	rc = kvdisk__erase(d, txn, seq, &bytes, found);
	if (rc) {
		mdb_txn_abort(txn);
		return rc;
	}
	rc = mdb_txn_commit(txn);
	if (rc)
		return rc;
	if (*found) {
		kvdisk__tick(d);
		d->used -= bytes < d->used ? bytes : d->used;
		if (d->sequences)
			d->sequences--;
	}
	return 0;
}

/* Report `seq` lost (`why`, at window `k` or its sequence record when k is
 * KVDISK_SEQ_WINDOW) and drop it. */
static int kvdisk__lose(struct kvdisk *d, uint64_t seq, uint32_t k, const char *why,
                        struct ig_errbuf *eb)
{
	bool found;
	int rc = kvdisk__drop_seq(d, seq, &found);

	d->lost++;
	if (rc && kvdisk__damage(rc))
		d->failed = true;
	if (k == KVDISK_SEQ_WINDOW)
		return ig_errf(eb, IG_E_KV_LOST,
		               "KV-disk: seq %" PRIu64 " (its sequence record): %s; %s", seq, why,
		               rc ? "dropping it failed too" : "dropped, prefill it again");
	return ig_errf(eb, IG_E_KV_LOST, "KV-disk: seq %" PRIu64 " window %u: %s; %s", seq, k, why,
	               rc ? "dropping it failed too" : "dropped, prefill it again");
}

/* ---- open's scan --------------------------------------------------------- */

struct kvdisk_scan {
	struct kvdisk_hdr h;
	uint64_t seen_bytes;
	uint32_t seen;
	uint32_t records; /* its window records, whole or not */
	bool bad;
};

struct kvdisk_scanset {
	struct kvdisk_scan *s;
	size_t n, cap;
	uint64_t *orphans;
	size_t n_orphans, cap_orphans;
	uint64_t orphan_records; /* window records of all the orphans */
};

static int kvdisk__grow(void **p, size_t *cap, size_t n, size_t each)
{
	void *q;
	size_t c;

	if (n < *cap)
		return 0;
	c = *cap ? 2 * *cap : 64;
	q = realloc(*p, c * each);
	if (!q)
		return ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

/* Walk both databases: every sequence record judged, every window key
 * matched to its sequence (counted, sized; with `deep`, its header judged
 * too), orphans collected. Returns an LMDB code (damage) or ENOMEM. */
static int kvdisk__scan(struct kvdisk *d, struct kvdisk_scanset *ss, bool deep)
{
	char why[200];
	MDB_txn *txn;
	MDB_cursor *c = NULL;
	MDB_val k, v;
	size_t i = 0;
	int rc = mdb_txn_begin(d->env, NULL, MDB_RDONLY, &txn);

	if (rc)
		return rc;
	rc = mdb_cursor_open(txn, d->dseq, &c);
	for (int op = MDB_FIRST; !rc; op = MDB_NEXT) {
		struct kvdisk_scan *e;

		rc = mdb_cursor_get(c, &k, &v, op);
		if (rc)
			break;
		if (k.mv_size != 8) {
			rc = MDB_CORRUPTED;
			break;
		}
		rc = kvdisk__grow((void **)&ss->s, &ss->cap, ss->n, sizeof(*ss->s));
		if (rc)
			break;
		e = &ss->s[ss->n++];
		memset(e, 0, sizeof(*e));
		e->h.seq = be_get64(k.mv_data);
		if (!kvdisk__seq_ok(e->h.seq, &v, &e->h, why, sizeof(why))) {
			char note[256];

			e->h.seq = be_get64(k.mv_data);
			e->bad = true;
			snprintf(note, sizeof(note), "its sequence record: %s", why);
			kvdisk__note_add(d, e->h.seq, note);
		}
	}
	if (c)
		mdb_cursor_close(c);
	c = NULL;
	if (rc == MDB_NOTFOUND)
		rc = mdb_cursor_open(txn, d->dwin, &c);
	for (int op = MDB_FIRST; !rc; op = MDB_NEXT) {
		struct kvdisk_scan *e;
		struct kvdisk_hdr wh;
		uint64_t seq;
		uint32_t w;

		rc = mdb_cursor_get(c, &k, &v, op);
		if (rc)
			break;
		if (k.mv_size != 16 ||
		    be_get64((const unsigned char *)k.mv_data + 8) >= UINT32_MAX) {
			rc = MDB_CORRUPTED;
			break;
		}
		seq = be_get64(k.mv_data);
		w = (uint32_t)be_get64((const unsigned char *)k.mv_data + 8);
		while (i < ss->n && ss->s[i].h.seq < seq)
			i++;
		if (i == ss->n || ss->s[i].h.seq != seq) {
			ss->orphan_records++;
			if (ss->n_orphans && ss->orphans[ss->n_orphans - 1] == seq)
				continue;
			rc = kvdisk__grow((void **)&ss->orphans, &ss->cap_orphans, ss->n_orphans,
			                  sizeof(uint64_t));
			if (rc)
				break;
			ss->orphans[ss->n_orphans++] = seq;
			kvdisk__note_add(d, seq, "torn: window records without a sequence record");
			continue;
		}
		e = &ss->s[i];
		e->records++;
		if (e->bad)
			continue;
		if (w != e->seen) {
			snprintf(why, sizeof(why), "torn: window %u missing", e->seen);
			e->bad = true;
		} else if (deep && !kvdisk__win_ok(&e->h, w, &v, &wh, why, sizeof(why))) {
			e->bad = true;
		}
		if (e->bad) {
			kvdisk__note_add(d, seq, why);
			continue;
		}
		e->seen++;
		e->seen_bytes += v.mv_size;
	}
	if (c)
		mdb_cursor_close(c);
	mdb_txn_abort(txn);
	return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Open's recovery: recompute the accounting from LMDB and drop what is not
 * whole. Returns an LMDB code on damage, an errno when the volume cannot
 * back the pages the erase takes (kvdisk__room). */
static int kvdisk__recover(struct kvdisk *d, bool deep, size_t *seen)
{
	struct kvdisk_scanset ss = {0};
	MDB_txn *txn = NULL;
	uint64_t bytes, erase;
	bool found;
	int rc = kvdisk__scan(d, &ss, deep);

	*seen = ss.n + ss.n_orphans;
	if (rc)
		goto out;
	d->used = 0;
	d->sequences = 0;
	for (size_t i = 0; i < ss.n; i++) {
		struct kvdisk_scan *e = &ss.s[i];

		if (!e->bad &&
		    (e->seen != e->h.windows || e->seen_bytes + KVDISK_HDR != e->h.len)) {
			char why[200];

			snprintf(why, sizeof(why),
			         "torn: %u of %u window records (%" PRIu64 " bytes) where %" PRIu64
			         " were committed",
			         e->seen, e->h.windows, e->seen_bytes + KVDISK_HDR, e->h.len);
			kvdisk__note_add(d, e->h.seq, why);
			e->bad = true;
		}
		if (!e->bad) {
			d->used += e->h.len;
			d->sequences++;
		}
	}
	/* the erase's B-tree pages: a leaf holds over 60 window records, so a
	 * page per 16 erased is ample (open reserved a drop's room already) */
	erase = ss.orphan_records;
	for (size_t i = 0; i < ss.n; i++)
		if (ss.s[i].bad)
			erase += ss.s[i].records + 1u;
	if (erase)
		rc = kvdisk__room(d, erase / 16u * (uint64_t)sysconf(_SC_PAGESIZE), 0,
		                  KVDISK_DROP_ROOM, &bytes);
	for (size_t i = 0; i < ss.n && !rc; i++)
		if (ss.s[i].bad) {
			if (!txn)
				rc = mdb_txn_begin(d->env, NULL, 0, &txn);
			if (!rc)
				rc = kvdisk__erase(d, txn, ss.s[i].h.seq, &bytes, &found);
			d->lost++;
		}
	for (size_t i = 0; i < ss.n_orphans && !rc; i++) {
		if (!txn)
			rc = mdb_txn_begin(d->env, NULL, 0, &txn);
		if (!rc)
			rc = kvdisk__erase(d, txn, ss.orphans[i], &bytes, &found);
		d->lost++;
	}
	if (txn) {
		if (rc)
			mdb_txn_abort(txn);
		else
			rc = mdb_txn_commit(txn);
		if (!rc)
			kvdisk__tick(d);
	}
out:
	free(ss.s);
	free(ss.orphans);
	return rc;
}

/* ---- open and close ------------------------------------------------------ */

int kvdisk_open(struct kvdisk **out, const char *path, uint64_t flag_bytes, uint64_t min_bytes,
                unsigned flags, struct ig_errbuf *eb)
{
	struct kvdisk *d;
	bool unclean = false, ignore_volume;
	size_t seen = 0;
	int rc, mrc;

	*out = NULL;
	if (!path || !path[0] || strlen(path) >= sizeof(d->path) - 32)
		return ig_errf(eb, IG_E_CONFIG, "KV-disk: the path is empty or too long");
	d = calloc(1, sizeof(*d));
	if (!d)
		return ig_errf(eb, IG_E_NOMEM, "KV-disk: out of memory");
	d->state_fd = -1;
	d->data_fd = -1;
	d->flags = flags;
	snprintf(d->path, sizeof(d->path), "%s", path);
	d->xd = XXH64_createState();
	d->zeros = calloc(1, KVDISK_ZEROS); /* fresh pages: no memory until read */
	if (!d->xd || !d->zeros) {
		rc = ig_errf(eb, IG_E_NOMEM, "KV-disk: out of memory");
		goto out_free;
	}
	if (mkdir(path, 0700) != 0 && errno != EEXIST) {
		rc = ig_errf(eb, IG_E_IO, "KV-disk at '%s': creating the directory: %s", path,
		             strerror(errno));
		goto out_free;
	}
	rc = kvdisk__state_open(d, &unclean, eb);
	if (rc)
		goto out_free;
	ignore_volume = (flags & KVDISK_OPEN_IGNORE_VOLUME) != 0;
	rc = kvdisk__ceiling(d, flag_bytes, min_bytes, ignore_volume, eb);
	if (rc)
		goto out_free;
	/* dirty, durably, before any unsynced page can reach the disk; after an
	 * unclean stop the old state stays until the check below is done and
	 * synced, so that a crash during it leaves it to be done again */
	if (!unclean) {
		rc = kvdisk__state_write(d, "dirty", eb);
		if (rc)
			goto out_free;
	}
	rc = kvdisk__env_open(d, &mrc, eb);
	if (rc && unclean && kvdisk__damage(mrc))
		rc = kvdisk__env_recreate(d, eb);
	else if (rc && kvdisk__damage(mrc))
		ig_errprefix(eb, "the environment is damaged (remove the directory to start "
		                 "KV-disk empty)");
	if (rc)
		goto out_free;
	mrc = kvdisk__recover(d, unclean, &seen);
	if (mrc && unclean && kvdisk__damage(mrc)) {
		/* the machine stopped mid-write and LMDB's tree did not survive:
		 * every sequence it held is lost (counted as far as it was read) */
		d->lost = seen;
		d->n_notes = 0;
		rc = kvdisk__env_recreate(d, eb);
		if (rc)
			goto out_free;
		d->used = 0;
		d->sequences = 0;
	} else if (kvdisk__full(mrc)) {
		rc = ig_errf(eb, IG_E_NOSPACE,
		             "KV-disk at '%s': tier full: the volume cannot back the pages that "
		             "erasing the sequences open found torn takes (%s); free space on it",
		             path, strerror(mrc));
		goto out_free;
	} else if (mrc) {
		rc = ig_errf(eb, IG_E_IO,
		             "KV-disk at '%s': reading LMDB: %s; the environment is damaged: "
		             "remove the directory to start KV-disk empty",
		             path, mrc == ENOMEM ? "out of memory" : mdb_strerror(mrc));
		goto out_free;
	}
	if (unclean) {
		mrc = mdb_env_sync(d->env, 1);
		if (mrc) {
			rc = ig_errf(eb, IG_E_IO, "KV-disk at '%s': syncing: %s", path,
			             mdb_strerror(mrc));
			goto out_free;
		}
		rc = kvdisk__state_write(d, "dirty", eb);
		if (rc)
			goto out_free;
	}
	*out = d;
	return IG_E_OK;

out_free:
	kvdisk__env_close(d);
	if (d->state_fd >= 0)
		close(d->state_fd);
	XXH64_freeState(d->xd);
	for (uint32_t i = 0; i < KVDISK_STREAMS; i++)
		XXH64_freeState(d->streams[i].xd);
	free(d->zeros);
	free(d->notes);
	free(d);
	return rc;
}

void kvdisk_close(struct kvdisk *d)
{
	if (!d)
		return;
	if (d->env) {
		/* synced, then marked clean: the next open trusts the tree */
		if (mdb_env_sync(d->env, 1) == 0 && !d->failed)
			(void)kvdisk__state_write(d, "clean", NULL);
		kvdisk__env_close(d);
	}
	if (d->state_fd >= 0)
		close(d->state_fd);
	XXH64_freeState(d->xd);
	for (uint32_t i = 0; i < KVDISK_STREAMS; i++)
		XXH64_freeState(d->streams[i].xd);
	free(d->zeros);
	free(d->notes);
	free(d);
}

/* ---- put ----------------------------------------------------------------- */

static int kvdisk__put_fail(struct kvdisk *d, MDB_txn *txn, int rc, uint64_t seq,
                            struct ig_errbuf *eb)
{
	if (txn)
		mdb_txn_abort(txn);
	if (rc == MDB_MAP_FULL) {
		d->refusals_full++;
		return ig_errf(eb, IG_E_NOSPACE,
		               "KV-disk at '%s': tier full: LMDB's map (%" PRIu64
		               " B) has no room for seq %" PRIu64 " (%" PRIu64 " of %" PRIu64
		               " B used); nothing written",
		               d->path, d->map_bytes, seq, d->used, d->ceiling);
	}
	if (kvdisk__damage(rc))
		d->failed = true;
	return ig_errf(eb, IG_E_IO,
	               "KV-disk at '%s': writing seq %" PRIu64 ": LMDB: %s; nothing written",
	               d->path, seq, mdb_strerror(rc));
}

int kvdisk_put(struct kvdisk *d, const struct arena_meta *meta, const void *base,
               const struct arena_window *w, struct ig_errbuf *eb)
{
	unsigned char kb[16], *dst;
	const unsigned char *src = base;
	struct kvdisk_hdr h;
	MDB_txn *txn = NULL;
	MDB_val k, v;
	uint64_t stored, put_id, short_by;
	int rc;

	if (d->failed)
		return ig_errf(eb, IG_E_IO, "KV-disk at '%s': LMDB failed earlier; reopen it",
		               d->path);
	if (!kvdisk__meta_ok(meta))
		return ig_errf(eb, IG_E_INVAL,
		               "KV-disk: seq %" PRIu64 ": impossible shape (%" PRIu64
		               " bytes in %u windows of %u)",
		               meta->seq, meta->image_bytes, meta->windows, meta->window_bytes);
	for (uint32_t i = 0; i < meta->windows; i++)
		if (w[i].len != kvdisk__win_len(meta, i))
			return ig_errf(eb, IG_E_INVAL,
			               "KV-disk: seq %" PRIu64 " window %u: %" PRIu64
			               " bytes where the window holds %" PRIu64,
			               meta->seq, i, w[i].len, kvdisk__win_len(meta, i));
	if (kvdisk_writing(d, meta->seq))
		return ig_errf(eb, IG_E_BUSY,
		               "KV-disk: seq %" PRIu64 " is being written a window at a time",
		               meta->seq);
	stored = kvdisk__stored(meta);
	if (d->used + d->pending + stored > d->ceiling) {
		d->refusals_full++;
		return ig_errf(eb, IG_E_NOSPACE,
		               "KV-disk at '%s': tier full: seq %" PRIu64 " needs %" PRIu64
		               " B, %" PRIu64 " of the %" PRIu64 " B ceiling are used; nothing "
		               "written",
		               d->path, meta->seq, stored, d->used, d->ceiling);
	}
	rc = kvdisk__room(d, stored, meta->windows + 1u, KVDISK_MARGIN, &short_by);
	if (rc) {
		char what[40];

		if (kvdisk__full(rc))
			d->refusals_full++;
		snprintf(what, sizeof(what), "seq %" PRIu64, meta->seq);
		return kvdisk__room_err(d, rc, short_by, what, eb);
	}

	rc = mdb_txn_begin(d->env, NULL, 0, &txn);
	if (rc)
		return kvdisk__put_fail(d, NULL, rc, meta->seq, eb);
	kvdisk__key_seq(kb, &k, meta->seq);
	rc = mdb_get(txn, d->dseq, &k, &v);
	if (rc != MDB_NOTFOUND) {
		if (rc)
			return kvdisk__put_fail(d, txn, rc, meta->seq, eb);
		mdb_txn_abort(txn);
		return ig_errf(eb, IG_E_BUSY,
		               "KV-disk: seq %" PRIu64 " is already on disk; drop it first",
		               meta->seq);
	}
	put_id = mdb_txn_id(txn);
	h = (struct kvdisk_hdr){.version = KVDISK_LAYOUT,
	                        .seq = meta->seq,
	                        .put_id = put_id,
	                        .model_id = meta->model_id,
	                        .image_bytes = meta->image_bytes,
	                        .kv_format = meta->kv_format,
	                        .cls = meta->cls,
	                        .window_bytes = meta->window_bytes,
	                        .windows = meta->windows};
	XXH64_reset(d->xd, 0);
	for (uint32_t i = 0; i < meta->windows; i++) {
		uint64_t got;

		kvdisk__key_win(kb, &k, meta->seq, i);
		v.mv_size = KVDISK_HDR + w[i].len;
		v.mv_data = NULL;
		rc = mdb_put(txn, d->dwin, &k, &v, MDB_RESERVE | MDB_NOOVERWRITE);
		if (rc)
			return kvdisk__put_fail(d, txn, rc, meta->seq, eb);
		dst = v.mv_data;
		got = kvcopy_hash(dst + KVDISK_HDR, src + w[i].offset, w[i].len);
		if (got != w[i].sum) {
			mdb_txn_abort(txn);
			return ig_errf(eb, IG_E_INVAL,
			               "KV-disk: seq %" PRIu64
			               " window %u: its bytes hash to %016" PRIx64
			               ", not the %016" PRIx64 " given; nothing written",
			               meta->seq, i, got, w[i].sum);
		}
		h.kind = KVDISK_KIND_WIN;
		h.window = i;
		h.len = w[i].len;
		h.xxh = got;
		kvdisk__encode(dst, &h);
		kvdisk__digest_add(d->xd, got);
	}
	kvdisk__key_seq(kb, &k, meta->seq);
	v.mv_size = KVDISK_HDR;
	v.mv_data = NULL;
	rc = mdb_put(txn, d->dseq, &k, &v, MDB_RESERVE | MDB_NOOVERWRITE);
	if (rc)
		return kvdisk__put_fail(d, txn, rc, meta->seq, eb);
	h.kind = KVDISK_KIND_SEQ;
	h.window = KVDISK_SEQ_WINDOW;
	h.len = stored;
	h.xxh = XXH64_digest(d->xd);
	kvdisk__encode(v.mv_data, &h);
	rc = mdb_txn_commit(txn);
	if (rc)
		return kvdisk__put_fail(d, NULL, rc, meta->seq, eb);
	(void)kvdisk__note_take(d, meta->seq, NULL, 0);
	d->used += stored;
	d->sequences++;
	d->writes++;
	return IG_E_OK;
}

/* ---- writes a window at a time ------------------------------------------- */

static struct kvdisk_stream *kvdisk__stream(struct kvdisk *d, uint64_t seq)
{
	for (uint32_t i = 0; i < KVDISK_STREAMS; i++)
		if (d->streams[i].open && d->streams[i].meta.seq == seq)
			return &d->streams[i];
	return NULL;
}

bool kvdisk_fits(const struct kvdisk *d, const struct arena_meta *meta)
{
	return !d->failed && kvdisk__meta_ok(meta) && !kvdisk_writing(d, meta->seq) &&
	       d->used + d->pending + kvdisk__stored(meta) <= d->ceiling;
}

bool kvdisk_writing(const struct kvdisk *d, uint64_t seq)
{
	return kvdisk__stream((struct kvdisk *)d, seq) != NULL;
}

static bool kvdisk__same_shape(const struct arena_meta *a, const struct arena_meta *b)
{
	return a->seq == b->seq && a->model_id == b->model_id && a->kv_format == b->kv_format &&
	       a->cls == b->cls && a->image_bytes == b->image_bytes &&
	       a->window_bytes == b->window_bytes && a->windows == b->windows;
}

int kvdisk_wbegin(struct kvdisk *d, const struct arena_meta *meta, struct ig_errbuf *eb)
{
	struct kvdisk_stream *st = kvdisk__stream(d, meta->seq);
	unsigned char kb[8];
	MDB_txn *txn;
	MDB_val k, v;
	uint64_t stored;
	int rc;

	if (d->failed)
		return ig_errf(eb, IG_E_IO, "KV-disk at '%s': LMDB failed earlier; reopen it",
		               d->path);
	if (!kvdisk__meta_ok(meta))
		return ig_errf(eb, IG_E_INVAL,
		               "KV-disk: seq %" PRIu64 ": impossible shape (%" PRIu64
		               " bytes in %u windows of %u)",
		               meta->seq, meta->image_bytes, meta->windows, meta->window_bytes);
	if (st) {
		/* the same begin again (a request resent) before any window */
		if (st->next == 0 && kvdisk__same_shape(&st->meta, meta))
			return IG_E_OK;
		return ig_errf(eb, IG_E_BUSY,
		               "KV-disk: seq %" PRIu64 " is being written (%u of %u windows); "
		               "drop it first",
		               meta->seq, st->next, st->meta.windows);
	}
	rc = mdb_txn_begin(d->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return ig_errf(eb, IG_E_IO, "KV-disk at '%s': LMDB: %s", d->path, mdb_strerror(rc));
	kvdisk__key_seq(kb, &k, meta->seq);
	rc = mdb_get(txn, d->dseq, &k, &v);
	mdb_txn_abort(txn);
	if (rc != MDB_NOTFOUND)
		return rc ? ig_errf(eb, IG_E_IO, "KV-disk at '%s': LMDB: %s", d->path,
		                    mdb_strerror(rc))
		          : ig_errf(eb, IG_E_BUSY,
		                    "KV-disk: seq %" PRIu64 " is already on disk; drop it first",
		                    meta->seq);
	for (uint32_t i = 0; i < KVDISK_STREAMS && !st; i++)
		if (!d->streams[i].open)
			st = &d->streams[i];
	if (!st)
		return ig_errf(eb, IG_E_BUSY,
		               "KV-disk: %u sequences are being written already; try again when "
		               "one is done",
		               KVDISK_STREAMS);
	stored = kvdisk__stored(meta);
	if (d->used + d->pending + stored > d->ceiling) {
		d->refusals_full++;
		return ig_errf(eb, IG_E_NOSPACE,
		               "KV-disk at '%s': tier full: seq %" PRIu64 " needs %" PRIu64
		               " B, %" PRIu64 " of the %" PRIu64 " B ceiling are used or "
		               "being written; nothing written",
		               d->path, meta->seq, stored, d->used + d->pending, d->ceiling);
	}
	if (!st->xd && !(st->xd = XXH64_createState()))
		return ig_errf(eb, IG_E_NOMEM, "KV-disk: no memory for a write");
	XXH64_reset(st->xd, 0);
	st->open = true;
	st->meta = *meta;
	st->put_id = 0;
	st->stored = stored;
	st->next = 0;
	st->last_sum = 0;
	d->pending += stored;
	(void)kvdisk__note_take(d, meta->seq, NULL, 0);
	return IG_E_OK;
}

static void kvdisk__stream_end(struct kvdisk *d, struct kvdisk_stream *st)
{
	d->pending -= st->stored < d->pending ? st->stored : d->pending;
	st->open = false;
}

int kvdisk_wput(struct kvdisk *d, uint64_t seq, uint32_t k, const void *src, uint64_t len,
                uint64_t sum, bool *whole, struct ig_errbuf *eb)
{
	struct kvdisk_stream *st = kvdisk__stream(d, seq);
	unsigned char kb[16], *dst;
	struct kvdisk_hdr h;
	MDB_txn *txn = NULL;
	MDB_val key, v;
	bool last;
	uint64_t got, short_by;
	int rc;

	*whole = false;
	if (d->failed)
		return ig_errf(eb, IG_E_IO, "KV-disk at '%s': LMDB failed earlier; reopen it",
		               d->path);
	if (!st)
		return ig_errf(eb, IG_E_NOTFOUND,
		               "KV-disk: no write of seq %" PRIu64 " is under way (begin it first)",
		               seq);
	if (k + 1 == st->next && sum == st->last_sum)
		return IG_E_OK; /* the same window again (a request resent) */
	if (k != st->next)
		return ig_errf(eb, IG_E_INVAL,
		               "KV-disk: seq %" PRIu64 ": window %u where window %u comes next "
		               "(windows go in order, once each)",
		               seq, k, st->next);
	if (len != kvdisk__win_len(&st->meta, k))
		return ig_errf(eb, IG_E_INVAL,
		               "KV-disk: seq %" PRIu64 " window %u: %" PRIu64
		               " bytes where the window holds %" PRIu64,
		               seq, k, len, kvdisk__win_len(&st->meta, k));
	last = k + 1 == st->meta.windows;
	rc = kvdisk__room(d, KVDISK_HDR * (last ? 2u : 1u) + len, last ? 2u : 1u, KVDISK_MARGIN,
	                  &short_by);
	if (rc) {
		char what[48];

		if (kvdisk__full(rc))
			d->refusals_full++;
		snprintf(what, sizeof(what), "seq %" PRIu64 " window %u", seq, k);
		return kvdisk__room_err(d, rc, short_by, what, eb);
	}
	rc = mdb_txn_begin(d->env, NULL, 0, &txn);
	if (rc)
		return kvdisk__put_fail(d, NULL, rc, seq, eb);
	if (k == 0)
		st->put_id = mdb_txn_id(txn);
	h = (struct kvdisk_hdr){.version = KVDISK_LAYOUT,
	                        .seq = seq,
	                        .put_id = st->put_id,
	                        .model_id = st->meta.model_id,
	                        .image_bytes = st->meta.image_bytes,
	                        .kv_format = st->meta.kv_format,
	                        .cls = st->meta.cls,
	                        .window_bytes = st->meta.window_bytes,
	                        .windows = st->meta.windows};
	kvdisk__key_win(kb, &key, seq, k);
	v.mv_size = KVDISK_HDR + len;
	v.mv_data = NULL;
	rc = mdb_put(txn, d->dwin, &key, &v, MDB_RESERVE | MDB_NOOVERWRITE);
	if (rc)
		return kvdisk__put_fail(d, txn, rc, seq, eb);
	dst = v.mv_data;
	got = kvcopy_hash(dst + KVDISK_HDR, src, len);
	if (got != sum) {
		mdb_txn_abort(txn);
		return ig_errf(eb, IG_E_INVAL,
		               "KV-disk: seq %" PRIu64 " window %u: its bytes hash to %016" PRIx64
		               ", not the %016" PRIx64 " given; nothing written",
		               seq, k, got, sum);
	}
	h.kind = KVDISK_KIND_WIN;
	h.window = k;
	h.len = len;
	h.xxh = got;
	kvdisk__encode(dst, &h);
	if (last) {
		/* the digest with this window, in the scratch state: the
		 * stream's own is touched only once the transaction holds */
		XXH64_copyState(d->xd, st->xd);
		kvdisk__digest_add(d->xd, got);
		kvdisk__key_seq(kb, &key, seq);
		v.mv_size = KVDISK_HDR;
		v.mv_data = NULL;
		rc = mdb_put(txn, d->dseq, &key, &v, MDB_RESERVE | MDB_NOOVERWRITE);
		if (rc)
			return kvdisk__put_fail(d, txn, rc, seq, eb);
		h.kind = KVDISK_KIND_SEQ;
		h.window = KVDISK_SEQ_WINDOW;
		h.len = st->stored;
		h.xxh = XXH64_digest(d->xd);
		kvdisk__encode(v.mv_data, &h);
	}
	rc = mdb_txn_commit(txn);
	if (rc)
		return kvdisk__put_fail(d, NULL, rc, seq, eb);
	kvdisk__digest_add(st->xd, got);
	st->next++;
	st->last_sum = got;
	if (last) {
		kvdisk__stream_end(d, st);
		d->used += st->stored;
		d->sequences++;
		d->writes++;
		*whole = true;
	}
	return IG_E_OK;
}

bool kvdisk_wabort(struct kvdisk *d, uint64_t seq)
{
	struct kvdisk_stream *st = kvdisk__stream(d, seq);
	MDB_txn *txn;
	uint64_t bytes;
	bool found;
	int rc;

	if (!st)
		return false;
	if (st->next) {
		rc = kvdisk__room(d, 0, 0, KVDISK_DROP_ROOM, &bytes);
		if (!rc)
			rc = mdb_txn_begin(d->env, NULL, 0, &txn);
		if (!rc) {
			rc = kvdisk__erase(d, txn, seq, &bytes, &found);
			if (rc)
				mdb_txn_abort(txn);
			else
				rc = mdb_txn_commit(txn);
		}
		if (rc && kvdisk__damage(rc))
			d->failed = true;
		else if (!rc)
			kvdisk__tick(d);
		/* an erase that failed (or that the volume could not back)
		 * leaves window records without a sequence record: never
		 * served, erased by the next open */
	}
	kvdisk__stream_end(d, st);
	return true;
}

/* ---- reading ------------------------------------------------------------- */

/* What reading `seq` starts with: a failed environment or a sequence lost
 * at open refused, then a read transaction (*txn, the caller aborts it) and
 * the sequence record looked up (*mdb_rc: mdb_get's answer, *v its value). */
static int kvdisk__read_begin(struct kvdisk *d, uint64_t seq, MDB_txn **txn, MDB_val *v,
                              int *mdb_rc, struct ig_errbuf *eb)
{
	unsigned char kb[8];
	char why[200];
	MDB_val k;
	int rc;

	if (d->failed)
		return ig_errf(eb, IG_E_IO, "KV-disk at '%s': LMDB failed earlier; reopen it",
		               d->path);
	if (kvdisk__note_take(d, seq, why, sizeof(why)))
		return ig_errf(eb, IG_E_KV_LOST,
		               "KV-disk: seq %" PRIu64 " was lost and dropped at open: %s", seq,
		               why);
	rc = mdb_txn_begin(d->env, NULL, MDB_RDONLY, txn);
	if (rc)
		return ig_errf(eb, IG_E_IO, "KV-disk at '%s': LMDB: %s", d->path, mdb_strerror(rc));
	kvdisk__key_seq(kb, &k, seq);
	*mdb_rc = mdb_get(*txn, d->dseq, &k, v);
	return IG_E_OK;
}

/* Begin reading `seq`: a read transaction (*txn, the caller aborts it)
 * and its sequence record judged (*sh). IG_E_NOTFOUND when it is not on
 * disk; IG_E_KV_LOST (the sequence dropped) when its record does not hold;
 * on any error *txn is closed already. */
static int kvdisk__seq_begin(struct kvdisk *d, uint64_t seq, MDB_txn **txn, struct kvdisk_hdr *sh,
                             struct ig_errbuf *eb)
{
	char why[200];
	MDB_val v;
	int rc, mrc;

	rc = kvdisk__read_begin(d, seq, txn, &v, &mrc, eb);
	if (rc)
		return rc;
	if (mrc == MDB_NOTFOUND) {
		mdb_txn_abort(*txn);
		return ig_errf(eb, IG_E_NOTFOUND, "KV-disk: seq %" PRIu64 " is not on disk", seq);
	}
	if (mrc)
		snprintf(why, sizeof(why), "LMDB: %s", mdb_strerror(mrc));
	if (mrc || !kvdisk__seq_ok(seq, &v, sh, why, sizeof(why))) {
		mdb_txn_abort(*txn);
		return kvdisk__lose(d, seq, KVDISK_SEQ_WINDOW, why, eb);
	}
	return IG_E_OK;
}

/* Window record k of the sequence whose record is `sh`, looked up and
 * judged (*v the record, *wh its header); false with `why` when it is
 * missing or does not hold. */
static bool kvdisk__win_get(struct kvdisk *d, MDB_txn *txn, const struct kvdisk_hdr *sh, uint32_t k,
                            MDB_val *v, struct kvdisk_hdr *wh, char *why, size_t n)
{
	unsigned char kb[16];
	MDB_val key;
	int rc;

	kvdisk__key_win(kb, &key, sh->seq, k);
	rc = mdb_get(txn, d->dwin, &key, v);
	if (rc) {
		snprintf(why, n, "torn: %s",
		         rc == MDB_NOTFOUND ? "the record is missing" : mdb_strerror(rc));
		return false;
	}
	return kvdisk__win_ok(sh, k, v, wh, why, n);
}

/* Read (dst != NULL: copy out) or check (dst NULL: hash in place) every
 * record of `seq`. A failed check drops the sequence: IG_E_KV_LOST. */
static int kvdisk__read(struct kvdisk *d, uint64_t seq, struct arena_meta *meta_out,
                        unsigned char *dst, uint64_t dst_bytes, uint64_t *sums, uint64_t *n_checked,
                        struct ig_errbuf *eb)
{
	char why[200];
	struct kvdisk_hdr sh, wh;
	MDB_txn *txn;
	MDB_val v;
	uint32_t at = KVDISK_SEQ_WINDOW;
	int rc = kvdisk__seq_begin(d, seq, &txn, &sh, eb);

	if (rc)
		return rc;
	if (dst && dst_bytes < sh.image_bytes) {
		mdb_txn_abort(txn);
		return ig_errf(eb, IG_E_INVAL,
		               "KV-disk: seq %" PRIu64 " needs %" PRIu64 " bytes, %" PRIu64
		               " given",
		               seq, sh.image_bytes, dst_bytes);
	}
	XXH64_reset(d->xd, 0);
	for (at = 0; at < sh.windows; at++) {
		const unsigned char *p;
		uint64_t got;

		if (!kvdisk__win_get(d, txn, &sh, at, &v, &wh, why, sizeof(why)))
			goto out_lost;
		p = (const unsigned char *)v.mv_data + KVDISK_HDR;
		kvdisk__willneed(p, wh.len);
		if (dst)
			got = kvcopy_hash(dst + (uint64_t)at * sh.window_bytes, p, wh.len);
		else
			got = kvcopy_sum(p, wh.len);
		if (got != wh.xxh) {
			snprintf(why, sizeof(why),
			         "corrupt: the payload hashes to %016" PRIx64
			         ", its header says %016" PRIx64,
			         got, wh.xxh);
			goto out_lost;
		}
		kvdisk__digest_add(d->xd, got);
		if (sums)
			sums[at] = got;
		if (n_checked)
			(*n_checked)++;
	}
	if (XXH64_digest(d->xd) != sh.xxh) {
		at = KVDISK_SEQ_WINDOW;
		snprintf(why, sizeof(why),
		         "corrupt: its windows' checksums do not match the sequence record's "
		         "digest");
		goto out_lost;
	}
	mdb_txn_abort(txn);
	if (meta_out)
		kvdisk__meta_of(&sh, meta_out);
	return IG_E_OK;

out_lost:
	mdb_txn_abort(txn);
	return kvdisk__lose(d, seq, at, why, eb);
}

int kvdisk_get(struct kvdisk *d, uint64_t seq, struct arena_meta *meta_out, void *dst,
               uint64_t dst_bytes, uint64_t *sums, struct ig_errbuf *eb)
{
	int rc;

	if (!dst)
		return ig_errf(eb, IG_E_INVAL, "KV-disk: seq %" PRIu64 ": no destination", seq);
	rc = kvdisk__read(d, seq, meta_out, dst, dst_bytes, sums, NULL, eb);
	if (!rc)
		d->reads++;
	return rc;
}

/* ---- reads a window at a time -------------------------------------------- */

int kvdisk_rsums(struct kvdisk *d, uint64_t seq, struct arena_meta *meta_out, uint64_t *sums,
                 struct ig_errbuf *eb)
{
	char why[200];
	struct kvdisk_hdr sh, wh;
	MDB_txn *txn;
	MDB_val v;
	uint32_t at = KVDISK_SEQ_WINDOW;
	int rc = kvdisk__seq_begin(d, seq, &txn, &sh, eb);

	if (rc)
		return rc;
	/* every window's header, not its payload (the payload is checked
	 * when kvdisk_rwindow copies it) */
	XXH64_reset(d->xd, 0);
	for (at = 0; at < sh.windows; at++) {
		if (!kvdisk__win_get(d, txn, &sh, at, &v, &wh, why, sizeof(why)))
			goto out_lost;
		kvdisk__digest_add(d->xd, wh.xxh);
		sums[at] = wh.xxh;
	}
	if (XXH64_digest(d->xd) != sh.xxh) {
		at = KVDISK_SEQ_WINDOW;
		snprintf(why, sizeof(why),
		         "corrupt: its windows' checksums do not match the sequence record's "
		         "digest");
		goto out_lost;
	}
	mdb_txn_abort(txn);
	kvdisk__meta_of(&sh, meta_out);
	return IG_E_OK;

out_lost:
	mdb_txn_abort(txn);
	return kvdisk__lose(d, seq, at, why, eb);
}

int kvdisk_rwindow(struct kvdisk *d, uint64_t seq, uint32_t k, void *dst, uint64_t cap,
                   uint64_t *len, uint64_t *sum, struct ig_errbuf *eb)
{
	char why[200];
	struct kvdisk_hdr sh, wh;
	MDB_txn *txn;
	MDB_val v;
	const unsigned char *p;
	uint32_t at;
	uint64_t got;
	int rc = kvdisk__seq_begin(d, seq, &txn, &sh, eb);

	if (rc)
		return rc;
	if (k >= sh.windows) {
		mdb_txn_abort(txn);
		return ig_errf(eb, IG_E_INVAL,
		               "KV-disk: seq %" PRIu64 " has %u windows; window %u asked", seq,
		               sh.windows, k);
	}
	at = k;
	if (!kvdisk__win_get(d, txn, &sh, k, &v, &wh, why, sizeof(why)))
		goto out_lost;
	if (wh.len > cap) {
		mdb_txn_abort(txn);
		return ig_errf(eb, IG_E_INVAL,
		               "KV-disk: seq %" PRIu64 " window %u holds %" PRIu64
		               " bytes, %" PRIu64 " given",
		               seq, k, wh.len, cap);
	}
	p = (const unsigned char *)v.mv_data + KVDISK_HDR;
	kvdisk__willneed(p, wh.len);
	got = kvcopy_hash(dst, p, wh.len);
	if (got != wh.xxh) {
		snprintf(why, sizeof(why),
		         "corrupt: the payload hashes to %016" PRIx64
		         ", its header says %016" PRIx64,
		         got, wh.xxh);
		goto out_lost;
	}
	mdb_txn_abort(txn);
	*len = wh.len;
	*sum = got;
	if (k + 1 == sh.windows)
		d->reads++;
	return IG_E_OK;

out_lost:
	mdb_txn_abort(txn);
	return kvdisk__lose(d, seq, at, why, eb);
}

int kvdisk_stat(struct kvdisk *d, uint64_t seq, struct kvdisk_seq *out, struct ig_errbuf *eb)
{
	char why[200];
	struct kvdisk_hdr sh;
	MDB_txn *txn;
	MDB_val v;
	bool ok;
	int rc, mrc;

	rc = kvdisk__read_begin(d, seq, &txn, &v, &mrc, eb);
	if (rc)
		return rc;
	rc = mrc;
	ok = !rc && kvdisk__seq_ok(seq, &v, &sh, why, sizeof(why));
	mdb_txn_abort(txn);
	if (rc == MDB_NOTFOUND)
		return ig_errf(eb, IG_E_NOTFOUND, "KV-disk: seq %" PRIu64 " is not on disk", seq);
	if (rc)
		snprintf(why, sizeof(why), "LMDB: %s", mdb_strerror(rc));
	if (!ok)
		return kvdisk__lose(d, seq, KVDISK_SEQ_WINDOW, why, eb);
	kvdisk__meta_of(&sh, &out->meta);
	out->stored_bytes = sh.len;
	return IG_E_OK;
}

int kvdisk_drop(struct kvdisk *d, uint64_t seq, struct ig_errbuf *eb)
{
	bool found, noted;
	int rc;

	if (d->failed)
		return ig_errf(eb, IG_E_IO, "KV-disk at '%s': LMDB failed earlier; reopen it",
		               d->path);
	if (kvdisk_wabort(d, seq))
		return IG_E_OK; /* a write under way: nothing of it is held */
	noted = kvdisk__note_take(d, seq, NULL, 0);
	rc = kvdisk__drop_seq(d, seq, &found);
	if (kvdisk__full(rc))
		return ig_errf(eb, IG_E_NOSPACE,
		               "KV-disk at '%s': dropping seq %" PRIu64 ": tier full: the volume "
		               "cannot back the pages LMDB takes for a drop (%s); nothing dropped",
		               d->path, seq, strerror(rc));
	if (rc) {
		if (kvdisk__damage(rc))
			d->failed = true;
		return ig_errf(eb, IG_E_IO, "KV-disk at '%s': dropping seq %" PRIu64 ": %s%s",
		               d->path, seq, rc > 0 ? "" : "LMDB: ", mdb_strerror(rc));
	}
	if (!found && !noted)
		return ig_errf(eb, IG_E_NOTFOUND, "KV-disk: seq %" PRIu64 " is not on disk", seq);
	if (found)
		d->drops++;
	return IG_E_OK;
}

int kvdisk_verify(struct kvdisk *d, uint64_t seq, uint64_t *n_checked, struct ig_errbuf *eb)
{
	struct ig_errbuf first = {0}, e2;
	uint64_t *seqs = NULL;
	size_t n = 0, cap = 0;
	MDB_txn *txn;
	MDB_cursor *c;
	MDB_val k, v;
	int rc;

	*n_checked = 0;
	if (seq)
		return kvdisk__read(d, seq, NULL, NULL, 0, NULL, n_checked, eb);
	if (d->failed)
		return ig_errf(eb, IG_E_IO, "KV-disk at '%s': LMDB failed earlier; reopen it",
		               d->path);
	/* the sequences lost at open are reported here first */
	if (d->n_notes) {
		ig_errf(&first, IG_E_KV_LOST,
		        "KV-disk: seq %" PRIu64 " was lost and dropped at open: %s",
		        d->notes[0].seq, d->notes[0].why);
		d->n_notes = 0;
	}
	rc = mdb_txn_begin(d->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return ig_errf(eb, IG_E_IO, "KV-disk at '%s': LMDB: %s", d->path, mdb_strerror(rc));
	rc = mdb_cursor_open(txn, d->dseq, &c);
	if (!rc) {
		for (int op = MDB_FIRST; !rc; op = MDB_NEXT) {
			rc = mdb_cursor_get(c, &k, &v, op);
			if (!rc && k.mv_size == 8) {
				rc = kvdisk__grow((void **)&seqs, &cap, n, sizeof(*seqs));
				if (!rc)
					seqs[n++] = be_get64(k.mv_data);
			}
		}
		mdb_cursor_close(c);
	}
	mdb_txn_abort(txn);
	if (rc != MDB_NOTFOUND) {
		free(seqs);
		return ig_errf(eb, IG_E_IO, "KV-disk at '%s': listing: %s", d->path,
		               rc == ENOMEM ? "out of memory" : mdb_strerror(rc));
	}
	for (size_t i = 0; i < n; i++) {
		rc = kvdisk__read(d, seqs[i], NULL, NULL, 0, NULL, n_checked, &e2);
		if (rc && rc != IG_E_NOTFOUND && !first.code)
			first = e2;
	}
	free(seqs);
	if (first.code) {
		if (eb)
			*eb = first;
		return first.code;
	}
	return IG_E_OK;
}

uint32_t kvdisk_list(struct kvdisk *d, struct kvdisk_seq *out, uint32_t cap)
{
	char why[200];
	struct kvdisk_hdr sh;
	MDB_txn *txn;
	MDB_cursor *c;
	MDB_val k, v;
	uint32_t n = 0;
	int rc;

	if (d->failed || mdb_txn_begin(d->env, NULL, MDB_RDONLY, &txn))
		return 0;
	rc = mdb_cursor_open(txn, d->dseq, &c);
	if (!rc) {
		/* a damaged record is skipped here; a read reports and drops it */
		for (int op = MDB_FIRST; !rc && n < cap; op = MDB_NEXT) {
			rc = mdb_cursor_get(c, &k, &v, op);
			if (rc || k.mv_size != 8 ||
			    !kvdisk__seq_ok(be_get64(k.mv_data), &v, &sh, why, sizeof(why)))
				continue;
			kvdisk__meta_of(&sh, &out[n].meta);
			out[n].stored_bytes = sh.len;
			n++;
		}
		mdb_cursor_close(c);
	}
	mdb_txn_abort(txn);
	return n;
}

void kvdisk_stats(struct kvdisk *d, struct kvdisk_stats *st)
{
	*st = (struct kvdisk_stats){.ceiling_bytes = d->ceiling,
	                            .map_bytes = d->map_bytes,
	                            .used_bytes = d->used,
	                            .sequences = d->sequences,
	                            .writes = d->writes,
	                            .reads = d->reads,
	                            .refusals_full = d->refusals_full,
	                            .lost = d->lost,
	                            .drops = d->drops};
}
