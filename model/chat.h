/*
 * chat.h - a conversation rendered as a model file's chat template says
 * (`tokenizer.chat_template`), the way llama.cpp renders it without a Jinja
 * engine (llama_chat_apply_template): the template is recognised by what it
 * holds, and a fixed renderer writes its format.
 *
 * ChatML (the Qwen families: a template holding "<|im_start|>", without
 * "<|im_sep|>" or "<end_of_utterance>", which mark other formats): each
 * message is
 *     <|im_start|>ROLE\nCONTENT<|im_end|>\n
 * and the generation prompt, when asked, "<|im_start|>assistant\n". With
 * thinking off (Qwen3's enable_thinking=false; only for a template that
 * knows it), an empty reasoning block "<think>\n\n</think>\n\n" follows the
 * generation prompt, as Qwen3's template writes it. For a conversation
 * without reasoning in its history that is Qwen3's own template's output
 * too (test_chat checks it against llama.cpp on the real template).
 *
 * Roles and contents are copied as they are; the caller tokenizes the result
 * with the special tokens' text parsed (bpe.h, BPE_PARSE_SPECIAL), as
 * llama.cpp's server does.
 */
#ifndef IGNIS_MODEL_CHAT_H
#define IGNIS_MODEL_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"

enum chat_format { CHAT_CHATML = 1 };

struct chat_template {
	enum chat_format format;
	bool thinking; /* the template can turn reasoning off (enable_thinking) */
};

struct chat_msg {
	const char *role, *content;
	size_t role_len, content_len;
};

enum chat_flag {
	CHAT_GENERATION_PROMPT = 1u << 0, /* end with the assistant's turn opened */
	CHAT_NO_THINKING = 1u << 1,       /* ... and its reasoning closed empty */
};

/* The format of template text tmpl[0..len). NULL or empty: IG_E_INVAL (the
 * file has none); one we do not render: IG_E_INVAL naming what we render. */
int chat_template_of(const char *tmpl, size_t len, struct chat_template *out,
                     struct ig_errbuf *eb);

/*
 * Render n messages into out[0..*len). CHAT_NO_THINKING needs
 * CHAT_GENERATION_PROMPT and a template that knows thinking (else
 * IG_E_INVAL). When `cap` bytes are too few: IG_E_INVAL naming the size
 * needed, which also lands in *len (so cap 0 asks the size).
 */
int chat_render(const struct chat_template *t, const struct chat_msg *msgs, size_t n,
                unsigned flags, char *out, size_t cap, size_t *len, struct ig_errbuf *eb);

#endif
