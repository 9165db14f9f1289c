/*
 * lazy.c - a grammar behind a trigger string (grammar.h, gm_lazy).
 *
 * Before the trigger, the output is free: the trigger is watched for with
 * the Knuth-Morris-Pratt automaton (`seen` is the longest prefix of the
 * trigger that ends the output). The bytes after it go to the matcher. A
 * token that completes the trigger is allowed only when the matcher
 * accepts the rest of its bytes, so that the inactive mask is exact: it is
 * a walk of the trie with the automaton, which hands each subtree below a
 * completed trigger to the grammar's own walk. It depends on `seen` only,
 * so it is kept per value of `seen`.
 */
#include <stdlib.h>
#include <string.h>

#include "grammar_int.h"

#define GM_LAZY_MAGIC 0x314C4D47u /* "GML1" little-endian */

uint32_t gl__step(const struct gm_lazy *z, uint32_t k, uint8_t b)
{
	if (k == z->tlen)
		k = z->kmp[k - 1];
	while (k > 0 && z->trigger[k] != b)
		k = z->kmp[k - 1];
	return z->trigger[k] == b ? k + 1 : 0;
}

int gm_lazy_init(struct gm_lazy *z, struct grammar *g, const void *trigger, size_t tlen,
                 struct ig_errbuf *eb)
{
	memset(z, 0, sizeof(*z));
	if (!tlen || tlen > GM_MAX_TRIGGER)
		return ig_errf(eb, IG_E_INVAL, "grammar: a trigger of %zu bytes; 1 to %u", tlen,
		               GM_MAX_TRIGGER);
	memcpy(z->trigger, trigger, tlen);
	z->tlen = (uint32_t)tlen;
	/* kmp[i]: the longest proper border of trigger[0..i] */
	for (uint32_t i = 1, k = 0; i < z->tlen; i++) {
		while (k > 0 && z->trigger[i] != z->trigger[k])
			k = z->kmp[k - 1];
		if (z->trigger[i] == z->trigger[k])
			k++;
		z->kmp[i] = k;
	}
	return gm_init(&z->m, g, eb);
}

void gm_lazy_release(struct gm_lazy *z)
{
	gm_release(&z->m);
}

int gm_lazy_copy(struct gm_lazy *dst, const struct gm_lazy *src, struct ig_errbuf *eb)
{
	struct gmatch m = dst->m;
	int rc;

	if ((rc = gm_copy(&m, &src->m, eb)))
		return rc;
	memcpy(dst, src, sizeof(*dst));
	dst->m = m;
	return 0;
}

bool gm_lazy_accept_bytes(struct gm_lazy *z, const void *bytes, size_t n)
{
	const uint8_t *b = bytes;
	uint32_t k = z->seen;

	if (z->active)
		return gm_accept_bytes(&z->m, b, n);
	for (size_t i = 0; i < n; i++) {
		k = gl__step(z, k, b[i]);
		if (k == z->tlen) {
			/* the rest goes to the grammar, all or nothing */
			if (!gm_accept_bytes(&z->m, b + i + 1, n - i - 1))
				return false;
			z->seen = k;
			z->active = true;
			return true;
		}
	}
	z->seen = k;
	return true;
}

bool gm_lazy_can_end(const struct gm_lazy *z)
{
	return !z->active || gm_can_end(&z->m);
}

bool gm_lazy_active(const struct gm_lazy *z)
{
	return z->active;
}

/* The inactive mask from `seen`: every token, but those that complete the
 * trigger with bytes after it the grammar refuses. The vocabulary keeps
 * all of it but the grammar's part (vclass.c, gvc__trigger): the subtrees
 * below the nodes that complete the trigger, walked here from the
 * grammar's start state. */
static int gl__inactive(struct gm_lazy *z, const struct gvocab *gv, uint32_t *bits,
                        struct ig_errbuf *eb)
{
	struct grammar *g = z->m.g;
	const struct gvc_trig *t = gvc__trigger(gv, z);
	struct gvc_trig *own = t ? NULL : gvc__trig_build(gv, z);
	struct gmatch start;
	int32_t sid = -1;
	int rc;

	if (!t && !(t = own))
		return ig_errf(eb, IG_E_NOMEM, "grammar: no memory for the lazy mask");
	if ((rc = gm_init(&start, g, eb)))
		goto out;
	gm__cache_trim(g, false);
	if ((rc = gm__intern_matcher(&start, &sid, eb)))
		goto out_start;
	memcpy(bits, t->mask, gv_mask_words(gv) * 4);
	for (uint32_t i = 0; i < t->n_comp && !rc; i++) {
		const struct gv_node *x = &gv->nodes[t->comp[i]];

		rc = gm__walk(g, gv, sid, t->comp[i] + 1, x->skip, x->depth, bits, eb);
	}
out_start:
	gm_release(&start);
out:
	gvc__trig_free(own);
	return rc;
}

void gl__shared_release(struct grammar *g)
{
	for (uint32_t i = 0; i < g->n_lazy; i++) {
		for (uint32_t k = 0; k < g->lazy[i].tlen; k++)
			free(g->lazy[i].masks[k]);
		free(g->lazy[i].masks);
	}
	free(g->lazy);
	g->lazy = NULL;
	g->n_lazy = 0;
}

/* The grammar's masks of z's trigger over vocabulary `vocab`, made empty
 * on first use: shared by every matcher with that trigger. */
static struct gl_shared *gl__shared(struct gm_lazy *z, uint64_t vocab)
{
	struct grammar *g = z->m.g;
	struct gl_shared *n;

	for (uint32_t i = 0; i < g->n_lazy; i++)
		if (g->lazy[i].vocab == vocab && g->lazy[i].tlen == z->tlen &&
		    !memcmp(g->lazy[i].trigger, z->trigger, z->tlen))
			return &g->lazy[i];
	n = realloc(g->lazy, (g->n_lazy + 1) * sizeof(*n));
	if (!n)
		return NULL;
	g->lazy = n;
	n = &g->lazy[g->n_lazy];
	memset(n, 0, sizeof(*n));
	n->masks = calloc(z->tlen, sizeof(*n->masks));
	if (!n->masks)
		return NULL;
	memcpy(n->trigger, z->trigger, z->tlen);
	n->tlen = z->tlen;
	n->vocab = vocab;
	g->n_lazy++;
	return n;
}

int gm_lazy_mask(struct gm_lazy *z, const struct gvocab *gv, uint32_t *bits, struct ig_errbuf *eb)
{
	size_t nwords = gv_mask_words(gv);
	struct gl_shared *sh;
	int rc;

	if (z->active)
		return gm_mask(&z->m, gv, bits, eb);
	if (!(sh = gl__shared(z, gv->id)))
		return ig_errf(eb, IG_E_NOMEM, "grammar: no memory for the lazy masks");
	if (sh->masks[z->seen]) {
		memcpy(bits, sh->masks[z->seen], nwords * 4);
		return 0;
	}
	rc = gl__inactive(z, gv, bits, eb);
	if (rc == IG_E_NOSPACE) {
		gm__cache_trim(z->m.g, true);
		rc = gl__inactive(z, gv, bits, eb);
	}
	if (rc)
		return rc;
	sh->masks[z->seen] = malloc(nwords * 4);
	if (sh->masks[z->seen])
		memcpy(sh->masks[z->seen], bits, nwords * 4);
	return 0;
}

/* ---- serialised state ------------------------------------------------------------------ */

size_t gm_lazy_state_size(const struct gm_lazy *z)
{
	return 12 + gm_state_size(&z->m);
}

int gm_lazy_state_save(const struct gm_lazy *z, void *buf, size_t cap, size_t *len,
                       struct ig_errbuf *eb)
{
	uint8_t *p = buf;
	uint32_t h[3] = {GM_LAZY_MAGIC, z->active, z->seen};
	size_t n;
	int rc;

	if (cap < gm_lazy_state_size(z))
		return ig_errf(eb, IG_E_INVAL,
		               "grammar: state needs %zu bytes, the buffer holds %zu",
		               gm_lazy_state_size(z), cap);
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 4; k++)
			p[4 * i + k] = (uint8_t)(h[i] >> (8 * k));
	if ((rc = gm_state_save(&z->m, p + 12, cap - 12, &n, eb)))
		return rc;
	*len = 12 + n;
	return 0;
}

int gm_lazy_state_load(struct gm_lazy *z, const void *buf, size_t len, struct ig_errbuf *eb)
{
	const uint8_t *p = buf;
	uint32_t h[3] = {0, 0, 0};
	int rc;

	if (len < 12)
		return ig_errf(eb, IG_E_INVAL, "grammar: not a lazy matcher state (%zu bytes)",
		               len);
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 4; k++)
			h[i] |= (uint32_t)p[4 * i + k] << (8 * k);
	if (h[0] != GM_LAZY_MAGIC || h[1] > 1 || h[2] > z->tlen || (h[1] != (h[2] == z->tlen)))
		return ig_errf(eb, IG_E_INVAL, "grammar: not a lazy matcher state of this trigger");
	if ((rc = gm_state_load(&z->m, p + 12, len - 12, eb)))
		return rc;
	z->active = h[1];
	z->seen = h[2];
	return 0;
}
