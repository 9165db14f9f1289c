/*
 * ignis_client.h - the C client of an Ignis server's front door
 * (libignis-client; pkg-config name `ignis-client`).
 *
 * Synchronous and simple: connect, submit a request, read its tokens as they
 * come, cancel it; ask a request's state, the model's description and the
 * server's figures. The wire protocol is docs/protocol.md, "The front door".
 *
 *     struct igc_client *c;
 *     struct igc_error err;
 *     struct igc_params p;
 *     struct igc_submitted sub;
 *     struct igc_stream *s;
 *     struct igc_chunk ch;
 *
 *     if (igc_connect(&c, NULL, NULL, &err))          // the default server
 *             die(err.message);
 *     igc_params_init(&p);
 *     p.text = "hello";
 *     p.max_tokens = 32;
 *     if (igc_submit(c, &p, &sub, &err) || igc_stream_open(c, sub.id, &s, &err))
 *             die(err.message);
 *     do {
 *             if (igc_stream_next(s, 1000, &ch, &err))
 *                     die(err.message);               // tokens in ch came first
 *             fwrite(ch.text, 1, ch.text_len, stdout);
 *     } while (!ch.done);
 *     igc_stream_close(s);                             // forgets the request
 *     igc_close(c);
 *
 * Threads: one igc_client is one connection carrying one exchange at a time;
 * use one client per thread (or a lock around one). Requests belong to the
 * server, not the connection: any client may read or cancel any id.
 *
 * Errors: every function that can fail returns 0 or an error code and fills
 * the caller's igc_error (which may be NULL) with the code and a message
 * naming what failed and what is accepted. Codes are the server's own
 * (docs/protocol.md lists them); igc_code_name and igc_strerror describe
 * them.
 */
#ifndef IGNIS_CLIENT_H
#define IGNIS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The codes a client meets most (all are in docs/protocol.md). */
enum igc_code {
	IGC_OK = 0,
	IGC_E_NOMEM = 1,
	IGC_E_INVAL = 2,        /* a bad value (the message names the field) */
	IGC_E_TIMEOUT = 4,      /* no answer in time: is the server running? */
	IGC_E_CLOSED = 5,       /* the connection closed */
	IGC_E_BUSY = 6,         /* no room now (queue full, no model served) */
	IGC_E_NOTFOUND = 7,     /* unknown or forgotten request id; no server at the address */
	IGC_E_PERM = 9,         /* another user's runtime directory or socket */
	IGC_E_TRANSPORT = 10,   /* a transport failure (bad address...) */
	IGC_E_FIELD_RANGE = 27, /* a field outside what is accepted */
	IGC_E_WORKER = 40,      /* the gpu-worker restarted under the request */
	IGC_E_CONTEXT = 50,     /* the prompt leaves no room in the context */
	IGC_E_POOL = 51,        /* the request is larger than the whole KV pool */
};

struct igc_error {
	int code;
	char message[512];
};

/* "IG_E_BUSY" style name of a code ("IG_E_UNKNOWN" for others). */
const char *igc_code_name(int code);
/* One line describing a code. */
const char *igc_strerror(int code);

struct igc_client;

/* Connect to `server` ("ipc:///path" or "tcp://HOST:PORT"); NULL means
 * $IGNIS_SERVER_BIND, else ipc://<runtime dir>/client.sock with the runtime
 * directory `runtime_dir`, else $IGNIS_RUNTIME_DIR, else
 * $XDG_RUNTIME_DIR/ignis, else /tmp/ignis-$UID (the supervisor's own
 * defaults). Fails at once, saying why, when no supervisor serves there:
 * IGC_E_NOTFOUND (no such runtime directory, or nothing holds the lock
 * beside the socket), IGC_E_PERM (another user's directory or socket),
 * IGC_E_CLOSED or IGC_E_TRANSPORT (a tcp address that refuses the
 * connection). A connection lost later is made again in the background.
 * On success the caller owns *out and frees it with igc_close. */
int igc_connect(struct igc_client **out, const char *server, const char *runtime_dir,
                struct igc_error *err);
/* Close the connection and free `c` (NULL accepted). */
void igc_close(struct igc_client *c);
/* The address connected to; valid while `c` lives. */
const char *igc_server(const struct igc_client *c);
/* How long one exchange may take, in ms (default 30000). A submit waits
 * longer: while every worker slot is taken the server holds it, and
 * igc_set_submit_timeout bounds that wait (default 600000). */
void igc_set_timeout(struct igc_client *c, int ms);
void igc_set_submit_timeout(struct igc_client *c, int ms);

/* A generation request. */
struct igc_params {
	const char *text;    /* the prompt as text (NULL when ids are given) */
	const uint32_t *ids; /* or as token ids */
	size_t n_ids;
	uint32_t max_tokens;     /* 0: the model's default */
	const char *cls;         /* "interactive" (default) or "agent" */
	double temperature;      /* 0: greedy (default) */
	double top_p;            /* 1: off (default) */
	uint32_t top_k;          /* 0: off (default) */
	uint64_t seed;           /* default 0 */
	const char *const *stop; /* up to 8 stop strings, 1..64 bytes each */
	size_t n_stop;
	/* Constrained decoding (docs/adr/0057), NULL for none: a grammar in the
	 * text form of the protocol's submit.grammar (root rule "root"), or a
	 * JSON Schema's text, not both, each at most 98,304 bytes; with
	 * grammar_trigger (1..256 bytes) the output is free until it holds the
	 * trigger. A grammar the server cannot compile is IGC_E_FIELD_RANGE
	 * naming the line and column, or the place in the schema. */
	const char *grammar;
	const char *json_schema;
	const char *grammar_trigger;
};

/* The defaults above. */
void igc_params_init(struct igc_params *p);

struct igc_submitted {
	uint64_t id;             /* the request's id on this server */
	uint32_t prompt_tokens;  /* after tokenizing the text */
	uint32_t max_tokens;     /* the cap in effect */
	uint32_t reserved_pages; /* KV pages reserved for it */
	uint64_t queued_ms;      /* how long it waited for a worker slot */
};

/* Submit a request. Returns once the server's worker admitted it (it may
 * still wait there for room; it is never refused later) or refused it:
 * IGC_E_FIELD_RANGE or IGC_E_INVAL naming the field, IGC_E_CONTEXT,
 * IGC_E_POOL, IGC_E_BUSY. */
int igc_submit(struct igc_client *c, const struct igc_params *p, struct igc_submitted *out,
               struct igc_error *err);

/* ---- streaming ---- */

struct igc_stream;

/* What one igc_stream_next brought. Pointers stay valid until the next call
 * on the stream. */
struct igc_chunk {
	uint32_t from;       /* index of ids[0] among the request's tokens */
	const uint32_t *ids; /* the new tokens, in order */
	size_t n;
	const char *text; /* the text they add, as the server sent it: valid
	                     UTF-8 without NUL (a 0 byte is U+FFFD); a character
	                     split over tokens comes whole, once, in the chunk
	                     that completes it; specials and models of ids only
	                     give none; the last chunk of a finished request
	                     may hold a final incomplete character's U+FFFD */
	size_t text_len;
	bool done;          /* the request finished: nothing follows */
	const char *state;  /* "queued", "waiting", "prefill", "ready", "decode", "done" */
	const char *finish; /* when done: "length", "eos", "context", "stop",
	                       "cancelled" or "error" */
	uint32_t generated; /* tokens the request has (all received when done) */
	uint32_t cached;    /* prompt tokens the server took from a retained
	                       checkpoint instead of prefilling them (0 until the
	                       request is admitted, and without one) */
};

/* Follow request `id` from its first token. Caller owns *out
 * (igc_stream_close). */
int igc_stream_open(struct igc_client *c, uint64_t id, struct igc_stream **out,
                    struct igc_error *err);
/* The next tokens, waiting up to `wait_ms` (0..60000) for some: n is 0 when
 * none came in time. No token is lost, repeated or out of order. When the
 * request ended in an error (its worker restarted) the chunk carries the
 * last tokens, done is true, and the call returns that error. */
int igc_stream_next(struct igc_stream *s, int wait_ms, struct igc_chunk *out,
                    struct igc_error *err);
/* Stop following; a request that is done is forgotten on the server (a
 * running one is left running: igc_cancel stops it). NULL accepted. */
void igc_stream_close(struct igc_stream *s);

/* Stop a running request (its tokens so far stay readable, finish
 * "cancelled"), or forget a finished one. */
int igc_cancel(struct igc_client *c, uint64_t id, struct igc_error *err);

/* ---- questions ---- */

struct igc_request {
	uint64_t id;
	char state[17], cls[17], finish[17];
	uint32_t prompt_tokens, max_tokens, generated;
	bool done;
	int code;           /* when finish is "error" */
	char message[1025]; /* when finish is "error" */
	uint64_t age_ms;
	uint32_t cached; /* prompt tokens taken from a retained checkpoint */
};

int igc_status(struct igc_client *c, uint64_t id, struct igc_request *out, struct igc_error *err);

struct igc_model {
	char name[65], backend[17], kv_format[17];
	char tokenizer[17];  /* "bytes" (the byte-level tokenizer), or "none" (ids only) */
	char worker[17];     /* the gpu-worker's state: running, starting, ... */
	uint32_t vocab, eos; /* eos UINT32_MAX: none */
	uint64_t context_tokens, page_tokens, pool_pages;
	uint32_t lanes, chunk_tokens, default_max_tokens;
	bool serving; /* a model file is loaded (requests are taken) */
};

int igc_model_info(struct igc_client *c, struct igc_model *out, struct igc_error *err);

#define IGC_STATS_REQUESTS 64

struct igc_stats {
	uint64_t uptime_ms;
	char worker[17];
	uint32_t worker_pid;
	uint64_t worker_restarts;
	uint32_t live, queued, kept, waiting;
	uint64_t submitted, finished, failed, refused, rejected, tokens;
	uint64_t slot_waits; /* submits that found every worker slot taken */
	size_t n_requests;   /* the first IGC_STATS_REQUESTS requests by id */
	struct igc_stats_request {
		uint64_t id;
		char state[17], cls[17], finish[17];
		uint32_t prompt_tokens, max_tokens, generated;
		uint64_t age_ms;
	} requests[IGC_STATS_REQUESTS];
};

int igc_stats(struct igc_client *c, struct igc_stats *out, struct igc_error *err);

#ifdef __cplusplus
}
#endif

#endif
