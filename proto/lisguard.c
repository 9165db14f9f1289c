/* lisguard.c - a listener that heals itself (see lisguard.h). */
#define _GNU_SOURCE
#include "lisguard.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <nng/protocol/reqrep0/req.h>

#include "common/clock.h"
#include "common/event.h"
#include "transport.h"

/* The counters of listener `l` in snapshot `all`: its open pipes, and its
 * "excess": the errors it counted (other, canceled, disconnect) less the
 * pipes it accepted that have closed since. Every pipe that closes counts
 * one error, so the excess holds still while the listener is healthy; the
 * wedge counts one error that no pipe explains (measured on nng 1.5.2:
 * full calls, closes mid-request and idle closes each count one "other";
 * a connection closed before the header counts one and stops "accept").
 * False when nng keeps no statistics for it. */
/* The statistics of listener `id` under `st`. Not nng_stat_find_listener:
 * in nng 1.5.2 it returns the first listener of all, whatever the id (its
 * search recurses by name only). */
static nng_stat *lg__find(nng_stat *st, int id)
{
	if (!st)
		return NULL;
	if (nng_stat_type(st) == NNG_STAT_SCOPE && !strcmp(nng_stat_name(st), "listener")) {
		for (nng_stat *c = nng_stat_child(st); c; c = nng_stat_next(c))
			if (!strcmp(nng_stat_name(c), "id"))
				return nng_stat_value(c) == (uint64_t)id ? st : NULL;
		return NULL;
	}
	for (nng_stat *c = nng_stat_child(st); c; c = nng_stat_next(c)) {
		nng_stat *hit = lg__find(c, id);

		if (hit)
			return hit;
	}
	return NULL;
}

static bool lg__counters_acc(nng_stat *all, nng_listener l, int64_t *excess, uint64_t *pipes,
                             uint64_t *accepted);

static bool lg__counters(nng_stat *all, nng_listener l, int64_t *excess, uint64_t *pipes)
{
	uint64_t accepted;

	return lg__counters_acc(all, l, excess, pipes, &accepted);
}

/* ... and `accepted`, the connections it has accepted: only a wedge stops
 * that count for good. */
static bool lg__counters_acc(nng_stat *all, nng_listener l, int64_t *excess, uint64_t *pipes,
                             uint64_t *accepted)
{
	static const char *const errs[] = {"other", "canceled", "disconnect"};
	nng_stat *st = lg__find(all, nng_listener_id(l));
	nng_stat *accept, *p;
	uint64_t errors = 0;

	if (!st)
		return false;
	for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
		nng_stat *e = nng_stat_find(st, errs[i]);

		if (!e)
			return false;
		errors += nng_stat_value(e);
	}
	accept = nng_stat_find(st, "accept");
	p = nng_stat_find(st, "pipes");
	if (!accept || !p)
		return false;
	*pipes = nng_stat_value(p);
	*accepted = nng_stat_value(accept);
	*excess = (int64_t)errors - ((int64_t)nng_stat_value(accept) - (int64_t)*pipes);
	return true;
}

static int lg__listen(struct lisguard *g, nng_listener *out, struct ig_errbuf *eb)
{
	nng_listener l;
	int rv = nng_listener_create(&l, g->sock, g->url);

	if (rv)
		return tp_nng_err(eb, rv, g->url);
	if (g->ipc_path[0])
		rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, 0600);
	if (!rv)
		rv = nng_listener_start(l, 0);
	if (rv) {
		nng_listener_close(l);
		return tp_nng_err(eb, rv, g->url);
	}
	*out = l;
	return IG_E_OK;
}

/* Close retired listener i. nng's ipc listener removes its path when it
 * closes, and the path is the current listener's now: the current socket
 * file steps aside (a rename, atomic) while the old one closes, and comes
 * back. A client connecting in those microseconds finds no file and redials. */
static void lg__close_retired(struct lisguard *g, unsigned i)
{
	char aside[sizeof(g->ipc_path) + 32];
	bool moved = false;

	if (g->ipc_path[0] && g->cur_open) {
		snprintf(aside, sizeof(aside), "%s.%ld.aside", g->ipc_path, (long)getpid());
		moved = rename(g->ipc_path, aside) == 0;
	}
	nng_listener_close(g->retired[i].l);
	if (moved && rename(aside, g->ipc_path) != 0)
		ev_msg(EV_ERROR, "ignis.proto.listener_lost",
		       "cannot put the socket '%s' back in place after closing a retired "
		       "listener: %s",
		       g->ipc_path, strerror(errno));
	memmove(&g->retired[i], &g->retired[i + 1], (g->nretired - i - 1) * sizeof(g->retired[0]));
	g->nretired--;
}

/* Replace the current listener. Under mu. */
static void lg__recreate(struct lisguard *g, const char *reason, uint64_t pipes)
{
	struct ig_errbuf eb;
	nng_listener nl;
	struct ev e;
	int rc;

	ig_errclear(&eb);
	if (g->ipc_path[0]) {
		/* The old one keeps its clients; the path goes to a new one. */
		if (g->nretired == LG_RETIRED_MAX)
			lg__close_retired(g, 0);
		if (unlink(g->ipc_path) != 0 && errno != ENOENT) {
			rc = ig_errf(&eb, IG_E_IO, "cannot remove '%s': %s", g->ipc_path,
			             strerror(errno));
		} else {
			rc = lg__listen(g, &nl, &eb);
		}
		if (rc == IG_E_OK) {
			if (g->cur_open)
				g->retired[g->nretired++] =
				    (struct lg_retired){.l = g->cur, .since_ms = clk_mono_ms()};
			g->cur = nl;
			g->cur_open = true;
		}
	} else {
		/* A port is bound once: close, then bind again (nng sets
		 * SO_REUSEADDR; the old socket may take a moment to go). */
		if (g->cur_open)
			nng_listener_close(g->cur);
		g->cur_open = false;
		rc = IG_E_BUSY;
		for (int tries = 0; tries < 50 && rc == IG_E_BUSY; tries++) {
			if (tries)
				clk_sleep_ms(10);
			rc = lg__listen(g, &nl, &eb);
		}
		if (rc == IG_E_OK) {
			g->cur = nl;
			g->cur_open = true;
		}
	}
	if (rc == IG_E_OK) {
		g->cur_excess = 0; /* a new listener has no history */
		g->last_excess = 0;
		g->strikes = 0;
		atomic_fetch_add(&g->recreated, 1);
	}
	/* anything that can connect can cause these: a few in full, then a
	 * summary a period (lg__summary); a failure is always said */
	if (!rc && !ev_limit_take(&g->limit, clk_mono_ms()))
		return;
	ev_begin(&e, rc ? EV_ERROR : EV_WARN, "ignis.proto.listener_recreated");
	ev_str(&e, "socket", g->url);
	ev_str(&e, "reason", reason);
	ev_u64(&e, "retired_pipes", g->ipc_path[0] ? pipes : 0);
	if (rc)
		ev_str(&e, "error", eb.msg);
	ev_end(&e);
}

/* The re-creations left out of the log this period, once it is over. */
static void lg__summary(struct lisguard *g, uint64_t now)
{
	uint64_t n = ev_limit_due(&g->limit, now);
	struct ev e;

	if (!n)
		return;
	ev_begin(&e, EV_WARN, "ignis.proto.listener_recreated_summary");
	ev_str(&e, "socket", g->url);
	ev_u64(&e, "count", n);
	ev_u64(&e, "period_ms", EV_LIMIT_PERIOD_MS);
	ev_u64(&e, "total", atomic_load(&g->recreated));
	ev_end(&e);
}

/* Close the probe connection, if one is open. */
static void lg__probe_end(struct lisguard *g)
{
	if (g->probing)
		nng_close(g->probe);
	g->probing = false;
}

/* One check of the current listener (under mu). An excess above the
 * baseline is a suspect: a wedge, or a pipe whose close nng's reaper has not
 * finished (a loaded machine: tens of milliseconds), or a connection that
 * failed before the header in a way nng's accept loop survives (it sleeps
 * 100 ms and goes on: a tcp client's early close, ECONNSHUT, counts as
 * "other" like the wedge's ECLOSED). Only a wedge stops "accept": so the
 * suspect is cleared by an accept counted after it appeared (the errors
 * counted by then become the baseline), and when
 * none comes by itself within LG_PROBE_AFTER_MS the guard connects once
 * itself; a listener that has accepted nothing LG_CONFIRM_MS after the
 * suspect appeared and LG_PROBE_MS after the probe is wedged. An excess
 * that falls (a reaper that finished, a pipe the server closed without an
 * error) lowers the baseline, so that a later wedge is not hidden below it. */
static void lg__judge(struct lisguard *g, uint64_t now, int64_t excess, uint64_t pipes,
                      uint64_t accepted)
{
	/* (two checks in a row: one may read a pipe accepted between its
	 * "pipes" and its "accept" and see the excess one lower) */
	if (excess < g->cur_excess && g->last_excess < g->cur_excess)
		g->cur_excess = excess > g->last_excess ? excess : g->last_excess;
	g->last_excess = excess;
	if (excess <= g->cur_excess) {
		g->strikes = 0;
		lg__probe_end(g);
		return;
	}
	/* The accepts are compared from the check after the suspect's: nng
	 * reads a listener's counters one by one, "accept" before the errors,
	 * so the check that first sees an error may miss the accept counted
	 * just before it; the next one has both. */
	if (g->strikes++ == 0) {
		g->suspect_ms = now;
		g->suspect_excess = excess;
	} else if (g->strikes == 2) {
		g->suspect_accepted = accepted;
	} else if (accepted > g->suspect_accepted) {
		/* The accept loop went on after every error counted when the
		 * suspect appeared: those are no wedge, and become the baseline.
		 * What came after (the same check cannot order it against the
		 * accept) is judged again from the next check on. */
		g->cur_excess = g->suspect_excess;
		g->strikes = 0;
		lg__probe_end(g);
		return;
	}
	if (!g->probing && now - g->suspect_ms >= LG_PROBE_AFTER_MS) {
		if (nng_req0_open(&g->probe) == 0) {
			if (nng_dial(g->probe, g->url, NULL, NNG_FLAG_NONBLOCK) == 0) {
				g->probing = true;
				g->probe_ms = now;
			} else {
				nng_close(g->probe);
			}
		}
		if (!g->probing)
			g->probe_ms = now; /* cannot probe: the time alone decides */
	}
	if (g->strikes >= LG_CONFIRM_CHECKS && now - g->suspect_ms >= LG_CONFIRM_MS &&
	    now - g->suspect_ms >= LG_PROBE_AFTER_MS && now - g->probe_ms >= LG_PROBE_MS) {
		lg__probe_end(g);
		lg__recreate(g,
		             "its accept loop stopped (nng 1.5.2: a connection closed "
		             "before the protocol header)",
		             pipes);
	}
}

/* Every LG_CHECK_MS: the current listener's counters, and the retired
 * listeners that can go. */
static void *lg__checker(void *arg)
{
	struct lisguard *g = arg;
	uint64_t rebind_at = 0;

	while (!atomic_load(&g->quit)) {
		nng_stat *all = NULL;
		uint64_t now;

		clk_sleep_ms(LG_CHECK_MS);
		now = clk_mono_ms();
		if (g->stats && nng_stats_get(&all) != 0)
			all = NULL;
		pthread_mutex_lock(&g->mu);
		if (!g->cur_open) {
			/* a failed tcp re-bind: try again now and then */
			if (now >= rebind_at) {
				lg__recreate(g, "the listener could not be bound again", 0);
				rebind_at = now + 1000;
			}
		} else if (all) {
			int64_t excess;
			uint64_t pipes, accepted;

			if (lg__counters_acc(all, g->cur, &excess, &pipes, &accepted))
				lg__judge(g, now, excess, pipes, accepted);
		}
		lg__summary(g, now);
		for (unsigned i = 0; i < g->nretired;) {
			int64_t excess;
			uint64_t pipes;
			bool empty = all && lg__counters(all, g->retired[i].l, &excess, &pipes) &&
			             pipes == 0;

			/* (retired this tick: since_ms is after `now`) */
			if (empty || now >= g->retired[i].since_ms + (uint64_t)g->retire_ms)
				lg__close_retired(g, i);
			else
				i++;
		}
		pthread_mutex_unlock(&g->mu);
		if (all)
			nng_stats_free(all);
	}
	return NULL;
}

/* The safety net: every ping_ms the listener answers a client of its own
 * within LG_PING_ANSWER_MS; two failures in a row (1 s apart) and it is
 * re-created. */
static void *lg__pinger(void *arg)
{
	struct lisguard *g = arg;
	uint64_t seq = 0;
	int failures = 0;

	while (!atomic_load(&g->quit)) {
		int wait_ms = failures ? 1000 : g->ping_ms;
		uint64_t before;
		struct ig_errbuf eb;
		int rc;

		for (int waited = 0; waited < wait_ms && !atomic_load(&g->quit); waited += 50)
			clk_sleep_ms(50);
		if (atomic_load(&g->quit))
			break;
		before = g->progress ? atomic_load(g->progress) : 0;
		rc = tp_ping(g->url, LG_PING_ANSWER_MS, ++seq, &eb); /* as a client would */
		if (rc == IG_E_OK)
			failures = 0;
		else if (!g->progress || atomic_load(g->progress) - before >= 2)
			failures++; /* the loop was listening and our ping never came */
		if (failures >= 2) {
			int64_t excess = 0;
			uint64_t pipes = 0;
			nng_stat *all = NULL;

			failures = 0;
			if (g->stats && nng_stats_get(&all) != 0)
				all = NULL;
			pthread_mutex_lock(&g->mu);
			if (g->cur_open) {
				lg__counters(all, g->cur, &excess, &pipes);
				lg__recreate(g, "the listener did not answer its own pings", pipes);
			}
			pthread_mutex_unlock(&g->mu);
			if (all)
				nng_stats_free(all);
		}
	}
	return NULL;
}

int lg_open(struct lisguard *g, nng_socket s, const char *url, const struct lg_opts *o,
            struct ig_errbuf *eb)
{
	int64_t excess;
	uint64_t pipes;
	nng_stat *all = NULL;
	int rc;

	memset(g, 0, sizeof(*g));
	g->sock = s;
	g->ping_ms = o && o->ping_ms > 0 ? o->ping_ms : LG_PING_MS;
	g->retire_ms = o && o->retire_ms > 0 ? o->retire_ms : LG_RETIRE_MS;
	g->progress = o ? o->progress : NULL;
	atomic_init(&g->recreated, 0);
	atomic_init(&g->quit, false);
	if (snprintf(g->url, sizeof(g->url), "%s", url) >= (int)sizeof(g->url))
		return ig_errf(eb, IG_E_CONFIG, "address '%s' is too long", url);
	if (!strncmp(url, "ipc://", 6)) {
		if (snprintf(g->ipc_path, sizeof(g->ipc_path), "%s", url + 6) >=
		    (int)sizeof(g->ipc_path))
			return ig_errf(eb, IG_E_CONFIG, "socket path '%s' is too long", url + 6);
		/* Safe: the caller holds the lock, so a file there is a dead owner's. */
		if (unlink(g->ipc_path) != 0 && errno != ENOENT)
			return ig_errf(eb, IG_E_IO, "cannot remove stale socket '%s': %s",
			               g->ipc_path, strerror(errno));
	}
	rc = lg__listen(g, &g->cur, eb);
	if (rc)
		return rc;
	g->cur_open = true;
	if (nng_stats_get(&all) == 0) {
		g->stats = lg__counters(all, g->cur, &excess, &pipes);
		g->cur_excess = 0; /* a new listener has no history */
		nng_stats_free(all);
	}
	if (!g->stats)
		ev_msg(EV_WARN, "ignis.proto.listener_unwatched",
		       "this nng keeps no listener statistics: a wedged listener on %s is "
		       "found by the %d ms ping only",
		       g->url, g->ping_ms);
	pthread_mutex_init(&g->mu, NULL);
	if (pthread_create(&g->thr, NULL, lg__checker, g) != 0) {
		pthread_mutex_destroy(&g->mu);
		nng_listener_close(g->cur);
		g->cur_open = false;
		return ig_errf(eb, IG_E_NOMEM, "cannot start the listener guard's thread");
	}
	g->thr_on = true;
	if (pthread_create(&g->pinger, NULL, lg__pinger, g) != 0) {
		lg_close(g);
		return ig_errf(eb, IG_E_NOMEM, "cannot start the listener guard's thread");
	}
	g->pinger_on = true;
	return IG_E_OK;
}

void lg_close(struct lisguard *g)
{
	if (!g->thr_on)
		return;
	atomic_store(&g->quit, true);
	pthread_join(g->thr, NULL);
	if (g->pinger_on)
		pthread_join(g->pinger, NULL);
	g->thr_on = g->pinger_on = false;
	lg__probe_end(g);
	while (g->nretired)
		lg__close_retired(g, g->nretired - 1);
	if (g->cur_open)
		nng_listener_close(g->cur);
	g->cur_open = false;
	pthread_mutex_destroy(&g->mu);
}

uint64_t lg_recreated(struct lisguard *g)
{
	return atomic_load(&g->recreated);
}
