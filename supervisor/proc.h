/*
 * proc.h - the supervisor's table of child processes: spawn, handshake,
 * health, restart with backoff, orderly stop.
 *
 * States of one child:
 *
 *   IDLE --spawn--> STARTING --hello ok--> RUNNING
 *                      |  \                   |  (3 missed pings: SIGKILL)
 *                      |   `-- exits/timeout -+--> BACKOFF --due--> spawn
 *                      `-- hello refused (role, version, pid) --> FAILED
 *
 * A child is spawned with fork+exec (nng is not fork-safe: between fork and
 * exec only async-signal-safe calls). It gets its own process group (the
 * terminal's Ctrl-C goes to the supervisor alone, which then stops the
 * children in order) and PR_SET_PDEATHSIG = SIGTERM (a supervisor killed with
 * -9 takes its children with it).
 */
#ifndef IGNIS_SUPERVISOR_PROC_H
#define IGNIS_SUPERVISOR_PROC_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <nng/nng.h>

#include "common/err.h"
#include "proto/msg.h"
#include "common/rtdir.h"

/* Restart backoff: PROC_BACKOFF_MIN_MS doubling per consecutive failure up to
 * PROC_BACKOFF_MAX_MS; a child that stayed up PROC_STABLE_MS resets it. */
#define PROC_BACKOFF_MIN_MS 100u
#define PROC_BACKOFF_MAX_MS 10000u
#define PROC_STABLE_MS      30000u
/* A child must say hello this long after its spawn. */
#define PROC_HELLO_TIMEOUT_MS 10000u
/* Health: a ping each interval; this many missed in a row kill the child. */
#define PROC_PING_INTERVAL_MS 1000u
#define PROC_PING_TIMEOUT_MS  1000
#define PROC_PING_MISSES      3
/* A child's serving loop busy in one step (a round of a large model on the
 * cpu backend) answers no request, but its pings still come back, saying how
 * long the loop has been away (pong.loop_ms): past PROC_LOOP_BUSY_MS that is
 * reported once; past PROC_LOOP_STUCK_MS the loop counts as stuck and each
 * ping as missed. */
#define PROC_LOOP_BUSY_MS  30000u
#define PROC_LOOP_STUCK_MS 900000u
/* Orderly stop: wait this long after `shutdown`, then SIGTERM, then SIGKILL. */
#define PROC_STOP_GRACE_MS 5000u
#define PROC_TERM_GRACE_MS 2000u

enum proc_state { PROC_IDLE, PROC_STARTING, PROC_RUNNING, PROC_BACKOFF, PROC_FAILED };

struct proc {
	const char *role;     /* "kvstore" */
	const char *program;  /* "ignis-kvstored" */
	const char *sockname; /* "kvstore" */
	const char *subdir;   /* "kvstore-daemon": its folder in the build tree */
	char exe[PATH_MAX];
	enum proc_state state;
	pid_t pid;           /* 0 when not running */
	uint64_t spawned_ms; /* monotonic */
	uint64_t ready_ms;   /* monotonic; 0 until hello */
	uint64_t restarts;   /* spawns after the first */
	uint32_t streak;     /* consecutive failures, for the backoff */
	uint64_t due_ms;     /* BACKOFF: respawn time */
	bool ever_ready;
	bool hello_killed;    /* killed for saying no hello in time */
	char why_failed[160]; /* FAILED before its first hello: what happened */
	nng_socket req;
	bool req_open;
	uint64_t next_ping_ms;
	uint64_t ping_seq;
	int ping_misses;
	bool busy_told; /* its loop's long step was reported (PROC_LOOP_BUSY_MS) */
	char build[65];
	/* Sent after each successful hello (the gpu-worker's plan); must be
	 * acknowledged, or the child is refused. NULL: none. */
	const struct msg *greeting;
};

/* The supervisor's view of the world, passed to every proc_ call. */
struct proc_env {
	char rtdir[RTDIR_PATH_MAX + 1];
	pid_t self;
};

void proc_init(struct proc *p, const char *role, const char *program, const char *sockname,
               const char *subdir);

/* Find the executable of `p` next to ours (installed layout) or in the build
 * tree, or in `bin_dir` when given. */
int proc_locate(struct proc *p, const char *self_exe, const char *bin_dir, struct ig_errbuf *eb);

/* Spawn `p` (state becomes STARTING). */
int proc_spawn(struct proc *p, const struct proc_env *env, struct ig_errbuf *eb);

/*
 * Advance `p`: handshake while STARTING, ping while RUNNING, respawn when a
 * BACKOFF is due. Returns IG_E_OK, or an error when the child was refused
 * (state FAILED; `eb` says why; the caller should stop).
 */
int proc_tick(struct proc *p, const struct proc_env *env, uint64_t now, struct ig_errbuf *eb);

/* Tell `p` that its pid exited with wait status `status` (from waitpid). */
void proc_exited(struct proc *p, int status, uint64_t now, bool stopping);

/* Orderly stop: shutdown request, then SIGTERM, then SIGKILL, waiting for the
 * exit each time. Blocks at most PROC_STOP_GRACE_MS + 2 * PROC_TERM_GRACE_MS
 * + a little. */
void proc_stop(struct proc *p, const struct proc_env *env);

const char *proc_state_name(enum proc_state s);

#endif
