/*
 * vclass.c - the vocabulary's token sets of class automata (grammar_int.h,
 * docs/adr/0061).
 *
 * For an automaton Q (how one character of a class is read, phase by
 * phase), the set of the vocabulary's tokens that Q reads whole, counting
 * at most GQ_MAX_COUNT characters, as a mask over token ids, and the
 * boundaries: the trie nodes where Q stops reading (a byte outside the
 * class, or one character too many), each with the phase and count before
 * it. One walk of the trie builds them, the first time a grammar asks for
 * Q over this vocabulary; they are read-only after, and every grammar
 * over the vocabulary shares them (the JSON string's character, a bounded
 * string's, a pattern's class).
 *
 * Threads: a vocabulary is shared by the grammars of every sequence, which
 * other threads may drive; the store is the one mutable part of a gvocab,
 * behind its own lock. An entry is never changed or freed before the
 * vocabulary, so its pointer is valid without the lock.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_int.h"

/* Classes kept per vocabulary: a grammar meets a handful (JSON's string
 * and bounded-string characters, each pattern class, blanks); each is a
 * mask and a byte per token (167 KiB for Qwen3's 151,669) and its
 * boundaries (some 30-150 KiB), so 64 are at most about 20 MiB. Past it,
 * the plain walk. */
#define GVC_MAX_CLASSES 64u
/* Boundaries past this share of the trie's nodes make the set useless: a
 * walk from each costs more than the plain walk prunes. */
#define GVC_MAX_BOUND_SHARE 16u

/* Trigger parts kept per vocabulary: one per byte of each trigger a
 * lazy grammar was seen in (Hermes' "<tool_call>" is 11); 19 KiB each for
 * Qwen3. Past it, each lazy mask builds its own. */
#define GVC_MAX_TRIGS 64u

struct gvc_store {
	pthread_mutex_t mu;
	struct gvc_class *cls[GVC_MAX_CLASSES];
	uint32_t n;
	struct gvc_trig *trig[GVC_MAX_TRIGS];
	uint32_t n_trig;
};

int gvc__store_create(struct gvc_store **out)
{
	struct gvc_store *s = calloc(1, sizeof(*s));

	*out = NULL;
	if (!s)
		return IG_E_NOMEM;
	if (pthread_mutex_init(&s->mu, NULL)) {
		free(s);
		return IG_E_NOMEM;
	}
	*out = s;
	return 0;
}

static void gvc__class_free(struct gvc_class *c)
{
	if (!c)
		return;
	free(c->tbl);
	free(c->mask);
	free(c->code);
	free(c->bd);
	free(c);
}

void gvc__store_destroy(struct gvc_store *s)
{
	if (!s)
		return;
	for (uint32_t i = 0; i < s->n; i++)
		gvc__class_free(s->cls[i]);
	for (uint32_t i = 0; i < s->n_trig; i++)
		gvc__trig_free(s->trig[i]);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

uint64_t gvc__hash(const uint8_t *tbl, uint32_t n_ph)
{
	uint64_t h = 0xcbf29ce484222325ull ^ n_ph; /* FNV-1a 64 */

	for (size_t i = 0; i < (size_t)n_ph * 256; i++)
		h = (h ^ tbl[i]) * 0x100000001b3ull;
	return h;
}

static int gvc__bound(struct gvc_class *c, uint32_t *cap, uint32_t node, uint32_t ph, uint32_t cnt)
{
	if (c->n_bd == *cap) {
		uint32_t nc = *cap ? *cap * 2 : 1024;
		struct gvc_bound *t = realloc(c->bd, nc * sizeof(*t));

		if (!t)
			return IG_E_NOMEM;
		c->bd = t;
		*cap = nc;
	}
	c->bd[c->n_bd++] = (struct gvc_bound){node, (uint8_t)ph, (uint8_t)cnt};
	return 0;
}

/* The walk: per depth the phase and count reached; a node Q does not
 * read is a boundary and its subtree is left to the grammar's walk. */
static int gvc__walk(const struct gvocab *gv, struct gvc_class *c, uint8_t *ph, uint8_t *cnt)
{
	const struct gv_node *nd = gv->nodes;
	uint32_t i = 0, cap = 0;

	ph[0] = cnt[0] = 0;
	while (i < gv->n_nodes) {
		const struct gv_node *x = &nd[i];
		uint32_t p = ph[x->depth - 1], n = cnt[x->depth - 1];
		uint32_t v = c->tbl[p * 256 + x->byte];

		if (v == GQ_OUT || (v == GQ_COUNT && n == GQ_MAX_COUNT)) {
			if (gvc__bound(c, &cap, i, p, n))
				return IG_E_NOMEM;
			i = x->skip;
			continue;
		}
		ph[x->depth] = (uint8_t)(v == GQ_COUNT ? 0 : v);
		cnt[x->depth] = (uint8_t)(v == GQ_COUNT ? n + 1 : n);
		for (uint32_t k = 0; k < x->ntok; k++) {
			uint32_t id = gv->ids[x->tok + k];

			c->mask[id >> 5] |= 1u << (id & 31);
			c->code[id] = (uint8_t)(2 * cnt[x->depth] + (ph[x->depth] != 0));
		}
		i++;
	}
	c->useless = (uint64_t)c->n_bd * GVC_MAX_BOUND_SHARE > gv->n_nodes;
	return 0;
}

static struct gvc_class *gvc__build(const struct gvocab *gv, const uint8_t *tbl, uint32_t n_ph,
                                    uint64_t h)
{
	struct gvc_class *c = calloc(1, sizeof(*c));
	uint8_t *ph = malloc((size_t)gv->max_depth + 1), *cnt = malloc((size_t)gv->max_depth + 1);

	if (!c || !ph || !cnt)
		goto fail;
	c->hash = h;
	c->n_ph = n_ph;
	c->tbl = malloc((size_t)n_ph * 256);
	c->mask = calloc(gv_mask_words(gv), sizeof(uint32_t));
	c->code = malloc(gv->n_tokens ? gv->n_tokens : 1);
	if (!c->tbl || !c->mask || !c->code)
		goto fail;
	memset(c->code, 0xff, gv->n_tokens);
	memcpy(c->tbl, tbl, (size_t)n_ph * 256);
	if (gvc__walk(gv, c, ph, cnt))
		goto fail;
	if (c->useless) {
		/* kept only to say so: its arrays would be up to 2.6 MiB for Qwen3 */
		free(c->mask);
		free(c->code);
		free(c->bd);
		c->mask = NULL;
		c->code = NULL;
		c->bd = NULL;
		c->n_bd = 0;
	}
	free(ph);
	free(cnt);
	return c;
fail:
	gvc__class_free(c);
	free(ph);
	free(cnt);
	return NULL;
}

const struct gvc_class *gvc__get(const struct gvocab *gv, const uint8_t *tbl, uint32_t n_ph,
                                 uint64_t h)
{
	struct gvc_store *s = gv->cls;
	struct gvc_class *c = NULL;

	pthread_mutex_lock(&s->mu);
	for (uint32_t i = 0; i < s->n; i++)
		if (s->cls[i]->hash == h && s->cls[i]->n_ph == n_ph &&
		    !memcmp(s->cls[i]->tbl, tbl, (size_t)n_ph * 256)) {
			c = s->cls[i];
			goto out;
		}
	if (s->n < GVC_MAX_CLASSES && (c = gvc__build(gv, tbl, n_ph, h)))
		s->cls[s->n++] = c;
out:
	pthread_mutex_unlock(&s->mu);
	return c;
}

/* ---- the lazy matcher's inactive part ------------------------------------------------- */

void gvc__trig_free(struct gvc_trig *t)
{
	if (!t)
		return;
	free(t->mask);
	free(t->comp);
	free(t);
}

/* The trie walked with the trigger's automaton from z's bytes seen: a
 * node that completes the trigger is listed, its subtree left. */
static int gvc__trig_walk(const struct gvocab *gv, const struct gm_lazy *z, struct gvc_trig *t,
                          uint32_t *kst)
{
	uint32_t i = 0, cap = 0;

	for (uint32_t s = 0; s < gv->n_special; s++)
		t->mask[gv->special_ids[s] >> 5] |= 1u << (gv->special_ids[s] & 31);
	kst[0] = z->seen;
	while (i < gv->n_nodes) {
		const struct gv_node *x = &gv->nodes[i];
		uint32_t k = gl__step(z, kst[x->depth - 1], x->byte);

		for (uint32_t n = 0; n < x->ntok; n++) {
			uint32_t id = gv->ids[x->tok + n];

			t->mask[id >> 5] |= 1u << (id & 31);
		}
		if (k < z->tlen) {
			kst[x->depth] = k;
			i++;
			continue;
		}
		if (t->n_comp == cap) {
			uint32_t nc = cap ? cap * 2 : 16, *c = realloc(t->comp, nc * sizeof(*c));

			if (!c)
				return IG_E_NOMEM;
			t->comp = c;
			cap = nc;
		}
		t->comp[t->n_comp++] = i;
		i = x->skip;
	}
	return 0;
}

struct gvc_trig *gvc__trig_build(const struct gvocab *gv, const struct gm_lazy *z)
{
	struct gvc_trig *t = calloc(1, sizeof(*t));
	uint32_t *kst = malloc(((size_t)gv->max_depth + 1) * sizeof(*kst));

	if (!t || !kst || !(t->mask = calloc(gv_mask_words(gv), sizeof(uint32_t))) ||
	    gvc__trig_walk(gv, z, t, kst)) {
		gvc__trig_free(t);
		free(kst);
		return NULL;
	}
	memcpy(t->trigger, z->trigger, z->tlen);
	t->tlen = z->tlen;
	t->seen = z->seen;
	free(kst);
	return t;
}

const struct gvc_trig *gvc__trigger(const struct gvocab *gv, const struct gm_lazy *z)
{
	struct gvc_store *s = gv->cls;
	struct gvc_trig *t = NULL;

	pthread_mutex_lock(&s->mu);
	for (uint32_t i = 0; i < s->n_trig; i++)
		if (s->trig[i]->seen == z->seen && s->trig[i]->tlen == z->tlen &&
		    !memcmp(s->trig[i]->trigger, z->trigger, z->tlen)) {
			t = s->trig[i];
			goto out;
		}
	if (s->n_trig < GVC_MAX_TRIGS && (t = gvc__trig_build(gv, z)))
		s->trig[s->n_trig++] = t;
out:
	pthread_mutex_unlock(&s->mu);
	return t;
}

void gv_class_stats(const struct gvocab *gv, uint32_t *n_classes, uint32_t *n_triggers,
                    size_t *bytes)
{
	struct gvc_store *s = gv->cls;
	size_t words = gv_mask_words(gv) * 4;

	pthread_mutex_lock(&s->mu);
	*n_classes = s->n;
	*n_triggers = s->n_trig;
	*bytes = 0;
	for (uint32_t i = 0; i < s->n; i++)
		*bytes += (s->cls[i]->useless ? 0 : words + gv->n_tokens) +
		          (size_t)s->cls[i]->n_ph * 256 +
		          s->cls[i]->n_bd * sizeof(struct gvc_bound);
	for (uint32_t i = 0; i < s->n_trig; i++)
		*bytes += words + s->trig[i]->n_comp * sizeof(uint32_t);
	pthread_mutex_unlock(&s->mu);
}
