/*
 * lisguard.h - a listener that heals itself: nng 1.5.2's wedge (upstream
 * issue 1518, fixed in 1.6) found within LG_CONFIRM_MS, and the listener
 * re-created without disturbing any client already connected.
 *
 * The wedge: a connection that closes before nng's 8-byte header makes the
 * transport hand NNG_ECLOSED to the socket's accept loop, which takes it for
 * its own close and stops asking for connections. The transport goes on
 * accepting and negotiating, so a client connecting later believes it is
 * connected and waits for an answer that never comes. nng counts that error
 * in the listener's statistics, where no closed pipe explains it, which is
 * how the guard sees it: it reads the current listener's counters every
 * LG_CHECK_MS and re-creates the listener when they show such an error for
 * LG_CONFIRM_MS and nng has accepted no connection since, its own probe
 * included (a pipe's own close shows such an error for a moment; a
 * connection that fails in a way nng survives shows one for good, but the
 * accepts go on after it). A ping
 * through nng every `ping_ms` stays as a safety net for anything else that
 * stops the listener answering.
 *
 * Re-creating: on ipc the socket file is unlinked and a new listener binds
 * the same path on the same nng socket, while the old listener is kept
 * (retired): the clients it connected keep their pipes and their streams.
 * A retired listener is closed once it has no pipe left, or LG_RETIRE_MS
 * after it was retired (connections that arrived while it was wedged are
 * stuck there, and only closing it frees them: their clients redial the new
 * one and nng's REQ resends their request). On tcp the port cannot be bound
 * twice, so the old listener is closed first and its clients redial.
 *
 * What closing a wedged listener costs: nng 1.5.2 never frees its transport
 * endpoint nor the connections it negotiated while wedged (they wait on the
 * endpoint's list, which its close does not empty), about 2 KB each, once a
 * cure, not once a request. The leak is nng's and cannot be avoided here (no
 * nng call restarts a stopped accept loop, and only the close lets those
 * clients go); tests/lsan.supp says so to LeakSanitizer.
 *
 * Events: ignis.proto.listener_recreated (socket, reason, retired_pipes,
 * error when the new listen failed), the first EV_LIMIT_BURST of a period,
 * then one ignis.proto.listener_recreated_summary (count) a period: a
 * client that repeats the wedge does not fill the log either.
 */
#ifndef IGNIS_PROTO_LISGUARD_H
#define IGNIS_PROTO_LISGUARD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <nng/nng.h>

#include "common/err.h"
#include "common/event.h"

/* How often the listener's counters are read: a wedge is cured this long
 * after it happened, at most, plus one bind. */
#define LG_CHECK_MS 20
/* How long, and over how many checks, the counters must show an error no
 * closed pipe explains, with no connection accepted since, before the
 * listener counts as wedged: longer than a closed pipe's wait for nng's
 * reaper on a loaded machine (it counts its error before it leaves the pipe
 * count: 20 ms measured under a sanitizer and load) and than nng's 100 ms
 * pause after a connection that failed in a way its accept loop survives. */
#define LG_CONFIRM_MS     250
#define LG_CONFIRM_CHECKS 3
/* When no client connects by itself this long after a suspect appeared,
 * the guard connects once (a wedged listener accepts nothing, a healthy one
 * at once); the verdict waits LG_PROBE_MS after that connection. */
#define LG_PROBE_AFTER_MS 100
#define LG_PROBE_MS       150
/* The safety-net ping's default period. */
#define LG_PING_MS 5000
/* How long the safety net waits for its ping's answer. Generous: the wedge
 * the guard knows is found by the counters within LG_CHECK_MS; the ping is
 * for what nothing else sees, and a loaded process under a sanitizer (a door
 * streaming 1,000 HTTP answers on two slow cores) once took over a second to
 * answer twice in a row and had a healthy listener re-created. */
#define LG_PING_ANSWER_MS 3000
/* A retired listener's pipes are closed this long after it was retired. */
#define LG_RETIRE_MS 1000
/* Retired listeners kept at once; past it the oldest is closed. */
#define LG_RETIRED_MAX 64

struct lg_retired {
	nng_listener l;
	uint64_t since_ms;
};

/* What a guard may be told; zeroes mean the defaults. */
struct lg_opts {
	int ping_ms;   /* the safety-net ping's period (LG_PING_MS) */
	int retire_ms; /* a retired listener's grace (LG_RETIRE_MS) */
	/* optional: a counter the serving loop bumps each time it waits for a
	 * request; a failed ping counts only if it moved meanwhile (a loop busy
	 * elsewhere is not a wedged listener). NULL: every failure counts. */
	atomic_uint_fast64_t *progress;
};

struct lisguard {
	nng_socket sock; /* not owned */
	char url[160];
	char ipc_path[128]; /* empty for tcp */
	int ping_ms, retire_ms;
	atomic_uint_fast64_t *progress;

	pthread_mutex_t mu; /* cur, retired */
	nng_listener cur;
	bool cur_open;
	int64_t cur_excess;  /* its excess when it was created (lisguard.c) */
	int64_t last_excess; /* what the last check read */
	int strikes;         /* checks in a row that saw more */
	uint64_t suspect_ms; /* when the first of them did */
	uint64_t suspect_accepted; /* its accepts then */
	int64_t suspect_excess;    /* and its excess */
	nng_socket probe;          /* the guard's own connection, while probing */
	bool probing;
	uint64_t probe_ms; /* when it was dialed */
	struct lg_retired retired[LG_RETIRED_MAX];
	unsigned nretired;

	atomic_uint_fast64_t recreated;
	struct ev_limit limit; /* of the re-creation events (under mu) */
	atomic_bool quit;
	pthread_t thr, pinger;
	bool thr_on, pinger_on;
	bool stats; /* nng keeps listener statistics */
};

/* Listen on `url` (ipc:// or tcp://) with socket `s` (the caller owns it and
 * holds the lock beside an ipc path) and start the guard's threads. An ipc
 * socket file is created with mode 0600 after removing whatever a dead owner
 * left at the path. `o` may be NULL (the defaults). On failure nothing is
 * left listening. */
int lg_open(struct lisguard *g, nng_socket s, const char *url, const struct lg_opts *o,
            struct ig_errbuf *eb);
/* Stop the thread and close every listener (the socket stays open and the
 * caller closes it). Idempotent on a zeroed or closed guard. */
void lg_close(struct lisguard *g);
/* Listeners re-created so far. */
uint64_t lg_recreated(struct lisguard *g);

#endif
