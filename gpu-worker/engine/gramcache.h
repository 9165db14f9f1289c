/*
 * gramcache.h - the worker's compiled grammars, kept by their text
 * (docs/adr/0057). A grammar's mask cache is what makes constrained
 * decoding cheap (a state seen before is a copy of its mask), and agents
 * send the same schema or tool list request after request: so a grammar
 * is compiled once and kept while requests use it, and the most recently
 * used idle ones are kept beside them for the next request with the same
 * text.
 *
 * Not thread-safe: the worker's one thread gets and puts.
 */
#ifndef IGNIS_GPU_WORKER_GRAMCACHE_H
#define IGNIS_GPU_WORKER_GRAMCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "grammar/grammar.h"

enum gcache_kind {
	GCACHE_GBNF = 1,   /* grammar/grammar.h's text form, root rule "root" */
	GCACHE_SCHEMA = 2, /* a JSON Schema (grammar/json_schema.h) */
};

/* Idle grammars kept (each may hold up to 64 MiB of mask cache). */
#define GCACHE_IDLE_MAX 8u

struct gcache;

int gcache_create(struct gcache **out, struct ig_errbuf *eb);
/* Every grammar freed: none may be in use. NULL is harmless. */
void gcache_destroy(struct gcache *c);

/*
 * The grammar of `text` (len bytes) of `kind`: found, or compiled and kept;
 * *out holds one more use, handed back with gcache_put. IG_E_INVAL with
 * the compiler's message (line and column, or the place in the schema, and
 * what is supported), IG_E_NOMEM.
 */
int gcache_get(struct gcache *c, enum gcache_kind kind, const char *text, size_t len,
               struct grammar **out, struct ig_errbuf *eb);
void gcache_put(struct gcache *c, struct grammar *g);

/* Figures: grammars kept, those in use, compiles and finds since create. */
struct gcache_stats {
	uint32_t kept, in_use;
	uint64_t compiled, found;
};
void gcache_stats(const struct gcache *c, struct gcache_stats *st);

#endif
