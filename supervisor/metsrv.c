/* metsrv.c - the supervisor's metrics page (see metsrv.h). */
#define _GNU_SOURCE
#include "metsrv.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "common/clock.h"
#include "common/event.h"
#include "metrics.h"
#include "proto/transport.h"

/* Prometheus's text exposition format, version 0.0.4. */
#define METSRV_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* A daemon the gatherer asks. */
struct metsrv__peer {
	const char *role;     /* the proc role, and the `source` label */
	const char *sockname; /* its socket in the runtime directory */
	nng_socket sock;
	bool sock_open;
	bool reported_down; /* an event said it was down; say when it is back */
};

struct metsrv {
	pthread_mutex_t mu; /* guards snap and stop */
	pthread_cond_t cv;  /* wakes the gatherer when it must stop */
	bool stop;
	struct met_snap snap;
	uint64_t door_queued; /* under mu */
	char model[65];

	pthread_t thr;
	bool thr_started;
	struct metsrv__peer worker, kvstore; /* the gatherer's alone */
	struct tp_rx rx;                     /* the gatherer's: a reply is ~16 KB */
	char rtdir[RTDIR_PATH_MAX + 1];

	nng_http_server *srv;
	nng_http_handler *h;
	char addr[280];
};

const char *metsrv_addr(const struct metsrv *m)
{
	return m->addr;
}

/* ---- serving (nng's HTTP threads) ----------------------------------------- */

int metsrv_page(struct metsrv *m, bool gateway, char **out, size_t *out_len)
{
	struct met_snap *snap = malloc(sizeof(*snap));
	uint64_t queued;
	char *page = NULL;
	size_t len = 0;
	FILE *f;

	*out = NULL;
	*out_len = 0;
	if (!snap)
		return -1;
	pthread_mutex_lock(&m->mu);
	*snap = m->snap;
	queued = m->door_queued;
	pthread_mutex_unlock(&m->mu);
	f = open_memstream(&page, &len);
	if (f) {
		int bad = met_render(f, snap, clk_mono_ms());

		if (!bad && gateway)
			bad = met_render_gateway(f, snap, m->model, queued);
		if (fclose(f) || bad) {
			free(page);
			page = NULL;
		}
	}
	free(snap);
	*out = page;
	*out_len = page ? len : 0;
	return page ? 0 : -1;
}

static void metsrv__serve(nng_aio *aio)
{
	nng_http_handler *h = nng_aio_get_input(aio, 1);
	struct metsrv *m = nng_http_handler_get_data(h);
	nng_http_res *res = NULL;
	char *page;
	size_t len;
	int rv;

	metsrv_page(m, false, &page, &len);
	rv = page ? nng_http_res_alloc(&res) : nng_http_res_alloc_error(&res, 500);
	if (!rv && page) {
		rv = nng_http_res_set_header(res, "Content-Type", METSRV_CONTENT_TYPE);
		if (!rv)
			rv = nng_http_res_copy_data(res, page, len);
	}
	free(page);
	if (rv) {
		if (res)
			nng_http_res_free(res);
		nng_aio_finish(aio, rv); /* nng closes the connection */
		return;
	}
	nng_aio_set_output(aio, 0, res);
	nng_aio_finish(aio, 0);
}

/* ---- gathering (its own thread) ------------------------------------------- */

/* One request to a daemon. True and the reply in m->rx (released by the
 * caller) on success; false and `eb` saying why. */
static bool metsrv__ask(struct metsrv *m, struct metsrv__peer *p, uint32_t type, uint32_t want,
                        struct ig_errbuf *eb)
{
	struct msg req;
	int rc;

	if (!p->sock_open) {
		if (tp_dial(&p->sock, m->rtdir, p->sockname, METSRV_ASK_TIMEOUT_MS, eb))
			return false;
		p->sock_open = true;
	}
	memset(&req, 0, sizeof(req));
	req.type = type; /* worker_stats and kv_stats: one field, seq 0 */
	rc = tp_call(p->sock, &req, &m->rx, eb);
	if (rc) {
		/* a fresh socket for the next gathering: nothing of a hung or
		 * restarted daemon's connection (a pending request, a dialer
		 * backing off) is carried over to its successor */
		nng_close(p->sock);
		p->sock_open = false;
		return false;
	}
	if (m->rx.m.type != want) {
		ig_errf(eb, IG_E_PROTO_UNEXPECTED, "answered %s with '%s'; expected '%s'",
		        msg_type_name(type), msg_type_name(m->rx.m.type), msg_type_name(want));
		tp_rx_release(&m->rx);
		return false;
	}
	return true;
}

/* The up/down transitions of a daemon's figures, as events (not each miss). */
static void metsrv__report(struct metsrv__peer *p, bool up, const char *why)
{
	struct ev e;

	if (up == !p->reported_down)
		return;
	p->reported_down = !up;
	ev_begin(&e, up ? EV_INFO : EV_WARN,
	         up ? "ignis.supervisor.metrics_source_up"
	            : "ignis.supervisor.metrics_source_down");
	ev_str(&e, "source", p->role);
	if (!up)
		ev_str(&e, "reason", why);
	ev_end(&e);
}

/* Ask one daemon (when the loop says it runs) and store what it said. */
static void metsrv__gather(struct metsrv *m, struct metsrv__peer *p, bool running)
{
	bool worker = p == &m->worker;
	struct met_src *src = worker ? &m->snap.worker : &m->snap.kvstore;
	struct ig_errbuf eb;
	bool ok = false;

	snprintf(eb.msg, sizeof(eb.msg), "not running");
	if (running)
		ok = metsrv__ask(m, p, worker ? MSG_WORKER_STATS : MSG_KV_STATS,
		                 worker ? MSG_WORKER_STATS_REPLY : MSG_KV_STATS_REPLY, &eb);
	if (ok && worker && met_check_worker(&m->rx.m.u.worker_stats_reply, &eb)) {
		tp_rx_release(&m->rx);
		ok = false;
	}
	pthread_mutex_lock(&m->mu);
	src->up = ok;
	if (ok) {
		src->have = true;
		src->at_ms = clk_mono_ms();
		if (worker) {
			m->snap.w = m->rx.m.u.worker_stats_reply;
			/* the expert classes' names point into the reply: copied */
			for (uint32_t i = 0; i < m->snap.w.experts.n; i++) {
				msg_str_copy(m->snap.expert_names[i],
				             sizeof(m->snap.expert_names[i]),
				             m->snap.w.experts.v[i].name);
				m->snap.w.experts.v[i].name = msg_str_of("");
			}
		} else {
			m->snap.kv = m->rx.m.u.kv_stats_reply;
			m->snap.kv.arena_name = msg_str_of(""); /* points into the reply */
		}
	}
	pthread_mutex_unlock(&m->mu);
	if (ok)
		tp_rx_release(&m->rx);
	/* a daemon that never came up yet is not news */
	if (ok || src->have)
		metsrv__report(p, ok, eb.msg);
}

static bool metsrv__running(const struct met_snap *s, const char *role)
{
	for (uint32_t i = 0; i < s->nprocs; i++)
		if (!strcmp(s->procs[i].role, role))
			return s->procs[i].up;
	return false;
}

static void *metsrv__gatherer(void *arg)
{
	struct metsrv *m = arg;

	pthread_mutex_lock(&m->mu);
	while (!m->stop) {
		bool kv_up = metsrv__running(&m->snap, m->kvstore.role);
		bool w_up = metsrv__running(&m->snap, m->worker.role);
		struct timespec until;

		pthread_mutex_unlock(&m->mu);
		metsrv__gather(m, &m->kvstore, kv_up);
		metsrv__gather(m, &m->worker, w_up);
		pthread_mutex_lock(&m->mu);
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += METSRV_GATHER_MS / 1000;
		until.tv_nsec += (long)(METSRV_GATHER_MS % 1000) * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		while (!m->stop && pthread_cond_timedwait(&m->cv, &m->mu, &until) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

/* ---- lifecycle ------------------------------------------------------------ */

void metsrv_note_procs(struct metsrv *m, const struct proc *procs, int n)
{
	struct met_snap *s = &m->snap;

	pthread_mutex_lock(&m->mu);
	snprintf(s->procs[0].role, sizeof(s->procs[0].role), "supervisor");
	s->procs[0].up = true;
	s->procs[0].restarts = 0;
	s->nprocs = 1;
	for (int i = 0; i < n && s->nprocs < MET_NPROC; i++, s->nprocs++) {
		struct met_proc *mp = &s->procs[s->nprocs];

		snprintf(mp->role, sizeof(mp->role), "%s", procs[i].role);
		mp->up = procs[i].state == PROC_RUNNING;
		mp->restarts = procs[i].restarts;
	}
	pthread_mutex_unlock(&m->mu);
}

void metsrv_note_rejects(struct metsrv *m, uint64_t client, uint64_t supervisor)
{
	pthread_mutex_lock(&m->mu);
	m->snap.rejected_client = client;
	m->snap.rejected_supervisor = supervisor;
	pthread_mutex_unlock(&m->mu);
}

void metsrv_note_queued(struct metsrv *m, uint64_t door_queued)
{
	pthread_mutex_lock(&m->mu);
	m->door_queued = door_queued;
	pthread_mutex_unlock(&m->mu);
}

void metsrv_note_doors(struct metsrv *m, uint64_t displaced, const struct http_counts *http)
{
	pthread_mutex_lock(&m->mu);
	m->snap.door_displaced = displaced;
	m->snap.http = *http;
	pthread_mutex_unlock(&m->mu);
}

/* Why the listener failed, naming the knob, its value and where it came from. */
static int metsrv__refuse(const struct knob_value *knob, int rv, struct ig_errbuf *eb)
{
	char flag[96], env[96];

	knob_flag(KNOB_SERVER_METRICS_BIND, flag, sizeof(flag));
	knob_env(KNOB_SERVER_METRICS_BIND, env, sizeof(env));
	if (rv == NNG_EADDRINUSE)
		return ig_errf(eb, IG_E_BUSY,
		               "%s '%s' (from %s): the address is in use (another Ignis or "
		               "exporter listens there?); choose a free HOST:PORT with %s or %s",
		               flag, knob->s, knob->where, flag, env);
	return ig_errf(eb, IG_E_CONFIG,
	               "%s '%s' (from %s): cannot serve the metrics page there: %s; accepted: "
	               "HOST:PORT of this machine, e.g. 127.0.0.1:9464",
	               flag, knob->s, knob->where, nng_strerror(rv));
}

int metsrv_open(struct metsrv **out, const struct knob_value *knob, const char *rtdir,
                const struct vplan *plan, struct ig_errbuf *eb)
{
	struct metsrv *m;
	nng_url *url = NULL;
	char text[300];
	int rv, rc;

	*out = NULL;
	/* knob->s is HOST:PORT: the knob table's type (KT_HOSTPORT) refused
	 * anything else when the configuration was read */
	m = calloc(1, sizeof(*m));
	if (!m)
		return ig_errf(eb, IG_E_NOMEM, "no memory for the metrics page");
	pthread_mutex_init(&m->mu, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&m->cv, &ca);
		pthread_condattr_destroy(&ca);
	}
	m->worker = (struct metsrv__peer){.role = "gpu-worker", .sockname = "gpu-worker"};
	m->kvstore = (struct metsrv__peer){.role = "kvstore", .sockname = "kvstore"};
	snprintf(m->rtdir, sizeof(m->rtdir), "%s", rtdir);
	snprintf(m->addr, sizeof(m->addr), "%s", knob->s);
	met_snap_plan(&m->snap, plan);
	snprintf(m->model, sizeof(m->model), "%s", plan->model ? plan->model->name : "");
	metsrv_note_procs(m, NULL, 0);

	snprintf(text, sizeof(text), "http://%s", knob->s);
	rv = nng_url_parse(&url, text);
	if (!rv)
		rv = nng_http_server_hold(&m->srv, url);
	nng_url_free(url);
	if (rv) {
		m->srv = NULL;
		rc = metsrv__refuse(knob, rv, eb);
		goto fail;
	}
	rv = nng_http_handler_alloc(&m->h, "/metrics", metsrv__serve);
	if (!rv)
		rv = nng_http_handler_set_data(m->h, m, NULL);
	if (!rv)
		rv = nng_http_server_add_handler(m->srv, m->h);
	if (rv) {
		if (m->h)
			nng_http_handler_free(m->h);
		m->h = NULL;
		rc = tp_nng_err(eb, rv, "cannot set up the metrics page's handler");
		goto fail;
	}
	rv = nng_http_server_start(m->srv);
	if (rv) {
		rc = metsrv__refuse(knob, rv, eb);
		goto fail;
	}
	if (pthread_create(&m->thr, NULL, metsrv__gatherer, m)) {
		rc = ig_errf(eb, IG_E_NOMEM, "cannot start the metrics gatherer thread");
		goto fail;
	}
	m->thr_started = true;
	*out = m;
	return IG_E_OK;
fail:
	metsrv_close(m);
	return rc;
}

void metsrv_close(struct metsrv *m)
{
	if (!m)
		return;
	if (m->srv) {
		/* no new scrape after this; the release waits for those in flight */
		nng_http_server_stop(m->srv);
		nng_http_server_release(m->srv); /* frees the handler it holds */
	}
	if (m->thr_started) {
		pthread_mutex_lock(&m->mu);
		m->stop = true;
		pthread_cond_signal(&m->cv);
		pthread_mutex_unlock(&m->mu);
		pthread_join(m->thr, NULL);
	}
	if (m->worker.sock_open)
		nng_close(m->worker.sock);
	if (m->kvstore.sock_open)
		nng_close(m->kvstore.sock);
	pthread_cond_destroy(&m->cv);
	pthread_mutex_destroy(&m->mu);
	free(m);
}
