/*
 * tokenizer.c - the byte-level tokenizer (tokenizer.h): encode, decode, and
 * the streaming decoder that emits only valid UTF-8.
 *
 * The stream keeps one invariant: held[0..nheld) is a proper prefix of a
 * well-formed UTF-8 sequence (Unicode 15, table 3-7), so it is either
 * completed by later bytes or, once a byte cannot continue it, is one maximal
 * ill-formed subpart and becomes one U+FFFD.
 */
#include "tokenizer.h"

#include <inttypes.h>
#include <string.h>

#include "bpe.h"

static const char *const special_names[TOK_VOCAB - 256] = {
    "<|bos|>",
    "<|eos|>",
    "<|pad|>",
    "<|unk|>",
};

_Static_assert(sizeof("<|bos|>") - 1 == TOK_SPECIAL_NAME_LEN, "special names are 7 bytes");
_Static_assert(TOK_STREAM_MAX_OUT == 3 + TOK_SPECIAL_NAME_LEN, "U+FFFD then a name");
_Static_assert(TOK_PIECE_MAX == BPE_PIECE_MAX, "one bound on a token's bytes");

static const uint8_t replacement[3] = {0xEF, 0xBF, 0xBD}; /* U+FFFD */

const char *tok_special_name(uint32_t id)
{
	if (id < 256 || id >= TOK_VOCAB)
		return NULL;
	return special_names[id - 256];
}

int tok_encode(const void *text, size_t len, unsigned flags, uint32_t *ids, size_t cap, size_t *n,
               struct ig_errbuf *eb)
{
	const uint8_t *t = text;
	size_t bos = (flags & TOK_ADD_BOS) ? 1 : 0;
	size_t k = 0;

	*n = 0;
	if (flags & ~(unsigned)TOK_ADD_BOS)
		return ig_errf(eb, IG_E_INVAL,
		               "tok_encode: unknown flags 0x%x: accepted TOK_ADD_BOS",
		               flags & ~(unsigned)TOK_ADD_BOS);
	if (len > SIZE_MAX - bos)
		return ig_errf(eb, IG_E_INVAL, "tok_encode: %zu bytes are too many to count", len);
	if (cap < len + bos) {
		*n = len + bos;
		return ig_errf(eb, IG_E_INVAL,
		               "tok_encode: the id buffer holds %zu ids, %zu are needed", cap,
		               len + bos);
	}
	if (bos)
		ids[k++] = TOK_BOS;
	for (size_t i = 0; i < len; i++)
		ids[k++] = t[i];
	*n = k;
	return IG_E_OK;
}

int tok_encode_spans(const void *text, size_t len, unsigned flags, const struct chat_span *plain,
                     size_t n_plain, uint32_t *ids, size_t cap, size_t *n, struct ig_errbuf *eb)
{
	int rc = bpe_spans_check(plain, n_plain, len, eb);

	if (rc) {
		*n = 0;
		return rc;
	}
	return tok_encode(text, len, flags, ids, cap, n, eb);
}

/* The id at `pos` when it is outside the vocabulary, as an error. */
static int bad_id(struct ig_errbuf *eb, const char *who, uint32_t id, uint64_t pos)
{
	return ig_errf(eb, IG_E_INVAL,
	               "%s: id %" PRIu32 " at position %" PRIu64
	               " is outside the vocabulary (ids 0 to %u)",
	               who, id, pos, TOK_VOCAB - 1);
}

int tok_decode(const uint32_t *ids, size_t n, unsigned flags, uint8_t *out, size_t cap, size_t *len,
               struct ig_errbuf *eb)
{
	int skip = (flags & TOK_SKIP_SPECIAL) != 0;
	size_t need = 0;

	*len = 0;
	if (flags & ~(unsigned)TOK_SKIP_SPECIAL)
		return ig_errf(eb, IG_E_INVAL,
		               "tok_decode: unknown flags 0x%x: accepted TOK_SKIP_SPECIAL",
		               flags & ~(unsigned)TOK_SKIP_SPECIAL);
	/* First pass: check every id and count, so nothing is written on a
	 * refusal. n ids make at most 7n bytes; 7n overflowing size_t would
	 * need more ids than memory holds. */
	for (size_t i = 0; i < n; i++) {
		if (ids[i] >= TOK_VOCAB)
			return bad_id(eb, "tok_decode", ids[i], i);
		if (ids[i] < 256)
			need += 1;
		else if (!skip)
			need += TOK_SPECIAL_NAME_LEN;
	}
	if (cap < need) {
		*len = need;
		return ig_errf(eb, IG_E_INVAL,
		               "tok_decode: the output buffer holds %zu bytes, %zu are needed", cap,
		               need);
	}
	for (size_t i = 0; i < n; i++) {
		if (ids[i] < 256) {
			out[(*len)++] = (uint8_t)ids[i];
		} else if (!skip) {
			memcpy(out + *len, special_names[ids[i] - 256], TOK_SPECIAL_NAME_LEN);
			*len += TOK_SPECIAL_NAME_LEN;
		}
	}
	return IG_E_OK;
}

/* ---- the stream ---------------------------------------------------------- */

/*
 * The length of the well-formed sequence that `lead` starts (0 when no
 * sequence starts with it: 80..C1, F5..FF) and the range its second byte
 * must fall in; later bytes are always 80..BF (Unicode 15, table 3-7).
 */
static unsigned utf8_seq_len(uint8_t lead, uint8_t *lo, uint8_t *hi)
{
	*lo = 0x80;
	*hi = 0xBF;
	if (lead < 0x80)
		return 1;
	if (lead < 0xC2)
		return 0;
	if (lead < 0xE0)
		return 2;
	if (lead < 0xF0) {
		if (lead == 0xE0)
			*lo = 0xA0; /* no overlong forms */
		else if (lead == 0xED)
			*hi = 0x9F; /* no surrogates */
		return 3;
	}
	if (lead < 0xF5) {
		if (lead == 0xF0)
			*lo = 0x90; /* no overlong forms */
		else if (lead == 0xF4)
			*hi = 0x8F; /* nothing above U+10FFFF */
		return 4;
	}
	return 0;
}

/* The stream's part that a push changes, worked on as a copy so that a
 * refusal leaves the stream as it was. */
struct held {
	uint8_t b[3];
	uint8_t n;
};

/* Feed byte `c`; write what it completes to `o`, return the count (at most 6:
 * U+FFFD for a broken tail, then U+FFFD for `c` itself). */
static size_t feed_byte(struct held *h, uint8_t c, uint8_t *o)
{
	size_t w = 0;
	uint8_t lo, hi;
	unsigned len;

	if (h->n) {
		len = utf8_seq_len(h->b[0], &lo, &hi);
		if (h->n > 1) {
			lo = 0x80;
			hi = 0xBF;
		}
		if (c >= lo && c <= hi) {
			if (h->n + 1u < len) {
				h->b[h->n++] = c;
				return 0;
			}
			memcpy(o, h->b, h->n);
			o[h->n] = c;
			w = h->n + 1u;
			h->n = 0;
			return w;
		}
		/* `c` cannot continue the tail: the tail is a maximal
		 * ill-formed subpart, and `c` starts afresh. */
		memcpy(o, replacement, sizeof(replacement));
		w = sizeof(replacement);
		h->n = 0;
	}
	len = utf8_seq_len(c, &lo, &hi);
	if (len == 1) {
		o[w++] = c;
	} else if (len == 0) {
		memcpy(o + w, replacement, sizeof(replacement));
		w += sizeof(replacement);
	} else {
		h->b[0] = c;
		h->n = 1;
	}
	return w;
}

/* Hand `tmp[0..w)` out, or refuse when `cap` is short (the caller then
 * leaves the stream as it was). */
static int emit(const uint8_t *tmp, size_t w, uint8_t *out, size_t cap, size_t *n,
                struct ig_errbuf *eb, const char *who)
{
	if (cap < w) {
		*n = w;
		return ig_errf(eb, IG_E_INVAL,
		               "%s: the output buffer holds %zu bytes, %zu are needed "
		               "(TOK_STREAM_MAX_OUT always suffices)",
		               who, cap, w);
	}
	if (w)
		memcpy(out, tmp, w);
	*n = w;
	return IG_E_OK;
}

void tok_stream_init(struct tok_stream *s, unsigned flags)
{
	memset(s, 0, sizeof(*s));
	s->flags = flags & TOK_SKIP_SPECIAL;
}

int tok_stream_push(struct tok_stream *s, uint32_t id, uint8_t *out, size_t cap, size_t *n,
                    struct ig_errbuf *eb)
{
	uint8_t tmp[TOK_STREAM_MAX_OUT];
	struct held h;
	size_t w = 0;
	int rc;

	*n = 0;
	if (id >= TOK_VOCAB)
		return bad_id(eb, "tok_stream_push", id, s->pos);
	memcpy(h.b, s->held, sizeof(h.b));
	h.n = s->nheld;
	if (id < 256) {
		w = feed_byte(&h, (uint8_t)id, tmp);
	} else if (!(s->flags & TOK_SKIP_SPECIAL)) {
		/* A name is ASCII: it ends a held tail as ill-formed. */
		if (h.n) {
			memcpy(tmp, replacement, sizeof(replacement));
			w = sizeof(replacement);
			h.n = 0;
		}
		memcpy(tmp + w, special_names[id - 256], TOK_SPECIAL_NAME_LEN);
		w += TOK_SPECIAL_NAME_LEN;
	}
	/* A skipped special gives no bytes and leaves the tail held, as
	 * tok_decode with TOK_SKIP_SPECIAL leaves the bytes around it adjacent. */
	rc = emit(tmp, w, out, cap, n, eb, "tok_stream_push");
	if (rc)
		return rc;
	memcpy(s->held, h.b, sizeof(h.b));
	s->nheld = h.n;
	s->pos++;
	return IG_E_OK;
}

int tok_stream_flush(struct tok_stream *s, uint8_t *out, size_t cap, size_t *n,
                     struct ig_errbuf *eb)
{
	int rc;

	*n = 0;
	if (!s->nheld)
		return IG_E_OK;
	rc = emit(replacement, sizeof(replacement), out, cap, n, eb, "tok_stream_flush");
	if (rc)
		return rc;
	s->nheld = 0;
	return IG_E_OK;
}

/* ---- a request's text and its stop strings ---------------------------------- */

/* A byte token adds at most 6 bytes and a final tail's U+FFFD. */
const struct tok_vocab tok_vocab_bytes = {MDESC_TOK_BYTES, NULL, 9};
const struct tok_vocab tok_vocab_none = {MDESC_TOK_NONE, NULL, 0};

static const uint8_t byte_values[256] = {
#define B4(i) (i), (i) + 1, (i) + 2, (i) + 3
#define B16(i) B4(i), B4((i) + 4), B4((i) + 8), B4((i) + 12)
#define B64(i) B16(i), B16((i) + 16), B16((i) + 32), B16((i) + 48)
    B64(0), B64(64), B64(128), B64(192)
#undef B64
#undef B16
#undef B4
};

void tok_piece(const struct tok_vocab *v, uint32_t id, const uint8_t **p, size_t *n)
{
	*p = NULL;
	*n = 0;
	if (v->kind == MDESC_TOK_BYTES && id < 256) {
		*p = &byte_values[id];
		*n = 1;
	} else if (v->kind == MDESC_TOK_GPT2 && v->bpe) {
		bpe_piece(v->bpe, id, false, p, n);
	}
}

void tok_vocab_init(struct tok_vocab *v, enum mdesc_tokenizer kind, const struct bpe *bpe)
{
	*v = kind == MDESC_TOK_BYTES ? tok_vocab_bytes : tok_vocab_none;
	if (kind != MDESC_TOK_GPT2 || !bpe)
		return;
	*v = (struct tok_vocab){MDESC_TOK_GPT2, bpe, 0};
	/* Each piece decoded from an empty state, a NUL counted as its U+FFFD:
	 * a held tail before it turns into at most 3 more bytes than that
	 * (its own bytes, or one U+FFFD, in place of the U+FFFDs its first
	 * continuation bytes would be alone), and a final tail's U+FFFD 3. */
	for (uint32_t id = 0; id < bpe_info(bpe)->n_tokens; id++) {
		const uint8_t *p;
		size_t n, w = 0;
		struct held h = {{0}, 0};
		uint8_t one[6];

		tok_piece(v, id, &p, &n);
		for (size_t j = 0; j < n; j++) {
			size_t got = feed_byte(&h, p[j], one);

			for (size_t q = 0; q < got; q++)
				w += one[q] ? 1 : sizeof(replacement);
		}
		if (w + 6 > v->token_max)
			v->token_max = w + 6;
	}
}

/* The last (up to) `want` bytes of the text of out[0..n), newest first,
 * with the index of the token each came from. */
static uint32_t last_bytes(const struct tok_vocab *v, const uint32_t *out, uint32_t n,
                           uint32_t want, uint8_t *b, uint32_t *at)
{
	uint32_t k = 0;

	for (uint32_t i = n; i-- > 0 && k < want;) {
		const uint8_t *p;
		size_t len;

		tok_piece(v, out[i], &p, &len);
		while (len-- > 0 && k < want) {
			b[k] = p[len];
			if (at)
				at[k] = i;
			k++;
		}
	}
	return k;
}

void tok_text_delta(const struct tok_vocab *v, const uint32_t *out, uint32_t from, uint32_t to,
                    bool end, char *text, size_t cap, uint32_t *ends, uint32_t *n, size_t *len)
{
	uint8_t tmp[TOK_TEXT_TOKEN_MAX], last[3];
	struct held h = {{0}, 0};
	uint32_t k;

	*n = 0;
	*len = 0;
	if (v->kind == MDESC_TOK_NONE) {
		/* ids only: no token has text */
		for (uint32_t i = from; i < to; i++) {
			if (ends)
				ends[i - from] = 0;
			(*n)++;
		}
		return;
	}
	/* The state at `from`: a held tail is at most 3 bytes and starts with
	 * a lead byte, and a lead byte always starts afresh (it never
	 * continues a tail), so feeding the last 3 bytes before `from` to an
	 * empty decoder leaves the tail the whole output left (test_tokenizer
	 * checks it against the stream). */
	k = last_bytes(v, out, from, 3, last, NULL);
	while (k)
		feed_byte(&h, last[--k], tmp);
	for (uint32_t i = from; i < to; i++) {
		const uint8_t *p;
		size_t pn, w = 0, tail;

		tok_piece(v, out[i], &p, &pn);
		for (size_t j = 0; j < pn; j++) {
			uint8_t one[6];
			size_t got = feed_byte(&h, p[j], one);

			for (size_t q = 0; q < got; q++) {
				if (one[q] == 0) {
					/* a NUL: U+FFFD, as no string of the protocol
					 * holds NUL (the ids say which byte it was) */
					memcpy(tmp + w, replacement, sizeof(replacement));
					w += sizeof(replacement);
				} else
					tmp[w++] = one[q];
			}
		}
		tail = end && i + 1 == to && h.n ? sizeof(replacement) : 0;
		if (*len + w + tail > cap)
			return;
		memcpy(text + *len, tmp, w);
		*len += w;
		if (ends)
			ends[i - from] = (uint32_t)*len;
		(*n)++;
		if (tail) {
			memcpy(text + *len, replacement, tail);
			*len += tail;
		}
	}
	if (end && from == to && h.n && cap >= sizeof(replacement)) {
		memcpy(text, replacement, sizeof(replacement));
		*len = sizeof(replacement);
	}
}

int tok_stops_add(struct tok_stops *st, const void *s, size_t len, struct ig_errbuf *eb)
{
	if (st->n >= TOK_STOP_MAX)
		return ig_errf(eb, IG_E_INVAL, "stop[%u]: at most %u stop strings", st->n,
		               TOK_STOP_MAX);
	if (len < 1 || len > TOK_STOP_BYTES)
		return ig_errf(eb, IG_E_INVAL, "stop[%u]: %zu bytes; accepted: 1 to %u", st->n, len,
		               TOK_STOP_BYTES);
	memcpy(st->s[st->n], s, len);
	st->len[st->n] = (uint8_t)len;
	if (len > st->longest)
		st->longest = (uint32_t)len;
	st->n++;
	return IG_E_OK;
}

uint32_t tok_stops_check(const struct tok_stops *st, const struct tok_vocab *v,
                         const uint32_t *out, uint32_t n)
{
	uint8_t b[TOK_STOP_BYTES];   /* the last bytes, newest first */
	uint32_t at[TOK_STOP_BYTES]; /* ... and the token each came from */
	const uint8_t *p;
	size_t pn;
	uint32_t k;

	if (!st || !st->n || !n)
		return n;
	tok_piece(v, out[n - 1], &p, &pn);
	if (!pn)
		return n; /* only a token with bytes can end a stop string */
	k = last_bytes(v, out, n, st->longest, b, at);
	for (uint32_t i = 0; i < st->n; i++) {
		uint32_t len = st->len[i], j = 0;

		if (len > k)
			continue;
		while (j < len && st->s[i][len - 1 - j] == b[j])
			j++;
		if (j == len)
			return at[len - 1];
	}
	return n;
}

uint32_t tok_stops_visible(const struct tok_stops *st, const struct tok_vocab *v,
                           const uint32_t *out, uint32_t n)
{
	uint8_t b[TOK_STOP_BYTES];
	uint32_t at[TOK_STOP_BYTES], k;

	if (!st || !st->n || st->longest < 2)
		return n;
	k = last_bytes(v, out, n, st->longest - 1, b, at);
	return k ? at[k - 1] : n;
}
