/* constrain.c - constrained sampling (docs/adr/0057): a request's grammar
 * turned into a mask over the vocabulary before each pick, and fed the
 * bytes of what was picked after it. The grammar engine (grammar/) does
 * the matching and the masks; this file holds a matcher a sequence and
 * the vocabulary's trie an engine. */
#include "engine_int.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"

/* The model's ids as the grammar sees them: each token's bytes (a special
 * has none and no grammar allows it), built once. The end-of-generation
 * ids are listed beside it: a grammar that may end allows them. */
static int engcs__vocab(struct eng *e, struct ig_errbuf *eb)
{
	uint32_t vocab = e->d->m->vocab;
	struct gv_token *toks;
	uint32_t n_eog = 0;
	int rc;

	if (e->gv)
		return IG_E_OK;
	toks = calloc(vocab, sizeof(*toks));
	e->mask = calloc((vocab + 31) / 32, sizeof(uint32_t));
	e->eog = calloc(vocab, sizeof(uint32_t));
	if (!toks || !e->mask || !e->eog) {
		free(toks);
		engcs__release(e); /* nothing half-built kept: the next request tries again */
		return ig_errf(eb, IG_E_NOMEM, "no memory for a vocabulary of %u tokens", vocab);
	}
	for (uint32_t i = 0; i < vocab; i++) {
		const uint8_t *p;
		size_t n;

		tok_piece(e->cfg.vocab, i, &p, &n);
		toks[i] = (struct gv_token){.bytes = p, .len = (uint32_t)n, .special = n == 0};
		if (i == e->cfg.eos || (e->cfg.is_eog && e->cfg.is_eog(e->cfg.ctx, i)))
			e->eog[n_eog++] = i;
	}
	e->n_eog = n_eog;
	rc = gv_build(&e->gv, toks, vocab, eb);
	free(toks);
	if (rc)
		engcs__release(e);
	return rc;
}

int engcs__attach(struct eng *e, struct eng_seq *s, const struct eng_req *r, struct ig_errbuf *eb)
{
	int rc;

	if (!e->cfg.vocab || e->cfg.vocab->kind == MDESC_TOK_NONE)
		return ig_errf(eb, IG_E_INVAL,
		               "grammar: model '%s' has no tokenizer, so its tokens have no bytes "
		               "for a grammar to match; accepted: a model with one",
		               e->d->m->name);
	if (r->trigger_len > GM_MAX_TRIGGER || (r->trigger_len && !r->trigger))
		return ig_errf(eb, IG_E_INVAL, "grammar trigger: %u bytes; accepted: 0 to %u",
		               r->trigger_len, GM_MAX_TRIGGER);
	rc = engcs__vocab(e, eb);
	if (rc)
		return rc;
	if (r->trigger_len) {
		s->gz = calloc(1, sizeof(*s->gz));
		if (!s->gz)
			return ig_errf(eb, IG_E_NOMEM, "no memory for a grammar's matcher");
		rc = gm_lazy_init(s->gz, r->grammar, r->trigger, r->trigger_len, eb);
	} else {
		s->gm = calloc(1, sizeof(*s->gm));
		if (!s->gm)
			return ig_errf(eb, IG_E_NOMEM, "no memory for a grammar's matcher");
		rc = gm_init(s->gm, r->grammar, eb);
	}
	if (rc) {
		free(s->gz);
		free(s->gm);
		s->gz = NULL;
		s->gm = NULL;
		return rc;
	}
	s->g = r->grammar;
	e->st.grammar_live++;
	return IG_E_OK;
}

void engcs__detach(struct eng *e, struct eng_seq *s)
{
	if (!s->g)
		return;
	if (s->gz)
		gm_lazy_release(s->gz);
	if (s->gm)
		gm_release(s->gm);
	free(s->gz);
	free(s->gm);
	s->gz = NULL;
	s->gm = NULL;
	if (e->cfg.grammar_done)
		e->cfg.grammar_done(e->cfg.ctx, s->g);
	s->g = NULL;
	e->st.grammar_live--;
}

bool engcs__mask(struct eng *e, struct eng_seq *s)
{
	uint64_t t0 = clk_mono_us();
	size_t words = gv_mask_words(e->gv);
	struct ig_errbuf eb;
	bool can_end, any = false;
	int rc;

	if (s->gz) {
		rc = gm_lazy_mask(s->gz, e->gv, e->mask, &eb);
		can_end = gm_lazy_can_end(s->gz);
		/* before its trigger every token is allowed, specials and the
		 * end of generation included (gm_lazy_mask set them) */
	} else {
		rc = gm_mask(s->gm, e->gv, e->mask, &eb);
		can_end = gm_can_end(s->gm);
	}
	if (rc)
		memset(e->mask, 0, words * sizeof(uint32_t));
	if (can_end && !rc)
		for (uint32_t i = 0; i < e->n_eog; i++)
			e->mask[e->eog[i] / 32] |= 1u << (e->eog[i] % 32);
	for (size_t i = 0; i < words && !any; i++)
		any = e->mask[i] != 0;
	e->st.grammar_tokens++;
	e->st.grammar_mask_us += clk_mono_us() - t0;
	return any;
}

bool engcs__accept(struct eng *e, struct eng_seq *s, uint32_t tok)
{
	const uint8_t *p;
	size_t n;

	for (uint32_t i = 0; i < e->n_eog; i++)
		if (e->eog[i] == tok)
			return true; /* the sequence ends with it */
	tok_piece(e->cfg.vocab, tok, &p, &n);
	if (s->gz)
		return gm_lazy_accept_bytes(s->gz, p, n);
	return gm_accept_bytes(s->gm, p, n);
}

void engcs__release(struct eng *e)
{
	gv_destroy(e->gv);
	free(e->mask);
	free(e->eog);
	e->gv = NULL;
	e->mask = NULL;
	e->eog = NULL;
	e->n_eog = 0;
}
