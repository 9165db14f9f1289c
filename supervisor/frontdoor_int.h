/*
 * frontdoor_int.h - the front door's parts, inside the supervisor: its
 * state, a request's record, and what each part offers the others. Only
 * frontdoor*.c include it. The parts, one file each:
 *
 *   frontdoor.c        open and close, the addresses and their locks, the
 *                      supervisor's hooks (door_set_worker, door_counts)
 *   frontdoor_req.c    requests: the id table, their states and views,
 *                      their ends, the queue's fairness between peers, the
 *                      door's checks of a submit, and the clock
 *   frontdoor_nng.c    nng clients: the contexts, their callback, the
 *                      answers to each request, connections that close
 *   frontdoor_pump.c   the pump: the only thread that talks to the worker,
 *                      a pass a flight (polls, cancels, submits)
 *   frontdoor_local.c  in-process clients (door_local_*: the HTTP API)
 *
 * The door forwards a submit as it came (docs/adr/0043): an nng client's
 * fd_submit message, or the one message an in-process submit is encoded
 * into, re-tagged as the worker's submit (msg_retag), is the request's
 * storage until the worker admits it.
 *
 * A request's life, and who moves it (all under d->mu):
 *
 *   QUEUED      fd_submit took it (nng callback); its client's context is
 *               parked until the worker admits or refuses it
 *   SUBMITTING  the pump is sending it to the worker
 *   RUNNING     admitted: the pump polls its tokens (poll_many) and appends
 *               them to out.toks[], and the text the worker sent with them
 *               to out.text[] (out.tend[i]: its bytes once token i is
 *               added); with echo, the prompt's to prm likewise
 *   DONE        finished at the worker (a stop string included: the worker
 *               checks them), cancelled, or lost with its worker; readable
 *               until forgotten
 *
 * The door decodes nothing: the text is the worker's (docs/adr/0025), and
 * the worker holds back the tokens that could begin a stop string. A
 * request leaves the worker's table by cancels the pump sends (wcancels:
 * two for one still running, stop then forget; one for one finished there).
 * A forgotten request is freed once those are sent. Invariants: out.n ==
 * recv; out.tend[] ascends and ends at or below out.tlen (beyond it, once
 * done, the worker's final U+FFFD); a DONE request that asked echo and
 * did not end in error has prompt_in; a RUNNING request has a worker id and the pid of
 * the worker that admitted it (wpid), and an answer from any other pid ends
 * it.
 */
#ifndef IGNIS_SUPERVISOR_FRONTDOOR_INT_H
#define IGNIS_SUPERVISOR_FRONTDOOR_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <nng/nng.h>

#include "common/event.h"
#include "frontdoor.h"
#include "proto/lisguard.h"
#include "proto/msg.h"
#include "proto/service.h"
#include "proto/transport.h"

enum door_slot_st { SLOT_SPARE, SLOT_RECV, SLOT_SEND, SLOT_PARKED };

/* One nng context and its aio. */
struct door_slot {
	struct door *d;
	nng_ctx ctx;
	nng_aio *aio;
	enum door_slot_st st;
	bool poll;             /* PARKED: a poll (else a submit) */
	uint64_t req;          /* PARKED: the request's door id */
	uint32_t from, max;    /* PARKED poll */
	uint64_t deadline_ms;  /* PARKED poll */
	uint32_t pipe;         /* the connection its request came on */
	struct door_slot *nxt; /* spare list, or the request's waiters */
};

enum door_rq { RQ_QUEUED, RQ_SUBMITTING, RQ_RUNNING, RQ_DONE };

/* One log-probability a request holds: a token id, its lp, its piece. */
struct door_lpe {
	uint32_t id;
	double lp;
	uint32_t off, len; /* in its run's lpb */
};

/* A run of tokens the worker sent, held twice in a request: its output,
 * and (echo; docs/adr/0063) its prompt. toks[0..n), the worker's text for
 * them (tend[i]: its bytes once token i is added; beyond the last end, once
 * the run is whole, the worker's final U+FFFD up to tlen), and with
 * log-probabilities (docs/adr/0053) token i's entries lpe[lp_at[i] ..
 * lp_at[i + 1]) (the last's up to nlpe): the token's own, then its top list
 * (none for the prompt's first position); each entry's piece at
 * lpb[off, off + len). Invariants: tend[] ascends within tlen; with
 * log-probabilities lp_at holds n starts, ascending, within nlpe. */
struct door_run {
	uint32_t *toks, *tend, n, cap, ecap;
	char *text;
	uint32_t tlen, tcap;
	struct door_lpe *lpe;
	uint32_t *lp_at, lp_at_cap, nlpe, lpe_cap;
	uint8_t *lpb;
	uint32_t nlpb, lpb_cap;
};

struct door_req {
	uint64_t id;
	enum door_rq st;
	bool forgotten; /* no client can see it; freed once wcancels is 0 */
	/* the submit as it came (an nng client's message, or the one message
	 * an in-process client's was encoded into), re-tagged for the worker
	 * (msg_retag): the request's storage until the worker admits it; each
	 * attempt sends a duplicate, as nng frees what it sends once answered */
	nng_msg *sub;
	struct door_slot *submitter;
	char cls[17];
	bool slot_waited; /* counted in n_slot_waits */
	bool withdrawn;   /* its client left while the worker admitted it */
	/* at the worker */
	uint64_t wid;
	pid_t wpid;
	uint32_t prompt_tokens, max_tokens, reserved_pages;
	uint8_t wcancels;
	/* output: the tokens, the worker's text for them, and (`lp`:
	 * fd_submit.logprobs; docs/adr/0053) their log-probabilities, polled
	 * with poll_lp, which brings them with their tokens. recv == out.n */
	struct door_run out;
	uint32_t recv;
	uint32_t cached; /* prompt tokens the worker took from a checkpoint */
	bool lp;
	uint32_t lp_top;
	/* echo (fd_submit.echo, only with lp; docs/adr/0063): the prompt's
	 * tokens, text and log-probabilities, polled with poll_lp's `prompt`
	 * once the worker has the first token (or the request is done there:
	 * wdone) until all prompt_tokens are in (prompt_in). A request done at
	 * the worker is finished here only once prompt_in, so a reader told
	 * it is done has them all; one done there with fewer ends in error. */
	bool echo, prompt_in, wdone;
	struct door_run prm;
	char phase[17], finish[17];
	int code;
	char *message; /* finish "error" */
	uint64_t created_ms, admitted_ms, touched_ms;
	struct door_slot *waiters; /* parked polls */
	struct door_req *prev, *next;
	struct door_req *hnext; /* the id table's chain */
	/* fairness: the peer it came from (an nng client's connection, or an
	 * in-process client's key) */
	uint64_t peer;
	/* in process (door_local_*): held by its caller until released (never
	 * forgotten before), refused there as news rather than by a reply; each
	 * news adds to ver and calls wake, once per arming, or at wake_at_ms */
	bool local, held, refused;
	uint32_t rank;      /* door__board_submits': what its peer holds ahead of it */
	uint64_t served;    /* ... and when its peer was last served (board_seq) */
	uint64_t board_seq; /* when it was sent to the worker (d->board_seq) */
	uint64_t ver;
	void (*wake)(void *arg);
	void *wake_arg;
	uint64_t wake_at_ms;
};

/* The id table: requests by door id, which count up from 1, so that the
 * low bits spread them evenly: chains stay a request or two long at the
 * default load (1,024 worker slots, 4,096 waiting, 1,024 finished kept),
 * a few at the largest --server-max-queued. */
#define DOOR_ID_BUCKETS 8192u

/* A peer's share of the queue and the worker's slots, counted per pass. */
struct door_peer {
	uint64_t key;
	uint32_t queued, held;
	uint64_t served; /* the latest board_seq of its requests the door still has */
	bool used;
};

struct door {
	pthread_mutex_t mu;
	pthread_cond_t pump_cv, clock_cv;
	bool closing;

	nng_socket sock;
	struct lisguard guard;
	bool guard_on;
	char url[TP_PATH_MAX + 16];
	char ipc_path[TP_PATH_MAX];
	char lockpath[TP_PATH_MAX + 8];
	char rtdir[TP_PATH_MAX];
	int lockfd;
	struct door_model model;
	int watchdog_ms;
	uint64_t started_ms;

	struct door_slot **slots;
	uint32_t nslots, receiving, parked;
	struct door_slot *spare;

	struct door_req *head, *tail;
	struct door_req **ids; /* DOOR_ID_BUCKETS chains */
	uint64_t next_id;
	/* scratch of the fairness rules (under mu): a peer table and the
	 * queued submits of a pass */
	struct door_peer *peers;
	uint32_t npeers_cap;
	struct door_req **cand;
	uint64_t board_seq; /* submits sent to the worker, counted */
	uint32_t queued, running, kept;
	uint32_t queue_max; /* submits waiting for a worker slot, at most */
	uint64_t submit_blocked_until;

	pid_t wpid; /* the worker the supervisor sees running; 0 none */
	const char *wstate;
	uint64_t wrestarts;
	nng_socket ws; /* the pump's socket to the worker */
	bool ws_open;
	uint64_t (*poll_ids)[MSG_POLL_MANY_MAX]; /* the pump's: a flight's polled ids */
	uint64_t lp_cursor;     /* the pump's: the last request polled with poll_lp */
	uint64_t prompt_cursor; /* ... and with poll_lp's prompt */

	uint64_t n_submitted, n_finished, n_failed, n_refused, n_rejected, n_tokens;
	uint64_t n_slot_waits;
	struct svc_rejects rejects; /* messages that did not decode */
	uint64_t n_withdrawn;       /* submits whose client left before an answer */
	uint64_t n_displaced;       /* queued submits refused to make room for another peer's */
	struct ev_limit withdrawn_limit;
	struct msg *out; /* replies are built here, under mu */

	pthread_t pump, clock;
	bool pump_on, clock_on;
};

/* ---- frontdoor_req.c: requests -------------------------------------------- */

void door__wait(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t ms);
/* A request by door id: any (`internal`, the pump's view), or one a client
 * may see (admitted and not forgotten). */
struct door_req *door__find(struct door *d, uint64_t id, bool internal);
void door__set_st(struct door *d, struct door_req *r, enum door_rq st);
void door__free_req(struct door *d, struct door_req *r);
/* ---- request views ----------------------------------------------------------- */
const char *door__state(const struct door_req *r);
/* The worker's text of tokens [0, k) of run `u`: its bytes; with `end` (k
 * is every token of a whole run: a finished request's output, a prompt)
 * the worker's final U+FFFD included. */
uint32_t door__text_to(const struct door_run *u, uint32_t k, bool end);
/* Token i (< u->n) of run `u`'s log-probabilities into *out
 * (door_lp_tok); -1 when the run has none. */
int door__run_lp(const struct door_run *u, uint32_t i, struct door_lp_tok *out);
void door__run_release(struct door_run *u);
/* Something about `r` changed: its in-process reader is told. */
void door__news(struct door_req *r);
/* Answer the parked polls of `r` that have something new (or all of them),
 * and tell its in-process reader. */
void door__wake(struct door *d, struct door_req *r, bool all);
/* End a request here (its output so far stays readable). */
void door__finish(struct door *d, struct door_req *r, const char *finish, int code,
                  const char *message);
/* Forget a request for clients; freed once the worker forgot it too. */
void door__forget(struct door *d, struct door_req *r);
/* Every running request of worker `pid` ends with a clear error. */
void door__lose_worker(struct door *d, pid_t pid, const char *why);
/* An empty peer table for up to `n` peers (false: no memory). */
bool door__peers_reset(struct door *d, uint32_t n);
/* Peer `key`'s row (open addressing: the table is at least twice the peers
 * put in it). */
struct door_peer *door__peer(struct door *d, uint64_t key);
/* The requests in the door, for the size of a peer table. */
uint32_t door__nreqs(const struct door *d);
/* Refuse a submit that was taken (queued, or answered by the worker): its
 * nng client is answered with the error, its in-process reader told. */
void door__refuse(struct door *d, struct door_req *r, int code, const char *message);
/* The door's checks of a submit `q` from `peer`, and the request made of
 * it, queued, holding `nm` (q's message, re-tagged: owned by the request
 * from here on). NULL, with *code and text[] saying why, when refused:
 * the caller keeps `nm` then. */
struct door_req *door__take(struct door *d, const struct msg_fd_submit *q, nng_msg *nm,
                            uint64_t peer, int *code, char *text, size_t cap);
/* The clock's thread (`arg` the door): answers parked polls whose wait ran
 * out, wakes in-process readers at theirs, cancels running requests nobody
 * polls and forgets finished ones nobody reads. */
void *door__clock(void *arg);

/* ---- frontdoor_nng.c: nng clients ----------------------------------------- */

/* A msg_write_fn appending to the nng message `ctx`. */
int door__append(void *ctx, const char *buf, size_t len);
/* Encode `m` and send it on the slot's context (asynchronously: the
 * callback sees SLOT_SEND when it is gone). Called under mu. */
void door__send_msg(struct door *d, struct door_slot *s, const struct msg *m);
/* Answer the slot's client with an error: `code` and `text`. Under mu. */
void door__send_error(struct door *d, struct door_slot *s, int code, const char *text);
/* Keep DOOR_RECEIVERS contexts waiting for requests. */
void door__arm(struct door *d);
/* Answer the slot's parked or new poll of `r` with an fd_tokens. Under mu. */
void door__reply_tokens(struct door *d, struct door_slot *s, struct door_req *r);
/* A client's connection closed (it exited, was killed, or its pipe went
 * with a retired listener): what it waits for goes. A submit still queued
 * is dropped, one being admitted is cancelled once admitted, parked polls
 * free their contexts. A client that is still there sends its request
 * again on its new connection (nng's REQ does), so nothing runs twice. */
void door__pipe_gone(nng_pipe p, nng_pipe_ev ev, void *arg);

/* ---- frontdoor_pump.c: the worker's side ---------------------------------- */

/* The pump's thread (`arg` the door). */
void *door__pump(void *arg);

#endif
