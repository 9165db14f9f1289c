/* oai.c - OpenAI's HTTP API, its JSON half (see oai.h). */
#include "oai.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

void oai_errf(struct oai_err *err, int status, const char *param, const char *code, const char *fmt,
              ...)
{
	va_list ap;

	err->status = status;
	err->type = status == 404   ? "not_found_error"
	            : status == 503 ? "service_unavailable_error"
	            : status >= 500 ? "server_error"
	                            : "invalid_request_error";
	snprintf(err->param, sizeof err->param, "%s", param ? param : "");
	snprintf(err->code, sizeof err->code, "%s", code ? code : "");
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof err->message, fmt, ap);
	va_end(ap);
}

void oai_req_free(struct oai_req *r)
{
	free(r->prompt_ids);
	for (size_t i = 0; i < r->n_messages; i++) {
		free(r->messages[i].joined);
		free(r->messages[i].calls);
	}
	free(r->messages);
	free(r->tools);
	json_decref(r->json); /* the strings the rest pointed at */
	memset(r, 0, sizeof(*r));
}

/* ---- reading ------------------------------------------------------------- */

struct oai__in {
	struct oai_req *r;
	const struct oai_limits *lim;
	struct oai_err *err;
	bool stream_options; /* seen; valid only with stream true */
	bool top_logprobs;   /* chat's, seen; valid only with logprobs true */
	const char *tc_name; /* tool_choice's function, checked against tools */
};

/* The JSON type's name, for messages. */
static const char *oai__type(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "an object";
	case JSON_ARRAY:
		return "an array";
	case JSON_STRING:
		return "a string";
	case JSON_INTEGER:
		return "an integer";
	case JSON_REAL:
		return "a number";
	case JSON_TRUE:
	case JSON_FALSE:
		return "a boolean";
	default:
		return "null";
	}
}

static int oai__bad(struct oai__in *in, const char *param, const json_t *v, const char *accepted)
{
	oai_errf(in->err, 400, param, "invalid_value", "'%s' is %s; accepted: %s", param,
	         oai__type(v), accepted);
	return -1;
}

static int oai__nomem(struct oai__in *in)
{
	oai_errf(in->err, 500, NULL, NULL, "out of memory reading the request");
	return -1;
}

static int oai__model(struct oai__in *in, const char *k, json_t *v)
{
	if (!json_is_string(v) || !json_string_length(v) ||
	    json_string_length(v) >= sizeof in->r->model)
		return oai__bad(in, k, v, "the model's name, a string of 1 to 127 bytes");
	memcpy(in->r->model, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

/* An integer lo..hi into *out. */
static int oai__int(struct oai__in *in, const char *k, json_t *v, int64_t lo, int64_t hi,
                    int64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
		if (json_is_integer(v))
			oai_errf(in->err, 400, k, "invalid_value",
			         "'%s' is %lld; accepted: an integer from %lld to %lld", k,
			         (long long)json_integer_value(v), (long long)lo, (long long)hi);
		else
			oai_errf(in->err, 400, k, "invalid_value",
			         "'%s' is %s; accepted: an integer from %lld to %lld", k,
			         oai__type(v), (long long)lo, (long long)hi);
		return -1;
	}
	*out = json_integer_value(v);
	return 0;
}

static int oai__max_tokens(struct oai__in *in, const char *k, json_t *v)
{
	int64_t n;

	if (json_is_null(v))
		return 0;
	/* completions: 0 too, with echo (the prompt alone: checked at the end) */
	if (oai__int(in, k, v, in->r->kind == OAI_COMPLETION ? 0 : 1, in->lim->max_tokens, &n))
		return -1;
	in->r->max_tokens = (uint32_t)n;
	in->r->max_zero = n == 0;
	return 0;
}

/* A boolean field: true or false into *out; null leaves it as it was. */
static int oai__bool(struct oai__in *in, const char *k, json_t *v, bool *out)
{
	if (json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return oai__bad(in, k, v, "true or false");
	*out = json_is_true(v);
	return 0;
}

/* completions: echo, the prompt's text before the completion's (and with
 * logprobs, its tokens' log-probabilities before theirs: docs/adr/0063) */
static int oai__echo(struct oai__in *in, const char *k, json_t *v)
{
	return oai__bool(in, k, v, &in->r->echo);
}

/* A number lo..hi (lo itself excluded when `open`). */
static int oai__num(struct oai__in *in, const char *k, json_t *v, double lo, double hi, bool open,
                    double *out)
{
	double d;

	if (json_is_null(v))
		return 0;
	if (!json_is_number(v))
		return oai__bad(in, k, v,
		                open ? "a number above 0, at most 1" : "a number from 0 to 2");
	d = json_number_value(v);
	if (!(d >= lo && d <= hi) || (open && d == lo)) {
		oai_errf(in->err, 400, k, "invalid_value", "'%s' is %g; accepted: %s", k, d,
		         open ? "a number above 0, at most 1" : "a number from 0 to 2");
		return -1;
	}
	*out = d;
	return 0;
}

static int oai__temperature(struct oai__in *in, const char *k, json_t *v)
{
	return oai__num(in, k, v, 0.0, 2.0, false, &in->r->temperature);
}

static int oai__top_p(struct oai__in *in, const char *k, json_t *v)
{
	return oai__num(in, k, v, 0.0, 1.0, true, &in->r->top_p);
}

static int oai__top_k(struct oai__in *in, const char *k, json_t *v)
{
	int64_t n;

	if (json_is_null(v))
		return 0;
	if (oai__int(in, k, v, 0, in->lim->vocab, &n))
		return -1;
	in->r->top_k = (uint32_t)n;
	return 0;
}

static int oai__seed(struct oai__in *in, const char *k, json_t *v)
{
	if (json_is_null(v))
		return 0;
	if (!json_is_integer(v))
		return oai__bad(in, k, v, "an integer");
	in->r->seed_set = true;
	in->r->seed = json_integer_value(v);
	return 0;
}

static int oai__stop_one(struct oai__in *in, const char *k, json_t *v)
{
	size_t n = json_string_length(v);

	if (!json_is_string(v) || n == 0 || n > 64)
		return oai__bad(in, k, v, "a string of 1 to 64 bytes, or an array of up to 4");
	in->r->stop[in->r->n_stop++] = json_string_value(v);
	return 0;
}

static int oai__stop(struct oai__in *in, const char *k, json_t *v)
{
	size_t i;
	json_t *s;

	if (json_is_null(v))
		return 0;
	if (!json_is_array(v))
		return oai__stop_one(in, k, v);
	if (json_array_size(v) > 4) {
		oai_errf(in->err, 400, k, "invalid_value",
		         "'%s' holds %zu strings; accepted: up to 4", k, json_array_size(v));
		return -1;
	}
	json_array_foreach(v, i, s) if (oai__stop_one(in, k, s)) return -1;
	return 0;
}

static int oai__stream(struct oai__in *in, const char *k, json_t *v)
{
	return oai__bool(in, k, v, &in->r->stream);
}

static int oai__stream_options(struct oai__in *in, const char *k, json_t *v)
{
	const char *key;
	json_t *x;

	if (json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return oai__bad(in, k, v, "an object {\"include_usage\": true or false}");
	json_object_foreach(v, key, x)
	{
		if (strcmp(key, "include_usage") || !json_is_boolean(x))
			return oai__bad(in, k, v, "an object {\"include_usage\": true or false}");
		in->r->include_usage = json_is_true(x);
	}
	in->stream_options = true;
	return 0;
}

static int oai__n(struct oai__in *in, const char *k, json_t *v)
{
	if (json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    json_integer_value(v) > (json_int_t)OAI_N_MAX)
		return oai__bad(in, k, v, "an integer 1 to 16 (OAI_N_MAX choices)");
	in->r->n = (uint32_t)json_integer_value(v);
	return 0;
}

/* chat: logprobs true or false */
static int oai__logprobs_chat(struct oai__in *in, const char *k, json_t *v)
{
	return oai__bool(in, k, v, &in->r->logprobs);
}

/* chat: top_logprobs 0..20 (with logprobs true: checked at the end) */
static int oai__top_logprobs(struct oai__in *in, const char *k, json_t *v)
{
	int64_t n;

	if (json_is_null(v))
		return 0;
	if (oai__int(in, k, v, 0, OAI_TOP_LP_MAX, &n))
		return -1;
	in->r->top_logprobs = (uint32_t)n;
	in->top_logprobs = true;
	return 0;
}

/* completions: logprobs N, the top list's length (OpenAI takes up to 5; we
 * take up to 20, as chat's top_logprobs); false or null: none */
static int oai__logprobs_completion(struct oai__in *in, const char *k, json_t *v)
{
	int64_t n;

	if (json_is_null(v) || json_is_false(v))
		return 0;
	if (oai__int(in, k, v, 0, OAI_TOP_LP_MAX, &n))
		return -1;
	in->r->logprobs = true;
	in->r->top_logprobs = (uint32_t)n;
	return 0;
}

static int oai__ignis(struct oai__in *in, const char *k, json_t *v)
{
	const char *key;
	json_t *x;
	static const char accepted[] = "an object {\"class\": \"interactive\" or \"agent\"}";

	if (!json_is_object(v))
		return oai__bad(in, k, v, accepted);
	json_object_foreach(v, key, x)
	{
		if (strcmp(key, "class") || !json_is_string(x) ||
		    (strcmp(json_string_value(x), "interactive") &&
		     strcmp(json_string_value(x), "agent"))) {
			oai_errf(in->err, 400, "ignis.class", "invalid_value",
			         "'ignis' holds '%s'; accepted: %s", key, accepted);
			return -1;
		}
		in->r->agent = !strcmp(json_string_value(x), "agent");
		in->r->class_set = true;
	}
	return 0;
}

static int oai__kwargs(struct oai__in *in, const char *k, json_t *v)
{
	const char *key;
	json_t *x;
	static const char accepted[] = "an object {\"enable_thinking\": true or false}";

	if (json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return oai__bad(in, k, v, accepted);
	json_object_foreach(v, key, x)
	{
		if (strcmp(key, "enable_thinking") || !json_is_boolean(x)) {
			oai_errf(in->err, 400, k, "invalid_value", "'%s' holds '%s'; accepted: %s",
			         k, key, accepted);
			return -1;
		}
		in->r->thinking_set = true;
		in->r->thinking = json_is_true(x);
	}
	return 0;
}

/* A content: a string, or text parts joined. */
static int oai__content(struct oai__in *in, json_t *v, struct oai_message *m)
{
	static const char accepted[] =
	    "a string, or an array of {\"type\": \"text\", \"text\": ...}";
	size_t i, n = 0;
	json_t *p;

	if (json_is_string(v)) {
		m->len = json_string_length(v);
		m->text = json_string_value(v);
		return 0;
	}
	if (!json_is_array(v))
		return oai__bad(in, "messages.content", v, accepted);
	json_array_foreach(v, i, p)
	{
		json_t *t = json_object_get(p, "type"), *x = json_object_get(p, "text");

		if (!json_is_object(p) || !json_is_string(t) ||
		    strcmp(json_string_value(t), "text") || !json_is_string(x) ||
		    json_object_size(p) != 2) {
			oai_errf(in->err, 400, "messages.content", "invalid_value",
			         "part %zu of a message's content is not a text part; accepted: %s "
			         "(no images or audio)",
			         i, accepted);
			return -1;
		}
		n += json_string_length(x);
	}
	if (!(m->joined = malloc(n + 1)))
		return oai__nomem(in);
	n = 0;
	json_array_foreach(v, i, p)
	{
		json_t *x = json_object_get(p, "text");

		memcpy(m->joined + n, json_string_value(x), json_string_length(x));
		n += json_string_length(x);
	}
	m->joined[n] = '\0';
	m->text = m->joined;
	m->len = n;
	return 0;
}

/* An assistant message's tool_calls into m->calls: each {"id", "type":
 * "function", "function": {"name", "arguments"}} (arguments OpenAI's JSON
 * text, a string). */
static int oai__msg_calls(struct oai__in *in, size_t i, json_t *v, struct oai_message *m)
{
	size_t k;
	json_t *c;

	if (!json_is_array(v) || json_array_size(v) > OAI_CALLS_MAX) {
		oai_errf(in->err, 400, "messages.tool_calls", "invalid_value",
		         "message %zu's tool_calls is %s; accepted: an array of up to %u calls", i,
		         oai__type(v), OAI_CALLS_MAX);
		return -1;
	}
	if (json_array_size(v) && !(m->calls = calloc(json_array_size(v), sizeof(*m->calls))))
		return oai__nomem(in);
	json_array_foreach(v, k, c)
	{
		json_t *id = json_object_get(c, "id"), *fn = json_object_get(c, "function");
		json_t *ty = json_object_get(c, "type"), *name = json_object_get(fn, "name");
		json_t *args = json_object_get(fn, "arguments");

		if (!json_is_string(id) || !json_is_object(fn) || !json_is_string(name) ||
		    !json_string_length(name) || (ty && !json_is_string(ty)) ||
		    (ty && strcmp(json_string_value(ty), "function")) ||
		    (args && !json_is_string(args))) {
			oai_errf(in->err, 400, "messages.tool_calls", "invalid_value",
			         "message %zu's tool call %zu is not {\"id\": string, \"type\": "
			         "\"function\", \"function\": {\"name\": string, \"arguments\": "
			         "string}}",
			         i, k);
			return -1;
		}
		m->calls[k] = (struct oai_msg_call){
		    .id = json_string_value(id),
		    .name = json_string_value(name),
		    .name_len = json_string_length(name),
		    .args = args ? json_string_value(args) : "{}",
		    .args_len = args ? json_string_length(args) : 2,
		};
		m->n_calls = k + 1;
	}
	return 0;
}

static int oai__messages(struct oai__in *in, const char *k, json_t *v)
{
	static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
	size_t i, total = 0;
	json_t *m;

	if (!json_is_array(v) || !json_array_size(v))
		return oai__bad(in, k, v, "a non-empty array of messages");
	if (json_array_size(v) > in->lim->max_messages) {
		oai_errf(in->err, 413, k, "context_length_exceeded",
		         "'%s' holds %zu messages; accepted: up to %zu", k, json_array_size(v),
		         in->lim->max_messages);
		return -1;
	}
	if (!(in->r->messages = calloc(json_array_size(v), sizeof(*in->r->messages))))
		return oai__nomem(in);
	json_array_foreach(v, i, m)
	{
		struct oai_message *om = &in->r->messages[i];
		const char *key, *role;
		json_t *x, *c = NULL, *calls = NULL, *reasoning = NULL, *call_id = NULL;
		size_t ri = 0;

		in->r->n_messages = i + 1;
		if (!json_is_object(m))
			return oai__bad(in, k, m, "messages as objects {\"role\", \"content\"}");
		x = json_object_get(m, "role");
		role = json_is_string(x) ? json_string_value(x) : "";
		while (ri < 5 && strcmp(role, roles[ri]))
			ri++;
		if (ri == 5) {
			oai_errf(in->err, 400, "messages.role", "invalid_value",
			         "message %zu has role '%s'; accepted: system, developer, user, "
			         "assistant, tool",
			         i, role);
			return -1;
		}
		json_object_foreach(m, key, x)
		{
			if (!strcmp(key, "content"))
				c = x;
			else if (!strcmp(key, "tool_calls") && ri == 3)
				calls = x;
			else if (!strcmp(key, "reasoning_content") && ri == 3)
				reasoning = x;
			else if (!strcmp(key, "tool_call_id") && ri == 4)
				call_id = x;
			else if (strcmp(key, "role") && strcmp(key, "name")) {
				oai_errf(
				    in->err, 400, "messages", "unsupported_value",
				    "message %zu (%s) has '%s'; accepted: role, content and name, "
				    "tool_calls and reasoning_content on an assistant message, "
				    "tool_call_id on a tool message",
				    i, role, key);
				return -1;
			}
		}
		snprintf(om->role, sizeof om->role, "%s", roles[ri]);
		if (calls && !json_is_null(calls) && oai__msg_calls(in, i, calls, om))
			return -1;
		if (reasoning && !json_is_null(reasoning)) {
			if (!json_is_string(reasoning))
				return oai__bad(in, "messages.reasoning_content", reasoning,
				                "a string");
			om->reasoning = json_string_value(reasoning);
			om->reasoning_len = json_string_length(reasoning);
		}
		if (ri == 4) {
			/* a tool's answer: to a call an assistant message made */
			bool found = false;

			if (!json_is_string(call_id)) {
				oai_errf(
				    in->err, 400, "messages.tool_call_id", "invalid_value",
				    "message %zu (tool) has no tool_call_id; accepted: the id of a "
				    "call of an earlier assistant message",
				    i);
				return -1;
			}
			om->tool_call_id = json_string_value(call_id);
			for (size_t j = 0; j < i && !found; j++)
				for (size_t q = 0; q < in->r->messages[j].n_calls && !found; q++)
					found = !strcmp(in->r->messages[j].calls[q].id,
					                om->tool_call_id);
			if (!found) {
				oai_errf(
				    in->err, 400, "messages.tool_call_id", "invalid_value",
				    "message %zu (tool) answers call '%.64s', which no earlier "
				    "assistant message made",
				    i, om->tool_call_id);
				return -1;
			}
		}
		if ((!c || json_is_null(c)) && ri == 3 && om->n_calls) {
			om->text = ""; /* calls without text */
			om->len = 0;
		} else if (!c) {
			oai_errf(in->err, 400, "messages.content", "invalid_value",
			         "message %zu has no content; accepted: a string or text parts", i);
			return -1;
		} else if (oai__content(in, c, om))
			return -1;
		total += om->len + om->reasoning_len;
		for (size_t q = 0; q < om->n_calls; q++)
			total += om->calls[q].name_len + om->calls[q].args_len;
	}
	if (total > in->lim->max_text) {
		oai_errf(in->err, 413, k, "context_length_exceeded",
		         "the messages hold %zu bytes; accepted: up to %zu", total,
		         in->lim->max_text);
		return -1;
	}
	return 0;
}

/* A tool's name: OpenAI's rule, 1 to 64 of a-z, A-Z, 0-9, '_' and '-'. */
static bool oai__tool_name_ok(const char *n, size_t len)
{
	if (!len || len > 64)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((n[i] >= 'a' && n[i] <= 'z') || (n[i] >= 'A' && n[i] <= 'Z') ||
		      (n[i] >= '0' && n[i] <= '9') || n[i] == '_' || n[i] == '-'))
			return false;
	return true;
}

static int oai__tools(struct oai__in *in, const char *k, json_t *v)
{
	size_t i;
	json_t *t;

	if (json_is_null(v))
		return 0;
	if (!json_is_array(v) || json_array_size(v) > OAI_TOOLS_MAX) {
		oai_errf(in->err, 400, k, "invalid_value",
		         "'tools' is %s; accepted: an array of up to %u tools {\"type\": "
		         "\"function\", \"function\": {\"name\", \"description\", "
		         "\"parameters\", \"strict\"}}",
		         oai__type(v), OAI_TOOLS_MAX);
		return -1;
	}
	if (json_array_size(v) &&
	    !(in->r->tools = calloc(json_array_size(v), sizeof(*in->r->tools))))
		return oai__nomem(in);
	json_array_foreach(v, i, t)
	{
		json_t *fn = json_object_get(t, "function"), *ty = json_object_get(t, "type"), *x;
		json_t *name = json_object_get(fn, "name"),
		       *params = json_object_get(fn, "parameters");
		const char *key;

		if (!json_is_object(t) || !json_is_string(ty) ||
		    strcmp(json_string_value(ty), "function") || !json_is_object(fn)) {
			oai_errf(in->err, 400, "tools", "invalid_value",
			         "tool %zu is not {\"type\": \"function\", \"function\": {...}}",
			         i);
			return -1;
		}
		json_object_foreach(fn, key,
		                    x) if (strcmp(key, "name") && strcmp(key, "description") &&
		                           strcmp(key, "parameters") && strcmp(key, "strict"))
		{
			oai_errf(in->err, 400, "tools", "unsupported_value",
			         "tool %zu's function has '%s'; accepted: name, description, "
			         "parameters, strict",
			         i, key);
			return -1;
		}
		if (!json_is_string(name) ||
		    !oai__tool_name_ok(json_string_value(name), json_string_length(name))) {
			oai_errf(in->err, 400, "tools", "invalid_value",
			         "tool %zu's name is not 1 to 64 of a-z, A-Z, 0-9, '_' and '-'", i);
			return -1;
		}
		if (params && !json_is_object(params)) {
			oai_errf(in->err, 400, "tools", "invalid_value",
			         "tool %zu's parameters are %s; accepted: a JSON Schema object", i,
			         oai__type(params));
			return -1;
		}
		for (size_t j = 0; j < i; j++)
			if (!strcmp(in->r->tools[j].name, json_string_value(name))) {
				oai_errf(in->err, 400, "tools", "invalid_value",
				         "tools %zu and %zu are both named '%s'; names must differ",
				         j, i, json_string_value(name));
				return -1;
			}
		x = json_object_get(fn, "strict");
		if (x && !json_is_boolean(x) && !json_is_null(x)) {
			oai_errf(in->err, 400, "tools", "invalid_value",
			         "tool %zu's strict is %s; accepted: true or false", i,
			         oai__type(x));
			return -1;
		}
		in->r->tools[i] =
		    (struct oai_tool){json_string_value(name), t, params, json_is_true(x)};
		in->r->n_tools = i + 1;
	}
	return 0;
}

static int oai__tool_choice(struct oai__in *in, const char *k, json_t *v)
{
	const char *c = json_is_string(v) ? json_string_value(v) : NULL;

	if (json_is_null(v) || (c && !strcmp(c, "auto"))) {
		in->r->tool_choice = OAI_TC_AUTO;
		return 0;
	}
	if (c && !strcmp(c, "none")) {
		in->r->tool_choice = OAI_TC_NONE;
		return 0;
	}
	if (c && !strcmp(c, "required")) {
		in->r->tool_choice = OAI_TC_REQUIRED;
		return 0;
	}
	if (json_is_object(v)) {
		json_t *ty = json_object_get(v, "type"), *fn = json_object_get(v, "function");
		json_t *name = json_object_get(fn, "name");

		if (json_object_size(v) != 2 || !json_is_string(ty) ||
		    strcmp(json_string_value(ty), "function") || !json_is_object(fn) ||
		    json_object_size(fn) != 1 || !json_is_string(name)) {
			oai_errf(in->err, 400, k, "invalid_value",
			         "tool_choice is an object but not {\"type\": \"function\", "
			         "\"function\": {\"name\": NAME}}");
			return -1;
		}
		/* checked against `tools` once every field is read */
		in->tc_name = json_string_value(name);
		in->r->tool_choice = OAI_TC_NAMED;
		return 0;
	}
	return oai__bad(in, k, v,
	                "\"auto\", \"none\", \"required\" or {\"type\": \"function\", "
	                "\"function\": {\"name\": NAME}}");
}

/* response_format (docs/adr/0057): text, json_object, or json_schema with
 * its schema (compiled when the request is submitted: a schema outside
 * the supported subset is refused then, naming the keyword). */
static int oai__response_format(struct oai__in *in, const char *k, json_t *v)
{
	json_t *ty = json_object_get(v, "type"), *js, *x;
	const char *t = json_string_value(ty), *key;

	if (json_is_null(v))
		return 0;
	if (!json_is_object(v) || !t)
		return oai__bad(in, k, v,
		                "{\"type\": \"text\"}, {\"type\": \"json_object\"} or "
		                "{\"type\": \"json_schema\", \"json_schema\": {...}}");
	if (!strcmp(t, "text") || !strcmp(t, "json_object")) {
		if (json_object_size(v) != 1) {
			oai_errf(in->err, 400, k, "invalid_value",
			         "response_format of type \"%s\" takes no other field", t);
			return -1;
		}
		in->r->format = !strcmp(t, "text") ? OAI_RF_TEXT : OAI_RF_JSON_OBJECT;
		return 0;
	}
	if (strcmp(t, "json_schema")) {
		oai_errf(in->err, 400, k, "invalid_value",
		         "response_format type '%.64s'; accepted: \"text\", \"json_object\", "
		         "\"json_schema\"",
		         t);
		return -1;
	}
	js = json_object_get(v, "json_schema");
	if (json_object_size(v) != 2 || !json_is_object(js)) {
		oai_errf(in->err, 400, k, "invalid_value",
		         "response_format of type \"json_schema\" takes one other field, "
		         "\"json_schema\": {\"name\", \"schema\", \"strict\", \"description\"}");
		return -1;
	}
	json_object_foreach(js, key, x)
	{
		if (strcmp(key, "name") && strcmp(key, "schema") && strcmp(key, "strict") &&
		    strcmp(key, "description")) {
			oai_errf(in->err, 400, k, "invalid_value",
			         "response_format.json_schema has '%.64s'; accepted: name, schema, "
			         "strict, description",
			         key);
			return -1;
		}
	}
	x = json_object_get(js, "name");
	if (!json_is_string(x) || !oai__tool_name_ok(json_string_value(x), json_string_length(x))) {
		oai_errf(in->err, 400, k, "invalid_value",
		         "response_format.json_schema.name is missing or not 1 to 64 of a-z, A-Z, "
		         "0-9, '_' and '-'");
		return -1;
	}
	in->r->rf_name = json_string_value(x);
	x = json_object_get(js, "strict");
	if (x && !json_is_boolean(x) && !json_is_null(x)) {
		oai_errf(in->err, 400, k, "invalid_value",
		         "response_format.json_schema.strict is %s; accepted: true or false",
		         oai__type(x));
		return -1;
	}
	/* strict or not, the answer follows the schema: a grammar costs no
	 * quality a looser reading would buy */
	x = json_object_get(js, "schema");
	if (!json_is_object(x)) {
		oai_errf(in->err, 400, k, "invalid_value",
		         "response_format.json_schema.schema is %s; accepted: a JSON Schema object",
		         x ? oai__type(x) : "missing");
		return -1;
	}
	in->r->rf_schema = x;
	in->r->format = OAI_RF_JSON_SCHEMA;
	return 0;
}

static int oai__parallel(struct oai__in *in, const char *k, json_t *v)
{
	if (json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return oai__bad(in, k, v, "true or false");
	in->r->parallel_calls = json_is_true(v);
	return 0;
}

/* Token ids: an array of integers below the vocabulary. */
static int oai__ids(struct oai__in *in, const char *k, json_t *v)
{
	size_t i, n = json_array_size(v);
	json_t *x;

	if (n == 0)
		return oai__bad(in, k, v, "a non-empty prompt");
	if (n > in->lim->max_prompt_ids) {
		oai_errf(in->err, 413, k, "context_length_exceeded",
		         "the prompt holds %zu token ids; accepted: up to %zu", n,
		         in->lim->max_prompt_ids);
		return -1;
	}
	if (!(in->r->prompt_ids = malloc(n * sizeof(uint32_t))))
		return oai__nomem(in);
	json_array_foreach(v, i, x)
	{
		if (json_is_real(x)) {
			oai_errf(
			    in->err, 400, k, "invalid_value",
			    "token %zu of the prompt is %g, not a whole number; accepted: token "
			    "ids, integers from 0 to %u",
			    i, json_real_value(x), in->lim->vocab - 1);
			return -1;
		}
		if (!json_is_integer(x) || json_integer_value(x) < 0 ||
		    json_integer_value(x) >= (json_int_t)in->lim->vocab) {
			oai_errf(
			    in->err, 400, k, "invalid_value",
			    "token %zu of the prompt is not a token id; accepted: integers from 0 "
			    "to %u",
			    i, in->lim->vocab - 1);
			return -1;
		}
		in->r->prompt_ids[i] = (uint32_t)json_integer_value(x);
	}
	in->r->n_prompt_ids = n;
	return 0;
}

static int oai__prompt(struct oai__in *in, const char *k, json_t *v)
{
	static const char accepted[] = "a string, an array of one string, token ids, or an array "
	                               "of one array of token ids";
	json_t *one = v;

	if (json_is_array(v)) {
		if (json_array_size(v) == 0)
			return oai__bad(in, k, v, accepted);
		one = json_array_get(v, 0);
		/* a number that is not an integer: ids written as floats (the
		 * array is one prompt of token ids, not many prompts) */
		if (json_is_number(one))
			return oai__ids(in, k, v);
		if (json_array_size(v) != 1) {
			oai_errf(in->err, 400, k, "unsupported_value",
			         "'%s' holds %zu prompts; accepted: one prompt a request", k,
			         json_array_size(v));
			return -1;
		}
		if (json_is_array(one))
			return oai__ids(in, k, one);
	}
	if (!json_is_string(one))
		return oai__bad(in, k, v, accepted);
	if (json_string_length(one) > in->lim->max_text) {
		oai_errf(in->err, 413, k, "context_length_exceeded",
		         "the prompt holds %zu bytes; accepted: up to %zu", json_string_length(one),
		         in->lim->max_text);
		return -1;
	}
	if (!json_string_length(one)) {
		oai_errf(in->err, 400, k, "invalid_value",
		         "the prompt is empty; accepted: %s, with at least one character or id",
		         accepted);
		return -1;
	}
	in->r->prompt_len = json_string_length(one);
	in->r->prompt = json_string_value(one);
	return 0;
}

/* A field we do not run, taken at its neutral value only. */
static int oai__neutral(struct oai__in *in, const char *k, json_t *v)
{
	static const struct {
		const char *key, *neutral;
	} n[] = {
	    {"presence_penalty", "0"},
	    {"frequency_penalty", "0"},
	    {"logit_bias", "{}"},
	    {"best_of", "1"},
	    {"suffix", "null"},
	    {"functions", "[] (no function calls; 'tools' holds functions)"},
	    {"function_call", "\"none\" ('tool_choice' chooses)"},
	    {"store", "false"},
	    {"service_tier", "\"auto\" or \"default\""},
	    {"modalities", "[\"text\"]"},
	    {"reasoning_effort", "null"},
	    {"prediction", "null"},
	    {"audio", "null"},
	    {"web_search_options", "null"},
	};
	bool ok = json_is_null(v);
	size_t i = 0, nn = sizeof(n) / sizeof(n[0]);

	while (i + 1 < nn && strcmp(n[i].key, k)) /* every neutral field is in n[] */
		i++;
	if (!ok && !strcmp(k, "store"))
		ok = json_is_false(v);
	else if (!ok && (!strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty")))
		ok = json_is_number(v) && json_number_value(v) == 0;
	else if (!ok && !strcmp(k, "best_of"))
		ok = json_is_integer(v) && json_integer_value(v) == 1;
	else if (!ok && !strcmp(k, "logit_bias"))
		ok = json_is_object(v) && !json_object_size(v);
	else if (!ok && !strcmp(k, "functions"))
		ok = json_is_array(v) && !json_array_size(v);
	else if (!ok && !strcmp(k, "function_call"))
		ok = json_is_string(v) && !strcmp(json_string_value(v), "none");
	else if (!ok && !strcmp(k, "service_tier"))
		ok = json_is_string(v) && (!strcmp(json_string_value(v), "auto") ||
		                           !strcmp(json_string_value(v), "default"));
	else if (!ok && !strcmp(k, "modalities"))
		ok = json_is_array(v) && json_array_size(v) == 1 &&
		     json_is_string(json_array_get(v, 0)) &&
		     !strcmp(json_string_value(json_array_get(v, 0)), "text");
	if (ok)
		return 0;
	oai_errf(in->err, 400, k, "unsupported_value",
	         "'%s' asks for what this server does not do; accepted: %s", k, n[i].neutral);
	return -1;
}

/* /tokenize's prompt: a string, maybe empty (its ids: none). */
static int oai__tok_prompt(struct oai__in *in, const char *k, json_t *v)
{
	if (in->r->prompt) {
		oai_errf(in->err, 400, k, "invalid_value",
		         "'prompt' and 'content' are the same field; accepted: one of them");
		return -1;
	}
	if (!json_is_string(v))
		return oai__bad(in, k, v, "a string");
	if (json_string_length(v) > in->lim->max_text) {
		oai_errf(in->err, 413, k, "context_length_exceeded",
		         "the prompt holds %zu bytes; accepted: up to %zu", json_string_length(v),
		         in->lim->max_text);
		return -1;
	}
	in->r->prompt_len = json_string_length(v);
	in->r->prompt = json_string_value(v);
	return 0;
}

/* A boolean into the flag `k` names. */
static int oai__flag(struct oai__in *in, const char *k, json_t *v)
{
	bool *f = !strcmp(k, "add_generation_prompt") ? &in->r->gen_prompt
	          : !strcmp(k, "add_special_tokens") || !strcmp(k, "add_special")
	              ? &in->r->add_special
	          : !strcmp(k, "with_pieces") ? &in->r->with_pieces
	                                      : &in->r->token_strs;

	if (!json_is_boolean(v))
		return oai__bad(in, k, v, "true or false");
	*f = json_is_true(v);
	return 0;
}

/* /detokenize's tokens: integers from 0 (the vocabulary is the server's to
 * check: the tokenizer's, which the limits do not know), maybe none. */
static int oai__tokens(struct oai__in *in, const char *k, json_t *v)
{
	size_t i, n = json_array_size(v);
	json_t *x;

	if (!json_is_array(v))
		return oai__bad(in, k, v, "an array of token ids (integers)");
	if (n > in->lim->max_text) {
		oai_errf(in->err, 413, k, "context_length_exceeded",
		         "'%s' holds %zu token ids; accepted: up to %zu", k, n, in->lim->max_text);
		return -1;
	}
	if (n && !(in->r->prompt_ids = malloc(n * sizeof(uint32_t))))
		return oai__nomem(in);
	json_array_foreach(v, i, x)
	{
		if (!json_is_integer(x) || json_integer_value(x) < 0 ||
		    json_integer_value(x) > (json_int_t)UINT32_MAX) {
			oai_errf(
			    in->err, 400, k, "invalid_value",
			    "token %zu of '%s' is %s; accepted: token ids, integers from 0", i, k,
			    json_is_integer(x) ? "a negative or too large integer" : oai__type(x));
			return -1;
		}
		in->r->prompt_ids[i] = (uint32_t)json_integer_value(x);
	}
	in->r->n_prompt_ids = n;
	in->r->tokens_set = true;
	return 0;
}

/* Fields we read and otherwise ignore. */
static int oai__ignored(struct oai__in *in, const char *k, json_t *v)
{
	(void)in, (void)k, (void)v;
	return 0;
}

static const struct oai__field {
	const char *key;
	unsigned kinds; /* 1 chat, 2 completions, 4 tokenize, 8 detokenize */
	int (*fn)(struct oai__in *in, const char *k, json_t *v);
} oai__fields[] = {
    {"model", 15, oai__model},
    {"messages", 5, oai__messages},
    {"prompt", 4, oai__tok_prompt},
    {"content", 4, oai__tok_prompt}, /* llama.cpp's server's name */
    {"add_generation_prompt", 4, oai__flag},
    {"add_special_tokens", 4, oai__flag},
    {"add_special", 4, oai__flag}, /* llama.cpp's */
    {"with_pieces", 4, oai__flag},
    {"return_token_strs", 4, oai__flag},
    {"tokens", 8, oai__tokens},
    {"prompt", 2, oai__prompt},
    {"max_tokens", 3, oai__max_tokens},
    {"max_completion_tokens", 3, oai__max_tokens},
    {"temperature", 3, oai__temperature},
    {"top_p", 3, oai__top_p},
    {"top_k", 3, oai__top_k},
    {"seed", 3, oai__seed},
    {"stop", 3, oai__stop},
    {"stream", 3, oai__stream},
    {"stream_options", 3, oai__stream_options},
    {"n", 3, oai__n},
    {"ignis", 3, oai__ignis},
    {"chat_template_kwargs", 5, oai__kwargs},
    {"user", 3, oai__ignored},
    {"metadata", 1, oai__ignored},
    {"parallel_tool_calls", 1, oai__parallel},
    {"logprobs", 1, oai__logprobs_chat},
    {"logprobs", 2, oai__logprobs_completion},
    {"top_logprobs", 1, oai__top_logprobs},
    {"presence_penalty", 3, oai__neutral},
    {"frequency_penalty", 3, oai__neutral},
    {"logit_bias", 3, oai__neutral},
    {"echo", 2, oai__echo},
    {"best_of", 2, oai__neutral},
    {"suffix", 2, oai__neutral},
    {"response_format", 1, oai__response_format},
    {"tools", 5, oai__tools},
    {"functions", 1, oai__neutral},
    {"tool_choice", 1, oai__tool_choice},
    {"function_call", 1, oai__neutral},
    {"store", 1, oai__neutral},
    {"service_tier", 3, oai__neutral},
    {"modalities", 1, oai__neutral},
    {"reasoning_effort", 1, oai__neutral},
    {"prediction", 1, oai__neutral},
    {"audio", 1, oai__neutral},
    {"web_search_options", 1, oai__neutral},
};

int oai_parse(enum oai_kind kind, const char *body, size_t len, const struct oai_limits *lim,
              struct oai_req *out, struct oai_err *err)
{
	struct oai__in in = {out, lim, err, false, false, NULL};
	static const char *const paths[] = {"", "/v1/chat/completions", "/v1/completions",
	                                    "/tokenize", "/detokenize"};
	unsigned bit = 1u << (kind - 1);
	json_error_t je;
	json_t *root, *v;
	const char *key;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	out->kind = kind;
	out->temperature = 1.0;
	out->n = 1;
	out->parallel_calls = true;
	out->top_p = 1.0;
	out->gen_prompt = true;
	out->add_special = true;
	if (len > lim->max_body) {
		oai_errf(err, 413, NULL, "request_too_large",
		         "the request body is %zu bytes; accepted: up to %zu", len, lim->max_body);
		return -1;
	}
	root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	if (!root) {
		oai_errf(err, 400, NULL, "invalid_json",
		         "the body is not JSON: %s (line %d, column %d); accepted: a JSON object",
		         je.text, je.line, je.column);
		return -1;
	}
	if (!json_is_object(root)) {
		oai_errf(err, 400, NULL, "invalid_json", "the body is %s; accepted: a JSON object",
		         oai__type(root));
		json_decref(root);
		return -1;
	}
	out->json = root; /* held: the strings taken point into it */
	json_object_foreach(root, key, v)
	{
		size_t i = 0, n = sizeof(oai__fields) / sizeof(oai__fields[0]);

		while (i < n && (strcmp(oai__fields[i].key, key) || !(oai__fields[i].kinds & bit)))
			i++;
		if (i == n) {
			oai_errf(err, 400, key, "unknown_parameter",
			         "unknown field '%s' for %s; see docs/http.md for what is accepted",
			         key, paths[kind]);
			rc = -1;
			break;
		}
		if ((rc = oai__fields[i].fn(&in, key, v)))
			break;
	}
	if (!rc && !out->model[0] && kind <= OAI_COMPLETION) {
		oai_errf(err, 400, "model", "missing_required_parameter",
		         "'model' is missing; accepted: the served model's name (GET /v1/models)");
		rc = -1;
	}
	if (!rc && kind == OAI_CHAT && !out->n_messages) {
		oai_errf(err, 400, "messages", "missing_required_parameter",
		         "'messages' is missing; accepted: a non-empty array of messages");
		rc = -1;
	}
	if (!rc && kind == OAI_TOKENIZE && !out->prompt == !out->n_messages) {
		oai_errf(err, 400, out->prompt ? "messages" : "prompt",
		         out->prompt ? "invalid_value" : "missing_required_parameter",
		         "%s; accepted: 'prompt' (a string) or 'messages' (a chat), one of the two",
		         out->prompt ? "both 'prompt' and 'messages' are given"
		                     : "'prompt' is missing");
		rc = -1;
	}
	if (!rc && kind == OAI_DETOKENIZE && !out->tokens_set) {
		oai_errf(err, 400, "tokens", "missing_required_parameter",
		         "'tokens' is missing; accepted: an array of token ids");
		rc = -1;
	}
	if (!rc && kind == OAI_COMPLETION && !out->prompt && !out->n_prompt_ids) {
		oai_errf(err, 400, "prompt", "missing_required_parameter",
		         "'prompt' is missing; accepted: a string or token ids");
		rc = -1;
	}
	if (!rc && out->max_zero && !out->echo) {
		oai_errf(err, 400, "max_tokens", "invalid_value",
		         "'max_tokens' is 0 without \"echo\": true; accepted: an integer from 1 to "
		         "%u, or 0 with echo (the prompt alone)",
		         lim->max_tokens);
		rc = -1;
	}
	if (!rc && in.top_logprobs && !out->logprobs) {
		oai_errf(err, 400, "top_logprobs", "invalid_value",
		         "'top_logprobs' is only for a request with \"logprobs\": true");
		rc = -1;
	}
	if (!rc && out->tool_choice == OAI_TC_NAMED) {
		size_t i = 0;

		while (i < out->n_tools && strcmp(out->tools[i].name, in.tc_name))
			i++;
		if (i == out->n_tools) {
			oai_errf(err, 400, "tool_choice", "invalid_value",
			         "tool_choice names the function '%.64s', which 'tools' does not "
			         "hold%s",
			         in.tc_name, out->n_tools ? "" : " (it holds none)");
			rc = -1;
		}
		out->tc_tool = i;
	}
	if (!rc && out->tool_choice == OAI_TC_REQUIRED && !out->n_tools) {
		oai_errf(err, 400, "tool_choice", "invalid_value",
		         "tool_choice \"required\" without 'tools'; accepted: tools to call");
		rc = -1;
	}
	if (!rc && in.stream_options && !out->stream) {
		oai_errf(err, 400, "stream_options", "invalid_value",
		         "'stream_options' is only for a streamed request (\"stream\": true)");
		rc = -1;
	}
	if (rc)
		oai_req_free(out);
	return rc;
}

/* ---- writing ------------------------------------------------------------- */

/* root serialised compactly, and released. */
static char *oai__dump(json_t *root)
{
	char *s = root ? json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;

	json_decref(root);
	return s;
}

char *oai_error_json(const struct oai_err *err)
{
	json_t *e = json_object();

	json_object_set_new(e, "message", json_string(err->message));
	json_object_set_new(e, "type",
	                    json_string(err->type ? err->type : "invalid_request_error"));
	json_object_set_new(e, "param", err->param[0] ? json_string(err->param) : json_null());
	json_object_set_new(e, "code", err->code[0] ? json_string(err->code) : json_null());
	return oai__dump(json_pack("{s:o}", "error", e));
}

static json_t *oai__usage(const struct oai_usage *u)
{
	return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)u->prompt,
	                 "completion_tokens", (json_int_t)u->completion, "total_tokens",
	                 (json_int_t)(u->prompt + u->completion), "prompt_tokens_details",
	                 "cached_tokens", (json_int_t)u->cached);
}

/* The text as a JSON string: invalid UTF-8 (a character cut at the end of a
 * stream's piece never reaches here: the door holds it back) is replaced. */
static json_t *oai__text(const char *text, size_t len)
{
	json_t *s = json_stringn(text ? text : "", text ? len : 0);

	if (!s) { /* not UTF-8: each bad byte as U+FFFD */
		char *t = malloc(len * 3 + 1);
		size_t o = 0;

		if (!t)
			return NULL;
		for (size_t i = 0; i < len; i++) {
			unsigned char c = (unsigned char)text[i];

			if (c < 0x80) {
				t[o++] = (char)c;
				continue;
			}
			/* keep a well-formed sequence whole, else one replacement */
			size_t n = c >= 0xf0 && c < 0xf5   ? 4
			           : c >= 0xe0             ? 3
			           : c >= 0xc2 && c < 0xe0 ? 2
			                                   : 0;
			json_t *try = n && i + n <= len ? json_stringn(text + i, n) : NULL;

			if (try) {
				memcpy(t + o, text + i, n);
				o += n;
				i += n - 1;
				json_decref(try);
			} else {
				memcpy(t + o, "\xef\xbf\xbd", 3);
				o += 3;
			}
		}
		s = json_stringn(t, o);
		free(t);
	}
	return s;
}

/* ---- log-probabilities ---------------------------------------------------- */

struct oai_lps {
	enum oai_kind kind;
	json_t *obj;                              /* the choice's `logprobs` */
	json_t *content;                          /* chat: its content array */
	json_t *tokens, *token_lps, *tops, *offs; /* completions' arrays */
	size_t n;
};

struct oai_lps *oai_lps_new(enum oai_kind kind)
{
	struct oai_lps *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	a->kind = kind;
	if (kind == OAI_CHAT) {
		a->content = json_array();
		a->obj = json_pack("{s:O,s:n}", "content", a->content, "refusal");
	} else {
		a->tokens = json_array();
		a->token_lps = json_array();
		a->tops = json_array();
		a->offs = json_array();
		a->obj = json_pack("{s:O,s:O,s:O,s:O}", "tokens", a->tokens, "token_logprobs",
		                   a->token_lps, "top_logprobs", a->tops, "text_offset", a->offs);
	}
	if (!a->obj) {
		oai_lps_free(a);
		return NULL;
	}
	return a;
}

void oai_lps_free(struct oai_lps *a)
{
	if (!a)
		return;
	json_decref(a->obj);
	json_decref(a->content);
	json_decref(a->tokens);
	json_decref(a->token_lps);
	json_decref(a->tops);
	json_decref(a->offs);
	free(a);
}

size_t oai_lps_count(const struct oai_lps *a)
{
	return a ? a->n : 0;
}

/* A logprob as written: -inf (or the wire's stand-in, the lowest double)
 * as OpenAI's floor, -9999.0, since JSON has no infinity. */
static json_t *oai__lp(double lp)
{
	return json_real(lp >= -1.7976931348623157e308 && lp > -INFINITY ? lp : -9999.0);
}

/* {"token", "logprob", "bytes"}: chat's entry of one alternative. */
static json_t *oai__alt(const struct oai_lp_alt *e)
{
	json_t *bytes = json_array();

	for (size_t i = 0; bytes && i < e->len; i++)
		json_array_append_new(bytes, json_integer(e->bytes[i]));
	return json_pack("{s:o,s:o,s:o}", "token", oai__text((const char *)e->bytes, e->len),
	                 "logprob", oai__lp(e->lp), "bytes", bytes);
}

int oai_lps_add(struct oai_lps *a, const struct oai_lp_tok *t)
{
	int rc = 0;

	if (a->kind == OAI_CHAT) {
		json_t *tops = json_array(), *item = oai__alt(&t->tok);

		for (size_t i = 0; tops && i < t->n_top; i++)
			rc |= json_array_append_new(tops, oai__alt(&t->top[i]));
		if (!tops || !item || rc || json_object_set_new(item, "top_logprobs", tops)) {
			json_decref(item);
			return -1;
		}
		rc = json_array_append_new(a->content, item);
	} else {
		json_t *top = json_object();

		/* {token: lp}: OpenAI's legacy shape, keyed by text (two tokens of
		 * the same text keep the likelier, written first) */
		for (size_t i = 0; top && i < t->n_top; i++) {
			json_t *k = oai__text((const char *)t->top[i].bytes, t->top[i].len);

			if (k && !json_object_get(top, json_string_value(k)))
				rc |= json_object_set_new(top, json_string_value(k),
				                          oai__lp(t->top[i].lp));
			json_decref(k);
		}
		if (!top)
			return -1;
		rc |= json_array_append_new(a->tokens,
		                            oai__text((const char *)t->tok.bytes, t->tok.len));
		rc |=
		    json_array_append_new(a->token_lps, t->none ? json_null() : oai__lp(t->tok.lp));
		rc |=
		    json_array_append_new(a->tops, t->none ? (json_decref(top), json_null()) : top);
		rc |= json_array_append_new(a->offs, json_integer((json_int_t)t->text_offset));
	}
	if (rc)
		return -1;
	a->n++;
	return 0;
}

/* The choice's `logprobs`: the accumulator's, or null. */
static json_t *oai__lps(const struct oai_lps *a)
{
	return a ? json_deep_copy(a->obj) : json_null();
}

/* A chat answer's message taken apart (oai_parts). */
static json_t *oai__message(const struct oai_parts *p)
{
	json_t *m = json_pack("{s:s}", "role", "assistant"), *calls;

	if (!m)
		return NULL;
	json_object_set_new(m, "content",
	                    p->content_len || !p->n_calls ? oai__text(p->content, p->content_len)
	                                                  : json_null());
	if (p->reasoning_len)
		json_object_set_new(m, "reasoning_content",
		                    oai__text(p->reasoning, p->reasoning_len));
	if (!p->n_calls)
		return m;
	calls = json_array();
	for (size_t i = 0; i < p->n_calls; i++)
		json_array_append_new(
		    calls, json_pack("{s:s,s:s,s:{s:s,s:o}}", "id", p->calls[i].id, "type",
		                     "function", "function", "name", p->calls[i].name, "arguments",
		                     oai__text(p->calls[i].args, p->calls[i].args_len)));
	json_object_set_new(m, "tool_calls", calls);
	return m;
}

char *oai_completion_json(enum oai_kind kind, const char *id, int64_t created, const char *model,
                          const char *text, size_t len, const char *finish_reason,
                          const struct oai_usage *usage, const struct oai_lps *lps,
                          const struct oai_parts *parts)
{
	const struct oai_choice c = {text, len, finish_reason, lps, parts};

	return oai_choices_json(kind, id, created, model, &c, 1, usage);
}

char *oai_choices_json(enum oai_kind kind, const char *id, int64_t created, const char *model,
                       const struct oai_choice *ch, size_t n, const struct oai_usage *usage)
{
	json_t *choices = json_array();

	for (size_t i = 0; choices && i < n; i++) {
		const struct oai_choice *c = &ch[i];
		json_t *choice;

		if (kind == OAI_CHAT && c->parts)
			choice = json_pack("{s:I,s:o,s:o,s:s}", "index", (json_int_t)i, "message",
			                   oai__message(c->parts), "logprobs", oai__lps(c->lps),
			                   "finish_reason", c->finish_reason);
		else if (kind == OAI_CHAT)
			choice = json_pack("{s:I,s:{s:s,s:o},s:o,s:s}", "index", (json_int_t)i,
			                   "message", "role", "assistant", "content",
			                   oai__text(c->text, c->len), "logprobs", oai__lps(c->lps),
			                   "finish_reason", c->finish_reason);
		else
			choice = json_pack("{s:I,s:o,s:o,s:s}", "index", (json_int_t)i, "text",
			                   oai__text(c->text, c->len), "logprobs", oai__lps(c->lps),
			                   "finish_reason", c->finish_reason);
		if (json_array_append_new(choices, choice)) {
			json_decref(choices);
			choices = NULL;
		}
	}
	if (!choices)
		return NULL;
	return oai__dump(json_pack("{s:s,s:s,s:I,s:s,s:o,s:o}", "id", id, "object",
	                           kind == OAI_CHAT ? "chat.completion" : "text_completion",
	                           "created", (json_int_t)created, "model", model, "choices",
	                           choices, "usage", oai__usage(usage)));
}

char *oai_chunk_at(char *json, uint32_t index)
{
	json_t *root, *c;
	char *out;

	if (!json || !index)
		return json;
	root = json_loads(json, 0, NULL);
	free(json);
	c = root ? json_array_get(json_object_get(root, "choices"), 0) : NULL;
	if (c && json_object_set_new(c, "index", json_integer(index))) {
		json_decref(root);
		return NULL;
	}
	out = oai__dump(root); /* one with no choice (an error, usage) as it was */
	return out;
}

char *oai_chunk_json(enum oai_kind kind, const char *id, int64_t created, const char *model,
                     bool first, const char *text, size_t len, const char *finish_reason,
                     const struct oai_usage *usage, const struct oai_lps *lps)
{
	const char *object = kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion";
	json_t *choice, *delta;

	if (usage)
		return oai__dump(json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}", "id", id, "object", object,
		                           "created", (json_int_t)created, "model", model,
		                           "choices", "usage", oai__usage(usage)));
	if (kind == OAI_CHAT) {
		delta = json_object();
		if (first)
			json_object_set_new(delta, "role", json_string("assistant"));
		if (len || !finish_reason)
			json_object_set_new(delta, "content", oai__text(text, len));
		choice = json_pack("{s:i,s:o,s:o,s:o}", "index", 0, "delta", delta, "logprobs",
		                   oai__lps(lps), "finish_reason",
		                   finish_reason ? json_string(finish_reason) : json_null());
	} else {
		choice = json_pack("{s:i,s:o,s:o,s:o}", "index", 0, "text", oai__text(text, len),
		                   "logprobs", oai__lps(lps), "finish_reason",
		                   finish_reason ? json_string(finish_reason) : json_null());
	}
	return oai__dump(json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", id, "object", object, "created",
	                           (json_int_t)created, "model", model, "choices", choice));
}

char *oai_delta_json(const char *id, int64_t created, const char *model, enum oai_delta_kind kind,
                     uint32_t index, const char *call_id, const char *text, size_t len,
                     const struct oai_lps *lps)
{
	json_t *delta;

	if (kind == OAI_D_REASONING)
		delta = json_pack("{s:o}", "reasoning_content", oai__text(text, len));
	else if (kind == OAI_D_CALL)
		delta = json_pack("{s:[{s:i,s:s,s:s,s:{s:o,s:s}}]}", "tool_calls", "index",
		                  (int)index, "id", call_id, "type", "function", "function", "name",
		                  oai__text(text, len), "arguments", "");
	else
		delta = json_pack("{s:[{s:i,s:{s:o}}]}", "tool_calls", "index", (int)index,
		                  "function", "arguments", oai__text(text, len));
	return oai__dump(json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:o,s:n}]}", "id", id, "object",
	                           "chat.completion.chunk", "created", (json_int_t)created, "model",
	                           model, "choices", "index", 0, "delta", delta, "logprobs",
	                           oai__lps(lps), "finish_reason"));
}

char *oai_models_json(const char *const *names, size_t n, int64_t created)
{
	json_t *data = json_array();

	for (size_t i = 0; data && i < n; i++)
		if (json_array_append_new(
		        data, json_pack("{s:s,s:s,s:I,s:s}", "id", names[i], "object", "model",
		                        "created", (json_int_t)created, "owned_by", "ignis"))) {
			json_decref(data);
			data = NULL;
		}
	return data ? oai__dump(json_pack("{s:s,s:o}", "object", "list", "data", data)) : NULL;
}

char *oai_tokens_json(const uint32_t *ids, size_t n, const struct oai_piece *pieces,
                      uint64_t max_model_len, bool with_pieces, bool token_strs)
{
	json_t *toks = json_array(), *strs = token_strs ? json_array() : NULL, *root;
	bool ok = toks && (!token_strs || strs);

	for (size_t i = 0; ok && i < n; i++) {
		if (with_pieces)
			ok = !json_array_append_new(
			    toks,
			    json_pack("{s:I,s:o}", "id", (json_int_t)ids[i], "piece",
			              oai__text((const char *)pieces[i].bytes, pieces[i].len)));
		else
			ok = !json_array_append_new(toks, json_integer(ids[i]));
		if (ok && strs)
			ok = !json_array_append_new(
			    strs, oai__text((const char *)pieces[i].bytes, pieces[i].len));
	}
	if (!ok) {
		json_decref(toks);
		json_decref(strs);
		return NULL;
	}
	root = json_pack("{s:o,s:I,s:I}", "tokens", toks, "count", (json_int_t)n, "max_model_len",
	                 (json_int_t)max_model_len);
	if (root && strs && json_object_set_new(root, "token_strs", strs)) {
		json_decref(root);
		return NULL;
	}
	if (!root)
		json_decref(strs);
	return oai__dump(root);
}

char *oai_detokenize_json(const char *text, size_t len)
{
	json_t *t = oai__text(text, len);

	return oai__dump(t ? json_pack("{s:O,s:o}", "prompt", t, "content", t) : NULL);
}
