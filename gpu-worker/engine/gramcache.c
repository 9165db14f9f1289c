/* gramcache.c - compiled grammars kept by their text (gramcache.h). */
#include "gramcache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <xxhash.h>

#include "grammar/json_schema.h"

struct gcache_ent {
	enum gcache_kind kind;
	uint64_t hash;
	char *text;
	size_t len;
	struct grammar *g;
	uint32_t uses;
	uint64_t used_at; /* the cache's clock at its last get */
};

struct gcache {
	struct gcache_ent *e;
	uint32_t n, cap;
	uint64_t clock;
	struct gcache_stats st;
};

int gcache_create(struct gcache **out, struct ig_errbuf *eb)
{
	*out = calloc(1, sizeof(**out));
	return *out ? IG_E_OK : ig_errf(eb, IG_E_NOMEM, "no memory for the grammar cache");
}

static void gcache__drop(struct gcache *c, uint32_t i)
{
	grammar_destroy(c->e[i].g);
	free(c->e[i].text);
	c->e[i] = c->e[--c->n];
}

void gcache_destroy(struct gcache *c)
{
	if (!c)
		return;
	while (c->n)
		gcache__drop(c, c->n - 1);
	free(c->e);
	free(c);
}

static int gcache__compile(enum gcache_kind kind, const char *text, size_t len, struct grammar **g,
                           struct ig_errbuf *eb)
{
	json_error_t je;
	json_t *schema;
	int rc;

	if (kind == GCACHE_GBNF)
		return grammar_parse(text, len, "root", g, eb);
	schema = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!schema)
		return ig_errf(eb, IG_E_INVAL,
		               "json_schema: not JSON (%s, at line %d column %d); accepted: a JSON "
		               "Schema object",
		               je.text, je.line, je.column);
	rc = gs_compile(schema, g, eb);
	json_decref(schema);
	return rc;
}

/* Idle entries past GCACHE_IDLE_MAX go, the least recently used first. */
static void gcache__trim(struct gcache *c)
{
	for (;;) {
		uint32_t idle = 0, lru = UINT32_MAX;

		for (uint32_t i = 0; i < c->n; i++)
			if (!c->e[i].uses) {
				idle++;
				if (lru == UINT32_MAX || c->e[i].used_at < c->e[lru].used_at)
					lru = i;
			}
		if (idle <= GCACHE_IDLE_MAX)
			return;
		gcache__drop(c, lru);
	}
}

int gcache_get(struct gcache *c, enum gcache_kind kind, const char *text, size_t len,
               struct grammar **out, struct ig_errbuf *eb)
{
	uint64_t h = XXH3_64bits(text, len) ^ (uint64_t)kind;
	struct gcache_ent *e;
	struct grammar *g;
	char *copy;
	int rc;

	*out = NULL;
	for (uint32_t i = 0; i < c->n; i++) {
		e = &c->e[i];
		if (e->hash == h && e->kind == kind && e->len == len &&
		    !memcmp(e->text, text, len)) {
			e->uses++;
			e->used_at = ++c->clock;
			c->st.found++;
			*out = e->g;
			return IG_E_OK;
		}
	}
	rc = gcache__compile(kind, text, len, &g, eb);
	if (rc)
		return rc;
	copy = malloc(len ? len : 1);
	if (copy && c->n == c->cap) {
		uint32_t cap = c->cap ? 2 * c->cap : 16;
		struct gcache_ent *ne = realloc(c->e, cap * sizeof(*ne));

		if (ne) {
			c->e = ne;
			c->cap = cap;
		}
	}
	if (!copy || c->n == c->cap) {
		free(copy);
		grammar_destroy(g);
		return ig_errf(eb, IG_E_NOMEM, "no memory to keep a grammar");
	}
	memcpy(copy, text, len);
	c->e[c->n++] = (struct gcache_ent){kind, h, copy, len, g, 1, ++c->clock};
	c->st.compiled++;
	*out = g;
	return IG_E_OK;
}

void gcache_put(struct gcache *c, struct grammar *g)
{
	for (uint32_t i = 0; i < c->n; i++)
		if (c->e[i].g == g && c->e[i].uses) {
			c->e[i].uses--;
			break;
		}
	gcache__trim(c);
}

void gcache_stats(const struct gcache *c, struct gcache_stats *st)
{
	*st = c->st;
	st->kept = c->n;
	st->in_use = 0;
	for (uint32_t i = 0; i < c->n; i++)
		st->in_use += c->e[i].uses > 0;
}
