/*
 * arena.h - KV-RAM: one host arena in shared memory, reserved whole at start
 * by the kvstore daemon and mapped by the gpu-worker (and, on the cuda
 * backend, registered for DMA), with the index of what is where inside it.
 *
 * The shared-memory object outlives the daemon: a restarted daemon reopens
 * it and recovers its index (docs/adr: what survives a restart), so KV-RAM
 * contents survive a kvstore restart; only a reboot or an explicit removal
 * loses them.
 *
 * A sequence's image (model/seqimg.h) goes to KV-RAM as windows:
 *   1. reserve: room for the whole image, one contiguous extent, with the
 *      sequence's identity (seq id, model id, KV format, class) — at once,
 *      or IG_E_NOSPACE ("tier full") without waiting;
 *   2. the writer (the worker) copies window k into [offset + k * window,
 *      + len) of the mapping;
 *   3. commit window k with the checksum of its bytes (kvcopy_sum:
 *      libxxhash's XXH3-64, seed 0) that the writer took while copying them in
 *      (kvcopy.h): the daemon records it without reading the bytes again
 *      (ADR 0015); a committed window is acknowledged and must survive a
 *      kill -9 of the daemon at any instant;
 *   4. the sequence is complete when every window up to `windows` is
 *      committed; reading back gives each window's offset, length and
 *      checksum, and the reader checks the bytes while copying them out
 *      (kvcopy_check), throwing away a window that does not match: bytes
 *      that differ from what was committed are never served.
 * Every committed window survives a kill -9 of the daemon at any instant,
 * byte for byte: a restarted daemon's recovery keeps every sequence with at
 * least one committed window (complete or not, with its extent) and reclaims
 * only reservations with none. A sequence counts for the worker once it is
 * complete; the worker keeps its pages until then, and drops an incomplete
 * one it finds after a restart (or commits its remaining windows).
 *
 * Not thread-safe: the daemon's one loop owns the index. The worker and the
 * operator CLI only read and write data bytes inside extents the daemon
 * handed out.
 */
#ifndef IGNIS_KVSTORE_ARENA_H
#define IGNIS_KVSTORE_ARENA_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "kvram/kvram.h"


/* What identifies a sequence's image (the header of model/seqimg.h
 * carries the same). */
struct arena_meta {
	uint64_t seq;      /* the worker's sequence id, unique among live ones, != 0 */
	uint64_t model_id; /* seqimg_model_id() */
	uint32_t kv_format;
	uint32_t cls;         /* enum arena_class */
	uint64_t image_bytes; /* the whole image */
	uint32_t window_bytes;
	uint32_t windows; /* ceil(image_bytes / window_bytes) */
};

struct arena_window {
	uint64_t offset; /* from the start of the mapping */
	uint64_t len;
	uint64_t sum;
};

/* One sequence held in KV-RAM. */
struct arena_info {
	struct arena_meta meta;
	uint64_t offset, reserved; /* its extent */
	uint32_t committed;        /* windows committed so far */
	bool complete;
	uint64_t last_use; /* a counter: larger is more recent */
};

struct arena_stats {
	uint64_t bytes;      /* the arena's data bytes */
	uint64_t used_bytes; /* reserved extents */
	uint64_t free_bytes;
	uint64_t largest_free; /* the largest extent a reserve can get now */
	uint32_t sequences, complete;
	uint64_t reserves, commits, refusals_full, drops;
	uint64_t recovered_sequences, reclaimed_sequences; /* at the last open */
	uint64_t damaged_sequences; /* records found damaged and dropped at the last open */
	/* retained host slots (below) */
	uint32_t slots, slots_free, slots_writing, slots_held;
	uint64_t slot_bytes;
	uint64_t slot_captures, slot_publishes, slot_claims, slot_claim_misses, slot_given_up;
	uint64_t slot_skips_busy, slot_skips_duplicate, slot_skips_size, slot_skips_none;
	uint64_t slots_recovered, slots_lost; /* at the last open */
};

struct arena;

/*
 * Retained host slots. The arena object also holds `slots` fixed slots of
 * `slot_bytes` each, in one block before the sequences' data (so
 * --reuse-kv-ram-bytes stays the room for moved sequences): each holds the
 * image of one sequence's fixed-size state, a prompt checkpoint or a shared
 * prefix (docs/design.md, section 5: --reuse-retained-host). A slot is
 *   free -> writing (capture: the writer copies the image in) -> held
 *   (publish: with the image's checksum) -> claimed any number of times (a
 *   reader copies it out and checks it) -> given up or dropped -> free.
 * A capture takes the lowest free slot; when none is free it gives one up:
 * checkpoints before prefixes, agent before interactive (an interactive slot
 * idle past --reuse-retained-interactive-ttl ranks as agent: `as_agent`),
 * then the least recently used; a slot being written is never given up.
 * When nothing can be given up the capture is skipped (IG_E_NOSPACE,
 * counted), never waited for. Claims are optimistic: the reader checks the
 * bytes against the checksum while copying, then that the slot still holds
 * the same generation (arena_map_slot); a capture that took the slot
 * meanwhile shows as a miss. Slots survive a restart of the daemon like
 * sequences: a held slot is kept, one still being written is freed.
 */


/*
 * The daemon's side. Open the shared-memory object `name` (a file name under
 * /dev/shm, e.g. "ignis-kvram-0-1a2b"), of `bytes` data bytes: created when
 * absent; reopened and recovered when present with the same size and a valid
 * header (every committed window kept; reservations with none reclaimed);
 * refused naming what differs when present with another size or layout
 * version (the operator removes it or changes the flag), never silently
 * recreated. A damaged sequence record is dropped and noted
 * (arena_damaged), the rest served; a damaged header or slots descriptor is
 * rebuilt from `bytes`, `slots` and `slot_bytes` when the object is the
 * size they make (arena_repaired), else refused (IG_E_KV_LOST). The whole
 * object is touched at open so that its memory is really there (a later
 * page fault must not find /dev/shm full).
 */
int arena_open(struct arena **out, const char *name, uint64_t bytes, struct ig_errbuf *eb);
/* The same with `slots` retained host slots of `slot_bytes` each (0, 0: none),
 * in the object beside the `bytes` of sequence data. Reopening with another
 * count or size is refused naming both, like another size. */
int arena_open_slots(struct arena **out, const char *name, uint64_t bytes, uint32_t slots,
                     uint64_t slot_bytes, struct ig_errbuf *eb);
void arena_close(struct arena *a);
/* A sequence record the last open found damaged and dropped: its sequence
 * is lost (its owner finds it held nowhere and prefills it again). */
struct arena_damage {
	uint32_t record; /* its index record */
	uint64_t seq;    /* as the record says: not to be trusted when the record is torn */
	char why[160];
};
/* The most records whose details an open keeps (all are counted). */
#define ARENA_DAMAGE_DETAILS 16u
/* How many records the last open dropped as damaged (stats'
 * damaged_sequences); the first of them, up to `cap` and
 * ARENA_DAMAGE_DETAILS, in `out`, in index order. */
uint32_t arena_damaged(const struct arena *a, struct arena_damage *out, uint32_t cap);
/* What the last open rewrote of the header page (a damaged header or
 * retained slots' descriptor, rebuilt from the configuration), or NULL when
 * it was sound. Valid until arena_close. */
const char *arena_repaired(const struct arena *a);
/* Remove the shared-memory object `name` (operator's reset; tests). */
int arena_unlink(const char *name, struct ig_errbuf *eb);

/* The mapping's base and size (the daemon also copies disk records in). */
void *arena_base(struct arena *a);
uint64_t arena_map_bytes(const struct arena *a);

/* Reserve an extent for `meta`'s whole image. IG_E_NOSPACE ("tier full",
 * with the figures) when no extent that large is free; IG_E_BUSY when the
 * sequence is already held; IG_E_INVAL for a malformed meta. */
int arena_reserve(struct arena *a, const struct arena_meta *meta, uint64_t *offset,
                  struct ig_errbuf *eb);
/* Commit window `k` of `seq` (its bytes are in place): `len` must be the
 * window's length; `sum` is recorded as the bytes' checksum without
 * reading them (the writer took it while copying; every reader checks it).
 * Committing a committed window again with the same checksum is a no-op (a
 * retried request); with another, IG_E_INVAL naming both. */
int arena_commit(struct arena *a, uint64_t seq, uint32_t k, uint64_t len, uint64_t sum,
                 struct ig_errbuf *eb);
/* Its record and windows (cap entries of `w`); IG_E_NOTFOUND. Counts as a
 * use (LRU). w[k] is window k (its place in the extent); one not committed
 * yet has len 0 and sum 0. */
int arena_get(struct arena *a, uint64_t seq, struct arena_info *info, struct arena_window *w,
              uint32_t cap, struct ig_errbuf *eb);
/* Give a sequence's extent back. IG_E_NOTFOUND when it is not held. */
int arena_drop(struct arena *a, uint64_t seq, struct ig_errbuf *eb);
/* Every held sequence, in no particular order; returns how many (at most
 * cap written). */
uint32_t arena_list(struct arena *a, struct arena_info *out, uint32_t cap);
/* The sequence to give up first for room: complete ones only, the lowest
 * class (agent) first, then least recently used; 0 when none. `except` is
 * never chosen, nor one of the `n_skip` at `skip` (may be NULL); an
 * interactive sequence ranks as an agent when `as_agent` (may be NULL) says
 * so (the daemon's --reuse-retained-interactive-ttl). */
uint64_t arena_pick_victim_ex(struct arena *a, uint64_t except, const uint64_t *skip,
                              uint32_t n_skip, bool (*as_agent)(void *ctx, uint64_t seq),
                              void *ctx);
/* Would an extent of `bytes` fit if every complete sequence were given up
 * (those being written, and the daemon's staging windows, staying where
 * they are)? Asked before giving any up for room, so that none is given up
 * for room it cannot make. Changes nothing. */
bool arena_fits_if_given_up(struct arena *a, uint64_t bytes);
void arena_stats(struct arena *a, struct arena_stats *st);

/* Capture: a slot for `m`'s image, state writing, its place in *out. The
 * slot given up for it (held before) in *given_up, or state free when none
 * was. IG_E_NOSPACE when there are no slots or none can be given up (all
 * being written): the capture is skipped. IG_E_BUSY when a slot already
 * holds or is writing the same key, model and kind. IG_E_INVAL for a
 * malformed meta or an image larger than a slot. Each skip is counted by
 * reason. */
int arena_slot_capture(struct arena *a, const struct arena_slot_meta *m,
                       bool (*as_agent)(void *ctx, uint32_t slot), void *ctx,
                       struct arena_slot_info *out, struct arena_slot_info *given_up,
                       struct ig_errbuf *eb);
/* Publish: the image is in place; `sum` its checksum (kvcopy_sum). The slot
 * must be writing under `gen`, else IG_E_NOTFOUND. A retried publish of a
 * held slot with the same gen and sum is a no-op. */
int arena_slot_publish(struct arena *a, uint32_t slot, uint64_t gen, uint64_t sum,
                       struct ig_errbuf *eb);
/* Claim: the held slot of `key` for `model_id` (and `kind`, 0 any); counts
 * as a use. IG_E_NOTFOUND (a miss, counted). */
int arena_slot_claim(struct arena *a, uint64_t key, uint64_t model_id, uint32_t kind,
                     struct arena_slot_info *out, struct ig_errbuf *eb);
/* Drop: free the slot if it still holds generation `gen` (an abandoned
 * capture, or the owner's own removal). IG_E_NOTFOUND otherwise. */
int arena_slot_drop(struct arena *a, uint32_t slot, uint64_t gen, struct ig_errbuf *eb);
/* Every slot from index `first`, free ones included; returns how many (at
 * most cap). */
uint32_t arena_slot_list(struct arena *a, uint32_t first, struct arena_slot_info *out,
                         uint32_t cap);

#endif
