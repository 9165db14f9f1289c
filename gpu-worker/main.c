/*
 * ignis-gpu-worker - owns device memory, the model, the kernels, the paged KV
 * pool and the scheduler. It starts, says hello, answers pings, takes the
 * supervisor's VRAM plan (checking that it is whole and adds up), lays it out
 * on its backend, loads the model's device weights into the plan's weights
 * line, books the KV pool in the plan's pool region, and then serves
 * generation requests (submit, poll, cancel: docs/protocol.md), running one
 * decode round between two looks at its control socket.
 *
 * It is where a request's text is decoded (docs/adr/0025): each tokens reply
 * carries the text its tokens add (tok_text_delta, computed from the
 * request's output at every poll, so a repeated poll gets the same text),
 * and a request's stop strings are checked at every token it generates
 * (the engine's on_token: tok_stops_check), which ends it with finish
 * "stop", its output cut before the token holding the stop's first byte;
 * while it runs, polls see all but the tokens that could begin one.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu-worker/backend/backend.h"
#include "proto/daemon.h"
#include "gpu-worker/engine/engine.h"
#include "gpu-worker/engine/gramcache.h"
#include "common/event.h"
#include "gpu-worker/engine/kvclient.h"
#include "gpu-worker/backend/layout.h"
#include "model/mfile.h"
#include "model/expcounts.h"
#include "model/seqimg.h"
#include <xxhash.h>
#include "common/rtdir.h"
#include "model/bpe.h"
#include "model/tokenizer.h"
#include "common/vplan.h"

/* A request's stop strings, while the engine keeps the request. */
struct worker_stops {
	uint64_t id;
	struct tok_stops st;
};

_Static_assert(TOK_STOP_MAX == MSG_STOP_MAX && TOK_STOP_BYTES == MSG_STOP_BYTES,
               "a submit's stop strings fit the tokenizer's");

/* The worker's device, the plan laid out on it, and the model running there. */
struct worker {
	const struct svc *svc; /* the control service, while dmn_run runs */
	struct be be;
	bool be_open;
	struct layout layout;
	bool have_plan;
	uint64_t lines_bytes, pool_bytes, total_bytes;

	struct mfile f;
	bool f_open;
	struct bpe *bpe;        /* a gpt2 vocabulary's tokenizer (model/bpe.h), or NULL */
	struct tok_vocab vocab; /* what the model's ids mean as text */
	struct be_model d;      /* bound on `be` (be_ops.model_bind) */
	bool d_bound;
	struct kvpool kv;
	bool kv_ready;
	struct eng *eng;
	uint32_t ids[MSG_TEXT_MAX + 1];          /* a text prompt's tokens */
	struct chat_span spans[MSG_IDS_MAX / 2]; /* its plain spans (submit.plain) */
	/* the stop strings of the requests that have some, in stops[0..n_stops):
	 * at most one per request the engine keeps (a request it forgot to make
	 * room leaves a stale entry, reused by the next submit with stops) */
	struct worker_stops stops[MSG_WORKER_REQUESTS_MAX];
	uint32_t n_stops;
	/* the text of the reply being built: a poll's, and each of a
	 * poll_many's requests' */
	char text[MSG_TEXT_MAX];
	char many_text[MSG_POLL_MANY_MAX][MSG_POLL_MANY_TEXT];
	/* moves: two clients of the kvstore daemon, one per direction */
	char rtdir[RTDIR_PATH_MAX + 1];
	struct kvc *kv_out, *kv_in;
	struct kvc *kv_slots;      /* retained host slots (prompt reuse) */
	struct be_expert_stats xs; /* the expert cache's figures, as last sent */
	/* compiled grammars by their text (constrained decoding, ADR 0057):
	 * created at the first request with one, kept across model loads */
	struct gcache *gc;
};

/* Everything the model holds, in reverse order of loading. */
static void worker_unload(struct worker *w)
{
	eng_destroy(w->eng);
	w->eng = NULL;
	w->n_stops = 0; /* the next engine's ids start again at 1 */
	kvc_close(w->kv_out);
	kvc_close(w->kv_in);
	kvc_close(w->kv_slots);
	w->kv_out = w->kv_in = w->kv_slots = NULL;
	if (w->kv_ready)
		kvpool_release(&w->kv);
	w->kv_ready = false;
	if (w->d_bound)
		w->be.ops->model_release(&w->be, &w->d);
	w->d_bound = false;
	bpe_close(w->bpe);
	w->bpe = NULL;
	if (w->f_open)
		mfile_close(&w->f);
	w->f_open = false;
}

/* The placer of the device weights: each tensor copied into the weights
 * line, nowhere else. */
/* The KV-RAM arena pinned where a kvstore client maps it (kvclient.h's
 * kvc_pin; be_ops.host_register): on a client's thread, while the backend
 * is open (the clients close before it does). Refused: the windows are
 * copied at the pageable rate, and the operator is told why. */
static bool worker_pin(void *ctx, void *base, uint64_t bytes)
{
	struct worker *w = ctx;
	struct ig_errbuf eb;
	struct ev e;

	if (!w->be.ops->host_register)
		return false;
	if (w->be.ops->host_register(&w->be, base, bytes, &eb) == IG_E_OK)
		return true;
	ev_begin(&e, EV_WARN, "ignis.gpu_worker.arena_pageable");
	ev_u64(&e, "bytes", bytes);
	ev_str(&e, "error", eb.msg);
	ev_str(&e, "detail",
	       "the KV-RAM arena stays pageable: moves' windows are copied at the pageable "
	       "rate (raise the memory lock limit, ulimit -l, to pin it)");
	ev_end(&e);
	return false;
}

static void worker_unpin(void *ctx, void *base)
{
	struct worker *w = ctx;

	w->be.ops->host_unregister(&w->be, base);
}

static int worker_place(void *ctx, const char *name, const void *src, uint64_t bytes,
                        const void **at, struct ig_errbuf *eb)
{
	struct worker *w = ctx;
	void *dst;
	int rc = layout_take(&w->layout, (enum layout_region_id)VPLAN_WEIGHTS, bytes, &dst, eb);

	if (!rc)
		rc = w->be.ops->copy_h2d(&w->be, dst, src, bytes, eb);
	if (rc) {
		ig_errprefix(eb, "tensor '%s'", name);
		return rc;
	}
	*at = dst;
	return IG_E_OK;
}

static struct worker_stops *worker_stops_of(struct worker *w, uint64_t id)
{
	for (uint32_t i = 0; i < w->n_stops; i++)
		if (w->stops[i].id == id)
			return &w->stops[i];
	return NULL;
}

static void worker_stops_drop(struct worker *w, struct worker_stops *e)
{
	*e = w->stops[--w->n_stops];
}

/* Keep `st` for request `id` (just admitted): a free entry, else one whose
 * request the engine forgot (the table holds as many as the engine keeps
 * requests, and the new one is not in it yet, so one is stale). */
static void worker_stops_keep(struct worker *w, uint64_t id, const struct tok_stops *st)
{
	if (w->n_stops == MSG_WORKER_REQUESTS_MAX)
		for (uint32_t i = w->n_stops; i-- > 0;) {
			const uint32_t *out;
			struct eng_status es;

			if (eng_output(w->eng, w->stops[i].id, &out, &es, NULL) == IG_E_NOTFOUND)
				worker_stops_drop(w, &w->stops[i]);
		}
	if (w->n_stops < MSG_WORKER_REQUESTS_MAX)
		w->stops[w->n_stops++] = (struct worker_stops){id, *st};
}

/* Each generated token: a stop string ends the request before it (the
 * tokens to keep), or it goes on (n). */
static uint32_t worker_on_token(void *ctx, uint64_t id, const uint32_t *out, uint32_t n)
{
	struct worker *w = ctx;
	struct worker_stops *e = w->n_stops ? worker_stops_of(w, id) : NULL;

	return e ? tok_stops_check(&e->st, &w->vocab, out, n) : n;
}

/* A real vocabulary's other end-of-generation tokens (<|endoftext|> beside
 * Qwen's eos <|im_end|>). */
static bool worker_is_eog(void *ctx, uint32_t tok)
{
	struct worker *w = ctx;

	return w->bpe && bpe_is_eog(w->bpe, tok);
}

/* A finished request's grammar back to the cache (kept while idle). */
static void worker_grammar_done(void *ctx, struct grammar *g)
{
	struct worker *w = ctx;

	gcache_put(w->gc, g);
}

static void worker_on_finish(void *ctx, uint64_t id, int finish, uint32_t prompt_tokens,
                             uint32_t generated)
{
	struct ev e;

	(void)ctx;
	ev_begin(&e, EV_INFO, "ignis.request.done");
	ev_u64(&e, "id", id);
	ev_str(&e, "finish", eng_finish_name((enum eng_finish)finish));
	ev_u64(&e, "prompt_tokens", prompt_tokens);
	ev_u64(&e, "generated_tokens", generated);
	ev_end(&e);
}

/* The engine's admissions and moves as events (docs/design.md, section 4). */
static void worker_on_event(void *ctx, const struct eng_event *ev)
{
	static const char *const names[] = {[ENG_EV_ADMITTED] = "ignis.request.admitted",
	                                    [ENG_EV_EVICTED] = "ignis.request.evicted",
	                                    [ENG_EV_MOVED] = "ignis.kv.move",
	                                    [ENG_EV_RESTORED] = "ignis.request.restored",
	                                    [ENG_EV_LOST] = "ignis.request.lost",
	                                    [ENG_EV_MOVE_REFUSED] = "ignis.kv.move_refused",
	                                    [ENG_EV_MOVE_STOPPED] = "ignis.kv.move_stopped",
	                                    [ENG_EV_REUSE_CAPTURED] = "ignis.reuse.captured",
	                                    [ENG_EV_REUSE_CLAIMED] = "ignis.reuse.claimed",
	                                    [ENG_EV_REUSE_GIVEN_UP] = "ignis.reuse.given_up",
	                                    [ENG_EV_REUSE_SKIPPED] = "ignis.reuse.skipped"};
	struct ev e;

	(void)ctx;
	ev_begin(&e, ev->kind == ENG_EV_LOST || ev->kind == ENG_EV_MOVE_REFUSED ? EV_WARN : EV_INFO,
	         names[ev->kind]);
	if (ev->kind != ENG_EV_REUSE_GIVEN_UP) /* a checkpoint is no request's */
		ev_u64(&e, "id", ev->id);
	ev_str(&e, "class", sched_class_name((enum sched_class)ev->cls));
	switch (ev->kind) {
	case ENG_EV_REUSE_CAPTURED:
	case ENG_EV_REUSE_CLAIMED:
	case ENG_EV_REUSE_GIVEN_UP:
		ev_str(&e, "kind", ev->prefix ? "prefix" : "checkpoint");
		ev_str(&e, "tier", ev->tier ? ev->tier : "device");
		ev_u64(&e, "tokens", ev->tokens);
		ev_u64(&e, "slot", ev->slot);
		ev_u64(&e, "pages", ev->pages);
		if (ev->why)
			ev_str(&e, "reason", ev->why);
		break;
	case ENG_EV_REUSE_SKIPPED:
		ev_u64(&e, "tokens", ev->tokens);
		ev_str(&e, "reason", ev->why ? ev->why : "");
		break;
	case ENG_EV_EVICTED:
		ev_u64(&e, "for", ev->for_id);
		ev_u64(&e, "pages", ev->pages);
		break;
	case ENG_EV_MOVED:
		ev_str(&e, "direction", ev->dir_out ? "out" : "in");
		ev_str(&e, "tier", ev->tier ? ev->tier : "ram");
		ev_u64(&e, "bytes", ev->bytes);
		ev_u64(&e, "windows", ev->windows);
		ev_u64(&e, "duration_us", ev->duration_us);
		ev_u64(&e, "rounds", ev->rounds);
		ev_u64(&e, "others_tokens", ev->others_tokens);
		if (ev->dir_out)
			ev_u64(&e, "for", ev->for_id);
		break;
	case ENG_EV_LOST:
		ev_str(&e, "detail", ev->why ? ev->why : "");
		break;
	case ENG_EV_MOVE_REFUSED:
		ev_u64(&e, "for", ev->for_id);
		ev_u64(&e, "bytes", ev->bytes);
		ev_str(&e, "detail", ev->why ? ev->why : "");
		break;
	case ENG_EV_MOVE_STOPPED:
		ev_u64(&e, "for", ev->for_id);
		ev_u64(&e, "pages", ev->pages);
		ev_str(&e, "reason", ev->why ? ev->why : "");
		break;
	default:
		ev_u64(&e, "pages", ev->pages);
	}
	ev_end(&e);
}

static int worker_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

/* Open the plan's model file, check it is the model planned, place its
 * device weights, book the pool and start the engine. */
/* What names a model in the retained host slots (docs/adr/0038), which
 * outlive a worker: the shapes a state has (seqimg_model_id), the KV
 * format and its window, and the file itself (mfile_identity: its header, tokenizer
 * included, its size, samples of its weights). A slot from another model,
 * format, window or tokenizer is never claimed: its key and model_id are
 * another. */
static uint64_t worker_reuse_ns(const struct mfile *f, const char *fmt, const struct msg_plan *pl)
{
	/* the KV window too: a checkpoint's state holds it (common/model.h) */
	uint64_t v[5] = {seqimg_model_id(&f->desc), XXH3_64bits(fmt, strlen(fmt)),
	                 mfile_identity(f), pl->kv_sinks, pl->kv_window};

	return XXH3_64bits(v, sizeof(v));
}

static int worker_load_model(struct worker *w, const struct msg_plan *pl, struct ig_errbuf *eb)
{
	char path[4097], fmt[17];
	enum mdesc_kv_format kv_format;
	struct be_bind_opts bo;
	struct eng_cfg cfg;
	struct eng_stats est;
	uint64_t *counts = NULL; /* the experts' calibration counts, for pins */
	void *pool_base = w->layout.r[LAYOUT_KV_POOL].base;
	const struct kvc_pin pin = {worker_pin, worker_unpin, w};
	struct ev e;
	int rc;

	worker_unload(w);
	msg_str_copy(path, sizeof(path), pl->model_path);
	if (!path[0]) {
		ev_begin(&e, EV_WARN, "ignis.gpu_worker.no_model_file");
		ev_strn(&e, "model", pl->model.p, pl->model.n);
		ev_str(&e, "detail",
		       "the plan names a built-in description, not a model file: the plan is laid "
		       "out but requests are refused (ignis-mkmodel writes a file; start with "
		       "--model FILE)");
		ev_end(&e);
		return IG_E_OK;
	}
	rc = mfile_open(&w->f, path, eb);
	if (rc)
		return rc;
	w->f_open = true;
	if (w->f.desc.tokenizer == MDESC_TOK_GPT2) {
		rc = bpe_open(&w->bpe, &w->f.g, eb);
		if (rc) {
			ig_errprefix(eb, "%s", path);
			goto fail;
		}
	}
	tok_vocab_init(&w->vocab, w->f.desc.tokenizer, w->bpe);
	if (w->vocab.token_max > MSG_POLL_MANY_TEXT) {
		rc = ig_errf(eb, IG_E_INVAL,
		             "%s: a token of its vocabulary can add %zu bytes of text; a reply "
		             "carries %u a request",
		             path, w->vocab.token_max, MSG_POLL_MANY_TEXT);
		goto fail;
	}
	if (!msg_str_eq(pl->model, w->f.desc.name)) {
		rc = ig_errf(eb, IG_E_INVAL, "the plan is for model '%.*s'; %s holds '%s'",
		             (int)pl->model.n, pl->model.p, path, w->f.desc.name);
		goto fail;
	}
	if (!w->be.ops->model_bind) {
		rc =
		    ig_errf(eb, IG_E_INVAL,
		            "the %s backend has no compute for models yet; accepted: --backend cpu",
		            w->be.ops->name);
		goto fail;
	}
	msg_str_copy(fmt, sizeof(fmt), pl->kv_format);
	kv_format = mdesc_kv_format_parse(fmt);
	if (!kv_format || kv_format == MDESC_KV_COMPACT1) {
		rc = ig_errf(eb, IG_E_INVAL,
		             "the plan names the KV format '%s'; this worker serves bf16, fp8 and "
		             "compact",
		             fmt);
		goto fail;
	}
	{
		uint64_t need = mdesc_page_bytes(&w->f.desc, kv_format);
		bool compact = mdesc_kv_compact(kv_format);
		uint64_t wb = mdesc_kv_window_bytes(&w->f.desc, (uint32_t)pl->kv_sinks,
		                                    (uint32_t)pl->kv_window);

		/* the window is the compact formats' alone (docs/adr/0047) */
		if ((!compact && (pl->kv_sinks || pl->kv_window)) || pl->kv_window_bytes != wb) {
			rc = ig_errf(eb, IG_E_INVAL,
			             "the plan's KV window of %" PRIu64 " sinks and %" PRIu64
			             " tokens is %" PRIu64 " bytes a sequence; %s needs %" PRIu64
			             " in the %.*s format%s",
			             (uint64_t)pl->kv_sinks, (uint64_t)pl->kv_window,
			             (uint64_t)pl->kv_window_bytes, path, wb, (int)pl->kv_format.n,
			             pl->kv_format.p, compact ? "" : ", which keeps no window");
			goto fail;
		}
		if (need != pl->page_bytes) {
			rc = ig_errf(eb, IG_E_INVAL,
			             "the plan's pages are %" PRIu64 " bytes; %s needs %" PRIu64
			             " in the %.*s format",
			             pl->page_bytes, path, need, (int)pl->kv_format.n,
			             pl->kv_format.p);
			goto fail;
		}
	}
	/* the round scratch, the logits and the sequences' states in the lines
	 * the plan reserved for them; nothing else of the device is asked for */
	bo = (struct be_bind_opts){
	    .max_round_tokens = (uint32_t)(pl->lanes + pl->chunk_tokens),
	    .context = pl->context_tokens,
	    .threads = (uint32_t)worker_threads(),
	    .states = (uint32_t)pl->lanes,
	    .kv_sinks = (uint32_t)pl->kv_sinks,
	    .kv_window = (uint32_t)pl->kv_window,
	};
	rc =
	    layout_take_rest(&w->layout, (enum layout_region_id)VPLAN_WORKSPACE, &bo.workspace, eb);
	if (!rc)
		rc = layout_take_rest(&w->layout, (enum layout_region_id)VPLAN_SAMPLING,
		                      &bo.sampling, eb);
	if (!rc)
		rc = layout_take_rest(&w->layout, (enum layout_region_id)VPLAN_LANE_STATE,
		                      &bo.lane_state, eb);
	/* a MoE model's experts: every one in the expert_cache line (resident),
	 * or behind a cache there fed from host memory, with the prefill
	 * staging ring in the residency line (offloaded; docs/adr/0039) */
	if (!rc && w->f.desc.family == MDESC_MOE) {
		rc = layout_take_rest(&w->layout, LAYOUT_EXPERT_CACHE, &bo.expert_cache, eb);
		if (!rc)
			rc = layout_take_rest(&w->layout, LAYOUT_RESIDENCY, &bo.residency, eb);
		bo.experts_offloaded = msg_str_eq(pl->policy, "offloaded");
		/* pinned experts: the hottest by the calibration's counts beside
		 * the model (ignis-calibrate writes them) */
		if (!rc && bo.experts_offloaded && pl->pinned_expert_bytes) {
			char cp[4200];

			rc = expcounts_path(cp, sizeof(cp), path, eb);
			if (!rc)
				rc = expcounts_read(cp, &w->f, &counts, eb);
			if (rc == IG_E_NOTFOUND)
				rc = ig_errf(
				    eb, IG_E_INVAL,
				    "--vram-pinned-expert-bytes %" PRIu64 " needs the experts' "
				    "counts in '%s': run ignis-calibrate --model '%s' --text "
				    "FILE (or name --vram-pinned-expert-bytes 0)",
				    (uint64_t)pl->pinned_expert_bytes, cp, path);
			bo.pinned_expert_bytes = pl->pinned_expert_bytes;
			bo.expert_counts = counts;
		}
	}
	if (!rc)
		rc = w->be.ops->model_bind(&w->be, &w->f, &(struct be_placer){worker_place, w}, &bo,
		                           &w->d, eb);
	free(counts); /* the pins are chosen at bind */
	if (rc)
		goto fail;
	w->d_bound = true;
	rc = kvpool_init(&w->kv, pool_base, pl->page_bytes, (uint32_t)pl->pool_pages, eb);
	if (rc)
		goto fail;
	w->kv_ready = true;
	cfg = (struct eng_cfg){
	    .lanes = (uint32_t)pl->lanes,
	    .chunk = (uint32_t)pl->chunk_tokens,
	    .context = pl->context_tokens,
	    .default_max_tokens = (uint32_t)pl->default_max_tokens,
	    .fmt = kv_format,
	    .max_requests = (uint32_t)pl->max_requests,
	    .eos = mdesc_eos(&w->f.desc),
	    .on_finish = worker_on_finish,
	    .on_token = worker_on_token,
	    .is_eog = worker_is_eog,
	    .ctx = w,
	    .on_event = worker_on_event,
	    .vocab = &w->vocab,
	    .grammar_done = worker_grammar_done,
	};
	/* moves through the kvstore daemon: its clients dial in the background
	 * and wait for it, so a worker starts whether or not it is up yet */
	rc = kvc_open_pinned(&w->kv_out, w->rtdir, &pin, eb);
	if (!rc)
		rc = kvc_open_pinned(&w->kv_in, w->rtdir, &pin, eb);
	if (rc)
		goto fail;
	cfg.kv_out = w->kv_out;
	cfg.kv_in = w->kv_in;
	cfg.window_out = pl->move_out_window;
	cfg.window_in = pl->move_in_window;
	/* the owner in this worker's keys: 1..2^31-1 (msg.h, kv_sweep) */
	cfg.tier_nonce = ((uint32_t)getpid() ^ (uint32_t)time(NULL)) & 0x7fffffffu;
	if (!cfg.tier_nonce)
		cfg.tier_nonce = 1;
	/* prompt reuse: the retained slots the plan gives, device (docs/adr/0037)
	 * and host (0038). With --reuse-prompt on they hold checkpoints and
	 * shared prefixes; off, shared prefixes only, and there are slots only
	 * where they were named (common/knobs.c; 0037, "Reuse off with slots
	 * named") */
	{
		uint64_t slot = mdesc_state_image_bytes(&w->f.desc) + pl->kv_window_bytes;

		rc = layout_take_rest(&w->layout, (enum layout_region_id)VPLAN_RETAINED_SLOTS,
		                      &cfg.retained, eb);
		if (rc)
			goto fail;
		cfg.retained_slot_bytes = slot;
		cfg.retained_device = slot ? (uint32_t)(cfg.retained.bytes / slot) : 0;
		cfg.prefixes_only = !pl->reuse_prompt;
		/* host slots: the kvstore daemon's, through a client of their own
		 * (a capture's or claim's exchange never waits behind a move's) */
		if (pl->retained_host) {
			rc = kvc_open_pinned(&w->kv_slots, w->rtdir, &pin, eb);
			if (rc)
				goto fail;
			cfg.kv_slots = w->kv_slots;
			cfg.retained_host = (uint32_t)pl->retained_host;
			cfg.interactive_ttl_s = pl->interactive_ttl_s;
			cfg.reuse_ns = worker_reuse_ns(&w->f, fmt, pl);
		}
	}
	rc = eng_create(&w->eng, &w->be, &w->d, &w->kv, &cfg, eb);
	if (!rc)
		rc = layout_check_held(&w->layout, eb);
	if (rc)
		goto fail;
	ev_begin(&e, EV_INFO, "ignis.gpu_worker.model_loaded");
	ev_str(&e, "model", w->f.desc.name);
	ev_str(&e, "path", path);
	ev_str(&e, "architecture", mdesc_arch_name(w->f.desc.arch));
	/* a llama.cpp file's multi-token-prediction blocks: not run */
	ev_u64(&e, "mtp_layers_skipped", w->f.desc.mtp_layers);
	ev_u64(&e, "mtp_tensors_skipped", w->f.mtp_tensors);
	ev_u64(&e, "weights_placed_bytes", w->d.placed_bytes);
	ev_u64(&e, "weights_line_bytes", w->layout.r[VPLAN_WEIGHTS].bytes);
	ev_u64(&e, "kv_pool_pages", pl->pool_pages);
	/* how the pool's vectors are stored, and what a page of them takes */
	ev_str(&e, "kv_format", mdesc_kv_format_name(cfg.fmt));
	ev_u64(&e, "kv_page_bytes", pl->page_bytes);
	ev_u64(&e, "lanes", cfg.lanes);
	ev_u64(&e, "prefill_chunk", cfg.chunk);
	/* prompt reuse: checkpoints and shared prefixes in these (docs/adr/0037) */
	ev_bool(&e, "reuse_prompt", pl->reuse_prompt);
	/* a model with no fixed-size state keeps its host slots as device
	 * entries (reuse.c: nothing of it goes to the daemon): what it has */
	eng_stats(w->eng, &est);
	ev_u64(&e, "retained_device_slots",
	       w->d.state_bytes ? cfg.retained_device : est.retained_slots);
	ev_u64(&e, "retained_host_slots", w->d.state_bytes ? cfg.retained_host : est.retained_host);
	ev_u64(&e, "threads", w->d.threads);
	/* the rounds' scratch, in the workspace line: a round of more tokens
	 * than a pass holds runs in passes */
	ev_u64(&e, "round_scratch_bytes", w->d.scratch_bytes);
	ev_u64(&e, "workspace_line_bytes", w->layout.r[VPLAN_WORKSPACE].bytes);
	ev_u64(&e, "round_pass_tokens", w->d.pass_tokens);
	/* a MoE model's experts (docs/adr/0039): where they are, how many
	 * slots each class has, the host bytes behind the cache */
	if (w->be.ops->expert_stats) {
		struct be_expert_stats xs;
		uint32_t classes = 0, slots = 0;

		w->be.ops->expert_stats(&w->be, &w->d, &xs);
		for (int k = 0; k < MDESC_EXPERT_CLASSES; k++)
			if (xs.cls[k].slots) {
				classes++;
				slots = xs.cls[k].slots;
			}
		if (xs.cached) {
			ev_str(&e, "experts", xs.offloaded ? "offloaded" : "resident");
			ev_u64(&e, "expert_cache_bytes", xs.cache_bytes);
			ev_u64(&e, "expert_classes", classes);
			ev_u64(&e, "expert_slots_per_class", slots);
			ev_u64(&e, "expert_host_bytes", xs.host_bytes);
			ev_u64(&e, "expert_pinned_bytes", xs.pinned_bytes);
		}
	}
	ev_u64(&e, "logit_rows", w->d.logit_rows);
	ev_u64(&e, "state_slots", w->d.states);
	ev_u64(&e, "move_out_window_bytes", cfg.window_out);
	ev_u64(&e, "move_in_window_bytes", cfg.window_in);
	ev_end(&e);
	return IG_E_OK;
fail:
	ig_errprefix(eb, "loading the model");
	worker_unload(w);
	return rc;
}

/* Lay the plan out on its backend, check the accounting, say so. */
static int worker_lay_out(struct worker *w, const struct msg_plan *pl, struct ig_errbuf *eb)
{
	const struct be_ops *ops;
	char name[17];
	uint64_t free_after, total;
	struct ev e;
	int rc;

	worker_unload(w);
	layout_release(&w->layout);
	if (w->be_open) {
		w->be.ops->close(&w->be);
		w->be_open = false;
	}
	msg_str_copy(name, sizeof(name), pl->backend);
	ops = backend_find(name, eb);
	if (!ops)
		return IG_E_NOTFOUND;
	memset(&w->be, 0, sizeof(w->be));
	w->be.ops = ops;
	/* The cpu backend's simulated device has the plan's free memory, or all
	 * the plan holds when that is more: such a plan comes only with
	 * --vram-allow-oversubscription (the supervisor refuses it otherwise),
	 * and a device that pages, as the spec's Windows one, takes it; the
	 * simulated device's bytes are host memory anyway (ADR 0022). A real
	 * device ignores the figure. */
	rc = ops->open(&w->be, pl->total_bytes > pl->free_bytes ? pl->total_bytes : pl->free_bytes,
	               eb);
	if (rc)
		return rc;
	w->be_open = true;
	rc = layout_apply(&w->layout, &w->be, pl, eb);
	if (!rc)
		rc = layout_check(&w->layout, pl, eb);
	if (!rc)
		rc = layout_check_held(&w->layout, eb);
	if (rc) {
		layout_release(&w->layout);
		return rc;
	}
	ops->mem_info(&w->be, &free_after, &total);
	ev_begin(&e, EV_INFO, "ignis.runtime.vram_loaded");
	ev_str(&e, "backend", name);
	ev_u64(&e, "allocated_bytes", total - free_after);
	ev_u64(&e, "free_after_load_bytes", free_after);
	ev_u64(&e, "kv_pool_pages", w->layout.pool_pages);
	ev_end(&e);
	return IG_E_OK;
}

/* Check a plan message: the lines of common/vplan.h in their order, and a
 * total that is the sum of its parts. The total may pass the budget: an
 * explicit budget below the plan's minimum that the operator oversubscribed
 * (the supervisor refuses one otherwise) gets the plan of that minimum. */
static int worker_take_plan(struct worker *w, const struct msg_plan *pl, struct ig_errbuf *eb)
{
	uint64_t lines = 0, pool, sum;
	struct ev e;

	if (pl->lines.n != VPLAN_NLINES)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "plan.lines: %u lines; this worker lays "
		               "out %d",
		               pl->lines.n, VPLAN_NLINES);
	for (uint32_t i = 0; i < pl->lines.n; i++) {
		if (!msg_str_eq(pl->lines.v[i].name, vplan_line_names[i]))
			return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
			               "plan.lines[%u] is '%.*s'; expected '%s' (a plan from "
			               "another build?)",
			               i, (int)pl->lines.v[i].name.n, pl->lines.v[i].name.p,
			               vplan_line_names[i]);
		lines += pl->lines.v[i].bytes;
	}
	pool = pl->pool_pages * pl->page_bytes;
	sum = lines + pool + pl->residency_fixed_bytes + pl->expert_cache_bytes;
	if (sum != pl->total_bytes)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "plan.total_bytes %" PRIu64 " is not the sum of its parts %" PRIu64,
		               pl->total_bytes, sum);
	{
		int rc = worker_lay_out(w, pl, eb);

		if (!rc)
			rc = worker_load_model(w, pl, eb);
		if (rc)
			return rc;
	}
	w->have_plan = true;
	w->lines_bytes = lines;
	w->pool_bytes = pool;
	w->total_bytes = pl->total_bytes;
	ev_begin(&e, EV_INFO, "ignis.gpu_worker.plan_received");
	ev_strn(&e, "model", pl->model.p, pl->model.n);
	ev_strn(&e, "kv_pool_policy", pl->policy.p, pl->policy.n);
	ev_u64(&e, "lines_bytes", lines);
	ev_u64(&e, "kv_pool_pages", pl->pool_pages);
	ev_u64(&e, "kv_pool_bytes", pool);
	ev_u64(&e, "total_bytes", pl->total_bytes);
	ev_end(&e);
	return IG_E_OK;
}

static int worker_class(struct msg_str s, enum sched_class *out, struct ig_errbuf *eb)
{
	if (msg_str_eq(s, "interactive"))
		*out = SCHED_INTERACTIVE;
	else if (msg_str_eq(s, "agent"))
		*out = SCHED_AGENT;
	else
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "submit.class: '%.*s'; accepted: interactive, agent", (int)s.n, s.p);
	return IG_E_OK;
}

/* A submit's grammar (docs/adr/0057): `grammar` or `json_schema`, compiled
 * or found in the cache, and its trigger, into r (the caller puts it back
 * if the engine refuses the request). */
static int worker_grammar(struct worker *w, const struct msg_submit *q, struct eng_req *r,
                          struct ig_errbuf *eb)
{
	const struct msg_str *t = q->grammar.n ? &q->grammar : &q->json_schema;
	int rc;

	if (q->grammar.n && q->json_schema.n)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "submit: both `grammar` and `json_schema`; accepted: one of them");
	if (!t->n) {
		if (q->grammar_trigger.n)
			return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
			               "submit.grammar_trigger: a trigger without a grammar; "
			               "accepted: with `grammar` or `json_schema`");
		return IG_E_OK;
	}
	if (w->vocab.kind == MDESC_TOK_NONE)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "submit.%s: model '%s' has no tokenizer (tokenizer none), so its "
		               "tokens have no bytes for a grammar to match",
		               q->grammar.n ? "grammar" : "json_schema", w->d.m->name);
	if (!w->gc && (rc = gcache_create(&w->gc, eb)) != IG_E_OK)
		return rc;
	rc = gcache_get(w->gc, q->grammar.n ? GCACHE_GBNF : GCACHE_SCHEMA, t->p, t->n, &r->grammar,
	                eb);
	if (rc) {
		if (rc == IG_E_INVAL)
			rc = IG_E_PROTO_FIELD_RANGE;
		ig_errprefix(eb, q->grammar.n ? "submit.grammar" : "submit.json_schema");
		return rc;
	}
	r->trigger = q->grammar_trigger.p;
	r->trigger_len = q->grammar_trigger.n;
	return IG_E_OK;
}

static int worker_submit(struct worker *w, const struct msg_submit *q, struct msg *reply,
                         struct ig_errbuf *eb)
{
	struct eng_req r = {0};
	struct eng_admission adm;
	struct tok_stops stops = {0};
	struct ev e;
	size_t n = 0;
	int rc;

	if (!w->eng)
		return ig_errf(eb, IG_E_BUSY, "no model is loaded yet (%s)",
		               w->have_plan ? "the plan names no model file" : "no plan yet");
	if ((q->text.n > 0) == (q->prompt.n > 0))
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "submit: give the prompt as `text` or as `prompt` token ids, one of "
		               "the two (text %u bytes, prompt %u ids)",
		               q->text.n, q->prompt.n);
	rc = worker_class(q->class, &r.cls, eb);
	if (rc)
		return rc;
	if (q->stop.n && w->vocab.kind == MDESC_TOK_NONE)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "submit.stop: model '%s' has no tokenizer (tokenizer none); stop "
		               "strings need one",
		               w->d.m->name);
	for (uint32_t i = 0; i < q->stop.n; i++) {
		rc = tok_stops_add(&stops, q->stop.v[i].text.p, q->stop.v[i].text.n, eb);
		if (rc)
			return ig_errprefix(eb, "submit");
	}
	if (q->plain.n % 2 || (q->plain.n && !q->text.n))
		return ig_errf(
		    eb, IG_E_PROTO_FIELD_RANGE,
		    "submit.plain: %u offsets%s; accepted: pairs of byte offsets [start, "
		    "end) of `text`",
		    q->plain.n, q->text.n ? "" : " without a text");
	for (uint32_t i = 0; i < q->plain.n / 2; i++)
		w->spans[i] = (struct chat_span){q->plain.v[2 * i], q->plain.v[2 * i + 1]};
	if (q->plain.n && bpe_spans_check(w->spans, q->plain.n / 2, q->text.n, eb))
		return ig_errprefix(eb, "submit.plain");
	if (q->text.n) {
		if (w->vocab.kind == MDESC_TOK_NONE)
			return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
			               "submit.text: model '%s' has no tokenizer (tokenizer none); "
			               "send `prompt` token ids",
			               w->d.m->name);
		/* a real vocabulary as llama.cpp's server reads a prompt: its
		 * special tokens' text becomes them, BOS where the file asks;
		 * except in the plain spans (a chat's messages), which are text */
		if (w->bpe)
			rc = bpe_encode_spans(w->bpe, q->text.p, q->text.n,
			                      BPE_PARSE_SPECIAL | BPE_ADD_SPECIAL, w->spans,
			                      q->plain.n / 2, w->ids, MSG_TEXT_MAX + 1, &n, eb);
		else
			rc = tok_encode_spans(q->text.p, q->text.n, 0, w->spans, q->plain.n / 2,
			                      w->ids, MSG_TEXT_MAX + 1, &n, eb);
		if (rc)
			return rc;
		r.prompt = w->ids;
		r.n_prompt = (uint32_t)n;
	} else {
		r.prompt = q->prompt.v;
		r.n_prompt = q->prompt.n;
	}
	r.max_tokens = (uint32_t)q->max_tokens;
	/* Checked as sent: a refusal names the double on the wire, not its float. */
	rc = smp_params_set(&r.smp, q->temperature, (uint32_t)q->top_k, q->top_p, q->seed, eb);
	if (rc)
		return rc;
	if (q->top_logprobs && !q->logprobs)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "submit.top_logprobs: %" PRIu64 " without logprobs; accepted: 0, "
		               "or logprobs true",
		               q->top_logprobs);
	if (q->echo && !q->logprobs)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "submit.echo: true without logprobs; accepted: false, or logprobs "
		               "true (echo asks the prompt's log-probabilities too)");
	r.echo = q->echo;
	rc = worker_grammar(w, q, &r, eb);
	if (rc)
		return rc;
	rc = eng_submit(w->eng, &r, &adm, eb);
	if (rc) {
		if (r.grammar)
			gcache_put(w->gc, r.grammar); /* a refused submit leaves it ours */
		return rc;
	}
	if (q->logprobs && (rc = eng_logprobs_ask(w->eng, adm.id, (uint32_t)q->top_logprobs, eb))) {
		struct ig_errbuf ig;

		eng_cancel(w->eng, adm.id, &ig); /* stop, */
		eng_cancel(w->eng, adm.id, &ig); /* and forget */
		return rc;
	}
	if (stops.n)
		worker_stops_keep(w, adm.id, &stops);
	ev_begin(&e, EV_INFO, "ignis.request.submitted");
	ev_u64(&e, "id", adm.id);
	ev_str(&e, "class", sched_class_name(r.cls));
	ev_u64(&e, "prompt_tokens", adm.prompt_tokens);
	ev_u64(&e, "max_tokens", adm.max_tokens);
	ev_u64(&e, "reserved_pages", adm.pages);
	ev_u64(&e, "stop_strings", stops.n);
	if (r.grammar) {
		ev_str(&e, "grammar", q->json_schema.n ? "json_schema" : "grammar");
		ev_u64(&e, "grammar_trigger_bytes", r.trigger_len);
	}
	ev_end(&e);
	reply->type = MSG_SUBMITTED;
	reply->u.submitted =
	    (struct msg_submitted){adm.id, adm.prompt_tokens, adm.max_tokens, adm.pages};
	return IG_E_OK;
}

/* What a poll of request `id` from `from` sees: the output, the tokens a
 * reader may have (all once done; while running, all but those that could
 * begin a stop string), its state. */
static int worker_output(struct worker *w, uint64_t id, uint64_t from, const uint32_t **out,
                         uint32_t *visible, struct eng_status *st, struct ig_errbuf *eb)
{
	int rc = eng_output(w->eng, id, out, st, eb);
	struct worker_stops *e;

	if (rc)
		return rc;
	*visible = st->generated;
	if (st->phase != SCHED_DONE && (e = worker_stops_of(w, id)) != NULL)
		*visible = tok_stops_visible(&e->st, &w->vocab, *out, st->generated);
	if (from > *visible)
		return ig_errf(eb, IG_E_INVAL,
		               "from: %" PRIu64 "; request %" PRIu64 " has generated %u tokens",
		               from, id, *visible);
	return IG_E_OK;
}

/* Tokens [from, from + max) of what a reader sees, and the text they add
 * (the request's last reply, once done, with a final tail's U+FFFD): into
 * ids, text (cap bytes) and ends; *n tokens, *len bytes. */
static void worker_reply_text(const struct worker *w, const uint32_t *out, uint32_t visible,
                              const struct eng_status *st, uint32_t from, uint32_t max,
                              uint32_t *ids, char *text, size_t cap, uint32_t *ends, uint32_t *n,
                              size_t *len)
{
	uint32_t to = visible - from < max ? visible : from + max;

	tok_text_delta(&w->vocab, out, from, to, st->phase == SCHED_DONE && to == visible, text,
	               cap, ends, n, len);
	if (*n)
		memcpy(ids, out + from, (size_t)*n * sizeof(uint32_t));
}

static int worker_poll(struct worker *w, const struct msg_poll *q, struct msg *reply,
                       struct ig_errbuf *eb)
{
	struct msg_tokens *t = &reply->u.tokens;
	const uint32_t *out;
	struct eng_status st;
	uint32_t visible;
	size_t len;
	int rc;

	if (!w->eng)
		return ig_errf(eb, IG_E_NOTFOUND,
		               "poll.id: no request %" PRIu64 " (no model loaded)", q->id);
	rc = worker_output(w, q->id, q->from, &out, &visible, &st, eb);
	if (rc)
		return rc;
	reply->type = MSG_TOKENS;
	worker_reply_text(w, out, visible, &st, (uint32_t)q->from, (uint32_t)q->max, t->tokens.v,
	                  w->text, sizeof(w->text), NULL, &t->tokens.n, &len);
	t->id = q->id;
	t->from = q->from;
	t->text = (struct msg_str){w->text, (uint32_t)len};
	t->state = msg_str_of(sched_phase_name(st.phase));
	t->done = st.phase == SCHED_DONE;
	t->finish = msg_str_of(eng_finish_name(st.finish));
	t->generated = visible;
	t->cached = st.cached;
	return IG_E_OK;
}

/* The figures of the metrics page (docs/protocol.md, "Worker figures"):
 * eng_stats, a walk of the live requests; all 0 with no model loaded. */
static void worker_stats(struct worker *w, struct msg_worker_stats_reply *r)
{
	struct eng_stats st;

	_Static_assert(ENG_TTFT_NBUCKETS <= sizeof(r->ttft.v) / sizeof(r->ttft.v[0]),
	               "worker_stats_reply.ttft holds every bucket");
	memset(r, 0, sizeof(*r));
	r->ttft.n = ENG_TTFT_NBUCKETS;
	for (uint32_t i = 0; i < ENG_TTFT_NBUCKETS; i++)
		r->ttft.v[i].le_us = i < ENG_TTFT_NBOUNDS ? eng_ttft_bounds_us[i] : UINT64_MAX;
	if (!w->eng)
		return;
	eng_stats(w->eng, &st);
	r->loaded = true;
	r->pool_pages = w->kv.n_pages;
	r->used_pages = w->kv.n_pages - st.free_pages;
	r->retained_pages = st.retained_pages;
	r->pending_pages = st.pending_pages;
	r->waiting = st.waiting;
	r->prefill = st.prefill;
	r->ready = st.ready;
	r->decode = st.lanes_used;
	r->accepted = st.submitted;
	r->finished_length = st.finished_by[ENG_LENGTH];
	r->finished_eos = st.finished_by[ENG_EOS];
	r->finished_context = st.finished_by[ENG_CONTEXT];
	r->cancelled = st.finished_by[ENG_CANCELLED];
	r->prompt_tokens = st.prompt_tokens;
	r->generated_tokens = st.generated_tokens;
	r->prefill_tokens = st.prefill_tokens;
	r->rounds = st.rounds;
	for (uint32_t i = 0; i < ENG_TTFT_NBUCKETS; i++)
		r->ttft.v[i].count = st.ttft[i];
	r->ttft_sum_us = st.ttft_sum_us;
	r->moving_out = st.moving_out;
	r->moved = st.moved;
	r->moving_in = st.moving_in;
	r->moves_out = st.moves_out;
	r->moves_in = st.moves_in;
	r->move_out_bytes = st.move_out_bytes;
	r->move_in_bytes = st.move_in_bytes;
	r->reprefills = st.lost;
	r->move_retries = st.move_retries;
	r->moves_stopped = st.moves_stopped;
	r->retained_slots = st.retained_slots;
	r->checkpoints = st.checkpoints;
	r->reuse_captures = st.reuse_captures;
	r->reuse_hits = st.reuse_hits;
	r->reuse_misses = st.reuse_misses;
	r->reuse_misses_given_up = st.reuse_misses_given_up;
	r->reused_tokens = st.reused_tokens;
	r->reused_prefix_tokens = st.reused_prefix_tokens;
	r->reuse_skips_slot = st.reuse_skips_slot;
	r->reuse_skips_page = st.reuse_skips_page;
	r->reuse_given_up_room = st.reuse_given_up_room;
	r->reuse_given_up_slot = st.reuse_given_up_slot;
	r->host_checkpoints = st.host_checkpoints;
	r->reused_host_tokens = st.reused_host_tokens;
	r->reused_host_prefix_tokens = st.reused_host_prefix_tokens;
	r->reuse_skips_host_busy = st.reuse_skips_host_busy;
	r->reuse_skips_host_refused = st.reuse_skips_host_refused;
	r->reuse_given_up_tier = st.reuse_given_up_tier;
	/* the expert cache's classes (their names live in w->xs until sent) */
	memset(&w->xs, 0, sizeof(w->xs));
	if (w->d_bound && w->be.ops->expert_stats)
		w->be.ops->expert_stats(&w->be, &w->d, &w->xs);
	r->experts.n = 0;
	for (int k = 0; k < MDESC_EXPERT_CLASSES && w->xs.cached; k++) {
		const struct be_expert_class *c = &w->xs.cls[k];

		if (!c->slots)
			continue;
		r->experts.v[r->experts.n++] = (struct msg_expert_class){
		    .name = msg_str_of(c->name),
		    .record = c->record,
		    .slots = c->slots,
		    .hits = c->hits,
		    .misses = c->misses,
		    .bytes = c->bytes,
		    .evictions = c->evictions,
		    .prefetches = c->prefetches,
		};
	}
	r->expert_staged_layers = w->xs.staged_layers;
	r->expert_staged_bytes = w->xs.staged_bytes;
}

/* What a poll of request `id` from `from` would answer, as a poll_many's
 * entry (at most `max` tokens, text into `text`, MSG_POLL_MANY_TEXT bytes),
 * or its error code. */
static void worker_fill_ent(struct worker *w, uint64_t id, uint64_t from, uint32_t max, char *text,
                            struct msg_tokens_ent *t)
{
	const uint32_t *out = NULL;
	struct eng_status st;
	struct ig_errbuf eb;
	uint32_t visible = 0;
	size_t len;
	int rc = IG_E_NOTFOUND;

	memset(t, 0, sizeof(*t));
	t->id = id;
	t->from = from;
	if (w->eng)
		rc = worker_output(w, id, from, &out, &visible, &st, &eb);
	if (rc) {
		t->state = msg_str_of("");
		t->text = msg_str_of("");
		t->finish = msg_str_of("");
		t->code = (uint64_t)rc;
		return;
	}
	worker_reply_text(w, out, visible, &st, (uint32_t)from, max, t->tokens.v, text,
	                  MSG_POLL_MANY_TEXT, t->text_ends.v, &t->tokens.n, &len);
	t->text_ends.n = t->tokens.n;
	t->text = (struct msg_str){text, (uint32_t)len};
	t->state = msg_str_of(sched_phase_name(st.phase));
	t->done = st.phase == SCHED_DONE;
	t->finish = msg_str_of(eng_finish_name(st.finish));
	t->generated = visible;
	t->cached = st.cached;
}

/* Up to MSG_POLL_MANY_MAX requests' tokens in one answer (the front door's
 * pump: one message a loop turn, whatever the number of requests). Each
 * entry is what a poll of it would answer, or its error code. */
static void worker_poll_many(struct worker *w, const struct msg_poll_many *q,
                             struct msg_tokens_many *r)
{
	r->pid = (uint64_t)getpid();
	r->reqs.n = q->reqs.n;
	for (uint32_t i = 0; i < q->reqs.n; i++)
		worker_fill_ent(w, q->reqs.v[i].id, q->reqs.v[i].from, MSG_POLL_MANY_IDS,
		                w->many_text[i], &r->reqs.v[i]);
}

/* One token's log-probabilities, top[0..n) (the token's own first, then
 * its top list), into r (lps, lp_n, pieces, piece_ends); false, with
 * nothing added, when their pieces would pass MSG_LP_BYTES. n 0: a group
 * of none (the prompt's first position). */
static bool worker_lp_put(struct worker *w, const struct smp_logprob *top, uint32_t n,
                          struct msg_tokens_lp *r)
{
	uint32_t bytes = r->pieces.n;

	for (uint32_t j = 0; j < n; j++) {
		const uint8_t *p;
		size_t len;

		tok_piece(&w->vocab, top[j].id, &p, &len);
		bytes += (uint32_t)len;
	}
	if (bytes > MSG_LP_BYTES)
		return false;
	for (uint32_t j = 0; j < n; j++) {
		const uint8_t *p;
		size_t len;

		/* -inf travels as the lowest double (f64 fields are finite) */
		r->lps.v[r->lps.n++] = (struct msg_lp){
		    top[j].id, top[j].lp >= -MSG_LP_FLOOR ? top[j].lp : -MSG_LP_FLOOR};
		tok_piece(&w->vocab, top[j].id, &p, &len);
		for (size_t b = 0; b < len; b++)
			r->pieces.v[r->pieces.n++] = p[b];
		r->piece_ends.v[r->piece_ends.n++] = r->pieces.n;
	}
	r->lp_n.v[r->lp_n.n++] = n;
	return true;
}

/* Token `i` (`tok`) of request `id`, generated (or with `prompt`, prompt
 * position i): its log-probabilities into r; false, with nothing added,
 * when its pieces would pass MSG_LP_BYTES or the request has none. */
static bool worker_lp_add(struct worker *w, uint64_t id, uint32_t i, uint32_t tok, bool prompt,
                          struct msg_tokens_lp *r)
{
	struct smp_logprob top[SMP_TOP_LOGPROBS_MAX + 1];
	uint32_t n = 0;
	int rc = prompt ? eng_prompt_logprobs(w->eng, id, i, &top[0].lp, top + 1, &n, NULL)
	                : eng_logprobs(w->eng, id, i, &top[0].lp, top + 1, &n, NULL);

	if (rc)
		return false;
	top[0].id = tok;
	return worker_lp_put(w, top, prompt && i == 0 ? 0 : n + 1, r);
}

/* One request's tokens with their log-probabilities (poll_lp: a request
 * submitted with logprobs). The tokens whose pieces fit (at least one),
 * then what a poll_many would answer for that many. */
static void worker_poll_out(struct worker *w, const struct msg_poll_lp *q, struct msg_tokens_lp *r)
{
	struct msg_tokens_ent *t = &r->ent.v[0];
	uint32_t k = 0;

	worker_fill_ent(w, q->id, q->from, MSG_LP_TOKENS, w->many_text[0], t);
	if (t->code)
		return;
	while (k < t->tokens.n &&
	       worker_lp_add(w, q->id, (uint32_t)q->from + k, t->tokens.v[k], false, r))
		k++;
	if (!k && t->tokens.n) {
		/* no log-probabilities (a request submitted without them):
		 * refused, as a poll of a request it cannot answer */
		memset(t, 0, sizeof(*t));
		t->id = q->id;
		t->from = q->from;
		t->state = t->text = t->finish = msg_str_of("");
		t->code = IG_E_INVAL;
	} else if (k < t->tokens.n) { /* the rest next time: the text of the k taken */
		worker_fill_ent(w, q->id, q->from, k, w->many_text[0], t);
	}
}

/* A request's prompt positions from q->from with their log-probabilities
 * (poll_lp's `prompt`: a request submitted with echo; msg.h): at most the
 * positions ready, MSG_LP_TOKENS of them, as many as their text and
 * pieces allow (at least one). */
static void worker_poll_prompt(struct worker *w, const struct msg_poll_lp *q,
                               struct msg_tokens_lp *r)
{
	struct msg_tokens_ent *t = &r->ent.v[0];
	const uint32_t *toks = NULL, *out;
	uint32_t n = 0, ready = 0, from = (uint32_t)q->from, to, k = 0;
	struct eng_status st;
	size_t len = 0;
	int rc = IG_E_NOTFOUND;

	t->id = q->id;
	t->from = q->from;
	t->state = t->text = t->finish = msg_str_of("");
	if (w->eng && !(rc = eng_prompt(w->eng, q->id, &toks, &n, &ready, NULL)) &&
	    !(rc = eng_output(w->eng, q->id, &out, &st, NULL)) && !ready)
		rc = IG_E_INVAL; /* submitted without echo */
	if (rc) {
		t->code = (uint64_t)rc;
		return;
	}
	t->state = msg_str_of(sched_phase_name(st.phase));
	t->done = st.phase == SCHED_DONE;
	t->finish = msg_str_of(eng_finish_name(st.finish));
	t->generated = ready;
	t->cached = st.cached;
	if (q->from >= ready)
		return; /* nothing (more) yet: not an error, ready only grows */
	to = ready - from < MSG_LP_TOKENS ? ready : from + MSG_LP_TOKENS;
	tok_text_delta(&w->vocab, toks, from, to, to == n, w->many_text[0], MSG_POLL_MANY_TEXT,
	               t->text_ends.v, &t->tokens.n, &len);
	while (k < t->tokens.n && worker_lp_add(w, q->id, from + k, toks[from + k], true, r))
		k++;
	if (k < t->tokens.n) /* the rest next time: the text of the k taken */
		tok_text_delta(&w->vocab, toks, from, from + k, from + k == n, w->many_text[0],
		               MSG_POLL_MANY_TEXT, t->text_ends.v, &t->tokens.n, &len);
	memcpy(t->tokens.v, toks + from, (size_t)t->tokens.n * sizeof(uint32_t));
	t->text_ends.n = t->tokens.n;
	t->text = (struct msg_str){w->many_text[0], (uint32_t)len};
}

/* poll_lp: a request's generated tokens, or (`prompt`) its prompt's
 * positions, with their log-probabilities. */
static void worker_poll_lp(struct worker *w, const struct msg_poll_lp *q, struct msg_tokens_lp *r)
{
	memset(r, 0, sizeof(*r));
	r->pid = (uint64_t)getpid();
	r->ent.n = 1;
	if (q->prompt)
		worker_poll_prompt(w, q, r);
	else
		worker_poll_out(w, q, r);
}

static int worker_handle(void *ctx, const struct msg *req, struct msg *reply, struct ig_errbuf *eb)
{
	struct worker *w = ctx;
	int rc;

	switch (req->type) {
	case MSG_PLAN:
		rc = worker_take_plan(w, &req->u.plan, eb);
		if (rc)
			return rc;
		reply->type = MSG_ACK;
		reply->u.ack.of = MSG_PLAN;
		return IG_E_OK;
	case MSG_SUBMIT:
		return worker_submit(w, &req->u.submit, reply, eb);
	case MSG_POLL:
		return worker_poll(w, &req->u.poll, reply, eb);
	case MSG_CANCEL:
		if (!w->eng)
			return ig_errf(eb, IG_E_NOTFOUND, "cancel.id: no model loaded");
		rc = eng_cancel(w->eng, req->u.cancel.id, eb);
		if (rc)
			return rc;
		{
			const uint32_t *out;
			struct eng_status es;
			struct worker_stops *e = worker_stops_of(w, req->u.cancel.id);

			/* forgotten (a cancel of a finished one): its stops go */
			if (e && eng_output(w->eng, req->u.cancel.id, &out, &es, NULL))
				worker_stops_drop(w, e);
		}
		reply->type = MSG_ACK;
		reply->u.ack.of = MSG_CANCEL;
		return IG_E_OK;
	case MSG_WORKER_STATS:
		worker_stats(w, &reply->u.worker_stats_reply);
		reply->u.worker_stats_reply.rejected = w->svc ? w->svc->rejects.total : 0;
		reply->type = MSG_WORKER_STATS_REPLY;
		return IG_E_OK;
	case MSG_POLL_MANY:
		worker_poll_many(w, &req->u.poll_many, &reply->u.tokens_many);
		reply->type = MSG_TOKENS_MANY;
		return IG_E_OK;
	case MSG_POLL_LP:
		worker_poll_lp(w, &req->u.poll_lp, &reply->u.tokens_lp);
		reply->type = MSG_TOKENS_LP;
		return IG_E_OK;
	default:
		return ig_errf(eb, IG_E_PROTO_UNEXPECTED,
		               "the gpu-worker does not take '%s' messages",
		               msg_type_name(req->type));
	}
}

/* One decode round between two looks at the socket. */
static bool worker_work(void *ctx, int *fatal)
{
	struct worker *w = ctx;
	struct ig_errbuf eb;
	uint32_t ran = 0;

	if (!w->eng)
		return false;
	if (eng_round(w->eng, &ran, &eb)) {
		ev_msg(EV_ERROR, "ignis.gpu_worker.round_failed", "%s", eb.msg);
		*fatal = 1;
		return false;
	}
	return ran > 0 || eng_busy(w->eng);
}

int main(int argc, char **argv)
{
	static struct worker w;
	const struct dmn_spec spec = {
	    .role = "gpu-worker",
	    .program = "ignis-gpu-worker",
	    .sockname = "gpu-worker",
	    .summary = "The Ignis GPU worker: device memory, model, KV pool, scheduler.",
	    .ready_fields = backend_ready_fields,
	    .handle = worker_handle,
	    .ctx = &w,
	    .work = worker_work,
	    .svc_at = &w.svc,
	};
	struct dmn_args args;
	int rc = dmn_parse_args(&spec, argc, argv, &args);

	if (rc)
		return rc > 0 ? 0 : 2;
	{
		struct ig_errbuf eb;

		if (rtdir_resolve(args.runtime_dir, NULL, NULL, w.rtdir, sizeof(w.rtdir), &eb)) {
			fprintf(stderr, "ignis-gpu-worker: %s\n", eb.msg);
			return 2;
		}
	}
	rc = dmn_run(&spec, &args);
	worker_unload(&w);
	gcache_destroy(w.gc);
	layout_release(&w.layout);
	return rc;
}
