/*
 * kvpool.h - the paged KV pool: fixed pages of 64 tokens inside the plan's
 * kv_pool region, reserved whole per sequence at admission.
 *
 * Invariants (kvpool_check, asserted after every mutation in the tests):
 *   - every page is either free (exactly once on the free stack) or owned by
 *     exactly one sequence, whose page table lists it exactly once;
 *   - free + owned = the pool's pages;
 *   - a sequence's reservation is made all at once and never grows
 *     (docs/design.md, section 4): a reservation that does not fit takes
 *     nothing.
 */
#ifndef IGNIS_GPU_WORKER_KVPOOL_H
#define IGNIS_GPU_WORKER_KVPOOL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

#define KVPOOL_PAGE_TOKENS 64u
#define KVPOOL_NO_OWNER    UINT32_MAX

struct kvpool {
	unsigned char *base; /* the plan's kv_pool region */
	uint64_t page_bytes;
	uint32_t n_pages, n_free;
	uint32_t *free_stack; /* the free pages; the top is n_free - 1 */
	uint32_t *owner;      /* per page: the owning sequence id, or KVPOOL_NO_OWNER */
};

/* A sequence's reservation: `table[i]` is the pool page of its tokens
 * [64 i, 64 i + 64). The caller embeds it; the table belongs to it. */
struct kvseq {
	uint32_t id;
	uint32_t n_pages;
	uint32_t *table;
};

/* Book-keep `n_pages` pages of `page_bytes` at `base` (host memory for the
 * books; the pages themselves are the caller's region). */
int kvpool_init(struct kvpool *p, void *base, uint64_t page_bytes, uint32_t n_pages,
                struct ig_errbuf *eb);
void kvpool_release(struct kvpool *p);

/* Pages a request reserves: ceil((prompt + cap) / 64), the total never past
 * the context. */
uint32_t kvpool_pages_for(uint64_t prompt_tokens, uint64_t cap_tokens, uint64_t context_tokens);

/* Reserve `pages` pages for sequence `id`, all or nothing: true and `s` holds
 * them, or false and nothing changed (no room is an answer, not an error).
 * IG_E_NOMEM only when host memory for the page table fails, reported as
 * false with *err set. */
bool kvpool_try_reserve(struct kvpool *p, struct kvseq *s, uint32_t id, uint32_t pages, int *err);
/* Give a sequence's pages back. Idempotent. */
void kvpool_free(struct kvpool *p, struct kvseq *s);

static inline void *kvpool_page(const struct kvpool *p, uint32_t page)
{
	return p->base + (uint64_t)page * p->page_bytes;
}

/* The invariants above, for the sequences `seqs` (all live ones). False and
 * `eb` naming the first broken one. */
bool kvpool_check(const struct kvpool *p, const struct kvseq *const *seqs, uint32_t n_seqs,
                  struct ig_errbuf *eb);

#endif
