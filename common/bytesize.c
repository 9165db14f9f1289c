/* bytesize.c - parsing and printing byte sizes (see bytesize.h). */
#include "bytesize.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char bsize__accepted[] =
    "a whole number with an optional suffix K, M, G or T (binary: 1K = 1024), e.g. 1536M";
static const char bsize__accepted_tok[] =
    "a whole number with an optional suffix K, M, G or T (binary: 1K = 1024), e.g. 1536M, "
    "or a token count with 'tok', e.g. 512Ktok";

int bsize_parse(const char *s, bool allow_tokens, struct bsize *out, struct ig_errbuf *eb)
{
	const char *acc = allow_tokens ? bsize__accepted_tok : bsize__accepted;
	const char *p = s;
	uint64_t v = 0, mul = 1;
	int shift = 0;
	bool tokens = false;

	if (!s || !*s)
		return ig_errf(eb, IG_E_INVAL, "empty size; expected %s", acc);
	if (!isdigit((unsigned char)*p))
		return ig_errf(eb, IG_E_INVAL, "'%s' is not a size; expected %s", s, acc);
	while (isdigit((unsigned char)*p)) {
		uint64_t d = (uint64_t)(*p - '0');

		if (v > (UINT64_MAX - d) / 10)
			return ig_errf(eb, IG_E_INVAL, "'%s' is too large (over 2^64 - 1)", s);
		v = v * 10 + d;
		p++;
	}
	/* "7tok": that 't' begins the token suffix; it is not the T suffix. */
	if (strcasecmp(p, "tok") == 0)
		goto suffix_done;
	switch (toupper((unsigned char)*p)) {
	case 'K':
		shift = 10;
		break;
	case 'M':
		shift = 20;
		break;
	case 'G':
		shift = 30;
		break;
	case 'T':
		shift = 40;
		break;
	default:
		break;
	}
	if (shift) {
		p++;
		if (strncasecmp(p, "ib", 2) == 0)
			p += 2;
		mul = (uint64_t)1 << shift;
	}
suffix_done:
	if (allow_tokens && strcasecmp(p, "tok") == 0) {
		tokens = true;
		p += 3;
	}
	if (*p)
		return ig_errf(eb, IG_E_INVAL, "'%s' has an unknown suffix '%s'; expected %s", s, p,
		               acc);
	if (v > UINT64_MAX / mul)
		return ig_errf(eb, IG_E_INVAL, "'%s' is too large (over 2^64 - 1)", s);
	out->n = v * mul;
	out->tokens = tokens;
	return IG_E_OK;
}

void bsize_format(char *out, size_t cap, uint64_t bytes)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	double v = (double)bytes;
	int u = 0;

	if (bytes < 1024) {
		snprintf(out, cap, "%llu B", (unsigned long long)bytes);
		return;
	}
	while (v >= 1024.0 && u < 6) {
		v /= 1024.0;
		u++;
	}
	snprintf(out, cap, "%.2f %s", v, units[u]);
}
