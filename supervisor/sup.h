/*
 * sup.h - the supervisor's commands: start (the long-running loop), plan,
 * status and stop (clients of a running supervisor's control socket).
 */
#ifndef IGNIS_SUPERVISOR_SUP_H
#define IGNIS_SUPERVISOR_SUP_H

#include <stdbool.h>

#include "config.h"

struct sup_opts {
	struct cfg *cfg;     /* flags and file loaded; start and plan resolve it */
	const char *bin_dir; /* --bin-dir; NULL: next to us / the build tree */
	bool json;           /* status --json, plan --json */
	const char *argv0;
};

/* Each returns the process exit code. */
int sup_start(const struct sup_opts *o);
int sup_plan(const struct sup_opts *o);
int sup_status(const struct sup_opts *o);
int sup_stop(const struct sup_opts *o);
/* `restart ROLE`: kvstore or gpu-worker (worker), in order. */
int sup_restart(const struct sup_opts *o, const char *role);

/* The runtime directory from flag, environment, file or default. */
int sup_rtdir(const struct sup_opts *o, char *out, size_t cap, struct ig_errbuf *eb);

#endif
