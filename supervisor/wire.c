/* wire.c - helpers shared by the APIs beside OpenAI's chat (see wire.h). */
#include "wire.h"

#include <stdlib.h>
#include <string.h>

json_t *wire_text(const char *text, size_t len)
{
	json_t *s = json_stringn(text ? text : "", text ? len : 0);
	char *t;
	size_t o = 0;

	if (s)
		return s;
	/* not UTF-8 (the worker's text is; a test's may not be): the longest
	 * valid sequence at each point kept, each other byte as U+FFFD */
	if (!(t = malloc(len * 3 + 1)))
		return NULL;
	for (size_t i = 0; i < len;) {
		size_t n = 1;
		unsigned char c = (unsigned char)text[i];

		if (c >= 0xc0)
			n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
		if (c < 0x80) {
			t[o++] = (char)c;
			i++;
			continue;
		}
		if (c >= 0xc0 && i + n <= len) {
			json_t *try = json_stringn(text + i, n);

			if (try) {
				json_decref(try);
				memcpy(t + o, text + i, n);
				o += n;
				i += n;
				continue;
			}
		}
		memcpy(t + o, "\xef\xbf\xbd", 3);
		o += 3;
		i++;
	}
	s = json_stringn(t, o);
	free(t);
	return s;
}

char *wire_dump(json_t *root)
{
	char *s = root ? json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;

	json_decref(root);
	return s;
}

bool wire_sse(const struct wire_sink *s, const char *name, json_t *root)
{
	char *json = wire_dump(root);
	bool ok;

	if (!json)
		return false;
	ok = s->put(s->ctx, "event: ", 7) && s->put(s->ctx, name, strlen(name)) &&
	     s->put(s->ctx, "\ndata: ", 7) && s->put(s->ctx, json, strlen(json)) &&
	     s->put(s->ctx, "\n\n", 2);
	free(json);
	return ok;
}

const char *wire_tail(const char *rid)
{
	const char *t = strchr(rid, '-');

	return t ? t + 1 : rid;
}

bool wire_grow(char **p, size_t *len, const char *s, size_t n)
{
	char *q = realloc(*p, *len + n + 1);

	if (!q)
		return false;
	if (n)
		memcpy(q + *len, s, n);
	*len += n;
	q[*len] = '\0';
	*p = q;
	return true;
}
