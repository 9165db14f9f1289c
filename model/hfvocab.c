/*
 * hfvocab.c - tokenizer.json to GGUF tokenizer keys (hfvocab.h), with jansson.
 */
#include "hfvocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bpe.h"

struct tok {
	const char *text; /* owned by the JSON document */
	size_t len;
	int32_t type;
};

static int find_text(const struct tok *t, uint32_t n, const char *what, const char *text,
                     uint32_t *id, struct ig_errbuf *eb)
{
	size_t len = strlen(text);

	for (uint32_t i = 0; i < n; i++)
		if (t[i].text && t[i].len == len && !memcmp(t[i].text, text, len)) {
			*id = i;
			return IG_E_OK;
		}
	return ig_errf(eb, IG_E_INVAL, "%s '%s' is no token of the vocabulary", what, text);
}

/* Merges come as "a b" strings or, in newer files, as ["a", "b"] pairs. */
static int merge_text(json_t *m, size_t i, char **out, struct ig_errbuf *eb)
{
	if (json_is_string(m)) {
		*out = strdup(json_string_value(m));
	} else if (json_is_array(m) && json_array_size(m) == 2 &&
	           json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
		const char *a = json_string_value(json_array_get(m, 0));
		const char *b = json_string_value(json_array_get(m, 1));
		size_t la = strlen(a), lb = strlen(b);

		if ((*out = malloc(la + lb + 2))) {
			memcpy(*out, a, la);
			(*out)[la] = ' ';
			memcpy(*out + la + 1, b, lb + 1);
		}
	} else
		return ig_errf(eb, IG_E_INVAL,
		               "model.merges[%zu] is neither \"left right\" nor [\"left\", \"right\"]", i);
	return *out ? IG_E_OK : ig_errf(eb, IG_E_NOMEM, "merges");
}

int hfvocab_add(struct gguf_writer *w, const char *path, const struct hfvocab_opts *o,
                struct hfvocab_stats *st, struct ig_errbuf *eb)
{
	json_error_t je;
	json_t *root = json_load_file(path, 0, &je);
	json_t *model, *vocab, *merges, *added, *v;
	struct tok *t = NULL;
	struct gguf_str *strs = NULL;
	int32_t *types = NULL;
	char **mt = NULL;
	char (*pads)[24] = NULL;
	const char *key;
	uint32_t n = 0, n_merges = 0;
	size_t i;
	int rc = IG_E_OK;

	memset(st, 0, sizeof(*st));
	if (!root)
		return ig_errf(eb, IG_E_IO, "%s: line %d, column %d: %s", path, je.line, je.column,
		               je.text);
	model = json_object_get(root, "model");
	vocab = json_object_get(model, "vocab");
	merges = json_object_get(model, "merges");
	added = json_object_get(root, "added_tokens");
	if (!json_is_object(model) || !json_is_string(json_object_get(model, "type")) ||
	    strcmp(json_string_value(json_object_get(model, "type")), "BPE")) {
		rc = ig_errf(eb, IG_E_INVAL, "%s: model.type is not \"BPE\"", path);
		goto out;
	}
	if (!json_is_object(vocab) || !json_is_array(merges)) {
		rc = ig_errf(eb, IG_E_INVAL, "%s: model.vocab (an object) or model.merges (an array) "
		             "is missing", path);
		goto out;
	}
	/* the ids in use */
	json_object_foreach(vocab, key, v) {
		json_int_t id = json_integer_value(v);

		if (!json_is_integer(v) || id < 0 || id >= BPE_MAX_TOKENS) {
			rc = ig_errf(eb, IG_E_INVAL, "%s: model.vocab['%s'] is not an id below %u", path,
			             key, BPE_MAX_TOKENS);
			goto out;
		}
		if ((uint32_t)id + 1 > n)
			n = (uint32_t)id + 1;
	}
	json_array_foreach(added, i, v) {
		json_int_t id = json_integer_value(json_object_get(v, "id"));

		if (!json_is_string(json_object_get(v, "content")) || id < 0 || id >= BPE_MAX_TOKENS) {
			rc = ig_errf(eb, IG_E_INVAL, "%s: added_tokens[%zu] has no content or id", path,
			             i);
			goto out;
		}
		if ((uint32_t)id + 1 > n)
			n = (uint32_t)id + 1;
	}
	if (o->n_vocab) {
		if (o->n_vocab < n) {
			rc = ig_errf(eb, IG_E_INVAL, "%s: token ids reach %u, past the %u asked", path,
			             n - 1, o->n_vocab);
			goto out;
		}
		n = o->n_vocab;
	}
	t = calloc(n, sizeof(*t));
	strs = calloc(n, sizeof(*strs));
	types = calloc(n, sizeof(*types));
	pads = calloc(n, sizeof(*pads));
	if (!t || !strs || !types || !pads) {
		rc = ig_errf(eb, IG_E_NOMEM, "%u tokens", n);
		goto out;
	}
	json_object_foreach(vocab, key, v) {
		uint32_t id = (uint32_t)json_integer_value(v);

		if (t[id].text) {
			rc = ig_errf(eb, IG_E_INVAL, "%s: id %u is both '%s' and '%s'", path, id,
			             t[id].text, key);
			goto out;
		}
		t[id] = (struct tok){key, strlen(key), BPE_NORMAL};
		st->n_tokens++;
	}
	json_array_foreach(added, i, v) {
		uint32_t id = (uint32_t)json_integer_value(json_object_get(v, "id"));
		const char *c = json_string_value(json_object_get(v, "content"));

		if (t[id].text && strcmp(t[id].text, c)) {
			rc = ig_errf(eb, IG_E_INVAL, "%s: id %u is both '%s' and '%s'", path, id,
			             t[id].text, c);
			goto out;
		}
		t[id] = (struct tok){c, strlen(c),
		                     json_is_true(json_object_get(v, "special")) ? BPE_CONTROL
		                                                                 : BPE_USER_DEFINED};
		st->n_added++;
		st->n_special += t[id].type == BPE_CONTROL;
	}
	for (uint32_t k = 0; k < n; k++) {
		if (!t[k].text) {
			snprintf(pads[k], sizeof pads[k], "[PAD%u]", k);
			t[k] = (struct tok){pads[k], strlen(pads[k]), BPE_UNUSED};
			st->n_padding++;
		}
		strs[k] = (struct gguf_str){.ptr = t[k].text, .len = t[k].len};
		types[k] = t[k].type;
	}
	if (json_array_size(merges) >= UINT32_MAX) {
		rc = ig_errf(eb, IG_E_INVAL, "%s: too many merges", path);
		goto out;
	}
	n_merges = (uint32_t)json_array_size(merges);
	if (!(mt = calloc(n_merges ? n_merges : 1, sizeof(*mt)))) {
		rc = ig_errf(eb, IG_E_NOMEM, "merges");
		goto out;
	}
	json_array_foreach(merges, i, v) {
		if ((rc = merge_text(v, i, &mt[i], eb)))
			goto out;
	}
	st->n_merges = n_merges;
	gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
	gguf_writer_add_str(w, "tokenizer.ggml.pre", o->pre ? o->pre : "qwen2");
	gguf_writer_add_arr_strn(w, "tokenizer.ggml.tokens", strs, n);
	gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n);
	gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)mt, n_merges);
	{
		const char *names[3] = {o->bos, o->eos, o->pad};
		const char *keys[3] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
		                       "tokenizer.ggml.padding_token_id"};

		for (int k = 0; k < 3; k++) {
			uint32_t id = 0;

			if (!names[k])
				continue;
			if ((rc = find_text(t, n, keys[k], names[k], &id, eb)))
				goto out;
			gguf_writer_add_u32(w, keys[k], id);
		}
	}
	gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", o->add_bos);
	if (o->config) {
		json_error_t ce;
		json_t *cfg = json_load_file(o->config, 0, &ce);
		json_t *tmpl = json_object_get(cfg, "chat_template");

		if (!cfg) {
			rc = ig_errf(eb, IG_E_IO, "%s: line %d, column %d: %s", o->config, ce.line,
			             ce.column, ce.text);
			goto out;
		}
		if (!json_is_string(tmpl)) {
			json_decref(cfg);
			rc = ig_errf(eb, IG_E_INVAL, "%s: no chat_template string", o->config);
			goto out;
		}
		gguf_writer_add_strn(w, "tokenizer.chat_template", json_string_value(tmpl),
		                     json_string_length(tmpl));
		json_decref(cfg);
	}
	if (w->err.code)
		rc = ig_errf(eb, w->err.code, "%s", w->err.msg);
out:
	if (mt)
		for (uint32_t k = 0; k < n_merges; k++)
			free(mt[k]);
	free(mt);
	free(pads);
	free(types);
	free(strs);
	free(t);
	json_decref(root);
	return rc;
}
