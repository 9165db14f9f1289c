/*
 * kvram.h - KV-RAM's shared-memory contract, what both daemons hold to: the
 * object's granule and limits, the identity of what it holds, and its
 * mapping by a client (the gpu-worker, ignis-kvstore-ctl), which reads and
 * writes data bytes inside the extents the daemon hands out and never the
 * index. The object's byte layout is kvram_layout.h's; the index, its
 * recovery and its policies are the kvstore daemon's (kvstore-daemon/arena.h).
 */
#ifndef IGNIS_KVRAM_H
#define IGNIS_KVRAM_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

/* Placement granule: extents are whole multiples of this. */
#define ARENA_BLOCK (64u * 1024u)
/* The most windows one sequence may have. */
#define ARENA_MAX_WINDOWS 4096u

enum arena_class { ARENA_INTERACTIVE = 0, ARENA_AGENT = 1 };

enum arena_slot_kind { ARENA_CHECKPOINT = 1, ARENA_PREFIX = 2 };
enum arena_slot_state { ARENA_SLOT_FREE = 0, ARENA_SLOT_WRITING = 1, ARENA_SLOT_HELD = 2 };
/* The most retained host slots (--reuse-retained-host's range). */
#define ARENA_SLOTS_MAX 1024u

struct arena_slot_meta {
	uint64_t key;      /* the caller's identity of what it holds (e.g. a prompt hash), != 0 */
	uint64_t model_id; /* seqimg_model_id() */
	uint64_t image_bytes; /* 1..slot_bytes */
	uint32_t kind;        /* enum arena_slot_kind */
	uint32_t cls;         /* enum arena_class */
	uint32_t tokens;      /* the tokens the image covers */
};

struct arena_slot_info {
	struct arena_slot_meta meta;
	uint32_t slot;   /* its index */
	uint32_t state;  /* enum arena_slot_state */
	uint64_t gen;    /* this capture's generation, unique in the object */
	uint64_t offset; /* of its bytes, from the start of the mapping */
	uint64_t sum;    /* kvcopy_sum of the image (0 until published) */
	uint64_t last_use;
};

/*
 * The worker's (and the operator CLI's) side: map an existing arena to read
 * and write data bytes. The index is the daemon's: a client never writes it.
 */
struct arena_map {
	void *base;
	uint64_t bytes;
	int fd;
};
int arena_map_open(struct arena_map *m, const char *name, struct ig_errbuf *eb);
void arena_map_close(struct arena_map *m);
/* A retained slot as the mapping shows it now (the reader's check after it
 * copied a claimed slot out: still held under the same gen?). IG_E_NOTFOUND
 * when `slot` is past the last one; a torn or changing record reads as
 * state free. */
int arena_map_slot(const struct arena_map *m, uint32_t slot, struct arena_slot_info *out,
                   struct ig_errbuf *eb);

#endif
