/*
 * kvclient.c - the worker's client of the kvstore daemon (see kvclient.h).
 *
 * This file owns the client thread, the mailbox between it and the caller,
 * and the arena mappings. Invariants, all under `mtx`:
 *   - state IDLE: no request; req_nm NULL. QUEUED: req_nm holds the encoded
 *     request for the thread. RUNNING: the thread took req_nm and is the
 *     only writer of rep, rep_nm, rep_rc and rep_eb. DONE: those hold the
 *     result for kvc_poll; nobody writes them until the next kvc_start;
 *   - map_cur is what kvc_arena hands out and map_old the one before it
 *     (kept mapped, see kvclient.h); map_new is a mapping the thread made
 *     and the caller has not taken over yet. Only the caller's thread moves
 *     map_new into map_cur; only the client thread fills map_new.
 * The thread's own fields (t_*) are touched by the client thread alone.
 */
#define _GNU_SOURCE
#include "kvclient.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "common/clock.h"
#include "kvram/kvcopy.h"
#include "kvram/kvram.h"
#include "proto/transport.h"

_Static_assert(KVC_MAX_WINDOWS == ARENA_MAX_WINDOWS, "kvclient.h says the arena's window count");

/* Waiting for a restarted daemon's kv_config: ask kv_stats again after
 * KVC_CONFIG_WAIT_MIN_MS, doubling up to KVC_CONFIG_WAIT_MAX_MS (the
 * supervisor sends it right after hello: the first waits are short). */
#define KVC_CONFIG_WAIT_MIN_MS 20u
#define KVC_CONFIG_WAIT_MAX_MS 200u
/* The background probe that maps the arena before any request needs it:
 * each kv_stats gets this long, and an unconfigured daemon is asked again
 * after KVC_MAP_RETRY_MS. */
#define KVC_MAP_PROBE_MS 1000u
#define KVC_MAP_RETRY_MS 100u
/* The arena name as the protocol bounds it (kv_config.arena_name). */
#define KVC_NAME_MAX 96

enum kvc_state { KVC_IDLE, KVC_QUEUED, KVC_RUNNING, KVC_DONE };

/* A mapping, and the object it maps (to notice another one under the same
 * name). */
struct kvc_map {
	struct arena_map m;
	char name[KVC_NAME_MAX + 1];
	dev_t dev;
	ino_t ino;
	bool pinned; /* the pin hook took it (kvc_pin) */
};

struct kvc {
	struct kvc_pin pin;        /* set at open, read-only after */
	char path[TP_PATH_MAX];    /* <rtdir>/kvstore.sock, for messages */
	char url[TP_PATH_MAX + 8]; /* ipc://... */
	nng_socket sock;
	/* the dialer's watchdog (kvc__watch): connections up now, counted by
	 * nng's pipe events, and since when none is (clk_mono_ms) */
	nng_dialer dialer;
	pthread_mutex_t dial_mtx; /* replacing the dialer */
	_Atomic int pipes;
	_Atomic uint64_t pipes_zero_since;
	_Atomic uint64_t redials;
	pthread_t thread;
	bool thread_started;
	int timeout_ms; /* the caller's; read under mtx by kvc_start */
	int req_timeout_ms;

	pthread_mutex_t mtx;
	pthread_cond_t cv; /* the thread waits on it for work or stop */
	bool stop;
	enum kvc_state state;
	uint32_t req_type;
	uint64_t req_deadline; /* clk_mono_ms; 0: none */
	nng_msg *req_nm;
	nng_msg *rep_nm; /* rep's string views point into it */
	int rep_rc;
	struct ig_errbuf rep_eb;
	struct kvc_map map_cur, map_old, map_new;
	bool have_new;
	uint64_t gen;
	struct msg rep;

	/* the client thread's own */
	struct kvc_map t_map; /* what it mapped last (name, object); m unused */
	bool t_mapped;
	uint32_t t_pipe;       /* the connection of the last kv_stats answered */
	uint64_t t_next_probe; /* background mapping: when to ask next */
	uint64_t t_timeout_ms; /* the request's, for messages */
	struct msg t_probe;    /* kv_stats replies */
};

/* ---- small helpers --------------------------------------------------------- */

static void kvc__pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	struct kvc *c = arg;

	(void)p;
	if (ev == NNG_PIPE_EV_ADD_POST)
		atomic_fetch_add(&c->pipes, 1);
	else if (ev == NNG_PIPE_EV_REM_POST && atomic_fetch_sub(&c->pipes, 1) == 1)
		atomic_store(&c->pipes_zero_since, clk_mono_ms());
}

/*
 * The dialer's watchdog. nng's dialer redials by itself when a connection
 * drops; seen here (nng 1.5.2, the daemon killed -9 and restarted at once
 * under load) it sometimes stops redialing for good: no connect() any more,
 * a request waiting in nng_sendmsg until its deadline. So when no
 * connection has been up for KVC_REDIAL_MS the dialer is replaced by a new
 * one. Cheap (two atomic loads) and called from both threads: kvc_poll and
 * kvc_pending (the caller polls every round while it waits) and the client
 * thread's waits.
 */
static void kvc__watch(struct kvc *c)
{
	uint64_t now = clk_mono_ms();
	nng_dialer d;

	if (atomic_load(&c->pipes) > 0 ||
	    now - atomic_load(&c->pipes_zero_since) < (uint64_t)KVC_REDIAL_MS)
		return;
	if (pthread_mutex_trylock(&c->dial_mtx) != 0)
		return; /* the other thread is at it */
	if (atomic_load(&c->pipes) == 0 &&
	    now - atomic_load(&c->pipes_zero_since) >= (uint64_t)KVC_REDIAL_MS) {
		atomic_store(&c->pipes_zero_since, now);
		(void)nng_dialer_close(c->dialer);
		if (nng_dial(c->sock, c->url, &d, NNG_FLAG_NONBLOCK) == 0)
			c->dialer = d;
		atomic_fetch_add(&c->redials, 1);
	}
	pthread_mutex_unlock(&c->dial_mtx);
}

static uint64_t kvc__remaining(uint64_t deadline)
{
	uint64_t now = clk_mono_ms();

	if (!deadline)
		return UINT64_MAX;
	return deadline > now ? deadline - now : 0;
}

static nng_duration kvc__nng_ms(uint64_t left)
{
	return left >= INT32_MAX ? NNG_DURATION_INFINITE : (nng_duration)left;
}

static void kvc__map_release(struct kvc *c, struct kvc_map *km)
{
	if (km->pinned && c->pin.unpin)
		c->pin.unpin(c->pin.ctx, km->m.base);
	km->pinned = false;
	arena_map_close(&km->m);
	memset(km, 0, sizeof(*km));
	km->m.fd = -1;
}

/* The reply type `req` should get; 0 when any will do. */
static uint32_t kvc__want(uint32_t req)
{
	switch (req) {
	case MSG_KV_RESERVE:
		return MSG_KV_RESERVED;
	case MSG_KV_FETCH:
		return MSG_KV_SEQ;
	case MSG_KV_STAGE:
		return MSG_KV_STAGED;
	case MSG_KV_LIST:
		return MSG_KV_LIST_REPLY;
	case MSG_KV_STATS:
		return MSG_KV_STATS_REPLY;
	case MSG_KV_SLOT_CAPTURE:
	case MSG_KV_SLOT_CLAIM:
		return MSG_KV_SLOT;
	case MSG_KV_SLOT_LIST:
		return MSG_KV_SLOT_LIST_REPLY;
	case MSG_PING:
		return MSG_PONG;
	case MSG_KV_CONFIG:
	case MSG_KV_SWEEP:
	case MSG_KV_COMMIT:
	case MSG_KV_DEMOTE:
	case MSG_KV_DROP:
	case MSG_KV_VERIFY:
	case MSG_KV_SLOT_PUBLISH:
	case MSG_KV_SLOT_DROP:
	case MSG_SHUTDOWN:
		return MSG_ACK;
	default:
		return 0;
	}
}

/* Replies that carry offsets into the arena. */
static bool kvc__has_offsets(uint32_t type)
{
	return type == MSG_KV_RESERVED || type == MSG_KV_SEQ || type == MSG_KV_STAGED ||
	       type == MSG_KV_SLOT;
}

static int kvc__append(void *ctx, const char *buf, size_t len)
{
	return nng_msg_append(ctx, buf, len) == 0 ? 0 : -1;
}

/* Sleep on the condition variable up to `ms` or until stop; true on stop.
 * Called with mtx held. */
static bool kvc__wait_locked(struct kvc *c, uint64_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	if (!c->stop)
		pthread_cond_timedwait(&c->cv, &c->mtx, &ts);
	return c->stop;
}

static bool kvc__wait(struct kvc *c, uint64_t ms)
{
	bool stop;

	pthread_mutex_lock(&c->mtx);
	stop = kvc__wait_locked(c, ms);
	pthread_mutex_unlock(&c->mtx);
	return stop;
}

/* ---- one exchange (client thread) ----------------------------------------- */

/*
 * Send a copy of `req` (type `type`) and wait for its reply until
 * `deadline`; decode it into *m with its string views in *nm (the caller
 * frees *nm, also on failure). An `error` reply becomes its code and the
 * daemon's message; *pipe is the connection the reply came over.
 */
static int kvc__call(struct kvc *c, nng_msg *req, uint32_t type, uint64_t deadline, nng_msg **nm,
                     struct msg *m, uint32_t *pipe, struct ig_errbuf *eb)
{
	char what[TP_PATH_MAX + 64];
	nng_msg *out;
	uint64_t left = kvc__remaining(deadline);
	int rv, rc;

	*nm = NULL;
	if (!left)
		goto out_timeout;
	rv = nng_msg_dup(&out, req);
	if (rv)
		return tp_nng_err(eb, rv, "kvstore client: copying a request");
	rv = nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO, kvc__nng_ms(left));
	if (!rv)
		rv = nng_sendmsg(c->sock, out, 0);
	if (rv) {
		nng_msg_free(out);
		if (rv == NNG_ETIMEDOUT)
			goto out_timeout;
		snprintf(what, sizeof(what), "kvstore at '%s': sending %s", c->path,
		         msg_type_name(type));
		return tp_nng_err(eb, rv, what);
	}
	left = kvc__remaining(deadline);
	rv = nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, kvc__nng_ms(left ? left : 1));
	if (!rv)
		rv = nng_recvmsg(c->sock, nm, 0);
	if (rv) {
		*nm = NULL;
		if (rv == NNG_ETIMEDOUT)
			goto out_timeout;
		snprintf(what, sizeof(what), "kvstore at '%s': waiting for the reply to %s",
		         c->path, msg_type_name(type));
		return tp_nng_err(eb, rv, what);
	}
	*pipe = nng_pipe_id(nng_msg_get_pipe(*nm));
	rc = msg_decode(nng_msg_body(*nm), nng_msg_len(*nm), m, eb);
	if (rc) {
		ig_errprefix(eb, "kvstore at '%s': the reply to %s", c->path, msg_type_name(type));
		return rc;
	}
	if (m->type == MSG_ERROR) {
		char text[sizeof(eb->msg)];
		uint64_t code = m->u.error.code;

		msg_str_copy(text, sizeof(text), m->u.error.message);
		/* an error reply is never success, whatever code it carries */
		return ig_errf(eb,
		               code != IG_E_OK && code <= INT32_MAX && ig_err_known((int)code)
		                   ? (int)code
		                   : IG_E_PROTO_UNEXPECTED,
		               "kvstore at '%s' refused %s: %s", c->path, msg_type_name(type),
		               text);
	}
	return IG_E_OK;

out_timeout:
	return ig_errf(eb, IG_E_TIMEOUT,
	               "kvstore at '%s': no reply to %s within %" PRIu64
	               " ms (is ignis-kvstored running? kvc_set_timeout sets the limit)",
	               c->path, msg_type_name(type), c->t_timeout_ms);
}

/* ---- the arena (client thread) --------------------------------------------- */

/* Map arena `name` unless it is the object mapped last; hand a new mapping
 * to the caller's thread through map_new. */
static int kvc__sync_map(struct kvc *c, const char *name, struct ig_errbuf *eb)
{
	struct kvc_map km, stale;
	char path[KVC_NAME_MAX + 16];
	struct stat st;
	int rc;

	snprintf(path, sizeof(path), "/dev/shm/%s", name);
	if (c->t_mapped && !strcmp(c->t_map.name, name) && stat(path, &st) == 0 &&
	    st.st_dev == c->t_map.dev && st.st_ino == c->t_map.ino)
		return IG_E_OK;
	memset(&km, 0, sizeof(km));
	rc = arena_map_open(&km.m, name, eb);
	if (rc) {
		ig_errprefix(eb, "kvstore at '%s' serves arena '%s'", c->path, name);
		return rc;
	}
	if (fstat(km.m.fd, &st) != 0) {
		rc = ig_errf(eb, IG_E_IO, "kvstore at '%s': fstat of arena '%s': %s", c->path, name,
		             strerror(errno));
		arena_map_close(&km.m);
		return rc;
	}
	snprintf(km.name, sizeof(km.name), "%s", name);
	km.dev = st.st_dev;
	km.ino = st.st_ino;
	/* pinned here, on this thread, before a reply that refers to it is
	 * handed out: registering a large arena takes a while, and the
	 * caller's loop must not wait for it */
	if (c->pin.pin)
		km.pinned = c->pin.pin(c->pin.ctx, km.m.base, km.m.bytes);
	c->t_map = km;
	c->t_map.m = (struct arena_map){.base = NULL, .bytes = 0, .fd = -1};
	c->t_mapped = true;
	pthread_mutex_lock(&c->mtx);
	stale = c->map_new; /* never handed out: nobody uses it */
	c->map_new = km;
	c->have_new = true;
	pthread_mutex_unlock(&c->mtx);
	if (stale.m.base)
		kvc__map_release(c, &stale);
	return IG_E_OK;
}

/* Ask kv_stats once; on an answer, note its connection and (re)map the arena
 * it names. *configured: whether it named one. */
static int kvc__probe(struct kvc *c, nng_msg *stats, uint64_t deadline, bool *configured,
                      struct ig_errbuf *eb)
{
	char name[KVC_NAME_MAX + 1];
	uint32_t pipe = 0;
	nng_msg *nm;
	int rc = kvc__call(c, stats, MSG_KV_STATS, deadline, &nm, &c->t_probe, &pipe, eb);

	*configured = false;
	if (!rc && c->t_probe.type != MSG_KV_STATS_REPLY)
		rc = ig_errf(eb, IG_E_PROTO_UNEXPECTED,
		             "kvstore at '%s' answered kv_stats with '%s'", c->path,
		             msg_type_name(c->t_probe.type));
	if (!rc) {
		msg_str_copy(name, sizeof(name), c->t_probe.u.kv_stats_reply.arena_name);
		c->t_pipe = pipe;
		*configured = name[0] != '\0';
		if (*configured)
			rc = kvc__sync_map(c, name, eb);
	}
	if (nm)
		nng_msg_free(nm);
	return rc;
}

/* Probe until the daemon names its arena (mapped then) or `deadline`.
 * *waited: it was not configured at the first probe. */
static int kvc__await_config(struct kvc *c, nng_msg *stats, uint64_t deadline, bool *waited,
                             struct ig_errbuf *eb)
{
	uint64_t pause = KVC_CONFIG_WAIT_MIN_MS;
	bool configured;
	int rc;

	*waited = false;
	for (;;) {
		rc = kvc__probe(c, stats, deadline, &configured, eb);
		if (rc || configured)
			return rc;
		*waited = true;
		if (pause > kvc__remaining(deadline))
			return ig_errf(eb, IG_E_TIMEOUT,
			               "kvstore at '%s' is still not configured (the supervisor "
			               "sends kv_config after hello)",
			               c->path);
		if (kvc__wait(c, pause))
			return ig_errf(eb, IG_E_CLOSED, "kvstore client of '%s' closed", c->path);
		pause = pause * 2 > KVC_CONFIG_WAIT_MAX_MS ? KVC_CONFIG_WAIT_MAX_MS : pause * 2;
	}
}

/* ---- one request, start to end (client thread) ----------------------------- */

static nng_msg *kvc__encode(const struct msg *m, struct ig_errbuf *eb, int *rc)
{
	nng_msg *nm;
	int rv = nng_msg_alloc(&nm, 0);

	if (rv) {
		*rc = tp_nng_err(eb, rv, "kvstore client: allocating a message");
		return NULL;
	}
	*rc = msg_encode(m, kvc__append, nm, eb);
	if (*rc) {
		nng_msg_free(nm);
		return NULL;
	}
	return nm;
}

/*
 * Carry `req` out: map first when it gets offsets and nothing is mapped;
 * wait out a daemon not configured yet (IG_E_NOT_READY) and send it again;
 * hold a reply with offsets back until the arena of the daemon that gave it
 * is mapped. The reply goes into c->rep, its buffer into *nm.
 */
static int kvc__serve(struct kvc *c, nng_msg *req, uint32_t type, uint64_t deadline, nng_msg **nm,
                      struct ig_errbuf *eb)
{
	struct msg q = {.type = MSG_KV_STATS};
	uint32_t want = kvc__want(type), pipe = 0;
	bool waited;
	nng_msg *stats;
	int rc;

	*nm = NULL;
	stats = kvc__encode(&q, eb, &rc);
	if (!stats)
		return rc;
	if ((type == MSG_KV_RESERVE || type == MSG_KV_FETCH || type == MSG_KV_STAGE ||
	     type == MSG_KV_SLOT_CAPTURE || type == MSG_KV_SLOT_CLAIM) &&
	    !c->t_mapped) {
		rc = kvc__await_config(c, stats, deadline, &waited, eb);
		if (rc)
			goto out;
	}
	for (;;) {
		rc = kvc__call(c, req, type, deadline, nm, &c->rep, &pipe, eb);
		if (rc != IG_E_NOT_READY || !*nm || c->rep.type != MSG_ERROR)
			break;
		/* a daemon not configured yet (restarted): again once it is */
		nng_msg_free(*nm);
		*nm = NULL;
		rc = kvc__await_config(c, stats, deadline, &waited, eb);
		if (rc)
			goto out;
		/* configured at once: give it a moment rather than spin */
		if (!waited && kvc__wait(c, KVC_CONFIG_WAIT_MIN_MS)) {
			rc = ig_errf(eb, IG_E_CLOSED, "kvstore client of '%s' closed", c->path);
			goto out;
		}
	}
	if (rc)
		goto out;
	if (want && (c->rep.type != want || (want == MSG_ACK && c->rep.u.ack.of != type))) {
		rc =
		    ig_errf(eb, IG_E_PROTO_UNEXPECTED,
		            "kvstore at '%s' answered %s with '%s' (of %" PRIu64 "); expected '%s'",
		            c->path, msg_type_name(type), msg_type_name(c->rep.type),
		            c->rep.type == MSG_ACK ? c->rep.u.ack.of : 0, msg_type_name(want));
		goto out;
	}
	if (kvc__has_offsets(c->rep.type) && (!c->t_mapped || pipe != c->t_pipe)) {
		/* another connection, maybe another daemon: its arena first */
		rc = kvc__await_config(c, stats, deadline, &waited, eb);
		if (rc)
			goto out;
	}
out:
	nng_msg_free(stats);
	return rc;
}

/* The background probe while nothing is mapped: one kv_stats, briefly. */
static void kvc__probe_idle(struct kvc *c)
{
	struct msg q = {.type = MSG_KV_STATS};
	struct ig_errbuf eb;
	bool configured = false;
	nng_msg *stats;
	int rc;

	stats = kvc__encode(&q, &eb, &rc);
	if (!stats)
		return;
	c->t_timeout_ms = KVC_MAP_PROBE_MS;
	(void)kvc__probe(c, stats, clk_mono_ms() + KVC_MAP_PROBE_MS, &configured, &eb);
	nng_msg_free(stats);
}

static void *kvc__main(void *arg)
{
	struct kvc *c = arg;

	pthread_mutex_lock(&c->mtx);
	while (!c->stop) {
		if (c->state == KVC_QUEUED) {
			nng_msg *req = c->req_nm, *nm = NULL;
			uint32_t type = c->req_type;
			uint64_t deadline = c->req_deadline;
			struct ig_errbuf eb;
			int rc;

			c->t_timeout_ms = (uint64_t)c->req_timeout_ms;
			c->req_nm = NULL;
			c->state = KVC_RUNNING;
			pthread_mutex_unlock(&c->mtx);
			ig_errclear(&eb);
			rc = kvc__serve(c, req, type, deadline, &nm, &eb);
			nng_msg_free(req);
			if (rc && nm) {
				nng_msg_free(nm);
				nm = NULL;
			}
			pthread_mutex_lock(&c->mtx);
			c->rep_nm = nm;
			c->rep_rc = rc;
			c->rep_eb = eb;
			c->state = KVC_DONE;
			continue;
		}
		if (!c->t_mapped && clk_mono_ms() >= c->t_next_probe) {
			pthread_mutex_unlock(&c->mtx);
			kvc__probe_idle(c);
			c->t_next_probe = clk_mono_ms() + KVC_MAP_RETRY_MS;
			pthread_mutex_lock(&c->mtx);
			continue;
		}
		if (c->t_mapped)
			pthread_cond_wait(&c->cv, &c->mtx);
		else
			kvc__wait_locked(c, KVC_MAP_RETRY_MS);
	}
	pthread_mutex_unlock(&c->mtx);
	return NULL;
}

/* ---- the caller's side ------------------------------------------------------ */

/* Take over a mapping the thread made. Called with mtx held. */
static void kvc__adopt_map_locked(struct kvc *c)
{
	if (!c->have_new)
		return;
	kvc__map_release(c, &c->map_old);
	c->map_old = c->map_cur;
	c->map_cur = c->map_new;
	memset(&c->map_new, 0, sizeof(c->map_new));
	c->map_new.m.fd = -1;
	c->have_new = false;
	c->gen++;
}

int kvc_open(struct kvc **out, const char *rtdir, struct ig_errbuf *eb)
{
	return kvc_open_pinned(out, rtdir, NULL, eb);
}

int kvc_open_pinned(struct kvc **out, const char *rtdir, const struct kvc_pin *pin,
                    struct ig_errbuf *eb)
{
	pthread_condattr_t ca;
	struct kvc *c;
	int rv, rc;

	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return ig_errf(eb, IG_E_NOMEM, "kvstore client: out of memory");
	if (snprintf(c->path, sizeof(c->path), "%s/kvstore.sock", rtdir) >= (int)sizeof(c->path)) {
		free(c);
		return ig_errf(eb, IG_E_CONFIG,
		               "kvstore socket path under '%s' is too long (at most %d bytes)",
		               rtdir, TP_PATH_MAX - 1);
	}
	snprintf(c->url, sizeof(c->url), "ipc://%s", c->path);
	if (pin)
		c->pin = *pin;
	c->timeout_ms = KVC_TIMEOUT_MS;
	c->map_cur.m.fd = c->map_old.m.fd = c->map_new.m.fd = -1;
	pthread_mutex_init(&c->mtx, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cv, &ca);
	pthread_condattr_destroy(&ca);

	pthread_mutex_init(&c->dial_mtx, NULL);
	atomic_store(&c->pipes_zero_since, clk_mono_ms());
	rv = nng_req0_open(&c->sock);
	if (rv) {
		rc = tp_nng_err(eb, rv, "kvstore client: cannot open a request socket");
		goto out_free;
	}
	rv = nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, MSG_MAX_BYTES);
	if (!rv)
		rv = nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, KVC_RESEND_MS);
	if (!rv)
		rv = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, KVC_RECONN_MIN_MS);
	if (!rv)
		rv = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT, KVC_RECONN_MAX_MS);
	if (!rv)
		rv = nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_POST, kvc__pipe_cb, c);
	if (!rv)
		rv = nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, kvc__pipe_cb, c);
	if (!rv)
		rv = nng_dial(c->sock, c->url, &c->dialer, NNG_FLAG_NONBLOCK);
	if (rv) {
		char what[TP_PATH_MAX + 64];

		snprintf(what, sizeof(what), "kvstore client: dialing '%s'", c->path);
		rc = tp_nng_err(eb, rv, what);
		goto out_close;
	}
	rv = pthread_create(&c->thread, NULL, kvc__main, c);
	if (rv) {
		rc = ig_errf(eb, IG_E_NOMEM, "kvstore client of '%s': cannot start its thread: %s",
		             c->path, strerror(rv));
		goto out_close;
	}
	c->thread_started = true;
	*out = c;
	return IG_E_OK;

out_close:
	nng_close(c->sock);
out_free:
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mtx);
	pthread_mutex_destroy(&c->dial_mtx);
	free(c);
	return rc;
}

void kvc_close(struct kvc *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mtx);
	c->stop = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mtx);
	/* wakes a thread blocked in a send or receive with NNG_ECLOSED */
	nng_close(c->sock);
	if (c->thread_started)
		pthread_join(c->thread, NULL);
	if (c->req_nm)
		nng_msg_free(c->req_nm);
	if (c->rep_nm)
		nng_msg_free(c->rep_nm);
	kvc__map_release(c, &c->map_new);
	kvc__map_release(c, &c->map_cur);
	kvc__map_release(c, &c->map_old);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mtx);
	pthread_mutex_destroy(&c->dial_mtx);
	free(c);
}

void kvc_set_timeout(struct kvc *c, int timeout_ms)
{
	pthread_mutex_lock(&c->mtx);
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
	pthread_mutex_unlock(&c->mtx);
}

int kvc_start(struct kvc *c, const struct msg *req, struct ig_errbuf *eb)
{
	nng_msg *nm, *old = NULL;
	int rc;

	nm = kvc__encode(req, eb, &rc);
	if (!nm) {
		ig_errprefix(eb, "kvstore client: %s", msg_type_name(req->type));
		return rc;
	}
	pthread_mutex_lock(&c->mtx);
	if (c->stop) {
		rc = ig_errf(eb, IG_E_CLOSED, "kvstore client of '%s' is closed", c->path);
	} else if (c->state != KVC_IDLE) {
		rc = ig_errf(
		    eb, IG_E_BUSY, "kvstore client of '%s': %s is %s; one request at a time (REQ)",
		    c->path, msg_type_name(c->req_type),
		    c->state == KVC_DONE ? "answered but not collected by kvc_poll" : "in flight");
	} else {
		old = c->rep_nm; /* the last reply's string views end here */
		c->rep_nm = NULL;
		c->req_nm = nm;
		c->req_type = req->type;
		c->req_deadline = c->timeout_ms ? clk_mono_ms() + (uint64_t)c->timeout_ms : 0;
		c->req_timeout_ms = c->timeout_ms;
		c->state = KVC_QUEUED;
		pthread_cond_signal(&c->cv);
		nm = NULL;
	}
	pthread_mutex_unlock(&c->mtx);
	if (nm)
		nng_msg_free(nm);
	if (old)
		nng_msg_free(old);
	return rc;
}

int kvc_poll(struct kvc *c, struct msg *reply, bool *done, struct ig_errbuf *eb)
{
	int rc = IG_E_OK;

	*done = false;
	kvc__watch(c);
	pthread_mutex_lock(&c->mtx);
	kvc__adopt_map_locked(c);
	switch (c->state) {
	case KVC_IDLE:
		rc = ig_errf(eb, IG_E_INVAL, "kvstore client of '%s': no request was started",
		             c->path);
		break;
	case KVC_QUEUED:
	case KVC_RUNNING:
		break;
	case KVC_DONE:
		*done = true;
		rc = c->rep_rc;
		if (rc) {
			if (eb)
				*eb = c->rep_eb;
		} else {
			*reply = c->rep;
		}
		c->state = KVC_IDLE;
		break;
	}
	pthread_mutex_unlock(&c->mtx);
	return rc;
}

bool kvc_pending(struct kvc *c)
{
	bool pending;

	kvc__watch(c);
	pthread_mutex_lock(&c->mtx);
	pending = c->state != KVC_IDLE;
	pthread_mutex_unlock(&c->mtx);
	return pending;
}

struct kvc_arena kvc_arena(struct kvc *c)
{
	struct kvc_arena a;

	pthread_mutex_lock(&c->mtx);
	kvc__adopt_map_locked(c);
	a.base = c->map_cur.m.base;
	a.bytes = c->map_cur.m.bytes;
	a.gen = c->gen;
	pthread_mutex_unlock(&c->mtx);
	return a;
}

int kvc_slot_now(struct kvc *c, uint32_t slot, struct arena_slot_info *out, struct ig_errbuf *eb)
{
	int rc;

	pthread_mutex_lock(&c->mtx);
	kvc__adopt_map_locked(c);
	if (!c->map_cur.m.base)
		rc = ig_errf(eb, IG_E_NOTFOUND, "kvstore at '%s': no arena mapped", c->path);
	else
		rc = arena_map_slot(&c->map_cur.m, slot, out, eb);
	pthread_mutex_unlock(&c->mtx);
	return rc;
}

/* ---- requests ---------------------------------------------------------------- */

void kvc_req_slot_capture(struct msg *q, uint64_t key, uint64_t model_id, bool prefix,
                          const char *cls, uint32_t tokens, uint64_t image_bytes)
{
	memset(q, 0, sizeof(*q));
	q->type = MSG_KV_SLOT_CAPTURE;
	q->u.kv_slot_capture =
	    (struct msg_kv_slot_capture){.key = key,
	                                 .model_id = model_id,
	                                 .kind = msg_str_of(prefix ? "prefix" : "checkpoint"),
	                                 .class = msg_str_of(cls),
	                                 .tokens = tokens,
	                                 .image_bytes = image_bytes};
}

void kvc_req_slot_publish(struct msg *q, uint32_t slot, uint64_t gen, uint64_t sum)
{
	memset(q, 0, sizeof(*q));
	q->type = MSG_KV_SLOT_PUBLISH;
	q->u.kv_slot_publish = (struct msg_kv_slot_publish){.slot = slot, .gen = gen, .sum = sum};
}

void kvc_req_slot_claim(struct msg *q, uint64_t key, uint64_t model_id)
{
	memset(q, 0, sizeof(*q));
	q->type = MSG_KV_SLOT_CLAIM;
	q->u.kv_slot_claim =
	    (struct msg_kv_slot_claim){.key = key, .model_id = model_id, .kind = msg_str_of("")};
}

void kvc_req_slot_drop(struct msg *q, uint32_t slot, uint64_t gen)
{
	memset(q, 0, sizeof(*q));
	q->type = MSG_KV_SLOT_DROP;
	q->u.kv_slot_drop = (struct msg_kv_slot_drop){.slot = slot, .gen = gen};
}

void kvc_req_reserve(struct msg *q, uint64_t seq, uint64_t model_id, uint32_t kv_format,
                     const char *cls, uint64_t image_bytes, uint64_t window_bytes)
{
	memset(q, 0, sizeof(*q));
	q->type = MSG_KV_RESERVE;
	q->u.kv_reserve = (struct msg_kv_reserve){.seq = seq,
	                                          .model_id = model_id,
	                                          .kv_format = kv_format,
	                                          .class = msg_str_of(cls),
	                                          .image_bytes = image_bytes,
	                                          .window_bytes = window_bytes};
}

void kvc_req_commit(struct msg *q, uint64_t seq, uint64_t window, uint64_t len, uint64_t sum)
{
	memset(q, 0, sizeof(*q));
	q->type = MSG_KV_COMMIT;
	q->u.kv_commit = (struct msg_kv_commit){seq, window, len, sum};
}

/* Window k's place in the current mapping, or why it has none. */
static int kvc__window_place(struct kvc *c, uint64_t seq, uint64_t offset, uint64_t image_bytes,
                             uint64_t window_bytes, uint64_t k, uint8_t **p, uint64_t *len,
                             struct ig_errbuf *eb)
{
	struct kvc_arena a = kvc_arena(c);
	uint64_t at;

	if (!kvc_window(image_bytes, window_bytes, k, &at, len))
		return ig_errf(eb, IG_E_INVAL,
		               "seq %" PRIu64 ": window %" PRIu64
		               " is past the last of an image of "
		               "%" PRIu64 " bytes in windows of %" PRIu64,
		               seq, k, image_bytes, window_bytes);
	if (!a.base)
		return ig_errf(eb, IG_E_NOTFOUND,
		               "seq %" PRIu64 ": no KV-RAM arena mapped yet from kvstore at '%s'",
		               seq, c->path);
	if (offset > a.bytes || at > a.bytes - offset || *len > a.bytes - offset - at)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "seq %" PRIu64 ": window %" PRIu64 " at %" PRIu64 "+%" PRIu64
		               " is outside the arena of %" PRIu64 " bytes",
		               seq, k, offset + at, *len, a.bytes);
	*p = (uint8_t *)a.base + offset + at;
	return IG_E_OK;
}

int kvc_req_commit_window(struct kvc *c, struct msg *q, uint64_t seq, uint64_t offset,
                          uint64_t image_bytes, uint64_t window_bytes, uint64_t k,
                          struct ig_errbuf *eb)
{
	uint8_t *p;
	uint64_t len;
	int rc = kvc__window_place(c, seq, offset, image_bytes, window_bytes, k, &p, &len, eb);

	if (rc)
		return rc;
	kvc_req_commit(q, seq, k, len, kvc_sum(p, len));
	return IG_E_OK;
}

int kvc_write_window(struct kvc *c, struct msg *q, uint64_t seq, uint64_t offset,
                     uint64_t image_bytes, uint64_t window_bytes, uint64_t k, const void *src,
                     struct ig_errbuf *eb)
{
	uint8_t *p;
	uint64_t len;
	int rc = kvc__window_place(c, seq, offset, image_bytes, window_bytes, k, &p, &len, eb);

	if (rc)
		return rc;
	kvc_req_commit(q, seq, k, len, kvcopy_hash(p, src, len));
	return IG_E_OK;
}

int kvc_read_window(struct kvc *c, uint64_t seq, uint64_t offset, uint64_t image_bytes,
                    uint64_t window_bytes, uint64_t k, uint64_t sum, void *dst,
                    struct ig_errbuf *eb)
{
	uint8_t *p;
	uint64_t len, got;
	int rc = kvc__window_place(c, seq, offset, image_bytes, window_bytes, k, &p, &len, eb);

	if (rc)
		return rc;
	if (!kvcopy_check(dst, p, len, sum, &got))
		return ig_errf(eb, IG_E_KV_LOST,
		               "seq %" PRIu64 " window %" PRIu64
		               ": the bytes in KV-RAM hash to %016" PRIx64 ", not the %016" PRIx64
		               " committed; not used",
		               seq, k, got, sum);
	return IG_E_OK;
}

static void kvc__req_seq(struct msg *q, uint32_t type, uint64_t seq)
{
	memset(q, 0, sizeof(*q));
	q->type = type;
	switch (type) {
	case MSG_KV_FETCH:
		q->u.kv_fetch.seq = seq;
		break;
	case MSG_KV_DEMOTE:
		q->u.kv_demote.seq = seq;
		break;
	case MSG_KV_DROP:
		q->u.kv_drop.seq = seq;
		break;
	case MSG_KV_VERIFY:
		q->u.kv_verify.seq = seq;
		break;
	case MSG_KV_LIST:
		q->u.kv_list.after = seq;
		break;
	case MSG_KV_STATS:
		q->u.kv_stats.seq = seq;
		break;
	}
}

void kvc_req_stage(struct msg *q, uint64_t seq, uint64_t window)
{
	memset(q, 0, sizeof(*q));
	q->type = MSG_KV_STAGE;
	q->u.kv_stage.seq = seq;
	q->u.kv_stage.window = window;
}

void kvc_req_sweep(struct msg *q, uint32_t keep_owner)
{
	memset(q, 0, sizeof(*q));
	q->type = MSG_KV_SWEEP;
	q->u.kv_sweep.keep_owner = keep_owner;
}

void kvc_req_fetch(struct msg *q, uint64_t seq)
{
	kvc__req_seq(q, MSG_KV_FETCH, seq);
}

void kvc_req_drop(struct msg *q, uint64_t seq)
{
	kvc__req_seq(q, MSG_KV_DROP, seq);
}

void kvc_req_list(struct msg *q, uint64_t after)
{
	kvc__req_seq(q, MSG_KV_LIST, after);
}

void kvc_req_stats(struct msg *q)
{
	kvc__req_seq(q, MSG_KV_STATS, 0);
}

bool kvc_window(uint64_t image_bytes, uint64_t window_bytes, uint64_t k, uint64_t *at,
                uint64_t *len)
{
	if (!image_bytes || !window_bytes ||
	    k >= image_bytes / window_bytes + (image_bytes % window_bytes != 0))
		return false;
	*at = k * window_bytes;
	*len = image_bytes - *at < window_bytes ? image_bytes - *at : window_bytes;
	return true;
}

uint64_t kvc_sum(const void *p, size_t n)
{
	return kvcopy_sum(p, n);
}
