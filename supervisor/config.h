/*
 * config.h - the supervisor's configuration: the knob table (common/knobs.h)
 * fed from flags, IGNIS_* variables and a YAML file (`-c FILE`, libcyaml).
 *
 * The YAML file is one mapping of knob keys (the flag's name with '_' for
 * '-') to scalars: `vram_headroom_bytes: 1200M`. An unknown key is refused at
 * its line, naming the nearest knob key; a key given twice at its second
 * line, naming the first; a non-scalar value or malformed YAML with
 * libcyaml's account and its line; a bad value names the key, the file and
 * line, and what is accepted. A knob of names (KT_NAMES) takes a scalar or
 * a YAML list of names, joined with commas as the flag writes them. cfg_resolve warns on stderr
 * about each IGNIS_* variable no knob reads (knob_env_unknown), naming the nearest knob.
 */
#ifndef IGNIS_SUPERVISOR_CONFIG_H
#define IGNIS_SUPERVISOR_CONFIG_H

#include "common/err.h"
#include "common/knobs.h"
#include "model/mfile.h"

struct cfg {
	struct knob_input in;     /* texts point into argv, environ or `file` */
	struct knobs k;           /* after cfg_resolve */
	void *file;               /* libcyaml's document, freed by cfg_release */
	char *lists[KNOB__COUNT]; /* a KT_NAMES key's value, a list joined with
	                             commas (cfg__scan's, freed by cfg_release) */
	const char *path;
	struct mfile model; /* --model FILE, open while the cfg lives */
	bool model_open;
};

/* Start empty. */
void cfg_init(struct cfg *c);
/* Set knob `id` from a flag (text "on" for a bare switch). */
void cfg_set_flag(struct cfg *c, enum knob_id id, const char *text);
/* Load `path` (NULL: none, the embedded default). */
int cfg_load_file(struct cfg *c, const char *path, struct ig_errbuf *eb);
/* Read the environment and resolve every knob. */
int cfg_resolve(struct cfg *c, struct ig_errbuf *eb);
void cfg_release(struct cfg *c);

#endif
