/*
 * frontdoor.h - the supervisor's front door: the client socket
 * (--server-bind; by default ipc://<runtime-dir>/client.sock) where programs
 * submit generation requests, stream their tokens, cancel them, and read the
 * model's description and the door's figures (docs/protocol.md, "The front
 * door"; the design is docs/adr/0013-front-door.md).
 *
 * Threads, none of them the supervisor's loop:
 *   - nng's: a REP socket with contexts. DOOR_RECEIVERS contexts always wait
 *     for a request; a poll that waits for tokens, or a submit that waits
 *     for a worker slot, parks its context and another takes its place, so
 *     a waiting or slow client never holds up another.
 *   - the pump: the only thread that talks to the gpu-worker (submit,
 *     poll_many for up to 64 requests at once, cancel), one round trip at a
 *     time, never holding the lock across one.
 *   - the clock: answers parked polls whose wait ran out; forgets finished
 *     requests nobody reads and cancels running ones nobody polls.
 *   - the listener's guard (proto/lisguard.h): finds nng 1.5.2's wedged
 *     listener within 20 ms and re-creates it, connected clients keeping
 *     their pipes on ipc; a ping every watchdog_ms is its safety net
 *     (docs/adr/0018).
 * One mutex guards all the door's state and is held for bookkeeping only.
 *
 * The door gives requests its own ids (1, 2, ... for the supervisor's life):
 * they outlive a worker restart, after which a request that was running
 * ends with finish "error" (code 40) and its message, never with a hang.
 */
#ifndef IGNIS_SUPERVISOR_FRONTDOOR_H
#define IGNIS_SUPERVISOR_FRONTDOOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"
#include "common/model.h"

#define DOOR_RECEIVERS 48   /* contexts always waiting for a request */
#define DOOR_SLOTS_MAX 4096 /* contexts in all: receiving, answering, parked */
#define DOOR_QUEUE_MAX                                                                             \
	65536                 /* submits waiting for a worker slot, at most                        \
	                         (door_opts.queue_max: --server-max-queued) */
#define DOOR_KEEP_MAX   1024  /* finished requests kept readable */
#define DOOR_KEEP_MS    60000 /* ... for this long after their last poll */
#define DOOR_ABANDON_MS 60000 /* a running request nobody polls this long is cancelled */
#define DOOR_CALL_MS    10000 /* one round trip with the worker */
/* A pass of the pump is one flight of requests to the worker, at most: */
#define DOOR_POLL_FLIGHTS   64  /* poll_manys (64 requests each: 4096 in all) */
#define DOOR_FLIGHT_CANCELS 128 /* cancels */
#define DOOR_FLIGHT_SUBMITS 256 /* submits */
#define DOOR_FLIGHT_LPS     64  /* poll_lps (requests asking log-probabilities) */
#define DOOR_FLIGHT_PROMPTS 64  /* poll_lps of prompts (echo; docs/adr/0063) ... */
#define DOOR_PROMPT_AHEAD   4   /* ... up to this many a request: 4 x 16 positions */
#define DOOR_FLIGHT_MAX                                                                            \
	(DOOR_POLL_FLIGHTS + DOOR_FLIGHT_CANCELS + DOOR_FLIGHT_SUBMITS + DOOR_FLIGHT_LPS +         \
	 DOOR_FLIGHT_PROMPTS)
#define DOOR_WATCHDOG_MS 5000

/* What the door tells clients about the model (from the supervisor's plan;
 * docs/protocol.md, fd_model_reply). */
struct door_model {
	char name[65], backend[17], kv_format[17];
	uint64_t vocab, context_tokens, page_tokens, pool_pages;
	uint64_t lanes, chunk_tokens, default_max_tokens;
	uint64_t max_requests;          /* the worker's (--server-max-requests) */
	enum mdesc_tokenizer tokenizer; /* the model description's */
	uint32_t eos;                   /* UINT32_MAX: none */
	bool serving;                   /* a model file is loaded, not a built-in description */
};

struct door_opts {
	const char *bind;  /* --server-bind; NULL or "": ipc://<rtdir>/client.sock */
	const char *rtdir; /* the runtime directory (the worker's socket, locks) */
	struct door_model model;
	int watchdog_ms;    /* 0: DOOR_WATCHDOG_MS */
	uint32_t queue_max; /* submits waiting for a worker slot; 0: 4096 */
};

struct door;
struct msg;
struct msg_plan;

/* The model's description from the worker's plan and the model `md` (its
 * vocabulary, its tokenizer and the end-of-sequence id that follows). */
void door_model_of(const struct msg_plan *pl, const struct mdesc *md, struct door_model *m);

/* Take the lock beside the socket (ipc: <path without .sock>.lock; tcp:
 * <rtdir>/client.lock), listen, and start the threads. IG_E_BUSY when
 * another process holds the lock or the address is in use. */
int door_open(struct door **out, const struct door_opts *o, struct ig_errbuf *eb);
/* The messages the door refused (they did not decode, or were of a type it
 * does not take), the submits it holds until the worker takes them (queued
 * or being sent), and the waiting submits it refused to make room for
 * another peer's. */
void door_counts(struct door *d, uint64_t *rejected, uint64_t *queued, uint64_t *displaced);
/* The front door has no access control: a tcp `bind` must be loopback
 * (127.0.0.0/8, ::1, or a name that resolves only to those) unless
 * `allow_remote` (--server-allow-remote). IG_E_CONFIG naming the knob. An
 * ipc or empty `bind` passes. */
int door_check_bind(const char *bind, bool allow_remote, struct ig_errbuf *eb);
/* True when HOST of "HOST:PORT" ("[::1]:PORT" too) is loopback: 127.0.0.0/8,
 * ::1, or a name that resolves only to those (the rule of door_check_bind,
 * which the HTTP API shares). */
bool door_hostport_is_loopback(const char *hostport);
/* The supervisor's view of the gpu-worker, told every loop turn: its pid
 * when running (0 otherwise) and its state's name (a static string). A
 * change of pid ends the requests the old worker was running. Quick: takes
 * the lock, never waits on I/O. */
void door_set_worker(struct door *d, pid_t pid, const char *state);
/* Stop the threads, close the socket, remove its files, free `d`. NULL is
 * accepted. Close the in-process clients (the HTTP API) first. */
void door_close(struct door *d);

/*
 * In-process clients (the HTTP API): a request submitted here takes the
 * same queue, fairness, checks and pump into the worker as an nng client's
 * fd_submit, with no socket between (docs/adr/0041). Each request is a
 * handle the caller holds until door_local_release; the door tells of news
 * by calling the caller's wake function, once per arming.
 *
 * Peers: the door shares its queue between peers (an nng client's
 * connection; an in-process client's key, the HTTP API's a remote
 * address): a full queue takes a submit from a peer with fewer waiting
 * than the one holding the most, whose newest waiting submit is refused to
 * make room, and free worker slots go to the waiting submit of the peer
 * holding the fewest requests at the worker and in the queue before it.
 */
struct door_req;

/* What door_local_read saw. Strings are copies: they stay valid. */
struct door_news {
	uint64_t id;      /* the door's id (as fd_submitted's) */
	uint64_t version; /* changes with every news; pass it back to read */
	bool admitted;    /* the worker took it: prompt_tokens, max_tokens hold */
	bool done;        /* nothing follows: finish, code, message hold */
	bool refused;     /* done without being admitted: code, message say why */
	/* echo (fd_submit.echo): the prompt's tokens, text and log-probabilities
	 * are all kept (door_local_prompt); a request done without it ended in
	 * error */
	bool prompt_in;
	uint32_t prompt_tokens, max_tokens, generated, cached;
	char state[17];  /* as fd_tokens' state */
	char finish[17]; /* "" until done; "error" with code and message */
	int code;        /* refused or finish "error": an IG_E_* code */
	char message[512];
};

/*
 * Submit `q` (a message of type MSG_FD_SUBMIT: checked as msg_decode would
 * check it, then as the door checks an fd_submit) for peer `peer`. It is
 * encoded once, into the message the request holds and the worker is sent
 * (docs/adr/0043): `q` and the strings it points at are the caller's again
 * on return. IG_E_OK and *out, or the door's refusal (the code and message
 * an nng client would get) with nothing held. Admission by the worker
 * comes later, as news.
 */
int door_local_submit(struct door *d, const struct msg *q, uint64_t peer, struct door_req **out,
                      struct ig_errbuf *eb);
/*
 * News of `l` since `*version` (0 at first). 1 when there is some (a
 * version other than the caller's): *news is filled, the text of the new
 * tokens (from *from to news->generated: the worker's text for them; once
 * done, with its final U+FFFD) appended to *text (realloc'd, kept
 * NUL-terminated; *text_len grows), and *from and *version advanced. 0 when
 * there is none. -1 when there was no memory for the text (nothing taken:
 * try again).
 */
int door_local_read(struct door *d, struct door_req *l, uint64_t *version, uint32_t *from,
                    struct door_news *news, char **text, size_t *text_len);
/* The log-probabilities of one token (door_local_logprobs): `e[0]` the
 * sampled token's, then its top list, likeliest first; each with its id,
 * its log-probability (<= 0; -MSG_LP_FLOOR for -infinity) and its piece
 * (the bytes the token stands for, not necessarily whole UTF-8). text_off
 * and text_end: the bytes of the request's text (of the prompt's, for
 * door_local_prompt_logprobs) before this token's and once it is added.
 * n 0: none (the prompt's first token). */
#define DOOR_LP_MAX    21u  /* 1 + MSG_TOP_LP_MAX */
#define DOOR_PIECE_MAX 256u /* TOK_PIECE_MAX */
struct door_lp_tok {
	uint32_t n;
	uint32_t text_off, text_end;
	struct {
		uint32_t id;
		double lp;
		uint32_t len;
		uint8_t bytes[DOOR_PIECE_MAX];
	} e[DOOR_LP_MAX];
};

/* Token `i` (below news->generated) of `l`, submitted with logprobs, into
 * *out: 0, or -1 when it has none. */
int door_local_logprobs(struct door *d, struct door_req *l, uint32_t i, struct door_lp_tok *out);
/* The prompt of `l`, submitted with echo, once news->prompt_in: the
 * worker's text of it (its specials give none; a final U+FFFD for a cut
 * character), a malloc'd NUL-terminated copy into *text (the caller frees
 * it), *len bytes, and its *n tokens. 0, or -1 when it is not in (or no
 * memory). */
int door_local_prompt(struct door *d, struct door_req *l, char **text, size_t *len, uint32_t *n);
/* Prompt token `i` (below its *n) of `l` into *out, as door_local_logprobs
 * (n 0 at position 0, which has none); text_off and text_end in the
 * prompt's text. 0, or -1 when it has none. */
int door_local_prompt_logprobs(struct door *d, struct door_req *l, uint32_t i,
                               struct door_lp_tok *out);

/*
 * Arm `wake` for the next news of `l` after `version`: called once, from a
 * door thread and under the door's lock (so it must only signal), at that
 * news or after `wait_ms` without any; an armed wake is replaced. True when
 * armed; false, with nothing armed, when there is news already (read it).
 */
bool door_local_wait(struct door *d, struct door_req *l, uint64_t version, uint32_t wait_ms,
                     void (*wake)(void *arg), void *arg);
/* Done with `l`: a request still waiting is withdrawn, one running is
 * cancelled, one finished forgotten; no wake of it is called after this
 * returns. NULL is accepted. */
void door_local_release(struct door *d, struct door_req *l);

#endif
