/*
 * expcache.h - where a MoE model's routed experts live at run time
 * (docs/adr/0039; the plan's expert_cache and residency lines, ADR 0005).
 *
 * A resident load (every expert fits, the plan's policy "resident") copies
 * every expert into the expert_cache region at bind and reads them there:
 * no cache, nothing copied after.
 *
 * An offloaded load keeps every expert in one host allocation owned here
 * (the file's bytes copied in at bind; pinned for DMA on a GPU) and puts a
 * fixed device cache in front of it: the expert_cache region carved into
 * one slot pool per class (a class: gate+up, or down, in one tensor type;
 * its record one expert's bytes of it, mdesc's class_record_bytes), as many
 * slots per class as whole slot sets fit (the plan sizes the region in
 * whole sets). A pass's experts of a layer are looked up once its rows are
 * routed: a hit is used in place; a miss takes the least recently used slot
 * of its class that this pass does not hold, and is copied host to device on
 * the backend's transfer stream before the layer runs. When a pass routes
 * more distinct experts than a class has slots (a prefill chunk: decode
 * rows alone never do, the plan's class minimum is lanes x (top_k +
 * prefetch)), the whole layer's experts are copied into the staging ring
 * instead (the residency region's prefill_staging: two layers) and read
 * there.
 *
 * Exactness: every place an expert is read from holds the same bytes as the
 * file's tensor slice, so the arithmetic is the same at any cache size
 * (tests/unit/test_expcache.c).
 *
 * Neutral (docs/adr/0045): the cache reaches the device only through the
 * backend table (copies sync and on the transfer stream, host_alloc for its
 * host copy) and gives each expert as struct be_weight views, so every
 * backend runs the same cache; its layer operations read the views.
 */
#ifndef IGNIS_GPU_WORKER_EXPCACHE_H
#define IGNIS_GPU_WORKER_EXPCACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "backend.h"
#include "weight.h"
#include "model/mfile.h"

struct xcache;

/* Pinned experts (--vram-pinned-expert-bytes): `bytes` of slot records held
 * for the whole load outside the order, the most routed first by `counts`
 * (layers x experts, a calibration's: NULL refuses a pin), each class
 * keeping `keep` slots (lanes x (top_k + prefetch width)). */
struct xc_pins {
	uint64_t bytes;
	const uint64_t *counts;
	uint32_t keep;
};

/* Bind the experts of `f` (a MoE file, open for the cache's life): resident
 * into `cache` when `offloaded` is false, else behind a cache of `cache`
 * with the ring in `staging`. Refused, naming the region and the bytes,
 * when `cache` cannot hold every expert (resident) or one slot set
 * (offloaded) or when `staging` is not two layers' experts. */
int xc_create(struct xcache **out, struct be *be, struct mfile *f, struct be_region cache,
              struct be_region staging, bool offloaded, const struct xc_pins *pins,
              struct ig_errbuf *eb);
void xc_destroy(struct xcache *c);
/* Layer `layer`'s pass routed these experts (n ids, repeats included):
 * make each readable (a hit, a slot filled, or the whole layer staged) and
 * wait for their copies. Fails only when the device does (a copy refused),
 * or when a pass needs the staging ring and there is none. */
int xc_prepare(struct xcache *c, uint32_t layer, const uint32_t *ids, uint32_t n,
               struct ig_errbuf *eb);
/* Expert e of `layer`'s three projections (gate, up, down) where the last
 * xc_prepare of the layer put them: the same bytes as the tensors' slices. */
void xc_get(const struct xcache *c, uint32_t layer, uint32_t e, struct be_weight w[3]);
/* The experts `layer` will likely route to (a guess): their copies start
 * now, beside the work before the layer, and are not waited for. */
void xc_prefetch(struct xcache *c, uint32_t layer, const uint32_t *ids, uint32_t n);
void xc_stats(const struct xcache *c, struct be_expert_stats *st);
/* Tokens routed to each expert since the bind (layers x experts, layer-major
 * order; the calibration's counts): up to n into `out`; returns how many
 * there are. */
uint64_t xc_counts(const struct xcache *c, uint64_t *out, uint64_t n);

#endif
