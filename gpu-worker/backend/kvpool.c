/* kvpool.c - the paged KV pool (see kvpool.h). */
#include "kvpool.h"

#include <stdlib.h>
#include <string.h>

int kvpool_init(struct kvpool *p, void *base, uint64_t page_bytes, uint32_t n_pages,
                struct ig_errbuf *eb)
{
	memset(p, 0, sizeof(*p));
	p->free_stack = malloc((size_t)n_pages * sizeof(uint32_t) + 1);
	p->refs = calloc((size_t)n_pages + 1, sizeof(uint32_t));
	if (!p->free_stack || !p->refs) {
		kvpool_release(p);
		return ig_errf(eb, IG_E_NOMEM, "no host memory for the books of %u pages", n_pages);
	}
	p->base = base;
	p->page_bytes = page_bytes;
	p->n_pages = p->n_free = n_pages;
	/* lowest pages on top: a fresh pool hands out 0, 1, 2, ... */
	for (uint32_t i = 0; i < n_pages; i++)
		p->free_stack[i] = n_pages - 1 - i;
	return IG_E_OK;
}

void kvpool_release(struct kvpool *p)
{
	free(p->free_stack);
	free(p->refs);
	memset(p, 0, sizeof(*p));
}

uint32_t kvpool_pages_for(uint64_t prompt_tokens, uint64_t cap_tokens, uint64_t context_tokens)
{
	uint64_t t = prompt_tokens + cap_tokens;

	if (t > context_tokens)
		t = context_tokens;
	return (uint32_t)mdesc_pages_for(t);
}

bool kvpool_try_reserve(struct kvpool *p, struct kvseq *s, uint32_t id, uint32_t pages, int *err)
{
	return kvpool_try_reserve_after(p, s, id, NULL, 0, pages, err);
}

bool kvpool_try_reserve_after(struct kvpool *p, struct kvseq *s, uint32_t id,
                              const uint32_t *shared, uint32_t n_shared, uint32_t pages,
                              int *err)
{
	*err = IG_E_OK;
	if (n_shared > pages || pages - n_shared > p->n_free)
		return false;
	s->table = malloc((size_t)pages * sizeof(uint32_t) + 1);
	if (!s->table) {
		*err = IG_E_NOMEM;
		return false;
	}
	s->id = id;
	s->n_pages = pages;
	for (uint32_t i = 0; i < n_shared; i++) {
		p->refs[shared[i]]++;
		s->table[i] = shared[i];
	}
	for (uint32_t i = n_shared; i < pages; i++) {
		uint32_t page = p->free_stack[--p->n_free];

		p->refs[page] = 1;
		s->table[i] = page;
	}
	return true;
}

void kvpool_free(struct kvpool *p, struct kvseq *s)
{
	if (!s->table)
		return;
	/* back in reverse, so a free right after a reserve restores the stack */
	for (uint32_t i = s->n_pages; i-- > 0;)
		if (--p->refs[s->table[i]] == 0)
			p->free_stack[p->n_free++] = s->table[i];
	free(s->table);
	s->table = NULL;
	s->n_pages = 0;
}

uint32_t kvpool_private(const struct kvpool *p, const struct kvseq *s)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->n_pages; i++)
		n += p->refs[s->table[i]] == 1;
	return n;
}

bool kvpool_check(const struct kvpool *p, const struct kvseq *const *seqs, uint32_t n_seqs,
                  struct ig_errbuf *eb)
{
	uint32_t listed = 0;
	uint32_t *count = calloc(p->n_pages + 1u, sizeof(uint32_t));
	uint32_t *mark = calloc(p->n_pages + 1u, sizeof(uint32_t)); /* the last table + 1 */
	uint8_t *free_seen = calloc(p->n_pages + 1u, 1);
	bool ok = true;

	if (!count || !mark || !free_seen) {
		free(count);
		free(mark);
		free(free_seen);
		ig_errf(eb, IG_E_NOMEM, "no memory to check the pool");
		return false;
	}
	for (uint32_t i = 0; ok && i < p->n_free; i++) {
		uint32_t page = p->free_stack[i];

		if (page >= p->n_pages || free_seen[page] || p->refs[page] != 0) {
			ig_errf(eb, IG_E_INVAL,
			        "free page %u is out of range, listed twice or counted", page);
			ok = false;
		}
		if (ok)
			free_seen[page] = 1;
	}
	for (uint32_t k = 0; ok && k < n_seqs; k++) {
		const struct kvseq *s = seqs[k];

		for (uint32_t i = 0; ok && i < s->n_pages; i++) {
			uint32_t page = s->table[i];

			if (page >= p->n_pages || free_seen[page]) {
				ig_errf(eb, IG_E_INVAL,
				        "sequence %u's page %u (table entry %u) is out of range or free",
				        s->id, page, i);
				ok = false;
				break;
			}
			if (mark[page] == k + 1) {
				ig_errf(eb, IG_E_INVAL, "sequence %u lists page %u twice", s->id, page);
				ok = false;
				break;
			}
			mark[page] = k + 1;
			if (count[page]++ == 0)
				listed++;
		}
	}
	for (uint32_t page = 0; ok && page < p->n_pages; page++)
		if (!free_seen[page] && count[page] != p->refs[page]) {
			ig_errf(eb, IG_E_INVAL,
			        "page %u is counted %u times and listed by %u sequences' tables",
			        page, p->refs[page], count[page]);
			ok = false;
		}
	if (ok && listed + p->n_free != p->n_pages) {
		ig_errf(eb, IG_E_INVAL, "%u listed + %u free pages != %u in the pool", listed,
		        p->n_free, p->n_pages);
		ok = false;
	}
	free(count);
	free(mark);
	free(free_seen);
	return ok;
}
