/*
 * ignis-kvstore-ctl - the operator's view of the kvstore daemon's tiers.
 *
 *   ignis-kvstore-ctl [--runtime-dir DIR] [--json | --prom] stats
 *   ignis-kvstore-ctl [--runtime-dir DIR] list
 *   ignis-kvstore-ctl [--runtime-dir DIR] put SEQ FILE [--window SIZE] [--class agent]
 *                     [--pace-us N]
 *   ignis-kvstore-ctl [--runtime-dir DIR] get SEQ FILE
 *   ignis-kvstore-ctl [--runtime-dir DIR] drop SEQ
 *   ignis-kvstore-ctl [--runtime-dir DIR] verify [SEQ]
 *   ignis-kvstore-ctl [--runtime-dir DIR] demote SEQ
 *   ignis-kvstore-ctl [--runtime-dir DIR] [--json] slots
 *   ignis-kvstore-ctl [--runtime-dir DIR] slot-put KEY FILE [--kind checkpoint|prefix]
 *                     [--class agent] [--tokens N] [--model-id ID]
 *   ignis-kvstore-ctl [--runtime-dir DIR] slot-get KEY FILE [--model-id ID]
 *   ignis-kvstore-ctl --help | VERB --help | --version
 *
 * Sizes take the suffixes every knob takes (common/bytesize.h: 256K, 12M).
 * Before it dials, the ctl checks that something can answer (tp_reach): the
 * runtime directory exists and is ours to enter, and a process holds
 * kvstore.lock (a supervisor restarting its daemon is waited for, up to
 * 20 s); else it says why at once. A daemon not configured yet (restarted:
 * the supervisor configures it after its hello) is waited for, up to 10 s,
 * as the worker's client does, and so is a dialer that stopped redialing.
 *
 * put stores FILE as sequence SEQ the way the worker moves a sequence out:
 * reserve, then window by window into the shared arena, each committed with
 * its sum (acknowledged on return); get fetches it back (from KV-RAM, or
 * from KV-disk a window at a time through a staging window, every window
 * checked) and writes the bytes to FILE. --pace-us waits N microseconds between windows (fault
 * tests kill the daemon in the middle of a put). slot-put captures a retained host slot for FILE
 * (an image of one sequence's fixed-size state) under KEY, copies it in with its checksum and
 * publishes it; slot-get claims KEY's slot, copies it out checked, then checks the slot still holds
 * the same generation. Exit 0 done, 1 refused or failed (the daemon's message on stderr), 2 bad
 * arguments.
 */
#include <errno.h>
#include <getopt.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "arena.h"
#include "common/bytesize.h"
#include "kvram/kvcopy.h"
#include "proto/kvmetrics.h"
#include "common/rtdir.h"
#include "proto/transport.h"
#include "version.h"

/* Each verb: its name, its arguments, what it does. */
static const struct ctl_verb {
	const char *name, *args, *doc;
} ctl_verbs[] = {
    {"stats", "[--json | --prom]", "the tiers' figures (--prom: the metrics page's names)"},
    {"list", "[--json]", "every sequence held, in either tier"},
    {"put", "SEQ FILE [--window SIZE] [--class agent|interactive] [--pace-us N]",
     "store FILE as sequence SEQ, window by window (SIZE 12M by default; K, M, G suffixes)"},
    {"get", "SEQ FILE", "write sequence SEQ to FILE, every window checked"},
    {"drop", "SEQ", "drop sequence SEQ from both tiers"},
    {"verify", "[SEQ]", "check every window (of SEQ, or of every sequence) against its checksum"},
    {"demote", "SEQ", "move sequence SEQ from KV-RAM to KV-disk"},
    {"slots", "[--json]", "the retained host slots"},
    {"slot-put",
     "KEY FILE [--kind checkpoint|prefix] [--class agent|interactive] [--tokens N] "
     "[--model-id ID]",
     "capture a retained host slot for FILE under KEY and publish it"},
    {"slot-get", "KEY FILE [--model-id ID]", "write KEY's retained slot to FILE, checked"},
};

static const struct ctl_verb *ctl_verb(const char *name)
{
	for (size_t i = 0; i < sizeof(ctl_verbs) / sizeof(ctl_verbs[0]); i++)
		if (!strcmp(name, ctl_verbs[i].name))
			return &ctl_verbs[i];
	return NULL;
}

/* The usage of one verb, or of all (v NULL). */
static int usage(FILE *f, const struct ctl_verb *v, int rc)
{
	if (v) {
		fprintf(f, "usage: ignis-kvstore-ctl [--runtime-dir DIR] %s %s\n  %s\n", v->name,
		        v->args, v->doc);
		return rc;
	}
	fprintf(f, "usage: ignis-kvstore-ctl [--runtime-dir DIR] VERB [ARGS]\n"
	           "       ignis-kvstore-ctl --help | VERB --help | --version\n"
	           "The operator's view of the kvstore daemon's tiers (KV-RAM and KV-disk) at\n"
	           "DIR (else $IGNIS_RUNTIME_DIR, $XDG_RUNTIME_DIR/ignis, /tmp/ignis-$UID).\n"
	           "verbs:\n");
	for (size_t i = 0; i < sizeof(ctl_verbs) / sizeof(ctl_verbs[0]); i++)
		fprintf(f, "  %s %s\n      %s\n", ctl_verbs[i].name, ctl_verbs[i].args,
		        ctl_verbs[i].doc);
	fprintf(f, "Exit 0 done, 1 refused or failed (the reason on stderr), 2 bad arguments.\n");
	return rc;
}

static int die(const char *what, const char *msg)
{
	fprintf(stderr, "ignis-kvstore-ctl: %s: %s\n", what, msg);
	return 1;
}

/* --window: a size as every knob takes it (common/bytesize.h), 1 B to
 * 4 GiB - 1. */
static bool parse_window(const char *s, uint64_t *out)
{
	struct ig_errbuf eb;
	struct bsize b;

	if (!s || bsize_parse(s, false, &b, &eb) || b.n == 0 || b.n > UINT32_MAX) {
		fprintf(stderr,
		        "ignis-kvstore-ctl: --window '%s'; accepted: a size of 1 byte to "
		        "4294967295, in bytes or with K, M, G (binary: 256K = 262144)\n",
		        s ? s : "");
		return false;
	}
	*out = b.n;
	return true;
}

/* How long a supervisor restarting its kvstore daemon is waited for: its
 * backoff (10 s at most, proc.h) and the new daemon's hello. */
#define CTL_RESTART_WAIT_MS 20000
/* How long a daemon not configured yet is waited for (the supervisor
 * configures it right after its hello). */
#define CTL_CONFIG_WAIT_MS 10000

/*
 * Can a kvstore daemon at `rtdir` answer? Said at once when not, and why
 * (tp_reach: no directory, one we may not enter, nobody holding
 * kvstore.lock, a socket we may not open; locks and modes only, the socket
 * is never probed). The one wait: nobody holds kvstore.lock but a
 * supervisor runs there, restarting its daemon.
 */
static int ctl_reach(const char *rtdir, struct ig_errbuf *eb)
{
	char sock[TP_PATH_MAX], lock[TP_PATH_MAX];
	pid_t holder;

	if (snprintf(sock, sizeof(sock), "%s/kvstore.sock", rtdir) >= (int)sizeof(sock) ||
	    snprintf(lock, sizeof(lock), "%s/kvstore.lock", rtdir) >= (int)sizeof(lock))
		return ig_errf(eb, IG_E_CONFIG, "socket path under '%s' is too long", rtdir);
	for (int waited = 0;; waited += 50) {
		int rc = tp_reach(sock, lock, "kvstore daemon", eb);

		/* reachable, or a refusal that waiting will not change */
		if (rc != IG_E_NOTFOUND || !tp_lock_held(rtdir, "supervisor", &holder))
			return rc;
		if (waited >= CTL_RESTART_WAIT_MS)
			return ig_errf(eb, IG_E_TIMEOUT,
			               "the supervisor at %s (pid %ld) has had no kvstore daemon "
			               "serving for %d s: see ignis-supervisor status",
			               rtdir, (long)holder, CTL_RESTART_WAIT_MS / 1000);
		usleep(50000);
	}
}

static bool parse_u64(const char *s, uint64_t *out)
{
	char *end;

	if (!s || !*s || *s == '-')
		return false;
	errno = 0;
	*out = strtoull(s, &end, 0);
	return !errno && !*end;
}

/*
 * The connection to the daemon: a REQ socket and its dialer, watched. nng
 * 1.5.2's dialer sometimes stops redialing for good after its daemon was
 * killed -9 and restarted at once (the worker's client has the same guard:
 * gpu-worker/engine/kvclient.c); so before each request the ctl waits for a
 * connection and replaces a dialer that brought none for CTL_REDIAL_MS.
 */
#define CTL_REDIAL_MS 2000

struct ctl {
	nng_socket sock;
	nng_dialer dialer;
	char url[TP_PATH_MAX + 8];
	atomic_int pipes;                 /* connections up now, from nng's pipe events */
	uint64_t sums[ARENA_MAX_WINDOWS]; /* get: a record's window checksums */
};

static void ctl_pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	struct ctl *c = arg;

	(void)p;
	atomic_fetch_add(&c->pipes, ev == NNG_PIPE_EV_ADD_POST ? 1 : -1);
}

static int ctl_open(struct ctl *c, const char *rtdir, struct ig_errbuf *eb)
{
	int rv;

	atomic_init(&c->pipes, 0);
	if (snprintf(c->url, sizeof(c->url), "ipc://%s/kvstore.sock", rtdir) >= (int)sizeof(c->url))
		return ig_errf(eb, IG_E_CONFIG, "socket path under '%s' is too long", rtdir);
	rv = nng_req0_open(&c->sock);
	if (rv)
		return tp_nng_err(eb, rv, "cannot open a request socket");
	rv = nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, MSG_MAX_BYTES);
	if (!rv)
		rv = nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, 10000);
	if (!rv)
		rv = nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO, 10000);
	if (!rv)
		rv = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, 20);
	if (!rv)
		rv = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT, 500);
	/* nng's REQ sends a request again on the new connection when its
	 * daemon died before answering; on a live connection that stays
	 * silent, after this long (every request here may be repeated: a
	 * commit of a committed window and a reserve of a fresh reservation
	 * are answered as the first time). */
	if (!rv)
		rv = nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, 5000);
	if (!rv)
		rv = nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_POST, ctl_pipe_cb, c);
	if (!rv)
		rv = nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, ctl_pipe_cb, c);
	if (!rv)
		rv = nng_dial(c->sock, c->url, &c->dialer, NNG_FLAG_NONBLOCK);
	if (rv) {
		nng_close(c->sock);
		return tp_nng_err(eb, rv, c->url);
	}
	return IG_E_OK;
}

/* Wait for a connection (up to CTL_RESTART_WAIT_MS), replacing a dialer
 * that brought none for CTL_REDIAL_MS. */
static int ctl_connected(struct ctl *c, struct ig_errbuf *eb)
{
	for (int waited = 0, quiet = 0; atomic_load(&c->pipes) <= 0; waited += 10, quiet += 10) {
		if (waited >= CTL_RESTART_WAIT_MS)
			return ig_errf(eb, IG_E_TIMEOUT,
			               "no connection to the kvstore daemon at %s in %d s", c->url,
			               CTL_RESTART_WAIT_MS / 1000);
		if (quiet >= CTL_REDIAL_MS) {
			nng_dialer d;

			(void)nng_dialer_close(c->dialer);
			if (nng_dial(c->sock, c->url, &d, NNG_FLAG_NONBLOCK) == 0)
				c->dialer = d;
			quiet = 0;
		}
		usleep(10000);
	}
	return IG_E_OK;
}

/* One request, one reply of type `want` (an error reply becomes its code).
 * A daemon that was just restarted answers "not ready" until the supervisor
 * has configured it again: asked again for up to 10 s. A request that timed
 * out with no connection left (its daemon died and none came back on that
 * dialer) is sent again on a new one. */
static int call(struct ctl *s, const struct msg *q, uint32_t want, struct tp_rx *rx,
                struct ig_errbuf *eb)
{
	int rc, lost = 0;

	for (int i = 0;;) {
		rc = ctl_connected(s, eb);
		if (!rc)
			rc = tp_call(s->sock, q, rx, eb);
		if (rc == IG_E_TIMEOUT && atomic_load(&s->pipes) <= 0 && lost++ < 2)
			continue;
		if (rc != IG_E_NOT_READY || ++i > 200)
			break;
		usleep(50000);
	}
	if (!rc && rx->m.type != want) {
		rc = ig_errf(eb, IG_E_PROTO_UNEXPECTED, "the daemon answered '%s'",
		             msg_type_name(rx->m.type));
		tp_rx_release(rx);
	}
	return rc;
}

static int simple(struct ctl *s, uint32_t type, uint64_t seq, struct ig_errbuf *eb)
{
	struct msg q = {.type = type};
	struct tp_rx rx;
	int rc;

	switch (type) {
	case MSG_KV_DROP:
		q.u.kv_drop.seq = seq;
		break;
	case MSG_KV_VERIFY:
		q.u.kv_verify.seq = seq;
		break;
	case MSG_KV_DEMOTE:
		q.u.kv_demote.seq = seq;
		break;
	}
	rc = call(s, &q, MSG_ACK, &rx, eb);
	if (!rc)
		tp_rx_release(&rx);
	return rc;
}

static int cmd_stats(struct ctl *s, bool json, bool prom, struct ig_errbuf *eb)
{
	struct msg q = {.type = MSG_KV_STATS};
	const struct msg_kv_stats_reply *r;
	struct tp_rx rx;
	int rc = call(s, &q, MSG_KV_STATS_REPLY, &rx, eb);

	if (rc)
		return rc;
	r = &rx.m.u.kv_stats_reply;
	if (prom) {
		/* the reference engine's names (proto/kvmetrics.h) */
		kvm_write_prom(stdout, r);
		tp_rx_release(&rx);
		return IG_E_OK;
	}
#define KV_STATS_FIELDS(X)                                                                         \
	X(ram_bytes)                                                                               \
	X(ram_used_bytes)                                                                          \
	X(ram_largest_free)                                                                        \
	X(ram_sequences)                                                                           \
	X(disk_ceiling_bytes)                                                                      \
	X(disk_used_bytes)                                                                         \
	X(disk_sequences)                                                                          \
	X(reserves)                                                                                \
	X(commits)                                                                                 \
	X(refusals_full)                                                                           \
	X(demotions)                                                                               \
	X(disk_reads)                                                                              \
	X(ram_evictions)                                                                           \
	X(lost)                                                                                    \
	X(recovered_sequences)                                                                     \
	X(slots)                                                                                   \
	X(slot_bytes)                                                                              \
	X(slots_held)                                                                              \
	X(slots_writing)                                                                           \
	X(slot_captures)                                                                           \
	X(slot_publishes)                                                                          \
	X(slot_claims)                                                                             \
	X(slot_claim_misses)                                                                       \
	X(slot_given_up)                                                                           \
	X(slot_skips_busy)                                                                         \
	X(slot_skips_duplicate)                                                                    \
	X(slot_skips_size)                                                                         \
	X(slot_skips_none)
	if (json) {
		printf("{\"arena\":\"%.*s\",\"disk_on\":%s", (int)r->arena_name.n, r->arena_name.p,
		       r->disk_on ? "true" : "false");
#define KV_JSON(f) printf(",\"" #f "\":%" PRIu64, (uint64_t)r->f);
		KV_STATS_FIELDS(KV_JSON)
		printf("}\n");
	} else {
		printf("%-22s %.*s\n%-22s %s\n", "arena", (int)r->arena_name.n, r->arena_name.p,
		       "disk_on", r->disk_on ? "yes" : "no");
#define KV_TEXT(f) printf("%-22s %" PRIu64 "\n", #f, (uint64_t)r->f);
		KV_STATS_FIELDS(KV_TEXT)
	}
	tp_rx_release(&rx);
	return IG_E_OK;
}

static int cmd_list(struct ctl *s, bool json, struct ig_errbuf *eb)
{
	uint64_t after = 0;
	bool more = true;

	if (!json)
		printf("%-20s %-5s %-12s %14s %8s %9s %s\n", "seq", "tier", "class", "bytes",
		       "windows", "committed", "complete");
	while (more) {
		struct msg q = {.type = MSG_KV_LIST, .u.kv_list.after = after};
		struct tp_rx rx;
		int rc = call(s, &q, MSG_KV_LIST_REPLY, &rx, eb);

		if (rc)
			return rc;
		for (uint32_t i = 0; i < rx.m.u.kv_list_reply.seqs.n; i++) {
			const struct msg_kv_entry *e = &rx.m.u.kv_list_reply.seqs.v[i];

			if (json)
				printf("{\"seq\":%" PRIu64 ",\"tier\":\"%.*s\",\"class\":\"%.*s\","
				       "\"image_bytes\":%" PRIu64 ",\"windows\":%" PRIu64
				       ",\"committed\":%" PRIu64 ",\"complete\":%s}\n",
				       e->seq, (int)e->tier.n, e->tier.p, (int)e->class.n,
				       e->class.p, e->image_bytes, e->windows, e->committed,
				       e->complete ? "true" : "false");
			else
				printf("%-20" PRIu64 " %-5.*s %-12.*s %14" PRIu64 " %8" PRIu64
				       " %9" PRIu64 " %s\n",
				       e->seq, (int)e->tier.n, e->tier.p, (int)e->class.n,
				       e->class.p, e->image_bytes, e->windows, e->committed,
				       e->complete ? "yes" : "no");
			after = e->seq;
		}
		more = rx.m.u.kv_list_reply.more;
		tp_rx_release(&rx);
	}
	return IG_E_OK;
}

/* A call answered "tier full" is tried again while the daemon makes room
 * (it gives sequences to KV-disk one per loop turn), for up to 10 s; a
 * request larger than the whole arena is refused by the daemon at once with
 * the same code, and comes back here as it is after the first try when
 * `once` says so. */
static int call_patient(struct ctl *s, const struct msg *q, uint32_t want, struct tp_rx *rx,
                        bool once, struct ig_errbuf *eb)
{
	int rc;

	for (int i = 0; i < 200; i++) {
		rc = call(s, q, want, rx, eb);
		if (rc != IG_E_NOSPACE || once)
			return rc;
		usleep(50000);
	}
	return rc;
}

/* The arena the daemon serves, mapped. A daemon that answers but names no
 * arena is not configured yet (just restarted): asked again, as the
 * worker's client does, for up to CTL_CONFIG_WAIT_MS. */
static int map_arena(struct ctl *s, struct arena_map *m, struct ig_errbuf *eb)
{
	struct msg q = {.type = MSG_KV_STATS};
	char name[97] = "";

	for (int waited = 0; !name[0]; waited += 50) {
		struct tp_rx rx;
		int rc = call(s, &q, MSG_KV_STATS_REPLY, &rx, eb);

		if (rc)
			return rc;
		msg_str_copy(name, sizeof(name), rx.m.u.kv_stats_reply.arena_name);
		tp_rx_release(&rx);
		if (name[0])
			break;
		if (waited >= CTL_CONFIG_WAIT_MS)
			return ig_errf(eb, IG_E_NOT_READY,
			               "the kvstore daemon is still not configured after %d s (the "
			               "supervisor sends kv_config after its hello)",
			               CTL_CONFIG_WAIT_MS / 1000);
		usleep(50000);
	}
	return arena_map_open(m, name, eb);
}

static int cmd_put(struct ctl *s, uint64_t seq, const char *path, uint64_t window, const char *cls,
                   uint64_t pace_us, struct ig_errbuf *eb)
{
	struct msg q = {.type = MSG_KV_RESERVE};
	struct arena_map m;
	struct tp_rx rx;
	struct stat sb;
	uint64_t offset, windows;
	uint64_t stride; /* bytes between two windows in the arena (0: staged to disk) */
	FILE *f;
	int rc;

	f = fopen(path, "rb");
	if (!f || fstat(fileno(f), &sb))
		return ig_errf(eb, IG_E_IO, "%s: %s", path, strerror(errno));
	if (sb.st_size == 0) {
		fclose(f);
		return ig_errf(eb, IG_E_INVAL, "%s is empty; a sequence image has bytes", path);
	}
	rc = map_arena(s, &m, eb);
	if (rc) {
		fclose(f);
		return rc;
	}
	q.u.kv_reserve = (struct msg_kv_reserve){.seq = seq,
	                                         .model_id = 0,
	                                         .kv_format = 0,
	                                         .class = msg_str_of(cls),
	                                         .image_bytes = (uint64_t)sb.st_size,
	                                         .window_bytes = window};
	rc = call_patient(s, &q, MSG_KV_RESERVED, &rx, (uint64_t)sb.st_size > m.bytes, eb);
	if (rc)
		goto out;
	/* where the windows go: the daemon says (straight to KV-disk, every
	 * window through the one staging window: stride 0) */
	offset = rx.m.u.kv_reserved.offset;
	stride = rx.m.u.kv_reserved.stride;
	windows = rx.m.u.kv_reserved.windows;
	if (rx.m.u.kv_reserved.given_up)
		fprintf(stderr, "ignis-kvstore-ctl: KV-RAM gave up seq %" PRIu64 " for this one\n",
		        rx.m.u.kv_reserved.given_up);
	tp_rx_release(&rx);
	for (uint64_t k = 0; k < windows; k++) {
		uint64_t at = k * window, len = (uint64_t)sb.st_size - at < window
		                                    ? (uint64_t)sb.st_size - at
		                                    : window;
		unsigned char *dst = (unsigned char *)m.base + offset + k * stride;

		if (offset + k * stride + len > m.bytes || fread(dst, 1, len, f) != len) {
			rc = ig_errf(eb, IG_E_IO, "reading window %" PRIu64 " of %s", k, path);
			goto out;
		}
		memset(&q, 0, sizeof(q));
		q.type = MSG_KV_COMMIT;
		q.u.kv_commit = (struct msg_kv_commit){seq, k, len, kvcopy_sum(dst, len)};
		rc = call(s, &q, MSG_ACK, &rx, eb);
		if (rc)
			goto out;
		tp_rx_release(&rx);
		if (pace_us)
			usleep((useconds_t)pace_us);
	}
	printf("seq %" PRIu64 ": %lld bytes in %" PRIu64 " windows of %" PRIu64
	       ", committed to KV-%s\n",
	       seq, (long long)sb.st_size, windows, window, stride ? "RAM" : "disk");
out:
	arena_map_close(&m);
	fclose(f);
	return rc;
}

/* A sequence on KV-disk, a window at a time through its staging window,
 * each checked while copied out; written to `path` only whole (a temporary
 * file renamed at the end). */
static int get_staged(struct ctl *s, const struct arena_map *m, uint64_t seq, uint64_t windows,
                      const char *path, struct ig_errbuf *eb)
{
	char tmp[4200];
	FILE *f;
	int rc = IG_E_OK;

	snprintf(tmp, sizeof(tmp), "%s.part", path);
	f = fopen(tmp, "wb");
	if (!f)
		return ig_errf(eb, IG_E_IO, "%s: %s", tmp, strerror(errno));
	for (uint64_t k = 0; k < windows && !rc; k++) {
		struct msg q = {.type = MSG_KV_STAGE, .u.kv_stage = {seq, k}};
		const struct msg_kv_staged *g;
		struct tp_rx rx;
		uint64_t got;

		rc = call_patient(s, &q, MSG_KV_STAGED, &rx, false, eb);
		if (rc)
			break;
		g = &rx.m.u.kv_staged;
		if (g->offset + g->len > m->bytes)
			rc = ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
			             "the daemon's staging window is outside the arena");
		else if ((got = kvcopy_sum((const char *)m->base + g->offset, g->len)) != g->sum)
			rc = ig_errf(eb, IG_E_KV_LOST,
			             "seq %" PRIu64 " window %" PRIu64 ": the staged bytes hash to "
			             "%016" PRIx64 ", not the %016" PRIx64 " read; nothing written",
			             seq, k, got, g->sum);
		else if (fwrite((const char *)m->base + g->offset, 1, g->len, f) != g->len)
			rc = ig_errf(eb, IG_E_IO, "%s: %s", tmp, strerror(errno));
		tp_rx_release(&rx);
	}
	if (fclose(f) && !rc)
		rc = ig_errf(eb, IG_E_IO, "%s: %s", tmp, strerror(errno));
	if (!rc && rename(tmp, path))
		rc = ig_errf(eb, IG_E_IO, "%s: %s", path, strerror(errno));
	if (rc)
		unlink(tmp);
	return rc;
}

static int cmd_get(struct ctl *s, uint64_t seq, const char *path, struct ig_errbuf *eb)
{
	uint64_t *sums = s->sums;
	uint32_t n = 0;
	struct msg q = {.type = MSG_KV_FETCH, .u.kv_fetch.seq = seq};
	struct arena_map m;
	struct tp_rx rx;
	FILE *f;
	int rc = map_arena(s, &m, eb);

	if (rc)
		return rc;
	rc = call_patient(s, &q, MSG_KV_SEQ, &rx, false, eb);
	if (rc)
		goto out_map;
	if (!rx.m.u.kv_seq.complete) {
		rc = ig_errf(eb, IG_E_INVAL,
		             "seq %" PRIu64 " is incomplete: %" PRIu64 " of %" PRIu64
		             " windows committed",
		             seq, rx.m.u.kv_seq.committed, rx.m.u.kv_seq.windows);
		goto out_rx;
	}
	if (msg_str_eq(rx.m.u.kv_seq.tier, "disk")) {
		uint64_t bytes = rx.m.u.kv_seq.image_bytes;

		rc = get_staged(s, &m, seq, rx.m.u.kv_seq.windows, path, eb);
		if (!rc)
			printf("seq %" PRIu64 ": %" PRIu64
			       " bytes from KV-disk, every window checked\n",
			       seq, bytes);
		goto out_rx;
	}
	if (rx.m.u.kv_seq.offset + rx.m.u.kv_seq.image_bytes > m.bytes) {
		rc =
		    ig_errf(eb, IG_E_PROTO_FIELD_RANGE, "the daemon's extent is outside the arena");
		goto out_rx;
	}
	/* every window checked against its recorded checksum (the fetch reply
	 * carries them) before a byte of it is written out (the daemon does not
	 * re-read committed bytes) */
	n = rx.m.u.kv_seq.sums.n;
	memcpy(sums, rx.m.u.kv_seq.sums.v, (size_t)n * sizeof(uint64_t));
	for (uint32_t k = 0; k < n; k++) {
		uint64_t at = (uint64_t)k * rx.m.u.kv_seq.window_bytes;
		uint64_t len = rx.m.u.kv_seq.image_bytes - at < rx.m.u.kv_seq.window_bytes
		                   ? rx.m.u.kv_seq.image_bytes - at
		                   : rx.m.u.kv_seq.window_bytes;
		uint64_t got = kvcopy_sum((char *)m.base + rx.m.u.kv_seq.offset + at, len);

		if (got != sums[k]) {
			rc = ig_errf(eb, IG_E_KV_LOST,
			             "seq %" PRIu64 " window %u: the bytes in KV-RAM hash to "
			             "%016" PRIx64 ", not the %016" PRIx64
			             " committed; nothing written",
			             seq, k, got, sums[k]);
			goto out_rx;
		}
	}
	f = fopen(path, "wb");
	if (!f ||
	    fwrite((char *)m.base + rx.m.u.kv_seq.offset, 1, rx.m.u.kv_seq.image_bytes, f) !=
	        rx.m.u.kv_seq.image_bytes ||
	    fclose(f)) {
		rc = ig_errf(eb, IG_E_IO, "%s: %s", path, strerror(errno));
		goto out_rx;
	}
	printf("seq %" PRIu64 ": %" PRIu64 " bytes from KV-%s, every window checked\n", seq,
	       rx.m.u.kv_seq.image_bytes, msg_str_eq(rx.m.u.kv_seq.tier, "ram") ? "RAM" : "disk");
out_rx:
	tp_rx_release(&rx);
out_map:
	arena_map_close(&m);
	return rc;
}

/* ---- retained host slots ---- */

static int cmd_slots(struct ctl *s, bool json, struct ig_errbuf *eb)
{
	uint64_t first = 0;
	bool more = true;

	if (!json)
		printf("%-5s %-8s %-11s %-12s %-17s %8s %12s\n", "slot", "state", "kind", "class",
		       "key", "tokens", "bytes");
	while (more) {
		struct msg q = {.type = MSG_KV_SLOT_LIST, .u.kv_slot_list.first = first};
		struct tp_rx rx;
		int rc = call(s, &q, MSG_KV_SLOT_LIST_REPLY, &rx, eb);

		if (rc)
			return rc;
		for (uint32_t i = 0; i < rx.m.u.kv_slot_list_reply.slots.n; i++) {
			const struct msg_kv_slot_entry *e = &rx.m.u.kv_slot_list_reply.slots.v[i];

			if (json)
				printf("{\"slot\":%" PRIu64 ",\"state\":\"%.*s\",\"kind\":\"%.*s\","
				       "\"class\":\"%.*s\",\"key\":%" PRIu64
				       ",\"model_id\":%" PRIu64 ",\"tokens\":%" PRIu64
				       ",\"image_bytes\":%" PRIu64 ",\"sum\":%" PRIu64
				       ",\"last_use\":%" PRIu64 "}\n",
				       e->slot, (int)e->state.n, e->state.p, (int)e->kind.n,
				       e->kind.p, (int)e->class.n, e->class.p, e->key, e->model_id,
				       e->tokens, e->image_bytes, e->sum, e->last_use);
			else
				printf("%-5" PRIu64 " %-8.*s %-11.*s %-12.*s %016" PRIx64
				       "  %8" PRIu64 " %12" PRIu64 "\n",
				       e->slot, (int)e->state.n, e->state.p, (int)e->kind.n,
				       e->kind.p, (int)e->class.n, e->class.p, e->key, e->tokens,
				       e->image_bytes);
			first = e->slot + 1;
		}
		more = rx.m.u.kv_slot_list_reply.more;
		tp_rx_release(&rx);
	}
	return IG_E_OK;
}

static int cmd_slot_put(struct ctl *s, uint64_t key, const char *path, const char *kind,
                        const char *cls, uint64_t tokens, uint64_t model_id, struct ig_errbuf *eb)
{
	struct msg q = {.type = MSG_KV_SLOT_CAPTURE};
	struct arena_map m;
	struct tp_rx rx;
	struct stat sb;
	uint64_t slot, gen, off, sum;
	unsigned char *buf;
	FILE *f = fopen(path, "rb");
	int rc;

	if (!f || fstat(fileno(f), &sb) != 0 || sb.st_size <= 0) {
		rc = ig_errf(eb, IG_E_IO, "%s: %s", path, f ? "empty" : strerror(errno));
		if (f)
			fclose(f);
		return rc;
	}
	buf = malloc((size_t)sb.st_size);
	if (!buf || fread(buf, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size) {
		free(buf);
		fclose(f);
		return ig_errf(eb, IG_E_IO, "reading %s", path);
	}
	fclose(f);
	rc = map_arena(s, &m, eb);
	if (rc)
		goto out_buf;
	q.u.kv_slot_capture = (struct msg_kv_slot_capture){.key = key,
	                                                   .model_id = model_id,
	                                                   .kind = msg_str_of(kind),
	                                                   .class = msg_str_of(cls),
	                                                   .tokens = tokens,
	                                                   .image_bytes = (uint64_t)sb.st_size};
	rc = call(s, &q, MSG_KV_SLOT, &rx, eb);
	if (rc)
		goto out_map;
	slot = rx.m.u.kv_slot.slot;
	gen = rx.m.u.kv_slot.gen;
	off = rx.m.u.kv_slot.offset;
	if (rx.m.u.kv_slot.given_up_key)
		fprintf(stderr,
		        "ignis-kvstore-ctl: the %.*s slot of key %" PRIu64
		        " was given up for this one\n",
		        (int)rx.m.u.kv_slot.given_up_kind.n, rx.m.u.kv_slot.given_up_kind.p,
		        rx.m.u.kv_slot.given_up_key);
	tp_rx_release(&rx);
	if (off + (uint64_t)sb.st_size > m.bytes) {
		rc = ig_errf(eb, IG_E_PROTO_FIELD_RANGE, "the daemon's slot is outside the arena");
		goto out_map;
	}
	sum = kvcopy_hash((unsigned char *)m.base + off, buf, (uint64_t)sb.st_size);
	memset(&q, 0, sizeof(q));
	q.type = MSG_KV_SLOT_PUBLISH;
	q.u.kv_slot_publish = (struct msg_kv_slot_publish){.slot = slot, .gen = gen, .sum = sum};
	rc = call(s, &q, MSG_ACK, &rx, eb);
	if (rc)
		goto out_map;
	tp_rx_release(&rx);
	printf("key %" PRIu64 ": %lld bytes in retained slot %" PRIu64 ", published\n", key,
	       (long long)sb.st_size, slot);
out_map:
	arena_map_close(&m);
out_buf:
	free(buf);
	return rc;
}

static int cmd_slot_get(struct ctl *s, uint64_t key, const char *path, uint64_t model_id,
                        struct ig_errbuf *eb)
{
	struct msg q = {.type = MSG_KV_SLOT_CLAIM};
	struct arena_slot_info now;
	struct arena_map m;
	struct tp_rx rx;
	uint64_t slot, gen, off, len, sum, got;
	unsigned char *buf = NULL;
	FILE *f;
	int rc = map_arena(s, &m, eb);

	if (rc)
		return rc;
	q.u.kv_slot_claim =
	    (struct msg_kv_slot_claim){.key = key, .model_id = model_id, .kind = msg_str_of("")};
	rc = call(s, &q, MSG_KV_SLOT, &rx, eb);
	if (rc)
		goto out;
	slot = rx.m.u.kv_slot.slot;
	gen = rx.m.u.kv_slot.gen;
	off = rx.m.u.kv_slot.offset;
	len = rx.m.u.kv_slot.image_bytes;
	sum = rx.m.u.kv_slot.sum;
	tp_rx_release(&rx);
	if (off + len > m.bytes) {
		rc = ig_errf(eb, IG_E_PROTO_FIELD_RANGE, "the daemon's slot is outside the arena");
		goto out;
	}
	buf = malloc(len);
	if (!buf) {
		rc = ig_errf(eb, IG_E_NOMEM, "no memory for %" PRIu64 " bytes", len);
		goto out;
	}
	/* optimistic: copy checked, then make sure nobody took the slot meanwhile */
	if (!kvcopy_check(buf, (unsigned char *)m.base + off, len, sum, &got)) {
		rc = ig_errf(eb, IG_E_KV_LOST,
		             "key %" PRIu64 ": retained slot %" PRIu64 " hashes to %016" PRIx64
		             ", not the %016" PRIx64 " published; nothing written",
		             key, slot, got, sum);
		goto out;
	}
	rc = arena_map_slot(&m, (uint32_t)slot, &now, eb);
	if (!rc && (now.state != ARENA_SLOT_HELD || now.gen != gen))
		rc = ig_errf(eb, IG_E_NOTFOUND,
		             "key %" PRIu64 ": retained slot %" PRIu64
		             " was given up while it was read; nothing written",
		             key, slot);
	if (rc)
		goto out;
	f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f)) {
		rc = ig_errf(eb, IG_E_IO, "%s: %s", path, strerror(errno));
		goto out;
	}
	printf("key %" PRIu64 ": %" PRIu64 " bytes from retained slot %" PRIu64 ", checked\n", key,
	       len, slot);
out:
	free(buf);
	arena_map_close(&m);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"runtime-dir", required_argument, NULL, 'r'},
	    {"json", no_argument, NULL, 'j'},
	    {"prom", no_argument, NULL, 'p'},
	    {"window", required_argument, NULL, 'w'},
	    {"class", required_argument, NULL, 'c'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {NULL, 0, NULL, 0},
	};
	const char *rtflag = NULL, *cls = "agent", *cmd, *kind = "checkpoint";
	const struct ctl_verb *verb;
	uint64_t tokens = 0, model_id = 0;
	char rtdir[RTDIR_PATH_MAX + 1];
	uint64_t window = 12ull << 20, seq = 0, pace_us = 0;
	bool json = false, prom = false;
	static struct ctl conn;
	struct ig_errbuf eb;
	struct ctl *s;
	int c, rc;

	while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			rtflag = optarg;
			break;
		case 'j':
			json = true;
			break;
		case 'p':
			prom = true;
			break;
		case 'w':
			if (!parse_window(optarg, &window))
				return 2;
			break;
		case 'c':
			if (strcmp(optarg, "agent") && strcmp(optarg, "interactive")) {
				fprintf(stderr,
				        "ignis-kvstore-ctl: --class '%s'; accepted: "
				        "interactive, agent\n",
				        optarg);
				return 2;
			}
			cls = optarg;
			break;
		case 'h':
			return usage(stdout, NULL, 0);
		case 'V':
			printf("ignis-kvstore-ctl %s\n", IGNIS_VERSION);
			return 0;
		default:
			return usage(stderr, NULL, 2);
		}
	}
	if (optind >= argc)
		return usage(stderr, NULL, 2);
	cmd = argv[optind++];
	verb = ctl_verb(cmd);
	if (!verb) {
		fprintf(stderr, "ignis-kvstore-ctl: unknown command '%s'\n", cmd);
		return usage(stderr, NULL, 2);
	}
	/* options may follow the command too: take them out, keep the rest */
	{
		int n = 0;

		for (int i = optind; i < argc; i++) {
			const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

			if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
				return usage(stdout, verb, 0);
			} else if (!strcmp(a, "--json")) {
				json = true;
			} else if (!strcmp(a, "--prom")) {
				prom = true;
			} else if (!strcmp(a, "--window")) {
				if (!parse_window(v, &window))
					return 2;
				i++;
			} else if (!strcmp(a, "--pace-us")) {
				if (!v || !parse_u64(v, &pace_us) || pace_us > 10000000) {
					fprintf(stderr,
					        "ignis-kvstore-ctl: --pace-us '%s'; accepted: "
					        "0..10000000\n",
					        v ? v : "");
					return 2;
				}
				i++;
			} else if (!strcmp(a, "--class")) {
				if (!v || (strcmp(v, "agent") && strcmp(v, "interactive"))) {
					fprintf(stderr,
					        "ignis-kvstore-ctl: --class '%s'; accepted: "
					        "interactive, agent\n",
					        v ? v : "");
					return 2;
				}
				cls = v;
				i++;
			} else if (!strcmp(a, "--kind")) {
				if (!v || (strcmp(v, "checkpoint") && strcmp(v, "prefix"))) {
					fprintf(
					    stderr,
					    "ignis-kvstore-ctl: --kind '%s'; accepted: checkpoint, "
					    "prefix\n",
					    v ? v : "");
					return 2;
				}
				kind = v;
				i++;
			} else if (!strcmp(a, "--tokens") || !strcmp(a, "--model-id")) {
				uint64_t *to = !strcmp(a, "--tokens") ? &tokens : &model_id;

				if (!v || !parse_u64(v, to) ||
				    (to == &tokens && *to > UINT32_MAX)) {
					fprintf(stderr,
					        "ignis-kvstore-ctl: %s '%s'; accepted: a whole "
					        "number%s\n",
					        a, v ? v : "",
					        to == &tokens ? " in 0..4294967295" : "");
					return 2;
				}
				i++;
			} else if (a[0] == '-' && a[1] == '-') {
				fprintf(stderr, "ignis-kvstore-ctl: unknown option '%s'\n", a);
				return usage(stderr, verb, 2);
			} else {
				argv[optind + n++] = argv[i];
			}
		}
		argc = optind + n;
	}
	if ((!strcmp(cmd, "put") || !strcmp(cmd, "get") || !strcmp(cmd, "slot-put") ||
	     !strcmp(cmd, "slot-get")) &&
	    argc - optind != 2)
		return usage(stderr, verb, 2);
	if ((!strcmp(cmd, "drop") || !strcmp(cmd, "demote")) && argc - optind != 1)
		return usage(stderr, verb, 2);
	if (strcmp(cmd, "stats") && strcmp(cmd, "list") && strcmp(cmd, "verify") &&
	    strcmp(cmd, "slots") && (optind >= argc || !parse_u64(argv[optind], &seq))) {
		fprintf(stderr, "ignis-kvstore-ctl: %s: SEQ '%s'; accepted: a whole number >= 1\n",
		        cmd, optind < argc ? argv[optind] : "");
		return 2;
	}
	if (!strcmp(cmd, "verify") && optind < argc && !parse_u64(argv[optind], &seq)) {
		fprintf(stderr, "ignis-kvstore-ctl: verify: SEQ '%s'; accepted: a whole number\n",
		        argv[optind]);
		return 2;
	}
	if ((!strcmp(cmd, "put") || !strcmp(cmd, "get") || !strcmp(cmd, "drop") ||
	     !strcmp(cmd, "demote") || !strcmp(cmd, "slot-put") || !strcmp(cmd, "slot-get")) &&
	    seq == 0) {
		fprintf(stderr, "ignis-kvstore-ctl: %s: SEQ 0; accepted: a whole number >= 1\n",
		        cmd);
		return 2;
	}
	if (rtdir_resolve(rtflag, NULL, NULL, rtdir, sizeof(rtdir), &eb) || ctl_reach(rtdir, &eb) ||
	    ctl_open(&conn, rtdir, &eb))
		return die(cmd, eb.msg);
	s = &conn;
	if (!strcmp(cmd, "stats"))
		rc = cmd_stats(s, json, prom, &eb);
	else if (!strcmp(cmd, "list"))
		rc = cmd_list(s, json, &eb);
	else if (!strcmp(cmd, "put"))
		rc = cmd_put(s, seq, argv[optind + 1], window, cls, pace_us, &eb);
	else if (!strcmp(cmd, "get"))
		rc = cmd_get(s, seq, argv[optind + 1], &eb);
	else if (!strcmp(cmd, "drop"))
		rc = simple(s, MSG_KV_DROP, seq, &eb);
	else if (!strcmp(cmd, "demote"))
		rc = simple(s, MSG_KV_DEMOTE, seq, &eb);
	else if (!strcmp(cmd, "slots"))
		rc = cmd_slots(s, json, &eb);
	else if (!strcmp(cmd, "slot-put"))
		rc = cmd_slot_put(s, seq, argv[optind + 1], kind, cls, tokens, model_id, &eb);
	else if (!strcmp(cmd, "slot-get"))
		rc = cmd_slot_get(s, seq, argv[optind + 1], model_id, &eb);
	else { /* verify: every other verb was matched above */
		rc = simple(s, MSG_KV_VERIFY, seq, &eb);
		if (!rc)
			printf("%s: every window matches its checksum\n",
			       seq ? argv[optind] : "every sequence");
	}
	nng_close(conn.sock);
	if (rc)
		return die(cmd, eb.msg);
	return 0;
}
