/*
 * metsrv.h - the supervisor's metrics page: Prometheus text at
 * http://<--server-metrics-bind>/metrics, served by nng's HTTP server.
 *
 * Nothing a scrape does waits on a daemon or on the supervisor's loop
 * (docs/adr/0014-metrics.md):
 *   - a gatherer thread of its own asks the gpu-worker (worker_stats) and the
 *     kvstore daemon (kv_stats) for their figures every METSRV_GATHER_MS,
 *     each request bounded by METSRV_ASK_TIMEOUT_MS, on sockets of its own
 *     (the loop's sockets are never shared), and stores the answers;
 *   - the supervisor's loop notes its process table after each turn
 *     (metsrv_note_procs: a lock and a few stores);
 *   - nng's HTTP threads copy that snapshot under the lock and render it
 *     outside (metrics.h). A scrape costs a copy and a render, whatever the
 *     daemons do.
 * A daemon that is not running, or that did not answer its last request in
 * time, has its families left out and shows as ignis_stats_up{source} 0.
 *
 * Thread safety: metsrv_note_procs may be called from one thread (the loop)
 * while the gatherer and the HTTP threads run; open and close from that same
 * thread.
 */
#ifndef IGNIS_SUPERVISOR_METSRV_H
#define IGNIS_SUPERVISOR_METSRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/knobs.h"
#include "proc.h"
#include "common/vplan.h"

struct http_counts;

/* Figures are gathered this often: a scrape every 15 s (Prometheus's default)
 * sees figures at most about a second old. */
#define METSRV_GATHER_MS 1000u
/* One request to a daemon waits at most this long (send and receive each):
 * a worker answers between two decode rounds, well within it; a daemon that
 * does not is marked down until it answers again. */
#define METSRV_ASK_TIMEOUT_MS 500

struct metsrv;

/*
 * Listen on `knob` (the resolved --server-metrics-bind: HOST:PORT) and start
 * gathering from the daemons of runtime directory `rtdir`; the plan's figures
 * are copied from `plan`. IG_E_BUSY when the address is in use, IG_E_CONFIG
 * when it cannot be listened on; both messages name the knob, its value and
 * its source. On success the caller owns *out: metsrv_close it.
 */
int metsrv_open(struct metsrv **out, const struct knob_value *knob, const char *rtdir,
                const struct vplan *plan, struct ig_errbuf *eb);

/* The supervisor's process table: itself (up), then `procs[0..n)` by role. */
void metsrv_note_procs(struct metsrv *m, const struct proc *procs, int n);
/* The rejections counted on the supervisor's own sockets (same thread). */
void metsrv_note_rejects(struct metsrv *m, uint64_t client, uint64_t supervisor);

/* Requests queued at the front door for a worker slot (same thread). */
void metsrv_note_queued(struct metsrv *m, uint64_t door_queued);
/* The front door's displaced submits and the HTTP API's figures (zero when
 * it is off), told every loop turn. */
void metsrv_note_doors(struct metsrv *m, uint64_t displaced, const struct http_counts *http);

/* The page as a scrape gets it, in a malloc'd buffer (*out, its length
 * *len; the caller frees it); with `gateway`, the families an inference
 * gateway reads follow ours (met_render_gateway: the HTTP API's /metrics).
 * Any thread. 0, or -1 (no memory) with *out NULL. */
int metsrv_page(struct metsrv *m, bool gateway, char **out, size_t *len);

/* Stop serving and gathering; frees `m`. NULL is accepted. */
void metsrv_close(struct metsrv *m);

/* The address served ("127.0.0.1:9464"), for the started event. */
const char *metsrv_addr(const struct metsrv *m);

#endif
