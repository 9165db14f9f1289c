/*
 * kvram_layout.h - the KV-RAM object's bytes (layout version 2; the table
 * is in kvstore-daemon/arena.c): the header page, the retained slots'
 * descriptor and records, the sequence and window records, and the checks
 * that a reader (the daemon at open, a client at its mapping) makes of them.
 * On shared memory that outlives the process: never renumber; a change of
 * layout bumps ARENA_LAYOUT_VERSION and an old object is refused by name,
 * never reinterpreted. For kvram/ and the daemon's arena.c only.
 */
#ifndef IGNIS_KVRAM_LAYOUT_H
#define IGNIS_KVRAM_LAYOUT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <xxhash.h>

#include "kvram/kvram.h"

#define ARENA_LAYOUT_VERSION 2u /* 2: window checksums are XXH3-64 (ADR 0015) */
#define ARENA_DIR            "/dev/shm"
#define ARENA_HDR_BYTES      4096u
/* Sequence records at most: 65,536 x 96 B = 6 MiB of index. */
#define ARENA_SEQ_CAP 65536u
/* Names: a file under /dev/shm, short enough for a path buffer. */
#define ARENA_NAME_MAX 200u

static const char arena_magic[8] __attribute__((unused)) = {'I', 'G', 'N', 'I', 'S', 'K', 'V', 'R'};

enum { SREC_FREE = 0, SREC_LIVE = 1 };

struct arena_hdr {
	char magic[8];
	uint32_t version;
	uint32_t block;
	uint64_t asked_bytes;
	uint64_t n_blocks;
	uint32_t seq_cap;
	uint32_t win_cap;
	uint64_t seq_off;
	uint64_t win_off;
	uint64_t data_off;
	uint64_t map_bytes;
	uint64_t check; /* XXH64 of the bytes before it */
	_Atomic uint64_t next_gen;
	_Atomic uint64_t use_clock;
	_Atomic uint64_t opens;
};

struct arena_srec {
	_Atomic uint32_t state;
	uint32_t windows;
	uint64_t seq;
	uint64_t model_id;
	uint32_t kv_format;
	uint32_t cls;
	uint64_t image_bytes;
	uint32_t window_bytes;
	uint32_t wfirst;
	uint64_t first_block;
	uint64_t gen;
	uint64_t check; /* XXH64 of bytes 4..63 */
	_Atomic uint64_t last_use;
	uint64_t pad[2];
};

struct arena_wrec {
	uint64_t sum;
	_Atomic uint64_t tag;
};

#define ARENA_SLOTDESC_OFF 128u

struct arena_slotdesc {
	uint32_t count;
	uint32_t rec_bytes;
	uint64_t slot_bytes;
	uint64_t stride;
	uint64_t srec_off;
	uint64_t sdata_off;
	uint64_t check; /* XXH64 of the bytes before it */
};

struct arena_rslot {
	_Atomic uint32_t state;
	uint32_t kind;
	uint32_t cls;
	uint32_t tokens;
	uint64_t key;
	uint64_t model_id;
	uint64_t image_bytes;
	uint64_t sum;
	uint64_t gen;
	uint64_t check; /* XXH64 of bytes 4..55 */
	_Atomic uint64_t last_use;
	uint64_t pad[3];
};

/* On shared memory: never renumber. */
_Static_assert(offsetof(struct arena_hdr, check) == 72, "header layout");
_Static_assert(offsetof(struct arena_hdr, opens) == 96, "header layout");
_Static_assert(sizeof(struct arena_hdr) <= ARENA_HDR_BYTES, "header fits its page");
_Static_assert(offsetof(struct arena_srec, check) == 64, "record layout");
_Static_assert(offsetof(struct arena_srec, last_use) == 72, "record layout");
_Static_assert(sizeof(struct arena_srec) == 96, "record layout");
_Static_assert(sizeof(struct arena_wrec) == 16, "window record layout");
_Static_assert(offsetof(struct arena_slotdesc, check) == 40, "slots descriptor layout");
_Static_assert(ARENA_SLOTDESC_OFF >= sizeof(struct arena_hdr) &&
                   ARENA_SLOTDESC_OFF + sizeof(struct arena_slotdesc) <= ARENA_HDR_BYTES,
               "the slots descriptor fits the header page");
_Static_assert(offsetof(struct arena_rslot, check) == 56, "slot record layout");
_Static_assert(offsetof(struct arena_rslot, last_use) == 64, "slot record layout");
_Static_assert(sizeof(struct arena_rslot) == 96, "slot record layout");
/* Shared between processes: the atomics must not hide a lock. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2 && ATOMIC_LLONG_LOCK_FREE == 2, "lock-free atomics");

struct layout {
	uint64_t n_blocks;
	uint32_t seq_cap, win_cap, slots;
	uint64_t slot_bytes, stride, srec_off, sdata_off;
	uint64_t seq_off, win_off, data_off, map_bytes;
};

/* The largest retained slot: keeps every product in range. */
#define ARENA_SLOT_BYTES_MAX (1ull << 40)

static inline void layout_of(uint64_t bytes, uint32_t slots, uint64_t slot_bytes, struct layout *l)
{
	l->n_blocks = bytes / ARENA_BLOCK;
	l->seq_cap = (uint32_t)(l->n_blocks < ARENA_SEQ_CAP ? l->n_blocks : ARENA_SEQ_CAP);
	l->win_cap = (uint32_t)(l->n_blocks + ARENA_MAX_WINDOWS);
	l->slots = slots;
	l->slot_bytes = slot_bytes;
	l->stride = (slot_bytes + ARENA_BLOCK - 1) / ARENA_BLOCK * ARENA_BLOCK;
	l->srec_off = ARENA_HDR_BYTES;
	l->seq_off = l->srec_off + (uint64_t)slots * sizeof(struct arena_rslot);
	l->win_off = l->seq_off + (uint64_t)l->seq_cap * sizeof(struct arena_srec);
	l->sdata_off = l->win_off + (uint64_t)l->win_cap * sizeof(struct arena_wrec);
	l->sdata_off = (l->sdata_off + ARENA_BLOCK - 1) / ARENA_BLOCK * ARENA_BLOCK;
	l->data_off = l->sdata_off + (uint64_t)slots * l->stride;
	l->map_bytes = l->data_off + l->n_blocks * ARENA_BLOCK;
}

static inline uint64_t hdr_check(const struct arena_hdr *h)
{
	return XXH64(h, offsetof(struct arena_hdr, check), 0);
}

static inline uint64_t sd_check(const struct arena_slotdesc *d)
{
	return XXH64(d, offsetof(struct arena_slotdesc, check), 0);
}

static inline uint64_t rslot_check(const struct arena_rslot *r)
{
	return XXH64((const uint8_t *)r + 4, offsetof(struct arena_rslot, check) - 4, 0);
}

static inline uint32_t rslot_state(const struct arena_rslot *r)
{
	return atomic_load_explicit(&r->state, memory_order_acquire);
}

static inline uint64_t srec_check(const struct arena_srec *r)
{
	return XXH64((const uint8_t *)r + 4, offsetof(struct arena_srec, check) - 4, 0);
}

/* The object's name: 1-ARENA_NAME_MAX letters, digits, '-', '_' and '.',
 * not starting with '.' (a file under ARENA_DIR). */
int kvram_name_ok(const char *name, struct ig_errbuf *eb);
void kvram_path_of(char *path, size_t cap, const char *name);
/* The object must be ours alone: a regular file, owned by us, mode 0600. */
int kvram_owner_ok(int fd, const char *path, struct stat *st, struct ig_errbuf *eb);
/* Check a header page read from `path` (below, at its definition). */
int kvram_hdr_ok(const uint8_t *page, const char *path, uint64_t asked, uint32_t slots,
                 uint64_t slot_bytes, uint64_t size, const char **repair, struct ig_errbuf *eb);
/* mmap `bytes` of `fd` shared, read-write, populated. */
int kvram_map_fd(int fd, uint64_t bytes, void **out, const char *path, struct ig_errbuf *eb);

#endif
