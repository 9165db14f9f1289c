/*
 * service.h - the reply side of a control socket, shared by the three
 * programs.
 *
 * A `struct svc` owns one listener (`<rtdir>/<name>.sock`) and answers the
 * requests every Ignis process answers itself:
 *
 *   hello     -> hello (our role, pid, build)
 *   ping      -> pong (same seq, our uptime)
 *   shutdown  -> ack; svc_stop_requested() turns true
 *
 * Any other type goes to the caller's handler. A message that does not decode
 * is answered with an `error` reply carrying its IG_E_PROTO_* code and
 * counted (svc_rejects: ignis.proto.rejected events under a rate limit); the
 * service keeps serving.
 *
 * The listener is guarded (lisguard.h): nng 1.5.2's wedge is found from the
 * listener's counters within LG_CONFIRM_MS and cured with a new listener while
 * connected clients keep theirs; a ping every `watchdog_ms` (default
 * LG_PING_MS) is the safety net, a failed ping counting only when the loop
 * entered svc_poll meanwhile (a busy loop is not a wedged listener).
 */
#ifndef IGNIS_PROTO_SERVICE_H
#define IGNIS_PROTO_SERVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/event.h"
#include "transport.h"

/* Fill `reply` for `req` and return IG_E_OK, or return an error code with the
 * detail in `eb` (sent back as an `error` reply). String views put in `reply`
 * must stay valid until the handler is called again. */
/*
 * Rejected messages, counted per kind (the error code) and written as
 * ignis.proto.rejected events under a rate limit (event.h: the first few of
 * a period in full, then one ignis.proto.rejected_summary with the count
 * left out): anything that can connect can send garbage, and must not fill
 * the log. `total` is every rejection, for the metrics page.
 */
#define SVC_REJECT_KINDS 32

struct svc_rejects {
	const char *socket; /* the path or url named in the events; not owned */
	struct ev_limit kind[SVC_REJECT_KINDS];
	uint64_t total;
	bool held; /* some kind owes a summary */
};

/* Count one rejection of kind `code` (the message names what was wrong). */
void svc_reject(struct svc_rejects *r, int code, const char *message);
/* Write the summaries that are due. Call now and then (the service does it
 * in every svc_poll). */
void svc_reject_flush(struct svc_rejects *r);

typedef int (*svc_handler_fn)(void *ctx, const struct msg *req, struct msg *reply,
                              struct ig_errbuf *eb);

/* One reply context: a request received on it is answered on it. */
struct svc_ctx {
	struct svc *s;
	nng_ctx ctx;
	nng_aio *aio;  /* its receive */
	nng_aio *pong; /* a ping's answer, sent from nng's thread (service.c) */
	bool open;
	struct svc_ctx *next; /* the ready list */
};

/* Requests received at once, not yet answered: the front door's pass is
 * one flight of up to DOOR_FLIGHT_MAX (448) requests in flight together;
 * more wait in the connection and are received as these are answered. */
#define SVC_CTXS 512

struct svc {
	struct tp_listener lis;
	/* receiving goes on in nng's threads while the loop computes: every
	 * request that came meanwhile is ready at the next svc_poll */
	struct svc_ctx *ctxs;
	nng_aio *send_aio;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool sync_ready;
	struct svc_ctx *ready, **ready_tail; /* received, in order of arrival */
	const char *role;                    /* static string */
	uint64_t started_ms;
	bool stop_requested;
	char stop_reason[128];
	struct svc_rejects rejects;        /* messages that did not decode */
	atomic_uint_fast64_t polls;        /* svc_poll entries: proof the loop is serving */
	atomic_uint_fast64_t last_poll_ms; /* when svc_poll was last entered */
};

/* Lock and listen at `<rtdir>/<name>.sock` and start its guard.
 * `watchdog_ms` is the safety-net ping's period; 0 means LG_PING_MS. */
int svc_open(struct svc *s, const char *role, const char *rtdir, const char *name, int watchdog_ms,
             struct ig_errbuf *eb);
/* Wait up to `timeout_ms` for a request, then answer every request that
 * has come (in order of arrival), and those that come while answering, up
 * to SVC_BATCH_MAX or SVC_BATCH_MS: a burst is served between two of the
 * caller's rounds, not one per round. Returns IG_E_OK after serving or
 * after the timeout; another code only when the socket itself failed. `h`
 * may be NULL. */
#define SVC_BATCH_MAX 1024
#define SVC_BATCH_MS  20
int svc_poll(struct svc *s, int timeout_ms, svc_handler_fn h, void *ctx);
static inline bool svc_stop_requested(const struct svc *s)
{
	return s->stop_requested;
}
uint64_t svc_uptime_ms(const struct svc *s);
/* Stop the guard, close the socket, remove its files. Idempotent. */
void svc_close(struct svc *s);
/* Listeners re-created so far. */
uint64_t svc_relistens(struct svc *s);

#endif
