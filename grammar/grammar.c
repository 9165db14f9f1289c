/*
 * grammar.c - the grammar builder and its compiler (grammar.h).
 *
 * The builder keeps rules by name, each a list of alternatives of
 * elements (byte sets deduplicated into one table, references by rule
 * number). Codepoint sets are lowered to UTF-8 byte sequences here, and
 * repetitions to fresh rules, so that the compiled form has only bytes and
 * references. gb_compile keeps the rules reachable from the root, checks
 * that each is defined and none is left-recursive, and lays the rest out
 * flat (grammar_int.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_int.h"

struct gb__alt {
	struct gr_elem *e;
	uint32_t n, cap;
};

struct gb__rule {
	char *name;
	struct gb__alt *alts;
	uint32_t n_alts, cap_alts;
};

/* a codepoint set already lowered: its normalised ranges -> its rule */
struct gb__cpset {
	uint32_t (*r)[2];
	uint32_t n;
	uint32_t rule;
};

struct gbuilder {
	struct gb__rule *rules;
	uint32_t n_rules, cap_rules;
	int32_t *names; /* open addressing over rule names, -1 empty */
	uint32_t names_cap;
	uint64_t (*sets)[4];
	uint32_t n_sets, cap_sets;
	int32_t *set_hash; /* open addressing over sets, -1 empty */
	uint32_t set_hcap;
	struct gb__cpset *cps;
	uint32_t n_cps, cap_cps;
	uint64_t n_elems; /* appended, against GB_MAX_ELEMS */
	uint32_t fresh;   /* the next N tried by gb_fresh_rule */
};

static uint64_t gb__hash(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* Grow *p (n used, *cap held, elements of `size` bytes) to hold one more. */
static int gb__grow(void *pp, uint32_t n, uint32_t *cap, size_t size)
{
	void **p = pp;
	uint32_t nc;
	void *q;

	if (n < *cap)
		return 0;
	nc = *cap ? *cap * 2 : 8;
	q = realloc(*p, (size_t)nc * size);
	if (!q)
		return IG_E_NOMEM;
	*p = q;
	*cap = nc;
	return 0;
}

struct gbuilder *gb_create(void)
{
	struct gbuilder *gb = calloc(1, sizeof(*gb));

	if (!gb)
		return NULL;
	gb->names_cap = 64;
	gb->names = malloc(gb->names_cap * sizeof(*gb->names));
	gb->set_hcap = 64;
	gb->set_hash = malloc(gb->set_hcap * sizeof(*gb->set_hash));
	if (!gb->names || !gb->set_hash) {
		gb_destroy(gb);
		return NULL;
	}
	memset(gb->names, 0xff, gb->names_cap * sizeof(*gb->names));
	memset(gb->set_hash, 0xff, gb->set_hcap * sizeof(*gb->set_hash));
	return gb;
}

void gb_destroy(struct gbuilder *gb)
{
	if (!gb)
		return;
	for (uint32_t i = 0; i < gb->n_rules; i++) {
		for (uint32_t a = 0; a < gb->rules[i].n_alts; a++)
			free(gb->rules[i].alts[a].e);
		free(gb->rules[i].alts);
		free(gb->rules[i].name);
	}
	for (uint32_t i = 0; i < gb->n_cps; i++)
		free(gb->cps[i].r);
	free(gb->cps);
	free(gb->rules);
	free(gb->names);
	free(gb->sets);
	free(gb->set_hash);
	free(gb);
}

static int32_t gb__find(const struct gbuilder *gb, const char *name)
{
	uint32_t mask = gb->names_cap - 1;
	uint32_t i = (uint32_t)gb__hash(name, strlen(name)) & mask;

	for (;; i = (i + 1) & mask) {
		int32_t r = gb->names[i];

		if (r < 0 || !strcmp(gb->rules[r].name, name))
			return r < 0 ? -1 - (int32_t)i : r; /* not found: -1 - slot */
	}
}

static int gb__rehash_names(struct gbuilder *gb)
{
	uint32_t nc = gb->names_cap * 2;
	int32_t *t = malloc(nc * sizeof(*t));

	if (!t)
		return IG_E_NOMEM;
	memset(t, 0xff, nc * sizeof(*t));
	free(gb->names);
	gb->names = t;
	gb->names_cap = nc;
	for (uint32_t r = 0; r < gb->n_rules; r++) {
		int32_t s = gb__find(gb, gb->rules[r].name);

		gb->names[-1 - s] = (int32_t)r;
	}
	return 0;
}

static bool gb__name_ok(const char *name)
{
	if (!*name)
		return false;
	for (const char *p = name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
			return false;
	return true;
}

/* The rule named `name`, declared when new (the name unchecked). */
static int gb__rule(struct gbuilder *gb, const char *name, uint32_t *id, struct ig_errbuf *eb)
{
	int32_t s;
	struct gb__rule *r;

	s = gb__find(gb, name);
	if (s >= 0) {
		*id = (uint32_t)s;
		return 0;
	}
	if (gb->n_rules >= GB_MAX_RULES)
		return ig_errf(eb, IG_E_INVAL, "grammar: more than %u rules", GB_MAX_RULES);
	if (gb__grow(&gb->rules, gb->n_rules, &gb->cap_rules, sizeof(*gb->rules)))
		return ig_errf(eb, IG_E_NOMEM, "grammar: no memory for rule '%.64s'", name);
	r = &gb->rules[gb->n_rules];
	memset(r, 0, sizeof(*r));
	r->name = strdup(name);
	if (!r->name)
		return ig_errf(eb, IG_E_NOMEM, "grammar: no memory for rule '%.64s'", name);
	gb->names[-1 - s] = (int32_t)gb->n_rules;
	*id = gb->n_rules++;
	/* keep the table at most half full */
	if (gb->n_rules * 2 > gb->names_cap && gb__rehash_names(gb))
		return ig_errf(eb, IG_E_NOMEM, "grammar: no memory for rule names");
	return 0;
}

int gb_rule(struct gbuilder *gb, const char *name, uint32_t *id, struct ig_errbuf *eb)
{
	if (!gb__name_ok(name))
		return ig_errf(eb, IG_E_INVAL,
		               "grammar: rule name '%.64s' is not letters, digits, '-' and '_'",
		               name);
	return gb__rule(gb, name, id, eb);
}

/* Generated names take a '~', which no name of gb_rule's has: they never
 * clash with a rule a text or a caller defines later. */
int gb_fresh_rule(struct gbuilder *gb, const char *base, uint32_t *id, struct ig_errbuf *eb)
{
	char name[96];

	for (;;) {
		snprintf(name, sizeof(name), "%.80s~%u", base, ++gb->fresh);
		if (gb__find(gb, name) < 0)
			return gb__rule(gb, name, id, eb);
	}
}

bool gb_defined(const struct gbuilder *gb, uint32_t rule)
{
	return rule < gb->n_rules && gb->rules[rule].n_alts > 0;
}

const char *gb_rule_name(const struct gbuilder *gb, uint32_t rule)
{
	return rule < gb->n_rules ? gb->rules[rule].name : "?";
}

int gb_alt(struct gbuilder *gb, uint32_t rule, struct ig_errbuf *eb)
{
	struct gb__rule *r = &gb->rules[rule];

	if (gb__grow(&r->alts, r->n_alts, &r->cap_alts, sizeof(*r->alts)))
		return ig_errf(eb, IG_E_NOMEM, "grammar: no memory for rule '%.64s'", r->name);
	memset(&r->alts[r->n_alts++], 0, sizeof(*r->alts));
	return 0;
}

static int gb__push(struct gbuilder *gb, uint32_t rule, uint32_t kind, uint32_t arg,
                    struct ig_errbuf *eb)
{
	struct gb__rule *r = &gb->rules[rule];
	struct gb__alt *a;

	if (!r->n_alts && gb_alt(gb, rule, eb))
		return eb ? eb->code : IG_E_NOMEM;
	a = &r->alts[r->n_alts - 1];
	if (++gb->n_elems > GB_MAX_ELEMS)
		return ig_errf(eb, IG_E_INVAL, "grammar: more than %u elements", GB_MAX_ELEMS);
	if (gb__grow(&a->e, a->n, &a->cap, sizeof(*a->e)))
		return ig_errf(eb, IG_E_NOMEM, "grammar: no memory for rule '%.64s'", r->name);
	a->e[a->n++] = (struct gr_elem){kind, arg};
	return 0;
}

static int gb__set_id(struct gbuilder *gb, const uint64_t set[4], uint32_t *id)
{
	uint32_t mask = gb->set_hcap - 1, i;

	for (i = (uint32_t)gb__hash(set, 32) & mask;; i = (i + 1) & mask) {
		int32_t s = gb->set_hash[i];

		if (s < 0)
			break;
		if (!memcmp(gb->sets[s], set, 32)) {
			*id = (uint32_t)s;
			return 0;
		}
	}
	if (gb__grow(&gb->sets, gb->n_sets, &gb->cap_sets, sizeof(*gb->sets)))
		return IG_E_NOMEM;
	memcpy(gb->sets[gb->n_sets], set, 32);
	gb->set_hash[i] = (int32_t)gb->n_sets;
	*id = gb->n_sets++;
	if (gb->n_sets * 2 > gb->set_hcap) {
		uint32_t nc = gb->set_hcap * 2;
		int32_t *t = malloc(nc * sizeof(*t));

		if (!t)
			return IG_E_NOMEM;
		memset(t, 0xff, nc * sizeof(*t));
		for (uint32_t s = 0; s < gb->n_sets; s++) {
			uint32_t j = (uint32_t)gb__hash(gb->sets[s], 32) & (nc - 1);

			while (t[j] >= 0)
				j = (j + 1) & (nc - 1);
			t[j] = (int32_t)s;
		}
		free(gb->set_hash);
		gb->set_hash = t;
		gb->set_hcap = nc;
	}
	return 0;
}

int gb_bytes(struct gbuilder *gb, uint32_t rule, const uint64_t set[4], struct ig_errbuf *eb)
{
	uint32_t id;

	if (gb__set_id(gb, set, &id))
		return ig_errf(eb, IG_E_NOMEM, "grammar: no memory for a byte set");
	return gb__push(gb, rule, GE_BYTES, id, eb);
}

int gb_literal(struct gbuilder *gb, uint32_t rule, const void *s, size_t n, struct ig_errbuf *eb)
{
	const uint8_t *b = s;
	int rc;

	for (size_t i = 0; i < n; i++) {
		uint64_t set[4] = {0};

		set[b[i] >> 6] |= 1ull << (b[i] & 63);
		if ((rc = gb_bytes(gb, rule, set, eb)))
			return rc;
	}
	return 0;
}

int gb_ref(struct gbuilder *gb, uint32_t rule, uint32_t ref, struct ig_errbuf *eb)
{
	if (ref >= gb->n_rules)
		return ig_errf(eb, IG_E_INVAL, "grammar: reference to rule number %u of %u", ref,
		               gb->n_rules);
	return gb__push(gb, rule, GE_REF, ref, eb);
}

/* ---- codepoints to UTF-8 ------------------------------------------------------------- */

static int gb__cmp_range(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/*
 * Normalise ranges: sorted, merged, surrogates cut out, complemented over
 * 0..0x10FFFF when negated. out holds up to n + 2 ranges (each surrogate
 * cut or complement adds at most one per range, plus one).
 */
static uint32_t gb__norm(const uint32_t (*r)[2], size_t n, bool negated, uint32_t (*out)[2],
                         uint32_t (*tmp)[2])
{
	uint32_t m = 0, k = 0;

	for (size_t i = 0; i < n; i++) {
		uint32_t lo = r[i][0] < r[i][1] ? r[i][0] : r[i][1];
		uint32_t hi = r[i][0] < r[i][1] ? r[i][1] : r[i][0];

		if (lo > 0x10FFFF)
			continue;
		if (hi > 0x10FFFF)
			hi = 0x10FFFF;
		tmp[m][0] = lo;
		tmp[m][1] = hi;
		m++;
	}
	qsort(tmp, m, sizeof(*tmp), gb__cmp_range);
	for (uint32_t i = 0; i < m; i++) {
		if (k && tmp[i][0] <= out[k - 1][1] + 1) {
			if (tmp[i][1] > out[k - 1][1])
				out[k - 1][1] = tmp[i][1];
		} else {
			out[k][0] = tmp[i][0];
			out[k][1] = tmp[i][1];
			k++;
		}
	}
	if (negated) {
		uint32_t c = 0, j = 0;

		for (uint32_t i = 0; i < k; i++) {
			if (out[i][0] > c) {
				tmp[j][0] = c;
				tmp[j][1] = out[i][0] - 1;
				j++;
			}
			c = out[i][1] + 1;
		}
		if (c <= 0x10FFFF) {
			tmp[j][0] = c;
			tmp[j][1] = 0x10FFFF;
			j++;
		}
		memcpy(out, tmp, j * sizeof(*tmp));
		k = j;
	}
	/* cut the surrogates out */
	m = 0;
	for (uint32_t i = 0; i < k; i++) {
		uint32_t lo = out[i][0], hi = out[i][1];

		if (hi < 0xD800 || lo > 0xDFFF) {
			tmp[m][0] = lo, tmp[m][1] = hi, m++;
			continue;
		}
		if (lo < 0xD800)
			tmp[m][0] = lo, tmp[m][1] = 0xD7FF, m++;
		if (hi > 0xDFFF)
			tmp[m][0] = 0xE000, tmp[m][1] = hi, m++;
	}
	memcpy(out, tmp, m * sizeof(*tmp));
	return m;
}

/*
 * Append to `rule` (one alternative each) the byte-range sequences that
 * encode exactly the codepoints lo..hi (no surrogates inside): split at
 * the encoded-length boundaries, then where the ranges' continuation
 * bytes do not span whole 64-value blocks, until each piece is a product
 * of byte ranges.
 */
static int gb__utf8_split(struct gbuilder *gb, uint32_t rule, uint32_t lo, uint32_t hi,
                          struct ig_errbuf *eb)
{
	static const uint32_t bound[] = {0x7F, 0x7FF, 0xFFFF};
	uint8_t a[4], b[4];
	int n, rc;

	for (int i = 0; i < 3; i++)
		if (lo <= bound[i] && hi > bound[i]) {
			if ((rc = gb__utf8_split(gb, rule, lo, bound[i], eb)))
				return rc;
			return gb__utf8_split(gb, rule, bound[i] + 1, hi, eb);
		}
	if (hi >= 0x80)
		for (int i = 1; i < 4; i++) {
			uint32_t m = (1u << (6 * i)) - 1;

			if ((lo & ~m) == (hi & ~m))
				continue;
			if (lo & m) {
				if ((rc = gb__utf8_split(gb, rule, lo, lo | m, eb)))
					return rc;
				return gb__utf8_split(gb, rule, (lo | m) + 1, hi, eb);
			}
			if ((hi & m) != m) {
				if ((rc = gb__utf8_split(gb, rule, lo, (hi & ~m) - 1, eb)))
					return rc;
				return gb__utf8_split(gb, rule, hi & ~m, hi, eb);
			}
		}
	n = gr_utf8_put(lo, a);
	gr_utf8_put(hi, b);
	if ((rc = gb_alt(gb, rule, eb)))
		return rc;
	for (int i = 0; i < n; i++) {
		uint64_t set[4] = {0};

		for (unsigned x = a[i]; x <= b[i]; x++)
			set[x >> 6] |= 1ull << (x & 63);
		if ((rc = gb_bytes(gb, rule, set, eb)))
			return rc;
	}
	return 0;
}

int gb_codepoints(struct gbuilder *gb, uint32_t rule, const uint32_t (*r)[2], size_t n,
                  bool negated, struct ig_errbuf *eb)
{
	uint32_t(*norm)[2] = malloc((n + 2) * sizeof(*norm));
	uint32_t(*tmp)[2] = malloc((n + 2) * sizeof(*tmp));
	uint32_t k, id = 0;
	uint64_t ascii[4] = {0};
	int rc = 0;

	if (!norm || !tmp) {
		rc = ig_errf(eb, IG_E_NOMEM, "grammar: no memory for a character class");
		goto out;
	}
	k = gb__norm(r, n, negated, norm, tmp);
	if (k == 0) {
		rc = ig_errf(eb, IG_E_INVAL, "grammar: a character class that matches nothing");
		goto out;
	}
	for (uint32_t i = 0; i < k && norm[i][0] < 0x80; i++)
		for (uint32_t c = norm[i][0]; c <= norm[i][1] && c < 0x80; c++)
			ascii[c >> 6] |= 1ull << (c & 63);
	if (norm[k - 1][1] < 0x80) {
		rc = gb_bytes(gb, rule, ascii, eb);
		goto out;
	}
	/* the same set lowered before: its rule */
	for (uint32_t i = 0; i < gb->n_cps; i++)
		if (gb->cps[i].n == k && !memcmp(gb->cps[i].r, norm, k * sizeof(*norm))) {
			rc = gb_ref(gb, rule, gb->cps[i].rule, eb);
			goto out;
		}
	if ((rc = gb_fresh_rule(gb, "cp", &id, eb)))
		goto out;
	if (ascii[0] | ascii[1]) {
		if ((rc = gb_alt(gb, id, eb)) || (rc = gb_bytes(gb, id, ascii, eb)))
			goto out;
	}
	for (uint32_t i = 0; i < k; i++) {
		uint32_t lo = norm[i][0] < 0x80 ? 0x80 : norm[i][0];

		if (norm[i][1] >= 0x80 && (rc = gb__utf8_split(gb, id, lo, norm[i][1], eb)))
			goto out;
	}
	if (gb__grow(&gb->cps, gb->n_cps, &gb->cap_cps, sizeof(*gb->cps))) {
		rc = ig_errf(eb, IG_E_NOMEM, "grammar: no memory for a character class");
		goto out;
	}
	gb->cps[gb->n_cps++] = (struct gb__cpset){norm, k, id};
	norm = NULL;
	rc = gb_ref(gb, rule, id, eb);
out:
	free(norm);
	free(tmp);
	return rc;
}

/* ---- repetition ---------------------------------------------------------------------- */

uint32_t gb_mark(const struct gbuilder *gb, uint32_t rule)
{
	const struct gb__rule *r = &gb->rules[rule];

	return r->n_alts ? r->alts[r->n_alts - 1].n : 0;
}

int gb_repeat_tail(struct gbuilder *gb, uint32_t rule, uint32_t mark, uint32_t min, uint32_t max,
                   struct ig_errbuf *eb)
{
	struct gb__rule *r = &gb->rules[rule];
	struct gb__alt *a = r->n_alts ? &r->alts[r->n_alts - 1] : NULL;
	struct gr_elem x;
	char base[96];
	uint32_t id, prev = 0;
	int rc;

	if (!a || mark >= a->n)
		return ig_errf(eb, IG_E_INVAL, "grammar: nothing to repeat in rule '%.64s'",
		               r->name);
	if (min > max || (max != GB_INF && max > GB_MAX_REPEAT) || min > GB_MAX_REPEAT)
		return ig_errf(eb, IG_E_INVAL,
		               "grammar: repetition {%u,%u} in rule '%.64s': need min <= max <= %u",
		               min, max, r->name, GB_MAX_REPEAT);
	snprintf(base, sizeof(base), "%.80s", r->name);
	if (a->n - mark == 1) {
		x = a->e[mark];
	} else {
		/* the repeated run becomes a rule of its own */
		uint32_t g;

		if ((rc = gb_fresh_rule(gb, base, &g, eb)) || (rc = gb_alt(gb, g, eb)))
			return rc;
		r = &gb->rules[rule]; /* gb_fresh_rule may move the rules */
		a = &r->alts[r->n_alts - 1];
		for (uint32_t i = mark; i < a->n; i++)
			if ((rc = gb__push(gb, g, a->e[i].kind, a->e[i].arg, eb)))
				return rc;
		x = (struct gr_elem){GE_REF, g};
	}
	gb->n_elems -= a->n - mark;
	a->n = mark;
	for (uint32_t i = 0; i < min; i++)
		if ((rc = gb__push(gb, rule, x.kind, x.arg, eb)))
			return rc;
	if (max == GB_INF) {
		/* S ::= X S | empty: the tail reference costs no stack */
		if ((rc = gb_fresh_rule(gb, base, &id, eb)) || (rc = gb_alt(gb, id, eb)) ||
		    (rc = gb__push(gb, id, x.kind, x.arg, eb)) || (rc = gb_ref(gb, id, id, eb)) ||
		    (rc = gb_alt(gb, id, eb)))
			return rc;
		return gb_ref(gb, rule, id, eb);
	}
	if (max == min)
		return 0;
	/* O1 ::= X | empty; Oj ::= X O(j-1) | empty */
	for (uint32_t j = 1; j <= max - min; j++) {
		if ((rc = gb_fresh_rule(gb, base, &id, eb)) || (rc = gb_alt(gb, id, eb)) ||
		    (rc = gb__push(gb, id, x.kind, x.arg, eb)))
			return rc;
		if (j > 1 && (rc = gb_ref(gb, id, prev, eb)))
			return rc;
		if ((rc = gb_alt(gb, id, eb)))
			return rc;
		prev = id;
	}
	return gb_ref(gb, rule, prev, eb);
}

/* ---- compile --------------------------------------------------------------------------- */

/*
 * Left recursion: a depth-first walk over "A may begin with B" edges (B
 * referenced after only nullable elements of an alternative of A), colour
 * 1 on the path; a back edge to the path is a cycle, named from its start.
 */
static int gb__leftrec(const struct gbuilder *gb, const bool *nullable, uint8_t *colour,
                       uint32_t *path, uint32_t depth, uint32_t r, struct ig_errbuf *eb)
{
	const struct gb__rule *rule = &gb->rules[r];

	colour[r] = 1;
	path[depth] = r;
	for (uint32_t a = 0; a < rule->n_alts; a++)
		for (uint32_t i = 0; i < rule->alts[a].n; i++) {
			struct gr_elem e = rule->alts[a].e[i];
			int rc;

			if (e.kind != GE_REF)
				break;
			if (colour[e.arg] == 1) {
				char msg[400];
				size_t o = 0;
				uint32_t s = depth;

				while (path[s] != e.arg)
					s--;
				for (uint32_t k = s; k <= depth && o < sizeof(msg) - 70; k++)
					o += (size_t)snprintf(msg + o, sizeof(msg) - o, "%.64s -> ",
					                      gb->rules[path[k]].name);
				snprintf(msg + o, sizeof(msg) - o, "%.64s", gb->rules[e.arg].name);
				return ig_errf(
				    eb, IG_E_INVAL,
				    "grammar: left recursion: rule '%.64s' can reach itself "
				    "without consuming a byte (%s); rewrite it right-recursive "
				    "(or a repeated item can match the empty string)",
				    gb->rules[e.arg].name, msg);
			}
			if (!colour[e.arg] &&
			    (rc = gb__leftrec(gb, nullable, colour, path, depth + 1, e.arg, eb)))
				return rc;
			if (!nullable[e.arg])
				break;
		}
	colour[r] = 2;
	return 0;
}

static uint64_t gb__mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
	return h * 0xff51afd7ed558ccdull;
}

int gb_compile(struct gbuilder *gb, const char *root, struct grammar **out, struct ig_errbuf *eb)
{
	int32_t r0 = gb__find(gb, root);
	uint32_t *order = NULL, *newid = NULL, *path = NULL, n = 0, n_alts = 0, n_el = 0;
	bool *nullable = NULL;
	uint8_t *colour = NULL;
	struct grammar *g = NULL;
	int rc = 0;

	*out = NULL;
	if (r0 < 0 || !gb->rules[r0].n_alts)
		return ig_errf(eb, IG_E_INVAL, "grammar: no rule '%.64s' to start from", root);
	order = malloc(gb->n_rules * sizeof(*order));
	newid = malloc(gb->n_rules * sizeof(*newid));
	path = malloc(gb->n_rules * sizeof(*path));
	nullable = calloc(gb->n_rules, sizeof(*nullable));
	colour = calloc(gb->n_rules, 1);
	if (!order || !newid || !path || !nullable || !colour) {
		rc = ig_errf(eb, IG_E_NOMEM, "grammar: no memory to compile");
		goto out;
	}
	/* the rules reachable from the root, breadth first */
	memset(newid, 0xff, gb->n_rules * sizeof(*newid));
	order[n] = (uint32_t)r0;
	newid[r0] = n++;
	for (uint32_t q = 0; q < n; q++) {
		const struct gb__rule *r = &gb->rules[order[q]];

		for (uint32_t a = 0; a < r->n_alts; a++) {
			n_alts++;
			n_el += r->alts[a].n + 1;
			for (uint32_t i = 0; i < r->alts[a].n; i++) {
				uint32_t t = r->alts[a].e[i].arg;

				if (r->alts[a].e[i].kind != GE_REF || newid[t] != UINT32_MAX)
					continue;
				if (!gb->rules[t].n_alts) {
					rc = ig_errf(
					    eb, IG_E_INVAL,
					    "grammar: rule '%.64s' is used by '%.64s' but never "
					    "defined",
					    gb->rules[t].name, r->name);
					goto out;
				}
				order[n] = t;
				newid[t] = n++;
			}
		}
	}
	/* nullable rules, to a fixed point */
	for (bool changed = true; changed;) {
		changed = false;
		for (uint32_t q = 0; q < n; q++) {
			const struct gb__rule *r = &gb->rules[order[q]];

			if (nullable[order[q]])
				continue;
			for (uint32_t a = 0; a < r->n_alts && !nullable[order[q]]; a++) {
				uint32_t i = 0;

				while (i < r->alts[a].n && r->alts[a].e[i].kind == GE_REF &&
				       nullable[r->alts[a].e[i].arg])
					i++;
				if (i == r->alts[a].n)
					nullable[order[q]] = changed = true;
			}
		}
	}
	for (uint32_t q = 0; q < n; q++)
		if (!colour[order[q]] &&
		    (rc = gb__leftrec(gb, nullable, colour, path, 0, order[q], eb)))
			goto out;

	g = calloc(1, sizeof(*g));
	if (!g) {
		rc = ig_errf(eb, IG_E_NOMEM, "grammar: no memory to compile");
		goto out;
	}
	g->n_rules = n;
	g->names = calloc(n, sizeof(*g->names));
	g->rule_alt = malloc((n + 1) * sizeof(*g->rule_alt));
	g->alt_pos = malloc((n_alts ? n_alts : 1) * sizeof(*g->alt_pos));
	g->el = malloc(n_el * sizeof(*g->el));
	g->sets = malloc((gb->n_sets ? gb->n_sets : 1) * sizeof(*g->sets));
	if (!g->names || !g->rule_alt || !g->alt_pos || !g->el || !g->sets) {
		rc = ig_errf(eb, IG_E_NOMEM, "grammar: no memory to compile");
		goto out;
	}
	if (gb->n_sets)
		memcpy(g->sets, gb->sets, gb->n_sets * sizeof(*g->sets));
	g->n_sets = gb->n_sets;
	g->fp = gb__mix(0, gb->n_sets);
	for (uint32_t s = 0; s < gb->n_sets; s++)
		for (int k = 0; k < 4; k++)
			g->fp = gb__mix(g->fp, g->sets[s][k]);
	n_alts = n_el = 0;
	for (uint32_t q = 0; q < n; q++) {
		const struct gb__rule *r = &gb->rules[order[q]];

		g->names[q] = strdup(r->name);
		if (!g->names[q]) {
			rc = ig_errf(eb, IG_E_NOMEM, "grammar: no memory to compile");
			goto out;
		}
		g->rule_alt[q] = n_alts;
		for (uint32_t a = 0; a < r->n_alts; a++) {
			g->alt_pos[n_alts++] = n_el;
			for (uint32_t i = 0; i < r->alts[a].n; i++) {
				struct gr_elem e = r->alts[a].e[i];

				if (e.kind == GE_REF)
					e.arg = newid[e.arg];
				g->el[n_el++] = e;
				g->fp = gb__mix(g->fp, (uint64_t)e.kind << 32 | e.arg);
			}
			g->el[n_el++] = (struct gr_elem){GE_END, 0};
			g->fp = gb__mix(g->fp, 0xE11D);
		}
	}
	g->rule_alt[n] = n_alts;
	g->n_el = n_el;
	g->root = 0;
	if ((rc = gm__start(g, eb)))
		goto out;
	*out = g;
	g = NULL;
out:
	grammar_destroy(g);
	free(order);
	free(newid);
	free(path);
	free(nullable);
	free(colour);
	return rc;
}

void grammar_destroy(struct grammar *g)
{
	if (!g)
		return;
	for (uint32_t i = 0; g->names && i < g->n_rules; i++)
		free(g->names[i]);
	free(g->names);
	free(g->rule_alt);
	free(g->alt_pos);
	free(g->el);
	free(g->sets);
	free(g->start_w);
	gmc_release(&g->cache);
	gl__shared_release(g);
	free(g);
}

uint32_t grammar_n_rules(const struct grammar *g)
{
	return g->n_rules;
}

uint32_t grammar_n_elems(const struct grammar *g)
{
	return g->n_el;
}

uint64_t grammar_fingerprint(const struct grammar *g)
{
	return g->fp;
}

void grammar_set_class_masks(struct grammar *g, bool on)
{
	g->plain = !on;
}

uint64_t grammar_class_masks(const struct grammar *g)
{
	return g->cache.class_masks;
}
