/*
 * classmask.c - a state's mask from its class (docs/adr/0061): most
 * tokens decided by the vocabulary's token set of the state's character
 * class, the rest by the grammar's walk from the boundaries.
 *
 * A state inside a JSON string allows nearly every token, and the plain
 * walk visits most of the trie's 333,053 nodes to say so. Yet what it
 * reads there is one character after another of one class, and which
 * tokens are made of such characters is a fact about the vocabulary, not
 * the grammar. So:
 *
 *   1. The state's level (gci__level): from the state, the automaton Q of
 *      one character (its phases are cache states; a byte that leaves the
 *      class, or completes a character anywhere but at the class's usual
 *      next state, is GQ_OUT), and the state after one character.
 *   2. The state's levels for GQ_MAX_COUNT + 1 characters (a loop such as
 *      `char*` is its own next state: one level), each with the same Q.
 *      Each level was derived from every one of its states' 256
 *      transitions, so by induction a token Q reads whole leaves the
 *      matcher in the state of its phase and count: live, so allowed.
 *   3. The vocabulary's set for Q (vclass.c) gives those tokens; each
 *      boundary (a node Q does not read) is walked from the state of its
 *      phase and count, which is the state the plain walk has there.
 *
 * A count that runs out within GQ_MAX_COUNT characters (a bounded
 * string's last ones) is exact too when the state after the last one
 * refuses every byte that starts a character of the class (a string's
 * closing quote): the tokens are then those of at most that many
 * characters (the set's per-token counts), and the boundaries past it
 * are walked from that state.
 *
 * The result is the plain walk's mask, bit for bit; test_grammar_ci
 * compares them. A state with no class, a narrow one (digits), or one
 * whose count runs out into a state that reads the class on takes the
 * plain walk.
 *
 * Levels live in the grammar's cache (gci_cache) and are flushed with it:
 * they name cache states.
 */
#include <stdlib.h>
#include <string.h>

#include "grammar_int.h"

/* A level being derived. */
struct gci__tmp {
	int32_t st[GQ_MAX_PHASES];
	uint8_t rem[GQ_MAX_PHASES]; /* continuation bytes still owed */
	uint8_t tbl[GQ_MAX_PHASES * 256];
	uint32_t n;
};

void gci__flush(struct gci_cache *c)
{
	c->n_lv = 0;
	c->n_st = 0;
	c->n_qa = 0;
	c->n_tbl = 0;
}

void gci__release(struct gci_cache *c)
{
	free(c->lv);
	free(c->st);
	free(c->qa);
	free(c->tbl);
	memset(c, 0, sizeof(*c));
}

/* Byte b as UTF-8 after `rem` continuation bytes still owed: the bytes
 * owed after it (0: a character is complete), or -1 when it cannot come
 * there (a stray continuation, a lead byte inside a character, C0, C1,
 * F5-FF). */
static int gci__utf8(unsigned rem, unsigned b)
{
	if (rem)
		return b >= 0x80 && b <= 0xBF ? (int)rem - 1 : -1;
	if (b < 0x80)
		return 0;
	if (b >= 0xC2 && b <= 0xDF)
		return 1;
	if (b >= 0xE0 && b <= 0xEF)
		return 2;
	if (b >= 0xF0 && b <= 0xF4)
		return 3;
	return -1;
}

/* The state most ASCII bytes lead to from transitions tr (the class's
 * next state), with how many lead there; GMC_DEAD when none is live. */
static int32_t gci__next_state(const int32_t *tr, uint32_t *n_ascii)
{
	int32_t best = GMC_DEAD;
	uint32_t best_n = 0;

	for (unsigned b = 0; b < 0x80; b++) {
		uint32_t n = 0;

		if (tr[b] == GMC_DEAD || tr[b] == best)
			continue;
		for (unsigned x = b; x < 0x80; x++)
			n += tr[x] == tr[b];
		if (n > best_n)
			best = tr[b], best_n = n;
	}
	*n_ascii = best_n;
	return best;
}

/* The phase of cache state t owing r bytes, added when new; -1 when the
 * automaton would pass GQ_MAX_PHASES. */
static int gci__phase(struct gci__tmp *q, int32_t t, int r)
{
	for (uint32_t j = 0; j < q->n; j++)
		if (q->st[j] == t && q->rem[j] == r)
			return (int)j;
	if (q->n == GQ_MAX_PHASES)
		return -1;
	q->st[q->n] = t;
	q->rem[q->n] = (uint8_t)r;
	return (int)q->n++;
}

/* Fill phase p's row of the automaton; -1 when it has too many phases. */
static int gci__row(struct gci__tmp *q, uint32_t p, const int32_t *tr, int32_t next)
{
	uint8_t *row = q->tbl + (size_t)p * 256;

	for (unsigned b = 0; b < 256; b++) {
		int r = gci__utf8(q->rem[p], b), j;

		if (r < 0 || tr[b] == GMC_DEAD)
			row[b] = GQ_OUT;
		else if (!r)
			row[b] = tr[b] == next ? GQ_COUNT : GQ_OUT;
		else if ((j = gci__phase(q, tr[b], r)) < 0)
			return -1;
		else
			row[b] = (uint8_t)j;
	}
	return 0;
}

/* Derive the level of state s into q: *next the state after a character,
 * GMC_DEAD when s has no class worth one. */
static int gci__derive(struct grammar *g, int32_t s, struct gci__tmp *q, int32_t *next)
{
	uint32_t n_ascii;
	int rc;

	*next = GMC_DEAD;
	if ((rc = gmc__fill(g, s)))
		return rc;
	*next = gci__next_state(g->cache.trans + (size_t)s * 256, &n_ascii);
	if (*next == GMC_DEAD || n_ascii < GQ_MIN_ASCII) {
		*next = GMC_DEAD;
		return 0;
	}
	q->n = 1;
	q->st[0] = s;
	q->rem[0] = 0;
	for (uint32_t p = 0; p < q->n; p++) {
		if ((rc = gmc__fill(g, q->st[p])))
			return rc;
		/* (filled first: the table may move while transitions are made) */
		if (gci__row(q, p, g->cache.trans + (size_t)q->st[p] * 256, *next)) {
			*next = GMC_DEAD;
			return 0;
		}
	}
	return 0;
}

static int gci__grow(void *pp, size_t n, size_t *cap, size_t size, size_t more)
{
	void **p = pp;
	size_t nc = *cap ? *cap : 64;
	void *t;

	if (n + more <= *cap)
		return 0;
	while (nc < n + more)
		nc *= 2;
	if (!(t = realloc(*p, nc * size)))
		return IG_E_NOMEM;
	*p = t;
	*cap = nc;
	return 0;
}

/* The index of q's automaton in the cache, interned when new. */
static int gci__auto(struct gm_cache *gc, const struct gci__tmp *q, uint32_t *out)
{
	struct gci_cache *c = &gc->ci;
	size_t len = (size_t)q->n * 256, cap;
	uint64_t h = gvc__hash(q->tbl, q->n);

	for (uint32_t i = 0; i < c->n_qa; i++)
		if (c->qa[i].hash == h && c->qa[i].n_ph == q->n &&
		    !memcmp(c->tbl + c->qa[i].off, q->tbl, len)) {
			*out = i;
			return 0;
		}
	cap = c->cap_qa;
	if (gci__grow(&c->qa, c->n_qa, &cap, sizeof(*c->qa), 1) ||
	    gci__grow(&c->tbl, c->n_tbl, &c->cap_tbl, 1, len))
		return IG_E_NOMEM;
	c->cap_qa = (uint32_t)cap;
	c->qa[c->n_qa] = (struct gci_auto){h, q->n, (uint32_t)c->n_tbl};
	memcpy(c->tbl + c->n_tbl, q->tbl, len);
	c->n_tbl += len;
	gc->bytes += sizeof(*c->qa) + len;
	*out = c->n_qa++;
	return 0;
}

/* Keep level q (automaton index a, next state) for state s. */
static int gci__keep(struct gm_cache *gc, int32_t s, const struct gci__tmp *q, uint32_t a,
                     int32_t next)
{
	struct gci_cache *c = &gc->ci;
	size_t cap = c->cap_lv;

	if (gci__grow(&c->lv, c->n_lv, &cap, sizeof(*c->lv), 1) ||
	    gci__grow(&c->st, c->n_st, &c->cap_st, sizeof(*c->st), q->n))
		return IG_E_NOMEM;
	c->cap_lv = (uint32_t)cap;
	c->lv[c->n_lv] = (struct gci_level){a, (uint32_t)c->n_st, next};
	memcpy(c->st + c->n_st, q->st, q->n * sizeof(*q->st));
	c->n_st += q->n;
	gc->bytes += sizeof(*c->lv) + q->n * sizeof(*q->st);
	gc->st[s].lvl = (int32_t)c->n_lv++;
	return 0;
}

/* *lv := the level of state s (GCI_NONE when it has none), derived once. */
static int gci__level(struct grammar *g, int32_t s, int32_t *lv)
{
	struct gci__tmp q;
	int32_t next;
	uint32_t a;
	int rc;

	if ((*lv = g->cache.st[s].lvl) != GCI_UNKNOWN)
		return 0;
	if ((rc = gci__derive(g, s, &q, &next)))
		return rc;
	if (next == GMC_DEAD) {
		g->cache.st[s].lvl = *lv = GCI_NONE;
		return 0;
	}
	if ((rc = gci__auto(&g->cache, &q, &a)) || (rc = gci__keep(&g->cache, s, &q, a, next)))
		return rc;
	*lv = g->cache.st[s].lvl;
	return 0;
}

/* lev[0 .. *k) := the levels of the characters read from sid with one
 * automaton: *k is GQ_MAX_COUNT + 1 when all are, 0 when sid has none;
 * fewer when the count runs out (a bounded string's end). */
static int gci__levels(struct grammar *g, int32_t sid, int32_t *lev, uint32_t *k)
{
	int32_t cur = sid;
	uint32_t c;
	int rc;

	for (c = 0; c <= GQ_MAX_COUNT; c++) {
		const struct gci_level *l;

		if ((rc = gci__level(g, cur, &lev[c])))
			return rc;
		if (lev[c] == GCI_NONE)
			break;
		l = &g->cache.ci.lv[lev[c]];
		if (c && l->q != g->cache.ci.lv[lev[0]].q)
			break;
		if (l->next == cur) {
			/* a loop: every later character reads the same */
			while (++c <= GQ_MAX_COUNT)
				lev[c] = lev[c - 1];
			break;
		}
		cur = l->next;
	}
	*k = c;
	return 0;
}

/*
 * The count runs out after k characters (0 < k <= GQ_MAX_COUNT), at state
 * *x. Exact when x refuses every byte the automaton reads at a character's
 * start: then a token that reads a (k + 1)th character, or begins one, is
 * refused there, and one that goes on with a byte outside the class does
 * so at a boundary of count k and phase 0, walked from x.
 */
static int gci__run_out(struct grammar *g, const struct gci_auto *a, const int32_t *lev, uint32_t k,
                        int32_t *x, bool *ok)
{
	const uint8_t *row = g->cache.ci.tbl + a->off;
	const int32_t *tr;
	int rc;

	*x = g->cache.ci.lv[lev[k - 1]].next;
	*ok = false;
	if ((rc = gmc__fill(g, *x)))
		return rc;
	tr = g->cache.trans + (size_t)*x * 256;
	for (unsigned b = 0; b < 256; b++)
		if (row[b] != GQ_OUT && tr[b] != GMC_DEAD)
			return 0;
	*ok = true;
	return 0;
}

/* bits := the tokens of the class read within k characters, ending at
 * the start of one when they read k (their codes at most 2k). */
static void gci__by_code(const struct gvocab *gv, const struct gvc_class *cl, uint32_t k,
                         uint32_t *bits)
{
	size_t nw = gv_mask_words(gv);

	for (size_t w = 0; w < nw; w++) {
		const uint8_t *c = cl->code + w * 32;
		uint32_t n = w + 1 < nw || !(gv->n_tokens & 31) ? 32 : gv->n_tokens & 31, m = 0;

		for (uint32_t j = 0; j < n; j++)
			m |= (uint32_t)(c[j] <= 2 * k) << j;
		bits[w] = m;
	}
}

/* The boundaries: each walked from the state of its phase and count, or
 * from x (count k, phase 0) when the count runs out at k; the others lie
 * under bytes x refuses. */
static int gci__bounds(struct grammar *g, const struct gvocab *gv, const struct gvc_class *cl,
                       const int32_t *lev, uint32_t k, int32_t x, uint32_t *bits,
                       struct ig_errbuf *eb)
{
	for (uint32_t i = 0; i < cl->n_bd; i++) {
		const struct gvc_bound *b = &cl->bd[i];
		const struct gv_node *nd = &gv->nodes[b->node];
		int32_t s;
		int rc;

		if (b->cnt < k)
			s = g->cache.ci.st[g->cache.ci.lv[lev[b->cnt]].off + b->ph];
		else if (b->cnt == k && !b->ph)
			s = x;
		else
			continue;
		if (g->cache.trans[(size_t)s * 256 + nd->byte] == GMC_DEAD)
			continue; /* (the walk's first step, taken here) */
		if ((rc = gm__walk(g, gv, s, b->node, nd->skip, nd->depth - 1u, bits, eb)))
			return rc;
	}
	return 0;
}

int gci__mask(struct grammar *g, const struct gvocab *gv, int32_t sid, uint32_t *bits, bool *done,
              struct ig_errbuf *eb)
{
	int32_t lev[GQ_MAX_COUNT + 1], x = GMC_DEAD;
	const struct gvc_class *cl;
	const struct gci_auto *a;
	uint32_t k;
	bool ok = true;
	int rc;

	*done = false;
	if ((rc = gci__levels(g, sid, lev, &k)))
		goto fail;
	if (!k)
		return 0;
	a = &g->cache.ci.qa[g->cache.ci.lv[lev[0]].q];
	if (k <= GQ_MAX_COUNT && (rc = gci__run_out(g, a, lev, k, &x, &ok)))
		goto fail;
	if (!ok)
		return 0;
	/* (a is read again: gci__run_out may have moved the cache's arrays) */
	a = &g->cache.ci.qa[g->cache.ci.lv[lev[0]].q];
	cl = gvc__get(gv, g->cache.ci.tbl + a->off, a->n_ph, a->hash);
	if (!cl || cl->useless)
		return 0;
	if (k > GQ_MAX_COUNT)
		memcpy(bits, cl->mask, gv_mask_words(gv) * 4);
	else
		gci__by_code(gv, cl, k, bits);
	if ((rc = gci__bounds(g, gv, cl, lev, k, x, bits, eb)))
		return rc;
	*done = true;
	return 0;
fail:
	return ig_errf(eb, rc, "grammar: the mask's class: %s", ig_err_str(rc));
}
