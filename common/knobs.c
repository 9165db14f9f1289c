/* knobs.c - the knob table, value parsing and resolution (see knobs.h). */
#include "knobs.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bytesize.h"

const struct knob_def knob_defs[KNOB__COUNT] = {
#define KNOB__DEF(ID, kname, ktype, kdef, krefused, kacc, kdoc)                                    \
	[KNOB_##ID] = {.id = KNOB_##ID,                                                            \
	               .name = kname,                                                              \
	               .type = ktype,                                                              \
	               .def = kdef,                                                                \
	               .refused_by = krefused,                                                     \
	               .accepted = kacc,                                                           \
	               .doc = kdoc},
    KNOBS(KNOB__DEF)
#undef KNOB__DEF
};

const struct knob_profile_row knob_profile_rows[] = {
#define KNOB__PROF(p, ID, fam, val) {p, KNOB_##ID, fam, val},
    KNOB_PROFILES(KNOB__PROF)
#undef KNOB__PROF
};
const size_t knob_nprofile_rows = sizeof(knob_profile_rows) / sizeof(knob_profile_rows[0]);

const char *knob_make_var(enum knob_id id)
{
	static const struct {
		enum knob_id id;
		const char *var;
	} rows[] = {
#define KNOB__MAKE(ID, mvar) {KNOB_##ID, mvar},
	    KNOB_MAKE_VARS(KNOB__MAKE)
#undef KNOB__MAKE
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		if (rows[i].id == id)
			return rows[i].var;
	return NULL;
}

const struct knob_other_var knob_other_vars[] = {
#define KNOB__OTHER(vname, vwho) {vname, vwho},
    KNOB_OTHER_VARS(KNOB__OTHER)
#undef KNOB__OTHER
};
const size_t knob_nother_vars = sizeof(knob_other_vars) / sizeof(knob_other_vars[0]);

/* ---- spellings ----------------------------------------------------------- */

void knob_flag(enum knob_id id, char *out, size_t cap)
{
	snprintf(out, cap, "--%s", knob_defs[id].name);
}

void knob_env(enum knob_id id, char *out, size_t cap)
{
	size_t n = (size_t)snprintf(out, cap, "IGNIS_%s", knob_defs[id].name);

	for (size_t i = 6; i < n && i < cap; i++)
		out[i] = out[i] == '-' ? '_' : (char)toupper((unsigned char)out[i]);
}

void knob_yaml_key(enum knob_id id, char *out, size_t cap)
{
	size_t n = (size_t)snprintf(out, cap, "%s", knob_defs[id].name);

	for (size_t i = 0; i < n && i < cap; i++)
		if (out[i] == '-')
			out[i] = '_';
}

/* ---- ranges ---------------------------------------------------------------- */

/* One end of a range, the n bytes at s: a size or count (bsize), less any
 * "-N" terms. */
static bool knob__end(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	bool first = true;

	while (n) {
		const char *dash = memchr(s, '-', n);
		size_t len = dash ? (size_t)(dash - s) : n;
		struct ig_errbuf eb;
		struct bsize bs;
		char term[32];

		if (len == 0 || len >= sizeof(term))
			return false;
		memcpy(term, s, len);
		term[len] = '\0';
		if (bsize_parse(term, false, &bs, &eb))
			return false;
		if (first)
			v = bs.n;
		else if (bs.n > v)
			return false;
		else
			v -= bs.n;
		first = false;
		s += len;
		n -= len;
		if (dash) {
			s++;
			n--;
			if (!n)
				return false; /* a trailing '-' */
		}
	}
	if (first)
		return false;
	*out = v;
	return true;
}

/* The alternatives of `acc` one by one: each call fills `r` and the text
 * of its ends (lo at *lo_s for lo_n bytes, hi likewise; hi_n 0 for one
 * value, and for an open range hi_s NULL) and moves *p past it. False at
 * the end, or with *bad set when the alternative does not parse. */
struct knob__alt {
	struct knob_range r;
	const char *lo_s, *hi_s;
	size_t lo_n, hi_n;
};

static bool knob__next_alt(const char **p, struct knob__alt *a, bool *bad)
{
	const char *s = *p, *bar, *dots;
	size_t len;

	*bad = false;
	if (!s)
		return false;
	bar = strchr(s, '|');
	len = bar ? (size_t)(bar - s) : strlen(s);
	*p = bar ? bar + 1 : NULL;
	dots = NULL;
	for (size_t i = 0; i + 1 < len && !dots; i++)
		if (s[i] == '.' && s[i + 1] == '.')
			dots = s + i;
	a->lo_s = s;
	if (!dots) {
		a->lo_n = len;
		a->hi_s = s;
		a->hi_n = 0;
		*bad = !knob__end(s, len, &a->r.lo);
		a->r.hi = a->r.lo;
		return true;
	}
	a->lo_n = (size_t)(dots - s);
	a->hi_s = dots + 2;
	a->hi_n = len - a->lo_n - 2;
	*bad = !knob__end(s, a->lo_n, &a->r.lo);
	if (a->hi_n == 0) {
		a->hi_s = NULL;
		a->r.hi = UINT64_MAX;
	} else {
		*bad = *bad || !knob__end(a->hi_s, a->hi_n, &a->r.hi);
	}
	*bad = *bad || a->r.lo > a->r.hi;
	return true;
}

static bool knob__ranged(const struct knob_def *d)
{
	return (d->type == KT_COUNT || d->type == KT_BYTES) && d->accepted;
}

int knob_ranges(enum knob_id id, struct knob_range *out, size_t cap)
{
	const struct knob_def *d = &knob_defs[id];
	const char *p = d->accepted;
	struct knob__alt a;
	uint64_t prev_hi = 0;
	int count = 0;
	bool bad;

	if (!knob__ranged(d))
		return 0;
	while (knob__next_alt(&p, &a, &bad)) {
		/* ascending and apart: each begins past the previous one's end + 1 */
		if (bad || (count > 0 && (prev_hi == UINT64_MAX || a.r.lo <= prev_hi + 1)))
			return -1;
		if ((size_t)count < cap)
			out[count] = a.r;
		prev_hi = a.r.hi;
		count++;
	}
	return count;
}

/* The ranges in words: "1..8", "4K..4G-1 (4096..4294967295 bytes)",
 * "0, or at least 64K (65536 bytes)"; a figure in digits where an end is
 * written otherwise, in `unit` (" bytes", or ""). */
static void knob__ranges_text(const struct knob_def *d, const char *unit, char *buf, size_t cap)
{
	const char *p = d->accepted;
	struct knob__alt a;
	size_t o = 0;
	bool bad;

	buf[0] = '\0';
	while (o < cap && knob__next_alt(&p, &a, &bad)) {
		char lo[24], hi[24];
		bool digits;

		snprintf(lo, sizeof(lo), "%llu", (unsigned long long)a.r.lo);
		snprintf(hi, sizeof(hi), "%llu", (unsigned long long)a.r.hi);
		digits = strlen(lo) == a.lo_n && !strncmp(lo, a.lo_s, a.lo_n) &&
		         (!a.hi_s || a.hi_n == 0 ||
		          (strlen(hi) == a.hi_n && !strncmp(hi, a.hi_s, a.hi_n)));
		if (o)
			o += (size_t)snprintf(buf + o, cap - o, ", or ");
		if (o >= cap)
			break;
		if (!a.hi_s)
			o += (size_t)snprintf(buf + o, cap - o, "at least %.*s", (int)a.lo_n,
			                      a.lo_s);
		else if (a.hi_n == 0)
			o += (size_t)snprintf(buf + o, cap - o, "%.*s", (int)a.lo_n, a.lo_s);
		else
			o += (size_t)snprintf(buf + o, cap - o, "%.*s..%.*s", (int)a.lo_n, a.lo_s,
			                      (int)a.hi_n, a.hi_s);
		if (o >= cap || digits)
			continue;
		if (!a.hi_s || a.hi_n == 0)
			o += (size_t)snprintf(buf + o, cap - o, " (%s%s)", lo, unit);
		else
			o += (size_t)snprintf(buf + o, cap - o, " (%s..%s%s)", lo, hi, unit);
	}
}

/* Whether `v` is in the ranges of `d` (true for a knob without any). */
static bool knob__in_ranges(const struct knob_def *d, uint64_t v)
{
	const char *p = d->accepted;
	struct knob__alt a;
	bool bad;

	if (!knob__ranged(d))
		return true;
	while (knob__next_alt(&p, &a, &bad))
		if (!bad && v >= a.r.lo && v <= a.r.hi)
			return true;
	return false;
}

/* ---- what a knob accepts, in words ----------------------------------------- */

const char *knob_accepted_text(enum knob_id id, char *buf, size_t cap)
{
	const struct knob_def *d = &knob_defs[id];
	char ranges[160];

	switch (d->type) {
	case KT_BYTES:
		if (!d->accepted) {
			snprintf(buf, cap,
			         "a size: a whole number with K, M, G or T (binary), e.g. 1536M");
			break;
		}
		knob__ranges_text(d, " bytes", ranges, sizeof(ranges));
		snprintf(buf, cap, "a size: %s; a whole number with K, M, G or T (binary)", ranges);
		break;
	case KT_POOL:
		snprintf(buf, cap,
		         "a size (e.g. 2G) or a token count with 'tok' (e.g. 512Ktok, 1Mtok)");
		break;
	case KT_COUNT:
		knob__ranges_text(d, "", ranges, sizeof(ranges));
		snprintf(buf, cap, "a whole number in %s (K and M suffixes allowed)", ranges);
		break;
	case KT_BOOL:
	case KT_SWITCH:
		snprintf(buf, cap, "on or off");
		break;
	case KT_ENUM: {
		size_t o = (size_t)snprintf(buf, cap, "one of ");

		for (const char *p = d->accepted; *p && o + 3 < cap; p++)
			o += (size_t)snprintf(buf + o, cap - o, "%s",
			                      *p == '|' ? ", " : (char[]){*p, 0});
		break;
	}
	case KT_MODEL:
		snprintf(buf, cap, "one of %s, or a path to a model file", mdesc_names());
		break;
	case KT_PATH:
		snprintf(buf, cap, "an absolute path");
		break;
	case KT_ADDR:
		snprintf(buf, cap, "ipc:///an/absolute/path or tcp://HOST:PORT (port 1..65535)");
		break;
	case KT_HOSTPORT:
		snprintf(buf, cap, "HOST:PORT (port 1..65535), e.g. 127.0.0.1:9464");
		break;
	case KT_LISTEN:
		snprintf(buf, cap, "HOST:PORT (port 1..65535), e.g. 127.0.0.1:8000, or off");
		break;
	case KT_REMOVED:
		snprintf(buf, cap, "nothing: %s", d->doc);
		break;
	case KT_SECRET:
		snprintf(buf, cap, "1 to 256 visible ASCII characters (no spaces)");
		break;
	case KT_ORIGINS:
		snprintf(buf, cap,
		         "web origins, scheme://host[:port] (http or https, no path), separated by "
		         "commas, e.g. https://app.example,http://localhost:3000");
		break;
	case KT_NAMES:
		snprintf(buf, cap,
		         "1 to %u names of 1 to %u bytes each (no control characters), each once, "
		         "separated by commas (a YAML list too), e.g. gpt-4o,qwen3",
		         KNOB_NAMES_MAX, KNOB_NAME_MAX_LEN);
		break;
	}
	return buf;
}

void knob_read_env(struct knob_input *in)
{
	for (int i = 0; i < KNOB__COUNT; i++) {
		char name[96];
		const char *v;

		knob_env((enum knob_id)i, name, sizeof(name));
		v = getenv(name);
		if (v && !*v)
			v = NULL; /* an empty variable counts as unset */
		in->env[i].text = v;
		if (v)
			snprintf(in->env[i].where, sizeof(in->env[i].where), "%s", name);
	}
}

/* ---- names no knob has ---------------------------------------------------- */

/* Optimal string alignment distance between a[0..n) and b[0..m): the edits
 * of Levenshtein plus the swap of two neighbours ("MODLE" is 1 from
 * "MODEL"). Names are short: past KNOB__NAME_MAX bytes the rest is not
 * compared (and counts as that many edits). */
#define KNOB__NAME_MAX 63

static size_t knob__distance(const char *a, size_t n, const char *b, size_t m)
{
	size_t d[KNOB__NAME_MAX + 1][KNOB__NAME_MAX + 1], extra = 0;

	if (n > KNOB__NAME_MAX) {
		extra += n - KNOB__NAME_MAX;
		n = KNOB__NAME_MAX;
	}
	if (m > KNOB__NAME_MAX) {
		extra += m - KNOB__NAME_MAX;
		m = KNOB__NAME_MAX;
	}
	for (size_t i = 0; i <= n; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= m; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= n; i++)
		for (size_t j = 1; j <= m; j++) {
			size_t sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			size_t del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
			size_t v = sub < del ? sub : del;

			v = v < ins ? v : ins;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	return d[n][m] + extra;
}

enum knob_id knob_nearest(const char *name, size_t n, enum knob_spelling as)
{
	enum knob_id best = KNOB_MODEL;
	size_t best_d = (size_t)-1, best_pre = 0;

	for (int i = 0; i < KNOB__COUNT; i++) {
		char spelled[96];
		size_t dist, len, pre;

		if (knob_defs[i].type == KT_REMOVED)
			continue;
		if (as == KNOB_AS_FLAG)
			knob_flag((enum knob_id)i, spelled, sizeof(spelled));
		else if (as == KNOB_AS_ENV)
			knob_env((enum knob_id)i, spelled, sizeof(spelled));
		else
			knob_yaml_key((enum knob_id)i, spelled, sizeof(spelled));
		len = strlen(spelled);
		dist = knob__distance(name, n, spelled, len);
		for (pre = 0; pre < n && pre < len && name[pre] == spelled[pre]; pre++)
			;
		/* A name cut short ("IGNIS_REUSE_MOVE_OUT") is one edit from the
		 * knob it begins: what operators leave out is the tail. */
		if (pre == n && n < len && dist > 1)
			dist = 1;
		/* Ties go to the longer common beginning, then the earlier row. */
		if (dist < best_d || (dist == best_d && pre > best_pre)) {
			best_d = dist;
			best_pre = pre;
			best = (enum knob_id)i;
		}
	}
	return best;
}

/* Whether the n-byte variable name is a knob's or one KNOB_OTHER_VARS names. */
static bool knob__env_known(const char *name, size_t n)
{
	for (int i = 0; i < KNOB__COUNT; i++) {
		char env[96];

		knob_env((enum knob_id)i, env, sizeof(env));
		if (strlen(env) == n && !memcmp(env, name, n))
			return true;
	}
	for (size_t i = 0; i < knob_nother_vars; i++) {
		const char *o = knob_other_vars[i].name;
		size_t len = strlen(o);

		if (len && o[len - 1] == '*') {
			if (n >= len - 1 && !memcmp(o, name, len - 1))
				return true;
		} else if (len == n && !memcmp(o, name, n)) {
			return true;
		}
	}
	return false;
}

size_t knob_env_unknown(char *const *envp, struct knob_env_unknown *out, size_t cap)
{
	size_t count = 0;

	for (size_t i = 0; envp && envp[i]; i++) {
		const char *e = envp[i], *eq = strchr(e, '=');
		size_t n;

		if (!eq || !eq[1] || strncmp(e, "IGNIS_", 6) != 0)
			continue;
		n = (size_t)(eq - e);
		if (knob__env_known(e, n))
			continue;
		if (count < cap) {
			out[count].name = e;
			out[count].len = n;
			out[count].nearest = knob_nearest(e, n, KNOB_AS_ENV);
		}
		count++;
	}
	return count;
}

/* ---- parsing ------------------------------------------------------------- */

static int knob__bad(enum knob_id id, const char *text, const char *where, const char *why,
                     struct ig_errbuf *eb)
{
	char acc[256], flag[96];

	knob_flag(id, flag, sizeof(flag));
	return ig_errf(eb, IG_E_CONFIG, "%s: '%s' (from %s) %s; accepted: %s", flag, text, where,
	               why, knob_accepted_text(id, acc, sizeof(acc)));
}

/* Each comma-separated item of `t` an origin: http:// or https://, a host
 * (and :port), no path; empty items between commas skipped, one at least. */
static bool knob__origins(const char *t)
{
	size_t items = 0;

	while (*t) {
		size_t n = strcspn(t, ","), skip;
		const char *host;

		while (n && (*t == ' ' || *t == '\t'))
			t++, n--;
		skip = n;
		while (n && (t[n - 1] == ' ' || t[n - 1] == '\t'))
			n--;
		if (n) {
			size_t scheme = !strncmp(t, "http://", 7) ? 7 : !strncmp(t, "https://", 8) ? 8 : 0;

			host = t + scheme;
			if (!scheme || n == scheme || memchr(host, '/', n - scheme) ||
			    memchr(host, ' ', n - scheme))
				return false;
			items++;
		}
		t += skip;
		if (*t == ',')
			t++;
	}
	return items > 0;
}

/* Each comma-separated item of `t` a name: blanks around it dropped, 1 to
 * KNOB_NAME_MAX_LEN bytes, no control character, none twice; empty items
 * skipped, 1 to KNOB_NAMES_MAX of them. */
static bool knob__names(const char *t)
{
	const char *seen[KNOB_NAMES_MAX];
	size_t seen_len[KNOB_NAMES_MAX], items = 0;

	while (*t) {
		size_t n = strcspn(t, ","), skip;

		while (n && (*t == ' ' || *t == '\t'))
			t++, n--;
		skip = n;
		while (n && (t[n - 1] == ' ' || t[n - 1] == '\t'))
			n--;
		if (n) {
			if (n > KNOB_NAME_MAX_LEN || items == KNOB_NAMES_MAX)
				return false;
			for (size_t i = 0; i < n; i++)
				if ((unsigned char)t[i] < 0x20 || t[i] == 0x7f)
					return false;
			for (size_t i = 0; i < items; i++)
				if (seen_len[i] == n && !memcmp(seen[i], t, n))
					return false;
			seen[items] = t;
			seen_len[items++] = n;
		}
		t += skip;
		if (*t == ',')
			t++;
	}
	return items > 0;
}

static int knob__enum_index(const char *choices, const char *text)
{
	size_t n = strlen(text);
	int idx = 0;

	for (const char *p = choices; *p; idx++) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);

		if (len == n && !strncmp(p, text, n))
			return idx;
		if (!bar)
			break;
		p = bar + 1;
	}
	return -1;
}

/* HOST:PORT: a non-empty host without '/' or spaces, a port 1..65535. */
static bool knob__hostport(const char *t)
{
	const char *colon = strrchr(t, ':');
	char *end;
	unsigned long port;

	if (!colon || colon == t || strpbrk(t, "/ \t") || (size_t)(colon - t) > 253)
		return false;
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	return colon[1] >= '0' && colon[1] <= '9' && !*end && !errno && port >= 1 && port <= 65535;
}

int knob_parse(enum knob_id id, const char *text, const char *where, struct knob_value *out,
               struct ig_errbuf *eb)
{
	const struct knob_def *d = &knob_defs[id];
	struct ig_errbuf sub;
	struct bsize bs;

	out->set = true;
	out->tokens = false;
	out->s = NULL;
	out->u = 0;
	snprintf(out->where, sizeof(out->where), "%s", where);
	switch (d->type) {
	case KT_BYTES:
	case KT_POOL:
	case KT_COUNT:
		if (bsize_parse(text, d->type == KT_POOL, &bs, &sub))
			return knob__bad(
			    id, text, where,
			    d->type == KT_COUNT ? "is not a whole number" : "is not a size", eb);
		if (d->type == KT_COUNT && !d->accepted)
			return ig_errf(eb, IG_E_INVAL, "knob %s declares no range", d->name);
		if (!knob__in_ranges(d, bs.n))
			return knob__bad(id, text, where, "is out of range", eb);
		out->u = bs.n;
		out->tokens = bs.tokens;
		return IG_E_OK;
	case KT_BOOL:
	case KT_SWITCH:
		if (!strcasecmp(text, "on") || !strcasecmp(text, "true") ||
		    !strcasecmp(text, "yes") || !strcmp(text, "1"))
			out->u = 1;
		else if (!strcasecmp(text, "off") || !strcasecmp(text, "false") ||
		         !strcasecmp(text, "no") || !strcmp(text, "0"))
			out->u = 0;
		else
			return knob__bad(id, text, where, "is not on or off", eb);
		return IG_E_OK;
	case KT_ENUM: {
		int i = knob__enum_index(d->accepted, text);

		if (i < 0)
			return knob__bad(id, text, where, "is not a choice", eb);
		out->u = (uint64_t)i;
		return IG_E_OK;
	}
	case KT_MODEL:
		/* a built-in name, or a path to a model file (loaded by the caller) */
		if (!mdesc_find(text) && !strchr(text, '/') &&
		    !(strlen(text) > 5 && !strcmp(text + strlen(text) - 5, ".gguf")))
			return knob__bad(id, text, where, "is not a known model", eb);
		out->s = text;
		return IG_E_OK;
	case KT_PATH:
		if (text[0] != '/')
			return knob__bad(id, text, where, "is not an absolute path", eb);
		out->s = text;
		return IG_E_OK;
	case KT_ADDR:
		if (!strncmp(text, "ipc://", 6)) {
			if (text[6] != '/' || !text[7])
				return knob__bad(id, text, where,
				                 "is not ipc:// and an absolute path", eb);
		} else if (!strncmp(text, "tcp://", 6)) {
			if (!knob__hostport(text + 6))
				return knob__bad(id, text, where, "is not tcp://HOST:PORT", eb);
		} else {
			return knob__bad(id, text, where, "is neither ipc:// nor tcp://", eb);
		}
		out->s = text;
		return IG_E_OK;
	case KT_HOSTPORT:
	case KT_LISTEN:
		if (!knob__hostport(text) && (d->type == KT_HOSTPORT || strcmp(text, "off")))
			return knob__bad(id, text, where,
			                 d->type == KT_HOSTPORT ? "is not HOST:PORT"
			                                        : "is not HOST:PORT or off",
			                 eb);
		out->s = text;
		return IG_E_OK;
	case KT_REMOVED: {
		char flag[96];

		knob_flag(id, flag, sizeof(flag));
		return ig_errf(eb, IG_E_CONFIG, "%s (from %s) is no longer accepted: %s", flag,
		               where, d->doc);
	}
	case KT_SECRET: {
		size_t n = strlen(text);
		char acc[128], flag[96];
		bool ok = n >= 1 && n <= 256;

		for (size_t i = 0; ok && i < n; i++)
			ok = text[i] > 0x20 && text[i] < 0x7f;
		if (ok) {
			out->s = text;
			return IG_E_OK;
		}
		/* the value is not repeated: it is a secret */
		knob_flag(id, flag, sizeof(flag));
		return ig_errf(eb, IG_E_CONFIG, "%s (from %s): the value given (%zu bytes) is not "
		               "a key; accepted: %s",
		               flag, where, n, knob_accepted_text(id, acc, sizeof(acc)));
	}
	case KT_ORIGINS:
		if (!knob__origins(text))
			return knob__bad(id, text, where, "is not a list of origins", eb);
		out->s = text;
		return IG_E_OK;
	case KT_NAMES:
		if (!knob__names(text))
			return knob__bad(id, text, where, "is not a list of names", eb);
		out->s = text;
		return IG_E_OK;
	}
	return ig_errf(eb, IG_E_INVAL, "knob %s has no type", d->name);
}

/* ---- resolution ---------------------------------------------------------- */

/* The profile's value of `id` for `family`, or NULL. */
static const char *knob__profile_value(const char *profile, enum knob_id id, unsigned family)
{
	const char *any = NULL;

	for (size_t i = 0; i < knob_nprofile_rows; i++) {
		const struct knob_profile_row *r = &knob_profile_rows[i];

		if (strcmp(r->profile, profile) || r->id != id)
			continue;
		if (r->family == family)
			return r->value;
		if (r->family == 0)
			any = r->value;
	}
	return any;
}

/* The model's own default of `id`, printed into buf, or NULL. */
static const char *knob__model_default(const struct mdesc *m, enum knob_id id, uint32_t lanes,
                                       char *buf, size_t cap)
{
	uint64_t v;

	switch (id) {
	case KNOB_MODEL_MAX_CONTEXT:
		v = m->default_context;
		break;
	case KNOB_MODEL_PREFILL_CHUNK:
		v = m->default_chunk;
		break;
	case KNOB_MODEL_DEFAULT_MAX_TOKENS:
		v = m->default_max_tokens;
		break;
	case KNOB_SPEC_DECODE_LANES:
		v = m->family == MDESC_MOE ? m->default_lanes : 0;
		break;
	case KNOB_REUSE_RETAINED_HOST:
		v = m->family == MDESC_DENSE ? 2ull * lanes : m->default_retained_host;
		break;
	case KNOB_REUSE_KV_DISK_BYTES:
		v = m->default_kv_disk_bytes;
		break;
	default:
		return NULL;
	}
	snprintf(buf, cap, "%llu", (unsigned long long)v);
	return buf;
}

/* Resolve one knob. `family` 0 while the model is not known yet. */
static int knob__resolve_one(const struct knob_input *in, struct knobs *k, enum knob_id id,
                             struct ig_errbuf *eb)
{
	const struct knob_def *d = &knob_defs[id];
	const struct knob_raw *named[3] = {&in->flag[id], &in->env[id], &in->yaml[id]};
	static const enum knob_src named_src[3] = {KS_FLAG, KS_ENV, KS_YAML};
	struct knob_value *v = &k->v[id];
	unsigned family = k->model ? (unsigned)k->model->family : 0;
	char buf[64], where[160];
	const char *text;
	int rc;

	memset(v, 0, sizeof(*v));
	for (int i = 0; i < 3; i++) {
		if (!named[i]->text)
			continue;
		if (k->model && (d->refused_by & family)) {
			char flag[96];

			knob_flag(id, flag, sizeof(flag));
			return ig_errf(eb, IG_E_CONFIG,
			               "%s (from %s): %s does not take this knob (%s); remove it",
			               flag, named[i]->where, k->model->name, d->doc);
		}
		rc = knob_parse(id, named[i]->text, named[i]->where, v, eb);
		v->src = named_src[i];
		return rc;
	}
	/* The cpu profile describes a simulated device: on a cuda backend the
	 * operator named, its figures are passed over. */
	if (k->profile &&
	    !(id != KNOB_BACKEND && !strcmp(k->profile, "cpu") && k->v[KNOB_BACKEND].set &&
	      k->v[KNOB_BACKEND].u == 2) &&
	    (text = knob__profile_value(k->profile, id, family))) {
		if (!(k->model && (d->refused_by & family))) {
			snprintf(where, sizeof(where), "profile %s", k->profile);
			rc = knob_parse(id, text, where, v, eb);
			v->src = KS_PROFILE;
			return rc;
		}
		/* The model refuses it: a profile's value is passed over. */
	}
	if (!strcmp(d->def, "@model")) {
		if (!k->model ||
		    !(text = knob__model_default(k->model, id, k->lanes, buf, sizeof(buf))))
			return IG_E_OK;
		if (k->model && (d->refused_by & family))
			return IG_E_OK;
		snprintf(where, sizeof(where), "%s's default", k->model->name);
		rc = knob_parse(id, text, where, v, eb);
	} else if (d->def[0] && d->type != KT_REMOVED) {
		rc = knob_parse(id, d->def, "default", v, eb);
	} else {
		return IG_E_OK;
	}
	v->src = KS_DEFAULT;
	return rc;
}

int knob_resolve(const struct knob_input *in, struct knobs *k, struct ig_errbuf *eb)
{
	struct knob_value *hr = &k->v[KNOB_VRAM_HEADROOM_BYTES],
	                  *bu = &k->v[KNOB_VRAM_BUDGET_BYTES];
	int rc;

	memset(k, 0, sizeof(*k));
	/* The removed flag refuses wherever it was named. */
	rc = knob__resolve_one(in, k, KNOB_RETAINED_SLOTS, eb);
	if (rc)
		return rc;
	rc = knob__resolve_one(in, k, KNOB_PROFILE, eb);
	if (rc)
		return rc;
	k->profile = k->v[KNOB_PROFILE].u == 0   ? "cpu"
	             : k->v[KNOB_PROFILE].u == 1 ? "rtx5090"
	                                         : "none";
	rc = knob__resolve_one(in, k, KNOB_MODEL, eb);
	if (rc)
		return rc;
	k->model = mdesc_find(k->v[KNOB_MODEL].s);
	if (!k->model) {
		if (!in->load_model)
			return ig_errf(
			    eb, IG_E_CONFIG,
			    "--model '%s' (from %s) is a file, and model files are not read "
			    "here; accepted: %s",
			    k->v[KNOB_MODEL].s, k->v[KNOB_MODEL].where, mdesc_names());
		k->model =
		    in->load_model(in->load_ctx, k->v[KNOB_MODEL].s, k->v[KNOB_MODEL].where, eb);
		if (!k->model)
			return IG_E_CONFIG;
	}
	/* The backend before the profile's device figures; lanes before the
	 * knobs whose model defaults depend on them. */
	rc = knob__resolve_one(in, k, KNOB_BACKEND, eb);
	if (rc)
		return rc;
	rc = knob__resolve_one(in, k, KNOB_SPEC_DECODE_LANES, eb);
	if (rc)
		return rc;
	k->lanes = k->model->family == MDESC_DENSE ? k->model->fixed_lanes
	                                           : (uint32_t)k->v[KNOB_SPEC_DECODE_LANES].u;
	for (int i = 0; i < KNOB__COUNT; i++) {
		if (i == KNOB_PROFILE || i == KNOB_MODEL || i == KNOB_SPEC_DECODE_LANES ||
		    i == KNOB_RETAINED_SLOTS || i == KNOB_BACKEND)
			continue;
		rc = knob__resolve_one(in, k, (enum knob_id)i, eb);
		if (rc)
			return rc;
	}
	/* Headroom and budget: naming both is an error; a budget passes over a
	 * headroom that only a profile or the default gave. */
	if (bu->set && hr->set) {
		if (hr->src >= KS_YAML)
			return ig_errf(
			    eb, IG_E_CONFIG,
			    "--vram-headroom-bytes (from %s) and --vram-budget-bytes (from "
			    "%s) both name the budget; keep one of them",
			    hr->where, bu->where);
		hr->set = false;
	}
	if (k->v[KNOB_VRAM_ALLOW_OVERSUBSCRIPTION].u && !bu->set)
		return ig_errf(eb, IG_E_CONFIG,
		               "--vram-allow-oversubscription (from %s) needs an explicit "
		               "--vram-budget-bytes; name one, or drop the flag",
		               k->v[KNOB_VRAM_ALLOW_OVERSUBSCRIPTION].where);
	if (!k->v[KNOB_REUSE_PROMPT].u) {
		struct knob_value *ttl = &k->v[KNOB_REUSE_RETAINED_INTERACTIVE_TTL];

		if (ttl->src >= KS_YAML)
			return ig_errf(eb, IG_E_CONFIG,
			               "--reuse-retained-interactive-ttl (from %s) needs "
			               "--reuse-prompt on (it is off, from %s)",
			               ttl->where, k->v[KNOB_REUSE_PROMPT].where);
		/* Retained slots default to 0 with prompt reuse off, unless named. */
		for (int id = KNOB_REUSE_RETAINED_DEVICE; id <= KNOB_REUSE_RETAINED_HOST; id++)
			if (k->v[id].src < KS_PROFILE) {
				k->v[id].u = 0;
				snprintf(k->v[id].where, sizeof(k->v[id].where),
				         "--reuse-prompt off (from %s)",
				         k->v[KNOB_REUSE_PROMPT].where);
			}
	}
	return IG_E_OK;
}
