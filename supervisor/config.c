/* config.c - YAML configuration through libcyaml (see config.h). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <cyaml/cyaml.h>

#include "rtdir.h"

struct cfg_file {
	char *runtime_dir;
};

static const cyaml_schema_field_t cfg__fields[] = {
    CYAML_FIELD_STRING_PTR("runtime_dir", CYAML_FLAG_POINTER | CYAML_FLAG_OPTIONAL, struct cfg_file,
                           runtime_dir, 1, RTDIR_PATH_MAX),
    CYAML_FIELD_END,
};

static const cyaml_schema_value_t cfg__schema = {
    CYAML_VALUE_MAPPING(CYAML_FLAG_POINTER, struct cfg_file, cfg__fields),
};

/* libcyaml reports details through its log callback: collect them. */
struct cfg__log {
	char text[384];
};

static void cfg__log_fn(cyaml_log_t level, void *ctx, const char *fmt, va_list args)
{
	struct cfg__log *log = ctx;
	size_t used = strlen(log->text);
	char line[256];
	size_t n;

	if (level < CYAML_LOG_ERROR || used + 3 >= sizeof(log->text))
		return;
	vsnprintf(line, sizeof(line), fmt, args);
	n = strcspn(line, "\n");
	line[n] = '\0';
	snprintf(log->text + used, sizeof(log->text) - used, "%s%s", used ? "; " : "", line);
}

int cfg_load(struct cfg *c, const char *path, struct ig_errbuf *eb)
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

	memset(c, 0, sizeof(*c));
	if (!path)
		return IG_E_OK; /* the embedded default: every knob at its default */
	if (stat(path, &st) != 0)
		return ig_errf(eb, IG_E_CONFIG, "cannot read config file '%s': %s", path,
		               strerror(errno));
	if (!S_ISREG(st.st_mode))
		return ig_errf(eb, IG_E_CONFIG, "config file '%s' is not a regular file", path);
	err = cyaml_load_file(path, &cy, &cfg__schema, (cyaml_data_t **)&f, NULL);
	if (err != CYAML_OK)
		return ig_errf(eb, IG_E_CONFIG,
		               "config file '%s': %s%s%s; accepted: a YAML mapping with the key "
		               "runtime_dir (an absolute path)",
		               path, cyaml_strerror(err), log.text[0] ? ": " : "", log.text);
	c->file = f;
	c->runtime_dir = f ? f->runtime_dir : NULL;
	snprintf(c->runtime_dir_src, sizeof(c->runtime_dir_src), "config file '%s'", path);
	if (c->runtime_dir && c->runtime_dir[0] != '/') {
		int rc = ig_errf(eb, IG_E_CONFIG,
		                 "config file '%s': runtime_dir '%s' is not an absolute path; "
		                 "accepted: an absolute path of at most %d bytes",
		                 path, c->runtime_dir, RTDIR_PATH_MAX);

		cfg_release(c);
		return rc;
	}
	return IG_E_OK;
}

void cfg_release(struct cfg *c)
{
	cyaml_config_t cy = {.mem_fn = cyaml_mem, .log_level = CYAML_LOG_ERROR};

	if (c->file)
		cyaml_free(&cy, &cfg__schema, c->file, 0);
	memset(c, 0, sizeof(*c));
}
