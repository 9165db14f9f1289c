/*
 * tokenizer.h - the byte-level tokenizer of our synthetic models.
 *
 * The vocabulary has 260 ids and no merges: id b < 256 is the byte b, and
 * four specials follow. Any byte string encodes (NUL and invalid UTF-8
 * included), one id a byte, so encode then decode gives the bytes back.
 *
 *   id        meaning
 *   0..255    the byte of that value
 *   256       <|bos|>   beginning of a sequence
 *   257       <|eos|>   end of a sequence
 *   258       <|pad|>   padding
 *   259       <|unk|>   unknown (never produced by encode; kept for symmetry
 *                       with real vocabularies)
 *
 * Ids are part of model files and sequence images: never renumber.
 *
 * Encoding never makes a special of text: "<|bos|>" in a text is its 7
 * bytes. So neither a chat's message text nor an explicit prompt text can
 * forge one, and the plain spans of a chat (chat.h; tok_encode_spans) change
 * no id: the rule of bpe.h (message text is text, only a template's markers
 * are specials) holds here with no template marker a special at all.
 *
 * Two decoders. tok_decode gives the bytes back as they are (the exact
 * inverse of encode). The stream decoder turns ids into text a client can
 * print token by token: every chunk it emits is valid UTF-8, a character
 * split over several tokens is held until it is complete, and bytes that
 * cannot be part of valid UTF-8 come out as U+FFFD (EF BF BD), one for each
 * maximal ill-formed subpart (Unicode 15, section 3.9, "U+FFFD Substitution
 * of Maximal Subparts", the practice of the W3C encoding standard).
 * Concatenated, the stream's chunks equal that substitution applied to
 * tok_decode's output with the same flags.
 *
 * A request's text (below, tok_text_delta) is that stream's, decoded in the
 * worker and nowhere else: the replies to a poll carry, beside the ids, the
 * text they add, and the worker ends a request at its stop strings
 * (tok_stops_*). The front door and the clients print what the worker sent
 * (docs/adr/0025).
 */
#ifndef IGNIS_GPU_WORKER_TOKENIZER_H
#define IGNIS_GPU_WORKER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat.h"
#include "common/err.h"
#include "common/model.h"

/* The vocabulary's size and its end of sequence are the model description's
 * (model.h: a file of tokenizer "bytes" has exactly these ids). */
#define TOK_VOCAB MDESC_BYTES_VOCAB
#define TOK_BOS   256u
#define TOK_EOS   MDESC_BYTES_EOS
#define TOK_PAD   258u
#define TOK_UNK   259u

/* Every special's name is this long ("<|bos|>"). */
#define TOK_SPECIAL_NAME_LEN 7u

/* The most one tok_stream_push or tok_stream_flush emits: U+FFFD for a held
 * tail the id breaks (3 bytes) and a special's name (7 bytes). */
#define TOK_STREAM_MAX_OUT 10u

enum tok_flag {
	TOK_ADD_BOS = 1u << 0,      /* encode: put <|bos|> first */
	TOK_SKIP_SPECIAL = 1u << 1, /* decode and stream: specials give no bytes */
};

/* "<|bos|>" and so on for the specials; NULL for bytes and ids >= TOK_VOCAB.
 * The string is static. */
const char *tok_special_name(uint32_t id);

/*
 * Encode `len` bytes of `text` (NULL when len is 0) into ids[0..*n), with
 * <|bos|> first when flags has TOK_ADD_BOS. Flags other than TOK_ADD_BOS are
 * IG_E_INVAL. When `cap` ids are too few: IG_E_INVAL naming the size needed,
 * which also lands in *n; ids is then untouched.
 */
int tok_encode(const void *text, size_t len, unsigned flags, uint32_t *ids, size_t cap, size_t *n,
               struct ig_errbuf *eb);

/*
 * tok_encode of a text with plain spans plain[0..n_plain) (model/chat.h:
 * the caller's text in a rendered chat; the same rules as bpe_encode_spans,
 * refused alike with IG_E_INVAL by bpe_spans_check). No text ever becomes a
 * special here, inside a span or not: "<|eos|>" in a text is its 7 bytes,
 * so a chat's messages cannot forge one and the ids are tok_encode's. The
 * spans are taken so that a caller hands a chat's spans to either
 * tokenizer alike; the protocol's explicit prompt text is encoded by
 * tok_encode, by the same rule.
 */
int tok_encode_spans(const void *text, size_t len, unsigned flags, const struct chat_span *plain,
                     size_t n_plain, uint32_t *ids, size_t cap, size_t *n, struct ig_errbuf *eb);

/*
 * Decode `n` ids into out[0..*len): bytes as they are, specials as their
 * names, or nothing for specials when flags has TOK_SKIP_SPECIAL (other flags
 * are IG_E_INVAL). An id >= TOK_VOCAB is IG_E_INVAL naming the id and its
 * position. When `cap` bytes are too few: IG_E_INVAL naming the size needed,
 * which also lands in *len (so cap 0 asks the size); out is then untouched.
 */
int tok_decode(const uint32_t *ids, size_t n, unsigned flags, uint8_t *out, size_t cap, size_t *len,
               struct ig_errbuf *eb);

/* The streaming decoder: a plain struct the caller embeds; no resources, so
 * no release. `held` is the incomplete tail of a character, at most 3 bytes,
 * always a valid prefix of a UTF-8 sequence; `pos` counts the ids pushed. */
struct tok_stream {
	uint8_t held[3];
	uint8_t nheld;
	unsigned flags;
	uint64_t pos;
};

/* Start a stream; only TOK_SKIP_SPECIAL of `flags` matters. */
void tok_stream_init(struct tok_stream *s, unsigned flags);

/*
 * Push one id and emit out[0..*n): only complete, valid UTF-8 (possibly
 * nothing, while a character is incomplete). An id >= TOK_VOCAB is IG_E_INVAL
 * naming the id and its position in the stream. A `cap` below what this id
 * emits is IG_E_INVAL naming the size needed (also in *n); a cap of
 * TOK_STREAM_MAX_OUT always suffices. On an error the stream is unchanged.
 */
int tok_stream_push(struct tok_stream *s, uint32_t id, uint8_t *out, size_t cap, size_t *n,
                    struct ig_errbuf *eb);

/*
 * End of the ids: a held incomplete tail comes out as one U+FFFD. The stream
 * stays usable (empty). Too small a cap as for tok_stream_push.
 */
int tok_stream_flush(struct tok_stream *s, uint8_t *out, size_t cap, size_t *n,
                     struct ig_errbuf *eb);

/* ---- a request's text and its stop strings ---------------------------------- */

struct bpe;

/* What a model's ids mean as text: the tokenizer's kind and, for GPT2, the
 * model file's BPE (model/bpe.h), which must outlive the struct. */
struct tok_vocab {
	enum mdesc_tokenizer kind;
	const struct bpe *bpe;
	/* The most text one token of this vocabulary can add to a delta (its
	 * piece decoded, a U+FFFD for a tail it breaks and for a final one):
	 * tok_text_delta takes at least one token when cap is this large. */
	size_t token_max;
};

/* The byte-level tokenizer's and "ids only". */
extern const struct tok_vocab tok_vocab_bytes, tok_vocab_none;

/* A model's: `bpe` for GPT2 (else NULL); token_max computed over its
 * vocabulary. */
void tok_vocab_init(struct tok_vocab *v, enum mdesc_tokenizer kind, const struct bpe *bpe);

/* The longest piece a token may stand for (bpe_open refuses a vocabulary
 * with a longer one; Qwen3's longest is 128 bytes). */
#define TOK_PIECE_MAX 256u

/* The bytes token `id` adds to a request's text: BYTES a byte (ids below
 * 256; specials none), GPT2 its piece without control tokens' text
 * (bpe_piece), NONE nothing. *p is NULL when *n is 0. */
void tok_piece(const struct tok_vocab *v, uint32_t id, const uint8_t **p, size_t *n);

/* The most text one token adds to a delta: a U+FFFD for each byte of its
 * piece and one for a tail it breaks, then a final tail's U+FFFD. */
#define TOK_TEXT_TOKEN_MAX (3u * (TOK_PIECE_MAX + 1u) + 3u)

/*
 * The text that tokens out[from..to) add to the output out[0..to) of a model
 * whose ids mean `v`: the stream decoder's (TOK_SKIP_SPECIAL) complete
 * characters of out[0..from + k) beyond those of out[0..from), for the k
 * tokens taken. A character split over tokens comes whole with the token
 * that completes it; specials give nothing; kind NONE gives no text at all;
 * the byte 0 gives U+FFFD (the protocol's strings hold no NUL; the ids say
 * which byte it was), so the text is valid UTF-8 without NUL.
 * With `end` (out[0..to) is the whole output of a finished request) and
 * every token taken, an incomplete tail left at the end adds its U+FFFD
 * (tok_stream_flush), also when from == to. Tokens are taken in order while
 * their text fits in `cap` bytes: *n of them (to - from when all fit, at
 * least one when cap >= v->token_max, at most TOK_TEXT_TOKEN_MAX), *len bytes into text. With
 * `ends` (room for to - from), ends[i] is the text's bytes once token
 * from + i is added (the final tail's U+FFFD not counted). The decoder's
 * state at `from` is found from the bytes before it (at most 3 matter), so
 * the same arguments always give the same text: a reader that asks again
 * from the same index gets it again.
 */
void tok_text_delta(const struct tok_vocab *v, const uint32_t *out, uint32_t from, uint32_t to,
                    bool end, char *text, size_t cap, uint32_t *ends, uint32_t *n, size_t *len);

/* Stop strings of a request: at most 8, each 1..64 bytes (the protocol's
 * submit.stop). A plain struct the caller embeds; no resources. */
#define TOK_STOP_MAX   8u
#define TOK_STOP_BYTES 64u

struct tok_stops {
	uint32_t n, longest;
	uint8_t len[TOK_STOP_MAX];
	uint8_t s[TOK_STOP_MAX][TOK_STOP_BYTES];
};

/* Add one stop string of `len` bytes (after the others: the first one that
 * matches at a token wins). IG_E_INVAL naming the limit for a ninth, an
 * empty one or one longer than TOK_STOP_BYTES; *st is then unchanged. */
int tok_stops_add(struct tok_stops *st, const void *s, size_t len, struct ig_errbuf *eb);

/*
 * Once out[n - 1] joined the output out[0..n) (ids meaning `v`): n when no
 * stop string ends the output's bytes (the tokens' pieces, tok_piece)
 * there, else the tokens to keep, those before the token that holds the
 * first byte of the first stop string (in the order added) that does. Only
 * a token with bytes can end one. NULL or no stop strings: n.
 */
uint32_t tok_stops_check(const struct tok_stops *st, const struct tok_vocab *v,
                         const uint32_t *out, uint32_t n);

/* The tokens of a running request's output out[0..n) a reader may see: all
 * but the token holding the first of the last (longest - 1) bytes and those
 * after it, which could still begin a stop string. NULL or no stop strings:
 * n. A finished request shows all its (kept) tokens. */
uint32_t tok_stops_visible(const struct tok_stops *st, const struct tok_vocab *v,
                           const uint32_t *out, uint32_t n);

#endif
