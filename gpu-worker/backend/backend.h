/*
 * backend.h - the compute backends behind one versioned table of functions
 * (style guide rule 8). backend.c is the registry and the one file with
 * `#if IGNIS_HAVE_CUDA`.
 *
 * The table covers device memory (facts, allocation and copies) and the
 * model's compute. Only the layout (layout.h) allocates, once per plan line
 * at load; the runtime then takes places inside those reservations and never
 * asks the backend for more.
 *
 * The model and its sequences are the backend's: it binds a model file's
 * weights into its memory (model_bind), gives each sequence its device
 * state (seq_init), and runs rounds over the backend-neutral types of
 * devseq.h. Compute is one entry at the granularity of a round
 * (docs/adr/0010): the decoder over the round's rows (the cpu backend's,
 * model_cpu.h, is the reference every other is checked against). A backend
 * schedules and fuses its own kernels inside a round, on scratch and
 * threads of its own (the cuda backend: kernels/ and cuBLAS on its compute
 * stream); the engine above it only plans rounds and never sees a
 * backend's type nor dereferences device memory.
 *
 * The half of a backend that is no device's own sits beside this table,
 * and a backend links it rather than writing it again (docs/adr/0045): the
 * device memory's books and the copies' checks (devmem.h), the transfer
 * stream's tickets, depth, failure and faults (xfer.h: a backend gives its
 * copy engine), binding (bind.h: regions, state slots, passes, the round's
 * checks, the image header), the expert cache (expcache.h) over the
 * tensors' neutral views (weight.h), and the linear state's layout
 * (model/linstate.h, beside the KV formats of model/kvfmt.h).
 *
 * EXACTNESS, part of every backend's contract. A token's bits (its logits,
 * the KV it stores, the state it leaves) are a function of the model, the
 * sequence's tokens so far and the KV format alone. They do not depend on:
 *   - the batch: which other sequences share its round, and in which order;
 *   - the chunk: how its prompt is cut into steps (one chunk, token by
 *     token, any split);
 *   - the pass: whether a round runs in one pass or in several (a workspace
 *     smaller than the round: bind.h);
 *   - the threads, streams or kernels' launch shapes the backend uses;
 *   - where its state and pages were before: a sequence moved out (seqimg.h)
 *     and back, or restored from a retained checkpoint, continues exactly.
 * The engine, the round planner (roundplan.h), the moves and prompt reuse
 * rely on this: they batch, chunk, move and reuse freely because nothing a
 * sequence sees changes. On a GPU it rules out what changes a sum's order
 * with the shape (cuBLAS's heuristics, split-K, atomics in a reduction):
 * every sum of a row runs in an order fixed by the model's shapes alone.
 * Across backends tokens may differ within the tolerance the conformance
 * suite states per type; within one backend they are bit-identical.
 *
 * Copies. A synchronous copy has landed when it returns. An asynchronous
 * copy goes on the backend's one transfer stream (CUDA: a stream of its own
 * beside compute, with events; cpu: a transfer thread), so that sequences
 * move between device and host a window at a time while decode rounds go
 * on. The contract of the stream, the same on every backend:
 *
 *   - Order. Copies on the stream complete in the order they were enqueued.
 *   - Tickets. Each enqueued copy gets a ticket: 64-bit, strictly increasing
 *     over the life of an open backend, never 0 (0 is "no copy": done at
 *     once, waits for nothing). done(t) implies done(every earlier ticket).
 *     A ticket is done when its copy completed or failed; never before its
 *     bytes are all written and visible to the thread that asked.
 *   - Hands off. From enqueue until its ticket is done, nobody reads or
 *     writes the destination range or writes the source range: not the
 *     caller, not a synchronous copy, not a kernel. Free (which waits for
 *     the stream, like cudaFree) and close (which drains it) are the only
 *     exceptions.
 *   - Depth. At most BE_XFER_DEPTH copies are in flight (enqueued, not yet
 *     done). Enqueueing one more is refused at once with IG_E_BUSY, never
 *     blocked: the caller waits for its oldest ticket and tries again.
 *   - Errors. Bad arguments (a device range outside every allocation, a
 *     host range inside one) are refused at enqueue, with no ticket. A copy
 *     that fails while running is reported at wait() of its ticket or of
 *     any later one, with the copy's description ("async copy #7 (h2d, 4096
 *     bytes, ...)"); done() only says that waiting would not block (style
 *     rule 4: a question returns bool). A failed copy writes nothing, and
 *     the stream refuses to go on (style rule 5): later copies are not run,
 *     their waits report the first failure, and enqueueing is refused until
 *     the backend is closed. The worker aborts on a device error anyway.
 *   - Threads. A backend is driven from one thread at a time (the worker's
 *     own); the transfer thread belongs to the backend and touches nothing
 *     of the caller's but the ranges of the copies in flight.
 *
 * A move's windows go on the same stream (img_gather_async and
 * img_scatter_async): a window of a sequence image (seqimg.h) between the
 * sequence's device pages and state and a host window (the KV-RAM arena, the
 * DMA target a GPU backend registers), its checksum taken on the host side
 * in the same pass. They keep the stream's contract: in order, a ticket
 * each, hands off the sequence's pages and state and the host window until
 * the ticket is done.
 */
#ifndef IGNIS_GPU_WORKER_BACKEND_H
#define IGNIS_GPU_WORKER_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "devseq.h"
#include "common/err.h"
#include "common/event.h"
#include "common/model.h"

struct kvpool;
struct mfile;
struct seqimg_header;
struct seqimg_reader;
struct seqimg_writer;

/* 2: the transfer stream (copy_*_async, xfer_*). 4: the model, its
 * sequences and the round on devseq.h's types; image windows on the stream.
 * 6: copy_d2d (retained prompt checkpoints: docs/adr/0037). 7: the expert
 * cache (be_bind_opts' expert regions, expert_stats: docs/adr/0039). 8:
 * host_alloc and host_free (host memory the device copies from and to at
 * full speed: pinned on a GPU; the expert cache's host copy), and the
 * neutral half of every backend moved up beside the table (docs/adr/0045).
 * 9: host_register and host_unregister (the KV-RAM arena pinned where it is
 * mapped). */
#define BE_ABI_VERSION 9u

/* Copies in flight on the transfer stream at most. A move enqueues one copy
 * per window between two decode rounds and waits for them before the next
 * move; 64 windows in flight is ample headroom for that, and keeps the cpu
 * backend's ring a fixed array of 64 entries (about 3 KiB). */
#define BE_XFER_DEPTH 64u

struct be;

/* How a model file's device weights get their memory: `place` copies `bytes`
 * of tensor `name` from `src` (the file's mapping) into device memory the
 * caller reserved (the plan's weights line) and gives its address in *at.
 * NULL: read in place from the mapping. */
struct be_placer {
	int (*place)(void *ctx, const char *name, const void *src, uint64_t bytes, const void **at,
	             struct ig_errbuf *eb);
	void *ctx;
};

/* Device memory the caller reserved for a bound model (a plan line's
 * reservation, layout.h): the backend carves it and allocates nothing. */
struct be_region {
	void *base;
	uint64_t bytes;
};

/* What a bound model's rounds may hold at most, and the device memory they
 * run in: the backend sizes its scratch, logits, states and threads once,
 * at model_bind, inside the three regions, and refuses a region too small
 * for even the least it can work with (naming the line, what it holds and
 * what is needed). A region larger than the least is used as far as it
 * helps: a workspace that cannot hold a whole round's scratch runs the
 * round in passes of as many tokens as it holds (the same bits: the
 * exactness contract above; bind.h cuts the passes). */
struct be_bind_opts {
	uint32_t max_round_tokens; /* decode lanes + the prefill chunk */
	uint64_t context;          /* the longest sequence */
	uint32_t threads;          /* host threads the backend may use (cpu: its pool) */
	uint32_t states;           /* sequences holding a state at once (the lanes) */
	/* The compact formats' residual window (common/model.h,
	 * mdesc_kv_window_bytes): each state holds it after the linear states;
	 * rounds in a compact format read it. kv_window 0: none. */
	uint32_t kv_sinks, kv_window;
	struct be_region workspace;  /* the plan's workspace line: the round scratch */
	struct be_region sampling;   /* the plan's sampling line: the round's logits */
	struct be_region lane_state; /* the plan's lane_state line: `states` states */
	/* A MoE model's routed experts (docs/adr/0039): the plan's expert_cache
	 * and residency regions (prefill staging, tables) and its policy. No
	 * expert_cache (base NULL): the experts are read in place from the file
	 * mapping, as before the cache (tests that bind without a plan). */
	struct be_region expert_cache;
	struct be_region residency;
	bool experts_offloaded;
	/* --vram-pinned-expert-bytes of the cache held for the whole load by
	 * the hottest experts, ranked by `expert_counts` (layers x experts, a
	 * calibration's; NULL refuses a pin) */
	uint64_t pinned_expert_bytes;
	const uint64_t *expert_counts;
};

/* The expert cache's figures of a bound MoE model (docs/adr/0039), a class
 * a slot pool (gate+up or down in one tensor type; 0 slots: none). */
struct be_expert_class {
	char name[32];   /* the projection and its type(s): "gate_up:bf16", "down:q6_k" */
	uint64_t record; /* bytes of one slot */
	uint32_t slots;
	uint64_t hits, misses, bytes, evictions; /* bytes: copied host to device */
	uint64_t prefetches; /* slots filled ahead of their layer (a guess; bytes counts them) */
};

struct be_expert_stats {
	bool cached;           /* a MoE model bound with an expert_cache region */
	bool offloaded;        /* experts behind a cache, not all on the device */
	uint64_t cache_bytes;  /* of the region carved (resident: every expert) */
	uint64_t host_bytes;   /* the experts' host allocation (0 resident) */
	uint64_t pinned_bytes; /* experts held outside the LRU */
	struct be_expert_class cls[MDESC_EXPERT_CLASSES];
	uint64_t staged_layers, staged_bytes; /* passes through the staging ring */
};

/* The least each region of be_bind_opts must hold for a model bound with
 * those options, and what rounds in one pass need (be_ops.model_needs). */
struct be_needs {
	uint64_t workspace_min, workspace_one_pass; /* one token's pass; a whole round's */
	uint64_t sampling_min, sampling_one_pass;   /* one row of logits; every state's */
	uint64_t lane_state;                        /* `states` states */
};

/*
 * A window of a sequence image between the device and host memory, on the
 * transfer stream. The caller fills the inputs, leaves the struct and what
 * it points to alone until the ticket is done, then reads the outputs.
 *   gather:  the next window (at most `window` bytes) of the image `w`
 *            writes, from the sequence's pages and state into host `dst`;
 *            out: `n` bytes written and their checksum `sum` (kvcopy_sum)
 *   scatter: `count` consecutive windows k0, k0 + 1, ... of the image (of
 *            `image_bytes`, cut in windows of `window`), consecutive at host
 *            `src`, into the reader `r`'s pages and state, each checked
 *            against sums[k] in the same pass; out: `rc` IG_E_OK, or
 *            IG_E_KV_LOST with `why` (then the pages hold bytes that must not
 *            be used: the caller prefills the sequence again)
 */
struct be_img {
	struct seqimg_writer *w;
	void *dst;
	struct seqimg_reader *r;
	const void *src;
	uint32_t k0, count;
	const uint64_t *sums;
	uint64_t window, image_bytes;
	/* out */
	uint64_t n, sum;
	int rc;
	char why[200];
};

struct be_ops {
	uint32_t abi; /* BE_ABI_VERSION */
	const char *name;
	uint64_t granule; /* allocations are whole multiples of this */
	/* Open the device and its transfer stream, into a zeroed `b` whose
	 * `ops` is set. The cpu backend simulates a device of `sim_bytes` (the
	 * plan's free memory at start); a real device ignores it. */
	int (*open)(struct be *b, uint64_t sim_bytes, struct ig_errbuf *eb);
	/* Drain the transfer stream (every copy enqueued completes or fails),
	 * then release the backend's own state. Memory still allocated stays
	 * the caller's to free. Idempotent. */
	void (*close)(struct be *b);
	/* What the device reports now. */
	void (*mem_info)(struct be *b, uint64_t *free_bytes, uint64_t *total_bytes);
	/* One device allocation of `bytes` (the layout's only way to memory).
	 * IG_E_NOMEM with the device's own figures when it does not fit: never
	 * a fallback to host memory. On success the caller owns `*ptr` until
	 * free(). */
	int (*alloc)(struct be *b, uint64_t bytes, void **ptr, struct ig_errbuf *eb);
	/* Free what alloc() returned, with the same `bytes`. Waits for the
	 * transfer stream first, as cudaFree does. */
	void (*free)(struct be *b, void *ptr, uint64_t bytes);
	/* Host memory of `bytes` that the device copies from and to at full
	 * speed, for what stays long in host memory and crosses to the device
	 * often (the expert cache's host copy of the experts; a host window of
	 * moves): pinned (page-locked) where the device has it (cuda:
	 * cudaHostAlloc), plain memory on the cpu backend. Host memory to every
	 * check of a copy. IG_E_NOMEM when there is none; the caller owns
	 * `*ptr` until host_free with the same `bytes`. */
	int (*host_alloc)(struct be *b, uint64_t bytes, void **ptr, struct ig_errbuf *eb);
	void (*host_free)(struct be *b, void *ptr, uint64_t bytes);
	/* The same for host memory mapped elsewhere (the kvstore daemon's
	 * KV-RAM arena, mapped by the worker): `bytes` at `p`, page-aligned,
	 * made memory the device copies from and to at full speed until
	 * host_unregister(p) (cuda: cudaHostRegister, page-locking it). May be
	 * called from any thread. A refusal (IG_E_NOMEM: the lock limit, the
	 * driver's) leaves the memory as it was: copies from and to it still
	 * work, at the pageable rate. NULL entries: nothing to do (cpu). */
	int (*host_register)(struct be *b, void *p, uint64_t bytes, struct ig_errbuf *eb);
	void (*host_unregister)(struct be *b, void *p);
	/* Synchronous copies of `n` bytes between host and device memory. The
	 * device side must lie inside one allocation, the host side outside
	 * every one (IG_E_INVAL otherwise). They do not wait for the stream. */
	int (*copy_h2d)(struct be *b, void *dst, const void *src, uint64_t n, struct ig_errbuf *eb);
	int (*copy_d2h)(struct be *b, void *dst, const void *src, uint64_t n, struct ig_errbuf *eb);
	/* A synchronous copy inside the device: both ranges inside allocations
	 * (a retained checkpoint's state and tail page, taken or given back;
	 * CUDA: cudaMemcpyDeviceToDevice on the compute stream, ~0.3 ms for a
	 * state image). The ranges must not overlap. */
	int (*copy_d2d)(struct be *b, void *dst, const void *src, uint64_t n, struct ig_errbuf *eb);
	/* Enqueue the same copies on the transfer stream; on success `*ticket`
	 * is the copy's ticket. Returns at once: IG_E_BUSY when BE_XFER_DEPTH
	 * copies are in flight, IG_E_INVAL for bad ranges, the first failure's
	 * code once the stream has failed. `n` may be 0 (a marker). */
	int (*copy_h2d_async)(struct be *b, void *dst, const void *src, uint64_t n,
	                      uint64_t *ticket, struct ig_errbuf *eb);
	int (*copy_d2h_async)(struct be *b, void *dst, const void *src, uint64_t n,
	                      uint64_t *ticket, struct ig_errbuf *eb);
	/* Would waiting for `ticket` return at once? True for 0 and for a ticket
	 * never issued (whose wait reports IG_E_INVAL). Never blocks. */
	bool (*xfer_done)(struct be *b, uint64_t ticket);
	/* Block until `ticket` (and so every earlier one) is done; IG_E_OK when
	 * it and every copy before it landed, else the first failure. */
	int (*xfer_wait)(struct be *b, uint64_t ticket, struct ig_errbuf *eb);
	/* xfer_wait() for the last ticket issued; IG_E_OK when none. */
	int (*xfer_wait_all)(struct be *b, struct ig_errbuf *eb);

	/* A window gather or scatter (struct be_img) enqueued on the transfer
	 * stream, with the same answers as copy_*_async. */
	int (*img_gather_async)(struct be *b, struct be_img *job, uint64_t *ticket,
	                        struct ig_errbuf *eb);
	int (*img_scatter_async)(struct be *b, struct be_img *job, uint64_t *ticket,
	                         struct ig_errbuf *eb);

	/* Bind the tensors of an open model file `f` (kept open while `m` is
	 * used) into `m`, device weights through `placer` (may be NULL), with
	 * the round scratch and threads `o` sizes. A tensor type or an
	 * architecture the backend does not run is refused by name. NULL entries:
	 * the backend has no compute for models yet; the engine refuses to start
	 * on it, by name. */
	int (*model_bind)(struct be *b, struct mfile *f, const struct be_placer *placer,
	                  const struct be_bind_opts *o, struct be_model *m, struct ig_errbuf *eb);
	/* What model_bind with `o` (its regions ignored) needs of each region,
	 * for a caller without a plan (a test, a benchmark: be_bind_reserve). */
	int (*model_needs)(struct be *b, const struct mfile *f, const struct be_bind_opts *o,
	                   struct be_needs *n, struct ig_errbuf *eb);
	/* Give back what model_bind took. Idempotent on a zeroed `m`. */
	void (*model_release)(struct be *b, struct be_model *m);
	/* A fresh sequence of `m`: position 0, a zeroed state of
	 * m->state_bytes in one of the m->states state slots (lane_state);
	 * IG_E_NOSPACE when every slot is held (the round planner admits no
	 * more sequences than slots: docs/adr/0027). Its pages are reserved by
	 * the caller in s->kv. seq_release gives the slot back. */
	int (*seq_init)(struct be *b, const struct be_model *m, struct be_seq *s,
	                struct ig_errbuf *eb);
	void (*seq_release)(struct be *b, const struct be_model *m, struct be_seq *s);
	/* The image header of `s` (its pages in `kv`, its state, its position,
	 * `last_token` and `sampler_bytes` of sampler state) and in `pages_out`
	 * (room for s->kv.n_pages) the device addresses of its pages: what a
	 * seqimg writer or reader over the sequence needs. */
	void (*seq_image)(struct be *b, const struct be_model *m, const struct be_seq *s,
	                  const struct kvpool *kv, enum mdesc_kv_format fmt, uint32_t last_token,
	                  uint64_t sampler_bytes, struct seqimg_header *h, void **pages_out);
	/* The expert cache's figures (st->cached false for a model without). */
	void (*expert_stats)(struct be *b, const struct be_model *m, struct be_expert_stats *st);
	/* Tokens routed to each expert since the bind (layers x experts,
	 * layer-major; a calibration's counts): up to n into `out`; returns how
	 * many there are, 0 for a model bound without an expert_cache region. */
	uint64_t (*expert_counts)(struct be *b, const struct be_model *m, uint64_t *out,
	                          uint64_t n);
	/* One round of the decoder: every step's tokens through `m`, KV into
	 * `kv`'s pages, logits out in host memory (vocab floats per row the
	 * steps ask: be_step.tail_logits, in step order), under the exactness
	 * contract above (a row's bits are those of its token as a prompt's
	 * end, whichever rows the step asks). At
	 * most o->max_round_tokens tokens; the whole round is checked before
	 * any state changes (bind_check_round), so a refusal touches nothing
	 * even when the round runs in passes. */
	int (*round)(struct be *b, const struct be_model *m, const struct be_step *steps,
	             uint32_t n_steps, enum mdesc_kv_format fmt, const struct kvpool *kv,
	             uint64_t context, float *logits, struct ig_errbuf *eb);
};

/* An open backend. The caller embeds it (it may move: the transfer thread
 * holds `priv`, not `b`); `priv` belongs to the backend. */
/* A test's window on a round's layer operations (the conformance suite;
 * style rule 12). While be.trace is set, each pass of a round copies its
 * residual rows (the pass's tokens x hidden floats, in step order) into
 * `rows` after the embedding and after each layer's token mixer and
 * feed-forward, and calls after() with the operation that ran ("embed",
 * "mixer_full", "mixer_linear", "ffn_dense", "moe": its routing, experts
 * and shared expert) and the layer (0 for the embedding). A pass of more
 * than `cap` floats is not traced. Every backend honours it (the
 * conformance suite checks each layer operation through it); a round's
 * results never depend on it. */
struct be_trace {
	void (*after)(void *ctx, const char *op, uint32_t layer, const float *rows, uint64_t n);
	void *ctx;
	float *rows;
	uint64_t cap;
};

struct be {
	const struct be_ops *ops;
	uint64_t capacity; /* the cpu backend's simulated device */
	uint64_t used;     /* bytes held through alloc (every backend counts them) */
	/* Fault injection for tests (style rule 12): the async copy whose
	 * ticket this is fails when it runs, with IG_E_IO. 0: none. Read at
	 * enqueue, on the caller's thread. */
	uint64_t fault_xfer;
	/* A test's trace of the layer operations (struct be_trace); NULL: none.
	 * Read at each round. */
	const struct be_trace *trace;
	/* Launch each kernel of a round on its own, never replaying a recorded
	 * decode pass (the cuda backend's graphs): the same bits either way;
	 * for a benchmark that weighs the graphs and for diagnosis. Read at
	 * each round; backends without graphs ignore it. */
	bool launch_each;
	/* Benchmarks only, never the worker: the matrix products of a pass of
	 * MC_FAST_MIN_TOKENS (16) or more tokens through the vendor's library
	 * (cuda: cuBLAS on TF32 tensor cores, the weights widened to fp32 in
	 * memory of its own, outside the plan, taken at first use), not under
	 * the exactness contract: what the contract costs is measured against
	 * it (issue 29). Read at each round; the cpu backend ignores it. */
	bool fast_products;
	void *priv;
};

/* The backend of that name in this build, or NULL (its message in `eb`). */
const struct be_ops *backend_find(const char *name, struct ig_errbuf *eb);

/* For a caller without a plan (a test, a benchmark): reserve on `b` the
 * regions of `o` that model_bind needs for rounds in one pass (model_needs'
 * *_one_pass and lane_state), and give them back. The worker takes its
 * regions from the plan's lines instead (layout.h). */
int be_bind_reserve(struct be *b, const struct mfile *f, struct be_bind_opts *o,
                    struct ig_errbuf *eb);
void be_bind_unreserve(struct be *b, struct be_bind_opts *o);

/*
 * Add the backend facts to the worker's ready event:
 *
 *   "backends"              "cpu" or "cpu,cuda" (what this build has)
 *   "cuda_runtime_version"  cudaRuntimeGetVersion(), e.g. 13000      } only when
 *   "cublas_version"        "MAJOR.MINOR.PATCH" of the linked cuBLAS } built with
 *   "cuda_devices"          cudaGetDeviceCount(), 0 on error         } CUDA
 *   "cuda_error"            cudaGetErrorString() of a failed probe
 *
 * A probe that fails is reported, never fatal.
 */
void backend_ready_fields(struct ev *e);

#endif
