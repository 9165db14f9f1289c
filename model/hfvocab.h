/*
 * hfvocab.h - a Hugging Face `tokenizer.json` (byte-level BPE) turned into
 * GGUF's tokenizer keys, as llama.cpp's converter writes them:
 *
 *   tokenizer.ggml.model       "gpt2"
 *   tokenizer.ggml.pre         the caller's ("qwen2", "qwen35")
 *   tokenizer.ggml.tokens      ids 0..n-1; an id no token holds is "[PAD<id>]"
 *                              (at most as many as the tokens, or to n_vocab)
 *   tokenizer.ggml.token_type  normal; an added token control when marked
 *                              special, user-defined otherwise; padding unused
 *   tokenizer.ggml.merges      "left right", in rank order (either JSON form)
 *   tokenizer.ggml.{bos,eos,padding}_token_id   from the token texts given
 *   tokenizer.ggml.add_bos_token
 *   tokenizer.chat_template    from tokenizer_config.json, when given
 *
 * Used by ignis-vocab (tools/vocab.c) and the tests: real vocabularies for
 * the files we write, so that llama.cpp and we read the same tokenizer.
 */
#ifndef IGNIS_MODEL_HFVOCAB_H
#define IGNIS_MODEL_HFVOCAB_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "gguf.h"

struct hfvocab_opts {
	const char *pre;                /* tokenizer.ggml.pre; NULL: "qwen2" */
	uint32_t n_vocab;               /* ids written (the model's rows); 0: the tokens' */
	const char *bos, *eos, *pad;    /* token texts; NULL: the key is not written */
	bool add_bos;
	/* A Hugging Face tokenizer_config.json whose chat_template becomes
	 * tokenizer.chat_template; NULL: none written. */
	const char *config;
};

/* What was read, for the caller's report. */
struct hfvocab_stats {
	uint32_t n_tokens, n_added, n_special, n_padding, n_merges;
};

/*
 * Read `path` and add the keys above to `w`. IG_E_IO when the file cannot be
 * read or is not JSON (with the line and column), IG_E_INVAL naming what is
 * not a byte-level BPE (model.type, a missing vocab or merges, an id that is
 * not a whole number, used twice, or past its bound, a named bos/eos/pad
 * that is no token). The bound on ids: below n_vocab when it is given, else
 * below twice the entries the file gives (hfvocab.c, id_bound), so that the
 * vocabulary written stays a small multiple of the file read.
 */
int hfvocab_add(struct gguf_writer *w, const char *path, const struct hfvocab_opts *o,
                struct hfvocab_stats *st, struct ig_errbuf *eb);

#endif
