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
 * is answered with an `error` reply carrying its IG_E_PROTO_* code and logged
 * as an ignis.proto.rejected event; the service keeps serving.
 *
 * A watchdog thread dials the socket with nng every SVC_WATCHDOG_MS and pings
 * it (1 s timeout). A failed ping counts only when the loop entered svc_poll
 * meanwhile (a busy loop is not a wedged listener); after a failure the next
 * ping comes 1 s later; two failures in a row and the next svc_poll re-creates
 * the listener (nng 1.5.2 can wedge a listener for good, upstream issue 1518).
 */
#ifndef IGNIS_PROTO_SERVICE_H
#define IGNIS_PROTO_SERVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "transport.h"

#define SVC_WATCHDOG_MS 5000

/* Fill `reply` for `req` and return IG_E_OK, or return an error code with the
 * detail in `eb` (sent back as an `error` reply). String views put in `reply`
 * must stay valid until the handler is called again. */
typedef int (*svc_handler_fn)(void *ctx, const struct msg *req, struct msg *reply,
                              struct ig_errbuf *eb);

struct svc {
	struct tp_listener lis;
	const char *role; /* static string */
	uint64_t started_ms;
	bool stop_requested;
	char stop_reason[128];
	uint64_t rejected; /* messages that did not decode */
	uint64_t relistens;
	pthread_t wd;
	bool wd_running;
	atomic_bool wd_quit;
	atomic_bool wd_wedged;
	atomic_uint_fast64_t polls; /* svc_poll entries: proof the loop is serving */
	int wd_interval_ms;
};

/* Lock and listen at `<rtdir>/<name>.sock` and start the watchdog.
 * `watchdog_ms` 0 means SVC_WATCHDOG_MS. */
int svc_open(struct svc *s, const char *role, const char *rtdir, const char *name, int watchdog_ms,
             struct ig_errbuf *eb);
/* Wait up to `timeout_ms` for one request and answer it. Returns IG_E_OK
 * after serving one or after the timeout; another code only when the socket
 * itself failed. `h` may be NULL. */
int svc_poll(struct svc *s, int timeout_ms, svc_handler_fn h, void *ctx);
static inline bool svc_stop_requested(const struct svc *s)
{
	return s->stop_requested;
}
uint64_t svc_uptime_ms(const struct svc *s);
/* Stop the watchdog, close the socket, remove its files. Idempotent. */
void svc_close(struct svc *s);

#endif
