/*
 * matcher.c - the recognizer (a set of pushdown stacks over bytes), the
 * grammar's state cache, the vocabulary trie and the token mask.
 *
 * Why stacks rather than Earley items: the grammars we make (JSON
 * schemas, tool calls) are nearly deterministic, so the set holds a few
 * stacks; the state is then a short list of positions that copies and
 * serialises as plain words, and two states compare by memcmp, which is
 * what the cache's interning needs. Earley's chart grows with the input
 * and handles left recursion we can refuse at compile instead.
 *
 * Stacks (grammar_int.h): a reference at position p is expanded when it
 * reaches the top: the frame becomes p + 1 (or is dropped when p + 1 ends
 * the alternative: a tail call, so X* as R ::= X R | empty keeps a
 * constant depth) and one stack per alternative of the rule is forked
 * with that alternative's first position above it. "Settling" repeats
 * this until every top is a byte set or the stack is empty. A set is kept
 * canonical: stacks sorted by (length, words), no duplicates.
 *
 * The cache (struct gm_cache): canonical sets interned into ids; each id
 * gets its 256 transitions as walks ask for them. The mask walk is then a
 * linear pass over the trie's preorder array with one table look-up per
 * node, skipping a subtree at its first refused byte. It holds at most
 * GMC_HARD_BYTES; gm_mask flushes it between walks past GMC_SOFT_BYTES.
 */
#include <stdlib.h>
#include <string.h>

#include "grammar_int.h"

/* The cache's limits: past the soft one it is flushed before the next
 * mask; a walk that takes it past the hard one fails, is retried once on a
 * flushed cache, then refused (IG_E_NOSPACE). 64 MiB holds some 50,000
 * states with their transition tables, or a thousand masks of Qwen3's
 * 151,936 tokens (18.5 KiB each); no JSON grammar we measured used 2 MiB. */
#define GMC_SOFT_BYTES (64ull << 20)
#define GMC_HARD_BYTES (256ull << 20)
/* Whole masks kept per grammar (each n_tokens / 8 bytes). */
#define GMC_MAX_MASKS 1024u

/* ---- stack sets ------------------------------------------------------------------------ */

struct gm__set {
	uint32_t *w;
	uint32_t nw, cap, nstk;
};

/* Scratch for one settle: regions of GM_MAX_DEPTH + 1 words, one per
 * nested fork, and an index of the set's stacks by hash to drop
 * duplicates as they are made. */
struct gm__work {
	uint32_t *reg;
	size_t reg_used, reg_cap;
	uint32_t *seen; /* offsets + 1 into the output set, 0 empty; 1024 slots */
	uint32_t *offs; /* per stack of the output, its offset (for sorting) */
	int err;
};

#define GM__SEEN_SLOTS 1024u /* > 2 x GM_MAX_STACKS: probes stay short */

static int gm__reserve(struct gm__set *s, uint32_t more)
{
	uint32_t need = s->nw + more, nc;
	uint32_t *w;

	if (need <= s->cap)
		return 0;
	nc = s->cap ? s->cap : 64;
	while (nc < need)
		nc *= 2;
	w = realloc(s->w, nc * sizeof(*w));
	if (!w)
		return IG_E_NOMEM;
	s->w = w;
	s->cap = nc;
	return 0;
}

static uint32_t gm__hash_words(const uint32_t *w, uint32_t n)
{
	uint64_t h = 0x9E3779B97F4A7C15ull ^ n;

	for (uint32_t i = 0; i < n; i++)
		h = (h ^ w[i]) * 0xff51afd7ed558ccdull, h ^= h >> 29;
	return (uint32_t)(h ^ (h >> 32));
}

/* Add stack[0..len) to `out` unless it is there already. */
static void gm__emit(struct gm__work *wk, struct gm__set *out, const uint32_t *stk, uint32_t len)
{
	uint32_t h = gm__hash_words(stk, len), i;

	if (wk->err)
		return;
	for (i = h & (GM__SEEN_SLOTS - 1); wk->seen[i]; i = (i + 1) & (GM__SEEN_SLOTS - 1)) {
		const uint32_t *o = out->w + wk->seen[i] - 1;

		if (o[0] == len && !memcmp(o + 1, stk, len * sizeof(*stk)))
			return;
	}
	if (out->nstk >= GM_MAX_STACKS || out->nw + len + 1 > GM_MAX_WORDS) {
		wk->err = IG_E_NOSPACE;
		return;
	}
	if (gm__reserve(out, len + 1)) {
		wk->err = IG_E_NOMEM;
		return;
	}
	wk->offs[out->nstk++] = out->nw;
	wk->seen[i] = out->nw + 1;
	out->w[out->nw++] = len;
	memcpy(out->w + out->nw, stk, len * sizeof(*stk));
	out->nw += len;
}

/* A region of the scratch for a stack being settled: its offset. */
static int gm__region(struct gm__work *wk, size_t *off)
{
	size_t need = wk->reg_used + GM_MAX_DEPTH + 2;

	if (need > wk->reg_cap) {
		size_t nc = wk->reg_cap ? wk->reg_cap * 2 : 8 * (GM_MAX_DEPTH + 2);
		uint32_t *r;

		while (nc < need)
			nc *= 2;
		/* forks nest as deep as references chain without a byte: a few
		 * dozen in practice; 4,096 regions (16 MiB) is a runaway */
		if (nc > 4096u * (GM_MAX_DEPTH + 2))
			return IG_E_NOSPACE;
		r = realloc(wk->reg, nc * sizeof(*r));
		if (!r)
			return IG_E_NOMEM;
		wk->reg = r;
		wk->reg_cap = nc;
	}
	*off = wk->reg_used;
	wk->reg_used = need;
	return 0;
}

/* Settle the stack in region `off` (len frames) into `out`. */
static void gm__settle(const struct grammar *g, struct gm__work *wk, struct gm__set *out,
                       size_t off, uint32_t len)
{
	for (;;) {
		uint32_t *stk = wk->reg + off, p, r, a0, a1;

		if (wk->err)
			return;
		if (!len) {
			gm__emit(wk, out, stk, 0);
			return;
		}
		p = stk[len - 1];
		switch (g->el[p].kind) {
		case GE_BYTES:
			gm__emit(wk, out, stk, len);
			return;
		case GE_END:
			len--;
			continue;
		default:
			break;
		}
		r = g->el[p].arg;
		if (g->el[p + 1].kind == GE_END)
			len--; /* a tail call: nothing to come back to */
		else
			stk[len - 1] = p + 1;
		if (len + 1 > GM_MAX_DEPTH) {
			wk->err = IG_E_NOSPACE;
			return;
		}
		a0 = g->rule_alt[r];
		a1 = g->rule_alt[r + 1];
		for (uint32_t a = a0; a + 1 < a1; a++) {
			size_t o2;

			if ((wk->err = gm__region(wk, &o2)))
				return;
			stk = wk->reg + off; /* the scratch may have moved */
			memcpy(wk->reg + o2, stk, len * sizeof(*stk));
			wk->reg[o2 + len] = g->alt_pos[a];
			gm__settle(g, wk, out, o2, len + 1);
			wk->reg_used = o2;
		}
		wk->reg[off + len] = g->alt_pos[a1 - 1];
		len++;
	}
}

static int gm__work_init(struct gm__work *wk)
{
	memset(wk, 0, sizeof(*wk));
	wk->seen = calloc(GM__SEEN_SLOTS, sizeof(*wk->seen));
	wk->offs = malloc(GM_MAX_STACKS * sizeof(*wk->offs));
	return wk->seen && wk->offs ? 0 : IG_E_NOMEM;
}

static void gm__work_release(struct gm__work *wk)
{
	free(wk->reg);
	free(wk->seen);
	free(wk->offs);
	memset(wk, 0, sizeof(*wk));
}

static int gm__cmp_stack(const uint32_t *a, const uint32_t *b)
{
	if (a[0] != b[0])
		return a[0] < b[0] ? -1 : 1;
	for (uint32_t i = 1; i <= a[0]; i++)
		if (a[i] != b[i])
			return a[i] < b[i] ? -1 : 1;
	return 0;
}

/* Put out's stacks in canonical order (into `tmp`, then swapped back). */
static int gm__canon(struct gm__work *wk, struct gm__set *out, struct gm__set *tmp)
{
	uint32_t n = out->nstk;

	/* insertion sort: sets hold a handful of stacks */
	for (uint32_t i = 1; i < n; i++) {
		uint32_t o = wk->offs[i], j = i;

		while (j > 0 && gm__cmp_stack(out->w + wk->offs[j - 1], out->w + o) > 0) {
			wk->offs[j] = wk->offs[j - 1];
			j--;
		}
		wk->offs[j] = o;
	}
	tmp->nw = 0;
	tmp->nstk = n;
	if (gm__reserve(tmp, out->nw))
		return IG_E_NOMEM;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t len = out->w[wk->offs[i]] + 1;

		memcpy(tmp->w + tmp->nw, out->w + wk->offs[i], len * sizeof(uint32_t));
		tmp->nw += len;
	}
	{
		struct gm__set t = *out;

		*out = *tmp;
		*tmp = t;
	}
	return 0;
}

static void gm__begin(struct gm__work *wk, struct gm__set *out)
{
	memset(wk->seen, 0, GM__SEEN_SLOTS * sizeof(*wk->seen));
	wk->err = 0;
	wk->reg_used = 0;
	out->nw = out->nstk = 0;
}

/* out := the canonical set after byte b from set `in` (words iw, iw_n
 * stacks); an empty out when b is refused. */
static int gm__advance(const struct grammar *g, struct gm__work *wk, const uint32_t *iw,
                       uint32_t in_nstk, unsigned b, struct gm__set *out, struct gm__set *tmp)
{
	const uint32_t *s = iw;

	gm__begin(wk, out);
	for (uint32_t k = 0; k < in_nstk; k++, s += s[0] + 1) {
		uint32_t len = s[0], top;
		size_t off;

		if (!len)
			continue;
		top = s[len];
		if (!gr__in_set(g->sets[g->el[top].arg], b))
			continue;
		if ((wk->err = gm__region(wk, &off)))
			break;
		memcpy(wk->reg + off, s + 1, len * sizeof(*s));
		wk->reg[off + len - 1] = top + 1;
		gm__settle(g, wk, out, off, len);
		wk->reg_used = off;
		if (wk->err)
			break;
	}
	if (wk->err)
		return wk->err;
	return gm__canon(wk, out, tmp);
}

static bool gm__has_empty(const uint32_t *w, uint32_t nstk)
{
	/* canonical order puts the empty stack first */
	return nstk > 0 && w[0] == 0;
}

/* ---- the grammar's scratch and cache ------------------------------------------------ */

/* The scratch sets live beside the cache (one thread per grammar). */
struct gm__scratch {
	struct gm__work wk;
	struct gm__set a, b;
	int32_t *walk; /* per trie depth, the state */
	uint32_t walk_cap;
};

static struct gm__scratch *gm__scr(struct grammar *g);

static void gm__scratch_free(struct gm__scratch *s)
{
	if (!s)
		return;
	gm__work_release(&s->wk);
	free(s->a.w);
	free(s->b.w);
	free(s->walk);
	free(s);
}

static void gmc_flush(struct gm_cache *c)
{
	for (uint32_t i = 0; i < c->n_masks; i++)
		free(c->masks[i]);
	c->n_st = 0;
	c->n_words = 0;
	c->n_masks = 0;
	c->masks_vocab = 0;
	if (c->hash)
		memset(c->hash, 0xff, c->hcap * sizeof(*c->hash));
	gci__flush(&c->ci);
	c->bytes = 0;
	c->flushes++;
}

void gmc_release(struct gm_cache *c)
{
	gmc_flush(c);
	free(c->st);
	free(c->trans);
	free(c->words);
	free(c->hash);
	free(c->masks);
	gm__scratch_free(c->scr);
	gci__release(&c->ci);
	memset(c, 0, sizeof(*c));
}

void gm__cache_trim(struct grammar *g, bool force)
{
	if (force || g->cache.bytes > GMC_SOFT_BYTES)
		gmc_flush(&g->cache);
}

static int gmc_rehash(struct gm_cache *c)
{
	uint32_t nc = c->hcap ? c->hcap * 2 : 1024;
	int32_t *t = malloc(nc * sizeof(*t));

	if (!t)
		return IG_E_NOMEM;
	memset(t, 0xff, nc * sizeof(*t));
	for (uint32_t s = 0; s < c->n_st; s++) {
		uint32_t i = gm__hash_words(c->words + c->st[s].off, c->st[s].nw) & (nc - 1);

		while (t[i] >= 0)
			i = (i + 1) & (nc - 1);
		t[i] = (int32_t)s;
	}
	free(c->hash);
	c->hash = t;
	c->hcap = nc;
	return 0;
}

/* The id of the set w[0..nw) (nstk stacks), interned when new. */
static int gmc_intern(struct gm_cache *c, const uint32_t *w, uint32_t nw, uint32_t nstk,
                      int32_t *sid)
{
	uint32_t h = gm__hash_words(w, nw), i;
	struct gmc_state *s;

	if ((c->n_st + 1) * 2 > c->hcap && gmc_rehash(c))
		return IG_E_NOMEM;
	for (i = h & (c->hcap - 1); c->hash[i] >= 0; i = (i + 1) & (c->hcap - 1)) {
		const struct gmc_state *o = &c->st[c->hash[i]];

		if (o->nw == nw && !memcmp(c->words + o->off, w, nw * sizeof(*w))) {
			*sid = c->hash[i];
			return 0;
		}
	}
	if (c->n_st == c->cap_st) {
		uint32_t nc = c->cap_st ? c->cap_st * 2 : 256;
		struct gmc_state *t = realloc(c->st, nc * sizeof(*t));

		if (!t)
			return IG_E_NOMEM;
		int32_t *tr;

		c->st = t;
		tr = realloc(c->trans, (size_t)nc * 256 * sizeof(*tr));
		if (!tr)
			return IG_E_NOMEM;
		c->trans = tr;
		c->cap_st = nc;
	}
	if (c->n_words + nw > c->cap_words) {
		size_t nc = c->cap_words ? c->cap_words * 2 : 4096;
		uint32_t *t;

		while (nc < c->n_words + nw)
			nc *= 2;
		t = realloc(c->words, nc * sizeof(*t));
		if (!t)
			return IG_E_NOMEM;
		c->words = t;
		c->cap_words = nc;
	}
	memcpy(c->words + c->n_words, w, nw * sizeof(*w));
	s = &c->st[c->n_st];
	s->off = (uint32_t)c->n_words;
	s->nw = nw;
	s->nstk = nstk;
	s->can_end = gm__has_empty(w, nstk);
	s->mask = -1;
	s->lvl = GCI_UNKNOWN;
	for (int k = 0; k < 256; k++)
		c->trans[(size_t)c->n_st * 256 + k] = GMC_UNKNOWN;
	c->n_words += nw;
	c->hash[i] = (int32_t)c->n_st;
	*sid = (int32_t)c->n_st++;
	c->bytes += sizeof(*s) + nw * sizeof(*w) + 2 * sizeof(int32_t) + 256 * sizeof(int32_t);
	return 0;
}

/* cls := the bytes that every stack top of the set w (nstk stacks) takes
 * or refuses as it does b: advancing by any of them gives the same set. */
static void gm__byte_class(const struct grammar *g, const uint32_t *w, uint32_t nstk, unsigned b,
                           uint64_t cls[4])
{
	cls[0] = cls[1] = cls[2] = cls[3] = ~0ull;
	for (uint32_t k = 0; k < nstk; k++, w += w[0] + 1) {
		const uint64_t *set;
		uint64_t flip;

		if (!w[0])
			continue;
		set = g->sets[g->el[w[w[0]]].arg];
		flip = gr__in_set(set, b) ? 0 : ~0ull;
		for (int i = 0; i < 4; i++)
			cls[i] &= set[i] ^ flip;
	}
}

/* The state after byte b from state sid: computed, interned and
 * remembered in sid's table when not known yet, for every byte of b's
 * class at sid (one advance answers them all). */
static int gmc_next_slow(struct grammar *g, int32_t sid, unsigned b, int32_t *out)
{
	struct gm_cache *c = &g->cache;
	struct gm__scratch *scr = gm__scr(g);
	struct gmc_state *s;
	uint64_t cls[4];
	int32_t t = GMC_DEAD, *tr;
	int rc;

	if (!scr)
		return IG_E_NOMEM;
	s = &c->st[sid];
	gm__byte_class(g, c->words + s->off, s->nstk, b, cls);
	if ((rc = gm__advance(g, &scr->wk, c->words + s->off, s->nstk, b, &scr->a, &scr->b)))
		return rc;
	if (scr->a.nstk && (rc = gmc_intern(c, scr->a.w, scr->a.nw, scr->a.nstk, &t)))
		return rc;
	tr = c->trans + (size_t)sid * 256;
	for (unsigned x = 0; x < 256; x++)
		if (gr__in_set(cls, x))
			tr[x] = t;
	*out = t;
	return 0;
}

int gmc__fill(struct grammar *g, int32_t sid)
{
	for (unsigned b = 0; b < 256; b++) {
		int32_t t;
		int rc;

		if (g->cache.trans[(size_t)sid * 256 + b] == GMC_UNKNOWN &&
		    (rc = gmc_next_slow(g, sid, b, &t)))
			return rc;
	}
	return 0;
}

/* ---- the start state, the matcher ------------------------------------------------------ */

static int gm__set_from(struct gm__set *dst, const uint32_t *w, uint32_t nw, uint32_t nstk)
{
	dst->nw = 0;
	if (gm__reserve(dst, nw))
		return IG_E_NOMEM;
	memcpy(dst->w, w, nw * sizeof(*w));
	dst->nw = nw;
	dst->nstk = nstk;
	return 0;
}

int gm__start(struct grammar *g, struct ig_errbuf *eb)
{
	struct gm__scratch *scr = gm__scr(g);
	struct gm__work *wk;
	int rc = 0;

	if (!scr)
		return ig_errf(eb, IG_E_NOMEM, "grammar: no memory for the matcher's scratch");
	wk = &scr->wk;
	gm__begin(wk, &scr->a);
	for (uint32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1] && !wk->err; a++) {
		size_t off;

		if ((wk->err = gm__region(wk, &off)))
			break;
		wk->reg[off] = g->alt_pos[a];
		gm__settle(g, wk, &scr->a, off, 1);
		wk->reg_used = off;
	}
	if (wk->err || (rc = gm__canon(wk, &scr->a, &scr->b)))
		return ig_errf(
		    eb, wk->err ? wk->err : rc,
		    "grammar: the start state exceeds the matcher's bounds (%u stacks of "
		    "%u frames)",
		    GM_MAX_STACKS, GM_MAX_DEPTH);
	g->start_w = malloc((scr->a.nw ? scr->a.nw : 1) * sizeof(uint32_t));
	if (!g->start_w)
		return ig_errf(eb, IG_E_NOMEM, "grammar: no memory for the start state");
	memcpy(g->start_w, scr->a.w, scr->a.nw * sizeof(uint32_t));
	g->start_nw = scr->a.nw;
	g->start_nstk = scr->a.nstk;
	return 0;
}

int gm_init(struct gmatch *m, struct grammar *g, struct ig_errbuf *eb)
{
	struct gm__set s = {0};

	memset(m, 0, sizeof(*m));
	if (gm__set_from(&s, g->start_w, g->start_nw, g->start_nstk))
		return ig_errf(eb, IG_E_NOMEM, "grammar: no memory for a matcher");
	m->g = g;
	m->w = s.w;
	m->nw = s.nw;
	m->cap = s.cap;
	m->nstk = s.nstk;
	return 0;
}

void gm_release(struct gmatch *m)
{
	free(m->w);
	m->w = NULL;
	m->nw = m->cap = m->nstk = 0;
}

int gm_copy(struct gmatch *dst, const struct gmatch *src, struct ig_errbuf *eb)
{
	struct gm__set s = {dst->w, 0, dst->cap, 0};

	if (gm__set_from(&s, src->w, src->nw, src->nstk))
		return ig_errf(eb, IG_E_NOMEM, "grammar: no memory to copy a matcher");
	dst->g = src->g;
	dst->w = s.w;
	dst->cap = s.cap;
	dst->nw = s.nw;
	dst->nstk = s.nstk;
	dst->err = src->err;
	return 0;
}

bool gm_accept_bytes(struct gmatch *m, const void *bytes, size_t n)
{
	struct gm__scratch *scr = gm__scr(m->g);
	const uint8_t *b = bytes;
	struct gm__set cur;
	int rc;

	if (m->err)
		return false;
	if (!n)
		return true;
	if (!scr) {
		m->err = IG_E_NOMEM;
		return false;
	}
	/* advance from the matcher's words into a, then a <-> c (a copy of the
	 * latest), so that a refusal leaves the matcher untouched */
	cur = (struct gm__set){NULL, 0, 0, 0};
	for (size_t i = 0; i < n; i++) {
		const uint32_t *iw = i ? cur.w : m->w;
		uint32_t in = i ? cur.nstk : m->nstk;

		rc = gm__advance(m->g, &scr->wk, iw, in, b[i], &scr->a, &scr->b);
		if (rc) {
			/* a bound, not the grammar, refused: the matcher is broken */
			m->err = rc;
			free(cur.w);
			return false;
		}
		if (!scr->a.nstk) {
			free(cur.w);
			return false;
		}
		{
			struct gm__set t = cur;

			cur = scr->a;
			scr->a = t;
		}
	}
	free(m->w);
	m->w = cur.w;
	m->cap = cur.cap;
	m->nw = cur.nw;
	m->nstk = cur.nstk;
	return true;
}

bool gm_can_end(const struct gmatch *m)
{
	return !m->err && gm__has_empty(m->w, m->nstk);
}

int gm_error(const struct gmatch *m)
{
	return m->err;
}

/* ---- serialised state ------------------------------------------------------------------ */

#define GM_STATE_MAGIC 0x31534D47u /* "GMS1" little-endian */
#define GM_STATE_HEAD  5u          /* words before the stacks */

static void gm__put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16),
	p[3] = (uint8_t)(v >> 24);
}

static uint32_t gm__get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

size_t gm_state_size(const struct gmatch *m)
{
	return (GM_STATE_HEAD + (size_t)m->nw) * 4;
}

int gm_state_save(const struct gmatch *m, void *buf, size_t cap, size_t *len, struct ig_errbuf *eb)
{
	size_t need = gm_state_size(m);
	uint8_t *p = buf;

	if (m->err)
		return ig_errf(eb, m->err, "grammar: a broken matcher has no state to save");
	if (cap < need)
		return ig_errf(eb, IG_E_INVAL,
		               "grammar: state needs %zu bytes, the buffer holds %zu", need, cap);
	gm__put32(p, GM_STATE_MAGIC);
	gm__put32(p + 4, (uint32_t)m->g->fp);
	gm__put32(p + 8, (uint32_t)(m->g->fp >> 32));
	gm__put32(p + 12, m->nstk);
	gm__put32(p + 16, m->nw);
	for (uint32_t i = 0; i < m->nw; i++)
		gm__put32(p + 20 + 4 * (size_t)i, m->w[i]);
	*len = need;
	return 0;
}

int gm_state_load(struct gmatch *m, const void *buf, size_t len, struct ig_errbuf *eb)
{
	const uint8_t *p = buf;
	const struct grammar *g = m->g;
	uint32_t nstk, nw, *w, k = 0, i = 0;
	uint64_t fp;

	if (len < GM_STATE_HEAD * 4 || gm__get32(p) != GM_STATE_MAGIC)
		return ig_errf(eb, IG_E_INVAL, "grammar: not a matcher state (%zu bytes)", len);
	fp = gm__get32(p + 4) | (uint64_t)gm__get32(p + 8) << 32;
	if (fp != g->fp)
		return ig_errf(eb, IG_E_INVAL,
		               "grammar: the state was saved from another grammar (fingerprint "
		               "%016llx, this one %016llx)",
		               (unsigned long long)fp, (unsigned long long)g->fp);
	nstk = gm__get32(p + 12);
	nw = gm__get32(p + 16);
	if (nw > GM_MAX_WORDS || nstk > GM_MAX_STACKS || len != (GM_STATE_HEAD + (size_t)nw) * 4)
		return ig_errf(eb, IG_E_INVAL, "grammar: a matcher state of %zu bytes is not whole",
		               len);
	w = malloc((nw ? nw : 1) * sizeof(*w));
	if (!w)
		return ig_errf(eb, IG_E_NOMEM, "grammar: no memory to load a matcher state");
	for (uint32_t j = 0; j < nw; j++)
		w[j] = gm__get32(p + 20 + 4 * (size_t)j);
	/* every stack: frames within the grammar, none at an alternative's
	 * end, the top a byte set; the set in canonical order */
	for (; i < nw && k < nstk; k++) {
		uint32_t sl = w[i];

		if (sl > GM_MAX_DEPTH || sl > nw - i - 1)
			goto bad;
		for (uint32_t f = 1; f <= sl; f++)
			if (w[i + f] >= g->n_el || g->el[w[i + f]].kind == GE_END)
				goto bad;
		if (sl && g->el[w[i + sl]].kind != GE_BYTES)
			goto bad;
		i += sl + 1;
	}
	if (k != nstk || i != nw || !nstk)
		goto bad;
	/* order: each stack after the one before it */
	{
		const uint32_t *s = w, *prev = NULL;

		for (k = 0; k < nstk; k++, s += s[0] + 1) {
			if (prev && gm__cmp_stack(prev, s) >= 0)
				goto bad;
			prev = s;
		}
	}
	free(m->w);
	m->w = w;
	m->nw = m->cap = nw;
	m->nstk = nstk;
	m->err = 0;
	return 0;
bad:
	free(w);
	return ig_errf(eb, IG_E_INVAL,
	               "grammar: the matcher state does not fit this grammar (stack %u)", k);
}

/* ---- the vocabulary trie -------------------------------------------------------------- */

struct gv__tok {
	const uint8_t *b;
	uint32_t len, id;
};

static int gv__cmp(const void *x, const void *y)
{
	const struct gv__tok *a = x, *b = y;
	uint32_t n = a->len < b->len ? a->len : b->len;
	int c = memcmp(a->b, b->b, n);

	if (c)
		return c;
	if (a->len != b->len)
		return a->len < b->len ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

int gv_build(struct gvocab **out, const struct gv_token *toks, uint32_t n, struct ig_errbuf *eb)
{
	struct gvocab *gv = calloc(1, sizeof(*gv));
	struct gv__tok *t = malloc((n ? n : 1) * sizeof(*t));
	uint32_t *path = NULL, nt = 0, ns = 0, depth = 0, nid = 0;
	size_t total = 0;
	int rc = 0;

	*out = NULL;
	if (!gv || !t) {
		rc = ig_errf(eb, IG_E_NOMEM, "grammar: no memory for the vocabulary");
		goto out;
	}
	gv->n_tokens = n;
	if (gvc__store_create(&gv->cls)) {
		rc = ig_errf(eb, IG_E_NOMEM, "grammar: no memory for the vocabulary");
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (toks[i].special) {
			ns++;
			continue;
		}
		if (!toks[i].len)
			continue;
		if (toks[i].len > UINT16_MAX) {
			rc = ig_errf(eb, IG_E_INVAL, "grammar: token %u is %u bytes; at most %u", i,
			             toks[i].len, UINT16_MAX);
			goto out;
		}
		t[nt++] = (struct gv__tok){toks[i].bytes, toks[i].len, i};
		total += toks[i].len;
	}
	qsort(t, nt, sizeof(*t), gv__cmp);
	gv->nodes = malloc((total ? total : 1) * sizeof(*gv->nodes));
	gv->ids = malloc((nt ? nt : 1) * sizeof(*gv->ids));
	gv->special_ids = malloc((ns ? ns : 1) * sizeof(*gv->special_ids));
	path = malloc((UINT16_MAX + 1) * sizeof(*path));
	if (!gv->nodes || !gv->ids || !gv->special_ids || !path) {
		rc = ig_errf(eb, IG_E_NOMEM, "grammar: no memory for the vocabulary trie");
		goto out;
	}
	for (uint32_t i = 0; i < n; i++)
		if (toks[i].special)
			gv->special_ids[gv->n_special++] = i;
	/* sorted strings -> preorder nodes: keep the path of the previous
	 * string, close (set skip of) the nodes below the common prefix */
	for (uint32_t i = 0; i < nt; i++) {
		uint32_t lcp = 0, lim = depth < t[i].len ? depth : t[i].len;
		struct gv_node *nd;

		while (i && lcp < lim && t[i - 1].b[lcp] == t[i].b[lcp])
			lcp++;
		for (; depth > lcp; depth--)
			gv->nodes[path[depth]].skip = gv->n_nodes;
		for (; depth < t[i].len; depth++) {
			nd = &gv->nodes[gv->n_nodes];
			*nd = (struct gv_node){0, 0, (uint16_t)(depth + 1), 0, t[i].b[depth]};
			path[depth + 1] = gv->n_nodes++;
		}
		nd = &gv->nodes[path[depth]];
		if (!nd->ntok)
			nd->tok = nid;
		if (nd->ntok == UINT16_MAX) {
			rc =
			    ig_errf(eb, IG_E_INVAL,
			            "grammar: more than %u tokens with the same bytes", UINT16_MAX);
			goto out;
		}
		nd->ntok++;
		gv->ids[nid++] = t[i].id;
		if (depth > gv->max_depth)
			gv->max_depth = (uint16_t)depth;
	}
	for (; depth > 0; depth--)
		gv->nodes[path[depth]].skip = gv->n_nodes;
	/* the vocabulary's identity for the masks kept: its content, never 0 */
	gv->id = 0x9E3779B97F4A7C15ull ^ n;
	for (uint32_t i = 0; i < nt; i++) {
		gv->id = (gv->id ^ t[i].id) * 0xff51afd7ed558ccdull;
		for (uint32_t k = 0; k < t[i].len; k++)
			gv->id = (gv->id ^ t[i].b[k]) * 0x100000001b3ull;
	}
	for (uint32_t i = 0; i < gv->n_special; i++)
		gv->id = (gv->id ^ (gv->special_ids[i] | 1ull << 40)) * 0xff51afd7ed558ccdull;
	gv->id |= 1;
	{
		struct gv_node *s =
		    realloc(gv->nodes, (gv->n_nodes ? gv->n_nodes : 1) * sizeof(*s));

		if (s)
			gv->nodes = s;
	}
	*out = gv;
	gv = NULL;
out:
	gv_destroy(gv);
	free(t);
	free(path);
	return rc;
}

void gv_destroy(struct gvocab *gv)
{
	if (!gv)
		return;
	free(gv->nodes);
	free(gv->ids);
	free(gv->special_ids);
	gvc__store_destroy(gv->cls);
	free(gv);
}

uint32_t gv_n_tokens(const struct gvocab *gv)
{
	return gv->n_tokens;
}

uint32_t gv_n_nodes(const struct gvocab *gv)
{
	return gv->n_nodes;
}

size_t gv_mask_words(const struct gvocab *gv)
{
	return ((size_t)gv->n_tokens + 31) / 32;
}

/* ---- the mask ---------------------------------------------------------------------------- */

int gm__walk(struct grammar *g, const struct gvocab *gv, int32_t sid, uint32_t begin, uint32_t end,
             uint32_t base_depth, uint32_t *bits, struct ig_errbuf *eb)
{
	struct gm__scratch *scr = gm__scr(g);
	const struct gv_node *nd = gv->nodes;
	const uint32_t *ids = gv->ids;
	const int32_t *tr;
	int32_t *walk;
	uint32_t i = begin;

	if (!scr)
		return ig_errf(eb, IG_E_NOMEM, "grammar: no memory for the mask's scratch");
	if (scr->walk_cap < (uint32_t)gv->max_depth + 1) {
		int32_t *w = realloc(scr->walk, ((size_t)gv->max_depth + 1) * sizeof(*w));

		if (!w)
			return ig_errf(eb, IG_E_NOMEM, "grammar: no memory for the mask's scratch");
		scr->walk = w;
		scr->walk_cap = (uint32_t)gv->max_depth + 1;
	}
	walk = scr->walk;
	walk[base_depth] = sid;
	tr = g->cache.trans;
	while (i < end) {
		const struct gv_node *x = &nd[i];
		int32_t s = walk[x->depth - 1], t = tr[(size_t)s << 8 | x->byte];

		if (t == GMC_UNKNOWN) {
			int rc = gmc_next_slow(g, s, x->byte, &t);

			if (rc)
				return ig_errf(eb, rc, "grammar: the mask's walk: %s",
				               ig_err_str(rc));
			if (g->cache.bytes > GMC_HARD_BYTES)
				return ig_errf(
				    eb, IG_E_NOSPACE,
				    "grammar: the state cache passed %llu MiB in one mask",
				    (unsigned long long)(GMC_HARD_BYTES >> 20));
			tr = g->cache.trans; /* it may have moved */
		}
		if (t == GMC_DEAD) {
			i = x->skip;
			continue;
		}
		for (uint32_t k = 0; k < x->ntok; k++) {
			uint32_t id = ids[x->tok + k];

			bits[id >> 5] |= 1u << (id & 31);
		}
		walk[x->depth] = t;
		i++;
	}
	return 0;
}

int gm__intern_matcher(struct gmatch *m, int32_t *sid, struct ig_errbuf *eb)
{
	int rc = gmc_intern(&m->g->cache, m->w, m->nw, m->nstk, sid);

	return rc ? ig_errf(eb, rc, "grammar: no memory for the state cache") : 0;
}

static int gm__mask_once(struct gmatch *m, const struct gvocab *gv, uint32_t *bits,
                         struct ig_errbuf *eb)
{
	struct gm_cache *c = &m->g->cache;
	size_t nwords = gv_mask_words(gv);
	bool done = false;
	int32_t sid;
	int rc;

	if (c->masks_vocab != gv->id) {
		/* (their bytes stay counted until the next flush) */
		for (uint32_t i = 0; i < c->n_masks; i++)
			free(c->masks[i]);
		for (uint32_t i = 0; i < c->n_st; i++)
			c->st[i].mask = -1;
		c->n_masks = 0;
		c->masks_vocab = gv->id;
	}
	if ((rc = gm__intern_matcher(m, &sid, eb)))
		return rc;
	if (c->st[sid].mask >= 0) {
		memcpy(bits, c->masks[c->st[sid].mask], nwords * 4);
		return 0;
	}
	if (!m->g->plain && (rc = gci__mask(m->g, gv, sid, bits, &done, eb)))
		return rc;
	if (done) {
		c->class_masks++;
	} else {
		memset(bits, 0, nwords * 4);
		if ((rc = gm__walk(m->g, gv, sid, 0, gv->n_nodes, 0, bits, eb)))
			return rc;
	}
	if (c->n_masks < GMC_MAX_MASKS) {
		uint32_t *copy;

		if (c->n_masks == c->cap_masks) {
			uint32_t nc = c->cap_masks ? c->cap_masks * 2 : 16;
			uint32_t **t = realloc(c->masks, nc * sizeof(*t));

			if (!t)
				return 0; /* the mask is right; it is just not kept */
			c->masks = t;
			c->cap_masks = nc;
		}
		copy = malloc(nwords * 4);
		if (!copy)
			return 0;
		memcpy(copy, bits, nwords * 4);
		c->st[sid].mask = (int32_t)c->n_masks;
		c->masks[c->n_masks++] = copy;
		c->bytes += nwords * 4;
	}
	return 0;
}

int gm_mask(struct gmatch *m, const struct gvocab *gv, uint32_t *bits, struct ig_errbuf *eb)
{
	int rc;

	if (m->err)
		return ig_errf(eb, m->err, "grammar: the matcher is broken (%s)",
		               ig_err_str(m->err));
	gm__cache_trim(m->g, false);
	rc = gm__mask_once(m, gv, bits, eb);
	if (rc == IG_E_NOSPACE) {
		gmc_flush(&m->g->cache);
		rc = gm__mask_once(m, gv, bits, eb);
	}
	return rc;
}

/* ---- the scratch's home ----------------------------------------------------------------- */

/* One scratch per grammar, made on first use, freed with the cache. */
static struct gm__scratch *gm__scr(struct grammar *g)
{
	struct gm__scratch *s = g->cache.scr;

	if (s)
		return s;
	s = calloc(1, sizeof(*s));
	if (!s || gm__work_init(&s->wk)) {
		gm__scratch_free(s);
		return NULL;
	}
	g->cache.scr = s;
	return s;
}
