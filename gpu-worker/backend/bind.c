/* bind.c - what binding a model means on every backend (see bind.h). */
#include "bind.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool.h"
#include "model/seqimg.h"

static uint64_t bind__align(uint64_t n)
{
	return (n + 63u) & ~(uint64_t)63u;
}

uint64_t bind_slot_bytes(const struct mdesc *m, const struct be_bind_opts *o)
{
	uint64_t n = bind__align(mdesc_seq_state_bytes(m, o->kv_sinks, o->kv_window));

	return n ? n : 64u;
}

void bind_needs(const struct mdesc *m, const struct be_bind_opts *o, bind_scratch_fn scratch,
                struct be_needs *n)
{
	uint32_t tokens = o->max_round_tokens ? o->max_round_tokens : 1;
	uint32_t states = o->states ? o->states : 1;
	uint64_t row = (uint64_t)m->vocab * sizeof(float);

	*n = (struct be_needs){
	    .workspace_min = bind__align(scratch(m, 1, o->context)),
	    .workspace_one_pass = bind__align(scratch(m, tokens, o->context)),
	    .sampling_min = row,
	    .sampling_one_pass = row * states,
	    .lane_state = (uint64_t)states * bind_slot_bytes(m, o),
	};
}

int bind_carve(struct bind *bd, const struct devmem *mem, const char *backend,
               const struct mdesc *m, const struct be_bind_opts *o, bind_scratch_fn scratch,
               struct ig_errbuf *eb)
{
	uint64_t row = (uint64_t)m->vocab * sizeof(float);
	uint32_t lo = 1, hi;
	struct be_needs n;
	int rc;

	memset(bd, 0, sizeof(*bd));
	bd->m = m;
	bd->max_tokens = o->max_round_tokens ? o->max_round_tokens : 1;
	bd->context = o->context;
	if (o->states == 0)
		return ig_errf(eb, IG_E_INVAL,
		               "a bound model needs 1 state slot at least; given 0");
	bind_needs(m, o, scratch, &n);
	bd->slot_bytes = bind_slot_bytes(m, o);
	bd->n_states = o->states;
	rc = devmem_check_region(mem, backend, "workspace", o->workspace.base, o->workspace.bytes,
	                         n.workspace_min, eb);
	if (!rc)
		rc = devmem_check_region(mem, backend, "sampling", o->sampling.base,
		                         o->sampling.bytes, n.sampling_min, eb);
	if (!rc)
		rc = devmem_check_region(mem, backend, "lane_state", o->lane_state.base,
		                         o->lane_state.bytes, n.lane_state, eb);
	if (rc)
		return rc;
	/* the most tokens whose scratch fits (it grows with the tokens) */
	hi = bd->max_tokens;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo + 1) / 2;

		if (bind__align(scratch(m, mid, bd->context)) <= o->workspace.bytes)
			lo = mid;
		else
			hi = mid - 1;
	}
	bd->pass_tokens = lo;
	bd->scratch = o->workspace.base;
	bd->logits = o->sampling.base;
	bd->logit_rows =
	    o->sampling.bytes / row > UINT32_MAX ? UINT32_MAX : (uint32_t)(o->sampling.bytes / row);
	bd->states = o->lane_state.base;
	bd->pass = calloc(bd->max_tokens, sizeof(*bd->pass));
	bd->held = calloc(bd->n_states, sizeof(*bd->held));
	if (!bd->pass || !bd->held)
		return ig_errf(eb, IG_E_NOMEM, "host memory for the books of %u state slots",
		               bd->n_states);
	return IG_E_OK;
}

void bind_release(struct bind *bd)
{
	free(bd->pass);
	free(bd->held);
	bd->pass = NULL;
	bd->held = NULL;
}

int bind_seq_take(struct bind *bd, struct be_seq *s, struct ig_errbuf *eb)
{
	for (uint32_t i = 0; i < bd->n_states; i++) {
		if (bd->held[i])
			continue;
		bd->held[i] = true;
		s->state = bd->states + (uint64_t)i * bd->slot_bytes;
		s->pos = 0;
		return IG_E_OK;
	}
	return ig_errf(eb, IG_E_NOSPACE,
	               "every one of the %u state slots (the plan's lane_state line) is held",
	               bd->n_states);
}

void bind_seq_give(struct bind *bd, struct be_seq *s)
{
	uint64_t at;

	if (!s->state)
		return;
	at = (uint64_t)((uint8_t *)s->state - bd->states);
	if ((uint8_t *)s->state >= bd->states && at % bd->slot_bytes == 0 &&
	    at / bd->slot_bytes < bd->n_states)
		bd->held[at / bd->slot_bytes] = false;
	s->state = NULL;
}

int bind_check_steps(const struct mdesc *m, const struct be_step *steps, uint32_t n_steps,
                     uint64_t max_context, struct ig_errbuf *eb)
{
	for (uint32_t i = 0; i < n_steps; i++) {
		const struct be_step *st = &steps[i];
		uint64_t end = st->s->pos + st->n_tok;

		if (st->n_tok == 0)
			return ig_errf(eb, IG_E_INVAL, "step %u of the round has no tokens", i);
		for (uint32_t j = 0; j < i; j++)
			if (steps[j].s == st->s)
				return ig_errf(eb, IG_E_INVAL,
				               "steps %u and %u of the round are the same sequence",
				               j, i);
		if (end > max_context)
			return ig_errf(eb, IG_E_INVAL, "%llu tokens would pass the context of %llu",
			               (unsigned long long)end, (unsigned long long)max_context);
		if (m->full_layers && (end - 1) / MDESC_PAGE_TOKENS >= st->s->kv.n_pages)
			return ig_errf(eb, IG_E_INVAL,
			               "a sequence reserved %u pages; %llu tokens need %llu",
			               st->s->kv.n_pages, (unsigned long long)end,
			               (unsigned long long)mdesc_pages_for(end));
		if (st->tail_logits > st->n_tok)
			return ig_errf(eb, IG_E_INVAL,
			               "step %u asks the logits of %u tokens of its %u", i,
			               st->tail_logits, st->n_tok);
		for (uint32_t t = 0; t < st->n_tok; t++)
			if (st->tokens[t] >= m->vocab)
				return ig_errf(eb, IG_E_INVAL,
				               "token %u at %u is outside the vocabulary of %u",
				               st->tokens[t], t, m->vocab);
	}
	return IG_E_OK;
}

int bind_check_round(const struct bind *bd, const struct be_step *steps, uint32_t n_steps,
                     uint64_t context, struct ig_errbuf *eb)
{
	uint64_t tokens = 0;

	for (uint32_t k = 0; k < n_steps; k++)
		tokens += steps[k].n_tok;
	if (tokens > bd->max_tokens || context > bd->context)
		return ig_errf(eb, IG_E_INVAL,
		               "a round of %" PRIu64 " tokens over a context of %" PRIu64
		               ": the model was bound for rounds of at most %u tokens and a "
		               "context of %" PRIu64,
		               tokens, context, bd->max_tokens, bd->context);
	return bind_check_steps(bd->m, steps, n_steps, context, eb);
}

uint32_t bind_pass(struct bind *bd, const struct be_step *steps, uint32_t n_steps, uint32_t *i,
                   uint32_t *off, uint32_t *rows)
{
	uint32_t n = 0, toks = 0;

	*rows = 0;
	while (*i < n_steps && toks < bd->pass_tokens && *rows < bd->logit_rows) {
		const struct be_step *st = &steps[*i];
		uint32_t left = st->n_tok - *off;
		uint32_t take = left < bd->pass_tokens - toks ? left : bd->pass_tokens - toks;
		/* its first token with a row, and the rows this pass has left */
		uint32_t first = st->n_tok - st->tail_logits > *off ? st->n_tok - st->tail_logits : *off;
		uint32_t room = bd->logit_rows - *rows, piece;
		bool last;

		if (first + room < *off + take)
			take = first + room - *off; /* >= 1: first >= *off, room >= 1 */
		piece = *off + take > first ? *off + take - first : 0;
		last = take == left;
		bd->pass[n++] = (struct be_step){st->s, st->tokens + *off, take, piece};
		toks += take;
		*rows += piece;
		if (!last) {
			*off += take;
			break; /* the pass is full */
		}
		(*i)++;
		*off = 0;
	}
	return n;
}

void bind_seq_image(const struct mdesc *m, uint64_t state_bytes, const struct be_seq *s,
                    const struct kvpool *kv, enum mdesc_kv_format fmt, uint32_t last_token,
                    uint64_t sampler_bytes, struct seqimg_header *h, void **pages_out)
{
	memset(h, 0, sizeof(*h));
	snprintf(h->model, sizeof(h->model), "%s", m->name);
	h->model_id = seqimg_model_id(m);
	h->kv_format = fmt;
	h->page_bytes = (uint32_t)mdesc_page_bytes(m, fmt);
	h->tokens = s->pos;
	/* only the pages that hold tokens travel */
	h->pages = (uint32_t)mdesc_pages_for(s->pos);
	h->last_token = last_token;
	h->state_bytes = state_bytes;
	h->sampler_bytes = sampler_bytes;
	for (uint32_t i = 0; i < h->pages && i < s->kv.n_pages; i++)
		pages_out[i] = kvpool_page(kv, s->kv.table[i]);
}
