/*
 * vplan.h - the VRAM plan: a pure function of (knobs, model description,
 * device facts), no I/O. docs/design.md, sections 2 and 3, states the rules
 * and the figures; docs/adr/0005 records how the lines the reference does
 * not give are derived.
 *
 * Layout, in this order: the fixed lines (VPLAN_LINES), then on Flash-Next
 * the residency lines (prefill staging ring, expert tables) and the expert
 * cache, then the KV pool. Figures are bytes, pages and slots.
 */
#ifndef IGNIS_COMMON_VPLAN_H
#define IGNIS_COMMON_VPLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "knobs.h"
#include "model.h"

/* The fixed lines, in their order (docs/design.md, section 2: never drop a name). */
#define VPLAN_LINES(X)                                                                             \
	X(WEIGHTS, "weights")                                                                      \
	X(CUDA_CONTEXT, "cuda_context")                                                            \
	X(WORKSPACE, "workspace")                                                                  \
	X(MEDIA_EMBEDDING, "media_embedding")                                                      \
	X(SAMPLING, "sampling")                                                                    \
	X(DECODE_GRAPH, "decode_graph")                                                            \
	X(VERIFY_ROUND, "verify_round")                                                            \
	X(DRAFTER_ROUND, "drafter_round")                                                          \
	X(LANE_STATE, "lane_state")                                                                \
	X(RETAINED_SLOTS, "retained_slots")                                                        \
	X(HQ_RESIDUAL_WINDOW, "hq_residual_window")                                                \
	X(RESIDUAL, "residual")

enum vplan_line {
#define VPLAN__LINE_ENUM(ID, name) VPLAN_##ID,
	VPLAN_LINES(VPLAN__LINE_ENUM)
#undef VPLAN__LINE_ENUM
	    VPLAN_NLINES
};

extern const char *const vplan_line_names[VPLAN_NLINES];

/* Reserved for the CUDA runtime's own context, cuBLAS handles and kernel
 * images on the cuda backend (public measurements of CUDA 12/13 on Hopper
 * and Blackwell: 400-500 MiB); the worker's accounting checks it at load. */
#define VPLAN_CUDA_CONTEXT_BYTES (512ull * 1024 * 1024)
/* Device allocations are made in these units; the rounding is the
 * `residual` line. */
#define VPLAN_GRANULE_CUDA (2ull * 1024 * 1024)
#define VPLAN_GRANULE_CPU  4096ull

enum vplan_policy { VPLAN_RESIDENT = 1, VPLAN_OFFLOADED = 2 };

struct vplan_device {
	uint64_t free_bytes; /* free at start, read once before our context */
	bool cuda;           /* the backend the plan is for */
	bool free_named;     /* free_bytes is --device-free-bytes (a simulated device,
	                        or a card that is not here), not the card's figure */
	char source[96];     /* where free_bytes came from, for people */
};

/* The most pages a pool holds: the worker's page tables count pages in 32
 * bits, and so does the plan message's pool_pages (docs/protocol.md). */
#define VPLAN_MAX_POOL_PAGES ((uint64_t)UINT32_MAX)

/* Warnings a plan that starts may carry. */
#define VPLAN_WARN_OVERSUBSCRIBED    1u /* an explicit budget above free memory */
#define VPLAN_WARN_CACHE_BELOW_FLOOR 2u /* the expert cache below its floor */
#define VPLAN_WARN_BELOW_MINIMUM     4u /* an explicit budget below the plan minimum */

struct vplan {
	const struct mdesc *model;
	enum mdesc_kv_format kv_format;
	bool cuda;
	char device_source[96]; /* where the free figure came from */

	/* Budget. */
	bool derived; /* mode: derived (free - headroom) or explicit */
	uint64_t free_bytes, headroom_bytes, budget_bytes;
	bool free_named; /* free_bytes is --device-free-bytes (vplan_device) */
	bool allow_oversubscription;

	/* Shape of the load. */
	uint32_t lanes, chunk;
	uint64_t context, requested_context; /* tokens; differ when adapted */
	bool context_adapted;
	uint32_t retained_device, retained_host;
	uint64_t retained_host_bytes;
	uint64_t kv_bytes_per_token, page_bytes;
	/* the compact formats' residual window (common/model.h): its knobs, and
	 * its bytes in each sequence's state (0 in another format) */
	uint32_t kv_sinks, kv_window;
	uint64_t window_bytes;

	/* Lines. */
	uint64_t line[VPLAN_NLINES];
	uint64_t lines_total;

	/* The pool. */
	enum vplan_policy policy;
	bool pool_named;
	uint64_t floor_pages; /* one context + a page per retained slot */
	uint64_t pool_pages, pool_bytes;

	/* Flash-Next's family. */
	uint64_t prefill_staging_bytes, expert_table_bytes, residency_fixed_bytes;
	uint64_t expert_cache_bytes, cache_floor_bytes;
	uint64_t class_min_slots, class_min_bytes;
	uint64_t pinned_expert_bytes;
	uint64_t expert_host_bytes; /* offloaded: host memory behind the cache */

	uint64_t minimum_bytes; /* the least budget that starts: fixed lines + the
	                           floor (or named) pool (+ Flash-Next's residency
	                           lines and class-minimum cache); what a refusal
	                           asks for, and what an oversubscribed plan below
	                           it holds (ADR 0022) */
	uint64_t total_bytes;   /* everything reserved */
	uint64_t unused_bytes;  /* budget left unused (a named resident pool) */
	unsigned warnings;      /* VPLAN_WARN_* */

	/* A refusal: what was short, by how much, and the knobs to turn. */
	uint64_t shortfall_bytes;
	char refusal[1024];
	char knobs[256]; /* the knobs a refusal or a warning names, comma-separated */
};

/*
 * Compute the plan. IG_E_OK: the plan starts (maybe with warnings);
 * IG_E_PLAN_REFUSED: it does not, `refusal` says why and which knobs lift it.
 */
int vplan_compute(const struct knobs *k, const struct vplan_device *dev, struct vplan *p);

/* The event name: ignis.runtime.vram_plan, or flash_next_plan on that family. */
const char *vplan_event_name(const struct vplan *p);

#endif
