/* anthropic.c - Anthropic's Messages API (see anthropic.h).
 *
 * A request is read into the chat path's `struct oai_req`: the system
 * prompt the first message, each user turn's text blocks one user message
 * and each of its tool_result blocks one tool message (in their order), each
 * assistant turn one assistant message with its thinking as reasoning and
 * its tool_use blocks as calls. What the request does not hold as it came
 * (a call's input as JSON text, a tool in the OpenAI form the template
 * announces, joined text) is made here and kept in an array under the
 * parsed body (key "\x01ignis"), so oai_req_free releases it with the body.
 */
#include "anthropic.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* ---- reading ------------------------------------------------------------- */

struct anth__in {
	struct oai_req *r;
	const struct oai_limits *lim;
	struct oai_err *err;
	json_t *keep; /* what was made here, held by the body */
	size_t text;  /* bytes of text so far */
};

static int anth__bad(struct anth__in *in, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int anth__bad(struct anth__in *in, const char *param, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	oai_errf(in->err, 400, param, "invalid_value", "%s", "");
	vsnprintf(in->err->message, sizeof in->err->message, fmt, ap);
	va_end(ap);
	return -1;
}

static const char *anth__type(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "an object";
	case JSON_ARRAY:
		return "an array";
	case JSON_STRING:
		return "a string";
	case JSON_INTEGER:
	case JSON_REAL:
		return "a number";
	case JSON_TRUE:
	case JSON_FALSE:
		return "a boolean";
	default:
		return "null";
	}
}

/* A string made here, held under the body: its bytes stay valid. */
static const char *anth__keep(struct anth__in *in, const char *s, size_t n)
{
	json_t *v = json_stringn_nocheck(s, n);

	if (!v || json_array_append_new(in->keep, v))
		return NULL;
	return json_string_value(v);
}

static int anth__nomem(struct anth__in *in)
{
	oai_errf(in->err, 500, NULL, NULL, "out of memory reading the request");
	in->err->type = "api_error";
	return -1;
}

static int anth__count_text(struct anth__in *in, size_t n, const char *param)
{
	in->text += n;
	if (in->text > in->lim->max_text) {
		oai_errf(in->err, 413, param, "context_length_exceeded",
		         "the request's text holds over %zu bytes; accepted: up to %zu",
		         in->lim->max_text, in->lim->max_text);
		return -1;
	}
	return 0;
}

/* Text blocks (or a string) joined into *text: `v` a string, or an array of
 * {"type": "text", "text"} blocks (cache_control and citations allowed).
 * `prefix` goes first when given. */
static int anth__texts(struct anth__in *in, const json_t *v, const char *param, const char *prefix,
                       const char **text, size_t *len)
{
	char *j = NULL;
	size_t jl = 0;
	size_t i;
	json_t *b;

	if (json_is_string(v) && !prefix) {
		*text = json_string_value(v);
		*len = json_string_length(v);
		return anth__count_text(in, *len, param);
	}
	if (prefix && !wire_grow(&j, &jl, prefix, strlen(prefix)))
		return anth__nomem(in);
	if (json_is_string(v)) {
		if (!wire_grow(&j, &jl, json_string_value(v), json_string_length(v)))
			goto nomem;
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, b)
		{
			const json_t *t = json_object_get(b, "type"),
			             *x = json_object_get(b, "text");

			if (!json_is_object(b) || !json_is_string(t) ||
			    strcmp(json_string_value(t), "text") || !json_is_string(x)) {
				free(j);
				return anth__bad(in, param,
				                 "%s[%zu] is not a text block; accepted: "
				                 "{\"type\": \"text\", \"text\": \"...\"}",
				                 param, i);
			}
			if (!wire_grow(&j, &jl, json_string_value(x), json_string_length(x)))
				goto nomem;
		}
	} else {
		free(j);
		return anth__bad(in, param,
		                 "%s is %s; accepted: a string or an array of text blocks", param,
		                 anth__type(v));
	}
	*text = anth__keep(in, j ? j : "", jl);
	*len = jl;
	free(j);
	if (!*text)
		return anth__nomem(in);
	return anth__count_text(in, jl, param);
nomem:
	free(j);
	return anth__nomem(in);
}

/* One more message of the request, zeroed, role set. */
static struct oai_message *anth__msg(struct anth__in *in, const char *role)
{
	struct oai_req *r = in->r;
	struct oai_message *m;

	if (r->n_messages >= in->lim->max_messages) {
		oai_errf(in->err, 413, "messages", "context_length_exceeded",
		         "the conversation holds over %zu messages; accepted: up to %zu",
		         in->lim->max_messages, in->lim->max_messages);
		return NULL;
	}
	if (!(m = realloc(r->messages, (r->n_messages + 1) * sizeof(*m)))) {
		anth__nomem(in);
		return NULL;
	}
	r->messages = m;
	m = &r->messages[r->n_messages++];
	memset(m, 0, sizeof(*m));
	snprintf(m->role, sizeof m->role, "%s", role);
	return m;
}

/* The block's type, or NULL after refusing. */
static const char *anth__block_type(struct anth__in *in, const json_t *b, const char *param)
{
	const json_t *t = json_object_get(b, "type");

	if (!json_is_object(b) || !json_is_string(t)) {
		anth__bad(in, param, "%s is not a content block: an object with a string \"type\"",
		          param);
		return NULL;
	}
	return json_string_value(t);
}

/* Was a call of id `id` made by an assistant message before? */
static bool anth__call_known(const struct oai_req *r, const char *id)
{
	for (size_t i = 0; i < r->n_messages; i++)
		for (size_t k = 0; k < r->messages[i].n_calls; k++)
			if (r->messages[i].calls[k].id && !strcmp(r->messages[i].calls[k].id, id))
				return true;
	return false;
}

static int anth__user(struct anth__in *in, const json_t *content, size_t mi)
{
	char param[64];
	struct oai_message *m;
	size_t i, text_from = SIZE_MAX;
	json_t *b;

	snprintf(param, sizeof param, "messages[%zu].content", mi);
	if (json_is_string(content)) {
		if (!(m = anth__msg(in, "user")))
			return -1;
		return anth__texts(in, content, param, NULL, &m->text, &m->len);
	}
	if (!json_is_array(content) || !json_array_size(content))
		return anth__bad(in, param,
		                 "%s is %s; accepted: a string or a non-empty array of blocks",
		                 param, json_is_array(content) ? "empty" : anth__type(content));
	/* runs of text blocks are one user message; each tool_result its own
	 * tool message, in their order */
	json_array_foreach(content, i, b)
	{
		char bp[96];
		const char *type;

		snprintf(bp, sizeof bp, "%s[%zu]", param, i);
		if (!(type = anth__block_type(in, b, bp)))
			return -1;
		if (!strcmp(type, "text")) {
			if (text_from == SIZE_MAX)
				text_from = i;
			if (i + 1 < json_array_size(content)) {
				const json_t *nt =
				    json_object_get(json_array_get(content, i + 1), "type");

				if (json_is_string(nt) && !strcmp(json_string_value(nt), "text"))
					continue;
			}
			{
				json_t *run = json_array();
				int rc;

				if (!run)
					return anth__nomem(in);
				for (size_t k = text_from; k <= i; k++)
					json_array_append(run, json_array_get(content, k));
				if (!(m = anth__msg(in, "user"))) {
					json_decref(run);
					return -1;
				}
				rc = anth__texts(in, run, param, NULL, &m->text, &m->len);
				json_decref(run);
				if (rc)
					return rc;
			}
			text_from = SIZE_MAX;
		} else if (!strcmp(type, "tool_result")) {
			const json_t *id = json_object_get(b, "tool_use_id"),
			             *c = json_object_get(b, "content"),
			             *err = json_object_get(b, "is_error");
			char cp[112];

			if (!json_is_string(id))
				return anth__bad(in, "tool_use_id",
				                 "%s.tool_use_id is missing; accepted: the id of a "
				                 "tool_use block of an earlier assistant message",
				                 bp);
			if (!anth__call_known(in->r, json_string_value(id)))
				return anth__bad(
				    in, "tool_use_id",
				    "%s.tool_use_id '%.64s' answers no tool_use block of "
				    "an earlier assistant message",
				    bp, json_string_value(id));
			if (err && !json_is_boolean(err))
				return anth__bad(in, "is_error",
				                 "%s.is_error is %s; accepted: a boolean", bp,
				                 anth__type(err));
			if (!(m = anth__msg(in, "tool")))
				return -1;
			m->tool_call_id = json_string_value(id);
			snprintf(cp, sizeof cp, "%s.content", bp);
			if (!c) {
				m->text = "";
				m->len = 0;
			}
			/* the templates have no mark for a failed call: the text says */
			if (c && anth__texts(in, c, cp, json_is_true(err) ? "Error: " : NULL,
			                     &m->text, &m->len))
				return -1;
			if (!c && json_is_true(err))
				m->text = "Error", m->len = 5;
		} else if (!strcmp(type, "image") || !strcmp(type, "document")) {
			return anth__bad(in, bp,
			                 "%s is a '%s' block: this server serves text models; "
			                 "accepted: text and tool_result blocks",
			                 bp, type);
		} else {
			return anth__bad(in, bp,
			                 "%s has type '%.32s'; accepted in a user message: text, "
			                 "tool_result",
			                 bp, type);
		}
	}
	return 0;
}

static int anth__assistant(struct anth__in *in, const json_t *content, size_t mi)
{
	char param[64];
	struct oai_message *m;
	char *text = NULL, *reason = NULL;
	size_t tl = 0, rl = 0, i, n_calls = 0;
	json_t *b;

	snprintf(param, sizeof param, "messages[%zu].content", mi);
	if (!(m = anth__msg(in, "assistant")))
		return -1;
	if (json_is_string(content))
		return anth__texts(in, content, param, NULL, &m->text, &m->len);
	if (!json_is_array(content))
		return anth__bad(in, param, "%s is %s; accepted: a string or an array of blocks",
		                 param, anth__type(content));
	json_array_foreach(content, i, b)
	{
		if (json_is_string(json_object_get(b, "type")) &&
		    !strcmp(json_string_value(json_object_get(b, "type")), "tool_use"))
			n_calls++;
	}
	if (n_calls > OAI_CALLS_MAX)
		return anth__bad(in, param, "%s holds %zu tool_use blocks; accepted: up to %u",
		                 param, n_calls, OAI_CALLS_MAX);
	if (n_calls && !(m->calls = calloc(n_calls, sizeof(*m->calls))))
		return anth__nomem(in);
	json_array_foreach(content, i, b)
	{
		char bp[96];
		const char *type;

		snprintf(bp, sizeof bp, "%s[%zu]", param, i);
		if (!(type = anth__block_type(in, b, bp)))
			goto fail;
		if (!strcmp(type, "text")) {
			const json_t *x = json_object_get(b, "text");

			if (!json_is_string(x)) {
				anth__bad(in, bp, "%s.text is not a string", bp);
				goto fail;
			}
			if (!wire_grow(&text, &tl, json_string_value(x), json_string_length(x)))
				goto nomem;
		} else if (!strcmp(type, "thinking")) {
			const json_t *x = json_object_get(b, "thinking");

			if (!json_is_string(x)) {
				anth__bad(in, bp, "%s.thinking is not a string", bp);
				goto fail;
			}
			/* the signature is ours to check, and we sign nothing:
			 * any is taken (docs/adr/0056) */
			if (!wire_grow(&reason, &rl, json_string_value(x), json_string_length(x)))
				goto nomem;
		} else if (!strcmp(type, "redacted_thinking")) {
			continue; /* another server's sealed reasoning: nothing to render */
		} else if (!strcmp(type, "tool_use")) {
			const json_t *id = json_object_get(b, "id"),
			             *nm = json_object_get(b, "name"),
			             *input = json_object_get(b, "input");
			struct oai_msg_call *c = &m->calls[m->n_calls];
			char *args;

			if (!json_is_string(id) || !json_is_string(nm) || !json_is_object(input)) {
				anth__bad(
				    in, bp,
				    "%s is not a tool_use block: accepted {\"type\": "
				    "\"tool_use\", \"id\": string, \"name\": string, \"input\": "
				    "object}",
				    bp);
				goto fail;
			}
			if (!(args = json_dumps(input, JSON_COMPACT)))
				goto nomem;
			c->args = anth__keep(in, args, strlen(args));
			c->args_len = strlen(args);
			free(args);
			if (!c->args)
				goto nomem;
			c->id = json_string_value(id);
			c->name = json_string_value(nm);
			c->name_len = json_string_length(nm);
			m->n_calls++;
			if (anth__count_text(in, c->args_len + c->name_len, bp))
				goto fail;
		} else {
			anth__bad(in, bp,
			          "%s has type '%.32s'; accepted in an assistant message: text, "
			          "thinking, redacted_thinking, tool_use",
			          bp, type);
			goto fail;
		}
	}
	m->text = anth__keep(in, text ? text : "", tl);
	m->len = tl;
	if (reason) {
		m->reasoning = anth__keep(in, reason, rl);
		m->reasoning_len = rl;
		if (!m->reasoning)
			goto nomem;
	}
	free(text);
	free(reason);
	if (!m->text)
		return anth__nomem(in);
	return anth__count_text(in, tl + rl, param);
nomem:
	anth__nomem(in);
fail:
	free(text);
	free(reason);
	return -1;
}

static int anth__tools(struct anth__in *in, const json_t *tools)
{
	struct oai_req *r = in->r;
	size_t i;
	json_t *t;

	if (!json_is_array(tools))
		return anth__bad(in, "tools", "tools is %s; accepted: an array of tools",
		                 anth__type(tools));
	if (json_array_size(tools) > OAI_TOOLS_MAX)
		return anth__bad(in, "tools", "tools holds %zu tools; accepted: up to %u",
		                 json_array_size(tools), OAI_TOOLS_MAX);
	if (json_array_size(tools) &&
	    !(r->tools = calloc(json_array_size(tools), sizeof(*r->tools))))
		return anth__nomem(in);
	json_array_foreach(tools, i, t)
	{
		const json_t *nm = json_object_get(t, "name"), *ty = json_object_get(t, "type"),
		             *schema = json_object_get(t, "input_schema"),
		             *desc = json_object_get(t, "description");
		json_t *fn, *obj;

		if (!json_is_object(t) || !json_is_string(nm) || !json_string_length(nm))
			return anth__bad(in, "tools",
			                 "tools[%zu] is not a tool: accepted {\"name\", "
			                 "\"description\", \"input_schema\"}",
			                 i);
		if (ty && !json_is_null(ty) &&
		    (!json_is_string(ty) || strcmp(json_string_value(ty), "custom")))
			return anth__bad(
			    in, "tools",
			    "tools[%zu] has type '%.48s': Anthropic's server and client "
			    "tools are theirs to run; accepted: tools of your own "
			    "(type absent or \"custom\")",
			    i, json_is_string(ty) ? json_string_value(ty) : "?");
		if (!json_is_object(schema) ||
		    (json_object_get(schema, "type") &&
		     (!json_is_string(json_object_get(schema, "type")) ||
		      strcmp(json_string_value(json_object_get(schema, "type")), "object"))))
			return anth__bad(
			    in, "tools",
			    "tools[%zu].input_schema is not an object schema; accepted: "
			    "a JSON schema of type \"object\"",
			    i);
		if (desc && !json_is_string(desc))
			return anth__bad(in, "tools",
			                 "tools[%zu].description is %s; accepted: a string", i,
			                 anth__type(desc));
		for (size_t k = 0; k < i; k++)
			if (!strcmp(r->tools[k].name, json_string_value(nm)))
				return anth__bad(in, "tools",
				                 "tools[%zu]: the name '%.64s' is taken twice", i,
				                 json_string_value(nm));
		/* the form the templates announce: OpenAI's function tool */
		fn = json_object();
		obj = json_object();
		if (!fn || !obj || json_array_append_new(in->keep, obj)) {
			json_decref(fn);
			return anth__nomem(in);
		}
		json_object_set_new(obj, "type", json_string("function"));
		json_object_set(fn, "name", (json_t *)nm);
		if (desc)
			json_object_set(fn, "description", (json_t *)desc);
		json_object_set(fn, "parameters", (json_t *)schema);
		json_object_set_new(obj, "function", fn);
		r->tools[r->n_tools++] =
		    (struct oai_tool){json_string_value(nm), obj, schema, false};
	}
	return 0;
}

/*
 * tool_choice: {"type": "auto" | "none" | "any" | "tool", "name",
 * "disable_parallel_tool_use"}. "any" and "tool" force a call: the chat
 * path's "required" and named function, enforced by a grammar (docs/adr/
 * 0057). Called after the tools are read.
 */
static int anth_tool_choice(struct anth__in *in, const json_t *tc)
{
	const json_t *t = json_object_get(tc, "type"), *dp;
	const char *type = json_is_string(t) ? json_string_value(t) : "";

	if (!json_is_object(tc) || !json_is_string(t))
		return anth__bad(in, "tool_choice",
		                 "tool_choice is %s; accepted: {\"type\": \"auto\"} or {\"type\": "
		                 "\"none\"}",
		                 anth__type(tc));
	dp = json_object_get(tc, "disable_parallel_tool_use");
	if (dp && !json_is_boolean(dp))
		return anth__bad(in, "tool_choice",
		                 "tool_choice.disable_parallel_tool_use is %s; "
		                 "accepted: a boolean",
		                 anth__type(dp));
	in->r->parallel_calls = !json_is_true(dp);
	if (!strcmp(type, "auto"))
		in->r->tool_choice = OAI_TC_AUTO;
	else if (!strcmp(type, "none"))
		in->r->tool_choice = OAI_TC_NONE;
	else if (!strcmp(type, "any") || !strcmp(type, "tool")) {
		const json_t *nm = json_object_get(tc, "name");
		size_t i = 0;

		if (!in->r->n_tools)
			return anth__bad(
			    in, "tool_choice",
			    "tool_choice type '%s' forces a call, and 'tools' holds none", type);
		in->r->tool_choice = OAI_TC_REQUIRED;
		if (!strcmp(type, "any"))
			return 0;
		if (!json_is_string(nm))
			return anth__bad(in, "tool_choice",
			                 "tool_choice type 'tool' needs the tool's 'name'");
		while (i < in->r->n_tools && strcmp(in->r->tools[i].name, json_string_value(nm)))
			i++;
		if (i == in->r->n_tools)
			return anth__bad(
			    in, "tool_choice",
			    "tool_choice names the tool '%.64s', which 'tools' does not "
			    "hold",
			    json_string_value(nm));
		in->r->tool_choice = OAI_TC_NAMED;
		in->r->tc_tool = i;
	} else
		return anth__bad(in, "tool_choice",
		                 "tool_choice type '%.32s' is unknown; accepted: auto, none, any, "
		                 "tool",
		                 type);
	return 0;
}

static int anth__num(struct anth__in *in, const json_t *v, const char *name, double lo, double hi,
                     bool lo_open, double *out)
{
	double x;

	if (!json_is_number(v))
		return anth__bad(in, name, "%s is %s; accepted: a number %s%g to %g", name,
		                 anth__type(v), lo_open ? "above " : "", lo, hi);
	x = json_number_value(v);
	if (!(lo_open ? x > lo : x >= lo) || x > hi || isnan(x))
		return anth__bad(in, name, "%s is %g; accepted: %s%g to %g", name, x,
		                 lo_open ? "above " : "", lo, hi);
	*out = x;
	return 0;
}

/* The fields of a request, each with its reader (NULL: taken, no effect). */
static const char *const anth__fields[] = {
    "model",       "max_tokens",   "messages", "system",    "tools",          "tool_choice",
    "temperature", "top_p",        "top_k",    "stream",    "stop_sequences", "metadata",
    "thinking",    "service_tier", "ignis",    "container", "mcp_servers",
};

static int anth__read(struct anth__in *in, json_t *root, bool count)
{
	struct oai_req *r = in->r;
	const char *key;
	json_t *v;
	size_t i;

	json_object_foreach(root, key, v)
	{
		bool known = !strcmp(key, "\x01ignis");

		for (size_t k = 0; !known && k < sizeof anth__fields / sizeof *anth__fields; k++)
			known = !strcmp(key, anth__fields[k]);
		if (!known)
			return anth__bad(
			    in, key,
			    "the field '%.48s' is not one of Anthropic's Messages API, or "
			    "not one this server takes (docs/http.md)",
			    key);
	}
	v = json_object_get(root, "model");
	if (!json_is_string(v) || !json_string_length(v) ||
	    json_string_length(v) >= sizeof r->model)
		return anth__bad(in, "model", "model is %s; accepted: the served model's name",
		                 v ? anth__type(v) : "missing");
	snprintf(r->model, sizeof r->model, "%s", json_string_value(v));
	v = json_object_get(root, "max_tokens");
	if (v || !count) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    (uint64_t)json_integer_value(v) > in->lim->max_tokens)
			return anth__bad(in, "max_tokens", "max_tokens is %s; accepted: 1 to %u",
			                 v ? anth__type(v) : "missing", in->lim->max_tokens);
		r->max_tokens = (uint32_t)json_integer_value(v);
	}
	r->temperature = 1.0;
	r->top_p = 1.0;
	r->parallel_calls = true;
	if ((v = json_object_get(root, "temperature")) &&
	    anth__num(in, v, "temperature", 0, 1, false, &r->temperature))
		return -1;
	if ((v = json_object_get(root, "top_p")) &&
	    anth__num(in, v, "top_p", 0, 1, true, &r->top_p))
		return -1;
	if ((v = json_object_get(root, "top_k"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    (uint64_t)json_integer_value(v) > in->lim->vocab)
			return anth__bad(in, "top_k", "top_k is %s; accepted: 0 to %u",
			                 anth__type(v), in->lim->vocab);
		r->top_k = (uint32_t)json_integer_value(v);
	}
	if ((v = json_object_get(root, "stream"))) {
		if (!json_is_boolean(v))
			return anth__bad(in, "stream", "stream is %s; accepted: a boolean",
			                 anth__type(v));
		r->stream = json_is_true(v) && !count;
	}
	if ((v = json_object_get(root, "stop_sequences"))) {
		json_t *s;

		if (!json_is_array(v) || json_array_size(v) > 4)
			return anth__bad(
			    in, "stop_sequences",
			    "stop_sequences is %s; accepted: an array of up to 4 strings",
			    json_is_array(v) ? "longer" : anth__type(v));
		json_array_foreach(v, i, s)
		{
			if (!json_is_string(s) || !json_string_length(s))
				return anth__bad(in, "stop_sequences",
				                 "stop_sequences[%zu] is not a non-empty string",
				                 i);
			r->stop[r->n_stop++] = json_string_value(s);
		}
	}
	if ((v = json_object_get(root, "metadata")) && !json_is_object(v) && !json_is_null(v))
		return anth__bad(in, "metadata", "metadata is %s; accepted: an object (user_id)",
		                 anth__type(v));
	if ((v = json_object_get(root, "service_tier")) &&
	    (!json_is_string(v) || (strcmp(json_string_value(v), "auto") &&
	                            strcmp(json_string_value(v), "standard_only"))))
		return anth__bad(in, "service_tier",
		                 "service_tier is not 'auto' or 'standard_only': this server has "
		                 "one tier");
	if ((v = json_object_get(root, "container")) && !json_is_null(v))
		return anth__bad(in, "container",
		                 "container: this server runs no code; accepted: "
		                 "null");
	if ((v = json_object_get(root, "mcp_servers")) &&
	    !(json_is_array(v) && !json_array_size(v)))
		return anth__bad(in, "mcp_servers",
		                 "mcp_servers: this server connects to none; accepted: []");
	if ((v = json_object_get(root, "thinking"))) {
		const json_t *t = json_object_get(v, "type"),
		             *b = json_object_get(v, "budget_tokens");
		const char *ty = json_is_string(t) ? json_string_value(t) : "";

		if (!json_is_object(v) || (strcmp(ty, "enabled") && strcmp(ty, "disabled")))
			return anth__bad(
			    in, "thinking",
			    "thinking is not {\"type\": \"enabled\", \"budget_tokens\": N} "
			    "or {\"type\": \"disabled\"}");
		if (b && (!json_is_integer(b) || json_integer_value(b) < 0))
			return anth__bad(in, "thinking",
			                 "thinking.budget_tokens is %s; accepted: a whole number "
			                 "(counted within max_tokens; not enforced apart)",
			                 anth__type(b));
		r->thinking_set = true;
		r->thinking = !strcmp(ty, "enabled");
	}
	if ((v = json_object_get(root, "ignis"))) {
		const json_t *c = json_object_get(v, "class"), *s = json_object_get(v, "seed");
		const char *key2;
		json_t *x;

		if (!json_is_object(v))
			return anth__bad(in, "ignis",
			                 "ignis is %s; accepted: {\"class\", \"seed\"}",
			                 anth__type(v));
		json_object_foreach((json_t *)v, key2, x)
		{
			if (strcmp(key2, "class") && strcmp(key2, "seed"))
				return anth__bad(in, "ignis",
				                 "ignis.%.32s is unknown; accepted: class, seed",
				                 key2);
		}
		if (c && (!json_is_string(c) || (strcmp(json_string_value(c), "interactive") &&
		                                 strcmp(json_string_value(c), "agent"))))
			return anth__bad(in, "ignis", "ignis.class: accepted interactive or agent");
		if (c) {
			r->class_set = true;
			r->agent = !strcmp(json_string_value(c), "agent");
		}
		if (s && !json_is_integer(s))
			return anth__bad(in, "ignis", "ignis.seed is %s; accepted: an integer",
			                 anth__type(s));
		if (s) {
			r->seed_set = true;
			r->seed = json_integer_value(s);
		}
	}
	if ((v = json_object_get(root, "tools")) && anth__tools(in, v))
		return -1;
	if ((v = json_object_get(root, "tool_choice")) && anth_tool_choice(in, v))
		return -1;
	/* the system prompt, then the turns */
	if ((v = json_object_get(root, "system"))) {
		struct oai_message *m;

		if (!(m = anth__msg(in, "system")) ||
		    anth__texts(in, v, "system", NULL, &m->text, &m->len))
			return -1;
	}
	v = json_object_get(root, "messages");
	if (!json_is_array(v) || !json_array_size(v))
		return anth__bad(in, "messages",
		                 "messages is %s; accepted: a non-empty array of {\"role\", "
		                 "\"content\"}",
		                 !v                 ? "missing"
		                 : json_is_array(v) ? "empty"
		                                    : anth__type(v));
	{
		json_t *m;

		json_array_foreach(v, i, m)
		{
			const json_t *role = json_object_get(m, "role"),
			             *content = json_object_get(m, "content");
			const char *ro = json_is_string(role) ? json_string_value(role) : "";
			char p[48];

			snprintf(p, sizeof p, "messages[%zu].role", i);
			if (!json_is_object(m) || !content)
				return anth__bad(in, "messages",
				                 "messages[%zu] is not {\"role\", \"content\"}", i);
			if (!strcmp(ro, "user")) {
				if (anth__user(in, content, i))
					return -1;
			} else if (!strcmp(ro, "assistant")) {
				if (anth__assistant(in, content, i))
					return -1;
			} else {
				return anth__bad(in, p,
				                 "%s is '%.32s'; accepted: user or assistant (the "
				                 "system prompt is the top-level 'system')",
				                 p, ro);
			}
		}
	}
	return 0;
}

int anth_parse(const char *body, size_t len, const struct oai_limits *lim, bool count,
               struct oai_req *out, struct oai_err *err)
{
	struct anth__in in = {out, lim, err, NULL, 0};
	json_error_t je;
	json_t *root;
	int rc;

	memset(out, 0, sizeof(*out));
	out->kind = OAI_CHAT;
	if (len > lim->max_body) {
		oai_errf(err, 413, NULL, "request_too_large",
		         "the request body is %zu bytes; accepted: up to %zu", len, lim->max_body);
		return -1;
	}
	root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	if (!root || !json_is_object(root)) {
		json_decref(root);
		oai_errf(err, 400, NULL, "invalid_json",
		         "the body is not a JSON object%s%.200s; accepted: a Messages request",
		         root ? "" : ": ", root ? "" : je.text);
		return -1;
	}
	out->json = root;
	if (!(in.keep = json_array()) || json_object_set_new(root, "\x01ignis", in.keep)) {
		rc = anth__nomem(&in);
		goto out;
	}
	rc = anth__read(&in, root, count);
out:
	if (rc)
		oai_req_free(out);
	return rc;
}

/* ---- errors ----------------------------------------------------------------- */

char *anth_error_json(const struct oai_err *err)
{
	const char *type;

	switch (err->status) {
	case 400:
	case 405:
	case 415:
		type = "invalid_request_error";
		break;
	case 401:
		type = "authentication_error";
		break;
	case 403:
		type = "permission_error";
		break;
	case 404:
		type = "not_found_error";
		break;
	case 413:
		type = "request_too_large";
		break;
	case 429:
		type = "rate_limit_error";
		break;
	case 503:
		type = "overloaded_error";
		break;
	default:
		type = "api_error";
		break;
	}
	return wire_dump(json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", type,
	                           "message", err->message));
}

char *anth_count_json(uint64_t input_tokens)
{
	return wire_dump(json_pack("{s:I}", "input_tokens", (json_int_t)input_tokens));
}

/* ---- answers ------------------------------------------------------------- */

enum anth__bt { AB_THINKING = 1, AB_TEXT, AB_TOOL };

struct anth__block {
	enum anth__bt type;
	char *text; /* thinking, text, or a call's input as JSON text */
	size_t len;
	char *name;
	char id[64];
};

struct wire_ans {
	const struct oai_req *q;
	bool stream;
	struct wire_sink sink;
	char id[80], model[128], tail[64];
	struct anth__block *b;
	size_t n;
	bool open; /* a stream: the last block is open */
	uint32_t calls;
	const char *stop_reason, *stop_seq;
	struct oai_usage u;
};

static struct wire_ans *anth__new(const struct oai_req *q, const char *rid, const char *model,
                                  int64_t created, const struct wire_sink *sink)
{
	struct wire_ans *a = calloc(1, sizeof(*a));

	(void)created;
	if (!a)
		return NULL;
	a->q = q;
	a->stream = sink != NULL;
	if (sink)
		a->sink = *sink;
	snprintf(a->tail, sizeof a->tail, "%s", wire_tail(rid));
	snprintf(a->id, sizeof a->id, "msg_%s", a->tail);
	snprintf(a->model, sizeof a->model, "%s", model);
	return a;
}

static void anth__free(struct wire_ans *a)
{
	if (!a)
		return;
	for (size_t i = 0; i < a->n; i++) {
		free(a->b[i].text);
		free(a->b[i].name);
	}
	free(a->b);
	free(a);
}

/* Anthropic counts input apart from what was read from the cache. */
static json_t *anth__usage(const struct oai_usage *u, bool with_input)
{
	uint64_t cached = u->cached < u->prompt ? u->cached : u->prompt;
	json_t *o = json_pack("{s:I}", "output_tokens", (json_int_t)u->completion);

	if (o && with_input) {
		json_object_set_new(o, "input_tokens",
		                    json_integer((json_int_t)(u->prompt - cached)));
		json_object_set_new(o, "cache_read_input_tokens", json_integer((json_int_t)cached));
		json_object_set_new(o, "cache_creation_input_tokens", json_integer(0));
	}
	return o;
}

static json_t *anth__message(struct wire_ans *a, bool whole)
{
	json_t *content = json_array(), *m;

	for (size_t i = 0; whole && content && i < a->n; i++) {
		const struct anth__block *b = &a->b[i];
		json_t *o = NULL;

		switch (b->type) {
		case AB_THINKING:
			o = json_pack("{s:s,s:o,s:s}", "type", "thinking", "thinking",
			              wire_text(b->text, b->len), "signature", "");
			break;
		case AB_TEXT:
			o = json_pack("{s:s,s:o}", "type", "text", "text",
			              wire_text(b->text, b->len));
			break;
		case AB_TOOL: {
			json_t *in = b->text ? json_loadb(b->text, b->len, 0, NULL) : NULL;

			if (!json_is_object(in)) { /* a call cut short: no arguments */
				json_decref(in);
				in = json_object();
			}
			o = json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", b->id, "name",
			              b->name, "input", in);
			break;
		}
		}
		json_array_append_new(content, o);
	}
	m = json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", a->id, "type", "message", "role", "assistant",
	              "model", a->model, "content", content);
	if (!m)
		return NULL;
	json_object_set_new(m, "stop_reason",
	                    whole && a->stop_reason ? json_string(a->stop_reason) : json_null());
	json_object_set_new(m, "stop_sequence",
	                    whole && a->stop_seq ? json_string(a->stop_seq) : json_null());
	json_object_set_new(m, "usage", anth__usage(&a->u, true));
	return m;
}

static int anth__begin(struct wire_ans *a, const struct oai_usage *u)
{
	a->u = *u;
	a->u.completion = 0;
	if (!a->stream)
		return 0;
	if (!wire_sse(&a->sink, "message_start",
	              json_pack("{s:s,s:o}", "type", "message_start", "message",
	                        anth__message(a, false))) ||
	    !wire_sse(&a->sink, "ping", json_pack("{s:s}", "type", "ping")))
		return IG_E_NOMEM;
	return 0;
}

static int anth__close(struct wire_ans *a)
{
	if (!a->open)
		return 0;
	a->open = false;
	if (a->stream && !wire_sse(&a->sink, "content_block_stop",
	                           json_pack("{s:s,s:I}", "type", "content_block_stop", "index",
	                                     (json_int_t)(a->n - 1))))
		return IG_E_NOMEM;
	return 0;
}

/* A new block of `type` (the open one closed first). */
static int anth__open(struct wire_ans *a, enum anth__bt type, const char *name, size_t name_len)
{
	struct anth__block *b;
	json_t *cb;

	if (anth__close(a) || !(b = realloc(a->b, (a->n + 1) * sizeof(*b))))
		return IG_E_NOMEM;
	a->b = b;
	b = &a->b[a->n++];
	memset(b, 0, sizeof(*b));
	b->type = type;
	a->open = true;
	if (type == AB_TOOL) {
		snprintf(b->id, sizeof b->id, "toolu_%s_%u", a->tail, a->calls++);
		if (!(b->name = strndup(name, name_len)))
			return IG_E_NOMEM;
	}
	if (!a->stream)
		return 0;
	cb = type == AB_THINKING
	         ? json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", "")
	     : type == AB_TEXT ? json_pack("{s:s,s:s}", "type", "text", "text", "")
	                       : json_pack("{s:s,s:s,s:o,s:{}}", "type", "tool_use", "id", b->id,
	                                   "name", wire_text(name, name_len), "input");
	return wire_sse(&a->sink, "content_block_start",
	                json_pack("{s:s,s:I,s:o}", "type", "content_block_start", "index",
	                          (json_int_t)(a->n - 1), "content_block", cb))
	           ? 0
	           : IG_E_NOMEM;
}

static int anth__event(struct wire_ans *a, const struct op_ev *ev)
{
	static const char *const dt[] = {"", "thinking_delta", "text_delta", "input_json_delta"};
	static const char *const dk[] = {"", "thinking", "text", "partial_json"};
	enum anth__bt want = ev->kind == OP_REASONING ? AB_THINKING
	                     : ev->kind == OP_CONTENT ? AB_TEXT
	                                              : AB_TOOL;
	struct anth__block *b;

	if (ev->kind == OP_CALL_END)
		return anth__close(a);
	if (ev->kind == OP_CALL_BEGIN)
		return anth__open(a, AB_TOOL, ev->text, ev->len);
	if (!ev->len)
		return 0;
	if (!a->open || a->b[a->n - 1].type != want) {
		int rc = anth__open(a, want, NULL, 0);

		if (rc)
			return rc;
	}
	b = &a->b[a->n - 1];
	if (!wire_grow(&b->text, &b->len, ev->text, ev->len))
		return IG_E_NOMEM;
	if (a->stream && !wire_sse(&a->sink, "content_block_delta",
	                           json_pack("{s:s,s:I,s:{s:s,s:o}}", "type", "content_block_delta",
	                                     "index", (json_int_t)(a->n - 1), "delta", "type",
	                                     dt[want], dk[want], wire_text(ev->text, ev->len))))
		return IG_E_IO;
	return 0;
}

static int anth__end(struct wire_ans *a, const struct wire_end *e)
{
	const char *f = e->finish;
	uint64_t prompt = a->u.prompt, cached = a->u.cached;

	a->u = e->usage;
	if (!a->u.prompt) { /* the start's, when the end has none */
		a->u.prompt = prompt;
		a->u.cached = cached;
	}
	if (!strcmp(f, "length") || !strcmp(f, "context"))
		a->stop_reason = "max_tokens";
	else if (a->calls)
		a->stop_reason = "tool_use";
	else if (!strcmp(f, "stop") && a->q->n_stop) {
		a->stop_reason = "stop_sequence";
		/* the worker does not say which matched: named when only one can */
		a->stop_seq = a->q->n_stop == 1 ? a->q->stop[0] : NULL;
	} else
		a->stop_reason = "end_turn";
	if (anth__close(a))
		return IG_E_NOMEM;
	if (!a->stream)
		return 0;
	if (!wire_sse(&a->sink, "message_delta",
	              json_pack("{s:s,s:{s:s,s:o},s:o}", "type", "message_delta", "delta",
	                        "stop_reason", a->stop_reason, "stop_sequence",
	                        a->stop_seq ? json_string(a->stop_seq) : json_null(), "usage",
	                        anth__usage(&a->u, true))) ||
	    !wire_sse(&a->sink, "message_stop", json_pack("{s:s}", "type", "message_stop")))
		return IG_E_NOMEM;
	return 0;
}

static int anth__fail(struct wire_ans *a, const struct oai_err *err)
{
	char *json = anth_error_json(err);
	bool ok = json && a->sink.put(a->sink.ctx, "event: error\ndata: ", 19) &&
	          a->sink.put(a->sink.ctx, json, strlen(json)) &&
	          a->sink.put(a->sink.ctx, "\n\n", 2);

	free(json);
	return ok ? 0 : IG_E_NOMEM;
}

static char *anth__json(struct wire_ans *a)
{
	return wire_dump(anth__message(a, true));
}

static int anth__parse(const char *body, size_t len, const struct oai_limits *lim, bool count,
                       struct oai_req *out, struct oai_err *err)
{
	return anth_parse(body, len, lim, count, out, err);
}

const struct wire_api anth_api = {
    .name = "anthropic",
    .parse = anth__parse,
    .error_json = anth_error_json,
    .ans_new = anth__new,
    .ans_begin = anth__begin,
    .ans_event = anth__event,
    .ans_end = anth__end,
    .ans_fail = anth__fail,
    .ans_json = anth__json,
    .ans_free = anth__free,
    .count_json = anth_count_json,
};
