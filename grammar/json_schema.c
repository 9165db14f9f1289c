/*
 * json_schema.c - JSON Schema to grammar (json_schema.h).
 *
 * The schema is translated to the grammar's text form, one rule per
 * schema node ("r7 ::= ..."), on top of a fixed prelude (ws, string,
 * number, any value), and that text is parsed: one path into the IR, and
 * a text an operator can read (gs_to_gbnf). Each node is checked against
 * the keywords we know before anything is emitted for it, so that a
 * schema we would silently misread is refused instead, naming the place
 * (a JSON pointer) and the keyword.
 *
 * Objects: with properties p1..pk in schema order, F(i) is "the members
 * from pi on, at least one" and K(i) "the members from pi on, after one
 * already written" (each led by a comma); a required pi must appear, an
 * optional one may be skipped. Linear in k, and no two ws ever touch (two
 * optional whitespaces in a row would allow two spaces and fork stacks).
 * Patterns: a regular subset translated to the text form's items, each
 * character produced in its JSON-escaped form where JSON needs one.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema.h"

#define GS_SUPPORTED                                                                               \
	"type, properties, required, additionalProperties, items, minItems, maxItems, enum, "      \
	"const, anyOf, $ref, $defs, definitions, minLength, maxLength, pattern, nullable"

/* Whitespace between tokens: one space, or a newline and an indent of up to
 * 32 spaces or tabs (16 levels of 2-space indent); none twice in a row. */
static const char gs_prelude[] =
    "ws ::= ( \" \" | \"\\n\" [ \\t]{0,32} )?\n"
    "char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    /* a length-bounded string's character: one code point that is also one
     * UTF-16 unit (none past U+FFFF, no surrogate escape), so that JSON
     * Schema's length in code points and a JavaScript validator's in
     * UTF-16 units (zod's .max) agree on it */
    "bchar ::= [^\"\\\\\\x00-\\x1f\\U00010000-\\U0010FFFF] | \"\\\\\" ( [\"\\\\/bfnrt] | "
    "\"u\" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )\n"
    "digits ::= \"0\" | [1-9] [0-9]{0,18}\n"
    "integer ::= \"-\"? digits\n"
    "number ::= \"-\"? digits ( \".\" [0-9]{1,18} )? ( [eE] [-+]? [0-9]{1,3} )?\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "value ::= object | array | string | number | boolean | null\n"
    "member ::= string ws \":\" ws value\n"
    "object ::= \"{\" ws ( member ( ws \",\" ws member )* ws )? \"}\"\n"
    "array ::= \"[\" ws ( value ( ws \",\" ws value )* ws )? \"]\"\n";

struct gs_buf {
	char *s;
	size_t n, cap;
	bool oom;
};

struct gs {
	json_t *root;
	struct gs_buf out;
	struct ig_errbuf *eb;
	json_t *refs; /* "$ref" string -> its rule's name */
	unsigned next;
	const char *prefix; /* of every rule name it makes ("" or a part's) */
	/* a raw string (gs_raw_string_gbnf): the ASCII characters it never
	 * holds; NULL for JSON */
	const char *raw;
	unsigned depth;
	char path[1024];
	size_t plen;
};

/* Schemas nested deeper than this are refused (each level a few C frames). */
#define GS_MAX_DEPTH 128u

static void gs__put(struct gs_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void gs__put(struct gs_buf *b, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (b->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		k = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
		va_end(ap);
		if (k < 0) {
			b->oom = true;
			return;
		}
		if ((size_t)k < b->cap - b->n) {
			b->n += (size_t)k;
			return;
		}
		{
			size_t nc = (b->cap + (size_t)k + 1) * 2;
			char *t = realloc(b->s, nc);

			if (!t) {
				b->oom = true;
				return;
			}
			b->s = t;
			b->cap = nc;
		}
	}
}

/* bytes as a literal of the text form */
static void gs__lit(struct gs_buf *b, const char *s, size_t n)
{
	gs__put(b, "\"");
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			gs__put(b, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			gs__put(b, "\\x%02x", c);
		else
			gs__put(b, "%c", c);
	}
	gs__put(b, "\"");
}

static int gs__err(struct gs *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int gs__err(struct gs *g, const char *fmt, ...)
{
	char what[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return ig_errf(g->eb, IG_E_INVAL, "schema at %s: %s", g->plen ? g->path : "/", what);
}

/* Push a JSON pointer segment (escaped); returns the length to pop to. */
static size_t gs__push(struct gs *g, const char *seg)
{
	size_t old = g->plen;

	if (g->plen + 2 < sizeof(g->path))
		g->path[g->plen++] = '/';
	for (const char *p = seg; *p && g->plen + 3 < sizeof(g->path); p++) {
		if (*p == '~' || *p == '/') {
			g->path[g->plen++] = '~';
			g->path[g->plen++] = *p == '~' ? '0' : '1';
		} else {
			g->path[g->plen++] = *p;
		}
	}
	g->path[g->plen] = 0;
	return old;
}

static void gs__pop(struct gs *g, size_t to)
{
	g->plen = to;
	g->path[to] = 0;
}

static size_t gs__push_index(struct gs *g, size_t i)
{
	char seg[24];

	snprintf(seg, sizeof(seg), "%zu", i);
	return gs__push(g, seg);
}

static void gs__name(struct gs *g, char *name, size_t cap)
{
	snprintf(name, cap, "%sr%u", g->prefix, g->next++);
}

/* ---- keywords ------------------------------------------------------------------------ */

static const char *const gs_known[] = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "$defs",
    "definitions",
    "minLength",
    "maxLength",
    "pattern",
    /* OpenAPI 3.0's "also null", which client libraries write for a
     * nullable field (zod's .nullable() through OpenAI's helper) */
    "nullable",
    /* annotations: no effect on what is valid */
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "$schema",
    "$id",
    "deprecated",
    "readOnly",
    "writeOnly",
    "strict",
};

static int gs__check_keys(struct gs *g, json_t *s)
{
	const char *k;
	json_t *v;

	json_object_foreach(s, k, v)
	{
		size_t i = 0, n = sizeof(gs_known) / sizeof(gs_known[0]);

		while (i < n && strcmp(gs_known[i], k))
			i++;
		if (i == n)
			return gs__err(g, "'%.64s' is not supported; supported: " GS_SUPPORTED, k);
	}
	(void)v;
	return 0;
}

/* An unsigned keyword's value (absent: dflt). */
static int gs__count(struct gs *g, json_t *s, const char *key, uint32_t dflt, uint32_t *v)
{
	json_t *x = json_object_get(s, key);
	json_int_t i;

	*v = dflt;
	if (!x)
		return 0;
	if (!json_is_integer(x) || (i = json_integer_value(x)) < 0)
		return gs__err(g, "'%s' must be a non-negative integer", key);
	if (i > GB_MAX_REPEAT)
		return gs__err(g, "'%s' %lld is past the largest supported, %u", key, (long long)i,
		               GB_MAX_REPEAT);
	*v = (uint32_t)i;
	return 0;
}

static int gs__schema(struct gs *g, json_t *s, const char *name);

/* A sub-schema at path segment `seg` (NULL: same path) into a new rule. */
static int gs__sub(struct gs *g, json_t *s, const char *seg, char *name, size_t cap)
{
	size_t old = seg ? gs__push(g, seg) : g->plen;
	int rc;

	gs__name(g, name, cap);
	rc = gs__schema(g, s, name);
	if (!rc)
		gs__pop(g, old);
	return rc;
}

/* ---- $ref ------------------------------------------------------------------------------- */

static int gs__ref(struct gs *g, const char *ref, char *name, size_t cap)
{
	json_t *memo = json_object_get(g->refs, ref), *target = NULL;
	const char *rest = NULL;
	char seg[256], saved[sizeof(g->path)];
	size_t saved_len = g->plen;
	int rc;

	if (memo) {
		snprintf(name, cap, "%s", json_string_value(memo));
		return 0;
	}
	if (!strcmp(ref, "#")) {
		target = g->root;
	} else if (!strncmp(ref, "#/$defs/", 8) || !strncmp(ref, "#/definitions/", 14)) {
		const char *key = ref[2] == '$' ? "$defs" : "definitions";
		size_t o = 0;

		rest = ref + (ref[2] == '$' ? 8 : 14);
		/* one segment, ~0 and ~1 unescaped */
		for (const char *p = rest; *p && o + 1 < sizeof(seg); p++) {
			if (*p == '/')
				return gs__err(g,
				               "$ref '%.128s' is not supported; supported: '#', "
				               "'#/$defs/NAME', '#/definitions/NAME'",
				               ref);
			if (*p == '~' && (p[1] == '0' || p[1] == '1')) {
				seg[o++] = p[1] == '0' ? '~' : '/';
				p++;
			} else {
				seg[o++] = *p;
			}
		}
		seg[o] = 0;
		target = json_object_get(json_object_get(g->root, key), seg);
		if (!target)
			return gs__err(g, "$ref '%.128s' names no schema", ref);
	} else {
		return gs__err(g,
		               "$ref '%.128s' is not supported; supported: '#', '#/$defs/NAME', "
		               "'#/definitions/NAME'",
		               ref);
	}
	gs__name(g, name, cap);
	if (json_object_set_new(g->refs, ref, json_string(name)))
		return ig_errf(g->eb, IG_E_NOMEM, "schema: no memory");
	/* the target's own path, for its messages */
	memcpy(saved, g->path, saved_len + 1);
	g->plen = 0;
	g->path[0] = 0;
	if (rest) {
		gs__push(g, ref[2] == '$' ? "$defs" : "definitions");
		gs__push(g, seg);
	}
	rc = gs__schema(g, target, name);
	if (!rc) {
		memcpy(g->path, saved, saved_len + 1);
		g->plen = saved_len;
	}
	return rc;
}

/* ---- patterns ------------------------------------------------------------------------- */

struct gs_re {
	struct gs *g;
	const char *s;
	size_t n, i;
	unsigned depth;
};

static int gs__re_err(struct gs_re *r, const char *what)
{
	return gs__err(r->g, "pattern '%.128s' at offset %zu: %s", r->s, r->i, what);
}

/* Decode one UTF-8 codepoint of the pattern. */
static int gs__re_cp(struct gs_re *r, uint32_t *cp)
{
	unsigned char c = (unsigned char)r->s[r->i];
	unsigned n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
	uint32_t v = n == 1 ? c : n == 4 ? c & 7u : n == 3 ? c & 15u : c & 31u;

	if (r->i + n > r->n)
		return gs__re_err(r, "invalid UTF-8");
	for (unsigned k = 1; k < n; k++)
		v = v << 6 | ((unsigned char)r->s[r->i + k] & 63u);
	r->i += n;
	*cp = v;
	return 0;
}

/* A codepoint as the JSON string's content writes it: an item. */
static void gs__re_json_char(struct gs_buf *b, uint32_t c)
{
	if (c == '"')
		gs__put(b, "\"\\\\\\\"\"");
	else if (c == '\\')
		gs__put(b, "\"\\\\\\\\\"");
	else if (c == '\n')
		gs__put(b, "\"\\\\n\"");
	else if (c == '\t')
		gs__put(b, "\"\\\\t\"");
	else if (c == '\r')
		gs__put(b, "\"\\\\r\"");
	else if (c < 0x20)
		gs__put(b, "\"\\\\u00%02x\"", c);
	else
		gs__put(b, "[\\U%08X]", c);
}

/* Is c one of the characters a raw string never holds? */
static bool gs__raw_out(const struct gs *g, uint32_t c)
{
	return c && c < 0x80 && strchr(g->raw, (int)c);
}

/* A codepoint of the pattern as an item: JSON-escaped, or itself in a raw
 * string (where a character ruled out is an error). */
static int gs__re_char(struct gs_re *r, struct gs_buf *b, uint32_t c)
{
	if (!r->g->raw) {
		gs__re_json_char(b, c);
		return 0;
	}
	if (gs__raw_out(r->g, c)) {
		char what[96];

		snprintf(what, sizeof what, "'%c' cannot be written in this raw text", (char)c);
		return gs__re_err(r, what);
	}
	gs__put(b, "[\\U%08X]", c);
	return 0;
}

/* A set of codepoint ranges (sorted, merged) as one item: the raw
 * characters JSON allows in a class, the others in escaped forms. */
static void gs__re_json_set(struct gs_buf *b, const uint32_t (*rg)[2], size_t n)
{
	bool any_raw = false, first = true;

	gs__put(b, "(");
	for (size_t k = 0; k < n; k++) {
		uint32_t lo = rg[k][0] < 0x20 ? 0x20 : rg[k][0], hi = rg[k][1];

		if (hi < 0x20)
			continue;
		/* the raw part, less '"' and '\\', which JSON escapes */
		{
			static const uint32_t cut[2] = {'"', '\\'};
			uint32_t a = lo;

			for (int k2 = 0; k2 < 3; k2++) {
				uint32_t z = k2 < 2 ? cut[k2] : hi + 1;

				if (k2 < 2 && (z < a || z > hi))
					continue;
				if (z > a) {
					gs__put(b, any_raw ? "\\U%08X-\\U%08X" : "[\\U%08X-\\U%08X",
					        a, z - 1);
					any_raw = true;
				}
				a = z + 1;
			}
		}
	}
	if (any_raw) {
		gs__put(b, "]");
		first = false;
	}
	for (size_t k = 0; k < n; k++)
		for (uint32_t c = rg[k][0]; c <= rg[k][1] && c < 0x80; c++)
			if (c < 0x20 || c == '"' || c == '\\') {
				gs__put(b, first ? "" : " | ");
				gs__re_json_char(b, c);
				first = false;
			}
	gs__put(b, ")");
}

/* A set of codepoint ranges (sorted, merged) as one item; in a raw string
 * the characters themselves, less those ruled out (none left: an error). */
static int gs__re_set(struct gs_re *r, struct gs_buf *b, const uint32_t (*rg)[2], size_t n)
{
	bool any = false;

	if (!r->g->raw) {
		gs__re_json_set(b, rg, n);
		return 0;
	}
	gs__put(b, "[");
	for (size_t k = 0; k < n; k++) {
		uint32_t lo = rg[k][0], hi = rg[k][1], a = lo;

		/* the ASCII part less what is ruled out, then the rest whole */
		for (uint32_t c = lo; c <= hi && c < 0x80; c++)
			if (gs__raw_out(r->g, c)) {
				if (c > a) {
					gs__put(b, "\\U%08X-\\U%08X", a, c - 1);
					any = true;
				}
				a = c + 1;
			}
		if (a <= hi) {
			gs__put(b, "\\U%08X-\\U%08X", a, hi);
			any = true;
		}
	}
	gs__put(b, "]");
	return any ? 0 : gs__re_err(r, "a class that matches nothing this raw text may hold");
}

static int gs__cmp_rg(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* ranges (cap 64) from a shorthand \d \w \s (positive form) */
static size_t gs__shorthand(char c, uint32_t (*rg)[2])
{
	switch (c) {
	case 'd':
		rg[0][0] = '0', rg[0][1] = '9';
		return 1;
	case 'w':
		rg[0][0] = '0', rg[0][1] = '9';
		rg[1][0] = 'A', rg[1][1] = 'Z';
		rg[2][0] = '_', rg[2][1] = '_';
		rg[3][0] = 'a', rg[3][1] = 'z';
		return 4;
	case 's':
		rg[0][0] = '\t', rg[0][1] = '\n';
		rg[1][0] = '\r', rg[1][1] = '\r';
		rg[2][0] = ' ', rg[2][1] = ' ';
		return 3;
	}
	return 0;
}

/* Sort, merge, and complement when negated, over 0..0x10FFFF. */
static size_t gs__norm(uint32_t (*rg)[2], size_t n, bool neg)
{
	size_t k = 0;

	qsort(rg, n, sizeof(*rg), gs__cmp_rg);
	for (size_t i = 0; i < n; i++) {
		if (k && rg[i][0] <= rg[k - 1][1] + 1) {
			if (rg[i][1] > rg[k - 1][1])
				rg[k - 1][1] = rg[i][1];
		} else {
			rg[k][0] = rg[i][0], rg[k][1] = rg[i][1], k++;
		}
	}
	if (neg) {
		uint32_t(*t)[2] = malloc((k + 1) * sizeof(*t));
		uint32_t c = 0;
		size_t j = 0;

		if (!t)
			return 0;
		for (size_t i = 0; i < k; i++) {
			if (rg[i][0] > c)
				t[j][0] = c, t[j][1] = rg[i][0] - 1, j++;
			c = rg[i][1] + 1;
		}
		if (c <= 0x10FFFF)
			t[j][0] = c, t[j][1] = 0x10FFFF, j++;
		memcpy(rg, t, j * sizeof(*t));
		free(t);
		k = j;
	}
	return k;
}

/* An escape outside or inside a class: a codepoint, or a shorthand's
 * ranges (returns their count, 0 for a codepoint in *cp). */
static int gs__re_escape(struct gs_re *r, uint32_t *cp, uint32_t (*rg)[2], size_t *nrg, bool *neg)
{
	char c;

	*nrg = 0;
	*neg = false;
	if (++r->i >= r->n)
		return gs__re_err(r, "an escape at the end");
	c = r->s[r->i++];
	switch (c) {
	case 'd':
	case 'w':
	case 's':
		*nrg = gs__shorthand(c, rg);
		return 0;
	case 'D':
	case 'W':
	case 'S':
		*nrg = gs__shorthand((char)(c + 32), rg);
		*neg = true;
		return 0;
	case 'n':
		*cp = '\n';
		return 0;
	case 't':
		*cp = '\t';
		return 0;
	case 'r':
		*cp = '\r';
		return 0;
	case 'f':
		*cp = '\f';
		return 0;
	case 'v':
		*cp = '\v';
		return 0;
	case 'u': {
		uint32_t v = 0;

		for (int k = 0; k < 4; k++, r->i++) {
			char h = r->i < r->n ? r->s[r->i] : 0;

			if (h >= '0' && h <= '9')
				v = v << 4 | (uint32_t)(h - '0');
			else if ((h | 32) >= 'a' && (h | 32) <= 'f')
				v = v << 4 | (uint32_t)((h | 32) - 'a' + 10);
			else
				return gs__re_err(r, "\\u needs four hexadecimal digits");
		}
		*cp = v;
		return 0;
	}
	default:
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
			r->i--;
			return gs__re_err(r, "this escape (a word boundary, a back-reference, a "
			                     "property class?) is not supported");
		}
		*cp = (uint32_t)(unsigned char)c;
		return 0;
	}
}

static int gs__re_class(struct gs_re *r, struct gs_buf *b)
{
	uint32_t(*rg)[2] = NULL;
	size_t n = 0, cap = 0;
	bool neg = false;
	int rc = 0;

	r->i++;
	if (r->i < r->n && r->s[r->i] == '^')
		neg = true, r->i++;
	for (bool first = true;; first = false) {
		uint32_t lo, hi, sh[4][2];
		size_t nsh = 0;
		bool shneg = false;

		if (r->i >= r->n) {
			rc = gs__re_err(r, "a class with no closing ']'");
			goto out;
		}
		if (r->s[r->i] == ']' && !first) {
			r->i++;
			break;
		}
		if (n + 8 > cap) {
			size_t nc = cap ? cap * 2 : 16;
			void *t = realloc(rg, nc * sizeof(*rg));

			if (!t) {
				rc = ig_errf(r->g->eb, IG_E_NOMEM, "schema: no memory");
				goto out;
			}
			rg = t;
			cap = nc;
		}
		if (r->s[r->i] == '\\') {
			if ((rc = gs__re_escape(r, &lo, sh, &nsh, &shneg)))
				goto out;
			if (nsh) {
				if (shneg) {
					rc = gs__re_err(r,
					                "a negated shorthand (\\D \\W \\S) inside "
					                "a class is not supported");
					goto out;
				}
				memcpy(rg + n, sh, nsh * sizeof(*sh));
				n += nsh;
				continue;
			}
		} else if ((rc = gs__re_cp(r, &lo))) {
			goto out;
		}
		hi = lo;
		if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
			r->i++;
			if (r->s[r->i] == '\\') {
				if ((rc = gs__re_escape(r, &hi, sh, &nsh, &shneg)))
					goto out;
				if (nsh) {
					rc = gs__re_err(r, "a range ending in a shorthand");
					goto out;
				}
			} else if ((rc = gs__re_cp(r, &hi))) {
				goto out;
			}
			if (hi < lo) {
				rc = gs__re_err(r, "a range that runs backwards");
				goto out;
			}
		}
		rg[n][0] = lo, rg[n][1] = hi, n++;
	}
	n = gs__norm(rg, n, neg);
	if (!n) {
		rc = gs__re_err(r, "a class that matches nothing");
		goto out;
	}
	rc = gs__re_set(r, b, (const uint32_t(*)[2])rg, n);
out:
	free(rg);
	return rc;
}

static int gs__re_alt(struct gs_re *r, struct gs_buf *b);

static int gs__re_atom(struct gs_re *r, struct gs_buf *b)
{
	char c = r->s[r->i];
	int rc;

	if (c == '(') {
		if (++r->depth > 64)
			return gs__re_err(r, "groups nested deeper than 64");
		r->i++;
		if (r->i + 1 < r->n && r->s[r->i] == '?') {
			if (r->s[r->i + 1] != ':')
				return gs__re_err(
				    r, "look-arounds and named groups are not supported");
			r->i += 2;
		}
		gs__put(b, "(");
		if ((rc = gs__re_alt(r, b)))
			return rc;
		if (r->i >= r->n || r->s[r->i] != ')')
			return gs__re_err(r, "a group with no closing ')'");
		r->i++;
		r->depth--;
		gs__put(b, ")");
		return 0;
	}
	if (c == '[')
		return gs__re_class(r, b);
	if (c == '.') {
		/* any character but a newline */
		uint32_t rg[2][2] = {{0, '\n' - 1}, {'\n' + 1, 0x10FFFF}};

		r->i++;
		return gs__re_set(r, b, (const uint32_t(*)[2])rg, 2);
	}
	if (c == '\\') {
		uint32_t cp = 0, rg[8][2];
		size_t nrg;
		bool neg;

		if ((rc = gs__re_escape(r, &cp, rg, &nrg, &neg)))
			return rc;
		if (nrg) {
			nrg = gs__norm(rg, nrg, neg);
			return gs__re_set(r, b, (const uint32_t(*)[2])rg, nrg);
		}
		return gs__re_char(r, b, cp);
	}
	if (c == '*' || c == '+' || c == '?' || c == '{')
		return gs__re_err(r, "a repetition with nothing to repeat");
	if (c == '^' || c == '$')
		return gs__re_err(r, "an anchor inside the pattern (only ^ first and $ last, "
		                     "which are implied)");
	{
		uint32_t cp;

		if ((rc = gs__re_cp(r, &cp)))
			return rc;
		return gs__re_char(r, b, cp);
	}
}

static int gs__re_quant(struct gs_re *r, struct gs_buf *b)
{
	char c;

	if (r->i >= r->n)
		return 0;
	c = r->s[r->i];
	if (c == '*' || c == '+' || c == '?') {
		gs__put(b, "%c", c);
		r->i++;
	} else if (c == '{') {
		unsigned long m, x = ULONG_MAX;
		char *end;

		m = strtoul(r->s + r->i + 1, &end, 10);
		if (end == r->s + r->i + 1)
			return gs__re_err(r, "'{' must start a repetition {m}, {m,} or {m,n}");
		if (*end == ',') {
			char *e2;

			x = strtoul(end + 1, &e2, 10);
			if (e2 == end + 1)
				x = ULONG_MAX;
			end = e2;
		} else {
			x = m;
		}
		if (*end != '}')
			return gs__re_err(r, "a repetition with no closing '}'");
		if (m > GB_MAX_REPEAT || (x != ULONG_MAX && (x > GB_MAX_REPEAT || x < m)))
			return gs__re_err(r, "a repetition's bounds out of order or past 10000");
		if (x == ULONG_MAX)
			gs__put(b, "{%lu,}", m);
		else
			gs__put(b, "{%lu,%lu}", m, x);
		r->i = (size_t)(end - r->s) + 1;
	} else {
		return 0;
	}
	/* a lazy or possessive mark changes the match, not the language */
	if (r->i < r->n && (r->s[r->i] == '?' || r->s[r->i] == '+'))
		r->i++;
	if (r->i < r->n && strchr("*+?{", r->s[r->i]))
		return gs__re_err(r, "a repetition of a repetition");
	return 0;
}

static int gs__re_alt(struct gs_re *r, struct gs_buf *b)
{
	int rc;

	for (;;) {
		while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
			if (r->s[r->i] == '$' && r->i + 1 == r->n && r->depth == 0) {
				r->i++;
				break;
			}
			gs__put(b, " ");
			if ((rc = gs__re_atom(r, b)) || (rc = gs__re_quant(r, b)))
				return rc;
		}
		if (r->i < r->n && r->s[r->i] == '|') {
			r->i++;
			gs__put(b, " |");
			continue;
		}
		return 0;
	}
}

static int gs__pattern(struct gs *g, const char *pat, struct gs_buf *b)
{
	struct gs_re r = {g, pat, strlen(pat), 0, 0};
	int rc;

	if (r.n && pat[0] == '^')
		r.i++;
	gs__put(b, g->raw ? "(" : "\"\\\"\" (");
	if ((rc = gs__re_alt(&r, b)))
		return rc;
	if (r.i < r.n)
		return gs__re_err(&r, "a ')' with no group open");
	gs__put(b, g->raw ? " )" : " ) \"\\\"\"");
	return 0;
}

/* ---- types ------------------------------------------------------------------------------ */

/* A class of the text form: one codepoint that a raw string may hold,
 * less the bytes of `less` too; past U+FFFF only when `astral`. */
static void gs__raw_class(const struct gs *g, const char *less, bool astral, struct gs_buf *b)
{
	gs__put(b, "[^\\x00");
	for (const char *c = g->raw; *c; c++)
		gs__put(b, "\\x%02X", (unsigned char)*c);
	for (const char *c = less ? less : ""; *c; c++)
		gs__put(b, "\\x%02X", (unsigned char)*c);
	gs__put(b, "%s]", astral ? "" : "\\U00010000-\\U0010FFFF");
}

/* A raw string of lo to hi codepoints (hi UINT32_MAX: no bound), none of
 * no_first (may be NULL) first. */
static void gs__raw_bounds(struct gs *g, uint32_t lo, uint32_t hi, bool bounded,
                           const char *no_first, struct gs_buf *b)
{
	if (hi == 0) {
		gs__put(b, "\"\"");
		return;
	}
	/* a length counts codepoints; bounded, none past U+FFFF (as bchar) */
	gs__put(b, "( ");
	if (no_first && *no_first) {
		/* a first character apart, then the rest (all optional at 0) */
		gs__raw_class(g, no_first, !bounded, b);
		gs__put(b, " ");
		hi = hi == UINT32_MAX ? hi : hi - 1;
		if (!lo) {
			gs__raw_class(g, NULL, !bounded, b);
			gs__put(b, hi == UINT32_MAX ? "* )?" : "{0,%u} )?", hi);
			return;
		}
		lo--;
	}
	gs__raw_class(g, NULL, !bounded, b);
	if (hi == UINT32_MAX)
		gs__put(b, "{%u,} )", lo);
	else
		gs__put(b, "{%u,%u} )", lo, hi);
}

/* A string: its JSON, or its raw text (g->raw; its first character none
 * of no_first). */
static int gs__string(struct gs *g, json_t *s, const char *no_first, struct gs_buf *b)
{
	json_t *pat = json_object_get(s, "pattern");
	bool bounded = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
	uint32_t lo, hi;
	int rc;

	if ((rc = gs__count(g, s, "minLength", 0, &lo)) ||
	    (rc = gs__count(g, s, "maxLength", UINT32_MAX, &hi)))
		return rc;
	if (pat) {
		size_t old;

		if (!json_is_string(pat))
			return gs__err(g, "'pattern' must be a string");
		if (bounded)
			return gs__err(
			    g, "'pattern' with 'minLength' or 'maxLength' is not supported");
		if (no_first && *no_first)
			return gs__err(g, "'pattern' where the text may not begin with some "
			                  "characters is not supported");
		old = gs__push(g, "pattern");
		rc = gs__pattern(g, json_string_value(pat), b);
		if (!rc)
			gs__pop(g, old);
		return rc;
	}
	if (hi != UINT32_MAX && hi < lo)
		return gs__err(g, "'maxLength' %u is below 'minLength' %u", hi, lo);
	if (g->raw)
		gs__raw_bounds(g, lo, hi, bounded, no_first, b);
	else if (!lo && hi == UINT32_MAX)
		gs__put(b, "string");
	else if (hi == UINT32_MAX)
		gs__put(b, "\"\\\"\" bchar{%u,} \"\\\"\"", lo);
	else
		gs__put(b, "\"\\\"\" bchar{%u,%u} \"\\\"\"", lo, hi);
	return 0;
}

static int gs__array(struct gs *g, json_t *s, const char *name, struct gs_buf *b)
{
	json_t *items = json_object_get(s, "items");
	char item[32];
	uint32_t lo, hi;
	int rc;

	if ((rc = gs__count(g, s, "minItems", 0, &lo)) ||
	    (rc = gs__count(g, s, "maxItems", UINT32_MAX, &hi)))
		return rc;
	if (hi != UINT32_MAX && hi < lo)
		return gs__err(g, "'maxItems' %u is below 'minItems' %u", hi, lo);
	if (items) {
		if (json_is_array(items))
			return gs__err(g, "'items' as an array (tuples) is not supported");
		if ((rc = gs__sub(g, items, "items", item, sizeof(item))))
			return rc;
	} else {
		snprintf(item, sizeof(item), "value");
	}
	(void)name;
	if (hi == 0) {
		gs__put(b, "\"[\" ws \"]\"");
		return 0;
	}
	gs__put(b, "( \"[\" ws %s ( ws \",\" ws %s )", item, item);
	if (hi == UINT32_MAX)
		gs__put(b, "{%u,}", lo ? lo - 1 : 0);
	else
		gs__put(b, "{%u,%u}", lo ? lo - 1 : 0, hi - 1);
	gs__put(b, " ws \"]\"");
	if (!lo)
		gs__put(b, " | \"[\" ws \"]\"");
	gs__put(b, " )");
	return 0;
}

static int gs__object(struct gs *g, json_t *s, const char *name, struct gs_buf *b)
{
	json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
	json_t *add = json_object_get(s, "additionalProperties"), *v;
	const char *k;
	size_t np = 0, i = 0, old;
	char extra[32] = "";
	bool all_optional = true;
	int rc;

	if (props && !json_is_object(props))
		return gs__err(g, "'properties' must be an object");
	if (req && !json_is_array(req))
		return gs__err(g, "'required' must be an array of names");
	if (add && !json_is_boolean(add) && !json_is_object(add))
		return gs__err(g, "'additionalProperties' must be a boolean or a schema");
	/* an object of no declared properties, and nothing said of others: any */
	if (!props && !add) {
		gs__put(b, "object");
		return 0;
	}
	np = props ? json_object_size(props) : 0;
	for (size_t r = 0; req && r < json_array_size(req); r++) {
		json_t *x = json_array_get(req, r);

		if (!json_is_string(x))
			return gs__err(g, "'required' must be an array of names");
		if (!props || !json_object_get(props, json_string_value(x)))
			return gs__err(g,
			               "'required' names '%.64s', which 'properties' does not "
			               "declare",
			               json_string_value(x));
	}
	if (add && json_is_object(add)) {
		if ((rc = gs__sub(g, add, "additionalProperties", extra, sizeof(extra))))
			return rc;
	} else if (add && json_is_true(add)) {
		snprintf(extra, sizeof(extra), "value");
	}
	/* the members: name-m<i> ::= "\"key\"" ws ":" ws value */
	old = gs__push(g, "properties");
	i = 0;
	json_object_foreach(props, k, v)
	{
		json_t *ks = json_string(k);
		char vr[32], *key = ks ? json_dumps(ks, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
		size_t o2 = gs__push(g, k);
		bool required = false;

		for (size_t r = 0; req && r < json_array_size(req); r++)
			required |= !strcmp(json_string_value(json_array_get(req, r)), k);
		all_optional &= !required;
		json_decref(ks);
		if (!key)
			return ig_errf(g->eb, IG_E_NOMEM, "schema: no memory");
		gs__name(g, vr, sizeof(vr));
		if ((rc = gs__schema(g, v, vr))) {
			free(key);
			return rc;
		}
		gs__pop(g, o2);
		gs__put(&g->out, "%s-m%zu ::= ", name, i);
		gs__lit(&g->out, key, strlen(key));
		gs__put(&g->out, " ws \":\" ws %s\n", vr);
		/* F(i): from here on, at least one; K(i): after one, comma-led */
		gs__put(&g->out, "%s-f%zu ::= %s-m%zu %s-k%zu", name, i, name, i, name, i + 1);
		if (!required && (i + 1 < np || extra[0]))
			gs__put(&g->out, " | %s-f%zu", name, i + 1);
		gs__put(&g->out, "\n%s-k%zu ::= ", name, i);
		if (required)
			gs__put(&g->out, "ws \",\" ws %s-m%zu %s-k%zu\n", name, i, name, i + 1);
		else
			gs__put(&g->out, "( ws \",\" ws %s-m%zu )? %s-k%zu\n", name, i, name,
			        i + 1);
		free(key);
		i++;
	}
	gs__pop(g, old);
	/* past the declared ones: extras, or nothing */
	if (extra[0]) {
		gs__put(&g->out, "%s-x ::= string ws \":\" ws %s\n", name, extra);
		gs__put(&g->out, "%s-f%zu ::= %s-x %s-k%zu\n", name, np, name, name, np);
		gs__put(&g->out, "%s-k%zu ::= ( ws \",\" ws %s-x )*\n", name, np, name);
	} else {
		gs__put(&g->out, "%s-k%zu ::= \"\"\n", name, np);
	}
	if (!np && !extra[0]) {
		gs__put(b, "\"{\" ws \"}\"");
		return 0;
	}
	gs__put(b, "( \"{\" ws %s-f0 ws \"}\"", name);
	if (all_optional)
		gs__put(b, " | \"{\" ws \"}\"");
	gs__put(b, " )");
	return 0;
}

static int gs__type(struct gs *g, json_t *s, const char *type, const char *name, struct gs_buf *b)
{
	if (!strcmp(type, "string"))
		return gs__string(g, s, NULL, b);
	if (!strcmp(type, "array"))
		return gs__array(g, s, name, b);
	if (!strcmp(type, "object"))
		return gs__object(g, s, name, b);
	if (!strcmp(type, "integer") || !strcmp(type, "number") || !strcmp(type, "boolean") ||
	    !strcmp(type, "null")) {
		gs__put(b, "%s", type);
		return 0;
	}
	return gs__err(g,
	               "type '%.32s' is not one of object, array, string, integer, number, "
	               "boolean, null",
	               type);
}

/* A literal JSON value (enum, const), compact. */
static int gs__value_lit(struct gs *g, json_t *v, struct gs_buf *b)
{
	char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);

	if (!s)
		return ig_errf(g->eb, IG_E_NOMEM, "schema: no memory");
	gs__lit(b, s, strlen(s));
	free(s);
	return 0;
}

/* Define rule `name` as schema s. */
static int gs__schema(struct gs *g, json_t *s, const char *name)
{
	struct gs_buf b = {0};
	json_t *x;
	int rc = 0;

	if (++g->depth > GS_MAX_DEPTH)
		return gs__err(g, "schemas nested deeper than %u", GS_MAX_DEPTH);
	if (json_is_true(s)) {
		gs__put(&g->out, "%s ::= value\n", name);
		g->depth--;
		return 0;
	}
	if (!json_is_object(s))
		return gs__err(g, "a schema must be an object (or true)");
	if ((rc = gs__check_keys(g, s)))
		return rc;
	if ((x = json_object_get(s, "$ref"))) {
		char target[32];
		const char *k;
		json_t *v;

		json_object_foreach(s, k, v)
		{
			if (!strcmp(k, "type") || !strcmp(k, "properties") || !strcmp(k, "items") ||
			    !strcmp(k, "enum") || !strcmp(k, "const") || !strcmp(k, "anyOf") ||
			    !strcmp(k, "pattern"))
				return gs__err(g, "'$ref' beside '%s' is not supported", k);
		}
		if (!json_is_string(x))
			return gs__err(g, "'$ref' must be a string");
		if ((rc = gs__ref(g, json_string_value(x), target, sizeof(target))))
			return rc;
		gs__put(&b, "%s", target);
	} else if ((x = json_object_get(s, "const"))) {
		rc = gs__value_lit(g, x, &b);
	} else if ((x = json_object_get(s, "enum"))) {
		if (!json_is_array(x) || !json_array_size(x))
			return gs__err(g, "'enum' must be a non-empty array");
		for (size_t i = 0; i < json_array_size(x) && !rc; i++) {
			gs__put(&b, i ? " | " : "");
			rc = gs__value_lit(g, json_array_get(x, i), &b);
		}
	} else if ((x = json_object_get(s, "anyOf"))) {
		size_t old = gs__push(g, "anyOf");

		if (!json_is_array(x) || !json_array_size(x))
			return gs__err(g, "'anyOf' must be a non-empty array of schemas");
		for (size_t i = 0; i < json_array_size(x); i++) {
			char alt[32];
			size_t o2 = gs__push_index(g, i);

			gs__name(g, alt, sizeof(alt));
			if ((rc = gs__schema(g, json_array_get(x, i), alt)))
				return rc;
			gs__pop(g, o2);
			gs__put(&b, "%s%s", i ? " | " : "", alt);
		}
		gs__pop(g, old);
	} else if ((x = json_object_get(s, "type"))) {
		if (json_is_string(x)) {
			rc = gs__type(g, s, json_string_value(x), name, &b);
		} else if (json_is_array(x) && json_array_size(x)) {
			for (size_t i = 0; i < json_array_size(x) && !rc; i++) {
				json_t *t = json_array_get(x, i);

				if (!json_is_string(t))
					return gs__err(g,
					               "'type' must be a name or a list of names");
				gs__put(&b, i ? " | " : "");
				rc = gs__type(g, s, json_string_value(t), name, &b);
			}
		} else {
			return gs__err(g, "'type' must be a name or a list of names");
		}
	} else if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties")) {
		rc = gs__object(g, s, name, &b);
	} else if (json_object_get(s, "items")) {
		rc = gs__array(g, s, name, &b);
	} else {
		gs__put(&b, "value");
	}
	if (!rc && (x = json_object_get(s, "nullable")) && !json_is_boolean(x))
		rc = gs__err(g, "'nullable' must be true or false");
	if (!rc) {
		if (json_is_true(json_object_get(s, "nullable")))
			gs__put(&g->out, "%s ::= ( %s ) | null\n", name, b.s ? b.s : "value");
		else
			gs__put(&g->out, "%s ::= %s\n", name, b.s ? b.s : "value");
		g->depth--;
	}
	if (b.oom)
		g->out.oom = true;
	free(b.s);
	return rc;
}

/* The rules of `schema`, the first (its root) named prefix "r0", into g->out. */
static int gs__rules(json_t *schema, const char *prefix, struct gs_buf *out, struct ig_errbuf *eb)
{
	struct gs g = {0};
	char r0[96];
	int rc;

	g.root = schema;
	g.eb = eb;
	g.prefix = prefix;
	g.out = *out;
	g.refs = json_object();
	if (!g.refs)
		return ig_errf(eb, IG_E_NOMEM, "schema: no memory");
	gs__name(&g, r0, sizeof(r0));
	/* the root is "#" for $ref */
	if (json_is_object(schema) && json_object_set_new(g.refs, "#", json_string(r0))) {
		json_decref(g.refs);
		return ig_errf(eb, IG_E_NOMEM, "schema: no memory");
	}
	rc = gs__schema(&g, schema, r0);
	json_decref(g.refs);
	*out = g.out;
	if (!rc && out->oom)
		rc = ig_errf(eb, IG_E_NOMEM, "schema: no memory for the grammar's text");
	return rc;
}

int gs_to_gbnf(json_t *schema, char **text, struct ig_errbuf *eb)
{
	struct gs_buf out = {0};
	int rc;

	*text = NULL;
	gs__put(&out, "root ::= r0\n");
	rc = gs__rules(schema, "", &out, eb);
	if (!rc)
		gs__put(&out, "%s", gs_prelude);
	if (rc || out.oom) {
		free(out.s);
		return rc ? rc : ig_errf(eb, IG_E_NOMEM, "schema: no memory");
	}
	*text = out.s;
	return 0;
}

/* A part's prefix: 1 to 64 letters, digits and '-'. */
static int gs__prefix_ok(const char *prefix, struct ig_errbuf *eb)
{
	size_t n = strlen(prefix);

	if (!n || n > 64 ||
	    strspn(prefix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	                   "0123456789-") != n)
		return ig_errf(eb, IG_E_INVAL,
		               "schema: a part's prefix '%.64s'; accepted: 1 to 64 letters, digits "
		               "and '-'",
		               prefix);
	return 0;
}

int gs_part_gbnf(json_t *schema, const char *prefix, char **text, struct ig_errbuf *eb)
{
	struct gs_buf out = {0};
	int rc;

	*text = NULL;
	if ((rc = gs__prefix_ok(prefix, eb)))
		return rc;
	rc = gs__rules(schema, prefix, &out, eb);
	if (rc || out.oom) {
		free(out.s);
		return rc ? rc : ig_errf(eb, IG_E_NOMEM, "schema: no memory");
	}
	*text = out.s;
	return 0;
}

int gs_raw_string_gbnf(json_t *schema, const char *prefix, const char *exclude,
                       const char *no_first, char **text, struct ig_errbuf *eb)
{
	struct gs g = {0};
	struct gs_buf b = {0};
	char r0[96];
	int rc;

	*text = NULL;
	if ((rc = gs__prefix_ok(prefix, eb)))
		return rc;
	for (const char *c = exclude; *c; c++)
		if ((unsigned char)*c >= 0x80)
			return ig_errf(eb, IG_E_INVAL, "schema: a raw text rules out ASCII only");
	g.root = schema;
	g.eb = eb;
	g.prefix = prefix;
	g.raw = exclude;
	if (!json_is_object(schema))
		return gs__err(&g, "a schema must be an object");
	if ((rc = gs__check_keys(&g, schema)))
		return rc;
	gs__name(&g, r0, sizeof(r0));
	rc = gs__string(&g, schema, no_first, &b);
	if (!rc)
		gs__put(&g.out, "%s ::= %s\n", r0, b.s ? b.s : "\"\"");
	free(b.s);
	if (!rc && (b.oom || g.out.oom))
		rc = ig_errf(eb, IG_E_NOMEM, "schema: no memory for the grammar's text");
	if (rc) {
		free(g.out.s);
		return rc;
	}
	*text = g.out.s;
	return 0;
}

const char *gs_prelude_gbnf(void)
{
	return gs_prelude;
}

int gs_compile(json_t *schema, struct grammar **out, struct ig_errbuf *eb)
{
	char *text;
	int rc;

	*out = NULL;
	if ((rc = gs_to_gbnf(schema, &text, eb)))
		return rc;
	rc = grammar_parse(text, strlen(text), "root", out, eb);
	if (rc)
		ig_errprefix(eb, "schema: the grammar made of it");
	free(text);
	return rc;
}

int gs_json_object(struct grammar **out, struct ig_errbuf *eb)
{
	static const char head[] = "root ::= object\n";
	char *text = malloc(sizeof(head) + sizeof(gs_prelude));
	int rc;

	if (!text)
		return ig_errf(eb, IG_E_NOMEM, "schema: no memory");
	memcpy(text, head, sizeof(head) - 1);
	memcpy(text + sizeof(head) - 1, gs_prelude, sizeof(gs_prelude));
	rc = grammar_parse(text, strlen(text), "root", out, eb);
	free(text);
	return rc;
}
