/*
 * grammar.h - context-free grammars over bytes for constrained decoding:
 * the IR and its builder, the GBNF-like text form, the matcher (a pushdown
 * recognizer over a set of stacks), the token mask over a vocabulary trie,
 * and lazy activation behind a trigger string (docs/adr/0052).
 *
 * A leaf library: it includes nothing of ours but common/, and links only
 * jansson (json_schema.h).
 *
 * The IR. A grammar is a list of rules; a rule is a list of alternatives;
 * an alternative is a sequence of elements, each a set of bytes or a
 * reference to a rule. Everything else is lowered to that at build time:
 * a literal string is one byte set per byte, a set of Unicode codepoints is
 * a rule whose alternatives are the UTF-8 byte sequences of its ranges,
 * repetitions (`*`, `+`, `?`, `{m,n}`) are fresh rules (X* is R ::= X R |
 * empty, whose tail reference costs no stack: see the matcher). The
 * matcher therefore only ever sees bytes, which is what a vocabulary's
 * tokens are made of.
 *
 * Left recursion (a rule that can reach itself without consuming a byte)
 * is refused at compile, naming the cycle: the recognizer expands
 * references eagerly and would loop on it.
 *
 * Threads: a compiled grammar is read-only except for its cache of
 * matcher states (gm_mask, gm_lazy_mask fill it). Every call that takes a
 * grammar or a matcher over it must come from one thread at a time.
 */
#ifndef IGNIS_GRAMMAR_GRAMMAR_H
#define IGNIS_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* ---- the builder ----------------------------------------------------------------- */

/* Repetition bounds above this are refused: X{m,n} costs n - m rules and m
 * copies of X (a JSON string's maxLength of 10,000 is 10,000 rules). */
#define GB_MAX_REPEAT 10000u
/* "no upper bound" for gb_repeat_tail */
#define GB_INF UINT32_MAX
/* A grammar holds at most this many rules and elements (a bound on what a
 * schema may cost: about 24 MiB of elements at the limit). */
#define GB_MAX_RULES (1u << 20)
#define GB_MAX_ELEMS (1u << 22)

struct gbuilder;

/* A new, empty builder (NULL when memory is short); gb_destroy frees it
 * and everything it holds (NULL is harmless). */
struct gbuilder *gb_create(void);
void gb_destroy(struct gbuilder *gb);

/*
 * The rule named `name` (ASCII letters, digits, '-', '_'), declared on its
 * first mention: *id is its number. A rule referenced and never given an
 * alternative fails gb_compile naming it.
 */
int gb_rule(struct gbuilder *gb, const char *name, uint32_t *id, struct ig_errbuf *eb);
/* A new rule named "base~N" with the first free N (groups, repetitions). */
int gb_fresh_rule(struct gbuilder *gb, const char *base, uint32_t *id, struct ig_errbuf *eb);
/* True when the rule has at least one alternative. */
bool gb_defined(const struct gbuilder *gb, uint32_t rule);
const char *gb_rule_name(const struct gbuilder *gb, uint32_t rule);

/* Start a new (empty) alternative of `rule`: the appends below go to it. */
int gb_alt(struct gbuilder *gb, uint32_t rule, struct ig_errbuf *eb);

/* Append to the rule's current alternative: a byte set (bit b of
 * set[b / 64] is byte b), */
int gb_bytes(struct gbuilder *gb, uint32_t rule, const uint64_t set[4], struct ig_errbuf *eb);
/* a literal byte string (one set per byte), */
int gb_literal(struct gbuilder *gb, uint32_t rule, const void *s, size_t n, struct ig_errbuf *eb);
/* a reference to a rule, */
int gb_ref(struct gbuilder *gb, uint32_t rule, uint32_t ref, struct ig_errbuf *eb);
/*
 * one codepoint of the ranges r[0..n) ({lo, hi} inclusive, any order,
 * overlaps allowed, at most 0x10FFFF; surrogates D800-DFFF are never
 * matched), or of their complement when `negated`. ASCII-only sets are one
 * byte set; others a rule of UTF-8 sequences, shared by equal sets.
 */
int gb_codepoints(struct gbuilder *gb, uint32_t rule, const uint32_t (*r)[2], size_t n,
                  bool negated, struct ig_errbuf *eb);
/* The number of elements in the rule's current alternative: a mark for
 * gb_repeat_tail. */
uint32_t gb_mark(const struct gbuilder *gb, uint32_t rule);
/*
 * Replace the elements appended to the rule's current alternative since
 * `mark` (at least one) with `min` to `max` repetitions of them (max may
 * be GB_INF; min <= max, both at most GB_MAX_REPEAT unless max is GB_INF).
 */
int gb_repeat_tail(struct gbuilder *gb, uint32_t rule, uint32_t mark, uint32_t min, uint32_t max,
                   struct ig_errbuf *eb);

struct grammar;

/*
 * Compile the rules reachable from `root` into a grammar: every rule
 * referenced must be defined, no rule may be left-recursive (the message
 * names the cycle, "a -> b -> a"). On success the caller owns *out
 * (grammar_destroy); the builder may be destroyed at once.
 */
int gb_compile(struct gbuilder *gb, const char *root, struct grammar **out, struct ig_errbuf *eb);

void grammar_destroy(struct grammar *g);

/*
 * Parse the text form and compile it (root rule `root`, usually "root"):
 *
 *   rule  ::= alt ( "|" alt )*       rules may span lines; "name ::=" starts the next
 *   alt   ::= item*                  (an empty alternative matches the empty string)
 *   item  ::= primary ( "*" | "+" | "?" | "{" m "}" | "{" m "," "}" | "{" m "," n "}" )?
 *   primary ::= "literal" | [class] | [^class] | %[byte class] | %[^byte class] | . | name
 *             | "(" alternatives ")"
 *
 * Literals and classes take escapes \n \r \t \\ \" \] \[ \- \xHH \uHHHH
 * \UHHHHHHHH; classes and `.` are Unicode codepoints (UTF-8), %[...] are
 * bytes (\xHH). `#` starts a comment to the end of the line. A rule is
 * defined once. Errors are IG_E_INVAL naming the line and column and what
 * was expected ("grammar line 2 column 9: expected '::=' after rule name
 * 'item'"). The caller owns *out.
 */
int grammar_parse(const char *text, size_t len, const char *root, struct grammar **out,
                  struct ig_errbuf *eb);

/* The compiled grammar's size, for messages and benchmarks. */
uint32_t grammar_n_rules(const struct grammar *g);
uint32_t grammar_n_elems(const struct grammar *g);
/* A fingerprint of the compiled rules: a saved matcher state loads only
 * into a grammar with the same one. */
uint64_t grammar_fingerprint(const struct grammar *g);

/*
 * Masks from the vocabulary's class sets (docs/adr/0061): on by default.
 * Off, every new state's mask is the plain trie walk: the same bits,
 * slower; for tests that compare the two and for benchmarks.
 */
void grammar_set_class_masks(struct grammar *g, bool on);
/* How many new states' masks came from the class sets so far. */
uint64_t grammar_class_masks(const struct grammar *g);

/* ---- the matcher ------------------------------------------------------------------ */

/*
 * Bounds on a matcher's stack set (a grammar that exceeds them is
 * ambiguous or nests without limit: the matcher refuses the byte and
 * records IG_E_NOSPACE, gm_error): 256 stacks of at most 1024 frames,
 * 65,536 words in all (256 KiB; a JSON document nested 300 deep is
 * about 1,000 frames).
 */
#define GM_MAX_STACKS 256u
#define GM_MAX_DEPTH  1024u
#define GM_MAX_WORDS  65536u

/*
 * A matcher: the set of parse stacks the bytes accepted so far leave
 * (each a list of grammar positions, the top one a byte set), in a
 * canonical order, duplicates removed. Plain data: the caller embeds it;
 * a copy (gm_copy) is a copy of its words, a few hundred bytes for JSON.
 */
struct gmatch {
	struct grammar *g; /* borrowed: outlives the matcher */
	uint32_t *w;       /* stacks: [len, pos x len] ... (owned) */
	uint32_t nw, cap, nstk;
	int err; /* sticky: IG_E_NOSPACE once a bound was hit */
};

/* The grammar's start state. gm_release frees what the matcher holds
 * (twice is harmless). */
int gm_init(struct gmatch *m, struct grammar *g, struct ig_errbuf *eb);
void gm_release(struct gmatch *m);
/* dst (initialised or zeroed) becomes a copy of src. */
int gm_copy(struct gmatch *dst, const struct gmatch *src, struct ig_errbuf *eb);

/*
 * Feed n bytes: true when the grammar accepts all of them (the state
 * advances past them), false when it refuses one (the state is as before
 * the call). A matcher past a bound (gm_error) refuses everything.
 */
bool gm_accept_bytes(struct gmatch *m, const void *bytes, size_t n);
/* True when the bytes accepted so far are a complete sentence of the
 * grammar (the caller then allows its end-of-generation tokens). */
bool gm_can_end(const struct gmatch *m);
/* IG_E_OK, or the code of the bound that broke the matcher. */
int gm_error(const struct gmatch *m);

/*
 * The serialised state, for moving a sequence out and back: the same
 * stack set, checked on load against the grammar (fingerprint, every
 * position). Little-endian 32-bit words (on disk and between processes:
 * never renumber):
 *
 *   | word | field                                      |
 *   |------|--------------------------------------------|
 *   | 0    | magic 0x31534D47 ("GMS1")                  |
 *   | 1, 2 | grammar_fingerprint, low then high half    |
 *   | 3    | number of stacks                           |
 *   | 4    | number of words that follow (N)            |
 *   | 5..  | N words: per stack its length, then frames |
 *
 * gm_state_size is the byte count save writes; save writes at most cap
 * bytes (IG_E_INVAL naming the size needed when short); load replaces the
 * state of an initialised matcher (unchanged on error).
 */
size_t gm_state_size(const struct gmatch *m);
int gm_state_save(const struct gmatch *m, void *buf, size_t cap, size_t *len, struct ig_errbuf *eb);
int gm_state_load(struct gmatch *m, const void *buf, size_t len, struct ig_errbuf *eb);

/* ---- the vocabulary and the token mask ---------------------------------------------- */

/* A token as the vocabulary gives it: its bytes (borrowed for gv_build
 * only), and whether it is special (a control token no grammar allows). */
struct gv_token {
	const uint8_t *bytes;
	uint32_t len;
	bool special;
};

struct gvocab;

/*
 * A trie over the normal tokens' bytes (specials and empty tokens are left
 * out: their bits stay 0), built once per vocabulary. Tokens longer than
 * 65,535 bytes are IG_E_INVAL. The caller owns *out (gv_destroy).
 */
int gv_build(struct gvocab **out, const struct gv_token *toks, uint32_t n, struct ig_errbuf *eb);
void gv_destroy(struct gvocab *gv);
uint32_t gv_n_tokens(const struct gvocab *gv);
/* The trie's node count (benchmarks). */
uint32_t gv_n_nodes(const struct gvocab *gv);
/* The class sets and trigger parts the vocabulary keeps (docs/adr/0061),
 * built as grammars ask: how many of each and the bytes they hold. */
void gv_class_stats(const struct gvocab *gv, uint32_t *n_classes, uint32_t *n_triggers,
                    size_t *bytes);
/* The words a mask takes: (n + 31) / 32. */
size_t gv_mask_words(const struct gvocab *gv);

/*
 * bits[0..gv_mask_words) := the tokens whose every byte the matcher
 * accepts next (bit i of bits[i / 32] for token i). Specials are never
 * set; end of generation is the caller's, when gm_can_end. The walk
 * prunes a subtree of the trie at its first refused byte and goes through
 * the grammar's state cache; the whole mask of a state seen before is a
 * copy. IG_E_NOSPACE when the state cache cannot hold the walk (it is
 * flushed and the walk retried once first), or the matcher's own error.
 */
int gm_mask(struct gmatch *m, const struct gvocab *gv, uint32_t *bits, struct ig_errbuf *eb);

/* ---- lazy activation -------------------------------------------------------------- */

/*
 * A grammar behind a trigger: until the output contains `trigger`, every
 * token is allowed (specials too) and the output may end; the bytes after
 * the trigger's end (the trigger itself is not fed to the grammar) must be
 * accepted by the grammar, from its start state. A token that completes
 * the trigger is allowed only if the bytes it has after it are accepted.
 * Once active it stays active.
 */
#define GM_MAX_TRIGGER 256u

struct gm_lazy {
	struct gmatch m;
	uint8_t trigger[GM_MAX_TRIGGER];
	uint32_t tlen;
	uint32_t kmp[GM_MAX_TRIGGER]; /* failure function of trigger */
	uint32_t seen;                /* bytes of the trigger matched at the end of the output */
	bool active;
};

int gm_lazy_init(struct gm_lazy *z, struct grammar *g, const void *trigger, size_t tlen,
                 struct ig_errbuf *eb);
void gm_lazy_release(struct gm_lazy *z);
/* dst (zeroed or initialised) becomes a copy. The inactive masks (before
 * the trigger) are the grammar's, shared by every lazy matcher with the
 * same trigger over the same vocabulary, computed once. */
int gm_lazy_copy(struct gm_lazy *dst, const struct gm_lazy *src, struct ig_errbuf *eb);
bool gm_lazy_accept_bytes(struct gm_lazy *z, const void *bytes, size_t n);
bool gm_lazy_can_end(const struct gm_lazy *z);
bool gm_lazy_active(const struct gm_lazy *z);
int gm_lazy_mask(struct gm_lazy *z, const struct gvocab *gv, uint32_t *bits, struct ig_errbuf *eb);

/*
 * The lazy matcher's serialised state: little-endian words, magic
 * 0x314C4D47 ("GML1"), active (0 or 1), the bytes of the trigger seen,
 * then gm_state_save's bytes of the inner matcher (on disk and between
 * processes: never renumber). Load into a gm_lazy initialised with the
 * same grammar and trigger.
 */
size_t gm_lazy_state_size(const struct gm_lazy *z);
int gm_lazy_state_save(const struct gm_lazy *z, void *buf, size_t cap, size_t *len,
                       struct ig_errbuf *eb);
int gm_lazy_state_load(struct gm_lazy *z, const void *buf, size_t len, struct ig_errbuf *eb);

#endif
