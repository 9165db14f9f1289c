/* config.c - flags, environment and YAML into the knob table (see config.h). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cyaml/cyaml.h>
#include <yaml.h> /* libyaml, under libcyaml (its pkg-config links it): key positions */

extern char **environ;

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
		if (knob_defs[i].type == KT_NAMES) {
			/* a scalar or a list: cfg__scan reads it, libcyaml passes over */
			f = (cyaml_schema_field_t)CYAML_FIELD_IGNORE("", CYAML_FLAG_OPTIONAL);
			f.key = cfg__keys[i];
			cfg__fields[i] = f;
			continue;
		}
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

/*
 * The line of each top-level key of the file, read with libyaml's events:
 * libcyaml names no line for a key it accepted, and for a duplicate or an
 * unknown key it names the position of the event it had read before (the
 * previous value), not the key's. A duplicate is refused at its second line,
 * naming the first; an unknown key at its line, naming the nearest knob key.
 * What libyaml cannot parse, or a document that is not one mapping, is left
 * to libcyaml's account (a value's error, which it places right).
 */
/* Add `item` (len bytes) to the comma-separated list *list (malloc'd). */
static int cfg__list_add(char **list, const char *item, size_t len)
{
	size_t have = *list ? strlen(*list) : 0;
	char *l = realloc(*list, have + len + 2);

	if (!l)
		return IG_E_NOMEM;
	if (have)
		l[have++] = ',';
	memcpy(l + have, item, len);
	l[have + len] = '\0';
	*list = l;
	return IG_E_OK;
}

static int cfg__scan(struct cfg *c, const char *path, int line[KNOB__COUNT], struct ig_errbuf *eb)
{
	FILE *f = fopen(path, "rb");
	yaml_parser_t p;
	yaml_event_t ev;
	int depth = 0, rc = IG_E_OK, list_id = -1; /* the KT_NAMES knob whose value comes */
	bool key_next = false, done = false, in_list = false;

	if (!f)
		return ig_errf(eb, IG_E_CONFIG, "cannot read config file '%s': %s", path,
		               strerror(errno));
	if (!yaml_parser_initialize(&p)) {
		fclose(f);
		return ig_errf(eb, IG_E_NOMEM, "config file '%s': no memory for the parser", path);
	}
	yaml_parser_set_input_file(&p, f);
	while (!done && rc == IG_E_OK && yaml_parser_parse(&p, &ev)) {
		switch (ev.type) {
		case YAML_MAPPING_START_EVENT:
		case YAML_SEQUENCE_START_EVENT:
			if (list_id >= 0 &&
			    (depth > 1 || (depth == 1 && ev.type == YAML_MAPPING_START_EVENT))) {
				rc = ig_errf(eb, IG_E_CONFIG,
				             "config file '%s': key '%s' (at %s:%d) holds a %s; "
				             "accepted: a name, or a list of names",
				             path, cfg__keys[list_id], path,
				             (int)ev.start_mark.line + 1,
				             ev.type == YAML_MAPPING_START_EVENT ? "mapping"
				                                                 : "nested list");
				break;
			}
			if (list_id >= 0 && depth == 1) {
				in_list = true;
				if (!(c->lists[list_id] = strdup("")))
					rc = IG_E_NOMEM;
			}
			if (depth == 0 && ev.type == YAML_SEQUENCE_START_EVENT)
				done = true; /* not a mapping: libcyaml says so */
			else if (depth == 1 && key_next)
				done = true; /* a complex key: libcyaml refuses it */
			depth++;
			key_next = depth == 1;
			break;
		case YAML_MAPPING_END_EVENT:
		case YAML_SEQUENCE_END_EVENT:
			if (in_list && depth == 2) {
				in_list = false;
				list_id = -1;
			}
			depth--;
			key_next = depth == 1; /* a value ended: a key comes next */
			done = depth == 0;
			break;
		case YAML_SCALAR_EVENT:
		case YAML_ALIAS_EVENT:
			if (depth == 0) {
				done = true; /* a bare scalar document */
			} else if (depth == 1 && key_next) {
				const char *key = (const char *)ev.data.scalar.value;
				int at = (int)ev.start_mark.line + 1, id = -1;

				if (ev.type == YAML_ALIAS_EVENT) {
					done = true;
					break;
				}
				for (int i = 0; i < KNOB__COUNT && id < 0; i++)
					if (!strcmp(key, cfg__keys[i]))
						id = i;
				if (id < 0) {
					char near[64];

					knob_yaml_key(knob_nearest(key, strlen(key), KNOB_AS_YAML),
					              near, sizeof(near));
					rc = ig_errf(
					    eb, IG_E_CONFIG,
					    "config file '%s': unknown key '%s' (at %s:%d); the "
					    "nearest knob key is '%s'; accepted: a YAML mapping "
					    "of knob keys (see docs/reference/knobs.md) to values",
					    path, key, path, at, near);
				} else if (line[id]) {
					rc = ig_errf(
					    eb, IG_E_CONFIG,
					    "config file '%s': key '%s' (at %s:%d) was first "
					    "given at line %d; keep one of them",
					    path, key, path, at, line[id]);
				} else {
					line[id] = at;
					if (knob_defs[id].type == KT_NAMES)
						list_id = id;
				}
				key_next = false;
			} else if (depth == 1) {
				key_next = true; /* a scalar value */
				if (list_id >= 0 && ev.type == YAML_SCALAR_EVENT)
					rc = cfg__list_add(&c->lists[list_id],
					                   (const char *)ev.data.scalar.value,
					                   ev.data.scalar.length);
				list_id = -1;
			} else if (in_list && ev.type == YAML_SCALAR_EVENT) {
				/* a list's item: one name, so no comma in it */
				if (memchr(ev.data.scalar.value, ',', ev.data.scalar.length))
					rc = ig_errf(
					    eb, IG_E_CONFIG,
					    "config file '%s': key '%s' (at %s:%d): the item "
					    "'%.128s' holds a comma; accepted: one name an item",
					    path, cfg__keys[list_id], path,
					    (int)ev.start_mark.line + 1,
					    (const char *)ev.data.scalar.value);
				else
					rc = cfg__list_add(&c->lists[list_id],
					                   (const char *)ev.data.scalar.value,
					                   ev.data.scalar.length);
			}
			break;
		case YAML_STREAM_END_EVENT:
			done = true;
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&p);
	fclose(f);
	return rc;
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
	int line[KNOB__COUNT] = {0};
	struct stat st;
	cyaml_err_t err;
	int rc;

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
	if ((rc = cfg__scan(c, path, line, eb)))
		return rc == IG_E_NOMEM ? ig_errf(eb, rc, "config file '%s': no memory", path)
		                        : IG_E_CONFIG;
	err = cyaml_load_file(path, &cy, &cfg__schema, (cyaml_data_t **)&f, NULL);
	if (err != CYAML_OK)
		return ig_errf(eb, IG_E_CONFIG,
		               "config file '%s': %s%s%s; accepted: a YAML mapping of knob keys "
		               "(see docs/reference/knobs.md) to values",
		               path, cyaml_strerror(err), log.text[0] ? ": " : "", log.text);
	c->file = f;
	for (int i = 0; f && i < KNOB__COUNT; i++) {
		struct knob_raw *r = &c->in.yaml[i];
		const char *text = knob_defs[i].type == KT_NAMES ? c->lists[i] : f->v[i];

		if (!text)
			continue;
		r->text = text;
		if (line[i])
			snprintf(r->where, sizeof(r->where), "%s:%d", path, line[i]);
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

/* A variable no knob reads is a typo more often than not: warn, on stderr
 * like the configuration's errors, naming the knob meant. */
static void cfg__warn_env(void)
{
	struct knob_env_unknown u[16];
	size_t n = knob_env_unknown(environ, u, 16);

	for (size_t i = 0; i < n && i < 16; i++) {
		char env[96], flag[96];

		knob_env(u[i].nearest, env, sizeof(env));
		knob_flag(u[i].nearest, flag, sizeof(flag));
		fprintf(stderr,
		        "ignis-supervisor: warning: %.*s is set, but no knob reads it (ignored); "
		        "the nearest knob's variable is %s (%s)\n",
		        (int)u[i].len, u[i].name, env, flag);
	}
	if (n > 16)
		fprintf(stderr,
		        "ignis-supervisor: warning: %zu more IGNIS_* variables no knob reads\n",
		        n - 16);
}

int cfg_resolve(struct cfg *c, struct ig_errbuf *eb)
{
	c->in.load_model = cfg__load_model;
	c->in.load_ctx = c;
	knob_read_env(&c->in);
	cfg__warn_env();
	return knob_resolve(&c->in, &c->k, eb);
}

void cfg_release(struct cfg *c)
{
	cyaml_config_t cy = {.mem_fn = cyaml_mem, .log_level = CYAML_LOG_ERROR};

	if (c->file)
		cyaml_free(&cy, &cfg__schema, c->file, 0);
	c->file = NULL;
	for (int i = 0; i < KNOB__COUNT; i++) {
		free(c->lists[i]);
		c->lists[i] = NULL;
	}
	if (c->model_open) {
		mfile_close(&c->model);
		c->model_open = false;
	}
}
