/* chat.c - chat templates recognised and rendered (chat.h). */
#define _GNU_SOURCE /* memmem */
#include "chat.h"

#include <string.h>

static bool holds(const char *t, size_t len, const char *what)
{
	return memmem(t, len, what, strlen(what)) != NULL;
}

int chat_template_of(const char *tmpl, size_t len, struct chat_template *out,
                     struct ig_errbuf *eb)
{
	if (!tmpl || !len)
		return ig_errf(eb, IG_E_INVAL,
		               "no chat template (tokenizer.chat_template is missing or empty); "
		               "accepted: a ChatML template (the Qwen families)");
	if (!holds(tmpl, len, "<|im_start|>") || holds(tmpl, len, "<|im_sep|>") ||
	    holds(tmpl, len, "<end_of_utterance>"))
		return ig_errf(eb, IG_E_INVAL,
		               "a chat template we do not render ('%.*s...'); accepted: ChatML "
		               "(<|im_start|>role ... <|im_end|>, the Qwen families)",
		               (int)(len < 40 ? len : 40), tmpl);
	out->format = CHAT_CHATML;
	out->thinking = holds(tmpl, len, "enable_thinking");
	return IG_E_OK;
}

/* Appends while there is room; counts all. With `plain`, each stretch of
 * the caller's text that is not empty is noted as a plain span, again while
 * there is room, all counted. */
struct sink {
	char *out;
	size_t cap, len;
	bool plain;
	struct chat_span *spans;
	size_t spans_cap, n_spans;
};

static void put(struct sink *s, const char *p, size_t n)
{
	if (s->len + n <= s->cap && n)
		memcpy(s->out + s->len, p, n);
	s->len += n;
}

static void puts_(struct sink *s, const char *p)
{
	put(s, p, strlen(p));
}

/* The caller's text: a role or a content. */
static void put_plain(struct sink *s, const char *p, size_t n)
{
	if (s->plain && n) {
		if (s->n_spans < s->spans_cap)
			s->spans[s->n_spans] = (struct chat_span){s->len, s->len + n};
		s->n_spans++;
	}
	put(s, p, n);
}

int chat_render_spans(const struct chat_template *t, const struct chat_msg *msgs, size_t n,
                      unsigned flags, char *out, size_t cap, size_t *len, struct chat_span *spans,
                      size_t spans_cap, size_t *n_spans, struct ig_errbuf *eb)
{
	struct sink s = {out, cap, 0, n_spans != NULL, spans, spans_cap, 0};

	*len = 0;
	if (s.plain)
		*n_spans = 0;
	if (flags & ~(unsigned)(CHAT_GENERATION_PROMPT | CHAT_NO_THINKING))
		return ig_errf(eb, IG_E_INVAL, "chat_render: unknown flags 0x%x", flags);
	if ((flags & CHAT_NO_THINKING) && !t->thinking)
		return ig_errf(eb, IG_E_INVAL,
		               "thinking off: this chat template cannot turn thinking off (it has "
		               "no enable_thinking)");
	if ((flags & CHAT_NO_THINKING) && !(flags & CHAT_GENERATION_PROMPT))
		return ig_errf(eb, IG_E_INVAL,
		               "thinking off closes the assistant's reasoning: it needs the "
		               "generation prompt");
	for (size_t i = 0; i < n; i++) {
		puts_(&s, "<|im_start|>");
		put_plain(&s, msgs[i].role, msgs[i].role_len);
		puts_(&s, "\n");
		put_plain(&s, msgs[i].content, msgs[i].content_len);
		puts_(&s, "<|im_end|>\n");
	}
	if (flags & CHAT_GENERATION_PROMPT)
		puts_(&s, "<|im_start|>assistant\n");
	if (flags & CHAT_NO_THINKING)
		puts_(&s, "<think>\n\n</think>\n\n");
	*len = s.len;
	if (s.plain)
		*n_spans = s.n_spans;
	if (s.len > cap && s.plain && s.n_spans > spans_cap)
		return ig_errf(eb, IG_E_INVAL,
		               "the conversation renders to %zu bytes and %zu plain spans; room "
		               "for %zu and %zu",
		               s.len, s.n_spans, cap, spans_cap);
	if (s.len > cap)
		return ig_errf(eb, IG_E_INVAL, "the conversation renders to %zu bytes; room for %zu",
		               s.len, cap);
	if (s.plain && s.n_spans > spans_cap)
		return ig_errf(eb, IG_E_INVAL, "the conversation has %zu plain spans; room for %zu",
		               s.n_spans, spans_cap);
	return IG_E_OK;
}

int chat_render(const struct chat_template *t, const struct chat_msg *msgs, size_t n,
                unsigned flags, char *out, size_t cap, size_t *len, struct ig_errbuf *eb)
{
	return chat_render_spans(t, msgs, n, flags, out, cap, len, NULL, 0, NULL, eb);
}
