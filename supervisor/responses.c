/* responses.c - OpenAI's Responses API without server-side state (see
 * responses.h).
 *
 * The input items become the chat path's messages: `instructions` the
 * system turn first; a message item its role's message; a reasoning item's
 * text the reasoning of the assistant turn that follows it; an assistant
 * message item and the function_call items after it one assistant message
 * with those calls (a function_call with no assistant text before it opens
 * one with empty text); each function_call_output a tool message. What the
 * body does not hold as it came (joined text, tools in the chat form the
 * template announces) is made here and kept under the parsed body (key
 * "\x01ignis"), so oai_req_free releases it with the body.
 */
#include "responses.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* ---- reading ------------------------------------------------------------- */

struct resp__in {
	struct oai_req *r;
	const struct oai_limits *lim;
	struct oai_err *err;
	json_t *keep;
	size_t text;
	long asst;    /* the assistant message calls join, or -1 */
	char *reason; /* a reasoning item's text, for the next assistant turn */
	size_t reason_len;
};

static int resp__bad(struct resp__in *in, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int resp__bad(struct resp__in *in, const char *param, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	oai_errf(in->err, 400, param, "invalid_value", "%s", "");
	vsnprintf(in->err->message, sizeof in->err->message, fmt, ap);
	va_end(ap);
	return -1;
}

static int resp__nomem(struct resp__in *in)
{
	oai_errf(in->err, 500, NULL, NULL, "out of memory reading the request");
	in->err->type = "server_error";
	return -1;
}

static const char *resp__type(const json_t *v)
{
	if (!v)
		return "missing";
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

static bool resp__is(const json_t *v, const char *s)
{
	return json_is_string(v) && !strcmp(json_string_value(v), s);
}

static const char *resp__keep(struct resp__in *in, const char *s, size_t n)
{
	json_t *v = json_stringn_nocheck(s ? s : "", n);

	if (!v || json_array_append_new(in->keep, v))
		return NULL;
	return json_string_value(v);
}

static int resp__count(struct resp__in *in, size_t n, const char *param)
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

/* Content: a string, or parts whose text is joined (input_text,
 * output_text, text; refusal's refusal). */
static int resp__content(struct resp__in *in, const json_t *v, const char *param, const char **text,
                         size_t *len)
{
	char *j = NULL;
	size_t jl = 0, i;
	json_t *p;

	if (json_is_string(v)) {
		*text = json_string_value(v);
		*len = json_string_length(v);
		return resp__count(in, *len, param);
	}
	if (!json_is_array(v))
		return resp__bad(in, param,
		                 "%s is %s; accepted: a string or an array of text parts", param,
		                 resp__type(v));
	json_array_foreach(v, i, p)
	{
		const json_t *t = json_object_get(p, "type");
		const json_t *x = resp__is(t, "refusal") ? json_object_get(p, "refusal")
		                                         : json_object_get(p, "text");

		if (!json_is_object(p) || !json_is_string(t)) {
			free(j);
			return resp__bad(in, param, "%s[%zu] is not a content part", param, i);
		}
		if (!resp__is(t, "input_text") && !resp__is(t, "output_text") &&
		    !resp__is(t, "text") && !resp__is(t, "refusal")) {
			free(j);
			return resp__bad(
			    in, param,
			    "%s[%zu] is a '%.32s' part: this server serves text models; "
			    "accepted: input_text, output_text",
			    param, i, json_string_value(t));
		}
		if (!json_is_string(x)) {
			free(j);
			return resp__bad(in, param, "%s[%zu].text is %s; accepted: a string", param,
			                 i, resp__type(x));
		}
		if (!wire_grow(&j, &jl, json_string_value(x), json_string_length(x))) {
			free(j);
			return resp__nomem(in);
		}
	}
	*text = resp__keep(in, j, jl);
	*len = jl;
	free(j);
	if (!*text)
		return resp__nomem(in);
	return resp__count(in, jl, param);
}

static struct oai_message *resp__msg(struct resp__in *in, const char *role)
{
	struct oai_req *r = in->r;
	struct oai_message *m;

	if (r->n_messages >= in->lim->max_messages) {
		oai_errf(in->err, 413, "input", "context_length_exceeded",
		         "the input holds over %zu messages; accepted: up to %zu",
		         in->lim->max_messages, in->lim->max_messages);
		return NULL;
	}
	if (!(m = realloc(r->messages, (r->n_messages + 1) * sizeof(*m)))) {
		resp__nomem(in);
		return NULL;
	}
	r->messages = m;
	m = &r->messages[r->n_messages++];
	memset(m, 0, sizeof(*m));
	m->text = "";
	snprintf(m->role, sizeof m->role, "%s", role);
	return m;
}

/* A new assistant message, taking the reasoning items before it. */
static struct oai_message *resp__assistant(struct resp__in *in)
{
	struct oai_message *m = resp__msg(in, "assistant");

	if (!m)
		return NULL;
	if (in->reason) {
		m->reasoning = resp__keep(in, in->reason, in->reason_len);
		m->reasoning_len = in->reason_len;
		free(in->reason);
		in->reason = NULL;
		in->reason_len = 0;
		if (!m->reasoning) {
			resp__nomem(in);
			return NULL;
		}
	}
	in->asst = (long)in->r->n_messages - 1;
	return m;
}

static bool resp__call_known(const struct oai_req *r, const char *id)
{
	for (size_t i = 0; i < r->n_messages; i++)
		for (size_t k = 0; k < r->messages[i].n_calls; k++)
			if (!strcmp(r->messages[i].calls[k].id, id))
				return true;
	return false;
}

static int resp__item(struct resp__in *in, const json_t *it, size_t i)
{
	char p[48];
	const json_t *type = json_object_get(it, "type"), *role = json_object_get(it, "role");
	struct oai_message *m;

	snprintf(p, sizeof p, "input[%zu]", i);
	if (!json_is_object(it))
		return resp__bad(in, p, "%s is %s; accepted: an input item (an object)", p,
		                 resp__type(it));
	if ((!type && role) || resp__is(type, "message")) {
		const char *ro = json_is_string(role) ? json_string_value(role) : "";
		char cp[64];

		snprintf(cp, sizeof cp, "%s.content", p);
		if (!strcmp(ro, "assistant")) {
			if (!(m = resp__assistant(in)))
				return -1;
			return resp__content(in, json_object_get(it, "content"), cp, &m->text,
			                     &m->len);
		}
		if (strcmp(ro, "user") && strcmp(ro, "system") && strcmp(ro, "developer"))
			return resp__bad(in, p,
			                 "%s.role is '%.32s'; accepted: user, system, developer, "
			                 "assistant",
			                 p, ro);
		in->asst = -1;
		if (!(m = resp__msg(in, !strcmp(ro, "developer") ? "system" : ro)))
			return -1;
		return resp__content(in, json_object_get(it, "content"), cp, &m->text, &m->len);
	}
	if (resp__is(type, "function_call")) {
		const json_t *id = json_object_get(it, "call_id"),
		             *nm = json_object_get(it, "name"),
		             *args = json_object_get(it, "arguments");
		struct oai_msg_call *c;
		json_t *parsed;

		if (!json_is_string(id) || !json_is_string(nm) || !json_is_string(args))
			return resp__bad(in, p,
			                 "%s is not a function_call: accepted {\"type\": "
			                 "\"function_call\", \"call_id\", \"name\", \"arguments\": "
			                 "JSON text}",
			                 p);
		parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
		if (!json_is_object(parsed)) {
			json_decref(parsed);
			return resp__bad(in, p, "%s.arguments is not the JSON text of an object",
			                 p);
		}
		json_decref(parsed);
		if (in->asst < 0 && !resp__assistant(in))
			return -1;
		m = &in->r->messages[in->asst];
		if (m->n_calls >= OAI_CALLS_MAX)
			return resp__bad(in, p, "a turn makes over %u calls", OAI_CALLS_MAX);
		if (!(c = realloc(m->calls, (m->n_calls + 1) * sizeof(*c))))
			return resp__nomem(in);
		m->calls = c;
		m->calls[m->n_calls++] = (struct oai_msg_call){
		    json_string_value(id), json_string_value(nm), json_string_value(args),
		    json_string_length(nm), json_string_length(args)};
		return resp__count(in, json_string_length(nm) + json_string_length(args), p);
	}
	in->asst = -1;
	if (resp__is(type, "function_call_output")) {
		const json_t *id = json_object_get(it, "call_id");
		char op[64];

		if (!json_is_string(id))
			return resp__bad(in, p,
			                 "%s.call_id is %s; accepted: the call_id of an earlier "
			                 "function_call",
			                 p, resp__type(id));
		if (!resp__call_known(in->r, json_string_value(id)))
			return resp__bad(in, p,
			                 "%s.call_id '%.64s' answers no earlier function_call item",
			                 p, json_string_value(id));
		if (!(m = resp__msg(in, "tool")))
			return -1;
		m->tool_call_id = json_string_value(id);
		snprintf(op, sizeof op, "%s.output", p);
		return resp__content(in, json_object_get(it, "output"), op, &m->text, &m->len);
	}
	if (resp__is(type, "reasoning")) {
		/* its text (content, else the summary) goes to the next assistant turn */
		const json_t *parts = json_object_get(it, "content");
		const char *field = "text";
		size_t k;
		json_t *x;

		if (!json_is_array(parts) || !json_array_size(parts))
			parts = json_object_get(it, "summary");
		if (parts && !json_is_array(parts))
			return resp__bad(in, p,
			                 "%s.summary is %s; accepted: an array of summary_text", p,
			                 resp__type(parts));
		json_array_foreach(parts, k, x)
		{
			const json_t *t = json_object_get(x, field);

			if (!json_is_string(t))
				return resp__bad(in, p, "%s: part %zu has no text", p, k);
			if ((in->reason_len &&
			     !wire_grow(&in->reason, &in->reason_len, "\n\n", 2)) ||
			    !wire_grow(&in->reason, &in->reason_len, json_string_value(t),
			               json_string_length(t)))
				return resp__nomem(in);
		}
		return resp__count(in, in->reason_len, p);
	}
	if (resp__is(type, "item_reference"))
		return resp__bad(in, p,
		                 "%s is an item_reference: this server keeps no items; send the "
		                 "item itself",
		                 p);
	return resp__bad(in, p,
	                 "%s has type '%.48s'; accepted: message, function_call, "
	                 "function_call_output, reasoning",
	                 p, json_is_string(type) ? json_string_value(type) : resp__type(type));
}

static int resp__tools(struct resp__in *in, const json_t *tools)
{
	struct oai_req *r = in->r;
	size_t i;
	json_t *t;

	if (!json_is_array(tools))
		return resp__bad(in, "tools", "tools is %s; accepted: an array of function tools",
		                 resp__type(tools));
	if (json_array_size(tools) > OAI_TOOLS_MAX)
		return resp__bad(in, "tools", "tools holds %zu tools; accepted: up to %u",
		                 json_array_size(tools), OAI_TOOLS_MAX);
	if (json_array_size(tools) &&
	    !(r->tools = calloc(json_array_size(tools), sizeof(*r->tools))))
		return resp__nomem(in);
	json_array_foreach(tools, i, t)
	{
		const json_t *ty = json_object_get(t, "type"), *nm = json_object_get(t, "name"),
		             *params = json_object_get(t, "parameters"),
		             *desc = json_object_get(t, "description"),
		             *strict = json_object_get(t, "strict");
		json_t *fn, *obj;

		if (!resp__is(ty, "function"))
			return resp__bad(
			    in, "tools",
			    "tools[%zu] has type '%.48s': OpenAI's hosted tools are theirs "
			    "to run; accepted: function tools",
			    i, json_is_string(ty) ? json_string_value(ty) : resp__type(ty));
		if (!json_is_string(nm) || !json_string_length(nm) || json_string_length(nm) > 64 ||
		    strspn(json_string_value(nm),
		           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXY"
		           "Z0123456789_-") != json_string_length(nm))
			return resp__bad(in, "tools",
			                 "tools[%zu].name is not 1 to 64 of a-z A-Z 0-9 _ -", i);
		if (params && !json_is_null(params) &&
		    (!json_is_object(params) ||
		     (json_object_get(params, "type") &&
		      !resp__is(json_object_get(params, "type"), "object"))))
			return resp__bad(
			    in, "tools",
			    "tools[%zu].parameters is not an object schema; accepted: a "
			    "JSON schema of type \"object\"",
			    i);
		if (desc && !json_is_null(desc) && !json_is_string(desc))
			return resp__bad(in, "tools",
			                 "tools[%zu].description is %s; accepted: a string", i,
			                 resp__type(desc));
		if (strict && !json_is_boolean(strict) && !json_is_null(strict))
			return resp__bad(in, "tools",
			                 "tools[%zu].strict is %s; accepted: a boolean", i,
			                 resp__type(strict));
		for (size_t k = 0; k < i; k++)
			if (!strcmp(r->tools[k].name, json_string_value(nm)))
				return resp__bad(in, "tools",
				                 "tools[%zu]: the name '%s' is taken twice", i,
				                 json_string_value(nm));
		/* the chat form, which the template announces */
		fn = json_object();
		obj = json_object();
		if (!fn || !obj || json_array_append_new(in->keep, obj)) {
			json_decref(fn);
			return resp__nomem(in);
		}
		json_object_set_new(obj, "type", json_string("function"));
		json_object_set(fn, "name", (json_t *)nm);
		if (json_is_string(desc))
			json_object_set(fn, "description", (json_t *)desc);
		if (json_is_object(params))
			json_object_set(fn, "parameters", (json_t *)params);
		json_object_set_new(obj, "function", fn);
		/* strict only when sent: OpenAI's default true would refuse a
		 * schema outside the strict subset that no call ever needed */
		r->tools[r->n_tools++] =
		    (struct oai_tool){json_string_value(nm), obj,
		                      json_is_object(params) ? params : NULL, json_is_true(strict)};
	}
	return 0;
}

/*
 * tool_choice: "auto", "none", "required" or a named function ({"type":
 * "function", "name"}): the last two force a call, enforced by a grammar
 * (docs/adr/0057). Called after the tools are read.
 */
static int resp_tool_choice(struct resp__in *in, const json_t *tc)
{
	if (resp__is(tc, "auto"))
		in->r->tool_choice = OAI_TC_AUTO;
	else if (resp__is(tc, "none"))
		in->r->tool_choice = OAI_TC_NONE;
	else if (resp__is(tc, "required") || resp__is(json_object_get(tc, "type"), "function")) {
		const json_t *nm = json_object_get(tc, "name");
		size_t i = 0;

		if (!in->r->n_tools)
			return resp__bad(in, "tool_choice",
			                 "tool_choice forces a call, and 'tools' holds none");
		in->r->tool_choice = OAI_TC_REQUIRED;
		if (json_is_string(tc))
			return 0;
		if (!json_is_string(nm))
			return resp__bad(
			    in, "tool_choice",
			    "tool_choice of type \"function\" needs the function's 'name'");
		while (i < in->r->n_tools && strcmp(in->r->tools[i].name, json_string_value(nm)))
			i++;
		if (i == in->r->n_tools)
			return resp__bad(
			    in, "tool_choice",
			    "tool_choice names the function '%.64s', which 'tools' does "
			    "not hold",
			    json_string_value(nm));
		in->r->tool_choice = OAI_TC_NAMED;
		in->r->tc_tool = i;
	} else
		return resp__bad(in, "tool_choice",
		                 "tool_choice is %s; accepted: \"auto\", \"none\", \"required\" or "
		                 "{\"type\": \"function\", \"name\": NAME}",
		                 resp__type(tc));
	return 0;
}

static int resp__num(struct resp__in *in, const json_t *v, const char *name, double lo, double hi,
                     bool lo_open, double *out)
{
	double x;

	if (json_is_null(v))
		return 0;
	if (!json_is_number(v))
		return resp__bad(in, name, "%s is %s; accepted: a number %s%g to %g", name,
		                 resp__type(v), lo_open ? "above " : "", lo, hi);
	x = json_number_value(v);
	if (!(lo_open ? x > lo : x >= lo) || x > hi || isnan(x))
		return resp__bad(in, name, "%s is %g; accepted: %s%g to %g", name, x,
		                 lo_open ? "above " : "", lo, hi);
	*out = x;
	return 0;
}

static const char *const resp__fields[] = {
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_output_tokens",
    "temperature",
    "top_p",
    "stream",
    "store",
    "metadata",
    "user",
    "include",
    "reasoning",
    "text",
    "truncation",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
    "stream_options",
    "previous_response_id",
    "background",
    "conversation",
    "prompt",
    "top_logprobs",
    "max_tool_calls",
    "ignis",
};

/* A field this server cannot serve, when given at more than its neutral
 * value: refused by name, saying why. */
static int resp__stateful(struct resp__in *in, json_t *root)
{
	const json_t *v;

	if ((v = json_object_get(root, "previous_response_id")) && !json_is_null(v))
		return resp__bad(in, "previous_response_id",
		                 "previous_response_id: this server keeps no responses (store is "
		                 "not kept); send the whole conversation as input");
	if ((v = json_object_get(root, "conversation")) && !json_is_null(v))
		return resp__bad(in, "conversation",
		                 "conversation: this server keeps no conversations; send the whole "
		                 "conversation as input");
	if ((v = json_object_get(root, "prompt")) && !json_is_null(v))
		return resp__bad(in, "prompt", "prompt: this server keeps no prompt templates");
	if ((v = json_object_get(root, "background")) && !json_is_false(v) && !json_is_null(v))
		return resp__bad(in, "background",
		                 "background: this server keeps no responses to fetch later; "
		                 "accepted: false");
	if ((v = json_object_get(root, "store")) && !json_is_boolean(v) && !json_is_null(v))
		return resp__bad(in, "store", "store is %s; accepted: a boolean (nothing is kept)",
		                 resp__type(v));
	if ((v = json_object_get(root, "top_logprobs")) && !json_is_null(v) &&
	    !(json_is_integer(v) && json_integer_value(v) == 0))
		return resp__bad(in, "top_logprobs",
		                 "top_logprobs: not built on the Responses API; accepted: 0 (the "
		                 "chat API gives log-probabilities)");
	if ((v = json_object_get(root, "max_tool_calls")) && !json_is_null(v))
		return resp__bad(in, "max_tool_calls", "max_tool_calls: not built; accepted: null");
	if ((v = json_object_get(root, "truncation")) && !json_is_null(v) &&
	    !resp__is(v, "disabled"))
		return resp__bad(in, "truncation",
		                 "truncation: this server does not drop input; accepted: "
		                 "\"disabled\"");
	if ((v = json_object_get(root, "service_tier")) && !json_is_null(v) &&
	    !resp__is(v, "auto") && !resp__is(v, "default"))
		return resp__bad(in, "service_tier",
		                 "service_tier: one tier; accepted: auto, default");
	if ((v = json_object_get(root, "text")) && !json_is_null(v)) {
		const json_t *f = json_object_get(v, "format");
		const char *key;
		json_t *x;

		if (!json_is_object(v))
			return resp__bad(in, "text",
			                 "text is %s; accepted: {\"format\": {\"type\": "
			                 "\"text\"}}",
			                 resp__type(v));
		json_object_foreach((json_t *)v, key, x)
		{
			if (strcmp(key, "format") && strcmp(key, "verbosity"))
				return resp__bad(in, "text",
				                 "text.%.32s is unknown; accepted: format", key);
		}
		/* structured output (docs/adr/0057): the chat path's
		 * response_format, its fields one level up */
		if (f && !json_is_null(f) && resp__is(json_object_get(f, "type"), "json_object")) {
			in->r->format = OAI_RF_JSON_OBJECT;
		} else if (f && !json_is_null(f) &&
		           resp__is(json_object_get(f, "type"), "json_schema")) {
			const json_t *nm = json_object_get(f, "name"),
			             *sc = json_object_get(f, "schema");
			const json_t *st = json_object_get(f, "strict");

			if (!json_is_string(nm) || !json_is_object(sc) ||
			    (st && !json_is_boolean(st) && !json_is_null(st)))
				return resp__bad(in, "text",
				                 "text.format of type json_schema takes {\"name\": "
				                 "string, \"schema\": object, \"strict\": boolean, "
				                 "\"description\": string}");
			json_object_foreach((json_t *)f, key, x)
			{
				if (strcmp(key, "type") && strcmp(key, "name") &&
				    strcmp(key, "schema") && strcmp(key, "strict") &&
				    strcmp(key, "description"))
					return resp__bad(
					    in, "text",
					    "text.format.%.32s is unknown; accepted: type, "
					    "name, schema, strict, description",
					    key);
			}
			in->r->format = OAI_RF_JSON_SCHEMA;
			in->r->rf_schema = sc;
			in->r->rf_name = json_string_value(nm);
		} else if (f && !json_is_null(f) && !resp__is(json_object_get(f, "type"), "text")) {
			return resp__bad(in, "text",
			                 "text.format's type; accepted: \"text\", \"json_object\", "
			                 "\"json_schema\"");
		}
	}
	return 0;
}

static int resp__read(struct resp__in *in, json_t *root)
{
	struct oai_req *r = in->r;
	const char *key;
	json_t *v;
	size_t i;

	json_object_foreach(root, key, v)
	{
		bool known = !strcmp(key, "\x01ignis");

		for (size_t k = 0; !known && k < sizeof resp__fields / sizeof *resp__fields; k++)
			known = !strcmp(key, resp__fields[k]);
		if (!known)
			return resp__bad(
			    in, key,
			    "the field '%.48s' is not one of the Responses API, or not "
			    "one this server takes (docs/http.md)",
			    key);
	}
	if (resp__stateful(in, root))
		return -1;
	v = json_object_get(root, "model");
	if (!json_is_string(v) || !json_string_length(v) ||
	    json_string_length(v) >= sizeof r->model)
		return resp__bad(in, "model", "model is %s; accepted: the served model's name",
		                 resp__type(v));
	snprintf(r->model, sizeof r->model, "%s", json_string_value(v));
	if ((v = json_object_get(root, "max_output_tokens")) && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    (uint64_t)json_integer_value(v) > in->lim->max_tokens)
			return resp__bad(in, "max_output_tokens",
			                 "max_output_tokens is %s; accepted: 1 to %u",
			                 resp__type(v), in->lim->max_tokens);
		r->max_tokens = (uint32_t)json_integer_value(v);
	}
	r->temperature = 1.0;
	r->top_p = 1.0;
	r->parallel_calls = true;
	if ((v = json_object_get(root, "temperature")) &&
	    resp__num(in, v, "temperature", 0, 2, false, &r->temperature))
		return -1;
	if ((v = json_object_get(root, "top_p")) &&
	    resp__num(in, v, "top_p", 0, 1, true, &r->top_p))
		return -1;
	if ((v = json_object_get(root, "stream")) && !json_is_null(v)) {
		if (!json_is_boolean(v))
			return resp__bad(in, "stream", "stream is %s; accepted: a boolean",
			                 resp__type(v));
		r->stream = json_is_true(v);
	}
	if ((v = json_object_get(root, "parallel_tool_calls")) && !json_is_null(v)) {
		if (!json_is_boolean(v))
			return resp__bad(in, "parallel_tool_calls",
			                 "parallel_tool_calls is %s; accepted: a boolean",
			                 resp__type(v));
		r->parallel_calls = json_is_true(v);
	}
	if ((v = json_object_get(root, "metadata")) && !json_is_object(v) && !json_is_null(v))
		return resp__bad(in, "metadata", "metadata is %s; accepted: an object",
		                 resp__type(v));
	if ((v = json_object_get(root, "include")) && !json_is_array(v) && !json_is_null(v))
		return resp__bad(in, "include", "include is %s; accepted: an array of strings",
		                 resp__type(v));
	if ((v = json_object_get(root, "reasoning")) && !json_is_null(v)) {
		const json_t *e = json_object_get(v, "effort");

		if (!json_is_object(v) || (e && !json_is_null(e) && !json_is_string(e)))
			return resp__bad(
			    in, "reasoning",
			    "reasoning is not {\"effort\": string, \"summary\": string}");
		/* the template's thinking is on or off: "none" turns it off, any
		 * other effort leaves the model's default */
		if (resp__is(e, "none")) {
			r->thinking_set = true;
			r->thinking = false;
		}
	}
	if ((v = json_object_get(root, "ignis"))) {
		const json_t *c = json_object_get(v, "class"), *s = json_object_get(v, "seed");

		if (!json_is_object(v) || json_object_size(v) > (size_t)(!!c + !!s))
			return resp__bad(in, "ignis", "ignis: accepted {\"class\", \"seed\"}");
		if (c && !resp__is(c, "interactive") && !resp__is(c, "agent"))
			return resp__bad(in, "ignis", "ignis.class: accepted interactive or agent");
		if (c) {
			r->class_set = true;
			r->agent = resp__is(c, "agent");
		}
		if (s && !json_is_integer(s))
			return resp__bad(in, "ignis", "ignis.seed is %s; accepted: an integer",
			                 resp__type(s));
		if (s) {
			r->seed_set = true;
			r->seed = json_integer_value(s);
		}
	}
	if ((v = json_object_get(root, "tools")) && !json_is_null(v) && resp__tools(in, v))
		return -1;
	if ((v = json_object_get(root, "tool_choice")) && !json_is_null(v) &&
	    resp_tool_choice(in, v))
		return -1;
	if ((v = json_object_get(root, "instructions")) && !json_is_null(v)) {
		struct oai_message *m;

		if (!json_is_string(v))
			return resp__bad(in, "instructions",
			                 "instructions is %s; accepted: a string", resp__type(v));
		if (!(m = resp__msg(in, "system")))
			return -1;
		m->text = json_string_value(v);
		m->len = json_string_length(v);
		if (resp__count(in, m->len, "instructions"))
			return -1;
	}
	v = json_object_get(root, "input");
	if (json_is_string(v)) {
		struct oai_message *m = resp__msg(in, "user");

		if (!m)
			return -1;
		m->text = json_string_value(v);
		m->len = json_string_length(v);
		return resp__count(in, m->len, "input");
	}
	if (!json_is_array(v) || !json_array_size(v))
		return resp__bad(in, "input",
		                 "input is %s; accepted: a string or a non-empty array "
		                 "of items",
		                 json_is_array(v) ? "empty" : resp__type(v));
	{
		json_t *it;

		json_array_foreach(v, i, it)
		{
			if (resp__item(in, it, i))
				return -1;
		}
	}
	return 0;
}

int resp_parse(const char *body, size_t len, const struct oai_limits *lim, bool count,
               struct oai_req *out, struct oai_err *err)
{
	struct resp__in in = {out, lim, err, NULL, 0, -1, NULL, 0};
	json_error_t je;
	json_t *root;
	int rc;

	(void)count;
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
		         "the body is not a JSON object%s%.200s; accepted: a Responses request",
		         root ? "" : ": ", root ? "" : je.text);
		return -1;
	}
	out->json = root;
	if (!(in.keep = json_array()) || json_object_set_new(root, "\x01ignis", in.keep)) {
		rc = resp__nomem(&in);
		goto out;
	}
	rc = resp__read(&in, root);
out:
	free(in.reason);
	if (rc)
		oai_req_free(out);
	return rc;
}

/* ---- answers ------------------------------------------------------------- */

enum resp__it { RI_REASONING = 1, RI_MESSAGE, RI_CALL };

struct resp__item {
	enum resp__it type;
	char id[96], call_id[96];
	char *name;
	char *text; /* reasoning, the message's text, or a call's arguments */
	size_t len;
	bool done;
};

struct wire_ans {
	const struct oai_req *q;
	bool stream;
	struct wire_sink sink;
	char id[96], model[128], tail[64];
	int64_t created;
	struct resp__item *it;
	size_t n;
	bool open;
	uint32_t calls;
	uint64_t seq;
	const char *status; /* in_progress, completed, incomplete, failed */
	bool usage_set;
	struct oai_usage u;
	char error[512];
};

static struct wire_ans *resp__new(const struct oai_req *q, const char *rid, const char *model,
                                  int64_t created, const struct wire_sink *sink)
{
	struct wire_ans *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	a->q = q;
	a->stream = sink != NULL;
	if (sink)
		a->sink = *sink;
	a->created = created;
	a->status = "in_progress";
	snprintf(a->tail, sizeof a->tail, "%s", wire_tail(rid));
	snprintf(a->id, sizeof a->id, "resp_%s", a->tail);
	snprintf(a->model, sizeof a->model, "%s", model);
	return a;
}

static void resp__free(struct wire_ans *a)
{
	if (!a)
		return;
	for (size_t i = 0; i < a->n; i++) {
		free(a->it[i].name);
		free(a->it[i].text);
	}
	free(a->it);
	free(a);
}

/* A part of a message or reasoning item, with its text so far. */
static json_t *resp__part(const struct resp__item *t)
{
	if (t->type == RI_REASONING)
		return json_pack("{s:s,s:o}", "type", "reasoning_text", "text",
		                 wire_text(t->text, t->len));
	return json_pack("{s:s,s:[],s:o,s:[]}", "type", "output_text", "annotations", "text",
	                 wire_text(t->text, t->len), "logprobs");
}

/* An output item; `full` with its text (as done), else as just added. */
static json_t *resp__item_json(const struct resp__item *t, bool full)
{
	const char *status = full ? "completed" : "in_progress";

	switch (t->type) {
	case RI_REASONING:
		return json_pack("{s:s,s:s,s:[],s:o}", "type", "reasoning", "id", t->id, "summary",
		                 "content", full ? json_pack("[o]", resp__part(t)) : json_array());
	case RI_MESSAGE:
		return json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "message", "id", t->id, "status",
		                 status, "role", "assistant", "content",
		                 full ? json_pack("[o]", resp__part(t)) : json_array());
	case RI_CALL:
		return json_pack("{s:s,s:s,s:s,s:s,s:o,s:s}", "type", "function_call", "id", t->id,
		                 "call_id", t->call_id, "name", t->name, "arguments",
		                 full ? wire_text(t->text, t->len) : json_string(""), "status",
		                 status);
	}
	return NULL;
}

static json_t *resp__usage(const struct oai_usage *u)
{
	return json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens", (json_int_t)u->prompt,
	                 "input_tokens_details", "cached_tokens", (json_int_t)u->cached,
	                 "output_tokens", (json_int_t)u->completion, "output_tokens_details",
	                 "reasoning_tokens", (json_int_t)0, "total_tokens",
	                 (json_int_t)(u->prompt + u->completion));
}

/* A field of the request echoed, or null. */
static json_t *resp__echo(const struct wire_ans *a, const char *key, json_t *dflt)
{
	json_t *v = a->q->json ? json_object_get(a->q->json, key) : NULL;

	if (v && !json_is_null(v)) {
		json_decref(dflt);
		return json_incref(v);
	}
	return dflt ? dflt : json_null();
}

/* The response object as it stands. */
static json_t *resp__object(struct wire_ans *a)
{
	json_t *out = json_array(), *o;
	bool done = strcmp(a->status, "in_progress") != 0;

	for (size_t i = 0; out && i < a->n; i++)
		json_array_append_new(out, resp__item_json(&a->it[i], a->it[i].done || done));
	o = json_pack("{s:s,s:s,s:I,s:s,s:b,s:o,s:s,s:o}", "id", a->id, "object", "response",
	              "created_at", (json_int_t)a->created, "status", a->status, "background", 0,
	              "output", out, "model", a->model, "parallel_tool_calls",
	              json_boolean(a->q->parallel_calls));
	if (!o)
		return NULL;
	json_object_set_new(
	    o, "error",
	    !strcmp(a->status, "failed")
	        ? json_pack("{s:s,s:s}", "code", "server_error", "message", a->error)
	        : json_null());
	json_object_set_new(o, "incomplete_details",
	                    !strcmp(a->status, "incomplete")
	                        ? json_pack("{s:s}", "reason", "max_output_tokens")
	                        : json_null());
	json_object_set_new(o, "instructions", resp__echo(a, "instructions", NULL));
	json_object_set_new(o, "max_output_tokens", resp__echo(a, "max_output_tokens", NULL));
	json_object_set_new(o, "metadata", resp__echo(a, "metadata", json_object()));
	json_object_set_new(o, "previous_response_id", json_null());
	json_object_set_new(
	    o, "reasoning",
	    resp__echo(a, "reasoning", json_pack("{s:n,s:n}", "effort", "summary")));
	json_object_set_new(o, "store", json_false()); /* nothing is kept (docs/adr/0056) */
	json_object_set_new(o, "temperature", json_real(a->q->temperature));
	json_object_set_new(o, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
	json_object_set_new(o, "tool_choice",
	                    json_string(a->q->tool_choice == OAI_TC_NONE ? "none" : "auto"));
	json_object_set_new(o, "tools", resp__echo(a, "tools", json_array()));
	json_object_set_new(o, "top_p", json_real(a->q->top_p));
	json_object_set_new(o, "truncation", json_string("disabled"));
	json_object_set_new(o, "usage", a->usage_set ? resp__usage(&a->u) : json_null());
	json_object_set_new(o, "user", resp__echo(a, "user", NULL));
	return o;
}

/* An event: `root` gets its type and sequence number. */
static bool resp__ev(struct wire_ans *a, const char *type, json_t *root)
{
	if (!root)
		return false;
	json_object_set_new(root, "type", json_string(type));
	json_object_set_new(root, "sequence_number", json_integer((json_int_t)a->seq++));
	return wire_sse(&a->sink, type, root);
}

static int resp__begin(struct wire_ans *a, const struct oai_usage *u)
{
	a->u = *u;
	if (!a->stream)
		return 0;
	if (!resp__ev(a, "response.created", json_pack("{s:o}", "response", resp__object(a))) ||
	    !resp__ev(a, "response.in_progress", json_pack("{s:o}", "response", resp__object(a))))
		return IG_E_NOMEM;
	return 0;
}

static int resp__close(struct wire_ans *a)
{
	struct resp__item *t;
	json_t *txt;
	int idx;

	if (!a->open)
		return 0;
	a->open = false;
	t = &a->it[a->n - 1];
	t->done = true;
	if (!a->stream)
		return 0;
	idx = (int)(a->n - 1);
	txt = wire_text(t->text, t->len);
	if (t->type == RI_CALL) {
		if (!resp__ev(a, "response.function_call_arguments.done",
		              json_pack("{s:s,s:i,s:s,s:o}", "item_id", t->id, "output_index", idx,
		                        "name", t->name, "arguments", txt)))
			return IG_E_NOMEM;
	} else if (!resp__ev(a,
	                     t->type == RI_MESSAGE ? "response.output_text.done"
	                                           : "response.reasoning_text.done",
	                     json_pack("{s:s,s:i,s:i,s:o}", "item_id", t->id, "output_index", idx,
	                               "content_index", 0, "text", txt)) ||
	           !resp__ev(a, "response.content_part.done",
	                     json_pack("{s:s,s:i,s:i,s:o}", "item_id", t->id, "output_index", idx,
	                               "content_index", 0, "part", resp__part(t))))
		return IG_E_NOMEM;
	return resp__ev(
	           a, "response.output_item.done",
	           json_pack("{s:i,s:o}", "output_index", idx, "item", resp__item_json(t, true)))
	           ? 0
	           : IG_E_NOMEM;
}

static int resp__open(struct wire_ans *a, enum resp__it type, const char *name, size_t name_len)
{
	struct resp__item *t;
	int idx;

	if (resp__close(a) || !(t = realloc(a->it, (a->n + 1) * sizeof(*t))))
		return IG_E_NOMEM;
	a->it = t;
	t = &a->it[a->n++];
	memset(t, 0, sizeof(*t));
	t->type = type;
	a->open = true;
	idx = (int)(a->n - 1);
	if (type == RI_CALL) {
		snprintf(t->id, sizeof t->id, "fc_%s_%u", a->tail, a->calls);
		snprintf(t->call_id, sizeof t->call_id, "call_%s_%u", a->tail, a->calls++);
		if (!(t->name = strndup(name, name_len)))
			return IG_E_NOMEM;
	} else
		snprintf(t->id, sizeof t->id, "%s_%s_%d", type == RI_MESSAGE ? "msg" : "rs",
		         a->tail, idx);
	if (!a->stream)
		return 0;
	if (!resp__ev(
	        a, "response.output_item.added",
	        json_pack("{s:i,s:o}", "output_index", idx, "item", resp__item_json(t, false))))
		return IG_E_NOMEM;
	if (type != RI_CALL &&
	    !resp__ev(a, "response.content_part.added",
	              json_pack("{s:s,s:i,s:i,s:o}", "item_id", t->id, "output_index", idx,
	                        "content_index", 0, "part", resp__part(t))))
		return IG_E_NOMEM;
	return 0;
}

static int resp__event(struct wire_ans *a, const struct op_ev *ev)
{
	enum resp__it want = ev->kind == OP_REASONING ? RI_REASONING
	                     : ev->kind == OP_CONTENT ? RI_MESSAGE
	                                              : RI_CALL;
	struct resp__item *t;
	json_t *d;
	int idx;

	if (ev->kind == OP_CALL_END)
		return resp__close(a);
	if (ev->kind == OP_CALL_BEGIN)
		return resp__open(a, RI_CALL, ev->text, ev->len);
	if (!ev->len)
		return 0;
	if (!a->open || a->it[a->n - 1].type != want) {
		int rc = resp__open(a, want, NULL, 0);

		if (rc)
			return rc;
	}
	t = &a->it[a->n - 1];
	if (!wire_grow(&t->text, &t->len, ev->text, ev->len))
		return IG_E_NOMEM;
	if (!a->stream)
		return 0;
	idx = (int)(a->n - 1);
	d = wire_text(ev->text, ev->len);
	if (want == RI_CALL)
		return resp__ev(a, "response.function_call_arguments.delta",
		                json_pack("{s:s,s:i,s:o}", "item_id", t->id, "output_index", idx,
		                          "delta", d))
		           ? 0
		           : IG_E_IO;
	if (want == RI_MESSAGE)
		return resp__ev(a, "response.output_text.delta",
		                json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", t->id,
		                          "output_index", idx, "content_index", 0, "delta", d,
		                          "logprobs"))
		           ? 0
		           : IG_E_IO;
	return resp__ev(a, "response.reasoning_text.delta",
	                json_pack("{s:s,s:i,s:i,s:o}", "item_id", t->id, "output_index", idx,
	                          "content_index", 0, "delta", d))
	           ? 0
	           : IG_E_IO;
}

static int resp__end(struct wire_ans *a, const struct wire_end *e)
{
	uint64_t prompt = a->u.prompt, cached = a->u.cached;

	if (resp__close(a))
		return IG_E_NOMEM;
	a->u = e->usage;
	if (!a->u.prompt) {
		a->u.prompt = prompt;
		a->u.cached = cached;
	}
	a->usage_set = true;
	a->status = !strcmp(e->finish, "length") || !strcmp(e->finish, "context") ? "incomplete"
	                                                                          : "completed";
	if (!a->stream)
		return 0;
	return resp__ev(a,
	                !strcmp(a->status, "completed") ? "response.completed"
	                                                : "response.incomplete",
	                json_pack("{s:o}", "response", resp__object(a)))
	           ? 0
	           : IG_E_NOMEM;
}

static int resp__fail(struct wire_ans *a, const struct oai_err *err)
{
	a->status = "failed";
	snprintf(a->error, sizeof a->error, "%s", err->message);
	return resp__ev(a, "response.failed", json_pack("{s:o}", "response", resp__object(a)))
	           ? 0
	           : IG_E_NOMEM;
}

/* OpenAI's error shape; the chat path's names of the request's parts (a
 * refusal by the template or the context) as this API calls them. */
static char *resp__error_json(const struct oai_err *err)
{
	static const char *const names[][2] = {{"messages", "input"},
	                                       {"chat_template_kwargs", "reasoning"}};
	struct oai_err e = *err;

	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		if (!strcmp(e.param, names[i][0]))
			snprintf(e.param, sizeof e.param, "%s", names[i][1]);
	return oai_error_json(&e);
}

static char *resp__json(struct wire_ans *a)
{
	return wire_dump(resp__object(a));
}

const struct wire_api resp_api = {
    .name = "responses",
    .parse = resp_parse,
    .error_json = resp__error_json,
    .ans_new = resp__new,
    .ans_begin = resp__begin,
    .ans_event = resp__event,
    .ans_end = resp__end,
    .ans_fail = resp__fail,
    .ans_json = resp__json,
    .ans_free = resp__free,
    .count_json = NULL,
};
