/*
 * kvpool.h - the paged KV pool: fixed pages of MDESC_PAGE_TOKENS (64) tokens
 * inside the plan's kv_pool region, reserved whole per sequence at admission.
 *
 * Pages are counted, not owned: a page may be listed by several page
 * tables (a retained prompt checkpoint and the sequences that claimed it
 * share the checkpoint's full pages: docs/adr/0037). A page goes back to the
 * free stack when the last table listing it lets it go. Only a page listed
 * by one table is ever written: a sequence writes the positions past the
 * ones it shares, and a shared page holds only positions below.
 *
 * Invariants (kvpool_check, asserted after every mutation in the tests):
 *   - every page is either free (exactly once on the free stack, count 0)
 *     or listed, its count being the number of page tables that list it;
 *   - no table lists a page twice;
 *   - free + listed = the pool's pages;
 *   - a sequence's reservation is made all at once and never grows
 *     (docs/design.md, section 4): a reservation that does not fit takes
 *     nothing.
 */
#ifndef IGNIS_GPU_WORKER_KVPOOL_H
#define IGNIS_GPU_WORKER_KVPOOL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "common/model.h" /* MDESC_PAGE_TOKENS: the page's tokens, the plan's */

struct kvpool {
	unsigned char *base; /* the plan's kv_pool region */
	uint64_t page_bytes;
	uint32_t n_pages, n_free;
	uint32_t *free_stack; /* the free pages; the top is n_free - 1 */
	uint32_t *refs;       /* per page: the page tables listing it (0: free) */
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
/* The same, the first `n_shared` entries of its table being `shared` (pages
 * another table lists: their counts go up), the rest `pages - n_shared`
 * fresh ones. Only the fresh ones must be free. */
bool kvpool_try_reserve_after(struct kvpool *p, struct kvseq *s, uint32_t id,
                              const uint32_t *shared, uint32_t n_shared, uint32_t pages,
                              int *err);
/* Let a sequence's pages go: each is free again once no other table lists
 * it. Idempotent. */
void kvpool_free(struct kvpool *p, struct kvseq *s);
/* The pages of `s` no other table lists: what letting it go would free. */
uint32_t kvpool_private(const struct kvpool *p, const struct kvseq *s);

static inline void *kvpool_page(const struct kvpool *p, uint32_t page)
{
	return p->base + (uint64_t)page * p->page_bytes;
}

/* The invariants above, for the sequences `seqs` (all live ones). False and
 * `eb` naming the first broken one. */
bool kvpool_check(const struct kvpool *p, const struct kvseq *const *seqs, uint32_t n_seqs,
                  struct ig_errbuf *eb);

#endif
