/*
 * test_schedscript.c - the scheduler's rules (docs/design.md, section 4) as
 * scripts of operations over the real engine (engine.h) on the real model
 * (tiny-dense, cpu backend: engrig.h) with a real kvstore daemon
 * (ignis-kvstored, started here per script, configured as the supervisor
 * would). One test per script file under tests/sched/ (the directory named
 * by IGNIS_SCHED_SCRIPTS or the first argument; IGNIS_SCHED_ONLY=NAME runs
 * one; IGNIS_SCHED_TRACE=1 prints what happened in each, as a failure does).
 * Each script quotes the reference's words for the rule it pins down in its
 * first comment; docs/design.md, section 4, states the rules as ours.
 *
 * THE LANGUAGE: one operation a line; `#` starts a comment; words are
 * separated by blanks. Rounds are eng_round calls, numbered from 1.
 *
 *   pool PAGES lanes N chunk C window BYTES [window-in BYTES] [disk on|off]
 *        [ram BYTES] [default-max N]
 *       First, once. The KV pool's pages, the decode lanes, the prefill chunk,
 *       the move windows out and in (in: twice out unless given), KV-disk
 *       (64 MiB when on) and KV-RAM (4 MiB unless given: an image of one
 *       sequence is about 4 blocks of 64 KiB here), the cap of a request
 *       that gives no max. The context is 256 tokens (4 pages) throughout.
 *   submit NAME agent|interactive prompt=N [max=M] [seed=S]
 *       Queue a request (submitted before the next round): N prompt tokens
 *       drawn from the test's seed, greedy without `seed`, sampled with it
 *       (temperature 0.9, top-k 40, top-p 0.95). Every script has at least
 *       one greedy and one seeded request.
 *   rounds N
 *       Run N rounds.
 *   until NAME STATE|EVENT [within N]
 *       Run rounds until NAME is in that state now, or that event has
 *       happened to it; at most N rounds (2000 unless given).
 *   cancel NAME
 *   finish [within N]
 *       Run until every request is done and the engine is idle (also done
 *       implicitly at the end of a script).
 *   expect NAME STATE            its state now
 *   expect NAME pages N          its reservation (the submit's answer)
 *   expect NAME tokens N         tokens it generated so far
 *   expect NAME finish length|context|cancelled
 *   expect free N                free pages now
 *   expect moves N               victims chosen so far, all needs together
 *   expect prefilled N           prompt tokens prefilled so far (eng_stats)
 *   expect moved NAME [for=R] [was=STATE] [to=ram|disk] [from=ram|disk]
 *                [resumed=prefill|ready|decode] [times=N]
 *       It was chosen as a victim (for R; in STATE in the round it was
 *       chosen; N times in all); its last move out landed in that tier, its
 *       last move in came from that one and resumed it prefilling, or ready
 *       for a lane (`decode`: and it took a lane again without prefilling
 *       anything).
 *   expect not-moved NAME
 *   expect lost NAME             its tier record was lost: prefilled again
 *   expect stopped NAME          a move of it was stopped before it landed:
 *                                its need went (admitted from room freed
 *                                elsewhere, or ended); it ran on (chosen,
 *                                not moved)
 *   expect refused NAME          a move of it was refused by the tier (it
 *                                stays and runs on: chosen, not moved)
 *   expect victims R A B ... | none   the victims chosen for R, in order
 *   expect order A.EVENT B.EVENT ...  each first happened before the next
 *       (in an earlier round, or earlier in the same round: a restore's pages
 *       are taken before that round's admissions)
 *
 * States: waiting prefill ready decode moving_out moved moving_in done.
 * Events: admitted evicted out (its move out landed) restore (pages
 * reserved for its move in) in (its move in landed) restored lost refused stopped
 * first (its first token) decode (it held a lane) done.
 *
 * Checked in every script, after every round: the free pages are the pool
 * less the whole reservations of the sequences holding pages (a
 * reservation is taken whole at admission or restore and never grows); no
 * more sequences hold a state slot than there are lanes (the engine's
 * slots, ADR 0027: a sequence holds one from its admission or restore until
 * it is done or its move out has landed); every victim is chosen for a
 * request that was waiting (only an admission moves anything; a restore
 * never does), ranks below it and held pages outside any transfer, and the
 * request lacked pages or a slot (the trace says which: ss_need). At the
 * end: every request is done; a move, a loss, a refusal or a stop that the
 * script did not expect fails it; every page is back; the tiers hold
 * nothing (what a move left there is dropped); and every request's tokens
 * equal the same request's run alone on a pool where nothing moves (a
 * cancelled one: a prefix of them).
 *
 * Rounds are the scripts' clock. This model's round takes well under a
 * millisecond where a real one takes tens, and the daemon answers in its own
 * time: the runner pauses half a millisecond after a round while a sequence
 * is moving, so that a move takes about as many rounds on a loaded machine
 * as on an idle one, and the scripts keep wide margins besides (the
 * sequences that must still be running at some point have long caps).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <nng/nng.h>

#include "kvstore-daemon/arena.h"
#include "common/clock.h"
#include "gpu-worker/engine/engine.h"
#include "gpu-worker/engine/kvclient.h"
#include "testutil.h"
#include "engrig.h"
#include "kvdrig.h"
#include "proto/transport.h"

#define DEFAULT_SEED 41u
#define SS_CONTEXT   256u /* 4 pages: small sequences, short moves */
#define SS_MAXREQ    16u  /* also the engine's max_requests */
#define SS_MAXOPS    160u
#define SS_MAXLIST   16u
#define SS_BOUND     2000 /* rounds an `until` or `finish` may take unless told */
#define SS_LOG       400u /* events kept for the report of a failure */
#define SS_DISK      (64ull << 20)

/* ---- scripts -------------------------------------------------------------------- */

enum ss_ev {
	SE_ADMITTED,
	SE_EVICTED,
	SE_OUT,
	SE_RESTORE,
	SE_IN,
	SE_RESTORED,
	SE_LOST,
	SE_REFUSED,
	SE_STOPPED,
	SE_FIRST,
	SE_DECODE,
	SE_DONE,
	SE_N
};

static const char *const ss_ev_names[SE_N] = {
    "admitted", "evicted", "out",     "restore", "in",     "restored",
    "lost",     "refused", "stopped", "first",   "decode", "done",
};

enum ss_opk { OK_POOL, OK_SUBMIT, OK_ROUNDS, OK_UNTIL, OK_CANCEL, OK_FINISH, OK_EXPECT, OK_DAEMON };

enum ss_expk {
	EX_STATE,
	EX_PAGES,
	EX_TOKENS,
	EX_FINISH,
	EX_FREE,
	EX_MOVES,
	EX_PREFILLED,
	EX_MOVED,
	EX_NOT_MOVED,
	EX_LOST,
	EX_REFUSED,
	EX_STOPPED,
	EX_VICTIMS,
	EX_ORDER,
};

struct ss_op {
	int line;
	enum ss_opk k;
	enum ss_expk x;
	int req;      /* the request named, or -1 */
	long n;       /* a count, a bound */
	int phase;    /* a state, or -1 */
	int ev;       /* an event, or -1 */
	int fin;      /* enum eng_finish */
	int q_for;    /* expect moved: for=, or -1 */
	int q_was;    /* was=, or -1 */
	int q_resume; /* resumed= (SCHED_PREFILL, SCHED_READY, SCHED_DECODE), or -1 */
	int q_to;     /* to=: 0 none, 1 ram, 2 disk */
	int q_from;   /* from=: the same */
	long q_times; /* times=, or -1 */
	int list[SS_MAXLIST], list_ev[SS_MAXLIST], n_list;
};

struct ss_req {
	char name[24];
	enum sched_class cls;
	uint32_t prompt[SS_CONTEXT], n_prompt, max;
	bool seeded;
	struct smp_params smp;
	bool named_moved, named_lost, named_refused, named_stopped; /* a script line expects it */
	/* the run */
	bool submitted;
	uint64_t id, arrival;
	struct eng_admission adm;
	enum sched_phase phase;  /* as last read */
	enum sched_phase before; /* as the round's plan saw it */
	enum eng_finish finish;
	uint32_t generated;
	long first[SE_N];  /* the round of its first such event; 0: none */
	uint64_t at[SE_N]; /* when in that round: the script's event count */
	uint32_t count[SE_N];
	int was;               /* the state the planner saw when it was last chosen */
	int last_for;          /* the request it was last chosen for */
	int resume;            /* the state its last restore put it in, or -1 */
	bool lane_again;       /* took a lane after that restore, without prefilling */
	const char *to, *from; /* "ram" or "disk": its last move out, in */
	int victims[64];       /* as a requester: its victims in the order chosen */
	uint32_t n_victims;
	uint32_t out[SS_CONTEXT], n_out;
};

struct ss_pool {
	uint32_t pages, lanes, chunk, default_max;
	uint64_t window, window_in, ram;
	bool disk;
};

/* What main builds once: the model and the pool the references run on. */
struct ss_shared {
	struct rig rig; /* tiny-dense, a pool of one whole context (4 pages) */
	bool rig_open;  /* by the first script run (cmocka's asserts need a test) */
	uint64_t seed;
	const char *dir;
};

/* One script: parsed, then run; the case cmocka hands each test. */
struct ss {
	struct ss_shared *sh;
	char path[512];
	const char *name; /* the file's name */
	struct ss_op ops[SS_MAXOPS];
	uint32_t n_ops;
	struct ss_req req[SS_MAXREQ];
	uint32_t n_req;
	struct ss_pool pool;
	/* the run */
	struct daemon k;
	struct kvc *kout, *kin;
	void *region;
	uint64_t region_bytes;
	struct kvpool kv;
	bool kv_open;
	struct eng *e;
	long round;
	uint64_t arrivals, stamps;
	int line;             /* the line being run, for messages */
	char violation[512];  /* the first broken invariant, found in a callback */
	char log[SS_LOG][72]; /* what happened, for the report of a failure */
	uint32_t n_log;
	uint64_t windows_seen; /* the moves' windows at the last round */
	uint32_t stall;        /* rounds since a move last moved a window */
};

static void ss_log(struct ss *s, const char *fmt, ...)
{
	va_list ap;

	if (s->n_log >= SS_LOG)
		return;
	va_start(ap, fmt);
	vsnprintf(s->log[s->n_log++], sizeof(s->log[0]), fmt, ap);
	va_end(ap);
}

/* Fail the script at line `line` (0: the whole script), printing what
 * happened first. */
static void ss_fail(struct ss *s, int line, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (s->n_log)
		print_message("# %s: what happened (round: event):\n", s->name);
	for (uint32_t i = 0; i < s->n_log; i++)
		print_message("#   %s\n", s->log[i]);
	if (line)
		fail_msg("%s:%d: %s", s->path, line, msg);
	else
		fail_msg("%s: %s", s->path, msg);
}

/* ---- parsing ---------------------------------------------------------------------- */

static int ss_word(const char *const *names, int n, const char *w)
{
	for (int i = 0; i < n; i++)
		if (strcmp(names[i], w) == 0)
			return i;
	return -1;
}

static const char *ss_st(int p)
{
	return sched_phase_name((enum sched_phase)p);
}

/* A state's name as roundplan.h spells it (sched_phase_name), or -1. */
static int ss_phase_of(const char *w)
{
	for (int p = SCHED_WAITING; p <= SCHED_MOVING_IN; p++)
		if (!strcmp(sched_phase_name((enum sched_phase)p), w))
			return p;
	return -1;
}

static int ss_ev_of(const char *w)
{
	return ss_word(ss_ev_names, SE_N, w);
}

static int ss_req_of(struct ss *s, int line, const char *w)
{
	for (uint32_t i = 0; i < s->n_req; i++)
		if (strcmp(s->req[i].name, w) == 0)
			return (int)i;
	ss_fail(s, line, "no request named '%s' was submitted above", w);
	return -1;
}

static long ss_num(struct ss *s, int line, const char *what, const char *w)
{
	char *end;
	long v;

	if (!w)
		ss_fail(s, line, "%s: a number is missing", what);
	v = strtol(w, &end, 0);
	if (end == w || *end || v < 0)
		ss_fail(s, line, "%s: '%s' is not a number >= 0", what, w);
	return v;
}

/* A byte count, with an optional K or M. */
static uint64_t ss_bytes(struct ss *s, int line, const char *what, const char *w)
{
	char *end;
	unsigned long long v;

	if (!w)
		ss_fail(s, line, "%s: a size is missing", what);
	v = strtoull(w, &end, 0);
	if (end == w)
		ss_fail(s, line, "%s: '%s' is not a size (bytes, or with K or M)", what, w);
	if (*end == 'K' && !end[1])
		v <<= 10;
	else if (*end == 'M' && !end[1])
		v <<= 20;
	else if (*end)
		ss_fail(s, line, "%s: '%s' is not a size (bytes, or with K or M)", what, w);
	return v;
}

/* "key=value": the value when w starts with key=, else NULL. */
static const char *ss_kv(const char *w, const char *key)
{
	size_t n = strlen(key);

	return strncmp(w, key, n) == 0 && w[n] == '=' ? w + n + 1 : NULL;
}

static const char *const ss_reserved[] = {"free",      "moves", "prefilled", "moved",
                                          "not-moved", "lost",  "refused",   "stopped",
                                          "victims",   "order", "none"};

static void ss_parse_pool(struct ss *s, int line, char **w, int n)
{
	struct ss_pool *p = &s->pool;

	if (s->n_ops > 0)
		ss_fail(s, line, "pool: must be the script's first operation");
	*p = (struct ss_pool){.default_max = 32, .ram = 4ull << 20};
	p->pages = (uint32_t)ss_num(s, line, "pool PAGES", n > 1 ? w[1] : NULL);
	for (int i = 2; i < n; i += 2) {
		const char *v = i + 1 < n ? w[i + 1] : NULL;

		if (!strcmp(w[i], "lanes"))
			p->lanes = (uint32_t)ss_num(s, line, "lanes", v);
		else if (!strcmp(w[i], "chunk"))
			p->chunk = (uint32_t)ss_num(s, line, "chunk", v);
		else if (!strcmp(w[i], "window"))
			p->window = ss_bytes(s, line, "window", v);
		else if (!strcmp(w[i], "window-in"))
			p->window_in = ss_bytes(s, line, "window-in", v);
		else if (!strcmp(w[i], "ram"))
			p->ram = ss_bytes(s, line, "ram", v);
		else if (!strcmp(w[i], "default-max"))
			p->default_max = (uint32_t)ss_num(s, line, "default-max", v);
		else if (!strcmp(w[i], "disk") && v && (!strcmp(v, "on") || !strcmp(v, "off")))
			p->disk = !strcmp(v, "on");
		else
			ss_fail(s, line,
			        "pool: '%s %s' is not an option; accepted: lanes N, chunk C, "
			        "window BYTES, window-in BYTES, disk on|off, ram BYTES, "
			        "default-max N",
			        w[i], v ? v : "");
	}
	if (!p->pages || !p->lanes || !p->chunk || !p->window)
		ss_fail(s, line, "pool: PAGES, lanes, chunk and window are needed, each above 0");
	if (!p->window_in)
		p->window_in = 2 * p->window; /* read back in other windows than written */
}

static void ss_parse_submit(struct ss *s, int line, char **w, int n, struct rng *g)
{
	struct ss_req *r;

	if (n < 4)
		ss_fail(s, line,
		        "submit: expected 'submit NAME agent|interactive prompt=N [max=M] "
		        "[seed=S]'");
	if (s->n_req == SS_MAXREQ)
		ss_fail(s, line, "submit: at most %u requests a script", SS_MAXREQ);
	for (uint32_t i = 0; i < s->n_req; i++)
		if (!strcmp(s->req[i].name, w[1]))
			ss_fail(s, line, "submit: '%s' is submitted twice", w[1]);
	if (ss_word(ss_reserved, (int)(sizeof(ss_reserved) / sizeof(ss_reserved[0])), w[1]) >= 0 ||
	    strlen(w[1]) >= sizeof(r->name) || strchr(w[1], '.'))
		ss_fail(s, line,
		        "submit: '%s' cannot name a request (a word of the language, a '.', "
		        "or longer than %zu)",
		        w[1], sizeof(r->name) - 1);
	r = &s->req[s->n_req++];
	memset(r, 0, sizeof(*r));
	snprintf(r->name, sizeof(r->name), "%s", w[1]);
	if (!strcmp(w[2], "agent"))
		r->cls = SCHED_AGENT;
	else if (!strcmp(w[2], "interactive"))
		r->cls = SCHED_INTERACTIVE;
	else
		ss_fail(s, line, "submit %s: class '%s'; accepted: agent, interactive", w[1], w[2]);
	r->smp = (struct smp_params){0.0f, 0, 1.0f, 0}; /* greedy */
	for (int i = 3; i < n; i++) {
		const char *v;

		if ((v = ss_kv(w[i], "prompt")))
			r->n_prompt = (uint32_t)ss_num(s, line, "prompt", v);
		else if ((v = ss_kv(w[i], "max")))
			r->max = (uint32_t)ss_num(s, line, "max", v);
		else if ((v = ss_kv(w[i], "seed"))) {
			r->seeded = true;
			r->smp = (struct smp_params){0.9f, 40, 0.95f,
			                             (uint64_t)ss_num(s, line, "seed", v)};
		} else
			ss_fail(s, line, "submit %s: '%s'; accepted: prompt=N, max=M, seed=S", w[1],
			        w[i]);
	}
	if (r->n_prompt < 1 || r->n_prompt >= SS_CONTEXT)
		ss_fail(s, line, "submit %s: prompt=%u; accepted: 1..%u", w[1], r->n_prompt,
		        SS_CONTEXT - 1);
	for (uint32_t t = 0; t < r->n_prompt; t++)
		r->prompt[t] = (uint32_t)(rng_next(g) % 256u);
}

static void ss_parse_moved(struct ss *s, int line, struct ss_op *o, char **w, int n)
{
	o->req = ss_req_of(s, line, n > 2 ? w[2] : "");
	s->req[o->req].named_moved = true;
	o->q_for = o->q_was = o->q_resume = -1;
	o->q_times = -1;
	for (int i = 3; i < n; i++) {
		const char *v;

		if ((v = ss_kv(w[i], "for")))
			o->q_for = ss_req_of(s, line, v);
		else if ((v = ss_kv(w[i], "was")) && ss_phase_of(v) >= 0)
			o->q_was = ss_phase_of(v);
		else if ((v = ss_kv(w[i], "resumed")) &&
		         (!strcmp(v, "prefill") || !strcmp(v, "ready") || !strcmp(v, "decode")))
			o->q_resume = ss_phase_of(v);
		else if ((v = ss_kv(w[i], "to")) && (!strcmp(v, "ram") || !strcmp(v, "disk")))
			o->q_to = !strcmp(v, "ram") ? 1 : 2;
		else if ((v = ss_kv(w[i], "from")) && (!strcmp(v, "ram") || !strcmp(v, "disk")))
			o->q_from = !strcmp(v, "ram") ? 1 : 2;
		else if ((v = ss_kv(w[i], "times")))
			o->q_times = ss_num(s, line, "times", v);
		else
			ss_fail(s, line,
			        "expect moved: '%s'; accepted: for=NAME, was=STATE, "
			        "to=ram|disk, from=ram|disk, resumed=prefill|ready|decode, times=N",
			        w[i]);
	}
}

static void ss_parse_expect(struct ss *s, int line, struct ss_op *o, char **w, int n)
{
	const char *a = n > 1 ? w[1] : "";

	if (n < 3)
		ss_fail(s, line, "expect: what? (see test_schedscript.c for the forms)");
	if (!strcmp(a, "free") || !strcmp(a, "moves") || !strcmp(a, "prefilled")) {
		o->x = !strcmp(a, "free") ? EX_FREE : !strcmp(a, "moves") ? EX_MOVES : EX_PREFILLED;
		o->n = ss_num(s, line, a, w[2]);
	} else if (!strcmp(a, "moved")) {
		o->x = EX_MOVED;
		ss_parse_moved(s, line, o, w, n);
	} else if (!strcmp(a, "not-moved")) {
		o->x = EX_NOT_MOVED;
		o->req = ss_req_of(s, line, w[2]);
	} else if (!strcmp(a, "lost") || !strcmp(a, "refused") || !strcmp(a, "stopped")) {
		o->x = !strcmp(a, "lost")      ? EX_LOST
		       : !strcmp(a, "refused") ? EX_REFUSED
		                               : EX_STOPPED;
		o->req = ss_req_of(s, line, w[2]);
		if (o->x == EX_LOST)
			s->req[o->req].named_lost = true;
		else if (o->x == EX_REFUSED)
			s->req[o->req].named_refused = true;
		else
			s->req[o->req].named_stopped = true;
	} else if (!strcmp(a, "victims")) {
		o->x = EX_VICTIMS;
		o->req = ss_req_of(s, line, w[2]);
		if (n == 4 && !strcmp(w[3], "none"))
			return;
		for (int i = 3; i < n && o->n_list < (int)SS_MAXLIST; i++)
			o->list[o->n_list++] = ss_req_of(s, line, w[i]);
		if (!o->n_list)
			ss_fail(s, line, "expect victims %s: name them in order, or say none",
			        w[2]);
	} else if (!strcmp(a, "order")) {
		o->x = EX_ORDER;
		for (int i = 2; i < n && o->n_list < (int)SS_MAXLIST; i++) {
			char name[32];
			const char *dot = strchr(w[i], '.');

			if (!dot || dot == w[i] || (size_t)(dot - w[i]) >= sizeof(name) ||
			    ss_ev_of(dot + 1) < 0)
				ss_fail(s, line, "expect order: '%s' is not NAME.EVENT", w[i]);
			memcpy(name, w[i], (size_t)(dot - w[i]));
			name[dot - w[i]] = '\0';
			o->list[o->n_list] = ss_req_of(s, line, name);
			o->list_ev[o->n_list++] = ss_ev_of(dot + 1);
		}
		if (o->n_list < 2)
			ss_fail(s, line, "expect order: at least two NAME.EVENT");
	} else {
		o->req = ss_req_of(s, line, a);
		if (!strcmp(w[2], "pages") || !strcmp(w[2], "tokens")) {
			o->x = !strcmp(w[2], "pages") ? EX_PAGES : EX_TOKENS;
			o->n = ss_num(s, line, w[2], n > 3 ? w[3] : NULL);
		} else if (!strcmp(w[2], "finish") && n > 3) {
			o->x = EX_FINISH;
			o->fin = !strcmp(w[3], "length")      ? ENG_LENGTH
			         : !strcmp(w[3], "context")   ? ENG_CONTEXT
			         : !strcmp(w[3], "cancelled") ? ENG_CANCELLED
			                                      : -1;
			if (o->fin < 0)
				ss_fail(s, line,
				        "expect %s finish: '%s'; accepted: length, "
				        "context, cancelled",
				        a, w[3]);
		} else if ((o->phase = ss_phase_of(w[2])) >= 0) {
			o->x = EX_STATE;
		} else {
			ss_fail(s, line,
			        "expect %s: '%s' is not a state, pages N, tokens N or finish F", a,
			        w[2]);
		}
	}
}

static void ss_parse(struct ss *s)
{
	struct rng g = {s->sh->seed};
	char buf[512];
	int line = 0;
	bool greedy = false, seeded = false;
	FILE *f = fopen(s->path, "r");

	if (!f)
		ss_fail(s, 0, "cannot open the script");
	/* each script draws its own prompts: the seed mixed with its name */
	for (const char *c = s->name; *c; c++)
		g.s = g.s * 31u + (unsigned char)*c;
	while (fgets(buf, sizeof(buf), f)) {
		char *w[40], *save = NULL, *hash = strchr(buf, '#'), *t;
		int n = 0;
		struct ss_op *o;

		line++;
		if (hash)
			*hash = '\0';
		for (t = strtok_r(buf, " \t\r\n", &save); t && n < 40;
		     t = strtok_r(NULL, " \t\r\n", &save))
			w[n++] = t;
		if (!n)
			continue;
		if (s->n_ops == SS_MAXOPS)
			ss_fail(s, line, "at most %u operations a script", SS_MAXOPS);
		o = &s->ops[s->n_ops];
		memset(o, 0, sizeof(*o));
		o->line = line;
		o->req = o->phase = o->ev = -1;
		if (!strcmp(w[0], "pool")) {
			o->k = OK_POOL;
			ss_parse_pool(s, line, w, n);
		} else if (s->n_ops == 0) {
			ss_fail(s, line, "the first operation must be 'pool ...'");
		} else if (!strcmp(w[0], "submit")) {
			o->k = OK_SUBMIT;
			ss_parse_submit(s, line, w, n, &g);
			o->req = (int)s->n_req - 1;
			greedy |= !s->req[o->req].seeded;
			seeded |= s->req[o->req].seeded;
		} else if (!strcmp(w[0], "rounds") && n == 2) {
			o->k = OK_ROUNDS;
			o->n = ss_num(s, line, "rounds", w[1]);
		} else if (!strcmp(w[0], "until") &&
		           (n == 3 || (n == 5 && !strcmp(w[3], "within")))) {
			o->k = OK_UNTIL;
			o->req = ss_req_of(s, line, w[1]);
			o->phase = ss_phase_of(w[2]);
			if (o->phase < 0 && (o->ev = ss_ev_of(w[2])) < 0)
				ss_fail(s, line, "until %s: '%s' is neither a state nor an event",
				        w[1], w[2]);
			o->n = n == 5 ? ss_num(s, line, "within", w[4]) : SS_BOUND;
		} else if (!strcmp(w[0], "cancel") && n == 2) {
			o->k = OK_CANCEL;
			o->req = ss_req_of(s, line, w[1]);
		} else if (!strcmp(w[0], "daemon") && n == 2 &&
		           (!strcmp(w[1], "stop") || !strcmp(w[1], "cont"))) {
			/* the kvstore daemon stopped (SIGSTOP: its answers wait) or
			 * let go on */
			o->k = OK_DAEMON;
			o->n = !strcmp(w[1], "cont");
		} else if (!strcmp(w[0], "finish") &&
		           (n == 1 || (n == 3 && !strcmp(w[1], "within")))) {
			o->k = OK_FINISH;
			o->n = n == 3 ? ss_num(s, line, "within", w[2]) : SS_BOUND;
		} else if (!strcmp(w[0], "expect")) {
			o->k = OK_EXPECT;
			ss_parse_expect(s, line, o, w, n);
		} else {
			ss_fail(s, line,
			        "'%s': not an operation, or not in its form; accepted: pool, "
			        "submit, rounds N, until NAME STATE|EVENT [within N], cancel "
			        "NAME, daemon stop|cont, finish [within N], expect ...",
			        w[0]);
		}
		s->n_ops++;
	}
	fclose(f);
	if (!s->n_ops)
		ss_fail(s, 0, "empty script");
	if (!greedy || !seeded)
		ss_fail(s, 0,
		        "every script compares a greedy and a seeded request with their runs "
		        "alone: it has %s",
		        greedy ? "no seeded request (seed=S)" : "no greedy request (no seed)");
}

/* ---- the run ----------------------------------------------------------------------- */

/* Holds pages, and a state slot with them (roundplan.h). */
static bool ss_holds_pages(enum sched_phase p)
{
	return p == SCHED_PREFILL || p == SCHED_READY || p == SCHED_DECODE ||
	       p == SCHED_MOVING_OUT || p == SCHED_MOVING_IN;
}

static struct ss_req *ss_by_id(struct ss *s, uint64_t id)
{
	for (uint32_t i = 0; i < s->n_req; i++)
		if (s->req[i].submitted && s->req[i].id == id)
			return &s->req[i];
	return NULL;
}

static void ss_mark(struct ss *s, struct ss_req *r, enum ss_ev ev)
{
	if (!r->first[ev]) {
		r->first[ev] = s->round;
		r->at[ev] = ++s->stamps;
	}
	r->count[ev]++;
}

static void ss_poll(struct ss *s);

/* What request q lacked when the round's plan chose victims for it: victims
 * are chosen after the round ran, so the pages and slots of the sequences
 * that ended in it (none of them a victim) were still held when it was
 * planned. */
static void ss_need(struct ss *s, const struct ss_req *q, uint64_t *pages, bool *slot)
{
	struct eng_stats st;
	uint64_t free_pages;
	uint32_t held = 0;

	eng_stats(s->e, &st);
	free_pages = st.free_pages;
	for (uint32_t i = 0; i < s->n_req; i++) {
		const struct ss_req *r = &s->req[i];
		/* a cancel comes between rounds: marked in the one before */
		bool ended_now = r->phase == SCHED_DONE && r->first[SE_DONE] == s->round;

		if (!r->submitted)
			continue;
		if (ended_now)
			free_pages -= r->adm.pages;
		held += ss_holds_pages(r->phase) || ended_now;
	}
	*pages = q->adm.pages > free_pages ? q->adm.pages - free_pages : 0;
	*slot = held >= s->pool.lanes;
}

static void ss_violate(struct ss *s, const char *fmt, ...)
{
	va_list ap;

	if (s->violation[0])
		return;
	va_start(ap, fmt);
	vsnprintf(s->violation, sizeof(s->violation), fmt, ap);
	va_end(ap);
}

/* The engine's events, stamped with the round they happened in and, within
 * it, ordered with what the states show (read first: a restore's pages are
 * reserved before the same round's admissions, with no event of its own). */
static void ss_on_event(void *ctx, const struct eng_event *ev)
{
	struct ss *s = ctx;
	struct ss_req *r = ss_by_id(s, ev->id), *q = ss_by_id(s, ev->for_id);
	struct ig_errbuf eb;
	struct eng_status st;
	uint32_t tok, n;

	if (ev->kind >= ENG_EV_REUSE_CAPTURED) {
		ss_violate(s, "a prompt reuse event: these scripts run without retained slots");
		return;
	}
	ss_poll(s);
	/* a move landing, a restore, a loss or a refusal happens at the start
	 * of the round, before its plan: the planner sees the state it leaves */
	if (r && ev->kind != ENG_EV_ADMITTED && ev->kind != ENG_EV_EVICTED)
		r->before = r->phase;
	if (!r) {
		ss_violate(s, "an event for request id %llu, which this script never submitted",
		           (unsigned long long)ev->id);
		return;
	}
	if (ev->pages != r->adm.pages)
		ss_violate(s, "an event of %s says %u pages; its reservation is %u", r->name,
		           ev->pages, r->adm.pages);
	switch (ev->kind) {
	case ENG_EV_ADMITTED:
		ss_mark(s, r, SE_ADMITTED);
		ss_log(s, "%ld: %s admitted (%u pages)", s->round, r->name, ev->pages);
		break;
	case ENG_EV_EVICTED: {
		uint64_t lack = 0;
		bool lack_slot = false;

		ss_mark(s, r, SE_EVICTED);
		r->was = (int)r->before;
		r->last_for = q ? (int)(q - s->req) : -1;
		if (!q) {
			ss_log(s, "%ld: %s evicted (was %s) for ?", s->round, r->name,
			       ss_st(r->before));
			ss_violate(s, "%s was evicted for request id %llu, not one of the script's",
			           r->name, (unsigned long long)ev->for_id);
			break;
		}
		ss_need(s, q, &lack, &lack_slot);
		ss_log(s, "%ld: %s evicted (was %s) for %s (lacks %llu pages%s)", s->round, r->name,
		       ss_st(r->before), q->name, (unsigned long long)lack,
		       lack_slot ? ", a slot" : "");
		if (!lack && !lack_slot)
			ss_violate(s,
			           "%s was evicted for %s, which lacked neither pages nor a slot",
			           r->name, q->name);
		if (q->n_victims < sizeof(q->victims) / sizeof(q->victims[0]))
			q->victims[q->n_victims++] = (int)(r - s->req);
		/* docs/design.md, section 4: only an admission moves anything */
		if (q->before != SCHED_WAITING || q->phase != SCHED_WAITING)
			ss_violate(s,
			           "%s was evicted for %s, which was %s: only a waiting request's "
			           "admission moves a sequence (a restore never does)",
			           r->name, q->name,
			           ss_st(q->phase != SCHED_WAITING ? q->phase : q->before));
		/* never the requester, one mid-transfer, or one ranked above it */
		if (q == r || !(r->before == SCHED_PREFILL || r->before == SCHED_READY ||
		                r->before == SCHED_DECODE))
			ss_violate(s,
			           "%s was evicted for %s while %s: a victim holds pages outside "
			           "any transfer and is not the requester",
			           r->name, q->name, ss_st(r->before));
		if (q->cls > r->cls || (q->cls == r->cls && q->arrival > r->arrival))
			ss_violate(s, "%s (%s) was evicted for %s (%s), which it outranks", r->name,
			           sched_class_name(r->cls), q->name, sched_class_name(q->cls));
		break;
	}
	case ENG_EV_MOVED:
		ss_mark(s, r, ev->dir_out ? SE_OUT : SE_IN);
		if (ev->dir_out)
			r->to = ev->tier && !strcmp(ev->tier, "disk") ? "disk" : "ram";
		else
			r->from = ev->tier && !strcmp(ev->tier, "disk") ? "disk" : "ram";
		ss_log(s, "%ld: %s moved %s (%s, %llu bytes, %u windows)", s->round, r->name,
		       ev->dir_out ? "out" : "in", ev->tier ? ev->tier : "?",
		       (unsigned long long)ev->bytes, ev->windows);
		break;
	case ENG_EV_RESTORED:
		ss_mark(s, r, SE_RESTORED);
		/* the phase the restore resumed it in, before any round ran it */
		r->resume = -1;
		r->lane_again = false;
		if (eng_tokens(s->e, ev->id, 0, 0, &tok, &n, &st, &eb) == IG_E_OK)
			r->resume = (int)st.phase;
		ss_log(s, "%ld: %s restored, resuming %s", s->round, r->name,
		       r->resume >= 0 ? ss_st(r->resume) : "?");
		break;
	case ENG_EV_LOST:
		ss_mark(s, r, SE_LOST);
		r->resume = -1;
		ss_log(s, "%ld: %s lost (%s): prefilled again", s->round, r->name,
		       ev->why ? ev->why : "");
		break;
	case ENG_EV_MOVE_REFUSED:
		ss_mark(s, r, SE_REFUSED);
		ss_log(s, "%ld: %s's move refused by the tier", s->round, r->name);
		break;
	case ENG_EV_MOVE_STOPPED:
		ss_mark(s, r, SE_STOPPED);
		ss_log(s, "%ld: %s's move stopped: %s", s->round, r->name, ev->why ? ev->why : "");
		break;
	case ENG_EV_REUSE_CAPTURED:
	case ENG_EV_REUSE_CLAIMED:
	case ENG_EV_REUSE_GIVEN_UP:
	case ENG_EV_REUSE_SKIPPED:
		break; /* refused above */
	}
}

/* Read every submitted request's state; note what changed. */
static void ss_poll(struct ss *s)
{
	for (uint32_t i = 0; i < s->n_req; i++) {
		struct ss_req *r = &s->req[i];
		struct ig_errbuf eb = {0};
		struct eng_status st;
		uint32_t tok, n;

		if (!r->submitted)
			continue;
		if (eng_tokens(s->e, r->id, 0, 0, &tok, &n, &st, &eb))
			ss_fail(s, s->line, "reading %s: %s", r->name, eb.msg);
		if (st.phase == SCHED_MOVING_IN && r->phase != SCHED_MOVING_IN) {
			ss_mark(s, r, SE_RESTORE);
			ss_log(s, "%ld: %s restore starts (%u pages)", s->round, r->name,
			       r->adm.pages);
		}
		if (st.phase == SCHED_DECODE) {
			if (!r->first[SE_DECODE])
				ss_log(s, "%ld: %s takes a lane", s->round, r->name);
			if (r->count[SE_RESTORED] && r->resume == SCHED_READY && !r->lane_again &&
			    r->phase != SCHED_DECODE) {
				r->lane_again = true;
				ss_log(s, "%ld: %s takes a lane again", s->round, r->name);
			}
			if (!r->first[SE_DECODE] || r->phase != SCHED_DECODE)
				ss_mark(s, r, SE_DECODE);
		}
		if (st.phase == SCHED_PREFILL && r->phase != SCHED_PREFILL &&
		    r->phase != SCHED_WAITING && r->phase != SCHED_MOVING_IN)
			r->lane_again = false; /* prefilling again: a replay */
		if (st.generated && !r->first[SE_FIRST])
			ss_mark(s, r, SE_FIRST);
		if (st.phase == SCHED_DONE && r->phase != SCHED_DONE) {
			ss_mark(s, r, SE_DONE);
			ss_log(s, "%ld: %s done (%u tokens, %s)", s->round, r->name, st.generated,
			       eng_finish_name(st.finish));
		}
		r->phase = st.phase;
		r->finish = st.finish;
		r->generated = st.generated;
	}
}

/* Free pages are the pool less the whole reservations held. */
static void ss_check_pages(struct ss *s)
{
	struct eng_stats st;
	uint64_t held = 0;
	uint32_t slots = 0;

	eng_stats(s->e, &st);
	for (uint32_t i = 0; i < s->n_req; i++)
		if (s->req[i].submitted && ss_holds_pages(s->req[i].phase)) {
			held += s->req[i].adm.pages;
			slots++;
		}
	if (st.free_pages + held != s->pool.pages)
		ss_fail(s, s->line,
		        "after round %ld: %llu pages free, but the pool of %u less the whole "
		        "reservations held (%llu) leaves %llu: a reservation grew, shrank or "
		        "was taken in part",
		        s->round, (unsigned long long)st.free_pages, s->pool.pages,
		        (unsigned long long)held, (unsigned long long)(s->pool.pages - held));
	if (st.lanes_used > s->pool.lanes)
		ss_fail(s, s->line, "after round %ld: %u lanes in use of %u", s->round,
		        st.lanes_used, s->pool.lanes);
	if (slots > s->pool.lanes)
		ss_fail(s, s->line,
		        "after round %ld: %u sequences hold a state slot, of %u (one a lane): one "
		        "was admitted or restored without a free slot",
		        s->round, slots, s->pool.lanes);
}

static void ss_round(struct ss *s)
{
	struct ig_errbuf eb = {0};
	struct eng_stats st;
	uint32_t ran = 0;

	s->round++;
	for (uint32_t i = 0; i < s->n_req; i++)
		s->req[i].before = s->req[i].phase;
	if (eng_round(s->e, &ran, &eb))
		ss_fail(s, s->line, "round %ld: %s", s->round, eb.msg);
	ss_poll(s);
	if (s->violation[0])
		ss_fail(s, s->line, "round %ld: %s", s->round, s->violation);
	ss_check_pages(s);
	/* the daemon's moment to answer (see the top of the file); an idle
	 * round waits for it a little more, and while a move makes no
	 * progress each round waits twice as long as the last, up to 32 ms (a
	 * loaded machine's daemon can take many of these rounds for a window:
	 * one CI emulation saw a 4-window move last 100 rounds, long enough for
	 * the other agent to finish and stop it) */
	eng_stats(s->e, &st);
	if (st.moving_out || st.moving_in) {
		uint64_t w = st.move_out_windows + st.move_in_windows;

		s->stall = w != s->windows_seen ? 0 : s->stall < 6 ? s->stall + 1 : 6;
		s->windows_seen = w;
		usleep(500u << s->stall);
	} else if (ran == 0) {
		usleep(1000);
	}
}

static bool ss_all_done(const struct ss *s)
{
	for (uint32_t i = 0; i < s->n_req; i++)
		if (!s->req[i].submitted || s->req[i].phase != SCHED_DONE)
			return false;
	return true;
}

static void ss_submit(struct ss *s, struct ss_req *r)
{
	struct eng_req er = {r->prompt, r->n_prompt, r->max, r->cls, r->smp, NULL, NULL, 0, false};
	struct ig_errbuf eb = {0};

	if (eng_submit(s->e, &er, &r->adm, &eb))
		ss_fail(s, s->line, "submit %s: %s (a request is never refused for room)", r->name,
		        eb.msg);
	r->submitted = true;
	r->id = r->adm.id;
	r->arrival = ++s->arrivals;
	r->phase = r->before = SCHED_WAITING;
	r->resume = -1;
	ss_log(s, "%ld: %s submitted (%s, %u + %u tokens, %u pages)", s->round, r->name,
	       sched_class_name(r->cls), r->n_prompt, r->adm.max_tokens, r->adm.pages);
}

static const char *ss_tier_name(int t)
{
	return t == 1 ? "ram" : t == 2 ? "disk" : "-";
}

static void ss_expect_moved(struct ss *s, const struct ss_op *o)
{
	const struct ss_req *r = &s->req[o->req];
	int line = o->line;

	if (!r->count[SE_EVICTED])
		ss_fail(s, line, "expected %s moved; it never was", r->name);
	if (o->q_for >= 0 && r->last_for != o->q_for)
		ss_fail(s, line, "expected %s moved for %s; it was moved for %s", r->name,
		        s->req[o->q_for].name, r->last_for >= 0 ? s->req[r->last_for].name : "?");
	if (o->q_was >= 0 && r->was != o->q_was)
		ss_fail(s, line, "expected %s moved while %s; it was %s when chosen", r->name,
		        ss_st(o->q_was), ss_st(r->was));
	if (o->q_times >= 0 && r->count[SE_EVICTED] != (uint32_t)o->q_times)
		ss_fail(s, line, "expected %s moved %ld times; it was %u times", r->name,
		        o->q_times, r->count[SE_EVICTED]);
	if (o->q_to && (!r->to || strcmp(r->to, ss_tier_name(o->q_to))))
		ss_fail(s, line, "expected %s moved out to KV-%s; %s%s", r->name,
		        ss_tier_name(o->q_to), r->to ? "it went to KV-" : "it has not landed yet",
		        r->to ? r->to : "");
	if (o->q_from && (!r->from || strcmp(r->from, ss_tier_name(o->q_from))))
		ss_fail(s, line, "expected %s back from KV-%s; %s%s", r->name,
		        ss_tier_name(o->q_from),
		        r->from ? "it came from KV-" : "it has not come back yet",
		        r->from ? r->from : "");
	if (o->q_resume == SCHED_PREFILL || o->q_resume == SCHED_READY) {
		if (r->resume != o->q_resume)
			ss_fail(s, line, "expected %s to resume %s after its restore; it %s",
			        r->name, ss_st(o->q_resume),
			        r->resume >= 0 ? ss_st(r->resume)
			                       : "was not restored (or was lost)");
	} else if (o->q_resume == SCHED_DECODE) {
		if (r->resume != SCHED_READY || !r->lane_again)
			ss_fail(s, line,
			        "expected %s to resume on a lane after its restore; it resumed %s "
			        "and %s",
			        r->name, r->resume >= 0 ? ss_st(r->resume) : "nothing",
			        r->lane_again ? "took a lane" : "has not taken a lane since");
	}
}

static void ss_expect(struct ss *s, const struct ss_op *o)
{
	struct ss_req *r = o->req >= 0 ? &s->req[o->req] : NULL;
	struct eng_stats st;
	int line = o->line;

	if (r && !r->submitted && o->x != EX_NOT_MOVED)
		ss_fail(s, line, "%s is not submitted yet", r->name);
	eng_stats(s->e, &st);
	switch (o->x) {
	case EX_STATE:
		if ((int)r->phase != o->phase)
			ss_fail(s, line, "expected %s %s; it is %s (round %ld)", r->name,
			        ss_st(o->phase), ss_st(r->phase), s->round);
		break;
	case EX_PAGES:
		if (r->adm.pages != (uint32_t)o->n)
			ss_fail(s, line, "expected %s to reserve %ld pages; it reserves %u",
			        r->name, o->n, r->adm.pages);
		break;
	case EX_TOKENS:
		if (r->generated != (uint32_t)o->n)
			ss_fail(s, line, "expected %s to have generated %ld tokens; it has %u",
			        r->name, o->n, r->generated);
		break;
	case EX_FINISH:
		if ((int)r->finish != o->fin)
			ss_fail(s, line, "expected %s to finish '%s'; it is '%s'", r->name,
			        eng_finish_name((enum eng_finish)o->fin),
			        eng_finish_name(r->finish));
		break;
	case EX_FREE:
		if (st.free_pages != (uint64_t)o->n)
			ss_fail(s, line, "expected %ld free pages; %llu are (round %ld)", o->n,
			        (unsigned long long)st.free_pages, s->round);
		break;
	case EX_MOVES: {
		uint64_t moves = 0;

		for (uint32_t i = 0; i < s->n_req; i++)
			moves += s->req[i].count[SE_EVICTED];
		if (moves != (uint64_t)o->n)
			ss_fail(s, line, "expected %ld victims chosen so far; %llu were", o->n,
			        (unsigned long long)moves);
		break;
	}
	case EX_PREFILLED:
		if (st.prefill_tokens != (uint64_t)o->n)
			ss_fail(s, line,
			        "expected %ld prompt tokens prefilled; %llu were (a resumed "
			        "prefill starts where it stopped)",
			        o->n, (unsigned long long)st.prefill_tokens);
		break;
	case EX_MOVED:
		ss_expect_moved(s, o);
		break;
	case EX_NOT_MOVED:
		if (r->count[SE_EVICTED])
			ss_fail(s, line, "expected %s never moved; it was moved for %s (round %ld)",
			        r->name, r->last_for >= 0 ? s->req[r->last_for].name : "?",
			        r->first[SE_EVICTED]);
		break;
	case EX_LOST:
		if (!r->count[SE_LOST])
			ss_fail(s, line, "expected %s lost (prefilled again); it never was",
			        r->name);
		break;
	case EX_REFUSED:
		if (!r->count[SE_REFUSED])
			ss_fail(s, line, "expected a move of %s refused by the tier; none was",
			        r->name);
		break;
	case EX_STOPPED:
		if (!r->count[SE_STOPPED])
			ss_fail(s, line, "expected a move of %s stopped before it landed; none was",
			        r->name);
		break;
	case EX_VICTIMS: {
		char got[256] = "", want[256] = "";
		bool same = r->n_victims == (uint32_t)o->n_list;

		for (uint32_t i = 0; i < r->n_victims; i++)
			snprintf(got + strlen(got), sizeof(got) - strlen(got), " %s",
			         s->req[r->victims[i]].name);
		for (int i = 0; i < o->n_list; i++) {
			snprintf(want + strlen(want), sizeof(want) - strlen(want), " %s",
			         s->req[o->list[i]].name);
			same = same && r->victims[i] == o->list[i];
		}
		if (!same)
			ss_fail(s, line, "expected the victims for %s:%s; they were:%s", r->name,
			        o->n_list ? want : " none", r->n_victims ? got : " none");
		break;
	}
	case EX_ORDER:
		for (int i = 0; i < o->n_list; i++) {
			const struct ss_req *a = &s->req[o->list[i]];
			long ra = a->first[o->list_ev[i]];

			if (!ra)
				ss_fail(s, line, "expected %s.%s; it has not happened (round %ld)",
				        a->name, ss_ev_names[o->list_ev[i]], s->round);
			if (i > 0) {
				const struct ss_req *p = &s->req[o->list[i - 1]];
				long rp = p->first[o->list_ev[i - 1]];

				if (p->at[o->list_ev[i - 1]] >= a->at[o->list_ev[i]])
					ss_fail(s, line,
					        "expected %s.%s (round %ld) before %s.%s (round "
					        "%ld%s)",
					        p->name, ss_ev_names[o->list_ev[i - 1]], rp,
					        a->name, ss_ev_names[o->list_ev[i]], ra,
					        rp == ra ? ", earlier in it" : "");
			}
		}
		break;
	}
}

static bool ss_reached(const struct ss *s, const struct ss_op *o)
{
	const struct ss_req *r = &s->req[o->req];

	return r->submitted && (o->phase >= 0 ? (int)r->phase == o->phase : r->first[o->ev] != 0);
}

static void ss_finish(struct ss *s, long bound)
{
	for (long i = 0; !(ss_all_done(s) && !eng_busy(s->e)); i++) {
		if (i == bound)
			ss_fail(s, s->line,
			        "finish: not everything done after %ld rounds (round %ld)", bound,
			        s->round);
		ss_round(s);
	}
}

/* The sequences both tiers hold now (the daemon's own figures). */
static uint64_t ss_tier_sequences(struct ss *s)
{
	struct msg q = {.type = MSG_KV_STATS};
	struct ig_errbuf eb = {0};
	struct tp_rx rx;
	nng_socket c;
	uint64_t n;

	if (tp_dial(&c, s->k.dir, "kvstore", 5000, &eb) || tp_call(c, &q, &rx, &eb))
		ss_fail(s, 0, "kv_stats: %s", eb.msg);
	n = rx.m.u.kv_stats_reply.ram_sequences + rx.m.u.kv_stats_reply.disk_sequences;
	tp_rx_release(&rx);
	nng_close(c);
	return n;
}

/* Everything done: what the tiers got of a sequence is dropped once it is
 * back, ended, or its move stopped (the engine drops keys between rounds). */
static void ss_tiers_emptied(struct ss *s)
{
	uint64_t n = 0;

	for (long i = 0; (n = ss_tier_sequences(s)) != 0; i++) {
		if (i == 200)
			ss_fail(s, 0,
			        "the tiers still hold %llu sequences after every request ended",
			        (unsigned long long)n);
		ss_round(s);
		usleep(1000);
	}
}

static void ss_open(struct ss *s)
{
	const struct ss_pool *p = &s->pool;
	struct ig_errbuf eb = {0};
	struct rig *g = &s->sh->rig;
	uint64_t pb = mdesc_page_bytes(&g->f.desc, MDESC_KV_BF16);
	struct eng_cfg cfg = {.lanes = p->lanes,
	                      .chunk = p->chunk,
	                      .context = SS_CONTEXT,
	                      .default_max_tokens = p->default_max,
	                      .fmt = MDESC_KV_BF16,
	                      .max_requests = SS_MAXREQ,
	                      .eos = UINT32_MAX,
	                      .window_out = p->window,
	                      .window_in = p->window_in,
	                      .tier_nonce = 7,
	                      .ctx = s,
	                      .on_event = ss_on_event};

	daemon_open(&s->k, "sched", p->ram, p->disk ? SS_DISK : 0);
	if (kvc_open(&s->kout, s->k.dir, &eb) || kvc_open(&s->kin, s->k.dir, &eb))
		ss_fail(s, 0, "kvc_open: %s", eb.msg);
	cfg.kv_out = s->kout;
	cfg.kv_in = s->kin;
	/* the script's pool, in the backend's memory as the rig's own */
	s->region_bytes = (uint64_t)p->pages * pb;
	if (g->be.ops->alloc(&g->be, s->region_bytes, &s->region, &eb) ||
	    kvpool_init(&s->kv, s->region, pb, p->pages, &eb))
		ss_fail(s, 0, "a pool of %u pages: %s", p->pages, eb.msg);
	s->kv_open = true;
	if (eng_create(&s->e, &g->be, &g->d, &s->kv, &cfg, &eb))
		ss_fail(s, 0, "eng_create: %s", eb.msg);
	/* both clients map KV-RAM in the background from kvc_open: wait for it,
	 * so that the script's first move does not take that time in rounds */
	for (int ms = 0; !kvc_arena(s->kout).gen || !kvc_arena(s->kin).gen; ms++) {
		if (ms == 10000)
			ss_fail(s, 0, "the kvstore clients did not map KV-RAM within 10 s");
		usleep(1000);
	}
}

/* Undo ss_open, whatever it got to (also the teardown of a failed script). */
static void ss_close(struct ss *s)
{
	eng_destroy(s->e);
	s->e = NULL;
	kvc_close(s->kout);
	kvc_close(s->kin);
	s->kout = s->kin = NULL;
	if (s->kv_open) {
		kvpool_release(&s->kv);
		s->sh->rig.be.ops->free(&s->sh->rig.be, s->region, s->region_bytes);
		s->kv_open = false;
	}
	if (s->k.pid || s->k.dir[0])
		daemon_close(&s->k);
}

/* Request r alone on the rig's pool with no tier (nothing can move), run
 * until it has `want` tokens; into ref. */
static void ss_alone(struct ss *s, const struct ss_req *r, uint32_t want, uint32_t *ref,
                     uint32_t *n_ref)
{
	struct rig *g = &s->sh->rig;
	struct eng_cfg cfg = {.lanes = 1,
	                      .chunk = 64,
	                      .context = SS_CONTEXT,
	                      .default_max_tokens = s->pool.default_max,
	                      .fmt = MDESC_KV_BF16,
	                      .max_requests = 1,
	                      .eos = UINT32_MAX};
	struct eng_req er = {r->prompt, r->n_prompt, r->max, r->cls, r->smp, NULL, NULL, 0, false};
	struct ig_errbuf eb = {0};
	struct eng_admission adm;
	struct eng_status st = {0};
	struct eng *e;

	if (eng_create(&e, &g->be, &g->d, &g->kv, &cfg, &eb) || eng_submit(e, &er, &adm, &eb))
		ss_fail(s, 0, "%s alone: %s", r->name, eb.msg);
	for (;;) {
		uint32_t ran;

		if (eng_tokens(e, adm.id, 0, SS_CONTEXT, ref, n_ref, &st, &eb))
			ss_fail(s, 0, "%s alone: %s", r->name, eb.msg);
		if (st.phase == SCHED_DONE || *n_ref >= want)
			break;
		if (eng_round(e, &ran, &eb) || ran == 0)
			ss_fail(s, 0, "%s alone: stuck (%s)", r->name, eb.msg);
	}
	eng_destroy(e);
	if (g->kv.n_free != g->kv.n_pages)
		ss_fail(s, 0, "%s alone: pages left held", r->name);
}

/* Every request's tokens against its run alone. */
static void ss_compare(struct ss *s)
{
	static uint32_t ref[SS_CONTEXT];

	for (uint32_t i = 0; i < s->n_req; i++) {
		struct ss_req *r = &s->req[i];
		struct ig_errbuf eb = {0};
		struct eng_status st;
		uint32_t n_ref = 0;

		if (eng_tokens(s->e, r->id, 0, SS_CONTEXT, r->out, &r->n_out, &st, &eb))
			ss_fail(s, 0, "reading %s: %s", r->name, eb.msg);
		if (st.finish != ENG_CANCELLED && r->n_out != r->adm.max_tokens)
			ss_fail(s, 0, "%s generated %u tokens; its cap is %u", r->name, r->n_out,
			        r->adm.max_tokens);
		ss_alone(s, r, r->n_out, ref, &n_ref);
		if (n_ref < r->n_out)
			ss_fail(s, 0, "%s: %u tokens, alone only %u", r->name, r->n_out, n_ref);
		for (uint32_t t = 0; t < r->n_out; t++)
			if (r->out[t] != ref[t])
				ss_fail(s, 0,
				        "%s (%s, %s%s%s): token %u is %u; alone it is %u (the "
				        "same request where nothing moves)",
				        r->name, sched_class_name(r->cls),
				        r->seeded ? "seeded" : "greedy",
				        r->count[SE_EVICTED] ? ", moved" : "",
				        r->count[SE_LOST] ? ", lost" : "", t, r->out[t], ref[t]);
	}
}

static int ss_teardown(void **state)
{
	ss_close(*state);
	return 0;
}

static void test_script(void **state)
{
	struct ss *s = *state;
	struct eng_stats st;
	uint64_t moves = 0, lost = 0, t0 = clk_mono_us(), t1;

	if (!s->sh->rig_open) {
		rig_open(&s->sh->rig, "tiny-dense", SS_CONTEXT / MDESC_PAGE_TOKENS);
		s->sh->rig_open = true;
	}
	ss_parse(s);
	ss_open(s);
	for (uint32_t i = 1; i < s->n_ops; i++) {
		const struct ss_op *o = &s->ops[i];

		s->line = o->line;
		switch (o->k) {
		case OK_POOL:
			break;
		case OK_SUBMIT:
			ss_submit(s, &s->req[o->req]);
			break;
		case OK_ROUNDS:
			for (long n = 0; n < o->n; n++)
				ss_round(s);
			break;
		case OK_UNTIL:
			if (!s->req[o->req].submitted)
				ss_fail(s, o->line, "until: %s is not submitted yet",
				        s->req[o->req].name);
			for (long n = 0; !ss_reached(s, o); n++) {
				if (ss_all_done(s) && !eng_busy(s->e))
					ss_fail(s, o->line,
					        "until %s %s: everything is done and %s is %s "
					        "(round %ld)",
					        s->req[o->req].name,
					        o->phase >= 0 ? ss_st(o->phase)
					                      : ss_ev_names[o->ev],
					        s->req[o->req].name, ss_st(s->req[o->req].phase),
					        s->round);
				if (n == o->n)
					ss_fail(s, o->line,
					        "until %s %s: not reached within %ld rounds; it "
					        "is %s (round %ld)",
					        s->req[o->req].name,
					        o->phase >= 0 ? ss_st(o->phase)
					                      : ss_ev_names[o->ev],
					        o->n, ss_st(s->req[o->req].phase), s->round);
				ss_round(s);
			}
			break;
		case OK_CANCEL: {
			struct ig_errbuf eb = {0};

			if (!s->req[o->req].submitted || eng_cancel(s->e, s->req[o->req].id, &eb))
				ss_fail(s, o->line, "cancel %s: %s", s->req[o->req].name,
				        s->req[o->req].submitted ? eb.msg : "not submitted");
			ss_log(s, "%ld: %s cancelled", s->round, s->req[o->req].name);
			ss_poll(s);
			break;
		}
		case OK_DAEMON:
			kill(s->k.pid, o->n ? SIGCONT : SIGSTOP);
			ss_log(s, "%ld: the kvstore daemon %s", s->round,
			       o->n ? "goes on" : "stopped");
			break;
		case OK_FINISH:
			ss_finish(s, o->n);
			break;
		case OK_EXPECT:
			ss_expect(s, o);
			break;
		}
	}
	s->line = 0;
	for (uint32_t i = 0; i < s->n_req; i++)
		if (!s->req[i].submitted)
			ss_fail(s, 0, "%s is never submitted", s->req[i].name);
	ss_finish(s, SS_BOUND);
	ss_tiers_emptied(s);
	if (s->kv.n_free != s->kv.n_pages)
		ss_fail(s, 0, "%u of %u pages free at the end", s->kv.n_free, s->kv.n_pages);
	/* what the script did not expect fails it: a move, a loss, a refusal */
	for (uint32_t i = 0; i < s->n_req; i++) {
		const struct ss_req *r = &s->req[i];

		/* a victim whose move the tier refused, or that was stopped, is
		 * named by `expect refused` or `expect stopped` */
		if (r->count[SE_EVICTED] > (r->named_refused ? r->count[SE_REFUSED] : 0) +
		                               (r->named_stopped ? r->count[SE_STOPPED] : 0) &&
		    !r->named_moved)
			ss_fail(s, 0,
			        "%s was moved (for %s, round %ld), which the script does not "
			        "expect (expect moved %s)",
			        r->name, r->last_for >= 0 ? s->req[r->last_for].name : "?",
			        r->first[SE_EVICTED], r->name);
		if (r->count[SE_LOST] && !r->named_lost)
			ss_fail(s, 0, "%s was lost (round %ld), which the script does not expect",
			        r->name, r->first[SE_LOST]);
		if (r->count[SE_REFUSED] && !r->named_refused)
			ss_fail(s, 0,
			        "a move of %s was refused (round %ld), which the script does not "
			        "expect",
			        r->name, r->first[SE_REFUSED]);
		if (r->count[SE_STOPPED] && !r->named_stopped)
			ss_fail(s, 0,
			        "a move of %s was stopped (round %ld), which the script does not "
			        "expect",
			        r->name, r->first[SE_STOPPED]);
		moves += r->count[SE_EVICTED];
		lost += r->count[SE_LOST];
	}
	t1 = clk_mono_us();
	ss_compare(s);
	if (getenv("IGNIS_SCHED_TRACE"))
		for (uint32_t i = 0; i < s->n_log; i++)
			print_message("#   %s\n", s->log[i]);
	eng_stats(s->e, &st);
	print_message("# %s: %u requests, %ld rounds, %llu victims (%llu windows out, %llu in), "
	              "%llu lost: every request's tokens as alone (%.1f s, %.1f s of it "
	              "alone)\n",
	              s->name, s->n_req, s->round, (unsigned long long)moves,
	              (unsigned long long)st.move_out_windows,
	              (unsigned long long)st.move_in_windows, (unsigned long long)lost,
	              (double)(clk_mono_us() - t0) / 1e6, (double)(clk_mono_us() - t1) / 1e6);
}

static int ss_cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
	struct ss_shared sh = {0};
	struct CMUnitTest *tests;
	char *names[256];
	uint32_t n = 0;
	struct dirent *de;
	DIR *d;
	int rc;

	if (!getenv("IGNIS_KVSTORED") || access(getenv("IGNIS_KVSTORED"), X_OK) != 0) {
		fprintf(stderr,
		        "test-schedscript: IGNIS_KVSTORED=%s: not an executable "
		        "ignis-kvstored\n",
		        getenv("IGNIS_KVSTORED") ? getenv("IGNIS_KVSTORED") : "(unset)");
		return 1;
	}
	sh.dir = argc > 1 ? argv[1] : getenv("IGNIS_SCHED_SCRIPTS");
	if (!sh.dir || !(d = opendir(sh.dir))) {
		fprintf(stderr,
		        "test-schedscript: no scripts directory (%s); give it as the first "
		        "argument or in IGNIS_SCHED_SCRIPTS\n",
		        sh.dir ? sh.dir : "unset");
		return 1;
	}
	while ((de = readdir(d)) && n < 256) {
		size_t len = strlen(de->d_name);

		if (len > 4 && !strcmp(de->d_name + len - 4, ".ops"))
			names[n++] = strdup(de->d_name);
	}
	closedir(d);
	if (!n) {
		fprintf(stderr, "test-schedscript: no *.ops scripts in %s\n", sh.dir);
		return 1;
	}
	qsort(names, n, sizeof(names[0]), ss_cmp_names);
	tests = calloc(n, sizeof(*tests));
	assert_non_null(tests);
	sh.seed = test_seed("schedscript");
	for (uint32_t i = 0; i < n; i++) {
		struct ss *s = calloc(1, sizeof(*s));

		assert_non_null(s);
		s->sh = &sh;
		s->name = names[i];
		snprintf(s->path, sizeof(s->path), "%s/%s", sh.dir, names[i]);
		tests[i] = (struct CMUnitTest){names[i], test_script, NULL, ss_teardown, s};
	}
	if (getenv("IGNIS_SCHED_ONLY"))
		cmocka_set_test_filter(getenv("IGNIS_SCHED_ONLY"));
	signal(SIGPIPE, SIG_IGN);
	rc = _cmocka_run_group_tests("schedscript", tests, n, NULL, NULL);
	if (sh.rig_open)
		rig_close(&sh.rig);
	for (uint32_t i = 0; i < n; i++) {
		free(tests[i].initial_state);
		free(names[i]);
	}
	free(tests);
	return rc;
}
