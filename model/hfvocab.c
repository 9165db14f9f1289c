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

/* A token's text in a message: its first 40 bytes. */
#define TEXT_CAP(s) (int)(strlen(s) > 40 ? 40 : strlen(s)), (s)

/*
 * The ids a tokenizer.json may use: below --n-vocab when it is given (the
 * caller asks for those rows, up to BPE_MAX_TOKENS); otherwise below twice
 * the entries the file gives (model.vocab and added_tokens). Ids no token
 * holds become padding tokens ("[PAD<id>]": some 20 bytes of the GGUF file
 * and 70 of memory here each), so at most as many as the tokens given: what
 * is written stays within a small multiple of what was read, where one
 * added token of id 2^24 - 1 in a 3 KB file made a 408 MB vocabulary
 * (issue 26). Real files are dense (Qwen3: ids 0..151,668 for 151,669
 * entries).
 */
static uint32_t id_bound(size_t given, uint32_t n_vocab)
{
	if (n_vocab)
		return n_vocab;
	return given < BPE_MAX_TOKENS / 2 ? (uint32_t)(2 * given) : BPE_MAX_TOKENS;
}

static int id_refused(struct ig_errbuf *eb, const char *path, const char *what, json_int_t id,
                      size_t given, uint32_t bound, uint32_t n_vocab)
{
	if (n_vocab)
		return ig_errf(eb, IG_E_INVAL,
		               "%s: %s has id %lld; accepted: ids below %u (--n-vocab)", path, what,
		               (long long)id, bound);
	return ig_errf(eb, IG_E_INVAL,
	               "%s: %s has id %lld; the file gives %zu tokens, so accepted: ids below %u "
	               "(an id no token holds becomes padding, at most as many as the tokens "
	               "given), or below --n-vocab when it is given",
	               path, what, (long long)id, given, bound);
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
	uint32_t n = 0, n_merges = 0, bound;
	size_t i, given;
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
	/* the ids in use, each below the bound (see id_bound) before the
	 * vocabulary is allocated */
	given = json_object_size(vocab) + json_array_size(added);
	bound = id_bound(given, o->n_vocab);
	json_object_foreach(vocab, key, v) {
		json_int_t id = json_integer_value(v);

		if (!json_is_integer(v)) {
			rc =
			    ig_errf(eb, IG_E_INVAL, "%s: model.vocab['%.*s'] is not a whole number",
			            path, TEXT_CAP(key));
			goto out;
		}
		if (id < 0 || id >= bound) {
			char what[96];

			snprintf(what, sizeof what, "model.vocab['%.*s']", TEXT_CAP(key));
			rc = id_refused(eb, path, what, id, given, bound, o->n_vocab);
			goto out;
		}
		if ((uint32_t)id + 1 > n)
			n = (uint32_t)id + 1;
	}
	json_array_foreach(added, i, v) {
		json_t *c = json_object_get(v, "content"), *jid = json_object_get(v, "id");
		json_int_t id = json_integer_value(jid);
		char what[96];

		if (!json_is_string(c)) {
			rc = ig_errf(eb, IG_E_INVAL,
			             "%s: added_tokens[%zu] has no content (a string)", path, i);
			goto out;
		}
		snprintf(what, sizeof what, "added_tokens[%zu] ('%.*s')", i,
		         TEXT_CAP(json_string_value(c)));
		if (!json_is_integer(jid)) {
			rc = ig_errf(eb, IG_E_INVAL, "%s: %s: its id is not a whole number", path,
			             what);
			goto out;
		}
		if (id < 0 || id >= bound) {
			rc = id_refused(eb, path, what, id, given, bound, o->n_vocab);
			goto out;
		}
		if ((uint32_t)id + 1 > n)
			n = (uint32_t)id + 1;
	}
	if (o->n_vocab)
		n = o->n_vocab;
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
	if (json_array_size(merges) > BPE_MAX_MERGES) {
		rc = ig_errf(eb, IG_E_INVAL, "%s: model.merges has %zu merges; accepted: up to %u",
		             path, json_array_size(merges), BPE_MAX_MERGES);
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
