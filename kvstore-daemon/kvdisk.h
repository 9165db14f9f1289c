/*
 * kvdisk.h - KV-disk: sequences KV-RAM gave up or could not take, in LMDB at
 * --reuse-kv-disk-path, under a ceiling of min(--reuse-kv-disk-bytes, the
 * volume's free bytes at open - 10 GiB).
 *
 * One record per window, keyed (seq id, window index), each with a header:
 * layout version, model identity, KV format, the sequence's window count and
 * image bytes, this window's length and sum. A sequence is written in one
 * LMDB write transaction (all its windows, then a sequence record that says
 * it is whole), so it counts only once committed whole: a write killed
 * midway leaves nothing. A read checks every header and checksum: a torn,
 * corrupt or foreign record is reported lost (IG_E_KV_LOST naming the seq,
 * window and what failed), never served. The LMDB flags and what they
 * guarantee: docs/adr (KV-disk).
 *
 * Not thread-safe: the daemon's loop owns it.
 */
#ifndef IGNIS_KVSTORE_KVDISK_H
#define IGNIS_KVSTORE_KVDISK_H

#include <stdbool.h>
#include <stdint.h>

#include "arena.h"
#include "common/err.h"

/* Kept free on the volume beside the ceiling (the spec's 10 GiB). */
#define KVDISK_VOLUME_RESERVE (10ull << 30)

struct kvdisk_seq {
	struct arena_meta meta; /* its identity, window size and count */
	uint64_t stored_bytes;  /* on disk, headers included */
};

struct kvdisk_stats {
	uint64_t ceiling_bytes; /* effective */
	uint64_t map_bytes;     /* LMDB's map: the ceiling and LMDB's own headroom */
	uint64_t used_bytes;    /* records' bytes (headers included) */
	uint32_t sequences;
	uint64_t writes, reads, refusals_full, lost, drops;
};

struct kvdisk;

/* kvdisk_open's flags, for tests: */
/* drop the volume rule (tests on small volumes) */
#define KVDISK_OPEN_IGNORE_VOLUME 1u
/* take data.mdb's blocks as on a filesystem without fallocate, whatever
 * this one has (pages populated, MADV_POPULATE_WRITE) */
#define KVDISK_OPEN_NO_FALLOCATE 2u
/* ... and as on a kernel without MADV_POPULATE_WRITE (zeros written) */
#define KVDISK_OPEN_NO_POPULATE 4u

/* Open (creating) the LMDB environment in directory `path` with a ceiling of
 * min(flag_bytes, the volume's free bytes - KVDISK_VOLUME_RESERVE), where
 * the free bytes count the blocks its own data.mdb already holds; the
 * effective ceiling is reported in stats. IG_E_CONFIG naming the path and the
 * figures when the ceiling comes to less than one window of `min_bytes`.
 * `flags`: 0, or KVDISK_OPEN_* (tests only).
 * IG_E_BUSY when another process holds the directory; IG_E_IO when LMDB
 * finds the environment damaged after a clean stop (the message names the
 * remedy); IG_E_NOSPACE ("tier full") when the volume cannot back the pages
 * open writes. On success the caller owns *out until kvdisk_close.
 *
 * A volume that fills after the open is never a signal: a write the volume
 * cannot back is refused IG_E_NOSPACE ("tier full", naming the path and the
 * bytes), nothing written, on every filesystem with or without fallocate. */
int kvdisk_open(struct kvdisk **out, const char *path, uint64_t flag_bytes, uint64_t min_bytes,
                unsigned flags, struct ig_errbuf *eb);
void kvdisk_close(struct kvdisk *d);

/* Write a whole sequence: `meta` and its windows, window k's bytes at
 * base + w[k].offset (w[k].len bytes, w[k].sum their checksum, checked
 * again before writing). IG_E_NOSPACE ("tier full", with the figures, and
 * nothing written) when it would cross the ceiling or the volume cannot back
 * it; IG_E_BUSY when the seq is already on disk. The checksum is
 * kvcopy_sum's (XXH3-64, seed 0), as KV-RAM's (arena.h). */
int kvdisk_put(struct kvdisk *d, const struct arena_meta *meta, const void *base,
               const struct arena_window *w, struct ig_errbuf *eb);
/* Would a put of `meta` be taken now: under the ceiling with the writes
 * under way counted, no write of it under way, LMDB sound? Arithmetic, no
 * I/O (the volume or LMDB's map may still refuse the put). The daemon asks
 * before demoting for room, so a demotion bound to be refused is not
 * tried. */
bool kvdisk_fits(const struct kvdisk *d, const struct arena_meta *meta);
/* Streams: a sequence written to disk a window at a time (a move straight
 * from the device when KV-RAM cannot take it, through a staging window), or
 * read back a window at a time (straight to the device).
 *
 * Writing: kvdisk_wbegin counts the whole sequence against the ceiling at
 * once (IG_E_NOSPACE, nothing written, when it would cross it; IG_E_BUSY
 * when the seq is on disk or another write of it is under way with windows
 * written; a begin asked again before any window is the same begin). Then
 * kvdisk_wput writes window k (k in order from 0; the same window again with
 * the same checksum is a no-op), each in a transaction of its own, hashed
 * while copied and refused (IG_E_INVAL, nothing written) when it does not
 * hash to `sum`, and IG_E_NOSPACE ("tier full", nothing of it written, the
 * write still open: send it again or abort) when the volume cannot back
 * it; the last window's transaction also writes the sequence
 * record, and only then does the sequence count as held (*whole true). A
 * write never finished is nothing: kvdisk_wabort (or kvdisk_drop) erases its
 * windows; after a crash, open's scan finds window records without a
 * sequence record and erases them (counted lost, as any torn record).
 * At most KVDISK_STREAMS writes at once. */
#define KVDISK_STREAMS 8u
int kvdisk_wbegin(struct kvdisk *d, const struct arena_meta *meta, struct ig_errbuf *eb);
int kvdisk_wput(struct kvdisk *d, uint64_t seq, uint32_t k, const void *src, uint64_t len,
                uint64_t sum, bool *whole, struct ig_errbuf *eb);
/* Erase what a write under way wrote and forget it; false when none was. */
bool kvdisk_wabort(struct kvdisk *d, uint64_t seq);
/* Is a write of `seq` under way? */
bool kvdisk_writing(const struct kvdisk *d, uint64_t seq);

/* Reading a window at a time: kvdisk_rsums checks the sequence record and
 * every window's header against it (not the payloads) and the record's
 * digest of their checksums, and returns the identity and sums[k] (ARENA_MAX_
 * WINDOWS entries); kvdisk_rwindow copies window k into dst (cap bytes),
 * hashing while it copies, *len its length, *sum its checksum. Either
 * reports a torn, corrupt or foreign record IG_E_KV_LOST and drops the
 * sequence; IG_E_NOTFOUND when it is not on disk. */
int kvdisk_rsums(struct kvdisk *d, uint64_t seq, struct arena_meta *meta_out, uint64_t *sums,
                 struct ig_errbuf *eb);
int kvdisk_rwindow(struct kvdisk *d, uint64_t seq, uint32_t k, void *dst, uint64_t cap,
                   uint64_t *len, uint64_t *sum, struct ig_errbuf *eb);

/* Read a whole sequence back: window k into dst + k * meta.window_bytes
 * (dst holds meta.image_bytes), each checked while copied. *meta_out its
 * identity; sums[k] (may be NULL; meta.windows entries) each window's
 * checksum, to commit it to KV-RAM without another pass.
 * IG_E_NOTFOUND; IG_E_KV_LOST for a torn, corrupt or foreign record (the
 * sequence is then dropped from disk: it cannot be served). On any error
 * dst's contents are unspecified and must not be used. */
int kvdisk_get(struct kvdisk *d, uint64_t seq, struct arena_meta *meta_out, void *dst,
               uint64_t dst_bytes, uint64_t *sums, struct ig_errbuf *eb);
/* Its identity without reading its windows; IG_E_NOTFOUND. */
int kvdisk_stat(struct kvdisk *d, uint64_t seq, struct kvdisk_seq *out, struct ig_errbuf *eb);
int kvdisk_drop(struct kvdisk *d, uint64_t seq, struct ig_errbuf *eb);
/* Check every record of `seq` (0: of every sequence) without serving it;
 * returns IG_E_OK or the first IG_E_KV_LOST, *n_checked windows checked.
 * Each lost sequence is dropped; a `seq` not on disk is IG_E_NOTFOUND. */
int kvdisk_verify(struct kvdisk *d, uint64_t seq, uint64_t *n_checked, struct ig_errbuf *eb);
/* The sequences on disk in seq order, at most `cap`; returns how many were
 * written to `out`. */
uint32_t kvdisk_list(struct kvdisk *d, struct kvdisk_seq *out, uint32_t cap);
void kvdisk_stats(struct kvdisk *d, struct kvdisk_stats *st);

#endif
