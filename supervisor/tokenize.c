/* tokenize.c - the supervisor's reading of the model's tokenizer (tokenize.h). */
#include "tokenize.h"

#include <string.h>

#include "model/bpe.h"
#include "model/tokenizer.h"

/* Each byte's own value: the byte-level tokenizer's ids below 256. */
static const uint8_t stok__bytes[256] = {
#define STOK_B4(i)  (i), (i) + 1, (i) + 2, (i) + 3
#define STOK_B16(i) STOK_B4(i), STOK_B4((i) + 4), STOK_B4((i) + 8), STOK_B4((i) + 12)
#define STOK_B64(i) STOK_B16(i), STOK_B16((i) + 16), STOK_B16((i) + 32), STOK_B16((i) + 48)
    STOK_B64(0), STOK_B64(64), STOK_B64(128), STOK_B64(192)};

uint32_t stok_vocab(enum mdesc_tokenizer kind, const struct bpe *b)
{
	if (kind == MDESC_TOK_GPT2)
		return bpe_info(b)->n_tokens;
	return kind == MDESC_TOK_BYTES ? TOK_VOCAB : 0;
}

bool stok_piece(enum mdesc_tokenizer kind, const struct bpe *b, uint32_t id, const uint8_t **p,
                size_t *n)
{
	const char *name;

	*p = NULL;
	*n = 0;
	if (kind == MDESC_TOK_GPT2)
		return bpe_piece(b, id, true, p, n);
	if (kind != MDESC_TOK_BYTES || id >= TOK_VOCAB)
		return false;
	if ((name = tok_special_name(id))) {
		*p = (const uint8_t *)name;
		*n = strlen(name);
	} else {
		*p = &stok__bytes[id];
		*n = 1;
	}
	return true;
}

int stok_encode(enum mdesc_tokenizer kind, const struct bpe *b, const char *text, size_t len,
                const struct chat_span *spans, size_t nsp, bool add_special, uint32_t *ids,
                size_t cap, size_t *n, struct ig_errbuf *eb)
{
	if (kind == MDESC_TOK_GPT2)
		return bpe_encode_spans(b, text, len,
		                        BPE_PARSE_SPECIAL | (add_special ? BPE_ADD_SPECIAL : 0),
		                        spans, nsp, ids, cap, n, eb);
	return tok_encode_spans(text, len, 0, spans, nsp, ids, cap, n, eb);
}
