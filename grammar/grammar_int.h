/*
 * grammar_int.h - the compiled grammar's layout and the state cache,
 * shared by grammar.c (compile), matcher.c (stacks, cache, masks) and
 * lazy.c. Not for other components.
 *
 * Positions. Every alternative of every rule is a run of elements in
 * `el`, closed by a GE_END element; a position is an index into `el`. A
 * matcher stack holds positions, bottom first: each frame is where to go
 * on when the frame above it is done; the top one, after settling, is
 * always a GE_BYTES element (the next byte must be in its set). An empty
 * stack means the root rule is complete.
 */
#ifndef IGNIS_GRAMMAR_GRAMMAR_INT_H
#define IGNIS_GRAMMAR_GRAMMAR_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "grammar.h"

struct gm__scratch;

enum gr_kind {
	GE_END = 0,   /* closes an alternative: pop the frame */
	GE_BYTES = 1, /* arg: index into sets */
	GE_REF = 2,   /* arg: rule */
};

struct gr_elem {
	uint32_t kind, arg;
};

/*
 * The state cache: matcher states (canonical stack sets) interned into
 * small ids, each with its transitions by byte (one table, 256 entries a
 * state, so that a walk's step is one load), filled as walks ask, and
 * with its whole mask over one vocabulary once computed. A walk over the
 * trie is then an array look-up per node. States are copies of stack sets,
 * so flushing the cache never invalidates a matcher.
 */
#define GMC_UNKNOWN (-2)
#define GMC_DEAD    (-1)

struct gmc_state {
	uint32_t off, nw, nstk; /* the stack set: words[off .. off + nw) */
	bool can_end;
	int32_t mask; /* index into masks, or -1 */
	int32_t lvl;  /* classmask.c: index into the cache's levels, or GCI_UNKNOWN / GCI_NONE */
};

/*
 * Context-independent masks (classmask.c, vclass.c; docs/adr/0061).
 *
 * A class automaton ("Q") describes how a state reads one character of a
 * class: phases, phase 0 at a character's start, and per phase 256
 * entries, each the next phase, GQ_COUNT (the character is complete: back
 * to phase 0 of the next one) or GQ_OUT (the byte leaves the class). A
 * character is a UTF-8 sequence, so that a class of code points whose
 * grammar rule is one alternative per lead-byte range is one automaton.
 * Its tables are plain bytes that hold no grammar positions, so that every
 * grammar with the JSON string's character class has the same automaton
 * and the vocabulary keeps one token set for all of them.
 *
 * A level is what a matcher state at a character's start reads: its
 * automaton, the cache state of each phase, and the state a whole
 * character leads to (the next level's start; itself in a loop such as
 * `char*`). A state's levels, chained for GQ_MAX_COUNT + 1 characters,
 * all with the same automaton, are the proof that the state reads every
 * token made of that class's characters as the automaton says.
 */
#define GQ_MAX_PHASES 32u
#define GQ_COUNT      0xFEu
#define GQ_OUT        0xFFu
/* Characters counted before a token is handed to the full walk: bounded
 * strings (maxLength), digits and indents count theirs, so each count up
 * to this is a level to check; 16 covers all but some hundreds of Qwen3's
 * 151,669 tokens (runs of blanks, dashes, long words), which are walked. */
#define GQ_MAX_COUNT 16u
/* A class of fewer ASCII bytes than this prunes the trie early enough on
 * its own: the plain walk is cheaper than the boundaries it would leave. */
#define GQ_MIN_ASCII 16u

#define GCI_UNKNOWN (-1)
#define GCI_NONE    (-2)

/* A class automaton as the grammar's cache interns it. */
struct gci_auto {
	uint64_t hash;
	uint32_t n_ph;
	uint32_t off; /* n_ph x 256 entries in gci_cache.tbl */
};

struct gci_level {
	uint32_t q;   /* index into gci_cache.qa */
	uint32_t off; /* the cache state of each phase: gci_cache.st[off .. off + n_ph) */
	int32_t next; /* the cache state after one whole character */
};

struct gci_cache {
	struct gci_level *lv;
	uint32_t n_lv, cap_lv;
	int32_t *st;
	size_t n_st, cap_st;
	struct gci_auto *qa;
	uint32_t n_qa, cap_qa;
	uint8_t *tbl;
	size_t n_tbl, cap_tbl;
};

struct gm_cache {
	struct gmc_state *st;
	uint32_t n_st, cap_st;
	int32_t *trans; /* per state 256 entries, GMC_UNKNOWN until a walk asks */
	uint32_t *words;
	size_t n_words, cap_words;
	int32_t *hash; /* open addressing, -1 empty; capacity hcap (a power of two) */
	uint32_t hcap;
	uint32_t **masks;
	uint32_t n_masks, cap_masks;
	uint64_t masks_vocab; /* the id of the vocabulary the masks are over; 0 none */
	uint64_t bytes;       /* memory held, against the limits */
	uint64_t flushes;
	uint64_t class_masks;    /* masks made by classmask.c (grammar_class_masks) */
	struct gm__scratch *scr; /* matcher.c's working memory */
	struct gci_cache ci;     /* classmask.c's levels (flushed with the states) */
};

struct grammar {
	uint32_t n_rules;
	char **names;       /* per rule */
	uint32_t *rule_alt; /* n_rules + 1 offsets into alt_pos */
	uint32_t *alt_pos;  /* the first position of each alternative */
	struct gr_elem *el;
	uint32_t n_el;
	uint64_t (*sets)[4];
	uint32_t n_sets;
	uint32_t root;
	uint64_t fp;
	struct gm_cache cache;
	uint32_t *start_w; /* the start state's words */
	uint32_t start_nw, start_nstk;
	/* lazy.c's: the inactive masks of each trigger used over this grammar,
	 * shared by every gm_lazy with that trigger (each sequence of a server
	 * has its own matcher; the masks depend on the grammar, the trigger,
	 * the bytes of it seen and the vocabulary only) */
	struct gl_shared *lazy;
	uint32_t n_lazy;
	bool plain; /* grammar_set_class_masks(g, false): the plain trie walk only */
};

/* A trigger's inactive masks over one vocabulary, per bytes of it seen. */
struct gl_shared {
	uint8_t trigger[256];
	uint32_t tlen;
	uint64_t vocab;   /* the gvocab's id */
	uint32_t **masks; /* tlen entries, each NULL until computed */
};

/* lazy.c: every trigger's masks freed (grammar_destroy) */
void gl__shared_release(struct grammar *g);

static inline bool gr__in_set(const uint64_t set[4], unsigned b)
{
	return (set[b >> 6] >> (b & 63)) & 1u;
}

void gmc_release(struct gm_cache *c);
/* matcher.c: the start state of a freshly compiled grammar */
int gm__start(struct grammar *g, struct ig_errbuf *eb);

/* The trie (matcher.c builds it; lazy.c walks it too). Nodes in preorder:
 * the node after i is its first child when deeper, else a later sibling
 * or an ancestor's; `skip` is the index after i's subtree. */
struct gv_node {
	uint32_t skip;
	uint32_t tok; /* first of ntok token ids in gvocab.ids */
	uint16_t depth;
	uint16_t ntok;
	uint8_t byte;
};

/* A boundary of a class's token set: the trie node whose byte leaves the
 * class (or counts a character past GQ_MAX_COUNT), with the phase and the
 * characters counted before it. */
struct gvc_bound {
	uint32_t node;
	uint8_t ph, cnt;
};

/* The vocabulary's token set of one class automaton (vclass.c): built
 * once, read-only after, shared by every grammar over the vocabulary. */
struct gvc_class {
	uint64_t hash;
	uint32_t n_ph;
	uint8_t *tbl;         /* n_ph x 256, the automaton's key */
	uint32_t *mask;       /* the tokens read whole within GQ_MAX_COUNT characters */
	uint8_t *code;        /* per token id: 2 x its characters + 1 when it ends inside
	                       * one, 0xFF when not in mask (counts that run out) */
	struct gvc_bound *bd; /* in trie order */
	uint32_t n_bd;
	bool useless; /* too many boundaries: the plain walk is cheaper */
};

/* The vocabulary's part of a lazy matcher's inactive mask (vclass.c) for
 * one trigger and one count of its bytes seen: every token whose bytes do
 * not complete the trigger before their end, and the specials; and the
 * trie nodes that complete it, whose subtrees the grammar decides. */
struct gvc_trig {
	uint8_t trigger[GM_MAX_TRIGGER];
	uint32_t tlen, seen;
	uint32_t *mask;
	uint32_t *comp; /* in trie order */
	uint32_t n_comp;
};

struct gvc_store; /* vclass.c: the classes built, behind a lock */

struct gvocab {
	uint32_t n_tokens;
	struct gv_node *nodes;
	uint32_t n_nodes;
	uint32_t *ids;
	uint32_t *special_ids;
	uint32_t n_special;
	uint16_t max_depth;
	uint64_t id;           /* a hash of the content: masks kept are over this vocabulary */
	struct gvc_store *cls; /* the class token sets (mutable behind its lock) */
};

/* vclass.c: the store's life (gv_build, gv_destroy). */
int gvc__store_create(struct gvc_store **out);
void gvc__store_destroy(struct gvc_store *s);
/* vclass.c: the token set of automaton tbl (n_ph x 256, hash h) over gv,
 * built on first use; NULL when memory is short or the store is full.
 * Valid as long as gv. Thread-safe. */
const struct gvc_class *gvc__get(const struct gvocab *gv, const uint8_t *tbl, uint32_t n_ph,
                                 uint64_t h);
/* vclass.c: the inactive part for z's trigger and bytes seen, built on
 * first use and kept with gv (thread-safe); NULL when the store is full
 * or memory short: then gvc__trig_build makes one the caller frees with
 * gvc__trig_free. */
const struct gvc_trig *gvc__trigger(const struct gvocab *gv, const struct gm_lazy *z);
struct gvc_trig *gvc__trig_build(const struct gvocab *gv, const struct gm_lazy *z);
void gvc__trig_free(struct gvc_trig *t);
/* lazy.c: the KMP automaton's step: bytes of the trigger matched after b. */
uint32_t gl__step(const struct gm_lazy *z, uint32_t k, uint8_t b);
/* vclass.c: the automaton's hash (the key, with its table). */
uint64_t gvc__hash(const uint8_t *tbl, uint32_t n_ph);

/* classmask.c: bits := the mask of cache state sid by its class when it
 * has one (*done true), else nothing is written (*done false). */
int gci__mask(struct grammar *g, const struct gvocab *gv, int32_t sid, uint32_t *bits, bool *done,
              struct ig_errbuf *eb);
/* classmask.c: the levels forgotten (gmc_flush), freed (gmc_release). */
void gci__flush(struct gci_cache *c);
void gci__release(struct gci_cache *c);
/* matcher.c: every transition of sid known; the slow ones computed. */
int gmc__fill(struct grammar *g, int32_t sid);

/* matcher.c: the cache state of the matcher's stack set (interned). */
int gm__intern_matcher(struct gmatch *m, int32_t *sid, struct ig_errbuf *eb);
/* matcher.c: walk the trie nodes [begin, end), all deeper than base_depth,
 * from cache state sid at base_depth, setting allowed tokens' bits. */
int gm__walk(struct grammar *g, const struct gvocab *gv, int32_t sid, uint32_t begin, uint32_t end,
             uint32_t base_depth, uint32_t *bits, struct ig_errbuf *eb);
/* matcher.c: flush the cache when over its soft limit, or when forced
 * (between walks only). */
void gm__cache_trim(struct grammar *g, bool force);

/* Code point c (at most 0x10FFFF) as UTF-8 into b (4 bytes of room): its
 * length. */
static inline int gr_utf8_put(uint32_t c, uint8_t *b)
{
	if (c < 0x80)
		return b[0] = (uint8_t)c, 1;
	if (c < 0x800)
		return b[0] = (uint8_t)(0xC0 | c >> 6), b[1] = (uint8_t)(0x80 | (c & 63)), 2;
	if (c < 0x10000)
		return b[0] = (uint8_t)(0xE0 | c >> 12), b[1] = (uint8_t)(0x80 | ((c >> 6) & 63)),
		       b[2] = (uint8_t)(0x80 | (c & 63)), 3;
	b[0] = (uint8_t)(0xF0 | c >> 18);
	b[1] = (uint8_t)(0x80 | ((c >> 12) & 63));
	b[2] = (uint8_t)(0x80 | ((c >> 6) & 63));
	b[3] = (uint8_t)(0x80 | (c & 63));
	return 4;
}

#endif
