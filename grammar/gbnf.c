/*
 * gbnf.c - the grammar's text form (grammar_parse in grammar.h), read by
 * recursive descent straight into the builder.
 *
 * A rule runs until the next "name ::=" (so rules may span lines without
 * parentheses), the end of the text, or for a group its ')'. Every error
 * names the line and column (1-based, columns in bytes) and what was
 * expected there.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_int.h"

struct gp {
	const char *s;
	size_t n, i;
	struct gbuilder *gb;
	struct ig_errbuf *eb;
	/* each reference's rule and where it is, to name an undefined one */
	struct {
		uint32_t rule;
		size_t at;
	} * refs;
	size_t n_refs, cap_refs;
	unsigned depth; /* groups nested, against a stack overflow */
};

/* Groups nested deeper than this are refused: each costs a few C frames. */
#define GP_MAX_NESTING 200u

static int gp__err(struct gp *p, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void gp__loc(const struct gp *p, size_t at, unsigned *line, unsigned *col)
{
	*line = *col = 1;
	for (size_t k = 0; k < at && k < p->n; k++) {
		if (p->s[k] == '\n')
			++*line, *col = 1;
		else
			++*col;
	}
}

static int gp__err(struct gp *p, size_t at, const char *fmt, ...)
{
	unsigned line, col;
	char what[400];
	va_list ap;

	gp__loc(p, at, &line, &col);
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return ig_errf(p->eb, IG_E_INVAL, "grammar line %u column %u: %s", line, col, what);
}

/* What is at `at`, for messages: "'c'", or "the end of the text". */
static const char *gp__found(const struct gp *p, size_t at, char *buf, size_t cap)
{
	unsigned char c;

	if (at >= p->n)
		return "the end of the text";
	c = (unsigned char)p->s[at];
	if (c == '\n')
		return "the end of the line";
	if (c < 0x20 || c >= 0x7f)
		snprintf(buf, cap, "byte 0x%02x", c);
	else
		snprintf(buf, cap, "'%c'", c);
	return buf;
}

/* Skip blanks, and newlines and comments when `nl`. */
static void gp__skip(struct gp *p, bool nl)
{
	while (p->i < p->n) {
		char c = p->s[p->i];

		if (c == ' ' || c == '\t' || c == '\r' || (nl && c == '\n'))
			p->i++;
		else if (c == '#')
			while (p->i < p->n && p->s[p->i] != '\n')
				p->i++;
		else
			break;
	}
}

static bool gp__namech(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_';
}

static size_t gp__name_len(const struct gp *p, size_t at)
{
	size_t k = at;

	while (k < p->n && gp__namech(p->s[k]))
		k++;
	return k - at;
}

/* True when a "name ::=" starts at `at`: the next rule. */
static bool gp__rule_start(const struct gp *p, size_t at)
{
	size_t k = at + gp__name_len(p, at);

	if (k == at)
		return false;
	while (k < p->n &&
	       (p->s[k] == ' ' || p->s[k] == '\t' || p->s[k] == '\r' || p->s[k] == '\n'))
		k++;
	return k + 3 <= p->n && !memcmp(p->s + k, "::=", 3);
}

static int gp__hex(struct gp *p, unsigned digits, uint32_t *v)
{
	size_t at = p->i;

	*v = 0;
	for (unsigned k = 0; k < digits; k++, p->i++) {
		char c = p->i < p->n ? p->s[p->i] : 0;
		unsigned d;

		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			d = (unsigned)(c - 'A' + 10);
		else
			return gp__err(p, at, "expected %u hexadecimal digits after the escape",
			               digits);
		*v = *v << 4 | d;
	}
	return 0;
}

/* One UTF-8 character of the source, or an escape, as a codepoint. */
static int gp__char(struct gp *p, uint32_t *cp)
{
	unsigned char c = (unsigned char)p->s[p->i];
	size_t at = p->i;

	if (c == '\\') {
		char e;

		if (++p->i >= p->n)
			return gp__err(p, at, "an escape at the end of the text");
		e = p->s[p->i++];
		switch (e) {
		case 'n':
			*cp = '\n';
			return 0;
		case 'r':
			*cp = '\r';
			return 0;
		case 't':
			*cp = '\t';
			return 0;
		case '\\':
		case '"':
		case '\'':
		case '[':
		case ']':
		case '-':
		case '^':
		case '/':
			*cp = (uint32_t)e;
			return 0;
		case 'x':
			return gp__hex(p, 2, cp);
		case 'u':
			return gp__hex(p, 4, cp);
		case 'U': {
			int rc = gp__hex(p, 8, cp);

			if (!rc && *cp > 0x10FFFF)
				return gp__err(p, at, "\\U%08X is past U+10FFFF", *cp);
			return rc;
		}
		default:
			return gp__err(
			    p, at,
			    "unknown escape '\\%c'; known: \\n \\r \\t \\\\ \\\" \\' \\[ \\] "
			    "\\- \\^ \\/ \\xHH \\uHHHH \\UHHHHHHHH",
			    e);
		}
	}
	if (c < 0x80) {
		*cp = c;
		p->i++;
		return 0;
	}
	{
		unsigned n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
		uint32_t v = n == 4 ? c & 7u : n == 3 ? c & 15u : c & 31u;

		if (!n || c >= 0xF8 || p->i + n > p->n)
			return gp__err(p, at, "invalid UTF-8 (byte 0x%02x)", c);
		for (unsigned k = 1; k < n; k++) {
			unsigned char d = (unsigned char)p->s[p->i + k];

			if ((d & 0xC0) != 0x80)
				return gp__err(p, at, "invalid UTF-8 (byte 0x%02x)", c);
			v = v << 6 | (d & 63u);
		}
		*cp = v;
		p->i += n;
	}
	return 0;
}

static int gp__literal(struct gp *p, uint32_t rule)
{
	size_t at = p->i++;
	uint8_t *buf = malloc(p->n - p->i + 1);
	size_t len = 0;
	int rc = 0;

	if (!buf)
		return ig_errf(p->eb, IG_E_NOMEM, "grammar: no memory for a literal");
	for (;;) {
		uint32_t cp;

		if (p->i >= p->n || p->s[p->i] == '\n') {
			rc = gp__err(p, at, "this literal has no closing '\"' on its line");
			goto out;
		}
		if (p->s[p->i] == '"') {
			p->i++;
			break;
		}
		if ((rc = gp__char(p, &cp)))
			goto out;
		if (cp >= 0xD800 && cp <= 0xDFFF) {
			rc = gp__err(p, at, "a surrogate (U+%04X) in a literal", cp);
			goto out;
		}
		len += (size_t)gr_utf8_put(cp, buf + len);
	}
	rc = gb_literal(p->gb, rule, buf, len, p->eb);
out:
	free(buf);
	return rc;
}

/* [...] or [^...] of codepoints, or with `bytes` %[...] of bytes. */
static int gp__class(struct gp *p, uint32_t rule, bool bytes)
{
	size_t at = p->i, n = 0, cap = 8;
	uint32_t(*r)[2] = malloc(cap * sizeof(*r));
	bool neg = false;
	int rc = 0;

	if (!r)
		return ig_errf(p->eb, IG_E_NOMEM, "grammar: no memory for a class");
	p->i += bytes ? 2 : 1;
	if (p->i < p->n && p->s[p->i] == '^')
		neg = true, p->i++;
	for (;;) {
		uint32_t lo, hi;
		size_t here = p->i;

		if (p->i >= p->n || p->s[p->i] == '\n') {
			rc = gp__err(p, at, "this class has no closing ']' on its line");
			goto out;
		}
		if (p->s[p->i] == ']') {
			p->i++;
			break;
		}
		if ((rc = gp__char(p, &lo)))
			goto out;
		hi = lo;
		if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
			p->i++;
			if ((rc = gp__char(p, &hi)))
				goto out;
			if (hi < lo) {
				rc = gp__err(p, here, "a range from U+%04X down to U+%04X", lo, hi);
				goto out;
			}
		}
		if (bytes && hi > 0xFF) {
			rc = gp__err(p, here, "a byte class holds bytes: U+%04X is past \\xFF", hi);
			goto out;
		}
		if (n == cap) {
			uint32_t(*t)[2] = realloc(r, 2 * cap * sizeof(*r));

			if (!t) {
				rc = ig_errf(p->eb, IG_E_NOMEM, "grammar: no memory for a class");
				goto out;
			}
			r = t;
			cap *= 2;
		}
		r[n][0] = lo;
		r[n][1] = hi;
		n++;
	}
	if (bytes) {
		uint64_t set[4] = {0};

		for (size_t k = 0; k < n; k++)
			for (uint32_t b = r[k][0]; b <= r[k][1]; b++)
				set[b >> 6] |= 1ull << (b & 63);
		if (neg)
			for (int k = 0; k < 4; k++)
				set[k] = ~set[k];
		if (!(set[0] | set[1] | set[2] | set[3])) {
			rc = gp__err(p, at, "a byte class that matches nothing");
			goto out;
		}
		rc = gb_bytes(p->gb, rule, set, p->eb);
	} else if (!n && !neg) {
		rc = gp__err(p, at, "an empty class matches nothing");
	} else {
		rc = gb_codepoints(p->gb, rule, (const uint32_t(*)[2])r, n, neg, p->eb);
	}
out:
	free(r);
	return rc;
}

static int gp__number(struct gp *p, uint32_t *v)
{
	size_t at = p->i;
	uint64_t x = 0;

	if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
		return gp__err(p, at, "expected a number in the repetition");
	while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
		x = x * 10 + (uint64_t)(p->s[p->i++] - '0');
		if (x > GB_MAX_REPEAT)
			return gp__err(p, at, "a repetition bound past %u", GB_MAX_REPEAT);
	}
	*v = (uint32_t)x;
	return 0;
}

static int gp__alternatives(struct gp *p, uint32_t rule, bool group);

static int gp__item(struct gp *p, uint32_t rule)
{
	uint32_t mark = gb_mark(p->gb, rule), min, max;
	size_t at = p->i;
	char c = p->s[p->i], fb[16];
	int rc;

	if (c == '"') {
		rc = gp__literal(p, rule);
	} else if (c == '[') {
		rc = gp__class(p, rule, false);
	} else if (c == '%' && p->i + 1 < p->n && p->s[p->i + 1] == '[') {
		rc = gp__class(p, rule, true);
	} else if (c == '.') {
		p->i++;
		rc = gb_codepoints(p->gb, rule, NULL, 0, true, p->eb);
	} else if (c == '(') {
		uint32_t g;

		if (++p->depth > GP_MAX_NESTING)
			return gp__err(p, at, "groups nested deeper than %u", GP_MAX_NESTING);
		p->i++;
		if ((rc = gb_fresh_rule(p->gb, gb_rule_name(p->gb, rule), &g, p->eb)) ||
		    (rc = gp__alternatives(p, g, true)))
			return rc;
		if (p->i >= p->n || p->s[p->i] != ')') {
			unsigned line, col;

			gp__loc(p, at, &line, &col);
			return gp__err(
			    p, p->i,
			    "expected ')' to close the group opened at line %u column %u, "
			    "found %s",
			    line, col, gp__found(p, p->i, fb, sizeof(fb)));
		}
		p->i++;
		p->depth--;
		rc = gb_ref(p->gb, rule, g, p->eb);
	} else if (gp__namech(c)) {
		size_t len = gp__name_len(p, p->i);
		char name[128];
		uint32_t r;

		if (len >= sizeof(name))
			return gp__err(p, at, "a rule name longer than %zu bytes",
			               sizeof(name) - 1);
		memcpy(name, p->s + p->i, len);
		name[len] = 0;
		p->i += len;
		if ((rc = gb_rule(p->gb, name, &r, p->eb)))
			return rc;
		if (p->n_refs == p->cap_refs) {
			size_t nc = p->cap_refs ? 2 * p->cap_refs : 32;
			void *t = realloc(p->refs, nc * sizeof(*p->refs));

			if (!t)
				return ig_errf(p->eb, IG_E_NOMEM, "grammar: no memory");
			p->refs = t;
			p->cap_refs = nc;
		}
		p->refs[p->n_refs].rule = r;
		p->refs[p->n_refs++].at = at;
		rc = gb_ref(p->gb, rule, r, p->eb);
	} else {
		return gp__err(
		    p, at,
		    "expected an item (a \"literal\", a [class], '.', a rule name or '(') "
		    "but found %s",
		    gp__found(p, at, fb, sizeof(fb)));
	}
	if (rc)
		return rc;
	/* a postfix repetition */
	if (p->i >= p->n)
		return 0;
	c = p->s[p->i];
	if (c == '*')
		min = 0, max = GB_INF;
	else if (c == '+')
		min = 1, max = GB_INF;
	else if (c == '?')
		min = 0, max = 1;
	else if (c == '{') {
		size_t open = p->i++;

		gp__skip(p, false);
		if ((rc = gp__number(p, &min)))
			return rc;
		gp__skip(p, false);
		max = min;
		if (p->i < p->n && p->s[p->i] == ',') {
			p->i++;
			gp__skip(p, false);
			max = GB_INF;
			if (p->i < p->n && p->s[p->i] != '}' && (rc = gp__number(p, &max)))
				return rc;
			gp__skip(p, false);
		}
		if (p->i >= p->n || p->s[p->i] != '}')
			return gp__err(p, p->i, "expected '}' to close the repetition, found %s",
			               gp__found(p, p->i, fb, sizeof(fb)));
		if (max < min)
			return gp__err(p, open,
			               "repetition {%u,%u}: the upper bound is below the lower",
			               min, max);
	} else
		return 0;
	p->i++;
	if (gb_mark(p->gb, rule) == mark)
		return gp__err(p, at, "nothing to repeat: the item matches only the empty string");
	if ((rc = gb_repeat_tail(p->gb, rule, mark, min, max, p->eb)))
		return gp__err(p, at, "%s", p->eb ? p->eb->msg : "repetition refused");
	return 0;
}

/* alternatives of `rule` up to the next rule (or, in a group, its ')') */
static int gp__alternatives(struct gp *p, uint32_t rule, bool group)
{
	int rc;

	if ((rc = gb_alt(p->gb, rule, p->eb)))
		return rc;
	for (;;) {
		char c;

		gp__skip(p, true);
		if (p->i >= p->n)
			return 0;
		c = p->s[p->i];
		if (c == '|') {
			p->i++;
			if ((rc = gb_alt(p->gb, rule, p->eb)))
				return rc;
			continue;
		}
		if (c == ')') {
			if (group)
				return 0;
			return gp__err(p, p->i, "a ')' with no group open");
		}
		if (gp__rule_start(p, p->i)) {
			if (group) {
				char fb[16];

				return gp__err(p, p->i, "expected ')' to close a group, found %s",
				               gp__found(p, p->i, fb, sizeof(fb)));
			}
			return 0;
		}
		if ((rc = gp__item(p, rule)))
			return rc;
	}
}

int grammar_parse(const char *text, size_t len, const char *root, struct grammar **out,
                  struct ig_errbuf *eb)
{
	struct gp p = {text, len, 0, gb_create(), eb, NULL, 0, 0, 0};
	int rc = 0;

	*out = NULL;
	if (!p.gb)
		return ig_errf(eb, IG_E_NOMEM, "grammar: no memory for the builder");
	for (;;) {
		size_t at, nlen;
		char name[128], fb[16];
		uint32_t r;

		gp__skip(&p, true);
		if (p.i >= p.n)
			break;
		at = p.i;
		nlen = gp__name_len(&p, at);
		if (!nlen) {
			rc = gp__err(&p, at, "expected a rule name, found %s",
			             gp__found(&p, at, fb, sizeof(fb)));
			goto out;
		}
		if (nlen >= sizeof(name)) {
			rc = gp__err(&p, at, "a rule name longer than %zu bytes", sizeof(name) - 1);
			goto out;
		}
		memcpy(name, text + at, nlen);
		name[nlen] = 0;
		p.i += nlen;
		gp__skip(&p, true);
		if (p.i + 3 > p.n || memcmp(text + p.i, "::=", 3)) {
			rc = gp__err(&p, p.i, "expected '::=' after rule name '%s', found %s", name,
			             gp__found(&p, p.i, fb, sizeof(fb)));
			goto out;
		}
		p.i += 3;
		if ((rc = gb_rule(p.gb, name, &r, eb)))
			goto out;
		if (gb_defined(p.gb, r)) {
			rc = gp__err(&p, at, "rule '%s' is defined twice", name);
			goto out;
		}
		if ((rc = gp__alternatives(&p, r, false)))
			goto out;
	}
	for (size_t k = 0; k < p.n_refs; k++)
		if (!gb_defined(p.gb, p.refs[k].rule)) {
			rc = gp__err(&p, p.refs[k].at, "rule '%s' is used but never defined",
			             gb_rule_name(p.gb, p.refs[k].rule));
			goto out;
		}
	rc = gb_compile(p.gb, root, out, eb);
out:
	free(p.refs);
	gb_destroy(p.gb);
	return rc;
}
