/*
 * frontdoor.c - the front door's life: its addresses and their locks, open and
 * close, and the supervisor's hooks (see frontdoor.h; the door's parts are
 * listed in frontdoor_int.h).
 */
#define _GNU_SOURCE
#include "frontdoor_int.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nng/protocol/reqrep0/rep.h>

#include "common/clock.h"
#include "common/model.h"

/* ---- open, close, the supervisor's hook -------------------------------------------- */

void door_model_of(const struct msg_plan *pl, const struct mdesc *md, struct door_model *m)
{
	memset(m, 0, sizeof(*m));
	msg_str_copy(m->name, sizeof(m->name), pl->model);
	msg_str_copy(m->backend, sizeof(m->backend), pl->backend);
	msg_str_copy(m->kv_format, sizeof(m->kv_format), pl->kv_format);
	m->vocab = md->vocab;
	m->context_tokens = pl->context_tokens;
	m->page_tokens = MDESC_PAGE_TOKENS;
	m->pool_pages = pl->pool_pages;
	m->lanes = pl->lanes;
	m->chunk_tokens = pl->chunk_tokens;
	m->default_max_tokens = pl->default_max_tokens;
	m->max_requests = pl->max_requests;
	m->tokenizer = md->tokenizer;
	m->eos = mdesc_eos(md);
	m->serving = pl->model_path.n > 0;
}

void door_counts(struct door *d, uint64_t *rejected, uint64_t *queued, uint64_t *displaced)
{
	pthread_mutex_lock(&d->mu);
	*rejected = d->n_rejected;
	*queued = d->queued;
	*displaced = d->n_displaced;
	pthread_mutex_unlock(&d->mu);
}

void door_set_worker(struct door *d, pid_t pid, const char *state)
{
	pthread_mutex_lock(&d->mu);
	d->wstate = state;
	if (pid != d->wpid) {
		pid_t old = d->wpid;

		d->wpid = pid;
		if (old) {
			d->wrestarts++;
			door__lose_worker(d, old, pid ? "was replaced" : "stopped");
		}
		pthread_cond_signal(&d->pump_cv);
	}
	pthread_mutex_unlock(&d->mu);
}

static int door__paths(struct door *d, const struct door_opts *o, struct ig_errbuf *eb)
{
	const char *bind = o->bind && *o->bind ? o->bind : NULL;
	int n;

	if (snprintf(d->rtdir, sizeof(d->rtdir), "%s", o->rtdir) >= (int)sizeof(d->rtdir))
		return ig_errf(eb, IG_E_CONFIG, "runtime directory '%s' is too long", o->rtdir);
	if (!bind) {
		n = snprintf(d->ipc_path, sizeof(d->ipc_path), "%s/client.sock", o->rtdir);
		if (n >= (int)sizeof(d->ipc_path))
			return ig_errf(eb, IG_E_CONFIG, "socket path under '%s' is too long",
			               o->rtdir);
		snprintf(d->url, sizeof(d->url), "ipc://%s", d->ipc_path);
		snprintf(d->lockpath, sizeof(d->lockpath), "%s/client.lock", o->rtdir);
		return IG_E_OK;
	}
	if (!strncmp(bind, "ipc://", 6)) {
		size_t len = strlen(bind + 6);

		/* sun_path holds 108 bytes, the NUL included */
		if (len >= 108 || len >= sizeof(d->ipc_path))
			return ig_errf(eb, IG_E_CONFIG,
			               "--server-bind '%s': the path is %zu bytes; a socket "
			               "path holds at most 107",
			               bind, len);
		snprintf(d->ipc_path, sizeof(d->ipc_path), "%s", bind + 6);
		snprintf(d->url, sizeof(d->url), "%s", bind);
		if (len > 5 && !strcmp(d->ipc_path + len - 5, ".sock"))
			snprintf(d->lockpath, sizeof(d->lockpath), "%.*s.lock", (int)(len - 5),
			         d->ipc_path);
		else
			snprintf(d->lockpath, sizeof(d->lockpath), "%s.lock", d->ipc_path);
		return IG_E_OK;
	}
	if (snprintf(d->url, sizeof(d->url), "%s", bind) >= (int)sizeof(d->url))
		return ig_errf(eb, IG_E_CONFIG, "--server-bind '%s' is too long", bind);
	snprintf(d->lockpath, sizeof(d->lockpath), "%s/client.lock", o->rtdir);
	return IG_E_OK;
}

static bool door__loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr) >>
		        24) == 127;
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a =
		    &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;

		if (IN6_IS_ADDR_LOOPBACK(a))
			return true;
		if (IN6_IS_ADDR_V4MAPPED(a))
			return a->s6_addr[12] == 127;
	}
	return false;
}

bool door_hostport_is_loopback(const char *rest)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	const char *colon;
	char host[256];
	bool loopback = true;
	size_t len;

	colon = strrchr(rest, ':');
	len = colon ? (size_t)(colon - rest) : strlen(rest);
	if (len >= 2 && rest[0] == '[' && rest[len - 1] == ']') {
		rest++;
		len -= 2;
	}
	if (len >= sizeof(host))
		len = sizeof(host) - 1;
	memcpy(host, rest, len);
	host[len] = '\0';
	if (!host[0] || !strcmp(host, "*")) {
		loopback = false;
	} else if (getaddrinfo(host, NULL, &hints, &ai) == 0) {
		for (struct addrinfo *p = ai; p && loopback; p = p->ai_next)
			loopback = door__loopback(p->ai_addr);
		freeaddrinfo(ai);
	} else {
		loopback = false; /* unknown: not known to be loopback */
	}
	return loopback;
}

int door_check_bind(const char *bind, bool allow_remote, struct ig_errbuf *eb)
{
	const char *rest;

	if (!bind || !*bind || allow_remote || strncmp(bind, "tcp", 3))
		return IG_E_OK;
	rest = strstr(bind, "://");
	if (!rest)
		return IG_E_OK; /* the address's own check refuses it */
	if (door_hostport_is_loopback(rest + 3))
		return IG_E_OK;
	return ig_errf(eb, IG_E_CONFIG,
	               "--server-bind '%s' is not a loopback address, and the front door has "
	               "no access control (anyone who reaches it can submit and cancel "
	               "requests): bind tcp://127.0.0.1:PORT or an ipc:// path, or give "
	               "--server-allow-remote (IGNIS_SERVER_ALLOW_REMOTE, server_allow_remote) "
	               "to serve it there anyway",
	               bind);
}

int door_open(struct door **out, const struct door_opts *o, struct ig_errbuf *eb)
{
	pthread_condattr_t ca;
	struct door *d;
	struct ev e;
	int rc, rv;

	*out = NULL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return ig_errf(eb, IG_E_NOMEM, "no memory for the front door");
	d->lockfd = -1;
	d->model = o->model;
	d->watchdog_ms = o->watchdog_ms > 0 ? o->watchdog_ms : DOOR_WATCHDOG_MS;
	d->wstate = "starting";
	d->next_id = 1;
	d->started_ms = clk_mono_ms();
	pthread_mutex_init(&d->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->pump_cv, &ca);
	pthread_cond_init(&d->clock_cv, &ca);
	pthread_condattr_destroy(&ca);
	d->out = malloc(sizeof(*d->out));
	d->slots = calloc(DOOR_SLOTS_MAX, sizeof(*d->slots));
	d->poll_ids = calloc(DOOR_POLL_FLIGHTS, sizeof(*d->poll_ids));
	d->ids = calloc(DOOR_ID_BUCKETS, sizeof(*d->ids));
	d->queue_max = o->queue_max ? o->queue_max : 4096;
	if (d->queue_max > DOOR_QUEUE_MAX)
		d->queue_max = DOOR_QUEUE_MAX;
	d->cand = calloc(d->queue_max, sizeof(*d->cand));
	if (!d->out || !d->slots || !d->poll_ids || !d->ids || !d->cand) {
		rc = ig_errf(eb, IG_E_NOMEM, "no memory for the front door");
		goto out_free;
	}
	rc = door__paths(d, o, eb);
	if (rc)
		goto out_free;
	d->rejects.socket = d->url;
	rc = tp_lock_take(d->lockpath, &d->lockfd, eb);
	if (rc)
		goto out_free;
	rv = nng_rep0_open(&d->sock);
	if (!rv)
		rv = nng_socket_set_size(d->sock, NNG_OPT_RECVMAXSZ, MSG_MAX_BYTES);
	if (rv) {
		rc = tp_nng_err(eb, rv, "cannot open the front door's reply socket");
		goto out_unlock;
	}
	nng_pipe_notify(d->sock, NNG_PIPE_EV_REM_POST, door__pipe_gone, d);
	rc = lg_open(&d->guard, d->sock, d->url, &(struct lg_opts){.ping_ms = d->watchdog_ms}, eb);
	if (rc)
		goto out_close_sock;
	d->guard_on = true;
	pthread_mutex_lock(&d->mu);
	door__arm(d);
	pthread_mutex_unlock(&d->mu);
	if (pthread_create(&d->pump, NULL, door__pump, d) == 0)
		d->pump_on = true;
	if (pthread_create(&d->clock, NULL, door__clock, d) == 0)
		d->clock_on = true;
	if (!d->pump_on || !d->clock_on) {
		door_close(d);
		return ig_errf(eb, IG_E_NOMEM, "cannot start the front door's threads");
	}
	ev_begin(&e, EV_INFO, "ignis.frontdoor.listening");
	ev_str(&e, "url", d->url);
	ev_str(&e, "model", d->model.name);
	ev_bool(&e, "serving", d->model.serving);
	ev_end(&e);
	*out = d;
	return IG_E_OK;

out_close_sock:
	nng_close(d->sock);
out_unlock:
	unlink(d->lockpath);
	close(d->lockfd);
out_free:
	free(d->out);
	free(d->poll_ids);
	free(d->ids);
	free(d->cand);
	free(d->slots);
	free(d);
	return rc;
}

void door_close(struct door *d)
{
	nng_socket ws;
	bool ws_open;

	if (!d)
		return;
	pthread_mutex_lock(&d->mu);
	d->closing = true;
	pthread_cond_broadcast(&d->pump_cv);
	pthread_cond_broadcast(&d->clock_cv);
	ws = d->ws;
	ws_open = d->ws_open;
	d->ws_open = false;
	pthread_mutex_unlock(&d->mu);
	/* a call in flight returns at once. Never under d->mu: nng_close waits
	 * for nng's reaper, which may be running a pipe callback of the door's
	 * socket (door__pipe_gone) that waits for d->mu */
	if (ws_open)
		nng_close(ws);
	if (d->guard_on)
		lg_close(&d->guard);
	d->guard_on = false;
	if (d->clock_on)
		pthread_join(d->clock, NULL);
	if (d->pump_on)
		pthread_join(d->pump, NULL);
	nng_close(d->sock); /* every context's operation ends */
	for (uint32_t i = 0; i < d->nslots; i++) {
		nng_aio_free(d->slots[i]->aio); /* waits for its callback */
		free(d->slots[i]);
	}
	while (d->head)
		door__free_req(d, d->head);
	if (d->ipc_path[0])
		unlink(d->ipc_path);
	unlink(d->lockpath);
	close(d->lockfd);
	pthread_cond_destroy(&d->pump_cv);
	pthread_cond_destroy(&d->clock_cv);
	pthread_mutex_destroy(&d->mu);
	free(d->out);
	free(d->poll_ids);
	free(d->ids);
	free(d->cand);
	free(d->peers);
	free(d->slots);
	free(d);
}
