/*
 * msg.h - the Ignis control protocol: every message type declared once.
 *
 * On the wire a message is one msgpack map:
 *
 *   key   msgpack type   meaning
 *   "t"   uint           message type (MSG_TYPES below; never renumber)
 *   "v"   uint           protocol version (MSG_PROTO_VERSION)
 *   ...   per field      the type's fields, in declaration order
 *
 * The declaration tables below are the single source of truth: they generate
 * the C structs, the descriptors that the one generic encoder and decoder
 * walk, the limits, and the golden and malformed-input tests. Adding a field
 * or a type is an edit here and nowhere else (plus a bump of
 * MSG_PROTO_VERSION when an existing type changes).
 *
 * Decoding is strict: exactly one msgpack map filling the whole buffer; "t"
 * and "v" present and unsigned; the version equal to ours; a known type;
 * every declared field present once, of its kind, inside its limits; no other
 * key. Any violation returns a typed IG_E_PROTO_* code with a message naming
 * the message, the field and what was accepted. The decoder never reads past
 * the buffer and never allocates more than a bounded multiple of its length.
 */
#ifndef IGNIS_PROTO_MSG_H
#define IGNIS_PROTO_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define MSG_PROTO_VERSION 11u
/* Largest control message accepted (and NNG_OPT_RECVMAXSZ of every socket).
 * Every declared type fits at its limits: a unit test checks the bound. */
#define MSG_MAX_BYTES (256u * 1024u)
/* Deepest nesting of msgpack containers accepted (a message map holding an
 * array of record maps is depth 3). */
#define MSG_MAX_DEPTH 4

/* Field kinds. On the wire: U64 a msgpack uint (lo..hi), BOOL a msgpack
 * boolean, STR a msgpack str of lo..hi bytes of UTF-8 without NUL, ARR a
 * msgpack array of lo..hi record maps, F64 a real number in flo..fhi (the
 * decoder takes a msgpack float32, float64 or integer, integers converted
 * exactly and refused above 2^53 in magnitude, NaN refused; the encoder
 * always writes float64), IDS a msgpack array of lo..hi token ids, each an
 * integer 0..UINT32_MAX, U64S a msgpack array of lo..hi uints (checksums).
 *
 * Optional fields (declared with the kinds OU64, OBOOL and OSTR: a U64, a
 * BOOL and a STR otherwise) may be left out; a field left out decodes as 0
 * (false, the empty string), and the encoder leaves out one that holds 0
 * (false, the empty string), so a message that does
 * not use one encodes byte for byte as before it was declared: a peer of
 * the same version that never heard of it still reads it. Only fields
 * added to an existing type within a version are optional. */
enum msg_kind {
	MSG_K_U64 = 1,
	MSG_K_BOOL = 2,
	MSG_K_STR = 3,
	MSG_K_ARR = 4,
	MSG_K_F64 = 5,
	MSG_K_IDS = 6,
	MSG_K_U64S = 7,
};

/* Integers up to this magnitude convert to a double exactly (F64 fields). */
#define MSG_F64_INT_MAX (UINT64_C(1) << 53)

/* A string view. After msg_decode it points into the decoded buffer and is
 * valid while that buffer lives; it is not NUL-terminated. */
struct msg_str {
	const char *p;
	uint32_t n;
};

#define MSG_ROLE_MAX 32

/*
 * Records: maps nested inside messages (elements of ARR fields).
 * F(record, kind, name, lo, hi, sub): sub names the record of an ARR field
 * and is `_` otherwise. lo and hi are integer constants, but double literals
 * for F64 (they land in flo/fhi of the descriptor). The field name is also
 * its key on the wire.
 */
#define MSG_RECORDS(X)                                                                             \
	X(proc, "one supervised process in a status reply")                                        \
	X(plan_line, "one line of the VRAM plan: its name and bytes")                              \
	X(kv_entry, "one sequence held by the kvstore daemon")                                     \
	X(kv_slot_entry, "one retained host slot in a kv_slot_list_reply")                         \
	X(ttft_bucket, "one bucket of the time-to-first-token histogram")                          \
	X(stop, "one stop string of a submit or an fd_submit")                                     \
	X(poll_ent, "one request of a poll_many: its id and the first token index wanted")         \
	X(tokens_ent, "one request's tokens in a tokens_many reply")                               \
	X(fd_req, "one request in the front door's stats reply")                                   \
	X(expert_class, "one class of the worker's expert cache: its slots and their figures")     \
	X(lp, "one token's log-probability in a tokens_lp reply")

#define MSG_FIELDS_proc(F, R)                                                                      \
	F(R, STR, role, 1, MSG_ROLE_MAX, _)                                                        \
	F(R, U64, pid, 0, INT32_MAX, _)                                                            \
	F(R, STR, state, 1, 16, _)                                                                 \
	F(R, U64, uptime_ms, 0, UINT64_MAX, _)                                                     \
	F(R, U64, restarts, 0, UINT32_MAX, _)

#define MSG_FIELDS_kv_entry(F, R)                                                                  \
	F(R, U64, seq, 1, UINT64_MAX, _)                                                           \
	F(R, STR, tier, 1, 8, _)                                                                   \
	F(R, STR, class, 1, 16, _)                                                                 \
	F(R, U64, image_bytes, 0, UINT64_MAX, _)                                                   \
	F(R, U64, windows, 0, UINT32_MAX, _)                                                       \
	F(R, U64, committed, 0, UINT32_MAX, _)                                                     \
	F(R, BOOL, complete, 0, 1, _)

#define MSG_FIELDS_plan_line(F, R)                                                                 \
	F(R, STR, name, 1, 32, _)                                                                  \
	F(R, U64, bytes, 0, UINT64_MAX, _)

/*
 * Messages: X(NAME, type number, name, doc). On the wire: never renumber.
 * Every message declares at least one field.
 */
#define MSG_TYPES(X)                                                                               \
	X(HELLO, 1, hello, "greeting after connect: who the sender is")                            \
	X(PING, 2, ping, "liveness probe; answered by pong with the same seq")                     \
	X(PONG, 3, pong, "answer to ping")                                                         \
	X(SHUTDOWN, 4, shutdown, "ask the receiver to stop cleanly; answered by ack")              \
	X(ACK, 5, ack, "a request of type `of` was accepted")                                      \
	X(ERROR, 6, error, "a request failed: IG_E_* code and human message")                      \
	X(STATUS, 7, status, "ask the supervisor for its process table")                           \
	X(STATUS_REPLY, 8, status_reply, "the supervisor's process table")                         \
	X(PLAN, 9, plan, "the VRAM plan the gpu-worker lays out; answered by ack")                 \
	X(SUBMIT, 10, submit,                                                                      \
	  "a generation request for the gpu-worker; answered by submitted or error")               \
	X(SUBMITTED, 11, submitted, "a submitted request's id and admission figures")              \
	X(POLL, 12, poll, "ask for a request's tokens from index `from`; answered by tokens")      \
	X(TOKENS, 13, tokens,                                                                      \
	  "a request's generated tokens from index `from`, its state, and whether it is done")     \
	X(CANCEL, 14, cancel, "stop a request and forget it once done; answered by ack")           \
	X(KV_CONFIG, 15, kv_config,                                                                \
	  "the kvstore daemon's tiers (sent by the supervisor after hello); answered by ack")      \
	X(KV_RESERVE, 16, kv_reserve,                                                              \
	  "reserve room in KV-RAM for a sequence's image; answered by kv_reserved or error")       \
	X(KV_RESERVED, 17, kv_reserved, "where in the KV-RAM arena the image goes")                \
	X(KV_COMMIT, 18, kv_commit, "window `window` is written in the arena; answered by ack")    \
	X(KV_FETCH, 19, kv_fetch,                                                                  \
	  "bring a sequence into the arena (from KV-disk if need be), checked; answered by "       \
	  "kv_seq")                                                                                \
	X(KV_SEQ, 20, kv_seq, "a sequence held by the kvstore daemon: where and how complete")     \
	X(KV_DEMOTE, 21, kv_demote, "move a complete sequence from KV-RAM to KV-disk; ack")        \
	X(KV_DROP, 22, kv_drop, "forget a sequence in both tiers; answered by ack")                \
	X(KV_LIST, 23, kv_list,                                                                    \
	  "list held sequences after seq `after`; answered by kv_list_reply")                      \
	X(KV_LIST_REPLY, 24, kv_list_reply, "up to 256 held sequences in seq order")               \
	X(KV_STATS, 25, kv_stats, "ask for the tiers' figures; answered by kv_stats_reply")        \
	X(KV_STATS_REPLY, 26, kv_stats_reply, "the tiers' figures and counters")                   \
	X(KV_VERIFY, 27, kv_verify,                                                                \
	  "check a sequence's (0: every) windows against their checksums in place; ack or error")  \
	X(RESTART, 28, restart,                                                                    \
	  "ask the supervisor to restart one daemon in order (kvstore, gpu-worker); ack")          \
	X(KV_SLOT_CAPTURE, 29, kv_slot_capture,                                                    \
	  "take a retained host slot for an image (giving one up if needed); kv_slot")             \
	X(KV_SLOT, 30, kv_slot, "a retained host slot: where, what, its state")                    \
	X(KV_SLOT_PUBLISH, 31, kv_slot_publish,                                                    \
	  "a captured slot's image is in place, with its checksum; ack")                           \
	X(KV_SLOT_CLAIM, 32, kv_slot_claim, "find the held slot of a key; kv_slot")                \
	X(KV_SLOT_DROP, 33, kv_slot_drop, "free a slot still under a generation; ack")             \
	X(KV_SLOT_LIST, 34, kv_slot_list, "list the retained host slots; kv_slot_list_reply")      \
	X(KV_SLOT_LIST_REPLY, 37, kv_slot_list_reply, "retained host slots from `first`")          \
	X(KV_STAGE, 38, kv_stage,                                                                  \
	  "copy window `window` of a KV-disk sequence into its staging window; kv_staged")         \
	X(KV_STAGED, 39, kv_staged, "a KV-disk window is in the staging window, checked")          \
	X(KV_SWEEP, 53, kv_sweep,                                                                  \
	  "drop every sequence of another owner than `keep_owner` (a restarted worker's); ack")    \
	X(WORKER_STATS, 35, worker_stats,                                                          \
	  "ask the gpu-worker for its figures; answered by worker_stats_reply")                    \
	X(WORKER_STATS_REPLY, 36, worker_stats_reply,                                              \
	  "the gpu-worker's pool, request, token and time-to-first-token figures")                 \
	X(FD_SUBMIT, 40, fd_submit,                                                                \
	  "front door: a generation request; answered by fd_submitted once admitted, or error")    \
	X(FD_SUBMITTED, 41, fd_submitted, "front door: an admitted request's id and figures")      \
	X(FD_POLL, 42, fd_poll,                                                                    \
	  "front door: tokens from `from`, waiting up to wait_ms for new ones; answered by "       \
	  "fd_tokens")                                                                             \
	X(FD_TOKENS, 43, fd_tokens,                                                                \
	  "front door: a request's tokens from `from`, its state, and how it ended")               \
	X(FD_CANCEL, 44, fd_cancel, "front door: stop a request, or forget a finished one; ack")   \
	X(FD_STATUS, 45, fd_status, "front door: ask one request's state; answered by fd_request") \
	X(FD_REQUEST, 46, fd_request, "front door: one request's state")                           \
	X(FD_MODEL, 47, fd_model, "front door: ask the model's description; fd_model_reply")       \
	X(FD_MODEL_REPLY, 48, fd_model_reply, "front door: the model served and its figures")      \
	X(FD_STATS, 49, fd_stats, "front door: ask its figures and requests; fd_stats_reply")      \
	X(FD_STATS_REPLY, 50, fd_stats_reply, "front door: its counters and live requests")        \
	X(POLL_MANY, 51, poll_many,                                                                \
	  "the front door asks the gpu-worker for up to 64 requests' tokens; tokens_many")         \
	X(TOKENS_MANY, 52, tokens_many, "the gpu-worker's answer to poll_many, with its pid")      \
	X(POLL_LP, 54, poll_lp,                                                                    \
	  "the front door asks the gpu-worker for one request's tokens with their "                \
	  "log-probabilities; tokens_lp")                                                          \
	X(TOKENS_LP, 55, tokens_lp, "the gpu-worker's answer to poll_lp, with its pid")

#define MSG_FIELDS_hello(F, R)                                                                     \
	F(R, STR, role, 1, MSG_ROLE_MAX, _)                                                        \
	F(R, U64, pid, 1, INT32_MAX, _)                                                            \
	F(R, STR, build, 0, 64, _)

#define MSG_FIELDS_ping(F, R) F(R, U64, seq, 0, UINT64_MAX, _)

#define MSG_FIELDS_pong(F, R)                                                                      \
	F(R, U64, seq, 0, UINT64_MAX, _)                                                           \
	F(R, U64, uptime_ms, 0, UINT64_MAX, _)                                                     \
	F(R, OU64, loop_ms, 0, UINT64_MAX, _) /* optional: ms since the loop last served */

#define MSG_FIELDS_shutdown(F, R) F(R, STR, reason, 0, 256, _)

#define MSG_FIELDS_ack(F, R) F(R, U64, of, 1, UINT32_MAX, _)

#define MSG_FIELDS_error(F, R)                                                                     \
	F(R, U64, code, 1, UINT32_MAX, _)                                                          \
	F(R, STR, message, 0, 1024, _)

#define MSG_FIELDS_status(F, R) F(R, U64, seq, 0, UINT64_MAX, _)

#define MSG_FIELDS_status_reply(F, R)                                                              \
	F(R, U64, seq, 0, UINT64_MAX, _)                                                           \
	F(R, ARR, procs, 0, 8, proc)

/* The supervisor's plan for the gpu-worker (common/vplan.h): the fixed lines
 * in their order, the pool, and on Flash-Next the residency and the cache. */
#define MSG_FIELDS_plan(F, R)                                                                      \
	F(R, STR, backend, 1, 16, _)                                                               \
	F(R, U64, free_bytes, 0, UINT64_MAX, _)                                                    \
	F(R, STR, model, 1, 64, _)                                                                 \
	F(R, STR, kv_format, 1, 16, _)                                                             \
	F(R, STR, policy, 1, 16, _)                                                                \
	F(R, U64, budget_bytes, 0, UINT64_MAX, _)                                                  \
	F(R, ARR, lines, 1, 16, plan_line)                                                         \
	F(R, U64, pool_pages, 1, UINT32_MAX, _)                                                    \
	F(R, U64, page_bytes, 1, UINT32_MAX, _)                                                    \
	F(R, U64, residency_fixed_bytes, 0, UINT64_MAX, _)                                         \
	F(R, U64, expert_cache_bytes, 0, UINT64_MAX, _)                                            \
	F(R, U64, total_bytes, 0, UINT64_MAX, _)                                                   \
	F(R, U64, lanes, 1, 64, _)                                                                 \
	F(R, U64, context_tokens, 1, UINT32_MAX, _)                                                \
	F(R, STR, model_path, 0, 4096, _) /* the model file; "" for a built-in description */      \
	F(R, U64, chunk_tokens, 1, UINT32_MAX, _)                                                  \
	F(R, U64, default_max_tokens, 1, UINT32_MAX, _)                                            \
	F(R, U64, move_out_window, 4096, UINT32_MAX, _)        /* --reuse-move-out-window-bytes */ \
	F(R, U64, move_in_window, 4096, UINT32_MAX, _)         /* --reuse-move-in-window-bytes */  \
	F(R, U64, max_requests, 1, MSG_WORKER_REQUESTS_MAX, _) /* --server-max-requests */         \
	F(R, BOOL, reuse_prompt, 0, 1, _) /* --reuse-prompt: checkpoints captured and claimed */   \
	F(R, U64, retained_host, 0, 1024, _) /* --reuse-retained-host: the kvstore's slots */      \
	F(R, U64, interactive_ttl_s, 0, UINT32_MAX, _)   /* --reuse-retained-interactive-ttl */    \
	F(R, U64, pinned_expert_bytes, 0, UINT64_MAX, _) /* --vram-pinned-expert-bytes */          \
	F(R, U64, kv_sinks, 0, 4096, _)              /* --model-kv-sinks (0 outside compact) */    \
	F(R, U64, kv_window, 0, 65536, _)            /* --model-kv-window (0 outside compact) */   \
	F(R, U64, kv_window_bytes, 0, UINT64_MAX, _) /* a state's window (mdesc_kv_window_bytes)   \
	                                              */

/* Requests the gpu-worker keeps, running or finished and not yet forgotten
 * (a submit beyond them forgets the oldest finished one), at most: the
 * plan's max_requests (--server-max-requests). The front door never has
 * more there, so none it has not read is ever forgotten. */
#define MSG_WORKER_REQUESTS_MAX 4096u

/* Generation requests, served by the gpu-worker (fd_submit, the front
 * door's, is declared as the same fields). A submit's prompt is either
 * `text` or `prompt`, the other empty; both or neither, and top_p 0, are
 * refused above the codec (the codec checks each field alone). The member
 * `class` is a C++ keyword: this header is C only (no extern "C" either).
 *
 * `plain` holds byte offsets of `text` in pairs [start, end), ascending and
 * apart: spans tokenized as text, where a special token's text stays text
 * (a chat's messages, from the HTTP API: only the template's own markers
 * become special tokens; model/bpe.h, bpe_encode_spans). Outside them, and
 * in an explicit prompt text without spans, specials' text becomes them.
 *
 * At these limits a submit encodes to at most 58,130 bytes (16,387 of text,
 * twice 20,485 of ids at 5 bytes each, 8 stop strings) before its grammar
 * fields (below: up to 197,000 more), and a tokens reply to 37,009, within
 * MSG_MAX_BYTES. An IDS field is held
 * inline (4096 x 4 B = 16 KiB), so struct msg is about 16.5 KB: fine on a
 * thread's stack, not in a large array. */
#define MSG_TEXT_MAX 16384u /* prompt text bytes in one submit; text in one tokens reply */
#define MSG_IDS_MAX  4096u  /* token ids in one submit or one tokens reply */
/* Stop strings: generation ends before the first place the generated text
 * contains one (byte-level tokenizer only), which is left out of the tokens;
 * the worker checks them (docs/adr/0025). */
#define MSG_STOP_MAX   8u  /* stop strings in one submit */
#define MSG_STOP_BYTES 64u /* bytes of one stop string */

#define MSG_FIELDS_stop(F, R) F(R, STR, text, 1, MSG_STOP_BYTES, _)

/* Log-probabilities (docs/adr/0053): a submit's `logprobs` asks for each
 * generated token's, with the `top_logprobs` (0..MSG_TOP_LP_MAX) likeliest
 * ids' beside it (top_logprobs above 0 without logprobs is refused by the
 * worker); both optional fields, so that a submit without them is as it
 * was. The front door reads them with poll_lp instead of poll_many.
 * `echo` (optional, only with logprobs: else refused by name, code 27;
 * docs/adr/0063) asks the prompt's too: each prompt token's under the
 * logits of the tokens before it (the first has none), read with poll_lp's
 * `prompt`. */
#define MSG_TOP_LP_MAX 20u

/* Constrained decoding (docs/adr/0057): a submit may carry a `grammar` in
 * the GBNF-like text form (grammar/grammar.h, grammar_parse; root rule
 * "root") or a `json_schema` (JSON text; grammar/json_schema.h, the subset
 * of OpenAI's strict structured outputs), not both; with a
 * `grammar_trigger` the output is free until it contains the trigger, and
 * what follows it must match. A grammar the worker cannot compile is
 * refused naming the place and what is accepted. All three are optional:
 * a submit without them is as it was. */
#define MSG_GRAMMAR_MAX 98304u /* bytes of a grammar's or a schema's text */
#define MSG_TRIGGER_MAX 256u   /* bytes of a trigger (GM_MAX_TRIGGER) */

#define MSG_FIELDS_submit(F, R)                                                                    \
	F(R, STR, text, 0, MSG_TEXT_MAX, _)                                                        \
	F(R, IDS, prompt, 0, MSG_IDS_MAX, _)                                                       \
	F(R, IDS, plain, 0, MSG_IDS_MAX, _)                                                        \
	F(R, U64, max_tokens, 0, UINT32_MAX, _) /* 0: the model's default */                       \
	F(R, STR, class, 1, 16, _)              /* "interactive" or "agent" */                     \
	F(R, F64, temperature, 0.0, 100.0, _)   /* 0: greedy */                                    \
	F(R, F64, top_p, 0.0, 1.0, _)           /* 1: off */                                       \
	F(R, U64, top_k, 0, UINT32_MAX, _)      /* 0: off */                                       \
	F(R, U64, seed, 0, UINT64_MAX, _)                                                          \
	F(R, ARR, stop, 0, MSG_STOP_MAX, stop)                                                     \
	F(R, OBOOL, logprobs, 0, 1, _)                     /* optional: log-probabilities asked */ \
	F(R, OU64, top_logprobs, 0, MSG_TOP_LP_MAX, _)     /* optional: their top list's length */ \
	F(R, OSTR, grammar, 0, MSG_GRAMMAR_MAX, _)         /* optional: GBNF-like text */          \
	F(R, OSTR, json_schema, 0, MSG_GRAMMAR_MAX, _)     /* optional: a JSON Schema */           \
	F(R, OSTR, grammar_trigger, 0, MSG_TRIGGER_MAX, _) /* optional: lazy activation */         \
	F(R, OBOOL, echo, 0, 1, _) /* optional: the prompt's log-probabilities too */

#define MSG_FIELDS_submitted(F, R)                                                                 \
	F(R, U64, id, 1, UINT64_MAX, _)                                                            \
	F(R, U64, prompt_tokens, 0, UINT32_MAX, _)                                                 \
	F(R, U64, max_tokens, 0, UINT32_MAX, _)                                                    \
	F(R, U64, reserved_pages, 0, UINT32_MAX, _)

/* `max`: the most tokens the reply may carry. */
#define MSG_FIELDS_poll(F, R)                                                                      \
	F(R, U64, id, 1, UINT64_MAX, _)                                                            \
	F(R, U64, from, 0, UINT32_MAX, _)                                                          \
	F(R, U64, max, 1, MSG_IDS_MAX, _)

/* state: "waiting", "prefill", "ready", "decode", "done"; finish: "" while
 * running, then "length", "eos", "context", "stop", "cancelled", "grammar" (its
 * grammar allowed no next token) or "error";
 * generated: tokens generated so far in all (while a request with stop
 * strings runs, all but those that could begin one). text: the UTF-8 text
 * `tokens` add to the output (whole characters: a character split over
 * tokens comes with the one that completes it; specials and ids-only
 * models none; a 0 byte as U+FFFD, as no string holds NUL; once done, the
 * last reply also holds a final incomplete character's U+FFFD). The reply
 * carries fewer tokens than asked when their text would pass MSG_TEXT_MAX
 * (never with the byte-level tokenizer: 3 bytes a token at most). */
#define MSG_FIELDS_tokens(F, R)                                                                    \
	F(R, U64, id, 1, UINT64_MAX, _)                                                            \
	F(R, U64, from, 0, UINT32_MAX, _)                                                          \
	F(R, IDS, tokens, 0, MSG_IDS_MAX, _)                                                       \
	F(R, STR, text, 0, MSG_TEXT_MAX, _)                                                        \
	F(R, STR, state, 1, 16, _)                                                                 \
	F(R, BOOL, done, 0, 1, _)                                                                  \
	F(R, STR, finish, 0, 16, _)                                                                \
	F(R, U64, generated, 0, UINT32_MAX, _)                                                     \
	F(R, U64, cached, 0, UINT32_MAX, _) /* prompt tokens from a checkpoint */

#define MSG_FIELDS_cancel(F, R) F(R, U64, id, 1, UINT64_MAX, _)

/* The kvstore daemon's protocol (docs/protocol.md, "KV tiers"). Bytes never
 * travel here: they are written to and read from the shared KV-RAM arena
 * `arena_name` maps; messages carry where, how long and checksums (XXH3-64). */
#define MSG_FIELDS_kv_config(F, R)                                                                 \
	F(R, STR, arena_name, 1, 96, _) /* under /dev/shm */                                       \
	F(R, U64, arena_bytes, 1, UINT64_MAX, _)                                                   \
	F(R, STR, disk_path, 0, 4096, _)        /* "" with KV-disk off */                          \
	F(R, U64, disk_bytes, 0, UINT64_MAX, _) /* the flag; 0: KV-disk off */                     \
	F(R, U64, interactive_ttl_s, 0, UINT32_MAX, _)                                             \
	F(R, U64, retained_slots, 0, 1024, _)          /* --reuse-retained-host */                 \
	F(R, U64, slot_bytes, 0, UINT64_C(1) << 40, _) /* the model's state image; 0 with none */

#define MSG_FIELDS_kv_reserve(F, R)                                                                \
	F(R, U64, seq, 1, UINT64_MAX, _)                                                           \
	F(R, U64, model_id, 0, UINT64_MAX, _)                                                      \
	F(R, U64, kv_format, 0, UINT32_MAX, _)                                                     \
	F(R, STR, class, 1, 16, _) /* "interactive" or "agent" */                                  \
	F(R, U64, image_bytes, 1, UINT64_MAX, _)                                                   \
	F(R, U64, window_bytes, 1, UINT32_MAX, _)

/* given_up: a sequence KV-RAM gave up for this room with KV-disk off (its
 * request is prefilled again), 0 when none. tier: "ram", the windows go
 * consecutively from `offset`; "disk", KV-RAM cannot take the image and it
 * goes straight to KV-disk: every window is written at `offset` (a staging
 * window of window_bytes), the next only once the previous one's kv_commit
 * is acknowledged (the daemon has copied it into KV-disk). Window k lies at
 * offset + k x stride: stride is window_bytes in KV-RAM, 0 when every
 * window passes through one staging window on its way to or from KV-disk.
 * A record holds at most MSG_KV_WINDOWS_MAX windows (the arena's index:
 * arena.h checks it). */
#define MSG_KV_WINDOWS_MAX 4096u

#define MSG_FIELDS_kv_reserved(F, R)                                                               \
	F(R, U64, seq, 1, UINT64_MAX, _)                                                           \
	F(R, U64, offset, 0, UINT64_MAX, _)                                                        \
	F(R, U64, stride, 0, UINT32_MAX, _)                                                        \
	F(R, U64, windows, 1, UINT32_MAX, _)                                                       \
	F(R, U64, given_up, 0, UINT64_MAX, _)                                                      \
	F(R, STR, tier, 1, 8, _)

#define MSG_FIELDS_kv_commit(F, R)                                                                 \
	F(R, U64, seq, 1, UINT64_MAX, _)                                                           \
	F(R, U64, window, 0, UINT32_MAX, _)                                                        \
	F(R, U64, len, 1, UINT32_MAX, _)                                                           \
	F(R, U64, sum, 0, UINT64_MAX, _)

#define MSG_FIELDS_kv_fetch(F, R) F(R, U64, seq, 1, UINT64_MAX, _)

/* tier: where it was found. "ram": window k is at offset + k x stride
 * (stride = window_bytes), each window_bytes but the last. "disk": it stays
 * on disk and comes back a window at a time (kv_stage), each through the
 * staging window at `offset` (stride 0); every window's header was checked
 * against the sequence record before this reply. sums: every window's
 * recorded checksum, 0 for one not committed yet; the reader checks each
 * window against it while copying it out. */
#define MSG_FIELDS_kv_seq(F, R)                                                                    \
	F(R, U64, seq, 1, UINT64_MAX, _)                                                           \
	F(R, STR, tier, 1, 8, _)                                                                   \
	F(R, U64, model_id, 0, UINT64_MAX, _)                                                      \
	F(R, U64, kv_format, 0, UINT32_MAX, _)                                                     \
	F(R, STR, class, 1, 16, _)                                                                 \
	F(R, U64, offset, 0, UINT64_MAX, _)                                                        \
	F(R, U64, stride, 0, UINT32_MAX, _)                                                        \
	F(R, U64, image_bytes, 0, UINT64_MAX, _)                                                   \
	F(R, U64, window_bytes, 1, UINT32_MAX, _)                                                  \
	F(R, U64, windows, 0, UINT32_MAX, _)                                                       \
	F(R, U64, committed, 0, UINT32_MAX, _)                                                     \
	F(R, BOOL, complete, 0, 1, _)                                                              \
	F(R, U64S, sums, 0, MSG_KV_WINDOWS_MAX, _)

#define MSG_FIELDS_kv_stage(F, R)                                                                  \
	F(R, U64, seq, 1, UINT64_MAX, _)                                                           \
	F(R, U64, window, 0, UINT32_MAX, _)

/* The window's bytes are at `offset` in the arena (the staging window; it
 * may differ from the kv_seq reply's after a daemon restart), `len` of them
 * hashing to `sum` (checked while the daemon copied them off the disk; the
 * reader checks again while copying them out). */
#define MSG_FIELDS_kv_staged(F, R)                                                                 \
	F(R, U64, seq, 1, UINT64_MAX, _)                                                           \
	F(R, U64, window, 0, UINT32_MAX, _)                                                        \
	F(R, U64, offset, 0, UINT64_MAX, _)                                                        \
	F(R, U64, len, 1, UINT32_MAX, _)                                                           \
	F(R, U64, sum, 0, UINT64_MAX, _)

/* A sequence's key (seq) names its owner in bits 62..32: a gpu-worker's
 * nonce, 1..2^31-1, chosen at its start; 0 for keys of other writers
 * (ignis-kvstore-ctl). kv_sweep drops, in both tiers, every sequence whose
 * owner is not 0 and not keep_owner: the records of an earlier worker,
 * whose requests ended with it. */
#define MSG_FIELDS_kv_sweep(F, R) F(R, U64, keep_owner, 1, INT32_MAX, _)

#define MSG_FIELDS_kv_demote(F, R) F(R, U64, seq, 1, UINT64_MAX, _)

#define MSG_FIELDS_kv_drop(F, R) F(R, U64, seq, 1, UINT64_MAX, _)

#define MSG_FIELDS_kv_list(F, R) F(R, U64, after, 0, UINT64_MAX, _)

#define MSG_FIELDS_kv_list_reply(F, R)                                                             \
	F(R, ARR, seqs, 0, 256, kv_entry)                                                          \
	F(R, BOOL, more, 0, 1, _)

#define MSG_FIELDS_kv_stats(F, R) F(R, U64, seq, 0, UINT64_MAX, _)

#define MSG_FIELDS_kv_verify(F, R) F(R, U64, seq, 0, UINT64_MAX, _)

#define MSG_FIELDS_restart(F, R) F(R, STR, role, 1, MSG_ROLE_MAX, _)

/* The gpu-worker's figures for the metrics page (docs/protocol.md, "Worker
 * figures"). Counters count since the worker's start (a restarted worker
 * starts again from 0); gauges are the state at the reply. The histogram's
 * buckets are not cumulative: `count` requests had their first token within
 * (previous le_us, le_us] microseconds of their submit; the last bucket's
 * le_us is 2^64-1 (+Inf). */
#define MSG_FIELDS_ttft_bucket(F, R)                                                               \
	F(R, U64, le_us, 1, UINT64_MAX, _)                                                         \
	F(R, U64, count, 0, UINT64_MAX, _)

/* name: the projection and its tensor type(s), e.g. "gate_up:q4_k",
 * "down:q6_k" (docs/adr/0039); bytes: copied host to device for misses */
#define MSG_FIELDS_expert_class(F, R)                                                              \
	F(R, STR, name, 1, 32, _)                                                                  \
	F(R, U64, record, 0, UINT64_MAX, _)                                                        \
	F(R, U64, slots, 0, UINT32_MAX, _)                                                         \
	F(R, U64, hits, 0, UINT64_MAX, _)                                                          \
	F(R, U64, misses, 0, UINT64_MAX, _)                                                        \
	F(R, U64, bytes, 0, UINT64_MAX, _)                                                         \
	F(R, U64, evictions, 0, UINT64_MAX, _)                                                     \
	F(R, U64, prefetches, 0, UINT64_MAX,                                                       \
	  _) /* filled ahead of their layer (bytes counts them) */

#define MSG_FIELDS_worker_stats(F, R) F(R, U64, seq, 0, UINT64_MAX, _)

#define MSG_FIELDS_worker_stats_reply(F, R)                                                        \
	F(R, BOOL, loaded, 0, 1, _) /* a model is loaded (else every figure is 0) */               \
	F(R, U64, pool_pages, 0, UINT32_MAX, _)                                                    \
	F(R, U64, used_pages, 0, UINT32_MAX, _)     /* reserved by admitted requests */            \
	F(R, U64, retained_pages, 0, UINT32_MAX, _) /* ... of them only checkpoints hold */        \
	F(R, U64, pending_pages, 0, UINT64_MAX, _)  /* waiting requests will reserve */            \
	F(R, U64, waiting, 0, UINT32_MAX, _)                                                       \
	F(R, U64, prefill, 0, UINT32_MAX, _)                                                       \
	F(R, U64, ready, 0, UINT32_MAX, _)                                                         \
	F(R, U64, decode, 0, UINT32_MAX, _)                                                        \
	F(R, U64, accepted, 0, UINT64_MAX, _)                                                      \
	F(R, U64, finished_length, 0, UINT64_MAX, _)                                               \
	F(R, U64, finished_eos, 0, UINT64_MAX, _)                                                  \
	F(R, U64, finished_context, 0, UINT64_MAX, _)                                              \
	F(R, U64, cancelled, 0, UINT64_MAX, _)                                                     \
	F(R, U64, prompt_tokens, 0, UINT64_MAX, _)                                                 \
	F(R, U64, generated_tokens, 0, UINT64_MAX, _)                                              \
	F(R, U64, prefill_tokens, 0, UINT64_MAX, _)                                                \
	F(R, U64, rounds, 0, UINT64_MAX, _)                                                        \
	F(R, ARR, ttft, 0, 32, ttft_bucket)                                                        \
	F(R, U64, ttft_sum_us, 0, UINT64_MAX, _)                                                   \
	F(R, U64, moving_out, 0, UINT32_MAX, _) /* live requests mid-move, in a tier */            \
	F(R, U64, moved, 0, UINT32_MAX, _)                                                         \
	F(R, U64, moving_in, 0, UINT32_MAX, _)                                                     \
	F(R, U64, moves_out, 0, UINT64_MAX, _) /* moves landed, each way */                        \
	F(R, U64, moves_in, 0, UINT64_MAX, _)                                                      \
	F(R, U64, move_out_bytes, 0, UINT64_MAX, _)                                                \
	F(R, U64, move_in_bytes, 0, UINT64_MAX, _)                                                 \
	F(R, U64, reprefills, 0, UINT64_MAX, _) /* records a tier lost: prefilled again */         \
	F(R, U64, move_retries, 0, UINT64_MAX, _)                                                  \
	F(R, U64, moves_stopped, 0, UINT64_MAX, _) /* moves out whose need went first */           \
	F(R, U64, rejected, 0, UINT64_MAX, _) /* messages its socket refused (did not decode) */   \
	/* prompt reuse (docs/adr/0037) */                                                         \
	F(R, U64, retained_slots, 0, UINT32_MAX, _) /* device retained slots */                    \
	F(R, U64, checkpoints, 0, UINT32_MAX, _)    /* ... holding a checkpoint now */             \
	F(R, U64, reuse_captures, 0, UINT64_MAX, _)                                                \
	F(R, U64, reuse_hits, 0, UINT64_MAX, _)                                                    \
	F(R, U64, reuse_misses, 0, UINT64_MAX, _)          /* no checkpoint matched */             \
	F(R, U64, reuse_misses_given_up, 0, UINT64_MAX, _) /* its checkpoint went before it ran */ \
	F(R, U64, reused_tokens, 0, UINT64_MAX, _)                                                 \
	F(R, U64, reused_prefix_tokens, 0, UINT64_MAX, _) /* ... of them from shared prefixes */   \
	F(R, U64, reuse_skips_slot, 0, UINT64_MAX, _)                                              \
	F(R, U64, reuse_skips_page, 0, UINT64_MAX, _)                                              \
	F(R, U64, reuse_given_up_room, 0, UINT64_MAX, _)                                           \
	F(R, U64, reuse_given_up_slot, 0, UINT64_MAX, _)                                           \
	/* ... host slots (the kvstore daemon's): the part of each figure above */                 \
	F(R, U64, host_checkpoints, 0, UINT32_MAX, _) /* held in a host slot now */                \
	F(R, U64, reused_host_tokens, 0, UINT64_MAX, _)                                            \
	F(R, U64, reused_host_prefix_tokens, 0, UINT64_MAX, _)                                     \
	F(R, U64, reuse_skips_host_busy, 0, UINT64_MAX, _) /* a host capture already in flight */  \
	F(R, U64, reuse_skips_host_refused, 0, UINT64_MAX, _) /* the kvstore skipped it */         \
	F(R, U64, reuse_given_up_tier, 0, UINT64_MAX, _) /* the kvstore gave it up or lost it */   \
	/* the expert cache (docs/adr/0039): a MoE model's classes, none otherwise */              \
	F(R, ARR, experts, 0, 8, expert_class)                                                     \
	F(R, U64, expert_staged_layers, 0, UINT64_MAX, _) /* passes through the staging ring */    \
	F(R, U64, expert_staged_bytes, 0, UINT64_MAX, _)

#define MSG_FIELDS_kv_stats_reply(F, R)                                                            \
	F(R, STR, arena_name, 0, 96, _) /* "" until configured */                                  \
	F(R, U64, ram_bytes, 0, UINT64_MAX, _)                                                     \
	F(R, U64, ram_used_bytes, 0, UINT64_MAX, _)                                                \
	F(R, U64, ram_largest_free, 0, UINT64_MAX, _)                                              \
	F(R, U64, ram_sequences, 0, UINT32_MAX, _)                                                 \
	F(R, BOOL, disk_on, 0, 1, _)                                                               \
	F(R, U64, disk_ceiling_bytes, 0, UINT64_MAX, _)                                            \
	F(R, U64, disk_used_bytes, 0, UINT64_MAX, _)                                               \
	F(R, U64, disk_sequences, 0, UINT32_MAX, _)                                                \
	F(R, U64, reserves, 0, UINT64_MAX, _)                                                      \
	F(R, U64, commits, 0, UINT64_MAX, _)                                                       \
	F(R, U64, refusals_full, 0, UINT64_MAX, _)                                                 \
	F(R, U64, demotions, 0, UINT64_MAX, _)                                                     \
	F(R, U64, direct_writes, 0, UINT64_MAX, _) /* straight from the device to disk */          \
	F(R, U64, disk_reads, 0, UINT64_MAX, _)                                                    \
	F(R, U64, ram_evictions, 0, UINT64_MAX, _)                                                 \
	F(R, U64, lost, 0, UINT64_MAX, _)                                                          \
	F(R, U64, recovered_sequences, 0, UINT64_MAX, _)                                           \
	F(R, U64, slots, 0, 1024, _)                                                               \
	F(R, U64, slot_bytes, 0, UINT64_MAX, _)                                                    \
	F(R, U64, slots_held, 0, 1024, _)                                                          \
	F(R, U64, slots_writing, 0, 1024, _)                                                       \
	F(R, U64, slot_captures, 0, UINT64_MAX, _)                                                 \
	F(R, U64, slot_publishes, 0, UINT64_MAX, _)                                                \
	F(R, U64, slot_claims, 0, UINT64_MAX, _)                                                   \
	F(R, U64, slot_claim_misses, 0, UINT64_MAX, _)                                             \
	F(R, U64, slot_given_up, 0, UINT64_MAX, _)                                                 \
	F(R, U64, slot_skips_busy, 0, UINT64_MAX, _)                                               \
	F(R, U64, slot_skips_duplicate, 0, UINT64_MAX, _)                                          \
	F(R, U64, slot_skips_size, 0, UINT64_MAX, _)                                               \
	F(R, U64, slot_skips_none, 0, UINT64_MAX, _)                                               \
	F(R, U64, rejected, 0, UINT64_MAX, _) /* messages its socket refused (did not decode) */

/* Retained host slots (kvstore-daemon/arena.h): kind "checkpoint" or
 * "prefix", class "interactive" or "agent", state "free", "writing" or
 * "held". The image's bytes go through the arena at `offset`, as a window's
 * do; `sum` is their checksum (XXH3-64, seed 0). */
#define MSG_FIELDS_kv_slot_capture(F, R)                                                           \
	F(R, U64, key, 1, UINT64_MAX, _)                                                           \
	F(R, U64, model_id, 0, UINT64_MAX, _)                                                      \
	F(R, STR, kind, 1, 16, _)                                                                  \
	F(R, STR, class, 1, 16, _)                                                                 \
	F(R, U64, tokens, 0, UINT32_MAX, _)                                                        \
	F(R, U64, image_bytes, 1, UINT64_C(1) << 40, _)

/* given_up_key: the key of the held slot given up for this capture (0:
 * none was), of kind given_up_kind. */
#define MSG_FIELDS_kv_slot(F, R)                                                                   \
	F(R, U64, slot, 0, 1023, _)                                                                \
	F(R, U64, gen, 1, UINT64_MAX, _)                                                           \
	F(R, STR, state, 1, 16, _)                                                                 \
	F(R, STR, kind, 1, 16, _)                                                                  \
	F(R, STR, class, 1, 16, _)                                                                 \
	F(R, U64, key, 1, UINT64_MAX, _)                                                           \
	F(R, U64, model_id, 0, UINT64_MAX, _)                                                      \
	F(R, U64, tokens, 0, UINT32_MAX, _)                                                        \
	F(R, U64, offset, 0, UINT64_MAX, _)                                                        \
	F(R, U64, image_bytes, 1, UINT64_MAX, _)                                                   \
	F(R, U64, sum, 0, UINT64_MAX, _)                                                           \
	F(R, U64, given_up_key, 0, UINT64_MAX, _)                                                  \
	F(R, STR, given_up_kind, 0, 16, _)

#define MSG_FIELDS_kv_slot_publish(F, R)                                                           \
	F(R, U64, slot, 0, 1023, _)                                                                \
	F(R, U64, gen, 1, UINT64_MAX, _)                                                           \
	F(R, U64, sum, 0, UINT64_MAX, _)

/* kind "": any */
#define MSG_FIELDS_kv_slot_claim(F, R)                                                             \
	F(R, U64, key, 1, UINT64_MAX, _)                                                           \
	F(R, U64, model_id, 0, UINT64_MAX, _)                                                      \
	F(R, STR, kind, 0, 16, _)

#define MSG_FIELDS_kv_slot_drop(F, R)                                                              \
	F(R, U64, slot, 0, 1023, _)                                                                \
	F(R, U64, gen, 1, UINT64_MAX, _)

#define MSG_FIELDS_kv_slot_list(F, R) F(R, U64, first, 0, 1024, _)

#define MSG_FIELDS_kv_slot_entry(F, R)                                                             \
	F(R, U64, slot, 0, 1023, _)                                                                \
	F(R, STR, state, 1, 16, _)                                                                 \
	F(R, STR, kind, 0, 16, _)                                                                  \
	F(R, STR, class, 0, 16, _)                                                                 \
	F(R, U64, key, 0, UINT64_MAX, _)                                                           \
	F(R, U64, model_id, 0, UINT64_MAX, _)                                                      \
	F(R, U64, tokens, 0, UINT32_MAX, _)                                                        \
	F(R, U64, image_bytes, 0, UINT64_MAX, _)                                                   \
	F(R, U64, sum, 0, UINT64_MAX, _)                                                           \
	F(R, U64, last_use, 0, UINT64_MAX, _)

/* more: ask again from the last slot + 1 */
#define MSG_FIELDS_kv_slot_list_reply(F, R)                                                        \
	F(R, ARR, slots, 0, 128, kv_slot_entry)                                                    \
	F(R, BOOL, more, 0, 1, _)

/* The front door (supervisor/frontdoor.h; docs/protocol.md, "The front
 * door"): what clients send to the supervisor's client socket. fd_submit is
 * submit (stop strings included), declared as one below. */
/* poll_many: the most requests asked at once, tokens and text bytes
 * returned per request: 64 x (64 ids, their text's ends and 200 bytes of
 * text, at least the 195 that 64 tokens of the byte-level tokenizer can
 * add) keep tokens_many within 64 KiB (63,474 B at every limit). */
#define MSG_POLL_MANY_MAX  64u
#define MSG_POLL_MANY_IDS  64u
#define MSG_POLL_MANY_TEXT 200u
/* fd_poll: the longest a poll waits for new tokens. */
#define MSG_WAIT_MAX_MS 60000u

/* fd_submit is submit: one declaration, so that the two are the same
 * fields on the wire and the same C layout, and the door forwards a
 * client's fd_submit to the worker as it came, its type re-tagged in place
 * (msg_retag; docs/adr/0043). */
#define MSG_FIELDS_fd_submit(F, R) MSG_FIELDS_submit(F, R)

/* queued_ms: how long the submit waited for a worker slot. */
#define MSG_FIELDS_fd_submitted(F, R)                                                              \
	F(R, U64, id, 1, UINT64_MAX, _)                                                            \
	F(R, U64, prompt_tokens, 0, UINT32_MAX, _)                                                 \
	F(R, U64, max_tokens, 0, UINT32_MAX, _)                                                    \
	F(R, U64, reserved_pages, 0, UINT32_MAX, _)                                                \
	F(R, U64, queued_ms, 0, UINT64_MAX, _)

#define MSG_FIELDS_fd_poll(F, R)                                                                   \
	F(R, U64, id, 1, UINT64_MAX, _)                                                            \
	F(R, U64, from, 0, UINT32_MAX, _)                                                          \
	F(R, U64, max, 1, MSG_IDS_MAX, _)                                                          \
	F(R, U64, wait_ms, 0, MSG_WAIT_MAX_MS, _)

/* As tokens (the text is the worker's, forwarded), and for finish "error"
 * the IG_E_* code and message (0 and "" otherwise). */
#define MSG_FIELDS_fd_tokens(F, R)                                                                 \
	F(R, U64, id, 1, UINT64_MAX, _)                                                            \
	F(R, U64, from, 0, UINT32_MAX, _)                                                          \
	F(R, IDS, tokens, 0, MSG_IDS_MAX, _)                                                       \
	F(R, STR, text, 0, MSG_TEXT_MAX, _)                                                        \
	F(R, STR, state, 1, 16, _)                                                                 \
	F(R, BOOL, done, 0, 1, _)                                                                  \
	F(R, STR, finish, 0, 16, _)                                                                \
	F(R, U64, generated, 0, UINT32_MAX, _)                                                     \
	F(R, U64, code, 0, UINT32_MAX, _)                                                          \
	F(R, STR, message, 0, 1024, _)                                                             \
	F(R, U64, cached, 0, UINT32_MAX, _)

#define MSG_FIELDS_fd_cancel(F, R) F(R, U64, id, 1, UINT64_MAX, _)

#define MSG_FIELDS_fd_status(F, R) F(R, U64, id, 1, UINT64_MAX, _)

#define MSG_FIELDS_fd_request(F, R)                                                                \
	F(R, U64, id, 1, UINT64_MAX, _)                                                            \
	F(R, STR, state, 1, 16, _)                                                                 \
	F(R, STR, class, 1, 16, _)                                                                 \
	F(R, U64, prompt_tokens, 0, UINT32_MAX, _)                                                 \
	F(R, U64, max_tokens, 0, UINT32_MAX, _)                                                    \
	F(R, U64, generated, 0, UINT32_MAX, _)                                                     \
	F(R, BOOL, done, 0, 1, _)                                                                  \
	F(R, STR, finish, 0, 16, _)                                                                \
	F(R, U64, code, 0, UINT32_MAX, _)                                                          \
	F(R, STR, message, 0, 1024, _)                                                             \
	F(R, U64, age_ms, 0, UINT64_MAX, _)                                                        \
	F(R, U64, cached, 0, UINT32_MAX, _)

#define MSG_FIELDS_fd_model(F, R) F(R, U64, seq, 0, UINT64_MAX, _)

/* tokenizer: the model file's, "bytes" (ids 0..255 are bytes, 256..259
 * specials) or "none" (ids only); eos 2^32-1 when the model has none; serving: a model file is
 * loaded (false for a built-in description: requests are refused); worker:
 * the gpu-worker's state (running, starting, restarting, ...). */
#define MSG_FIELDS_fd_model_reply(F, R)                                                            \
	F(R, STR, model, 1, 64, _)                                                                 \
	F(R, STR, backend, 1, 16, _)                                                               \
	F(R, STR, kv_format, 1, 16, _)                                                             \
	F(R, U64, vocab, 1, UINT32_MAX, _)                                                         \
	F(R, U64, context_tokens, 1, UINT32_MAX, _)                                                \
	F(R, U64, page_tokens, 1, UINT32_MAX, _)                                                   \
	F(R, U64, pool_pages, 1, UINT32_MAX, _)                                                    \
	F(R, U64, lanes, 1, 64, _)                                                                 \
	F(R, U64, chunk_tokens, 1, UINT32_MAX, _)                                                  \
	F(R, U64, default_max_tokens, 1, UINT32_MAX, _)                                            \
	F(R, STR, tokenizer, 0, 16, _)                                                             \
	F(R, U64, eos, 0, UINT32_MAX, _)                                                           \
	F(R, BOOL, serving, 0, 1, _)                                                               \
	F(R, STR, worker, 1, 16, _)

#define MSG_FIELDS_fd_stats(F, R) F(R, U64, seq, 0, UINT64_MAX, _)

#define MSG_FIELDS_fd_req(F, R)                                                                    \
	F(R, U64, id, 1, UINT64_MAX, _)                                                            \
	F(R, STR, state, 1, 16, _)                                                                 \
	F(R, STR, class, 1, 16, _)                                                                 \
	F(R, U64, prompt_tokens, 0, UINT32_MAX, _)                                                 \
	F(R, U64, max_tokens, 0, UINT32_MAX, _)                                                    \
	F(R, U64, generated, 0, UINT32_MAX, _)                                                     \
	F(R, STR, finish, 0, 16, _)                                                                \
	F(R, U64, age_ms, 0, UINT64_MAX, _)

/* Counters since the supervisor started; live: at the worker, queued:
 * waiting for a worker slot, kept: finished and still readable, waiting:
 * polls and submits held open; slot_waits: submits that found every worker
 * slot taken and waited; requests: the first 64 requests by id. */
#define MSG_FIELDS_fd_stats_reply(F, R)                                                            \
	F(R, U64, uptime_ms, 0, UINT64_MAX, _)                                                     \
	F(R, STR, worker, 1, 16, _)                                                                \
	F(R, U64, worker_pid, 0, INT32_MAX, _)                                                     \
	F(R, U64, worker_restarts, 0, UINT64_MAX, _)                                               \
	F(R, U64, live, 0, UINT32_MAX, _)                                                          \
	F(R, U64, queued, 0, UINT32_MAX, _)                                                        \
	F(R, U64, kept, 0, UINT32_MAX, _)                                                          \
	F(R, U64, waiting, 0, UINT32_MAX, _)                                                       \
	F(R, U64, submitted, 0, UINT64_MAX, _)                                                     \
	F(R, U64, finished, 0, UINT64_MAX, _)                                                      \
	F(R, U64, failed, 0, UINT64_MAX, _)                                                        \
	F(R, U64, refused, 0, UINT64_MAX, _)                                                       \
	F(R, U64, rejected, 0, UINT64_MAX, _)                                                      \
	F(R, U64, tokens, 0, UINT64_MAX, _)                                                        \
	F(R, U64, slot_waits, 0, UINT64_MAX, _)                                                    \
	F(R, ARR, requests, 0, 64, fd_req)

#define MSG_FIELDS_poll_ent(F, R)                                                                  \
	F(R, U64, id, 1, UINT64_MAX, _)                                                            \
	F(R, U64, from, 0, UINT32_MAX, _)

#define MSG_FIELDS_poll_many(F, R) F(R, ARR, reqs, 1, MSG_POLL_MANY_MAX, poll_ent)

/* code: 0 when the request was found (then as a tokens reply, at most
 * MSG_POLL_MANY_IDS tokens and MSG_POLL_MANY_TEXT bytes of text), else the
 * IG_E_* code a poll would get (7 not found, 2 `from` past the tokens
 * generated) with the other fields empty. text_ends: per token, the bytes
 * of `text` complete once it is added (a final U+FFFD, once done, follows
 * the last end), so the door can answer a poll from any index with the
 * worker's text. */
#define MSG_FIELDS_tokens_ent(F, R)                                                                \
	F(R, U64, id, 1, UINT64_MAX, _)                                                            \
	F(R, U64, from, 0, UINT32_MAX, _)                                                          \
	F(R, IDS, tokens, 0, MSG_POLL_MANY_IDS, _)                                                 \
	F(R, STR, text, 0, MSG_POLL_MANY_TEXT, _)                                                  \
	F(R, IDS, text_ends, 0, MSG_POLL_MANY_IDS, _)                                              \
	F(R, STR, state, 0, 16, _)                                                                 \
	F(R, BOOL, done, 0, 1, _)                                                                  \
	F(R, STR, finish, 0, 16, _)                                                                \
	F(R, U64, generated, 0, UINT32_MAX, _)                                                     \
	F(R, U64, code, 0, UINT32_MAX, _)                                                          \
	F(R, U64, cached, 0, UINT32_MAX, _)

/* pid: the worker's, so that an answer from a restarted worker (whose ids
 * start again) is never taken for the old one's. */
#define MSG_FIELDS_tokens_many(F, R)                                                               \
	F(R, U64, pid, 1, INT32_MAX, _)                                                            \
	F(R, ARR, reqs, 0, MSG_POLL_MANY_MAX, tokens_ent)

/* poll_lp: one request's tokens from `from`, with their log-probabilities
 * (a request submitted with logprobs; the door polls it this way instead
 * of in a poll_many). The answer, tokens_lp: `ent` what a poll_many would
 * answer for it (one entry; at most MSG_LP_TOKENS tokens), and per token
 * of ent.tokens, in order, lp_n[i] entries of `lps`: the sampled token's
 * first, then its top list (at most the top_logprobs asked: ids with no
 * probability are left out), each entry's
 * piece (the bytes the token stands for: model/tokenizer.h, tok_piece) in
 * `pieces`, one byte an element, ending at piece_ends[j]. A logprob of
 * -infinity (a degenerate distribution: no finite logit) travels as
 * -MSG_LP_FLOOR. Fewer tokens come when their pieces would pass
 * MSG_LP_BYTES (one always fits: 21 pieces of TOK_PIECE_MAX, 256 bytes).
 * At these limits tokens_lp encodes to about 43 KB, within MSG_MAX_BYTES
 * (a unit test checks every type's bound). */
#define MSG_LP_TOKENS 16u
#define MSG_LP_ENTS   (MSG_LP_TOKENS * (1u + MSG_TOP_LP_MAX))
#define MSG_LP_BYTES  6144u
#define MSG_LP_FLOOR  1.7976931348623157e308 /* DBL_MAX */

#define MSG_FIELDS_lp(F, R)                                                                        \
	F(R, U64, id, 0, UINT32_MAX, _)                                                            \
	F(R, F64, lp, -MSG_LP_FLOOR, 0.0, _)

/* poll_lp's optional `prompt` (docs/adr/0063; a request submitted with
 * echo): the answer is about the prompt instead. `from` counts prompt
 * positions; ent.tokens are prompt tokens [from, from + k), ent.text and
 * text_ends the worker's text of the prompt alone (as a generation's: its
 * specials give none, a final U+FFFD once its last token is taken), and
 * each token's lps as above, the prompt token's entry first, but none at
 * all at position 0 (lp_n 0: nothing comes before it). ent.generated is
 * the positions ready (holding theirs: all once the first token exists),
 * and k stops there: a `from` at or past it answers no tokens, not an
 * error; ent.state, done, finish and cached are the request's, as a poll's.
 * A request done with fewer positions ready than its prompt's never gets
 * the rest. A request submitted without echo answers code 2. */
#define MSG_FIELDS_poll_lp(F, R)                                                                   \
	F(R, U64, id, 1, UINT64_MAX, _)                                                            \
	F(R, U64, from, 0, UINT32_MAX, _)                                                          \
	F(R, OBOOL, prompt, 0, 1, _) /* optional: the prompt's positions */

#define MSG_FIELDS_tokens_lp(F, R)                                                                 \
	F(R, U64, pid, 1, INT32_MAX, _)                                                            \
	F(R, ARR, ent, 1, 1, tokens_ent)                                                           \
	F(R, ARR, lps, 0, MSG_LP_ENTS, lp)                                                         \
	F(R, IDS, lp_n, 0, MSG_LP_TOKENS, _)                                                       \
	F(R, IDS, pieces, 0, MSG_LP_BYTES, _)                                                      \
	F(R, IDS, piece_ends, 0, MSG_LP_ENTS, _)

/* ---- generated: C types ------------------------------------------------- */

#define MSG__CTYPE_U64(name, hi, sub)   uint64_t name;
#define MSG__CTYPE_BOOL(name, hi, sub)  bool name;
#define MSG__CTYPE_OU64(name, hi, sub)  uint64_t name;
#define MSG__CTYPE_OBOOL(name, hi, sub) bool name;
#define MSG__CTYPE_OSTR(name, hi, sub)  struct msg_str name;
#define MSG__CTYPE_STR(name, hi, sub)   struct msg_str name;
#define MSG__CTYPE_ARR(name, hi, sub)                                                              \
	struct {                                                                                   \
		uint32_t n;                                                                        \
		struct msg_##sub v[hi];                                                            \
	} name;
#define MSG__CTYPE_F64(name, hi, sub) double name;
#define MSG__CTYPE_IDS(name, hi, sub)                                                              \
	struct {                                                                                   \
		uint32_t n;                                                                        \
		uint32_t v[hi];                                                                    \
	} name;
#define MSG__CTYPE_U64S(name, hi, sub)                                                             \
	struct {                                                                                   \
		uint32_t n;                                                                        \
		uint64_t v[hi];                                                                    \
	} name;
#define MSG__MEMBER(R, kind, name, lo, hi, sub) MSG__CTYPE_##kind(name, hi, sub)

#define MSG__REC_STRUCT(rec, doc)                                                                  \
	struct msg_##rec {                                                                         \
		MSG_FIELDS_##rec(MSG__MEMBER, rec)                                                 \
	};
MSG_RECORDS(MSG__REC_STRUCT)

#define MSG__TYPE_STRUCT(NAME, num, name, doc)                                                     \
	struct msg_##name {                                                                        \
		MSG_FIELDS_##name(MSG__MEMBER, name)                                               \
	};
MSG_TYPES(MSG__TYPE_STRUCT)

enum msg_type {
#define MSG__TYPE_ENUM(NAME, num, name, doc) MSG_##NAME = num,
	MSG_TYPES(MSG__TYPE_ENUM)
#undef MSG__TYPE_ENUM
};

struct msg {
	uint32_t type;    /* enum msg_type */
	uint32_t version; /* set by msg_decode; msg_encode always sends ours */
	union {
#define MSG__UNION_MEMBER(NAME, num, name, doc) struct msg_##name name;
		MSG_TYPES(MSG__UNION_MEMBER)
#undef MSG__UNION_MEMBER
	} u;
};

/* ---- descriptors --------------------------------------------------------- */

struct msg_rec;

struct msg_field {
	const char *name;
	enum msg_kind kind;
	size_t offset;             /* of the member; for ARR and IDS, of its count `n` */
	size_t elems;              /* ARR, IDS: offset of the element array `v` */
	uint64_t lo, hi;           /* U64: value; STR: bytes; ARR, IDS: element count */
	double flo, fhi;           /* F64: value (lo and hi are 0) */
	const struct msg_rec *sub; /* ARR: the element record */
	bool optional;             /* OU64, OBOOL, OSTR: may be left out; left out when 0 */
};

struct msg_rec {
	const char *name;
	const char *doc;
	size_t size;
	uint32_t nfields;
	const struct msg_field *fields;
};

struct msg_desc {
	uint32_t type;
	struct msg_rec rec; /* the payload; rec.name is the message name */
};

/* Every message type, in declaration order. */
extern const struct msg_desc msg_descs[];
extern const size_t msg_ndescs;

/* The descriptor of `type`, or NULL when the type is unknown. */
const struct msg_desc *msg_desc_find(uint32_t type);
/* "hello", or "unknown" */
const char *msg_type_name(uint32_t type);
/* Upper bound of the encoded size of a message of this type at its limits. */
size_t msg_max_encoded(const struct msg_desc *d);

/* ---- codec --------------------------------------------------------------- */

/* Where encoded bytes go: return 0 on success, non-zero to abort encoding.
 * (The same contract as msgpack-c's msgpack_packer_write.) */
typedef int (*msg_write_fn)(void *ctx, const char *buf, size_t len);

/* Encode `m` (its type and payload; the version is always ours). Refuses a
 * message that would not decode: unknown type, values outside their limits,
 * strings that are not UTF-8. Nothing is written on refusal. */
int msg_encode(const struct msg *m, msg_write_fn write, void *ctx, struct ig_errbuf *eb);

/* The checks msg_encode and msg_decode make of a message (its type known,
 * every value within its declaration's limits, strings UTF-8 without NUL),
 * for a message handed over in process (the HTTP API's submits to the front
 * door): IG_E_OK or the error decoding would give, naming the field. */
int msg_check(const struct msg *m, struct ig_errbuf *eb);

/*
 * Re-tag an encoded message in place: the envelope's type `from` becomes
 * `to`, written in the width the sender gave it; no other byte changes. For
 * two types declared with the same fields (fd_submit and submit), so that a
 * message decoded as one goes on as the other without being encoded again
 * (the front door forwards a client's fd_submit to the worker this way).
 * `buf` holds a message msg_decode took, of type `from`. IG_E_INVAL, with
 * nothing changed, when the two types' fields differ, the type found is not
 * `from`, or `to` does not fit the width the type was written in (never
 * for types below 128, msgpack's one-byte integers).
 */
int msg_retag(void *buf, size_t len, uint32_t from, uint32_t to, struct ig_errbuf *eb);

/* Decode `len` bytes at `buf` into `out`. String views in `out` point into
 * `buf`. On success the payload member of out->type is filled in (members of
 * the union for other types are left as they were). On failure only
 * out->type and out->version are meaningful (0 when not read); on
 * IG_E_PROTO_VERSION they hold what the peer sent so the caller can name it. */
int msg_decode(const void *buf, size_t len, struct msg *out, struct ig_errbuf *eb);

/* A growable byte buffer, for encoding outside of nng. */
struct msg_buf {
	char *p;
	size_t n, cap;
};
int msg_buf_write(void *ctx, const char *buf, size_t len); /* a msg_write_fn */
void msg_buf_release(struct msg_buf *b);

/* Field-by-field equality of two messages by their descriptor. */
bool msg_equal(const struct msg *a, const struct msg *b);

static inline struct msg_str msg_str_of(const char *s)
{
	struct msg_str v = {s, 0};

	while (s && s[v.n])
		v.n++;
	return v;
}
bool msg_str_eq(struct msg_str s, const char *lit);
/* Copy into a NUL-terminated buffer, cutting at cap - 1 bytes (at a UTF-8
 * character boundary). */
void msg_str_copy(char *out, size_t cap, struct msg_str s);
/* True when the n bytes at p are UTF-8 without NUL. */
bool msg_utf8_valid(const char *p, size_t n);

#endif
