/*
 * reuse.c - retained prompt checkpoints (engine_int.h; docs/adr/0037).
 *
 * A checkpoint is what a request's prompt left on the device once
 * prefilled: the sequence's fixed-size state (copied into a device retained
 * slot), its KV (the full pages shared, counted in the pool, the partial
 * last page copied into a page of the checkpoint's own) and the logits of
 * the prompt's last token (host memory). A later request whose prompt
 * begins with a checkpoint's tokens starts from it: the shared pages listed
 * first in its own table, a copy of the partial page, the state copied back,
 * its position there; it prefills only the rest. A prompt equal to the
 * checkpoint's takes its first token from the stored logits. Nothing of the
 * model's arithmetic differs from prefilling the whole prompt with a chunk
 * boundary at the checkpoint (a token's arithmetic does not depend on the
 * chunk it is in: backend.h's exactness contract), so the tokens are the same.
 *
 * Shared prefixes: a request whose prompt parts from a checkpoint's tokens
 * after at least ENGRU_MIN_PREFIX of them (two prompts with a common start:
 * a system prompt, a conversation that forks) ends a prefill chunk there,
 * and what it has then is retained too, as a shared prefix: the next
 * request that begins with those tokens starts from it, whatever follows.
 * So a prefix is reusable at the depth where prompts part, not only at
 * page boundaries or prompt ends.
 *
 * What is retained follows from two rules: a shared prefix wherever a
 * prompt parts from a prompt the engine knows, whenever there are slots;
 * a checkpoint at a prompt's end, unless checkpoints are off
 * (cfg.prefixes_only: --reuse-prompt off with slots named). A prompt the
 * engine knows is a retained one, or with checkpoints off a prompt's end
 * remembered by its tokens alone (`ends`: no state, no page, no slot), so
 * that prompts that part still share their prefix, and a prompt repeated
 * or extended takes only what it shares with another (docs/adr/0037,
 * "Reuse off with slots named").
 *
 * Twins (docs/adr/0059): a request submitted while another with the same
 * prompt is still waiting or prefilling (OpenAI's n choices, or clients
 * sending one prompt at once) is held out of the plan until that prompt
 * ends, and is then matched again: it claims the checkpoint captured
 * there, prefilling nothing, its first token from the kept logits. A host
 * capture under way holds it until published. With no slots, or
 * checkpoints off, nothing is held (nothing would be captured).
 *
 * Giving up, when a capture finds no free slot or an admission lacks pages:
 * checkpoints before shared prefixes, agent before interactive, then the
 * least recently used; for a capture never one a waiting request counts on,
 * for room never the one the request lacking pages counts on (a later
 * request's claim does not hold room: the first in line would wait for it,
 * and it behind the first). A capture that finds nothing to give up is
 * skipped and counted.
 *
 * Host slots (docs/adr/0038): with every device slot taken, a checkpoint's
 * state goes to a retained host slot of the kvstore daemon's instead; its
 * pages stay in the pool as a device checkpoint's do. The state is copied
 * out of the device at once (into `stage`: the sequence runs on), then
 * kv_slot_capture gives a slot, the image goes into it with its checksum
 * taken in the same pass, and kv_slot_publish makes it held: only then is
 * it claimed. One capture is under way at a time; another finding no
 * device slot meanwhile is skipped (host_busy). A claim copies the image
 * out of the arena checking its checksum, then checks that the slot still
 * holds that generation (the daemon may have given it up): a failed check
 * gives the checkpoint up and the request prefills its whole prompt. The
 * daemon is told of each claim (kv_slot_claim: its LRU and the interactive
 * TTL), and a slot it gave up or lost takes the checkpoint with it.
 */
#include "engine_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "kvclient.h"
#include "kvram/kvcopy.h"
#include <xxhash.h>

/* A shared prefix shorter than this is not worth a slot. */
#define ENGRU_MIN_PREFIX 64u

/* The host slots' client, each round: a reply taken, the next request sent. */
static void engru__host_turn(struct eng *e);

static bool engru__paged(const struct eng *e)
{
	return e->d->m->full_layers > 0;
}

static void *engru__slot(const struct eng *e, uint32_t i)
{
	return (unsigned char *)e->cfg.retained.base + (uint64_t)i * e->cfg.retained_slot_bytes;
}

/* Pages of a checkpoint of n tokens a claimant shares: the full ones. */
static uint32_t engru__shared(const struct eng *e, uint32_t n)
{
	return engru__paged(e) ? n / MDESC_PAGE_TOKENS : 0;
}

static const char *engru__tier(const struct eng_ckpt *c)
{
	return c->host ? "host" : "device";
}

int engru__init(struct eng *e, struct ig_errbuf *eb)
{
	uint32_t dev = e->cfg.retained_device, host = e->cfg.kv_slots ? e->cfg.retained_host : 0;
	struct eng_host *h = &e->hst;

	h->cap = -1;
	if (!dev && !host)
		return IG_E_OK;
	if (!e->be->ops->copy_d2d)
		return ig_errf(eb, IG_E_INVAL,
		               "engine: the %s backend cannot copy inside the device: no prompt "
		               "reuse on it (--reuse-retained-device 0 --reuse-retained-host 0)",
		               e->be->ops->name);
	if (!e->d->state_bytes) {
		/* A model with no fixed-size state (every layer full attention:
		 * Qwen3's dense layout): a checkpoint is its pages, in the pool,
		 * and its logits, in host memory; no slot of either tier holds
		 * anything of it. Its host slots are entries like the device
		 * ones, which copy no state: nothing to send the daemon, nothing
		 * a restart of it could lose. (Dropping them instead left such a
		 * model with no reuse at all by default, where host slots are the
		 * only ones.) */
		dev += host;
		host = 0;
	} else if (dev && (e->cfg.retained_slot_bytes < e->d->state_bytes ||
	                   e->cfg.retained.bytes / dev < e->cfg.retained_slot_bytes ||
	                   !e->cfg.retained.base))
		return ig_errf(eb, IG_E_INVAL,
		               "engine: %u retained slots of %llu bytes in a region of %llu; a "
		               "sequence's state is %llu bytes",
		               dev, (unsigned long long)e->cfg.retained_slot_bytes,
		               (unsigned long long)e->cfg.retained.bytes,
		               (unsigned long long)e->d->state_bytes);
	e->ck = calloc(dev + host, sizeof(*e->ck));
	if (!e->ck)
		return ig_errf(eb, IG_E_NOMEM, "engine: no memory for %u checkpoints", dev + host);
	e->n_ck = dev + host;
	if (e->cfg.prefixes_only) {
		e->ends = calloc(dev + host, sizeof(*e->ends));
		if (!e->ends)
			return ig_errf(eb, IG_E_NOMEM, "engine: no memory for %u prompts' ends",
			               dev + host);
		e->n_ends = dev + host;
	}
	e->n_ck_dev = dev;
	for (uint32_t i = dev; i < dev + host; i++)
		e->ck[i].host = true;
	if (!host)
		return IG_E_OK;
	h->c = e->cfg.kv_slots;
	/* The state crosses between these and the device at every take and
	 * give-back: the table's host memory (pinned where the device has it) */
	if (e->be->ops->host_alloc(e->be, e->d->state_bytes, &h->stage, eb) ||
	    e->be->ops->host_alloc(e->be, e->d->state_bytes, &h->claim, eb)) {
		ig_errprefix(eb, "engine: the host slots' staging (2 x %llu bytes)",
		             (unsigned long long)e->d->state_bytes);
		return eb->code ? eb->code : IG_E_NOMEM;
	}
	h->cap_drops = 2 * host + 16;
	h->drops = calloc(h->cap_drops, sizeof(*h->drops));
	h->cap_touch = 2 * host + 16;
	h->touch = calloc(h->cap_touch, sizeof(*h->touch));
	if (!h->drops || !h->touch)
		return ig_errf(eb, IG_E_NOMEM, "engine: no memory for the host slots' books");
	return IG_E_OK;
}

/* A held host slot the daemon should free (once, when the client is free). */
static void engru__queue_slot_drop(struct eng *e, uint32_t slot, uint64_t gen)
{
	struct eng_host *h = &e->hst;

	for (uint32_t k = 0; k < h->n_drops; k++)
		if (h->drops[k].slot == slot && h->drops[k].gen == gen)
			return;
	/* past the room: the daemon gives it up in its own order later */
	if (h->n_drops < h->cap_drops)
		h->drops[h->n_drops++] = (struct eng_hslot_ref){slot, gen};
}

/* Give up entry i: its pages back to the pool; a host entry's slot freed
 * by the daemon too, unless `tier_gone` (the daemon gave it up or lost it
 * already). A capture under way notices the entry's new gen. */
static void engru__drop(struct eng *e, uint32_t i, enum eng_event_kind kind, const char *why)
{
	struct eng_ckpt *c = &e->ck[i];
	bool tier_gone = why && !strcmp(why, "tier");

	/* a host checkpoint not yet held is no one's to give up: its capture
	 * simply ends (the event says given_up only for one that was held) */
	if (!c->host || c->hs == CKH_HELD)
		eng__event(e, &(struct eng_event){.kind = kind,
		                                  .cls = (int)c->cls,
		                                  .pages = c->kv.n_pages,
		                                  .why = why,
		                                  .tier = engru__tier(c),
		                                  .tokens = c->n,
		                                  .slot = c->host ? c->hslot : i,
		                                  .prefix = c->kind == ENG_CK_PREFIX});
	if (c->host) {
		/* held, or being published (the drop goes after the publish) */
		if ((c->hs == CKH_HELD || c->hs == CKH_PUBLISH) && !tier_gone)
			engru__queue_slot_drop(e, c->hslot, c->hgen);
		if (e->hst.cap == (int32_t)i && c->hs == CKH_STAGED)
			e->hst.cap = -1; /* nothing sent yet: the stage is free */
		c->hs = CKH_NONE;
	}
	kvpool_free(e->kv, &c->kv);
	free(c->tokens);
	c->tokens = NULL;
	c->n = 0;
	c->used = false;
	c->gen++;
}

void engru__release(struct eng *e)
{
	for (uint32_t i = 0; i < e->n_ck; i++) {
		kvpool_free(e->kv, &e->ck[i].kv);
		free(e->ck[i].tokens);
		free(e->ck[i].logits);
	}
	free(e->ck);
	e->ck = NULL;
	e->n_ck = e->n_ck_dev = 0;
	for (uint32_t i = 0; i < e->n_ends; i++)
		free(e->ends[i].tokens);
	free(e->ends);
	e->ends = NULL;
	e->n_ends = 0;
	if (e->hst.stage)
		e->be->ops->host_free(e->be, e->hst.stage, e->d->state_bytes);
	if (e->hst.claim)
		e->be->ops->host_free(e->be, e->hst.claim, e->d->state_bytes);
	free(e->hst.drops);
	free(e->hst.touch);
	memset(&e->hst, 0, sizeof(e->hst));
	e->hst.cap = -1;
}

/* Does held request s wait still? Until its twin has its first token (its
 * prompt's end, where the checkpoint is captured) or is gone, and while a
 * host capture is under way (the twin's, most likely: claimable once
 * published). */
static bool engru__held(const struct eng *e, const struct eng_seq *s)
{
	const struct eng_seq *t = eng__find(e, s->twin);

	if (!t)
		return false;
	/* a twin that ended (a short answer) may have left its host capture
	 * still on its way to the daemon: held until it lands or fails */
	if (t->sch.phase == SCHED_DONE)
		return e->hst.cap >= 0;
	return !t->n_out || e->hst.cap >= 0;
}

static bool engru__twins_due(const struct eng *e)
{
	for (uint32_t k = 0; k < e->n_slots; k++)
		if (e->seqs[k].used && e->seqs[k].twin && !engru__held(e, &e->seqs[k]))
			return true;
	return false;
}

bool engru__busy(const struct eng *e)
{
	const struct eng_host *h = &e->hst;

	if (e->n_ck && engru__twins_due(e))
		return true; /* a held request to let go: a round plans it */
	return h->c && (h->waiting || h->n_drops || h->n_touch || h->cap >= 0);
}

/* Can a request start from entry i now? A host entry once held. */
static bool engru__ready(const struct eng_ckpt *c)
{
	return c->used && (!c->host || c->hs == CKH_HELD);
}

/* The key of tokens[0..n) in host slots: under the engine's reuse_ns (the
 * model file, KV format, tokenizer), never 0. */
static uint64_t engru__key(const struct eng *e, const uint32_t *tokens, uint32_t n)
{
	uint64_t k = XXH3_64bits_withSeed(tokens, (size_t)n * sizeof(uint32_t), e->cfg.reuse_ns);

	return k ? k : 1;
}

/* Tokens a and b have in common from the start, at most n. */
static uint32_t engru__common(const uint32_t *a, const uint32_t *b, uint32_t n)
{
	uint32_t i = 0;

	while (i < n && a[i] == b[i])
		i++;
	return i;
}

/* Where s's prompt parts from a known prompt t[0..n): after k tokens both
 * go on differently, k at least ENGRU_MIN_PREFIX. 0 when it does not. */
static uint32_t engru__parts(const uint32_t *t, uint32_t n, const struct eng_seq *s)
{
	uint32_t k = engru__common(t, s->prompt, n < s->n_prompt ? n : s->n_prompt);

	return k < n && k < s->n_prompt && k >= ENGRU_MIN_PREFIX ? k : 0;
}

void engru__match(struct eng *e, struct eng_seq *s)
{
	int32_t best = -1;
	uint32_t split = 0, k;

	s->ck = -1;
	s->sch.split = 0;
	if (!e->n_ck)
		return;
	/* where this prompt parts from a known one (retained, or a prompt's
	 * end remembered), past what it can claim: a shared prefix to retain
	 * on the way */
	for (uint32_t i = 0; i < e->n_ck; i++)
		if (e->ck[i].used && (k = engru__parts(e->ck[i].tokens, e->ck[i].n, s)) > split)
			split = k;
	for (uint32_t i = 0; i < e->n_ends; i++)
		if ((k = engru__parts(e->ends[i].tokens, e->ends[i].n, s)) > split)
			split = k;
	/* an echo request computes its whole prompt's logits: it claims none
	 * (docs/adr/0063) */
	for (uint32_t i = 0; !s->echo && i < e->n_ck; i++) {
		const struct eng_ckpt *c = &e->ck[i];

		if (engru__ready(c) && c->n <= s->n_prompt && (best < 0 || c->n > e->ck[best].n) &&
		    !memcmp(c->tokens, s->prompt, (size_t)c->n * sizeof(uint32_t)))
			best = (int32_t)i;
	}
	if (split && (best < 0 || split > e->ck[best].n))
		s->sch.split = split;
	if (best < 0)
		return; /* a miss, counted if it is still one at admission */
	s->ck = best;
	s->ck_gen = e->ck[best].gen;
	s->sch.pages = s->pages_all - engru__shared(e, e->ck[best].n);
	s->sch.prefilled = e->ck[best].n;
}

void engru__hold(struct eng *e, struct eng_seq *s)
{
	if (!e->n_ck || e->cfg.prefixes_only || s->echo)
		return; /* nothing would be captured at its twin's end; or it claims
		           nothing (an echo request) */
	if (s->ck >= 0 && e->ck[s->ck].n == s->n_prompt)
		return; /* its whole prompt is retained already */
	for (uint32_t k = 0; k < e->n_slots; k++) {
		const struct eng_seq *t = &e->seqs[k];

		if (t == s || !t->used || t->twin || t->n_out || t->sch.phase == SCHED_DONE ||
		    t->n_prompt != s->n_prompt ||
		    memcmp(t->prompt, s->prompt, (size_t)s->n_prompt * sizeof(uint32_t)))
			continue;
		s->twin = t->sch.id;
		s->ck = -1; /* matched again when let go */
		s->sch.split = 0;
		s->sch.pages = s->pages_all;
		s->sch.prefilled = 0;
		return;
	}
}

/* Held requests whose twin's prompt ended (or went) are let go: matched
 * again, the twin's checkpoint the longest match when it was captured.
 * One whose twin went before its prompt ended (cancelled), or whose
 * checkpoint was not captured, prefills, and those let go after it are
 * held for it in turn. */
static void engru__let_go(struct eng *e)
{
	for (uint32_t k = 0; k < e->n_slots; k++) {
		struct eng_seq *s = &e->seqs[k];

		if (s->used && s->twin && !engru__held(e, s)) {
			s->twin = 0;
			engru__match(e, s);
			engru__hold(e, s);
		}
	}
}

/* Does a waiting request count on checkpoint i? */
static bool engru__counted_on(const struct eng *e, uint32_t i)
{
	for (uint32_t k = 0; k < e->n_slots; k++) {
		const struct eng_seq *s = &e->seqs[k];

		if (s->used && s->sch.phase == SCHED_WAITING && s->ck == (int32_t)i &&
		    s->ck_gen == e->ck[i].gen)
			return true;
	}
	return false;
}

/* The class a checkpoint ranks as when one is given up: an interactive one
 * idle in a host slot past --reuse-retained-interactive-ttl as an agent's
 * (as the daemon ranks its slots). */
static enum sched_class engru__rank(const struct eng *e, const struct eng_ckpt *c, uint64_t now)
{
	uint64_t ttl = e->cfg.interactive_ttl_s;

	if (c->host && c->cls == SCHED_INTERACTIVE && ttl && now - c->used_us > ttl * 1000000u)
		return SCHED_AGENT;
	return c->cls;
}

/* Which entries a give-up looks at. */
enum engru_among { AMONG_ALL, AMONG_DEVICE, AMONG_HOST };

/* The checkpoint to give up first (checkpoints before prefixes, agent before
 * interactive, then the least recently used), `spare` excepted, among the
 * entries `among` names; for a capture (`for_room` false) those waiting
 * requests count on and host ones not yet held are kept too; for room
 * only one whose giving up frees a page. -1 when none. */
static int32_t engru__victim(const struct eng *e, int32_t spare, bool for_room,
                             enum engru_among among)
{
	uint64_t now = clk_mono_us();
	enum sched_class bcls = SCHED_INTERACTIVE;
	int32_t best = -1;

	for (uint32_t i = 0; i < e->n_ck; i++) {
		const struct eng_ckpt *c = &e->ck[i];
		const struct eng_ckpt *b = best >= 0 ? &e->ck[best] : NULL;
		enum sched_class cls;

		if (!c->used || (int32_t)i == spare || (among == AMONG_DEVICE && c->host) ||
		    (among == AMONG_HOST && !c->host) ||
		    (for_room && !kvpool_private(e->kv, &c->kv)) ||
		    (!for_room && c->host && c->hs != CKH_HELD))
			continue;
		cls = engru__rank(e, c, now);
		/* checkpoints before prefixes, agent before interactive, then LRU */
		if (b && (c->kind != b->kind ? c->kind != ENG_CK_CHECKPOINT
		          : cls != bcls      ? cls != SCHED_AGENT
		                             : c->used_at >= b->used_at))
			continue;
		/* room is never refused for a later request's claim: the first in
		 * line would wait for it, and it behind the first */
		if (!for_room && engru__counted_on(e, i))
			continue;
		best = (int32_t)i;
		bcls = cls;
	}
	return best;
}

/* A waiting request's claim went: counted once, the whole prompt again. */
static void engru__lose_claim(struct eng *e, struct eng_seq *s)
{
	e->st.reuse_misses_given_up++;
	s->ck_lost = true;
	s->ck = -1;
	s->sch.pages = s->pages_all;
	s->sch.prefilled = 0;
}

/* Claims whose checkpoint went, or is not claimable (a host one whose
 * capture failed): the whole prompt again. */
static void engru__validate(struct eng *e)
{
	for (uint32_t k = 0; k < e->n_slots; k++) {
		struct eng_seq *s = &e->seqs[k];

		if (!s->used || s->sch.phase != SCHED_WAITING || s->ck < 0)
			continue;
		if (!engru__ready(&e->ck[s->ck]) || e->ck[s->ck].gen != s->ck_gen)
			engru__lose_claim(e, s);
	}
}

/* A checkpoint became claimable (a host capture was published): the
 * waiting requests with no claim, and nothing generated, look again. */
static void engru__rematch(struct eng *e)
{
	e->hst.rematch = false;
	for (uint32_t k = 0; k < e->n_slots; k++) {
		struct eng_seq *s = &e->seqs[k];

		if (s->used && s->sch.phase == SCHED_WAITING && s->ck < 0 && !s->n_out &&
		    s->sch.prefilled == 0 && !s->twin)
			engru__match(e, s);
	}
}

void engru__before_plan(struct eng *e)
{
	struct eng_seq *first = NULL;

	if (!e->n_ck)
		return;
	engru__host_turn(e);
	engru__let_go(e);
	engru__validate(e);
	if (e->hst.rematch)
		engru__rematch(e);
	/* room: the first in line (waiting or moved) that lacks pages has the
	 * checkpoints given up before any live sequence moves for it */
	for (uint32_t k = 0; k < e->n_slots; k++) {
		struct eng_seq *s = &e->seqs[k];

		if (s->used && !s->twin &&
		    (s->sch.phase == SCHED_WAITING || s->sch.phase == SCHED_MOVED) &&
		    (!first || sched_outranks(&s->sch, &first->sch)))
			first = s;
	}
	while (first && first->sch.pages > e->kv->n_free) {
		int32_t spare = first->sch.phase == SCHED_WAITING ? first->ck : -1;
		int32_t v = engru__victim(e, spare, true, AMONG_ALL);

		if (v < 0)
			break;
		e->st.reuse_given_up_room++;
		engru__drop(e, (uint32_t)v, ENG_EV_REUSE_GIVEN_UP, "room");
	}
	/* a claimant's pages, for the planner, are what moving it would free:
	 * those it shares with a checkpoint still there do not count (and count
	 * again once that checkpoint is given up) */
	for (uint32_t k = 0; k < e->n_slots; k++) {
		struct eng_seq *s = &e->seqs[k];

		if (s->used && s->cached && s->ms.kv.table &&
		    (s->sch.phase == SCHED_PREFILL || s->sch.phase == SCHED_READY ||
		     s->sch.phase == SCHED_DECODE))
			s->sch.pages = kvpool_private(e->kv, &s->ms.kv);
	}
	engru__validate(e); /* the claims of those given up for room */
}

/* A host checkpoint's image, copied out of its slot into the claim buffer:
 * checked against the checksum it was published with, then the slot's
 * record read again (still held, same generation: a capture that took the
 * slot meanwhile shows here). False when either fails. */
static bool engru__host_fetch(struct eng *e, const struct eng_ckpt *c)
{
	struct kvc_arena a = kvc_arena(e->hst.c);
	struct arena_slot_info now;
	struct ig_errbuf eb;
	uint64_t got, n = e->d->state_bytes;

	if (!a.base || c->hoff > a.bytes || a.bytes - c->hoff < n)
		return false;
	if (!kvcopy_check(e->hst.claim, (const unsigned char *)a.base + c->hoff, n, c->hsum, &got))
		return false;
	return kvc_slot_now(e->hst.c, c->hslot, &now, &eb) == IG_E_OK &&
	       now.state == ARENA_SLOT_HELD && now.gen == c->hgen && now.sum == c->hsum;
}

void engru__admitted_whole(struct eng *e, const struct eng_seq *s)
{
	/* no checkpoint matched: a miss, once (not a replay's second admission,
	 * not one whose claim went: counted as given up) */
	if (e->n_ck && !s->n_out && !s->ck_lost)
		e->st.reuse_misses++;
}

/* Tell the daemon a host slot was claimed (its LRU and TTL count uses). */
static void engru__queue_touch(struct eng *e, uint64_t key)
{
	struct eng_host *h = &e->hst;

	for (uint32_t k = 0; k < h->n_touch; k++)
		if (h->touch[k] == key)
			return;
	if (h->n_touch < h->cap_touch)
		h->touch[h->n_touch++] = key;
}

int engru__admit(struct eng *e, struct eng_seq *s, const float **first, bool *admitted,
                 struct ig_errbuf *eb)
{
	uint32_t i = (uint32_t)s->ck;
	struct eng_ckpt *c = &e->ck[i];
	uint32_t full = engru__shared(e, c->n);
	int rc;

	*first = NULL;
	*admitted = false;
	/* gone since the plan (another admission of this round found its host
	 * image bad): planned again next round with its whole prompt */
	if (!engru__ready(c) || c->gen != s->ck_gen) {
		engru__lose_claim(e, s);
		return IG_E_OK;
	}
	if (c->host && !engru__host_fetch(e, c)) {
		/* its image is not what was published (given up by the daemon, a
		 * new arena after a restart, a changed byte): the checkpoint goes,
		 * its slot freed whatever it holds (kv_slot_drop checks the
		 * generation), and this request plans again with its whole prompt */
		e->st.reuse_host_claim_fails++;
		e->st.reuse_given_up_tier++;
		engru__queue_slot_drop(e, c->hslot, c->hgen);
		engru__drop(e, i, ENG_EV_REUSE_GIVEN_UP, "tier");
		engru__lose_claim(e, s);
		return IG_E_OK;
	}
	rc = eng__take_pages(e, s, c->kv.table, full, engru__paged(e) ? s->pages_all : 0, eb);
	if (rc)
		return rc;
	/* the partial last page: a copy of its own (it writes there next) */
	if (engru__paged(e) && c->n % MDESC_PAGE_TOKENS)
		rc = e->be->ops->copy_d2d(e->be, kvpool_page(e->kv, s->ms.kv.table[full]),
		                          kvpool_page(e->kv, c->kv.table[full]), e->kv->page_bytes,
		                          eb);
	if (!rc && e->d->state_bytes)
		rc = c->host ? e->be->ops->copy_h2d(e->be, s->ms.state, e->hst.claim,
		                                    e->d->state_bytes, eb)
		             : e->be->ops->copy_d2d(e->be, s->ms.state, engru__slot(e, i),
		                                    e->d->state_bytes, eb);
	if (rc)
		return rc;
	*admitted = true;
	s->ms.pos = c->n;
	s->sch.prefilled = c->n;
	s->cached = c->n;
	s->ck = -1;
	c->used_at = ++e->ck_clock;
	c->used_us = clk_mono_us();
	e->st.reuse_hits++;
	e->st.reused_tokens += c->n;
	if (c->kind == ENG_CK_PREFIX)
		e->st.reused_prefix_tokens += c->n;
	if (c->host) {
		e->st.reused_host_tokens += c->n;
		if (c->kind == ENG_CK_PREFIX)
			e->st.reused_host_prefix_tokens += c->n;
		engru__queue_touch(e, c->key);
	}
	eng__event(e, &(struct eng_event){.kind = ENG_EV_REUSE_CLAIMED,
	                                  .id = s->sch.id,
	                                  .cls = (int)s->sch.cls,
	                                  .pages = full,
	                                  .tier = engru__tier(c),
	                                  .tokens = c->n,
	                                  .slot = c->host ? c->hslot : i,
	                                  .prefix = c->kind == ENG_CK_PREFIX});
	if (c->n == s->sch.prompt) {
		s->sch.phase = SCHED_READY;
		*first = c->logits;
	} else {
		s->sch.phase = SCHED_PREFILL;
	}
	return IG_E_OK;
}

static void engru__skip(struct eng *e, const struct eng_seq *s, uint32_t n, const char *why)
{
	eng__event(e, &(struct eng_event){.kind = ENG_EV_REUSE_SKIPPED,
	                                  .id = s ? s->sch.id : 0,
	                                  .cls = s ? (int)s->sch.cls : 0,
	                                  .why = why,
	                                  .tokens = n});
}

/* The entry a capture goes to: a free device slot; else a host slot (free,
 * or one given up) when no host capture is under way; else a device slot
 * given up. -1 with *why set when none. */
static int32_t engru__place(struct eng *e, const struct eng_seq *s, const char **why)
{
	bool host = e->n_ck > e->n_ck_dev;
	int32_t v;

	for (uint32_t i = 0; i < e->n_ck_dev; i++)
		if (!e->ck[i].used)
			return (int32_t)i;
	if (host && e->hst.cap < 0) {
		for (uint32_t i = e->n_ck_dev; i < e->n_ck; i++)
			if (!e->ck[i].used)
				return (int32_t)i;
		v = engru__victim(e, -1, false, AMONG_HOST);
		if (v >= 0) {
			e->st.reuse_given_up_slot++;
			engru__drop(e, (uint32_t)v, ENG_EV_REUSE_GIVEN_UP, "slot");
			return v;
		}
	}
	v = e->n_ck_dev ? engru__victim(e, -1, false, AMONG_DEVICE) : -1;
	if (v >= 0) {
		e->st.reuse_given_up_slot++;
		engru__drop(e, (uint32_t)v, ENG_EV_REUSE_GIVEN_UP, "slot");
		return v;
	}
	(void)s;
	if (host && e->hst.cap >= 0) {
		e->st.reuse_skips_host_busy++;
		*why = "host_busy";
	} else {
		e->st.reuse_skips_slot++;
		*why = "no_slot";
	}
	return -1;
}

/* A checkpoint held: counted and told. */
static void engru__captured(struct eng *e, struct eng_ckpt *c, uint32_t i, uint64_t id)
{
	e->st.reuse_captures++;
	e->st.reuse_prefixes += c->kind == ENG_CK_PREFIX;
	eng__event(e, &(struct eng_event){.kind = ENG_EV_REUSE_CAPTURED,
	                                  .id = id,
	                                  .cls = (int)c->cls,
	                                  .pages = c->kv.n_pages,
	                                  .tier = engru__tier(c),
	                                  .tokens = c->n,
	                                  .slot = c->host ? c->hslot : i,
	                                  .prefix = c->kind == ENG_CK_PREFIX});
}

/* A prompt's end, remembered by its tokens (checkpoints off): a record
 * that begins with them, or that they begin with, is the same record
 * (whatever parts from the shorter parts from the longer at the same token,
 * and the longer has more to part from); else a free one or the least
 * recently used. */
static void engru__remember(struct eng *e, const uint32_t *tokens, uint32_t n)
{
	struct eng_end *r = NULL;
	uint32_t *t;

	for (uint32_t i = 0; i < e->n_ends; i++) {
		struct eng_end *x = &e->ends[i];
		uint32_t k = x->n < n ? x->n : n;

		if (x->n && engru__common(x->tokens, tokens, k) == k) {
			r = x;
			break;
		}
		if (!r || (r->n && (!x->n || x->used_at < r->used_at)))
			r = x;
	}
	if (!r)
		return;
	/* the record goes on, or takes these tokens (longer, or another prompt) */
	if (r->n < n || engru__common(r->tokens, tokens, n) < n) {
		t = realloc(r->tokens, (size_t)n * sizeof(uint32_t));
		if (!t)
			return; /* no host memory: a later prompt just shares less */
		memcpy(t, tokens, (size_t)n * sizeof(uint32_t));
		r->tokens = t;
		r->n = n;
	}
	r->used_at = ++e->ck_clock;
}

void engru__capture(struct eng *e, struct eng_seq *s, uint32_t n, enum eng_ck_kind kind,
                    const float *logits)
{
	uint32_t full = engru__shared(e, n), vocab = e->d->m->vocab;
	bool tail = engru__paged(e) && n % MDESC_PAGE_TOKENS;
	const char *why = NULL;
	struct ig_errbuf eb;
	struct eng_ckpt *c;
	int32_t slot;
	int err = 0, rc;

	if (!e->n_ck || s->cached >= n)
		return; /* no slots, or nothing the claimed checkpoint lacks */
	if (kind == ENG_CK_CHECKPOINT && e->cfg.prefixes_only) {
		engru__remember(e, s->prompt, n); /* checkpoints off: its tokens only */
		return;
	}
	for (uint32_t i = 0; i < e->n_ck; i++) {
		c = &e->ck[i];
		if (c->used && c->n == n && !memcmp(c->tokens, s->prompt, (size_t)n * 4)) {
			c->used_at = ++e->ck_clock; /* the same prompt: kept, fresher */
			c->used_us = clk_mono_us();
			return;
		}
	}
	if (tail && !e->kv->n_free) {
		e->st.reuse_skips_page++;
		engru__skip(e, s, n, "no_page");
		return;
	}
	slot = engru__place(e, s, &why);
	if (slot < 0) {
		engru__skip(e, s, n, why);
		return;
	}
	c = &e->ck[slot];
	c->tokens = malloc((size_t)n * sizeof(uint32_t));
	if (!c->logits)
		c->logits = malloc((size_t)vocab * sizeof(float));
	if (!c->tokens || !c->logits ||
	    !kvpool_try_reserve_after(e->kv, &c->kv, 0x80000000u | (uint32_t)slot, s->ms.kv.table,
	                              full, full + tail, &err)) {
		free(c->tokens);
		c->tokens = NULL;
		return; /* no host memory: a checkpoint is a cache, nothing lost */
	}
	rc = tail ? e->be->ops->copy_d2d(e->be, kvpool_page(e->kv, c->kv.table[full]),
	                                 kvpool_page(e->kv, s->ms.kv.table[full]),
	                                 e->kv->page_bytes, &eb)
	          : IG_E_OK;
	if (!rc && e->d->state_bytes)
		rc = c->host ? e->be->ops->copy_d2h(e->be, e->hst.stage, s->ms.state,
		                                    e->d->state_bytes, &eb)
		             : e->be->ops->copy_d2d(e->be, engru__slot(e, (uint32_t)slot),
		                                    s->ms.state, e->d->state_bytes, &eb);
	if (rc) {
		kvpool_free(e->kv, &c->kv);
		free(c->tokens);
		c->tokens = NULL;
		return;
	}
	memcpy(c->tokens, s->prompt, (size_t)n * sizeof(uint32_t));
	memcpy(c->logits, logits, (size_t)vocab * sizeof(float));
	c->n = n;
	c->kind = kind;
	c->cls = s->sch.cls;
	c->used = true;
	c->used_at = ++e->ck_clock;
	c->used_us = clk_mono_us();
	if (!c->host) {
		engru__captured(e, c, (uint32_t)slot, s->sch.id);
		return;
	}
	/* to the kvstore daemon: the image waits in the stage meanwhile */
	c->hs = CKH_STAGED;
	c->key = engru__key(e, c->tokens, n);
	e->hst.cap = slot;
	e->hst.cap_gen = c->gen;
	engru__host_turn(e);
}

/* ---- the host slots' client ------------------------------------------------ */

/* The entry of the capture under way, if it still holds it. */
static struct eng_ckpt *engru__cap(struct eng *e)
{
	struct eng_host *h = &e->hst;

	if (h->cap < 0 || e->ck[h->cap].gen != h->cap_gen || !e->ck[h->cap].used)
		return NULL;
	return &e->ck[h->cap];
}

/* The held host entry of `key`, or -1. */
static int32_t engru__by_key(const struct eng *e, uint64_t key)
{
	for (uint32_t i = e->n_ck_dev; i < e->n_ck; i++)
		if (e->ck[i].used && e->ck[i].hs == CKH_HELD && e->ck[i].key == key)
			return (int32_t)i;
	return -1;
}

/* The capture under way ended without a held slot: its entry goes. */
static void engru__cap_failed(struct eng *e, const char *why)
{
	struct eng_ckpt *c = engru__cap(e);
	uint32_t n = c ? c->n : 0;

	if (c) {
		e->st.reuse_skips_host_refused++;
		engru__drop(e, (uint32_t)e->hst.cap, ENG_EV_REUSE_GIVEN_UP, NULL);
		engru__skip(e, NULL, n, why);
	}
	e->hst.cap = -1;
}

static void engru__send(struct eng *e, enum eng_hstep step, const struct msg *q)
{
	struct ig_errbuf eb;

	e->hst.step = step;
	e->hst.waiting = kvc_start(e->hst.c, q, &eb) == IG_E_OK;
	if (!e->hst.waiting)
		e->hst.step = HS_IDLE;
}

/* kv_slot for our capture: the image into its place, then published. */
static void engru__on_slot(struct eng *e, const struct msg_kv_slot *r)
{
	struct eng_ckpt *c = engru__cap(e);
	struct kvc_arena a = kvc_arena(e->hst.c);
	uint64_t n = e->d->state_bytes;
	struct msg q;
	int32_t up;

	if (r->given_up_key && (up = engru__by_key(e, r->given_up_key)) >= 0 &&
	    (!c || up != e->hst.cap)) {
		/* the daemon gave up a slot of ours for this one */
		e->st.reuse_given_up_tier++;
		engru__drop(e, (uint32_t)up, ENG_EV_REUSE_GIVEN_UP, "tier");
	}
	if (!c) { /* given up meanwhile: its slot goes */
		engru__queue_slot_drop(e, (uint32_t)r->slot, r->gen);
		e->hst.cap = -1;
		return;
	}
	if (!a.base || r->offset > a.bytes || a.bytes - r->offset < n || r->image_bytes != n) {
		engru__queue_slot_drop(e, (uint32_t)r->slot, r->gen);
		engru__cap_failed(e, "host_refused");
		return;
	}
	c->hslot = (uint32_t)r->slot;
	c->hgen = r->gen;
	c->hoff = r->offset;
	c->hsum = kvcopy_hash((unsigned char *)a.base + r->offset, e->hst.stage, n);
	c->hs = CKH_PUBLISH;
	kvc_req_slot_publish(&q, c->hslot, c->hgen, c->hsum);
	engru__send(e, HS_PUBLISH, &q);
	if (!e->hst.waiting) {
		engru__queue_slot_drop(e, c->hslot, c->hgen);
		engru__cap_failed(e, "host_refused");
	}
}

/* The reply to what the host client sent. */
static void engru__host_reply(struct eng *e)
{
	struct eng_host *h = &e->hst;
	struct ig_errbuf eb = {0};
	struct eng_ckpt *c;
	struct msg rep;
	bool done = false;
	int rc = kvc_poll(h->c, &rep, &done, &eb), up;
	enum eng_hstep step = h->step;

	if (!done)
		return;
	h->waiting = false;
	h->step = HS_IDLE;
	switch (step) {
	case HS_CAPTURE:
		if (rc == IG_E_BUSY && engru__cap(e)) {
			/* the key is held already: a slot an earlier worker of this
			 * model captured from the same tokens. Its image is the same
			 * bytes if its checksum is ours: adopt it */
			engru__cap(e)->hs = CKH_ADOPT;
			kvc_req_slot_claim(&rep, engru__cap(e)->key, e->cfg.reuse_ns);
			engru__send(e, HS_ADOPT, &rep);
			if (!h->waiting)
				engru__cap_failed(e, "host_refused");
		} else if (rc) {
			engru__cap_failed(e, "host_refused");
		} else {
			engru__on_slot(e, &rep.u.kv_slot);
		}
		break;
	case HS_ADOPT:
		c = engru__cap(e);
		if (!rc && c && rep.u.kv_slot.sum == kvcopy_sum(h->stage, e->d->state_bytes) &&
		    rep.u.kv_slot.image_bytes == e->d->state_bytes) {
			c->hslot = (uint32_t)rep.u.kv_slot.slot;
			c->hgen = rep.u.kv_slot.gen;
			c->hoff = rep.u.kv_slot.offset;
			c->hsum = rep.u.kv_slot.sum;
			c->hs = CKH_HELD;
			engru__captured(e, c, c->hslot, 0);
			h->cap = -1;
			h->rematch = true;
		} else {
			engru__cap_failed(e, "host_refused");
		}
		break;
	case HS_PUBLISH:
		c = engru__cap(e);
		if (!rc && c) {
			c->hs = CKH_HELD;
			engru__captured(e, c, c->hslot, 0);
			h->cap = -1;
			h->rematch = true;
		} else if (!rc) { /* given up while publishing */
			h->cap = -1;
		} else {
			engru__cap_failed(e, "host_refused");
		}
		break;
	case HS_TOUCH:
		/* the daemon no longer has it (given up for another writer's
		 * capture, or lost): the checkpoint goes with it */
		if (rc == IG_E_NOTFOUND && (up = engru__by_key(e, h->touch_key)) >= 0) {
			e->st.reuse_given_up_tier++;
			engru__drop(e, (uint32_t)up, ENG_EV_REUSE_GIVEN_UP, "tier");
		}
		break;
	default:
		break;
	}
}

static void engru__host_turn(struct eng *e)
{
	struct eng_host *h = &e->hst;
	struct eng_ckpt *c;
	struct msg q;

	if (!h->c)
		return;
	if (h->waiting)
		engru__host_reply(e);
	if (h->waiting)
		return;
	/* slots to free first (their room may be what a capture needs) */
	if (h->n_drops) {
		struct eng_hslot_ref d = h->drops[--h->n_drops];

		kvc_req_slot_drop(&q, d.slot, d.gen);
		engru__send(e, HS_DROP, &q);
		return;
	}
	if ((c = engru__cap(e)) && c->hs == CKH_STAGED) {
		kvc_req_slot_capture(&q, c->key, e->cfg.reuse_ns, c->kind == ENG_CK_PREFIX,
		                     c->cls == SCHED_AGENT ? "agent" : "interactive", c->n,
		                     e->d->state_bytes);
		c->hs = CKH_CAPTURE;
		engru__send(e, HS_CAPTURE, &q);
		if (!h->waiting)
			c->hs = CKH_STAGED; /* asked again next turn */
		return;
	}
	if (h->cap >= 0 && !engru__cap(e))
		h->cap = -1; /* given up before it was sent */
	if (h->n_touch) {
		h->touch_key = h->touch[--h->n_touch];
		kvc_req_slot_claim(&q, h->touch_key, e->cfg.reuse_ns);
		engru__send(e, HS_TOUCH, &q);
	}
}

uint64_t engru__retained_pages(const struct eng *e)
{
	uint32_t n = e->kv->n_pages;
	unsigned char *mark;
	uint64_t count = 0;

	if (!e->n_ck || !(mark = calloc(n ? n : 1, 1)))
		return 0;
	for (uint32_t i = 0; i < e->n_ck; i++)
		for (uint32_t k = 0; e->ck[i].used && k < e->ck[i].kv.n_pages; k++)
			mark[e->ck[i].kv.table[k]] = 1;
	for (uint32_t i = 0; i < e->n_slots; i++)
		for (uint32_t k = 0;
		     e->seqs[i].used && e->seqs[i].ms.kv.table && k < e->seqs[i].ms.kv.n_pages; k++)
			mark[e->seqs[i].ms.kv.table[k]] = 0;
	for (uint32_t p = 0; p < n; p++)
		count += mark[p];
	free(mark);
	return count;
}

void engru__moved_out(struct eng_seq *s)
{
	s->sch.pages = s->pages_all; /* it comes back with pages of its own */
}
