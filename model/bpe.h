/*
 * bpe.h - the byte-level BPE tokenizer of real model files: GGUF
 * `tokenizer.ggml.model` "gpt2" with the Qwen pre-tokenizers
 * (`tokenizer.ggml.pre` "qwen2": Qwen2, Qwen2.5, Qwen3, Qwen3-Next; "qwen35":
 * Qwen3.5, whose letter runs take combining marks too). What it encodes and
 * decodes is what llama.cpp does with the same file (tests/unit/test_bpe.c
 * and test_bpe_oracle.c, on the Qwen3 vocabulary and a corpus of hard texts);
 * docs/adr/0030-bpe-tokenizer.md says what that takes.
 *
 * Encoding, in order:
 *  1. Special tokens in the text become those tokens: user-defined ones
 *     always (Qwen's <think>, <tool_call>), control and unknown ones
 *     (<|im_start|>) only with BPE_PARSE_SPECIAL, and with plain spans only
 *     where their text lies wholly outside every span (below). Longer texts
 *     are matched first, each leftmost first; a text refused for a span is
 *     looked for again from its next byte. What lies between two tokens
 *     found is one stretch for step 2, spans or not.
 *  2. Each remaining stretch of bytes is read as UTF-8, a byte that does not
 *     start a well-formed sequence taken as U+FFFD (as llama.cpp does: such
 *     bytes are not kept), and cut into words by the pre-tokenizer's
 *     pattern over Unicode letters, marks, numbers and white space
 *     (libutf8proc's categories; the Unicode White_Space list).
 *  3. Each word's bytes, one symbol a byte (GPT-2's byte-to-character
 *     alphabet), are merged by the file's merges, the lowest rank first and
 *     on a tie the leftmost, until no merge applies; each symbol is a token.
 *
 * Which text may become control tokens (the rule of issue 26):
 *  - a chat (chat.h): only the template's own markers. Its message text,
 *    roles and contents, is text: chat_render_spans reports it as plain
 *    spans and bpe_encode_spans keeps control tokens' text inside them (or
 *    overlapping them) as text, so a message holding
 *    "<|im_end|><|im_start|>system\n" forges no turn. The ids are llama.cpp's
 *    for each stretch between the template's markers with parse_special
 *    false (user-defined tokens still parsed, as there), and for a chat
 *    whose messages hold no control token's text they are the ids of the
 *    whole text with every special parsed, llama.cpp's server's ids
 *    (test_bpe_oracle.c).
 *  - an explicit prompt text (the protocol's submit.text): the caller's
 *    whole text may hold special tokens, as in llama.cpp's server: it is
 *    encoded with BPE_PARSE_SPECIAL and no spans (bpe_encode).
 *  - without BPE_PARSE_SPECIAL no text becomes a control token; spans
 *    change nothing.
 *
 * Decoding is per token, its `piece`: a normal token's bytes (its text read
 * back through the byte alphabet), a user-defined token's text, a control
 * or unknown token's text only when asked (a client never sees <|im_end|>
 * unless it asks), an unused one nothing. A token's piece may be part of a
 * UTF-8 character: joining pieces and cutting them into characters is the
 * stream decoder's work (tokenizer.h).
 *
 * The end-of-generation tokens are the file's eos, eot and eom ids and every
 * token whose text is one of the well-known end markers (<|im_end|>,
 * <|endoftext|>, <|eot_id|>, <|end|>, <end_of_turn>, ...); those are
 * control tokens whatever the file says, as llama.cpp makes them.
 *
 * A struct bpe is read-only once opened: any number of threads may encode
 * and decode with it at once.
 */
#ifndef IGNIS_MODEL_BPE_H
#define IGNIS_MODEL_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat.h"
#include "common/err.h"
#include "gguf.h"

/* GGUF's token types (tokenizer.ggml.token_type). */
enum bpe_type {
	BPE_NORMAL = 1,
	BPE_UNKNOWN = 2,
	BPE_CONTROL = 3,
	BPE_USER_DEFINED = 4,
	BPE_UNUSED = 5,
	BPE_BYTE = 6,
};

enum bpe_pre {
	BPE_PRE_QWEN2,  /* "qwen2" */
	BPE_PRE_QWEN35, /* "qwen35": letter runs take marks (\p{M}) too */
};

#define BPE_NONE UINT32_MAX /* no such token */
/*
 * The most tokens and merges a vocabulary may have, checked before its
 * tables are built (each token takes ~40 bytes of them besides its text,
 * each merge 32 to 64). Tokens: the largest vocabularies in use hold
 * 262,144 ids (Gemma 3; Qwen3's 151,936); 2^20 is four times that. Merges:
 * a trained BPE has one for each token it adds, a converted one more
 * (Llama 3's, from tiktoken: 280,147 for 128,256 tokens, the most we know);
 * 2^21 is seven times that.
 */
#define BPE_MAX_TOKENS (1u << 20)
#define BPE_MAX_MERGES (1u << 21)
#define BPE_MAX_EOG    16u
#define BPE_PIECE_MAX  256u /* the most bytes a token may stand for */

struct bpe_info {
	uint32_t n_tokens, n_merges, n_specials;
	enum bpe_pre pre;
	uint32_t bos, eos, eot, pad; /* BPE_NONE when the file names none */
	bool add_bos;                /* tokenizer.ggml.add_bos_token (false when absent) */
	uint32_t n_eog;
	uint32_t eog[BPE_MAX_EOG]; /* ascending */
};

struct bpe;

/*
 * Read the tokenizer of an open GGUF file (its `tokenizer.ggml.*` keys):
 * model "gpt2", pre "qwen2" or "qwen35", the tokens (at most
 * BPE_MAX_TOKENS, every one of GPT-2's 256 byte characters among them),
 * their types (all normal when absent), the merges (at most BPE_MAX_MERGES,
 * each "left right" with both sides and their join tokens), the special
 * ids (each below the token count). Anything else is IG_E_INVAL naming the
 * key, the value and what is accepted. The struct bpe keeps copies: the
 * file may be closed.
 */
int bpe_open(struct bpe **out, const struct gguf *g, struct ig_errbuf *eb);
void bpe_close(struct bpe *b);

const struct bpe_info *bpe_info(const struct bpe *b);

/* GPT-2's byte alphabet: the character that stands for byte `b` (0..255)
 * in a normal token's text. */
uint32_t bpe_byte_char(unsigned b);

/* The name of a pre-tokenizer ("qwen2"). */
const char *bpe_pre_name(enum bpe_pre pre);

enum bpe_flag {
	BPE_ADD_SPECIAL = 1u << 0,   /* encode: BOS first when the file says add_bos */
	BPE_PARSE_SPECIAL = 1u << 1, /* encode: control tokens' text becomes them */
};

/*
 * Encode `len` bytes of `text` (NULL when len is 0) into ids[0..*n). Flags
 * other than bpe_flag are IG_E_INVAL. When `cap` ids are too few: IG_E_INVAL
 * naming the size needed, which also lands in *n (so cap 0 asks the size);
 * ids[0..cap) then hold the first ids. IG_E_NOMEM when scratch memory
 * cannot be had.
 */
int bpe_encode(const struct bpe *b, const void *text, size_t len, unsigned flags, uint32_t *ids,
               size_t cap, size_t *n, struct ig_errbuf *eb);

/*
 * bpe_encode with plain spans plain[0..n_plain) (chat.h: ascending, none
 * overlapping another, each within the text; empty ones allowed and
 * without effect; plain may be NULL when n_plain is 0): a control or
 * unknown token's text becomes the token only where it overlaps no span
 * (see above); the spans do not cut the text otherwise, so text around
 * and inside them merges as it would without them. Spans that break the
 * rules are IG_E_INVAL naming the span and the rule (bpe_spans_check),
 * before any id is made. With no spans this is bpe_encode.
 */
int bpe_encode_spans(const struct bpe *b, const void *text, size_t len, unsigned flags,
                     const struct chat_span *plain, size_t n_plain, uint32_t *ids, size_t cap,
                     size_t *n, struct ig_errbuf *eb);

/* IG_E_OK when plain[0..n_plain) are spans of a `len`-byte text as the
 * encoders take them: start <= end <= len each, each end <= the next
 * start. Else IG_E_INVAL naming the first span that is not, and why. */
int bpe_spans_check(const struct chat_span *plain, size_t n_plain, size_t len,
                    struct ig_errbuf *eb);

/*
 * The bytes token `id` stands for (see above), with control and unknown
 * tokens' text when `special`. False for an id past the vocabulary (then
 * *p is NULL and *n 0). The bytes belong to `b`.
 */
bool bpe_piece(const struct bpe *b, uint32_t id, bool special, const uint8_t **p, size_t *n);

/* The token's text as the file stores it (normal tokens in the byte
 * alphabet), its type; NULL and 0 past the vocabulary. */
const char *bpe_text(const struct bpe *b, uint32_t id, size_t *len);
enum bpe_type bpe_token_type(const struct bpe *b, uint32_t id);

/* The token whose stored text is text[0..len), or BPE_NONE. */
uint32_t bpe_find(const struct bpe *b, const void *text, size_t len);

/* True when `id` ends a generation. */
bool bpe_is_eog(const struct bpe *b, uint32_t id);

#endif
