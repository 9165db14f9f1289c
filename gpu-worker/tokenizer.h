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
 * Two decoders. tok_decode gives the bytes back as they are (the exact
 * inverse of encode). The stream decoder turns ids into text a client can
 * print token by token: every chunk it emits is valid UTF-8, a character
 * split over several tokens is held until it is complete, and bytes that
 * cannot be part of valid UTF-8 come out as U+FFFD (EF BF BD), one for each
 * maximal ill-formed subpart (Unicode 15, section 3.9, "U+FFFD Substitution
 * of Maximal Subparts", the practice of the W3C encoding standard).
 * Concatenated, the stream's chunks equal that substitution applied to
 * tok_decode's output with the same flags.
 */
#ifndef IGNIS_GPU_WORKER_TOKENIZER_H
#define IGNIS_GPU_WORKER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define TOK_VOCAB 260u
#define TOK_BOS   256u
#define TOK_EOS   257u
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

#endif
