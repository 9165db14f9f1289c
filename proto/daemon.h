/*
 * daemon.h - what the two daemons (ignis-gpu-worker, ignis-kvstored) share
 * about being a supervised process: their command line, signals, the
 * control socket and the orderly exit.
 *
 *   --runtime-dir DIR     where the sockets live (also IGNIS_RUNTIME_DIR)
 *   --supervisor-pid PID  exit when this process is gone (set by the supervisor)
 *
 * A daemon exits cleanly (socket and lock removed, exit code 0) on SIGTERM,
 * SIGINT, a `shutdown` request, or the death of its supervisor.
 */
#ifndef IGNIS_PROTO_DAEMON_H
#define IGNIS_PROTO_DAEMON_H

#include <sys/types.h>

#include "common/event.h"
#include "service.h"

struct dmn_args {
	const char *runtime_dir; /* NULL: resolve from the environment */
	pid_t supervisor_pid;    /* 0: not supervised */
};

struct dmn_spec {
	const char *role;     /* "gpu-worker" */
	const char *program;  /* "ignis-gpu-worker" */
	const char *sockname; /* "gpu-worker" */
	const char *summary;  /* one line for --help */
	/* Called once after the socket listens, to add facts to the ready event
	 * (may be NULL). */
	void (*ready_fields)(struct ev *e);
	/* Requests other than hello, ping and shutdown (may be NULL: refused). */
	svc_handler_fn handle;
	void *ctx;
	/* Work between requests (may be NULL): called once per loop turn; it
	 * does one bounded step (a decode round) and returns true while more
	 * is pending, so the loop polls its socket without waiting until it is
	 * idle. A non-zero *fatal stops the daemon (exit 1). */
	bool (*work)(void *ctx, int *fatal);
	/* Where dmn_run puts its control service while it runs (may be NULL):
	 * the handler, called on the same thread, reads its counters there. */
	const struct svc **svc_at;
};

/* Parse argv. Returns 0 to run, 1 when --help/--version printed and the
 * program should exit 0, -1 on a usage error (already printed to stderr). */
int dmn_parse_args(const struct dmn_spec *spec, int argc, char **argv, struct dmn_args *out);

/* Run the control loop until asked to stop. Returns the process exit code. */
int dmn_run(const struct dmn_spec *spec, const struct dmn_args *args);

#endif
