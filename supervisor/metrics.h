/*
 * metrics.h - the metrics page's families, declared once, and the renderer of
 * the Prometheus text format (version 0.0.4) over a snapshot of the figures.
 *
 * Names follow the reference engine's (docs/design.md, section 1); families
 * the reference does not name (prompt tokens, process up and restarts, the
 * freshness of the daemons' figures) are ours, in its style. No per-request
 * labels.
 *
 * Sources: `plan` figures come from the plan the supervisor computed (always
 * there); `sup` from the supervisor's process table (always there);
 * `worker` from the gpu-worker's worker_stats_reply and `kvstore` from the
 * kvstore daemon's kv_stats_reply (proto/kvmetrics.h renders those, under
 * its own table). A daemon whose last answer failed has its families left out
 * of the page (Prometheus then marks its series stale) and shows as
 * ignis_stats_up{source} 0.
 *
 * The renderer is a pure function of the snapshot: the server (metsrv.h)
 * copies a snapshot under its lock and renders outside it.
 */
#ifndef IGNIS_SUPERVISOR_METRICS_H
#define IGNIS_SUPERVISOR_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "proto/msg.h"
#include "common/vplan.h"
#include "http.h"

enum met_type { MET_COUNTER, MET_GAUGE, MET_HISTOGRAM };
enum met_source { MET_SRC_PLAN, MET_SRC_SUP, MET_SRC_WORKER, MET_SRC_KVSTORE };

/*
 * X(ID, name, type, labels, source, help): one row per family, in the order
 * of the page. `labels`: the label names, comma-separated ("" none).
 */
#define MET_FAMILIES(X)                                                                            \
	X(VRAM_RESERVED, ignis_vram_reserved_bytes, GAUGE, "line", PLAN,                           \
	  "Device memory reserved at load, by plan line (the fixed lines, Flash-Next's residency " \
	  "and expert cache, and the KV pool), in bytes.")                                         \
	X(VRAM_BUDGET, ignis_vram_budget_bytes, GAUGE, "", PLAN,                                   \
	  "The device memory budget of the plan, in bytes.")                                       \
	X(KV_POOL_PAGES, ignis_kv_pool_pages, GAUGE, "", PLAN,                                     \
	  "Pages of the KV pool (64 tokens each).")                                                \
	X(KV_PAGE_BYTES, ignis_kv_page_bytes, GAUGE, "", PLAN, "Bytes of one KV pool page.")       \
	X(KV_POOL_USED, ignis_kv_pool_used_pages, GAUGE, "", WORKER,                               \
	  "KV pool pages reserved by admitted requests (a request reserves its whole bound at "    \
	  "admission) and by retained prompt checkpoints.")                                        \
	X(KV_POOL_RETAINED, ignis_kv_pool_retained_pages, GAUGE, "", WORKER,                       \
	  "KV pool pages only retained prompt checkpoints hold: given up for an admission "        \
	  "before any live sequence moves.")                                                       \
	X(KV_POOL_FREE, ignis_kv_pool_free_pages, GAUGE, "", WORKER, "KV pool pages free.")        \
	X(KV_POOL_PENDING, ignis_kv_pool_pending_pages, GAUGE, "", WORKER,                         \
	  "KV pool pages the waiting requests will reserve at their admission.")                   \
	X(SCHED_REQUESTS, ignis_scheduler_requests, GAUGE, "state", WORKER,                        \
	  "Live requests by state: waiting (no pages yet), prefill, ready (prompt done, no "       \
	  "lane), decode (on a lane), moving_out, moved (in a tier), moving_in.")                  \
	X(KV_EVICTIONS, ignis_kv_cache_evictions_total, COUNTER, "", WORKER,                       \
	  "Sequences moved off the device to make room (moves out that landed).")                  \
	X(KV_MOVES, ignis_kv_moves_total, COUNTER, "direction", WORKER,                            \
	  "Moves between the device and KV-RAM that landed, by direction (out, in).")              \
	X(KV_MOVE_BYTES, ignis_kv_move_bytes_total, COUNTER, "direction", WORKER,                  \
	  "Sequence-image bytes moved, by direction.")                                             \
	X(KV_REPREFILLS, ignis_kv_reprefills_total, COUNTER, "", WORKER,                           \
	  "Moved sequences whose record a tier gave up or lost: prefilled again from the start.")  \
	X(KV_MOVES_STOPPED, ignis_kv_moves_stopped_total, COUNTER, "", WORKER,                     \
	  "Moves out stopped before they landed: the request they made room for no longer "        \
	  "waited (admitted from room freed elsewhere, or ended); the victim kept its pages.")     \
	X(KV_MOVE_RETRIES, ignis_kv_move_retries_total, COUNTER, "", WORKER,                       \
	  "Moves the tier refused (no room) or that started again (the kvstore daemon away).")     \
	X(REQ_ACCEPTED, ignis_requests_accepted_total, COUNTER, "", WORKER,                        \
	  "Requests accepted by the gpu-worker.")                                                  \
	X(REQ_COMPLETED, ignis_requests_completed_total, COUNTER, "reason", WORKER,                \
	  "Requests finished, by reason: length (max_tokens), eos, context.")                      \
	X(REQ_CANCELLED, ignis_requests_cancelled_total, COUNTER, "", WORKER,                      \
	  "Requests cancelled before they finished.")                                              \
	X(PROMPT_TOKENS, ignis_prompt_tokens_total, COUNTER, "", WORKER,                           \
	  "Prompt tokens of the accepted requests.")                                               \
	X(GENERATED_TOKENS, ignis_generated_tokens_total, COUNTER, "", WORKER,                     \
	  "Tokens generated (those of cancelled requests included).")                              \
	X(PREFILL_TOKENS, ignis_prefill_tokens_total, COUNTER, "", WORKER,                         \
	  "Prompt tokens run through the model (prefill chunks).")                                 \
	X(ROUNDS, ignis_scheduler_rounds_total, COUNTER, "", WORKER,                               \
	  "Rounds run by the gpu-worker (one batch of decode tokens and prefill chunks each).")    \
	X(TTFT, ignis_request_ttft_seconds, HISTOGRAM, "le", WORKER,                               \
	  "Time from a request's submit to its first generated token, in seconds.")                \
	X(RETAINED_SLOTS, ignis_retained_device_slots, GAUGE, "state", WORKER,                     \
	  "Device retained slots by state: used (a prompt checkpoint), free (the host tier's: "    \
	  "ignis_retained_slots{tier=\"host\"}).")                                                 \
	X(RETAINED_REUSED, ignis_retained_reused_tokens_total, COUNTER, "tier,kind", WORKER,       \
	  "Prompt tokens requests took from retained state instead of prefilling them, by tier "   \
	  "(device, host) and kind (checkpoint: a prompt's end; prefix: where two prompts part).") \
	X(RETAINED_CLAIMS, ignis_retained_claims_total, COUNTER, "result", WORKER,                 \
	  "Requests by what prompt reuse found: hit (started from a checkpoint), no_match, "       \
	  "given_up (its checkpoint went before it was admitted).")                                \
	X(RETAINED_CAPTURES, ignis_retained_captures_total, COUNTER, "", WORKER,                   \
	  "Prompts retained as checkpoints.")                                                      \
	X(RETAINED_SKIPS, ignis_retained_capture_skips_total, COUNTER, "reason", WORKER,           \
	  "Captures skipped: no_slot (every slot held by a checkpoint a waiting request counts "   \
	  "on), no_page (no free KV page for the partial last page), host_busy (no device slot "   \
	  "and a host capture under way), host_refused (the kvstore daemon skipped it).")          \
	X(RETAINED_GIVEN_UP, ignis_retained_given_up_total, COUNTER, "reason", WORKER,             \
	  "Checkpoints given up: room (for an admission), slot (for a newer capture), tier (the "  \
	  "kvstore daemon gave its host slot up or lost it).")                                     \
	X(EXPERT_SLOTS, ignis_expert_cache_slots, GAUGE, "class", WORKER,                          \
	  "Slots of the expert cache by class (a projection in its tensor type(s): gate_up:bf16, " \
	  "down:q6_k); none for a model without routed experts or with every expert resident.")    \
	X(EXPERT_HITS, ignis_expert_cache_hits_total, COUNTER, "class", WORKER,                    \
	  "Experts a pass found in the expert cache, by class.")                                   \
	X(EXPERT_MISSES, ignis_expert_cache_misses_total, COUNTER, "class", WORKER,                \
	  "Experts a pass copied into the expert cache from host memory, by class.")               \
	X(EXPERT_BYTES, ignis_expert_cache_streamed_bytes_total, COUNTER, "class", WORKER,         \
	  "Bytes of experts copied host to device (misses and prefetches), by class.")             \
	X(EXPERT_EVICTIONS, ignis_expert_cache_evictions_total, COUNTER, "class", WORKER,          \
	  "Experts the cache gave up for a miss (the least recently used of the class), by "       \
	  "class.")                                                                                \
	X(EXPERT_PREFETCHES, ignis_expert_cache_prefetches_total, COUNTER, "class", WORKER,        \
	  "Experts copied into the cache ahead of their layer (its router on the residual before " \
	  "the layer's token mixer), by class; a hit later if the guess was right.")               \
	X(EXPERT_STAGED, ignis_expert_cache_staged_layers_total, COUNTER, "", WORKER,              \
	  "Layers of passes that routed more experts than a class holds (prefill chunks) and "     \
	  "read the whole layer from the staging ring.")                                           \
	X(PROCESS_UP, ignis_process_up, GAUGE, "role", SUP,                                        \
	  "1 when the process is running and answered its handshake, else 0.")                     \
	X(PROCESS_RESTARTS, ignis_process_restarts_total, COUNTER, "role", SUP,                    \
	  "Restarts of the process by the supervisor (after a crash, a hang or an operator's "     \
	  "restart).")                                                                             \
	X(STATS_UP, ignis_stats_up, GAUGE, "source", SUP,                                          \
	  "1 when the daemon answered the supervisor's last request for its figures (gathered "    \
	  "every second); 0 leaves its families off the page.")                                    \
	X(STATS_AGE, ignis_stats_age_seconds, GAUGE, "source", SUP,                                \
	  "Seconds since the daemon's figures were last gathered (absent until the first "         \
	  "answer).")                                                                              \
	X(PROTO_REJECTED, ignis_proto_rejected_total, COUNTER, "socket", SUP,                      \
	  "Messages refused because they did not decode (malformed, oversize, another protocol "   \
	  "version, an unknown type or field), by the socket that got them: client (the front "    \
	  "door), supervisor; gpu-worker and kvstore while they are up. Only the first few of a "  \
	  "kind each period are logged (ignis.proto.rejected).")                                   \
	X(DOOR_DISPLACED, ignis_frontdoor_displaced_total, COUNTER, "", SUP,                       \
	  "Waiting submits refused to make room in the front door's full queue for another "       \
	  "client's: the newest of the client holding the most of the queue.")                     \
	X(HTTP_CONNECTIONS, ignis_http_connections, GAUGE, "", SUP,                                \
	  "Connections open to the HTTP API.")                                                     \
	X(HTTP_CONNECTIONS_MAX, ignis_http_connections_limit, GAUGE, "", SUP,                      \
	  "The most connections the HTTP API takes at once (--server-http-max-connections, or "    \
	  "from the descriptor limit).")                                                           \
	X(HTTP_TIMEOUTS, ignis_http_timeouts_total, COUNTER, "", SUP,                              \
	  "HTTP connections cut because a request's headers or body came too slowly "              \
	  "(--server-http-header-timeout, --server-http-body-timeout), or sat idle that long.")    \
	X(HTTP_REFUSED, ignis_http_refused_total, COUNTER, "reason", SUP,                          \
	  "HTTP requests refused before they were read: host (a Host header that does not name "   \
	  "a loopback server), origin (a web page's origin not named), api_key (missing or "       \
	  "wrong), content_type (a body that is not application/json).")

enum met_id {
#define MET__ENUM(ID, name, type, labels, source, help) MET_##ID,
	MET_FAMILIES(MET__ENUM)
#undef MET__ENUM
	    MET__COUNT
};

/*
 * The samples that are one figure each, field-mapped as proto/kvmetrics.h
 * maps the kvstore's: one row a sample, in the order of the page, the rows of
 * a family consecutive. Adding such a figure is a row here, nothing else.
 *   F(ID, "label value", member): the sample is `member` of struct met_snap
 *     below: w.FIELD, a field of the gpu-worker's worker_stats_reply, or a
 *     plan figure; a uint64_t (checked at build time).
 *   C(ID, "label value", name): computed from the snapshot by
 *     met__calc_<name> (metrics.c). The one today: free pages, the pool less
 *     the pages reserved (met_check_worker keeps that from wrapping).
 * The label value goes with the family's one label name (its `labels`); ""
 * for a family without labels; a family of two labels ("tier,kind") takes
 * two values the same way ("device,checkpoint").
 *
 * The families that are not rows, and why, in the renderer's one switch:
 * ignis_request_ttft_seconds (a histogram: its buckets made cumulative and
 * in seconds), ignis_vram_reserved_bytes (a sample per plan line, named by
 * the plan's tables), ignis_process_* and ignis_stats_* (a sample per
 * process or daemon), ignis_proto_rejected_total (a daemon's socket shows
 * only while that daemon is up) and ignis_expert_cache_* but the staged
 * layers (a sample per class of the model's: met_family_per_class).
 */
#define MET_ROWS(F, C)                                                                             \
	F(VRAM_BUDGET, "", budget_bytes)                                                           \
	F(KV_POOL_PAGES, "", pool_pages)                                                           \
	F(KV_PAGE_BYTES, "", page_bytes)                                                           \
	F(KV_POOL_USED, "", w.used_pages)                                                          \
	F(KV_POOL_RETAINED, "", w.retained_pages)                                                  \
	C(KV_POOL_FREE, "", free_pages)                                                            \
	F(KV_POOL_PENDING, "", w.pending_pages)                                                    \
	F(SCHED_REQUESTS, "waiting", w.waiting)                                                    \
	F(SCHED_REQUESTS, "prefill", w.prefill)                                                    \
	F(SCHED_REQUESTS, "ready", w.ready)                                                        \
	F(SCHED_REQUESTS, "decode", w.decode)                                                      \
	F(SCHED_REQUESTS, "moving_out", w.moving_out)                                              \
	F(SCHED_REQUESTS, "moved", w.moved)                                                        \
	F(SCHED_REQUESTS, "moving_in", w.moving_in)                                                \
	F(KV_EVICTIONS, "", w.moves_out)                                                           \
	F(KV_MOVES, "out", w.moves_out)                                                            \
	F(KV_MOVES, "in", w.moves_in)                                                              \
	F(KV_MOVE_BYTES, "out", w.move_out_bytes)                                                  \
	F(KV_MOVE_BYTES, "in", w.move_in_bytes)                                                    \
	F(KV_REPREFILLS, "", w.reprefills)                                                         \
	F(KV_MOVES_STOPPED, "", w.moves_stopped)                                                   \
	F(KV_MOVE_RETRIES, "", w.move_retries)                                                     \
	F(REQ_ACCEPTED, "", w.accepted)                                                            \
	F(REQ_COMPLETED, "length", w.finished_length)                                              \
	F(REQ_COMPLETED, "eos", w.finished_eos)                                                    \
	F(REQ_COMPLETED, "context", w.finished_context)                                            \
	F(REQ_CANCELLED, "", w.cancelled)                                                          \
	F(PROMPT_TOKENS, "", w.prompt_tokens)                                                      \
	F(GENERATED_TOKENS, "", w.generated_tokens)                                                \
	F(PREFILL_TOKENS, "", w.prefill_tokens)                                                    \
	F(ROUNDS, "", w.rounds)                                                                    \
	F(RETAINED_SLOTS, "used", w.checkpoints)                                                   \
	C(RETAINED_SLOTS, "free", free_slots)                                                      \
	C(RETAINED_REUSED, "device,checkpoint", checkpoint_tokens)                                 \
	C(RETAINED_REUSED, "device,prefix", device_prefix_tokens)                                  \
	C(RETAINED_REUSED, "host,checkpoint", host_checkpoint_tokens)                              \
	F(RETAINED_REUSED, "host,prefix", w.reused_host_prefix_tokens)                             \
	F(RETAINED_CLAIMS, "hit", w.reuse_hits)                                                    \
	F(RETAINED_CLAIMS, "no_match", w.reuse_misses)                                             \
	F(RETAINED_CLAIMS, "given_up", w.reuse_misses_given_up)                                    \
	F(RETAINED_CAPTURES, "", w.reuse_captures)                                                 \
	F(RETAINED_SKIPS, "no_slot", w.reuse_skips_slot)                                           \
	F(RETAINED_SKIPS, "no_page", w.reuse_skips_page)                                           \
	F(RETAINED_SKIPS, "host_busy", w.reuse_skips_host_busy)                                    \
	F(RETAINED_SKIPS, "host_refused", w.reuse_skips_host_refused)                              \
	F(RETAINED_GIVEN_UP, "room", w.reuse_given_up_room)                                        \
	F(RETAINED_GIVEN_UP, "slot", w.reuse_given_up_slot)                                        \
	F(RETAINED_GIVEN_UP, "tier", w.reuse_given_up_tier)                                        \
	F(EXPERT_STAGED, "", w.expert_staged_layers)                                               \
	F(DOOR_DISPLACED, "", door_displaced)                                                      \
	F(HTTP_CONNECTIONS, "", http.connections)                                                  \
	F(HTTP_CONNECTIONS_MAX, "", http.max_connections)                                          \
	F(HTTP_TIMEOUTS, "", http.timeouts)                                                        \
	F(HTTP_REFUSED, "host", http.refused_host)                                                 \
	F(HTTP_REFUSED, "origin", http.refused_origin)                                             \
	F(HTTP_REFUSED, "api_key", http.refused_key)                                               \
	F(HTTP_REFUSED, "content_type", http.refused_type)

/* One row of MET_ROWS: where its figure is in the snapshot, or how it is
 * computed. */
struct met_snap;
struct met_row {
	enum met_id id;
	const char *label_value; /* "" for a family without labels */
	size_t offset;           /* of the uint64_t in struct met_snap; calc NULL */
	uint64_t (*calc)(const struct met_snap *s);
};

/* Every row, in the order of the page. */
extern const struct met_row met_rows[];
extern const size_t met_nrows;

struct met_family {
	const char *name;
	enum met_type type;
	const char *labels; /* comma-separated label names; "" none */
	enum met_source source;
	const char *help;
};

/* Every family, in the order of the page (indexed by enum met_id). */
extern const struct met_family met_families[MET__COUNT];

/* The extra lines of the plan, after the fixed ones (VPLAN_LINES), in the
 * `line` label of ignis_vram_reserved_bytes: their sum with the fixed lines
 * is the plan's total. */
#define MET_PLAN_EXTRA_LINES(X)                                                                    \
	X(PREFILL_STAGING, "prefill_staging")                                                      \
	X(EXPERT_TABLES, "expert_tables")                                                          \
	X(EXPERT_CACHE, "expert_cache")                                                            \
	X(KV_POOL, "kv_pool")

enum met_plan_extra {
#define MET__EXTRA_ENUM(ID, name) MET_LINE_##ID,
	MET_PLAN_EXTRA_LINES(MET__EXTRA_ENUM)
#undef MET__EXTRA_ENUM
	    MET_NEXTRA
};

/* One supervised process (the roles of status_reply, the supervisor too). */
#define MET_NPROC 3
struct met_proc {
	char role[MSG_ROLE_MAX + 1];
	bool up;
	uint64_t restarts;
};

/* One daemon's figures: `up` when its last answer came; `have` once it ever
 * answered (then `at_ms` is when, monotonic). */
struct met_src {
	bool up, have;
	uint64_t at_ms;
};

/* Everything the page shows. Plain data, copied whole: no pointers (the
 * kvstore reply's arena_name view is cleared when it is stored). */
struct met_snap {
	/* the plan */
	uint64_t line[VPLAN_NLINES];
	uint64_t extra[MET_NEXTRA];
	uint64_t budget_bytes, pool_pages, page_bytes;
	/* the processes */
	struct met_proc procs[MET_NPROC];
	uint32_t nprocs;
	/* the daemons */
	struct met_src worker, kvstore;
	uint64_t rejected_client, rejected_supervisor; /* the supervisor's own sockets */
	uint64_t door_displaced;                       /* the front door's fairness */
	struct http_counts http;                       /* the HTTP API's (zero when off) */
	struct msg_worker_stats_reply w;
	char expert_names[8][33]; /* w.experts[i].name (its view is cleared) */
	struct msg_kv_stats_reply kv;
};

/* The plan's figures into `s` (the rest is left as it is). */
void met_snap_plan(struct met_snap *s, const struct vplan *p);

/* A worker family with a sample per expert cache class (none for a model
 * without routed experts): not rows. */
bool met_family_per_class(enum met_id id);

/* Check a worker's reply before it is shown: buckets ascending, the last
 * +Inf (le_us 2^64-1), pages within the pool. IG_E_PROTO_FIELD_RANGE naming
 * the field otherwise. */
int met_check_worker(const struct msg_worker_stats_reply *r, struct ig_errbuf *eb);

/* Render the page for `s` at monotonic time `now_ms` (for the ages). HELP and
 * TYPE once per family, families of a daemon that is not up left out. Returns
 * 0, or -1 when writing to `f` failed. */
int met_render(FILE *f, const struct met_snap *s, uint64_t now_ms);

/*
 * The families an inference gateway's endpoint picker reads by default (the
 * Gateway API Inference Extension's model-server protocol, under vLLM's
 * names; docs/adr/0036), each labelled model_name="<model>":
 *   vllm:num_requests_waiting   gauge: requests not being served: queued at
 *                               the front door for a worker slot
 *                               (`door_queued`), waiting at the worker for
 *                               pages, or moved off the device
 *   vllm:num_requests_running   gauge: prefill, ready, decode, moving in/out
 *   vllm:kv_cache_usage_perc    gauge: the KV pool's reserved pages over its
 *                               pages, 0..1 (vLLM's name says perc; its value
 *                               is a fraction, and so is ours)
 *   vllm:cache_config_info      gauge 1, labels block_size (tokens a page)
 *                               and num_gpu_blocks (the pool's pages)
 * Our own names for the same figures stay on the page (ignis_scheduler_
 * requests, ignis_kv_pool_*). Names with ':' are reserved for recording
 * rules by Prometheus's conventions (promtool's lint says so): these are
 * served only on the HTTP API's /metrics, the port a gateway targets, never
 * on --server-metrics-bind's page. Left out while the worker is not up.
 */
int met_render_gateway(FILE *f, const struct met_snap *s, const char *model, uint64_t door_queued);

#endif
