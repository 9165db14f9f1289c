/* kvpool.c - the paged KV pool (see kvpool.h). */
#include "kvpool.h"

#include <stdlib.h>
#include <string.h>

int kvpool_init(struct kvpool *p, void *base, uint64_t page_bytes, uint32_t n_pages,
                struct ig_errbuf *eb)
{
	memset(p, 0, sizeof(*p));
	p->free_stack = malloc((size_t)n_pages * sizeof(uint32_t) + 1);
	p->owner = malloc((size_t)n_pages * sizeof(uint32_t) + 1);
	if (!p->free_stack || !p->owner) {
		kvpool_release(p);
		return ig_errf(eb, IG_E_NOMEM, "no host memory for the books of %u pages", n_pages);
	}
	p->base = base;
	p->page_bytes = page_bytes;
	p->n_pages = p->n_free = n_pages;
	/* lowest pages on top: a fresh pool hands out 0, 1, 2, ... */
	for (uint32_t i = 0; i < n_pages; i++) {
		p->free_stack[i] = n_pages - 1 - i;
		p->owner[i] = KVPOOL_NO_OWNER;
	}
	return IG_E_OK;
}

void kvpool_release(struct kvpool *p)
{
	free(p->free_stack);
	free(p->owner);
	memset(p, 0, sizeof(*p));
}

uint32_t kvpool_pages_for(uint64_t prompt_tokens, uint64_t cap_tokens, uint64_t context_tokens)
{
	uint64_t t = prompt_tokens + cap_tokens;

	if (t > context_tokens)
		t = context_tokens;
	return (uint32_t)((t + KVPOOL_PAGE_TOKENS - 1) / KVPOOL_PAGE_TOKENS);
}

bool kvpool_try_reserve(struct kvpool *p, struct kvseq *s, uint32_t id, uint32_t pages, int *err)
{
	*err = IG_E_OK;
	if (pages > p->n_free)
		return false;
	s->table = malloc((size_t)pages * sizeof(uint32_t) + 1);
	if (!s->table) {
		*err = IG_E_NOMEM;
		return false;
	}
	s->id = id;
	s->n_pages = pages;
	for (uint32_t i = 0; i < pages; i++) {
		uint32_t page = p->free_stack[--p->n_free];

		p->owner[page] = id;
		s->table[i] = page;
	}
	return true;
}

void kvpool_free(struct kvpool *p, struct kvseq *s)
{
	if (!s->table)
		return;
	/* back in reverse, so a free right after a reserve restores the stack */
	for (uint32_t i = s->n_pages; i-- > 0;) {
		p->owner[s->table[i]] = KVPOOL_NO_OWNER;
		p->free_stack[p->n_free++] = s->table[i];
	}
	free(s->table);
	s->table = NULL;
	s->n_pages = 0;
}

bool kvpool_check(const struct kvpool *p, const struct kvseq *const *seqs, uint32_t n_seqs,
                  struct ig_errbuf *eb)
{
	uint32_t owned = 0, marks_left = p->n_free;
	uint8_t *seen = calloc(p->n_pages + 1u, 1);
	bool ok = true;

	if (!seen) {
		ig_errf(eb, IG_E_NOMEM, "no memory to check the pool");
		return false;
	}
	for (uint32_t i = 0; ok && i < p->n_free; i++) {
		uint32_t page = p->free_stack[i];

		if (page >= p->n_pages || seen[page] || p->owner[page] != KVPOOL_NO_OWNER) {
			ig_errf(eb, IG_E_INVAL,
			        "free page %u is out of range, listed twice or owned", page);
			ok = false;
		}
		if (ok)
			seen[page] = 1;
	}
	for (uint32_t k = 0; ok && k < n_seqs; k++) {
		const struct kvseq *s = seqs[k];

		for (uint32_t i = 0; ok && i < s->n_pages; i++) {
			uint32_t page = s->table[i];

			if (page >= p->n_pages || seen[page] || p->owner[page] != s->id) {
				ig_errf(eb, IG_E_INVAL,
				        "sequence %u's page %u (table entry %u) is out of range, "
				        "free, shared or owned by %u",
				        s->id, page, i, page < p->n_pages ? p->owner[page] : 0);
				ok = false;
			}
			if (ok) {
				seen[page] = 1;
				owned++;
			}
		}
	}
	if (ok && owned + marks_left != p->n_pages) {
		ig_errf(eb, IG_E_INVAL, "%u owned + %u free pages != %u in the pool", owned,
		        marks_left, p->n_pages);
		ok = false;
	}
	free(seen);
	return ok;
}
