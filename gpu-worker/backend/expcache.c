/* expcache.c - where a MoE model's routed experts live at run time, on any
 * backend (see expcache.h). */
#include "expcache.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/quant.h"

/* Where a layer's experts are read in the pass under way. */
enum xc_mode { XC_RESIDENT = 0, XC_SLOTS, XC_RING };

struct xc_layer {
	uint32_t type[3];  /* gate, up, down tensor types */
	uint64_t bytes[3]; /* one expert's bytes of each */
	const unsigned char
	    *src[3];            /* the tensors, every expert: host (or the device copy, resident) */
	uint32_t cls_gu, cls_d; /* its classes (offloaded) */
	enum xc_mode mode;
	const unsigned char *ring; /* XC_RING: the layer's three tensors, one after another */
};

struct xc_class {
	uint64_t record;
	uint32_t n_slots;
	uint32_t n_pinned; /* slots 0..n_pinned: pinned experts, outside the order */
	unsigned char *pool;
	uint64_t *key; /* per slot: layer x experts + expert + 1; 0 free */
	/* the slots in order of use, a doubly linked list: head the most
	 * recently used, tail the least (free slots start there) */
	uint32_t *prev, *next;
	uint32_t head, tail;
	uint32_t *epoch; /* per slot: the prepare that holds it */
	uint64_t hits, misses, bytes, evictions;
	uint64_t prefetched; /* fills a prefetch made (not misses: nobody waited) */
};

struct xcache {
	struct be *be;
	const struct mdesc *m;
	bool offloaded;
	struct xc_layer *L;
	uint64_t cache_bytes;
	/* offloaded */
	unsigned char *host;
	uint64_t host_bytes;
	struct xc_class cls[MDESC_EXPERT_CLASSES];
	int32_t *map[2]; /* [layer x experts + e]: its gate_up, down slot, or -1 */
	unsigned char *ring[2];
	uint64_t ring_bytes; /* each */
	int64_t ring_layer[2];
	uint32_t ring_next;
	uint32_t *seen, *list; /* [experts]: the prepare that saw it; the distinct ones */
	uint32_t epoch;
	uint64_t ticket;
	bool copied;
	uint64_t staged_layers, staged_bytes;
	/* per expert (layer x experts + e): its three projections in host
	 * memory (NULL when pinned: no host copy), pinned, tokens routed to it */
	const unsigned char **hp;
	bool *pinned;
	uint64_t *routed;
	uint64_t pinned_bytes;
};

static const char *const xc_names[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

static uint64_t xc__pad4k(uint64_t b)
{
	return MDESC_EXPERT_RECORD_PAD(b);
}

/* Copy host `src` to device `dst` on the transfer stream (the ticket kept
 * to wait for); a full stream is waited for and asked again. */
static int xc__copy(struct xcache *c, void *dst, const void *src, uint64_t n, struct ig_errbuf *eb)
{
	const struct be_ops *o = c->be->ops;
	uint64_t t;
	int rc;

	if (!o->copy_h2d_async)
		return o->copy_h2d(c->be, dst, src, n, eb);
	rc = o->copy_h2d_async(c->be, dst, src, n, &t, eb);
	if (rc == IG_E_BUSY) {
		rc = o->xfer_wait_all(c->be, eb);
		if (!rc)
			rc = o->copy_h2d_async(c->be, dst, src, n, &t, eb);
	}
	if (!rc) {
		c->ticket = t;
		c->copied = true;
	}
	return rc;
}

static int xc__wait(struct xcache *c, struct ig_errbuf *eb)
{
	int rc = IG_E_OK;

	if (c->copied && c->be->ops->copy_h2d_async)
		rc = c->be->ops->xfer_wait(c->be, c->ticket, eb);
	c->copied = false;
	return rc;
}

#define XC_NONE UINT32_MAX

/* Slot s to the head of its class's order (just used). */
static void xc__touch(struct xc_class *k, uint32_t s)
{
	if (k->head == s)
		return;
	/* unlink */
	if (k->prev[s] != XC_NONE)
		k->next[k->prev[s]] = k->next[s];
	if (k->next[s] != XC_NONE)
		k->prev[k->next[s]] = k->prev[s];
	if (k->tail == s)
		k->tail = k->prev[s];
	/* to the head */
	k->prev[s] = XC_NONE;
	k->next[s] = k->head;
	if (k->head != XC_NONE)
		k->prev[k->head] = s;
	k->head = s;
	if (k->tail == XC_NONE)
		k->tail = s;
}

/* The least recently used slot of class `k` that this prepare does not
 * hold (free ones are at the tail from the start). The slots a prepare holds
 * were touched by it, so they are at the head: the walk from the tail stops
 * at once but when every slot is held (the caller's count forbids it). */
static uint32_t xc__victim(const struct xc_class *k, uint32_t epoch)
{
	for (uint32_t s = k->tail; s != XC_NONE; s = k->prev[s])
		if (k->epoch[s] != epoch)
			return s;
	return XC_NONE;
}

/* Expert e of layer l into a slot of its class `which` (0 gate_up, 1 down):
 * a hit, or the least recently used slot copied over. */
/* Expert e of layer l copied into the least recently used slot of its
 * class `which` (0 gate_up, 1 down) that this pass does not hold, mapped,
 * held by this pass and freshest. */
static int xc__fill(struct xcache *c, uint32_t l, uint32_t e, int which, struct ig_errbuf *eb)
{
	const struct xc_layer *L = &c->L[l];
	struct xc_class *k = &c->cls[which ? L->cls_d : L->cls_gu];
	uint64_t key = (uint64_t)l * c->m->experts + e;
	uint32_t s = xc__victim(k, c->epoch);
	unsigned char *dst;
	int rc;

	if (s == XC_NONE) /* the caller checked the count: cannot happen */
		return ig_errf(eb, IG_E_NOSPACE, "expert cache: no slot left in a class");
	if (k->key[s]) {
		c->map[which][k->key[s] - 1] = -1;
		k->key[s] = 0;
		k->evictions++;
	}
	dst = k->pool + (uint64_t)s * k->record;
	if (!which) {
		rc = xc__copy(c, dst, c->hp[key * 3], L->bytes[0], eb);
		if (!rc)
			rc = xc__copy(c, dst + L->bytes[0], c->hp[key * 3 + 1], L->bytes[1], eb);
	} else {
		rc = xc__copy(c, dst, c->hp[key * 3 + 2], L->bytes[2], eb);
	}
	if (rc)
		return rc;
	k->bytes += which ? L->bytes[2] : L->bytes[0] + L->bytes[1];
	k->key[s] = key + 1;
	c->map[which][key] = (int32_t)s;
	k->epoch[s] = c->epoch;
	xc__touch(k, s);
	return IG_E_OK;
}

/* Expert e of layer l readable in its class `which`: a hit (pinned, or in
 * a slot: held by this pass and freshest), or a miss filled. */
static int xc__slot(struct xcache *c, uint32_t l, uint32_t e, int which, struct ig_errbuf *eb)
{
	const struct xc_layer *L = &c->L[l];
	struct xc_class *k = &c->cls[which ? L->cls_d : L->cls_gu];
	uint64_t key = (uint64_t)l * c->m->experts + e;
	int32_t s = c->map[which][key];
	int rc;

	if (c->pinned[key]) { /* held for the whole load, outside the order */
		k->hits++;
		return IG_E_OK;
	}
	if (s >= 0) {
		k->hits++;
		k->epoch[s] = c->epoch;
		xc__touch(k, (uint32_t)s);
		return IG_E_OK;
	}
	rc = xc__fill(c, l, e, which, eb);
	if (!rc)
		k->misses++;
	return rc;
}

/* The whole layer's experts into a ring buffer (kept there: a later pass
 * of the same layer finds them). */
static int xc__stage(struct xcache *c, uint32_t l, struct ig_errbuf *eb)
{
	struct xc_layer *L = &c->L[l];
	uint64_t off = 0;
	uint32_t r;
	int rc = IG_E_OK;

	for (r = 0; r < 2; r++)
		if (c->ring_layer[r] == (int64_t)l)
			break;
	if (r == 2) {
		uint64_t at[3] = {0, L->bytes[0] * c->m->experts,
		                  (L->bytes[0] + L->bytes[1]) * c->m->experts};

		r = c->ring_next++ % 2;
		c->ring_layer[r] = -1;
		/* each expert but the pinned ones (read from their slots) */
		for (uint32_t e = 0; e < c->m->experts && !rc; e++) {
			uint64_t key = (uint64_t)l * c->m->experts + e;

			if (c->pinned[key])
				continue;
			for (int i = 0; i < 3 && !rc; i++) {
				rc = xc__copy(c, c->ring[r] + at[i] + e * L->bytes[i],
				              c->hp[key * 3 + i], L->bytes[i], eb);
				off += L->bytes[i];
			}
		}
		if (rc)
			return rc;
		c->ring_layer[r] = l;
		c->staged_bytes += off;
	}
	c->staged_layers++;
	L->mode = XC_RING;
	L->ring = c->ring[r];
	return IG_E_OK;
}

/* A new pass (epoch): the distinct experts of ids[0..n) into c->list,
 * their number returned; *fits when those not pinned fit the slots of both
 * classes' orders (else the pass needs the ring). */
static uint32_t xc__distinct(struct xcache *c, uint32_t l, const uint32_t *ids, uint32_t n,
                             bool *fits)
{
	const struct xc_layer *L = &c->L[l];
	uint64_t base = (uint64_t)l * c->m->experts;
	uint32_t nd = 0, nu = 0;

	if (++c->epoch == 0) { /* wrapped: no slot may look held */
		for (int k = 0; k < MDESC_EXPERT_CLASSES; k++)
			memset(c->cls[k].epoch, 0, (size_t)c->cls[k].n_slots * sizeof(uint32_t));
		memset(c->seen, 0, (size_t)c->m->experts * sizeof(uint32_t));
		c->epoch = 1;
	}
	for (uint32_t i = 0; i < n; i++)
		if (c->seen[ids[i]] != c->epoch) {
			c->seen[ids[i]] = c->epoch;
			c->list[nd++] = ids[i];
			nu += !c->pinned[base + ids[i]];
		}
	*fits = nu <= c->cls[L->cls_gu].n_slots - c->cls[L->cls_gu].n_pinned &&
	        nu <= c->cls[L->cls_d].n_slots - c->cls[L->cls_d].n_pinned;
	return nd;
}

int xc_prepare(struct xcache *c, uint32_t l, const uint32_t *ids, uint32_t n, struct ig_errbuf *eb)
{
	struct xc_layer *L = &c->L[l];
	uint32_t nd;
	bool fits;
	int rc = IG_E_OK;

	for (uint32_t i = 0; i < n; i++) /* the calibration's counts */
		c->routed[(uint64_t)l * c->m->experts + ids[i]]++;
	if (!c->offloaded)
		return IG_E_OK;
	nd = xc__distinct(c, l, ids, n, &fits);
	if (!fits) {
		if (!c->ring[0])
			return ig_errf(
			    eb, IG_E_NOSPACE,
			    "expert cache: a pass routed %u experts of layer %u to classes of %u "
			    "and %u slots (%u and %u pinned), and there is no staging ring",
			    nd, l, c->cls[L->cls_gu].n_slots, c->cls[L->cls_d].n_slots,
			    c->cls[L->cls_gu].n_pinned, c->cls[L->cls_d].n_pinned);
		rc = xc__stage(c, l, eb);
	} else {
		L->mode = XC_SLOTS;
		for (uint32_t i = 0; i < nd && !rc; i++) {
			rc = xc__slot(c, l, c->list[i], 0, eb);
			if (!rc)
				rc = xc__slot(c, l, c->list[i], 1, eb);
		}
	}
	if (!rc)
		rc = xc__wait(c, eb);
	return rc;
}

/* Expert `key`'s projections in its slots (a slot pass, or a pinned one). */
static void xc__in_slots(const struct xcache *c, const struct xc_layer *L, uint64_t key,
                         struct be_weight w[3])
{
	const struct xc_class *gu = &c->cls[L->cls_gu], *dn = &c->cls[L->cls_d];
	const unsigned char *p = gu->pool + (uint64_t)c->map[0][key] * gu->record;

	w[0] = (struct be_weight){p, L->type[0]};
	w[1] = (struct be_weight){p + L->bytes[0], L->type[1]};
	w[2] = (struct be_weight){dn->pool + (uint64_t)c->map[1][key] * dn->record, L->type[2]};
}

/* The experts layer l will likely route to: the misses among them copied
 * now, not waited for (the layer's prepare waits for every copy before it,
 * FIFO), so that they land while the layer's token mixer computes. Only
 * when they all fit the order (a guess that would need the ring is
 * dropped); a guess never holds a slot past this call. */
void xc_prefetch(struct xcache *c, uint32_t l, const uint32_t *ids, uint32_t n)
{
	const struct xc_layer *L = &c->L[l];
	uint64_t base = (uint64_t)l * c->m->experts;
	struct ig_errbuf eb;
	uint32_t nd;
	bool fits;

	if (!c->offloaded)
		return;
	nd = xc__distinct(c, l, ids, n, &fits);
	if (!fits)
		return;
	for (uint32_t i = 0; i < nd; i++) {
		uint64_t key = base + c->list[i];

		if (c->pinned[key])
			continue;
		for (int which = 0; which < 2; which++) {
			struct xc_class *k = &c->cls[which ? L->cls_d : L->cls_gu];

			if (c->map[which][key] >= 0) { /* there: kept fresh */
				k->epoch[c->map[which][key]] = c->epoch;
				xc__touch(k, (uint32_t)c->map[which][key]);
			} else if (xc__fill(c, l, c->list[i], which, &eb) != IG_E_OK) {
				return; /* the stream failed: prepare reports it */
			} else {
				k->prefetched++;
			}
		}
	}
}

void xc_get(const struct xcache *c, uint32_t l, uint32_t e, struct be_weight w[3])
{
	const struct xc_layer *L = &c->L[l];
	uint64_t key = (uint64_t)l * c->m->experts + e;

	if (L->mode == XC_SLOTS || (L->mode == XC_RING && c->pinned[key])) {
		xc__in_slots(c, L, key, w);
		return;
	}
	if (L->mode == XC_RING) {
		uint64_t n0 = L->bytes[0] * c->m->experts, n1 = L->bytes[1] * c->m->experts;

		w[0] = (struct be_weight){L->ring + e * L->bytes[0], L->type[0]};
		w[1] = (struct be_weight){L->ring + n0 + e * L->bytes[1], L->type[1]};
		w[2] = (struct be_weight){L->ring + n0 + n1 + e * L->bytes[2], L->type[2]};
		return;
	}
	for (int i = 0; i < 3; i++)
		w[i] = (struct be_weight){L->src[i] + e * L->bytes[i], L->type[i]};
}

/* The classes of the offloaded load, in the order the plan counts them
 * (mfile.c's real classes: first met over the layers), checked against
 * the description's records; the pools carved from `cache`. */
static int xc__classes(struct xcache *c, struct be_region cache, struct ig_errbuf *eb)
{
	const struct mdesc *m = c->m;
	uint32_t gu_key[MDESC_EXPERT_WIDTHS], dn_key[MDESC_EXPERT_WIDTHS], n_gu = 0, n_dn = 0;
	uint64_t set = 0, off = 0, sets;

	for (uint32_t l = 0; l < m->layers; l++) {
		struct xc_layer *L = &c->L[l];
		uint32_t key = L->type[0] << 16 | L->type[1], i;

		for (i = 0; i < n_gu && gu_key[i] != key; i++)
			;
		if (i == n_gu && n_gu < MDESC_EXPERT_WIDTHS)
			gu_key[n_gu++] = key;
		L->cls_gu = i;
		for (i = 0; i < n_dn && dn_key[i] != L->type[2]; i++)
			;
		if (i == n_dn && n_dn < MDESC_EXPERT_WIDTHS)
			dn_key[n_dn++] = L->type[2];
		L->cls_d = MDESC_EXPERT_WIDTHS + i;
		if (L->cls_gu >= MDESC_EXPERT_WIDTHS || L->cls_d >= MDESC_EXPERT_CLASSES ||
		    xc__pad4k(L->bytes[0] + L->bytes[1]) != m->class_record_bytes[L->cls_gu] ||
		    xc__pad4k(L->bytes[2]) != m->class_record_bytes[L->cls_d])
			return ig_errf(eb, IG_E_INVAL,
			               "expert cache: layer %u's experts (gate+up %" PRIu64
			               " B, down %" PRIu64 " B) are not in the classes the plan "
			               "counted",
			               l, L->bytes[0] + L->bytes[1], L->bytes[2]);
	}
	for (int k = 0; k < MDESC_EXPERT_CLASSES; k++)
		set += m->class_record_bytes[k];
	sets = set ? cache.bytes / set : 0;
	if (!sets)
		return ig_errf(eb, IG_E_NOSPACE,
		               "the plan's expert_cache line gives %" PRIu64
		               " bytes; one slot of every class needs %" PRIu64,
		               cache.bytes, set);
	if (sets > INT32_MAX)
		sets = INT32_MAX;
	for (int k = 0; k < MDESC_EXPERT_CLASSES; k++) {
		struct xc_class *x = &c->cls[k];

		x->record = m->class_record_bytes[k];
		if (!x->record)
			continue;
		x->n_slots = (uint32_t)sets;
		x->pool = (unsigned char *)cache.base + off;
		off += sets * x->record;
		x->key = calloc(sets, sizeof(uint64_t));
		x->prev = malloc(sets * sizeof(uint32_t));
		x->next = malloc(sets * sizeof(uint32_t));
		x->epoch = calloc(sets, sizeof(uint32_t));
		if (!x->key || !x->prev || !x->next || !x->epoch)
			return ig_errf(eb, IG_E_NOMEM,
			               "expert cache: no memory for %" PRIu64 " slots", sets);
	}
	c->cache_bytes = off;
	return IG_E_OK;
}

/* Each class's order of use over its slots past the pinned ones, every
 * slot free, in index order from the head. */
static void xc__orders(struct xcache *c)
{
	for (int k = 0; k < MDESC_EXPERT_CLASSES; k++) {
		struct xc_class *x = &c->cls[k];

		x->head = x->tail = XC_NONE;
		for (uint32_t i = x->n_pinned; i < x->n_slots; i++) {
			x->prev[i] = i > x->n_pinned ? i - 1 : XC_NONE;
			x->next[i] = i + 1 < x->n_slots ? i + 1 : XC_NONE;
		}
		if (x->n_slots > x->n_pinned) {
			x->head = x->n_pinned;
			x->tail = x->n_slots - 1;
		}
	}
}

/* Which experts are pinned: the most routed first (the calibration's
 * counts; ties to the lower layer and id), each taking a slot of its two
 * classes, while `bytes` has room for its records and each class keeps
 * `keep` slots for the order (the experts of one decode step). Refused
 * when `bytes` is more than the cache can pin that way at most (as the
 * plan computes it: the slots past `keep` of the fullest class, each the
 * smallest expert). */
static int xc__pin(struct xcache *c, uint64_t bytes, const uint64_t *counts, uint32_t keep,
                   struct ig_errbuf *eb)
{
	const struct mdesc *m = c->m;
	uint64_t nkeys = (uint64_t)m->layers * m->experts, sets = 0, most, left = bytes;
	uint64_t *order;

	for (int k = 0; k < MDESC_EXPERT_CLASSES; k++)
		sets = c->cls[k].n_slots > sets ? c->cls[k].n_slots : sets;
	most = sets > keep ? (sets - keep) * mdesc_min_expert_bytes(m) : 0;
	if (!bytes)
		return IG_E_OK;
	if (bytes > most)
		return ig_errf(eb, IG_E_INVAL,
		               "--vram-pinned-expert-bytes %" PRIu64 ": this expert cache pins at "
		               "most %" PRIu64 " bytes (%" PRIu64 " slots a class, %u kept for "
		               "the experts of one decode step)",
		               bytes, most, sets, keep);
	if (!counts)
		return ig_errf(eb, IG_E_INVAL,
		               "--vram-pinned-expert-bytes %" PRIu64 " needs the experts' counts "
		               "(which are hottest): run ignis-calibrate on the model, which "
		               "writes them beside it",
		               bytes);
	order = malloc(nkeys * sizeof(uint64_t));
	if (!order)
		return ig_errf(eb, IG_E_NOMEM, "no memory to rank %" PRIu64 " experts", nkeys);
	for (uint64_t i = 0; i < nkeys; i++)
		order[i] = i;
	/* by count, descending; ties to the lower key (insertion order kept) */
	for (uint64_t i = 1; i < nkeys; i++) {
		uint64_t v = order[i], j = i;

		while (j > 0 && counts[order[j - 1]] < counts[v]) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = v;
	}
	for (uint64_t i = 0; i < nkeys; i++) {
		uint64_t key = order[i];
		const struct xc_layer *L = &c->L[key / m->experts];
		struct xc_class *gu = &c->cls[L->cls_gu], *dn = &c->cls[L->cls_d];
		uint64_t need = gu->record + dn->record;

		if (need > left || gu->n_pinned + keep >= gu->n_slots ||
		    dn->n_pinned + keep >= dn->n_slots)
			continue;
		c->map[0][key] = (int32_t)gu->n_pinned;
		gu->key[gu->n_pinned++] = key + 1;
		c->map[1][key] = (int32_t)dn->n_pinned;
		dn->key[dn->n_pinned++] = key + 1;
		c->pinned[key] = true;
		c->pinned_bytes += need;
		left -= need;
	}
	free(order);
	return IG_E_OK;
}

int xc_create(struct xcache **out, struct be *be, struct mfile *f, struct be_region cache,
              struct be_region staging, bool offloaded, const struct xc_pins *pins,
              struct ig_errbuf *eb)
{
	const struct mdesc *m = &f->desc;
	struct xcache *c = calloc(1, sizeof(*c));
	uint64_t total = 0, heaviest = 0, off = 0, nkeys = (uint64_t)m->layers * m->experts;
	char nm[64];
	int rc = IG_E_OK;

	*out = NULL;
	if (!c)
		return ig_errf(eb, IG_E_NOMEM, "no memory for the expert cache");
	c->be = be;
	c->m = m;
	c->offloaded = offloaded;
	c->ring_layer[0] = c->ring_layer[1] = -1;
	c->L = calloc(m->layers, sizeof(*c->L));
	c->routed = calloc(nkeys ? nkeys : 1, sizeof(uint64_t));
	c->pinned = calloc(nkeys ? nkeys : 1, sizeof(bool));
	if (!c->L || !c->routed || !c->pinned) {
		xc_destroy(c);
		return ig_errf(eb, IG_E_NOMEM, "no memory for the expert cache");
	}
	for (uint32_t l = 0; l < m->layers && !rc; l++) {
		struct xc_layer *L = &c->L[l];
		uint64_t layer = 0;

		for (int i = 0; i < 3; i++) {
			const struct gguf_tensor *t;

			mdesc_tensor_name(m, (int)l, xc_names[i], nm, sizeof nm);
			t = gguf_find_tensor(&f->g, nm);
			if (!t || t->n_bytes % m->experts) {
				rc = ig_errf(eb, IG_E_INVAL, "expert cache: tensor '%s' %s", nm,
				             t ? "is not whole experts" : "is missing");
				break;
			}
			L->type[i] = t->type;
			L->bytes[i] = t->n_bytes / m->experts;
			L->src[i] = t->data;
			layer += t->n_bytes;
		}
		total += layer;
		heaviest = layer > heaviest ? layer : heaviest;
	}
	if (!rc && !offloaded && cache.bytes < total)
		rc = ig_errf(eb, IG_E_NOSPACE,
		             "the plan's expert_cache line gives %" PRIu64
		             " bytes; a resident load's experts are %" PRIu64,
		             cache.bytes, total);
	if (rc) {
		xc_destroy(c);
		return rc;
	}
	if (!offloaded) {
		/* every expert on the device, read there */
		for (uint32_t l = 0; l < m->layers && !rc; l++)
			for (int i = 0; i < 3 && !rc; i++) {
				struct xc_layer *L = &c->L[l];
				uint64_t n = L->bytes[i] * m->experts;
				unsigned char *dst = (unsigned char *)cache.base + off;

				rc = be->ops->copy_h2d(be, dst, L->src[i], n, eb);
				L->src[i] = dst;
				off += n;
			}
		c->cache_bytes = off;
	} else {
		/* every expert not pinned in one host allocation of ours, the cache
		 * in front, the pinned ones in their slots for the whole load */
		c->map[0] = malloc(nkeys * sizeof(int32_t));
		c->map[1] = malloc(nkeys * sizeof(int32_t));
		c->seen = calloc(m->experts, sizeof(uint32_t));
		c->list = calloc(m->experts, sizeof(uint32_t));
		c->hp = calloc(nkeys * 3, sizeof(*c->hp));
		if (!c->map[0] || !c->map[1] || !c->seen || !c->list || !c->hp)
			rc = ig_errf(eb, IG_E_NOMEM, "no memory for the expert cache's tables");
		for (uint64_t k = 0; !rc && k < nkeys; k++)
			c->map[0][k] = c->map[1][k] = -1;
		if (!rc)
			rc = xc__classes(c, cache, eb);
		if (!rc)
			rc = xc__pin(c, pins ? pins->bytes : 0, pins ? pins->counts : NULL,
			             pins ? pins->keep : 0, eb);
		if (!rc) {
			uint64_t host = 0;
			void *hostp = NULL;

			for (uint64_t k = 0; k < nkeys; k++)
				if (!c->pinned[k])
					for (int i = 0; i < 3; i++)
						host += c->L[k / m->experts].bytes[i];
			/* the table's host memory: pinned where the device has it, so
			 * that a miss's copy runs at the link's full speed */
			rc = be->ops->host_alloc(be, host ? host : 1, &hostp, eb);
			if (!rc) {
				c->host = hostp;
				c->host_bytes = host;
			} else {
				ig_errprefix(eb, "host memory for the experts (%" PRIu64 " bytes)",
				             host);
			}
		}
		for (uint64_t k = 0; !rc && k < nkeys; k++) {
			const struct xc_layer *L = &c->L[k / m->experts];
			uint64_t e = k % m->experts;

			for (int i = 0; i < 3 && !rc; i++) {
				const unsigned char *src = L->src[i] + e * L->bytes[i];

				if (!c->pinned[k]) {
					memcpy(c->host + off, src, L->bytes[i]);
					c->hp[k * 3 + i] = c->host + off;
					off += L->bytes[i];
					continue;
				}
				/* pinned: straight from the file into its slot */
				{
					const struct xc_class *x =
					    &c->cls[i < 2 ? L->cls_gu : L->cls_d];
					unsigned char *dst =
					    x->pool +
					    (uint64_t)c->map[i < 2 ? 0 : 1][k] * x->record +
					    (i == 1 ? L->bytes[0] : 0);

					rc = be->ops->copy_h2d(be, dst, src, L->bytes[i], eb);
				}
			}
		}
		if (!rc)
			xc__orders(c);
		/* the staging ring: two layers' experts, when the region has them */
		if (!rc && staging.base && staging.bytes >= 2 * heaviest && heaviest) {
			c->ring_bytes = heaviest;
			c->ring[0] = staging.base;
			c->ring[1] = (unsigned char *)staging.base + heaviest;
		}
	}
	if (rc) {
		xc_destroy(c);
		return rc;
	}
	*out = c;
	return IG_E_OK;
}

void xc_destroy(struct xcache *c)
{
	if (!c)
		return;
	if (c->be && c->be->ops->xfer_wait_all) {
		struct ig_errbuf eb;

		(void)c->be->ops->xfer_wait_all(c->be, &eb);
	}
	for (int k = 0; k < MDESC_EXPERT_CLASSES; k++) {
		free(c->cls[k].key);
		free(c->cls[k].prev);
		free(c->cls[k].next);
		free(c->cls[k].epoch);
	}
	free(c->map[0]);
	free(c->map[1]);
	free(c->seen);
	free(c->list);
	if (c->host)
		c->be->ops->host_free(c->be, c->host, c->host_bytes ? c->host_bytes : 1);
	free(c->hp);
	free(c->pinned);
	free(c->routed);
	free(c->L);
	free(c);
}

/* A type's name in lower case ("bf16", "q4_k"). */
static void xc__type(uint32_t t, char *out, size_t cap)
{
	const char *n = gguf_tensor_type_name(t);
	size_t i = 0;

	for (; n[i] && i + 1 < cap; i++)
		out[i] = (char)(n[i] >= 'A' && n[i] <= 'Z' ? n[i] - 'A' + 'a' : n[i]);
	out[i] = '\0';
}

/* "gate_up:<type>" (or "<gate type>+<up type>" when they differ), or
 * "down:<type>": from the first layer in class k. */
static void xc__class_name(const struct xcache *c, int k, char *out, size_t cap)
{
	char a[12], b[12];

	for (uint32_t l = 0; l < c->m->layers; l++) {
		const struct xc_layer *L = &c->L[l];

		if (k < MDESC_EXPERT_WIDTHS && L->cls_gu == (uint32_t)k) {
			xc__type(L->type[0], a, sizeof a);
			xc__type(L->type[1], b, sizeof b);
			if (strcmp(a, b))
				snprintf(out, cap, "gate_up:%s+%s", a, b);
			else
				snprintf(out, cap, "gate_up:%s", a);
			return;
		}
		if (k >= MDESC_EXPERT_WIDTHS && L->cls_d == (uint32_t)k) {
			xc__type(L->type[2], a, sizeof a);
			snprintf(out, cap, "down:%s", a);
			return;
		}
	}
	snprintf(out, cap, "class%d", k);
}

void xc_stats(const struct xcache *c, struct be_expert_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->cached = true;
	st->offloaded = c->offloaded;
	st->cache_bytes = c->cache_bytes;
	st->host_bytes = c->host_bytes;
	st->pinned_bytes = c->pinned_bytes;
	for (int k = 0; k < MDESC_EXPERT_CLASSES; k++) {
		const struct xc_class *x = &c->cls[k];

		st->cls[k] = (struct be_expert_class){.record = x->record,
		                                      .slots = x->n_slots,
		                                      .hits = x->hits,
		                                      .misses = x->misses,
		                                      .bytes = x->bytes,
		                                      .evictions = x->evictions,
		                                      .prefetches = x->prefetched};
		if (x->n_slots)
			xc__class_name(c, k, st->cls[k].name, sizeof(st->cls[k].name));
	}
	st->staged_layers = c->staged_layers;
	st->staged_bytes = c->staged_bytes;
}

uint64_t xc_counts(const struct xcache *c, uint64_t *out, uint64_t n)
{
	uint64_t nkeys = (uint64_t)c->m->layers * c->m->experts;

	if (out)
		memcpy(out, c->routed, (size_t)(n < nkeys ? n : nkeys) * sizeof(uint64_t));
	return nkeys;
}
