/*
 * tokenize.h - the supervisor's own reading of the model's tokenizer, for
 * POST /tokenize, /detokenize and Anthropic's count_tokens only (docs/adr/
 * 0058): a prompt encoded exactly as the worker encodes a submit, and a
 * token's piece. A generation's text is never decoded here: only the
 * worker decodes it (docs/adr/0025); tests/unit/one-decoder.sh keeps every
 * other file of supervisor/ and client/ away from the tokenizer, and this
 * one away from its stream decoder and stop strings.
 */
#ifndef IGNIS_SUPERVISOR_TOKENIZE_H
#define IGNIS_SUPERVISOR_TOKENIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/model.h"
#include "model/chat.h"

struct bpe;

/* The ids of a model whose tokenizer is `kind` (GPT2: `b`'s). */
uint32_t stok_vocab(enum mdesc_tokenizer kind, const struct bpe *b);

/* The bytes token `id` stands for, a special token's text included (what
 * /detokenize gives back). False past the vocabulary. */
bool stok_piece(enum mdesc_tokenizer kind, const struct bpe *b, uint32_t id, const uint8_t **p,
                size_t *n);

/* text[0..len) encoded by the worker's rule: special tokens' text parsed
 * outside the plain spans, BOS where the file asks (add_special). Into
 * ids (room for cap); *n of them. */
int stok_encode(enum mdesc_tokenizer kind, const struct bpe *b, const char *text, size_t len,
                const struct chat_span *spans, size_t nsp, bool add_special, uint32_t *ids,
                size_t cap, size_t *n, struct ig_errbuf *eb);

#endif
