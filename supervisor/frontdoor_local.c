/*
 * frontdoor_local.c - the front door's in-process clients (door_local_*, the HTTP
 * API; docs/adr/0041): the same checks, queue and pump as an nng client's
 * fd_submit, with no socket between.
 */
#define _GNU_SOURCE
#include "frontdoor_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"

/* ---- in-process clients -------------------------------------------------------------- */

/* The bytes `q` encodes to, or a little more: its text, stop strings and
 * ids at their widest (5 bytes an id), and 256 for keys and the rest. */
static size_t door__submit_bytes(const struct msg_fd_submit *q)
{
	size_t n = 256 + (size_t)q->text.n + 5 * ((size_t)q->prompt.n + q->plain.n);

	for (uint32_t i = 0; i < q->stop.n; i++)
		n += 16 + q->stop.v[i].text.n;
	return n;
}

int door_local_submit(struct door *d, const struct msg *q, uint64_t peer, struct door_req **out,
                      struct ig_errbuf *eb)
{
	struct door_req *r;
	nng_msg *nm = NULL;
	char text[512];
	int code, rc, rv;

	*out = NULL;
	if (q->type != MSG_FD_SUBMIT)
		return ig_errf(eb, IG_E_INVAL, "door_local_submit takes fd_submit, not '%s'",
		               msg_type_name(q->type));
	/* encoded once, into room enough for it (no growing copies), and
	 * checked there as msg_decode would check it; from here on the
	 * request holds this message, as it holds an nng client's */
	rv = nng_msg_alloc(&nm, 0);
	if (!rv)
		rv = nng_msg_reserve(nm, door__submit_bytes(&q->u.fd_submit));
	if (rv) {
		if (nm)
			nng_msg_free(nm);
		return tp_nng_err(eb, rv, "cannot allocate a submit's message");
	}
	rc = msg_encode(q, door__append, nm, eb);
	if (!rc)
		rc = msg_retag(nng_msg_body(nm), nng_msg_len(nm), MSG_FD_SUBMIT, MSG_SUBMIT, eb);
	if (rc) {
		nng_msg_free(nm);
		return rc;
	}
	pthread_mutex_lock(&d->mu);
	r = d->closing ? NULL : door__take(d, &q->u.fd_submit, nm, peer, &code, text, sizeof(text));
	if (r)
		r->local = r->held = true;
	else if (d->closing)
		code = IG_E_BUSY, snprintf(text, sizeof(text), "the front door is closing");
	pthread_mutex_unlock(&d->mu);
	if (!r) {
		nng_msg_free(nm);
		return ig_errf(eb, code, "%s", text);
	}
	*out = r;
	return IG_E_OK;
}

int door_local_read(struct door *d, struct door_req *r, uint64_t *version, uint32_t *from,
                    struct door_news *nw, char **text, size_t *text_len)
{
	uint32_t start, end;

	pthread_mutex_lock(&d->mu);
	r->touched_ms = clk_mono_ms();
	if (r->ver == *version) {
		pthread_mutex_unlock(&d->mu);
		return 0;
	}
	start = door__text_to(&r->out, *from, false);
	end = door__text_to(&r->out, r->out.n, r->st == RQ_DONE);
	if (end > start || !*text) {
		char *t = realloc(*text, *text_len + (end - start) + 1);

		if (!t) {
			pthread_mutex_unlock(&d->mu);
			return -1;
		}
		if (end > start)
			memcpy(t + *text_len, r->out.text + start, end - start);
		*text_len += end - start;
		t[*text_len] = '\0';
		*text = t;
	}
	memset(nw, 0, sizeof(*nw));
	nw->id = r->id;
	nw->version = r->ver;
	nw->refused = r->refused;
	nw->done = r->st == RQ_DONE;
	nw->admitted = r->st == RQ_RUNNING || (nw->done && !r->refused);
	nw->prompt_tokens = r->prompt_tokens;
	nw->max_tokens = r->max_tokens;
	nw->generated = r->out.n;
	nw->prompt_in = r->prompt_in;
	nw->cached = r->cached;
	snprintf(nw->state, sizeof(nw->state), "%s", door__state(r));
	if (nw->done) {
		snprintf(nw->finish, sizeof(nw->finish), "%s", r->finish);
		nw->code = r->code;
		snprintf(nw->message, sizeof(nw->message), "%s", r->message ? r->message : "");
	}
	*from = r->out.n;
	*version = r->ver;
	pthread_mutex_unlock(&d->mu);
	return 1;
}

int door_local_logprobs(struct door *d, struct door_req *r, uint32_t i, struct door_lp_tok *out)
{
	int rc;

	pthread_mutex_lock(&d->mu);
	rc = r->lp ? door__run_lp(&r->out, i, out) : -1;
	pthread_mutex_unlock(&d->mu);
	return rc;
}

int door_local_prompt(struct door *d, struct door_req *r, char **text, size_t *len, uint32_t *n)
{
	int rc = -1;

	*text = NULL;
	*len = 0;
	*n = 0;
	pthread_mutex_lock(&d->mu);
	if (r->prompt_in && (*text = malloc((size_t)r->prm.tlen + 1))) {
		if (r->prm.tlen)
			memcpy(*text, r->prm.text, r->prm.tlen);
		(*text)[r->prm.tlen] = '\0';
		*len = r->prm.tlen;
		*n = r->prm.n;
		rc = 0;
	}
	pthread_mutex_unlock(&d->mu);
	return rc;
}

int door_local_prompt_logprobs(struct door *d, struct door_req *r, uint32_t i,
                               struct door_lp_tok *out)
{
	int rc;

	pthread_mutex_lock(&d->mu);
	rc = r->prompt_in ? door__run_lp(&r->prm, i, out) : -1;
	if (!rc && i + 1 == r->prm.n)
		out->text_end = r->prm.tlen; /* the prompt's final U+FFFD is its last's */
	pthread_mutex_unlock(&d->mu);
	return rc;
}

bool door_local_wait(struct door *d, struct door_req *r, uint64_t version, uint32_t wait_ms,
                     void (*wake)(void *arg), void *arg)
{
	bool armed;

	pthread_mutex_lock(&d->mu);
	armed = r->ver == version;
	r->wake = armed ? wake : NULL;
	r->wake_arg = arg;
	r->wake_at_ms = clk_mono_ms() + wait_ms;
	if (armed)
		pthread_cond_signal(&d->clock_cv); /* its wait may end before the clock's */
	pthread_mutex_unlock(&d->mu);
	return armed;
}

void door_local_release(struct door *d, struct door_req *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&d->mu);
	r->wake = NULL;
	r->held = false;
	switch (r->st) {
	case RQ_QUEUED:
		d->n_withdrawn++;
		door__free_req(d, r);
		break;
	case RQ_SUBMITTING: /* cancelled once the worker answers */
		d->n_withdrawn++;
		r->withdrawn = true;
		break;
	case RQ_RUNNING:
		r->wcancels = 2; /* stop, then forget */
		door__finish(d, r, "cancelled", 0, NULL);
		door__forget(d, r);
		pthread_cond_signal(&d->pump_cv);
		break;
	case RQ_DONE:
		door__forget(d, r);
		break;
	}
	pthread_mutex_unlock(&d->mu);
}
