/*
 * config.h - the supervisor's configuration file (`-c FILE`, YAML, loaded
 * with libcyaml).
 *
 * Keys known so far:
 *   runtime_dir: <absolute path>   where the control sockets live
 * An unknown key, a wrong type or a malformed document refuses the start
 * with libcyaml's account of what was wrong, prefixed by the file name. The
 * knob table (flags, IGNIS_* variables, profiles) grows from here.
 */
#ifndef IGNIS_SUPERVISOR_CONFIG_H
#define IGNIS_SUPERVISOR_CONFIG_H

#include "err.h"

struct cfg {
	char *runtime_dir;         /* NULL: not set in the file */
	char runtime_dir_src[300]; /* "config file 'x.yaml'", for messages */
	void *file;                /* libcyaml's document, freed by cfg_release */
};

/* Load `path`, or the embedded defaults when `path` is NULL. */
int cfg_load(struct cfg *c, const char *path, struct ig_errbuf *eb);
void cfg_release(struct cfg *c);

#endif
