/* expcounts.c - a calibration's expert counts beside the model (see expcounts.h). */
#include "expcounts.h"

#include <errno.h>
#include <inttypes.h>
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

int expcounts_read(const char *path, const struct mfile *f, uint64_t **counts, struct ig_errbuf *eb)
{
	const struct mdesc *m = &f->desc;
	uint64_t id = 0, n = (uint64_t)m->layers * m->experts, *c;
	unsigned version = 0, layers = 0, experts = 0;
	FILE *in = fopen(path, "r");
	int rc = IG_E_OK;

	*counts = NULL;
	if (!in)
		return ig_errf(eb, errno == ENOENT ? IG_E_NOTFOUND : IG_E_IO,
		               "cannot read '%s': %s", path, strerror(errno));
	if (fscanf(in, "ignis-expert-counts %u identity %" SCNx64 " layers %u experts %u", &version,
	           &id, &layers, &experts) != 4 ||
	    version != 1) {
		fclose(in);
		return ig_errf(
		    eb, IG_E_INVAL,
		    "'%s': not an expert counts file (version 1: 'ignis-expert-counts 1', "
		    "'identity HEX', 'layers L experts E', then a line of E counts a "
		    "layer)",
		    path);
	}
	if (id != mfile_identity(f) || layers != m->layers || experts != m->experts) {
		fclose(in);
		return ig_errf(
		    eb, IG_E_INVAL,
		    "'%s' counts another model (identity %016" PRIx64 ", %u layers of %u "
		    "experts) than '%s' (%016" PRIx64 ", %u of %u): run ignis-calibrate "
		    "on this one",
		    path, id, layers, experts, f->g.path, mfile_identity(f), m->layers, m->experts);
	}
	c = malloc((n ? n : 1) * sizeof(uint64_t));
	if (!c) {
		fclose(in);
		return ig_errf(eb, IG_E_NOMEM, "no memory for %" PRIu64 " counts", n);
	}
	for (uint64_t i = 0; i < n && !rc; i++) {
		char w[24], *end;

		/* digits only: a sign or a fraction is not a count */
		if (fscanf(in, "%23s", w) == 1 && w[0] >= '0' && w[0] <= '9') {
			errno = 0;
			c[i] = strtoull(w, &end, 10);
			if (!*end && !errno)
				continue;
		}
		rc = ig_errf(eb, IG_E_INVAL,
		             "'%s': count %" PRIu64 " of %" PRIu64 " (layer %" PRIu64
		             ", expert %" PRIu64 ") is missing or not a "
		             "number",
		             path, i + 1, n, i / m->experts, i % m->experts);
	}
	fclose(in);
	if (rc) {
		free(c);
		return rc;
	}
	*counts = c;
	return IG_E_OK;
}
