/* config.c - flags, environment and YAML into the knob table (see config.h). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cyaml/cyaml.h>

/* One string per knob: the schema is generated from the knob table. */
struct cfg_file {
	char *v[KNOB__COUNT];
};

static char cfg__keys[KNOB__COUNT][64];
static cyaml_schema_field_t cfg__fields[KNOB__COUNT + 1];
static const cyaml_schema_value_t cfg__schema = {
    CYAML_VALUE_MAPPING(CYAML_FLAG_POINTER, struct cfg_file, cfg__fields),
};

/* Build the schema once (before threads: main calls cfg_init first). */
static void cfg__schema_init(void)
{
	static bool done;

	if (done)
		return;
	for (int i = 0; i < KNOB__COUNT; i++) {
		cyaml_schema_field_t f =
		    CYAML_FIELD_STRING_PTR("", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL,
		                           struct cfg_file, v[0], 0, CYAML_UNLIMITED);

		knob_yaml_key((enum knob_id)i, cfg__keys[i], sizeof(cfg__keys[i]));
		f.key = cfg__keys[i];
		f.data_offset =
		    (uint32_t)(offsetof(struct cfg_file, v) + (size_t)i * sizeof(char *));
		cfg__fields[i] = f;
	}
	cfg__fields[KNOB__COUNT] = (cyaml_schema_field_t)CYAML_FIELD_END;
	done = true;
}

void cfg_init(struct cfg *c)
{
	memset(c, 0, sizeof(*c));
	cfg__schema_init();
}

void cfg_set_flag(struct cfg *c, enum knob_id id, const char *text)
{
	c->in.flag[id].text = text;
	knob_flag(id, c->in.flag[id].where, sizeof(c->in.flag[id].where));
}

/* libcyaml reports details through its log callback: collect them. */
struct cfg__log {
	char text[384];
};

static void cfg__log_fn(cyaml_log_t level, void *ctx, const char *fmt, va_list args)
{
	struct cfg__log *log = ctx;
	size_t used = strlen(log->text);
	char line[256];

	if (level < CYAML_LOG_ERROR || used + 3 >= sizeof(log->text))
		return;
	vsnprintf(line, sizeof(line), fmt, args);
	line[strcspn(line, "\n")] = '\0';
	snprintf(log->text + used, sizeof(log->text) - used, "%s%s", used ? "; " : "", line);
}

/* The line of `key:` in the file, for messages (libcyaml gives no positions
 * for values it accepted): a line that starts with the key, bare or quoted,
 * followed by ':'. 0 when not found (a flow mapping, say). */
static int cfg__line_of(const char *path, const char *key)
{
	FILE *f = fopen(path, "r");
	size_t n = strlen(key), cap = 0;
	char *buf = NULL;
	int line = 0, found = 0;

	if (!f)
		return 0;
	while (!found && getline(&buf, &cap, f) >= 0) {
		const char *p = buf;
		char quote = 0;

		line++;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '"' || *p == '\'')
			quote = *p++;
		if (strncmp(p, key, n))
			continue;
		p += n;
		if (quote && *p++ != quote)
			continue;
		while (*p == ' ' || *p == '\t')
			p++;
		found = *p == ':';
	}
	free(buf);
	fclose(f);
	return found ? line : 0;
}

int cfg_load_file(struct cfg *c, const char *path, struct ig_errbuf *eb)
{
	struct cfg__log log = {.text = ""};
	cyaml_config_t cy = {
	    .log_fn = cfg__log_fn,
	    .log_ctx = &log,
	    .mem_fn = cyaml_mem,
	    .log_level = CYAML_LOG_ERROR,
	    .flags = CYAML_CFG_DEFAULT,
	};
	struct cfg_file *f = NULL;
	struct stat st;
	cyaml_err_t err;

	if (!path)
		return IG_E_OK;
	c->path = path;
	if (stat(path, &st) != 0)
		return ig_errf(eb, IG_E_CONFIG, "cannot read config file '%s': %s", path,
		               strerror(errno));
	if (!S_ISREG(st.st_mode))
		return ig_errf(eb, IG_E_CONFIG, "config file '%s' is not a regular file", path);
	if (st.st_size == 0)
		return IG_E_OK; /* an empty file sets nothing */
	err = cyaml_load_file(path, &cy, &cfg__schema, (cyaml_data_t **)&f, NULL);
	if (err != CYAML_OK)
		return ig_errf(eb, IG_E_CONFIG,
		               "config file '%s': %s%s%s; accepted: a YAML mapping of knob keys "
		               "(see docs/reference/knobs.md) to values",
		               path, cyaml_strerror(err), log.text[0] ? ": " : "", log.text);
	c->file = f;
	for (int i = 0; f && i < KNOB__COUNT; i++) {
		struct knob_raw *r = &c->in.yaml[i];
		int line;

		if (!f->v[i])
			continue;
		r->text = f->v[i];
		line = cfg__line_of(path, cfg__keys[i]);
		if (line)
			snprintf(r->where, sizeof(r->where), "%s:%d", path, line);
		else
			snprintf(r->where, sizeof(r->where), "%s", path);
	}
	return IG_E_OK;
}

static const struct mdesc *cfg__load_model(void *ctx, const char *path, const char *where,
                                           struct ig_errbuf *eb)
{
	struct cfg *c = ctx;

	if (c->model_open) {
		mfile_close(&c->model);
		c->model_open = false;
	}
	if (mfile_open(&c->model, path, eb)) {
		ig_errprefix(eb, "--model (from %s)", where);
		eb->code = IG_E_CONFIG;
		return NULL;
	}
	c->model_open = true;
	return &c->model.desc;
}

int cfg_resolve(struct cfg *c, struct ig_errbuf *eb)
{
	c->in.load_model = cfg__load_model;
	c->in.load_ctx = c;
	knob_read_env(&c->in);
	return knob_resolve(&c->in, &c->k, eb);
}

void cfg_release(struct cfg *c)
{
	cyaml_config_t cy = {.mem_fn = cyaml_mem, .log_level = CYAML_LOG_ERROR};

	if (c->file)
		cyaml_free(&cy, &cfg__schema, c->file, 0);
	c->file = NULL;
	if (c->model_open) {
		mfile_close(&c->model);
		c->model_open = false;
	}
}
