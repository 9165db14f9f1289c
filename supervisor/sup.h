/*
 * sup.h - the supervisor's commands: start (the long-running loop), status
 * and stop (clients of a running supervisor's control socket).
 */
#ifndef IGNIS_SUPERVISOR_SUP_H
#define IGNIS_SUPERVISOR_SUP_H

#include <stdbool.h>

struct sup_opts {
	const char *config_path; /* -c FILE; NULL: the embedded default */
	const char *runtime_dir; /* --runtime-dir; NULL: resolve */
	const char *bin_dir;     /* --bin-dir; NULL: next to us / the build tree */
	bool json;               /* status --json */
	const char *argv0;
};

/* Each returns the process exit code (0 ok, 1 failure). */
int sup_start(const struct sup_opts *o);
int sup_status(const struct sup_opts *o);
int sup_stop(const struct sup_opts *o);

#endif
