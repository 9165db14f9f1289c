/* expcounts.c - a calibration's expert counts beside the model (see expcounts.h). */
#include "expcounts.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int expcounts_path(char *out, size_t cap, const char *model_path, struct ig_errbuf *eb)
{
	int n = snprintf(out, cap, "%s%s", model_path, EXPCOUNTS_SUFFIX);

	if (n < 0 || (size_t)n >= cap)
		return ig_errf(eb, IG_E_INVAL, "'%s%s': the path is too long", model_path,
		               EXPCOUNTS_SUFFIX);
	return IG_E_OK;
}

int expcounts_write(const char *path, const struct mfile *f, const uint64_t *counts,
                    struct ig_errbuf *eb)
{
	const struct mdesc *m = &f->desc;
	char tmp[4200];
	FILE *o;
	int bad;

	if (m->family != MDESC_MOE)
		return ig_errf(eb, IG_E_INVAL, "'%s' has no routed experts", f->g.path);
	if (snprintf(tmp, sizeof(tmp), "%s.tmp-%d", path, (int)getpid()) >= (int)sizeof(tmp))
		return ig_errf(eb, IG_E_INVAL, "'%s': the path is too long", path);
	o = fopen(tmp, "w");
	if (!o)
		return ig_errf(eb, IG_E_IO, "cannot write '%s': %s", tmp, strerror(errno));
	fprintf(o, "ignis-expert-counts 1\nidentity %016" PRIx64 "\nlayers %u experts %u\n",
	        mfile_identity(f), m->layers, m->experts);
	for (uint32_t l = 0; l < m->layers; l++)
		for (uint32_t e = 0; e < m->experts; e++)
			fprintf(o, "%" PRIu64 "%c", counts[(uint64_t)l * m->experts + e],
			        e + 1 < m->experts ? ' ' : '\n');
	bad = ferror(o);
	if (fclose(o) || bad || rename(tmp, path)) {
		int err = errno;

		unlink(tmp);
		return ig_errf(eb, IG_E_IO, "cannot write '%s': %s", path, strerror(err));
	}
	return IG_E_OK;
}

/* The longest count, 2^64 - 1, has 20 digits. */
#define XC_DIGITS 20

/* A whole number of 1 to 20 digits, s[0..n), at most 2^64 - 1. */
static bool xc_number(const char *s, size_t n, uint64_t *v)
{
	uint64_t x = 0;

	if (n == 0 || n > XC_DIGITS)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned d = (unsigned char)s[i] - '0';

		if (d > 9 || x > (UINT64_MAX - d) / 10)
			return false;
		x = x * 10 + d;
	}
	*v = x;
	return true;
}

/* One header line into buf (without its '\n'): false when the file ends
 * first or the line does not fit. */
static bool xc_header_line(FILE *in, char *buf, size_t cap)
{
	size_t n;

	if (!fgets(buf, (int)cap, in))
		return false;
	n = strlen(buf);
	if (n == 0 || buf[n - 1] != '\n')
		return false;
	buf[n - 1] = '\0';
	return true;
}

/*
 * The header: "ignis-expert-counts 1", "identity HEX", "layers L experts E",
 * each a line, L and E whole numbers (never wrapped to fit). 0, or the line
 * at fault.
 */
static unsigned xc_header(FILE *in, uint64_t *id, uint64_t *layers, uint64_t *experts)
{
	char l[128], *e;

	if (!xc_header_line(in, l, sizeof l) || strcmp(l, "ignis-expert-counts 1"))
		return 1;
	if (!xc_header_line(in, l, sizeof l) || strncmp(l, "identity ", 9) || !l[9] ||
	    strlen(l + 9) > 16 || strspn(l + 9, "0123456789abcdefABCDEF") != strlen(l + 9))
		return 2;
	*id = strtoull(l + 9, NULL, 16);
	if (!xc_header_line(in, l, sizeof l) || strncmp(l, "layers ", 7) ||
	    !(e = strstr(l + 7, " experts ")) || !xc_number(l + 7, (size_t)(e - l - 7), layers) ||
	    !xc_number(e + 9, strlen(e + 9), experts))
		return 3;
	return 0;
}

/*
 * The next word of a line into w (its first cap - 1 bytes, NUL-terminated),
 * its whole length in *len, whether it is digits only in *digits: spaces and
 * tabs before it skipped, the line's end not crossed. Returns the character
 * that ended it ('\n' or EOF when the line ended; *len 0 when no word was
 * left). Holds no more than cap bytes, whatever the word's length.
 */
static int xc_word(FILE *in, char *w, size_t cap, size_t *len, bool *digits)
{
	int c;

	*len = 0;
	*digits = true;
	w[0] = '\0';
	do
		c = getc(in);
	while (c == ' ' || c == '\t');
	while (c != ' ' && c != '\t' && c != '\n' && c != EOF) {
		if (*len + 1 < cap) {
			w[*len] = (char)c;
			w[*len + 1] = '\0';
		}
		*digits = *digits && c >= '0' && c <= '9';
		(*len)++;
		c = getc(in);
	}
	return c;
}

int expcounts_read(const char *path, const struct mfile *f, uint64_t **counts, struct ig_errbuf *eb)
{
	const struct mdesc *m = &f->desc;
	uint64_t id = 0, layers = 0, experts = 0, n, *c;
	unsigned bad, line;
	FILE *in = fopen(path, "r");
	int rc = IG_E_OK, ch;

	*counts = NULL;
	if (!in)
		return ig_errf(eb, errno == ENOENT ? IG_E_NOTFOUND : IG_E_IO,
		               "cannot read '%s': %s", path, strerror(errno));
	if ((bad = xc_header(in, &id, &layers, &experts))) {
		fclose(in);
		return ig_errf(
		    eb, IG_E_INVAL,
		    "'%s' line %u: not an expert counts file (version 1: 'ignis-expert-counts 1', "
		    "'identity HEX', 'layers L experts E', then a line of E counts a "
		    "layer)",
		    path, bad);
	}
	/* the model's own shapes, checked before anything is allocated */
	if (id != mfile_identity(f) || layers != m->layers || experts != m->experts) {
		fclose(in);
		return ig_errf(eb, IG_E_INVAL,
		               "'%s' counts another model (identity %016" PRIx64 ", %" PRIu64
		               " layers of %" PRIu64 " experts) than '%s' (%016" PRIx64
		               ", %u of %u): run ignis-calibrate "
		               "on this one",
		               path, id, layers, experts, f->g.path, mfile_identity(f), m->layers,
		               m->experts);
	}
	n = layers * experts;
	c = malloc((n ? n : 1) * sizeof(uint64_t));
	if (!c) {
		fclose(in);
		return ig_errf(eb, IG_E_NOMEM, "no memory for %" PRIu64 " counts", n);
	}
	/* one line a layer, line 4 the first: each count a whole number of at
	 * most 20 digits, read whole (a longer one is refused, never split) */
	for (uint32_t l = 0; l < m->layers && !rc; l++) {
		bool ended = false;

		line = 4 + l;
		for (uint32_t e = 0; e < m->experts && !rc; e++) {
			char w[XC_DIGITS + 2];
			size_t len = 0;
			bool digits = true;
			uint64_t v;

			if (!ended) {
				ch = xc_word(in, w, sizeof w, &len, &digits);
				ended = ch == '\n' || ch == EOF;
			}
			if (len == 0)
				rc = ig_errf(
				    eb, IG_E_INVAL,
				    "'%s' line %u: count %u of %u (layer %u, expert %u) is "
				    "missing or not a number: the line ends there; accepted: "
				    "one line a layer of %u counts",
				    path, line, e + 1, m->experts, l, e, m->experts);
			else if (!digits)
				rc = ig_errf(
				    eb, IG_E_INVAL,
				    "'%s' line %u: count %u of %u (layer %u, expert %u) is "
				    "'%s%s', not a whole number; accepted: digits only, 0 to "
				    "%" PRIu64,
				    path, line, e + 1, m->experts, l, e, w,
				    len > sizeof w - 1 ? "..." : "", UINT64_MAX);
			else if (len > XC_DIGITS)
				rc = ig_errf(
				    eb, IG_E_INVAL,
				    "'%s' line %u: count %u of %u (layer %u, expert %u) is "
				    "'%.*s...' of %zu digits; accepted: at most %u digits, 0 "
				    "to %" PRIu64,
				    path, line, e + 1, m->experts, l, e, XC_DIGITS, w, len,
				    XC_DIGITS, UINT64_MAX);
			else if (!xc_number(w, len, &v))
				rc = ig_errf(
				    eb, IG_E_INVAL,
				    "'%s' line %u: count %u of %u (layer %u, expert %u) is "
				    "'%s', above %" PRIu64 " (2^64 - 1); accepted: 0 to %" PRIu64,
				    path, line, e + 1, m->experts, l, e, w, UINT64_MAX, UINT64_MAX);
			else
				c[(uint64_t)l * m->experts + e] = v;
		}
		if (!rc && !ended) {
			do
				ch = getc(in);
			while (ch == ' ' || ch == '\t');
			if (ch != '\n' && ch != EOF)
				rc = ig_errf(
				    eb, IG_E_INVAL,
				    "'%s' line %u: layer %u holds more than %u counts; accepted: "
				    "one line a layer of %u counts",
				    path, line, l, m->experts, m->experts);
		}
	}
	/* nothing but blank lines after the last layer's */
	for (line = 4 + m->layers; !rc && (ch = getc(in)) != EOF;) {
		if (ch == '\n')
			line++;
		else if (ch != ' ' && ch != '\t')
			rc = ig_errf(
			    eb, IG_E_INVAL,
			    "'%s' line %u: past the last layer's line (%u layers); accepted: "
			    "nothing after line %u",
			    path, line, m->layers, 3 + m->layers);
	}
	fclose(in);
	if (rc) {
		free(c);
		return rc;
	}
	*counts = c;
	return IG_E_OK;
}
