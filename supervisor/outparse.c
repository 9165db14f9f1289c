/* outparse.c - reasoning, content and tool calls apart (see outparse.h). */
#include "outparse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

#define M_THINK     "<think>"
#define M_THINK_END "</think>"
#define M_CALL      "<tool_call>"
#define M_CALL_END  "</tool_call>"
#define M_FUNC      "<function="
#define M_FUNC_END  "</function>"
#define M_PARAM     "<parameter="
#define M_PARAM_END "</parameter>"
#define OP_MAX_WS   64u        /* whitespace a marker may wait behind */
#define OP_MAX_NAME 255u       /* a tool's name, a parameter's key */
#define OP_MAX_CALL (4u << 20) /* a Hermes object, an XML typed value */

enum op_format op_format_of_template(const char *tmpl, bool *thinks)
{
	*thinks = tmpl && strstr(tmpl, M_THINK);
	if (!tmpl)
		return OP_PLAIN;
	if (strstr(tmpl, M_FUNC) && strstr(tmpl, M_PARAM))
		return OP_QWEN_XML;
	return strstr(tmpl, M_CALL) ? OP_HERMES : OP_PLAIN;
}

const struct op_tool *op_tool_find(const struct op_opts *o, const char *name, size_t len)
{
	for (size_t i = 0; i < o->n_tools; i++)
		if (strlen(o->tools[i].name) == len && !memcmp(o->tools[i].name, name, len))
			return &o->tools[i];
	return NULL;
}

void op_init(struct op *p, const struct op_opts *o)
{
	memset(p, 0, sizeof(*p));
	p->o = *o;
	if (o->think_open && o->thinking) {
		p->st = OPS_THINK;
		p->think_trim = true;
	} else
		p->st = o->thinking ? OPS_START : OPS_TEXT;
}

void op_free(struct op *p)
{
	free(p->buf);
	free(p->obj);
	memset(p, 0, sizeof(*p));
}

/* ---- small pieces -------------------------------------------------------- */

static bool op__ws(char c)
{
	return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* Bytes at the end of s[0..n) that begin a character not yet whole. */
static size_t op__utf8_tail(const char *s, size_t n)
{
	for (size_t back = 1; back <= 3 && back <= n; back++) {
		unsigned char c = (unsigned char)s[n - back];

		if ((c & 0xC0) == 0x80)
			continue; /* a continuation byte: look further back */
		if (c < 0x80)
			return 0;
		size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;

		return need > back ? back : 0;
	}
	return 0;
}

static void op__send(struct op *p, enum op_ev_kind kind, const char *text, size_t len)
{
	struct op_ev ev = {kind, p->calls ? p->calls - 1 : 0, text, len};

	if (p->rc || ((kind == OP_CONTENT || kind == OP_REASONING || kind == OP_CALL_ARGS) && !len))
		return;
	if (kind == OP_CONTENT)
		p->content_sent = true;
	p->rc = p->emit(p->ctx, &ev);
}

/* Text as the inside of a JSON string, sent as call arguments. */
static void op__send_escaped(struct op *p, const char *s, size_t n)
{
	char out[512];
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (k + 8 > sizeof(out)) {
			op__send(p, OP_CALL_ARGS, out, k);
			k = 0;
		}
		if (c == '"' || c == '\\') {
			out[k++] = '\\';
			out[k++] = (char)c;
		} else if (c == '\n') {
			out[k++] = '\\';
			out[k++] = 'n';
		} else if (c == '\t') {
			out[k++] = '\\';
			out[k++] = 't';
		} else if (c == '\r') {
			out[k++] = '\\';
			out[k++] = 'r';
		} else if (c < 0x20) {
			k += (size_t)snprintf(out + k, sizeof(out) - k, "\\u%04x", c);
		} else
			out[k++] = (char)c;
	}
	op__send(p, OP_CALL_ARGS, out, k);
}

/* Drop the first n held bytes. */
static void op__eat(struct op *p, size_t n)
{
	memmove(p->buf, p->buf + n, p->len - n);
	p->len -= n;
}

static bool op__grow(char **b, size_t *cap, size_t need)
{
	size_t c = *cap ? *cap : 256;
	char *nb;

	if (need <= *cap)
		return true;
	while (c < need)
		c *= 2;
	if (!(nb = realloc(*b, c)))
		return false;
	*b = nb;
	*cap = c;
	return true;
}

/* 1: s[0..n) begins with m; 0: s is a proper prefix of m (wait for more,
 * unless final); -1: neither. */
static int op__at(const char *s, size_t n, const char *m)
{
	size_t ml = strlen(m);

	if (n >= ml)
		return memcmp(s, m, ml) ? -1 : 1;
	return memcmp(s, m, n) ? -1 : 0;
}

/*
 * The first place in s[0..n) where one of `ms` (NULL-terminated) begins,
 * whole or (unless final) cut by the end: its offset, *which the marker and
 * *whole whether it is all there. n when none.
 */
static size_t op__find(const char *s, size_t n, const char *const *ms, bool final, int *which,
                       bool *whole)
{
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '<')
			continue;
		for (int k = 0; ms[k]; k++) {
			int a = op__at(s + i, n - i, ms[k]);

			if (a == 1 || (a == 0 && !final)) {
				*which = k;
				*whole = a == 1;
				return i;
			}
		}
	}
	return n;
}

/* Send s[0..n) as `kind`, all of it when final, else less its unfinished
 * character and, with hold_ws, its trailing whitespace: what was sent is
 * eaten from the held text (s is p->buf). */
static void op__flush(struct op *p, enum op_ev_kind kind, size_t n, bool hold_ws, bool final)
{
	size_t k = n;

	if (!final) {
		k -= op__utf8_tail(p->buf, k);
		while (hold_ws && k && op__ws(p->buf[k - 1]))
			k--;
	}
	op__send(p, kind, p->buf, k);
	op__eat(p, k);
}

/* ---- tool calls: the parts both formats share --------------------------- */

/* The next byte of a JSON string being scanned (c.in_str): its end, or an
 * escape's start, tracked. */
static void op__str_byte(struct op *p, char c)
{
	if (p->c.esc)
		p->c.esc = false;
	else if (c == '\\')
		p->c.esc = true;
	else if (c == '"')
		p->c.in_str = false;
}

static void op__call_begin(struct op *p, const char *name, size_t len)
{
	const struct op_tool *t = op_tool_find(&p->o, name, len);

	p->calls++;
	p->c.begun = true;
	p->c.schema = t ? t->params : NULL;
	op__send(p, OP_CALL_BEGIN, name, len);
}

static void op__call_end(struct op *p, bool bad)
{
	if (bad)
		p->bad_calls++;
	op__send(p, OP_CALL_END, NULL, 0);
	memset(&p->c, 0, sizeof(p->c));
	memset(&p->h, 0, sizeof(p->h));
	p->obj_len = 0;
	p->st = OPS_CLOSE;
}

/* A call that could not be read before anything of it was sent: what it
 * held goes out as content, from its "<tool_call>" on. */
static void op__call_fallback(struct op *p, const char *rest, size_t n)
{
	op__send(p, OP_CONTENT, p->open, p->open_len);
	op__send(p, OP_CONTENT, rest, n);
	memset(&p->c, 0, sizeof(p->c));
	memset(&p->h, 0, sizeof(p->h));
	p->obj_len = 0;
	p->open_len = 0;
	p->st = OPS_TEXT;
}

/* ---- Hermes: {"name": ..., "arguments": {...}} --------------------------- */

enum { H_KEY_OR_END, H_KEY, H_COLON, H_VALUE_START, H_VALUE, H_SEP, H_DONE };

/* The arguments so far to the client: from where they were sent up to `end`
 * (the value's text as it arrived; JSON-encoded arguments wait). */
static void op__h_args(struct op *p, size_t end)
{
	if (!p->c.begun || p->h.args_str || end <= p->h.args_sent)
		return;
	op__send(p, OP_CALL_ARGS, p->obj + p->h.args_sent, end - p->h.args_sent);
	p->h.args_sent = end;
}

/* A member's value is complete at obj[..end). */
static void op__h_member(struct op *p, size_t end)
{
	const char *v = p->obj + p->h.val_start;
	size_t n = end - p->h.val_start;

	if (p->h.key_long)
		return;
	if (p->h.key_len == 4 && !memcmp(p->h.key, "name", 4) && !p->c.begun && n >= 2 &&
	    *v == '"') {
		json_t *s = json_loadb(v, n, JSON_DECODE_ANY, NULL);

		if (json_is_string(s) && json_string_length(s) <= OP_MAX_NAME &&
		    json_string_length(s) > 0) {
			op__call_begin(p, json_string_value(s), json_string_length(s));
			if (p->h.args_done || p->h.is_args) /* the arguments came first */
				op__h_args(p, p->h.args_done ? p->h.args_end : p->obj_len);
		}
		json_decref(s);
	} else if (p->h.is_args) {
		p->h.args_done = true;
		p->h.args_end = end;
		op__h_args(p, end);
	}
}

/* Scan obj[from..obj_len) (the object's new bytes): the offset after the
 * last byte that belongs to the object (obj_len unless it ended inside). */
static size_t op__h_scan(struct op *p, size_t from)
{
	size_t i;

	for (i = from; i < p->obj_len && p->h.hs != H_DONE; i++) {
		char c = p->obj[i];

		if (i == 0) { /* the object's '{' */
			p->c.depth = 1;
			continue;
		}
		if (p->c.in_str) {
			op__str_byte(p, c);
			if (p->h.hs == H_KEY && p->c.in_str && !p->c.esc && c != '\\') {
				if (p->h.key_len < sizeof(p->h.key))
					p->h.key[p->h.key_len++] = c;
				else
					p->h.key_long = true;
			}
			if (!p->c.in_str && p->h.hs == H_KEY)
				p->h.hs = H_COLON;
			else if (!p->c.in_str && p->h.hs == H_VALUE && p->c.depth == 1) {
				op__h_member(p, i + 1);
				p->h.hs = H_SEP;
			}
			continue;
		}
		if (op__ws(c))
			continue;
		switch (p->h.hs) {
		case H_KEY_OR_END:
			if (c == '"') {
				p->c.in_str = true;
				p->h.hs = H_KEY;
				p->h.key_len = 0;
				p->h.key_long = false;
			} else if (c == '}')
				p->h.hs = H_DONE, p->c.depth = 0;
			break;
		case H_COLON:
			if (c == ':')
				p->h.hs = H_VALUE_START;
			break;
		case H_VALUE_START:
			p->h.val_start = i;
			p->h.is_args =
			    !p->h.key_long &&
			    ((p->h.key_len == 9 && !memcmp(p->h.key, "arguments", 9)) ||
			     (p->h.key_len == 10 && !memcmp(p->h.key, "parameters", 10)));
			if (p->h.is_args) {
				p->h.args_start = p->h.args_sent = i;
				p->h.args_str = c == '"';
			}
			p->h.hs = H_VALUE;
			if (c == '"')
				p->c.in_str = true;
			else if (c == '{' || c == '[')
				p->c.depth++;
			break;
		case H_VALUE:
			if (c == '"')
				p->c.in_str = true;
			else if (c == '{' || c == '[')
				p->c.depth++;
			else if ((c == '}' || c == ']') && p->c.depth > 1) {
				p->c.depth--;
				if (p->c.depth == 1) {
					op__h_member(p, i + 1);
					p->h.hs = H_SEP;
				}
			} else if (p->c.depth == 1 && (c == ',' || c == '}')) {
				/* a scalar ended */
				op__h_member(p, i);
				p->h.hs = c == ',' ? H_KEY_OR_END : H_DONE;
				if (c == '}')
					p->c.depth = 0;
			}
			break;
		case H_SEP:
			if (c == ',')
				p->h.hs = H_KEY_OR_END;
			else if (c == '}')
				p->h.hs = H_DONE, p->c.depth = 0;
			break;
		}
	}
	/* arguments stream while their value is open (not a string's) */
	if (p->h.hs == H_VALUE && p->h.is_args && !p->h.args_done)
		op__h_args(p, i);
	return i;
}

/* A Hermes call that could not be read: content if nothing of it was sent,
 * else it ends, counted bad. */
static void op__h_give_up(struct op *p)
{
	char *keep;

	if (p->c.begun) {
		op__call_end(p, true);
		return;
	}
	if (!(keep = malloc(p->obj_len ? p->obj_len : 1))) {
		p->failed = true;
		return;
	}
	memcpy(keep, p->obj, p->obj_len);
	op__call_fallback(p, keep, p->obj_len);
	free(keep);
}

/* The Hermes object's bytes from the held text; its end decides the call. */
static void op__hermes(struct op *p, bool final)
{
	size_t from = p->obj_len, take = p->len, end;
	json_t *o, *args;

	if (p->obj_len + take > OP_MAX_CALL)
		take = OP_MAX_CALL - p->obj_len;
	if (!op__grow(&p->obj, &p->obj_cap, p->obj_len + take + 1)) {
		p->failed = true;
		return;
	}
	memcpy(p->obj + p->obj_len, p->buf, take);
	p->obj_len += take;
	end = op__h_scan(p, from);
	/* what follows the object stays held */
	op__eat(p, end - from);
	p->obj_len = end;
	if (p->h.hs != H_DONE) {
		if (p->obj_len >= OP_MAX_CALL || final)
			op__h_give_up(p);
		return;
	}
	o = json_loadb(p->obj, p->obj_len, 0, NULL);
	if (!o || !p->c.begun) {
		json_decref(o);
		op__h_give_up(p);
		return;
	}
	args = json_object_get(o, "arguments");
	if (!args)
		args = json_object_get(o, "parameters");
	if (!args) /* no arguments: an empty object */
		op__send(p, OP_CALL_ARGS, "{}", 2);
	else if (p->h.args_str && json_is_string(args)) /* JSON-encoded: their text */
		op__send(p, OP_CALL_ARGS, json_string_value(args), json_string_length(args));
	json_decref(o);
	op__call_end(p, false);
}

/* ---- XML: <function=NAME> <parameter=KEY> value </parameter> ------------ */

/* The kind of a JSON value. */
static int op__kind_of(const json_t *j)
{
	return json_is_string(j)    ? OP_K_STR
	       : json_is_integer(j) ? OP_K_INT
	       : json_is_real(j)    ? OP_K_NUM
	       : json_is_boolean(j) ? OP_K_BOOL
	       : json_is_null(j)    ? OP_K_NULL
	       : json_is_object(j)  ? OP_K_OBJ
	                            : OP_K_ARR;
}

static int op__type_kinds(const char *n)
{
	return !strcmp(n, "string")    ? OP_K_STR
	       : !strcmp(n, "integer") ? OP_K_INT
	       : !strcmp(n, "number")  ? OP_K_NUM | OP_K_INT
	       : !strcmp(n, "boolean") ? OP_K_BOOL
	       : !strcmp(n, "null")    ? OP_K_NULL
	       : !strcmp(n, "object")  ? OP_K_OBJ
	       : !strcmp(n, "array")   ? OP_K_ARR
	                               : 0;
}

int op_kinds_of(const json_t *s)
{
	const json_t *t, *v;
	size_t i;
	int k = 0;

	if (!json_is_object(s))
		return 0;
	t = json_object_get(s, "type");
	if (json_is_string(t))
		k |= op__type_kinds(json_string_value(t));
	json_array_foreach(t, i, v) if (json_is_string(v)) k |=
	    op__type_kinds(json_string_value(v));
	if (!t && (json_object_get(s, "properties") || json_object_get(s, "additionalProperties")))
		k |= OP_K_OBJ;
	if (!t && json_object_get(s, "items"))
		k |= OP_K_ARR;
	for (int u = 0; u < 2; u++)
		json_array_foreach(json_object_get(s, u ? "oneOf" : "anyOf"), i, v) k |=
		    op_kinds_of(v);
	if ((v = json_object_get(s, "const")))
		k |= op__kind_of(v);
	json_array_foreach(json_object_get(s, "enum"), i, v) k |= op__kind_of(v);
	if (json_is_true(json_object_get(s, "nullable")))
		k |= OP_K_NULL;
	return k;
}

enum op_value op_value_of(const json_t *s)
{
	int k = op_kinds_of(s);

	return !k || k == OP_K_STR ? OP_VALUE_TEXT
	       : (k & OP_K_STR)    ? OP_VALUE_MIXED
	                           : OP_VALUE_JSON;
}

bool op_value_json(int kinds, const char *v, size_t n, json_t **out)
{
	json_t *j = NULL;

	*out = NULL;
	if (kinds == OP_K_STR)
		return false;
	/* the JSON is tried less the whitespace around it; a string keeps it */
	while (n && op__ws(v[n - 1]))
		n--;
	while (n && op__ws(*v))
		v++, n--;
	if (n) /* "\u0000" is JSON too */
		j = json_loadb(v, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	if (j && op__kind_of(j) != OP_K_STR && (kinds & op__kind_of(j))) {
		*out = j;
		return true;
	}
	json_decref(j);
	return false;
}

/* The kinds parameter `key` of the call's tool takes; strings only when the
 * schema does not say (as the peers do). */
static int op__param_kinds(const struct op *p, const char *key, size_t len)
{
	const json_t *props = json_object_get(p->c.schema, "properties");
	char k[OP_MAX_NAME + 1];
	int kinds;

	memcpy(k, key, len);
	k[len] = '\0';
	kinds = op_kinds_of(json_object_get(props, k));
	return kinds ? kinds : OP_K_STR;
}

/* A typed value's text sent as JSON: as the JSON it is when that JSON is of
 * a kind the schema allows, else as a string, the text as it is. */
static void op__x_typed(struct op *p, const char *v, size_t n)
{
	json_t *j;

	if (op_value_json(p->c.type, v, n, &j)) {
		char *d = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);

		if (!d)
			p->failed = true;
		else
			op__send(p, OP_CALL_ARGS, d, strlen(d));
		free(d);
	} else {
		op__send(p, OP_CALL_ARGS, "\"", 1);
		op__send_escaped(p, v, n);
		op__send(p, OP_CALL_ARGS, "\"", 1);
	}
	json_decref(j);
}

/* The value's next k held bytes: sent as string text, or kept for a typed
 * value. False when out of memory. */
static bool op__x_put(struct op *p, size_t k)
{
	if (p->c.type == OP_K_STR) {
		op__send_escaped(p, p->buf, k);
		return true;
	}
	if (!op__grow(&p->obj, &p->obj_cap, p->obj_len + k + 1)) {
		p->failed = true;
		return false;
	}
	memcpy(p->obj + p->obj_len, p->buf, k);
	p->obj_len += k;
	return true;
}

/* The parameter's value ends (at its </parameter>, or cut). */
static void op__x_value_end(struct op *p)
{
	if (p->c.type == OP_K_STR)
		op__send(p, OP_CALL_ARGS, "\"", 1);
	else
		op__x_typed(p, p->obj, p->obj_len);
	p->obj_len = 0;
	p->c.any = true;
}

/* The call's arguments close and it ends. */
static void op__x_call_end(struct op *p, bool bad)
{
	op__send(p, OP_CALL_ARGS, p->c.any ? "}" : "{}", p->c.any ? 1 : 2);
	op__call_end(p, bad);
}

/* Read a name up to '>' (a function's or a parameter's): true once read
 * (into name, the held text eaten through the '>'); false to wait, or with
 * *bad when it cannot be one. */
static bool op__x_name(struct op *p, char *name, size_t *len, bool final, bool *bad)
{
	size_t i = 0;

	*bad = false;
	while (i < p->len && p->buf[i] != '>') {
		if (p->buf[i] == '<' || p->buf[i] == '\n' || i >= OP_MAX_NAME) {
			*bad = true;
			return false;
		}
		i++;
	}
	if (i == p->len) {
		*bad = final;
		return false;
	}
	while (i && op__ws(p->buf[i - 1])) /* "<function=f >" */
		i--;
	memcpy(name, p->buf, i);
	*len = i;
	while (p->buf[i] != '>')
		i++;
	op__eat(p, i + 1);
	return *len > 0 || (*bad = true, false);
}

/* Which value marker begins at s[0..n) (0 </parameter>, 1 </function>):
 * whole (1), cut by the end (0), or none (-1, *which unset). */
static int op__x_marker(const char *s, size_t n, int *which)
{
	int a = op__at(s, n, M_PARAM_END), b = op__at(s, n, M_FUNC_END);

	if (a == 1 || b == 1) {
		*which = a == 1 ? 0 : 1;
		return 1;
	}
	return a == 0 || b == 0 ? 0 : -1;
}

/* An object's or array's string never closed: the value ends at its first
 * marker after all (as a plain reading has it), and the text from there
 * is held again to be read on. False when the value holds none. */
static bool op__x_unshape(struct op *p)
{
	size_t at = p->obj_len, rest;
	int which;

	for (size_t i = 0; i < p->obj_len && at == p->obj_len; i++)
		if (p->obj[i] == '<' && op__x_marker(p->obj + i, p->obj_len - i, &which) == 1)
			at = i;
	if (at == p->obj_len)
		return false;
	rest = p->obj_len - at;
	if (!op__grow(&p->buf, &p->cap, p->len + rest + 1)) {
		p->failed = true;
		return false;
	}
	memmove(p->buf + rest, p->buf, p->len);
	memcpy(p->buf, p->obj + at, rest);
	p->len += rest;
	p->obj_len = at;
	p->c.shape = 1;
	p->c.in_str = p->c.esc = false;
	return true;
}

/* Is the typed value held JSON? */
static bool op__x_parses(const struct op *p)
{
	json_t *j = json_loadb(p->obj, p->obj_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);

	json_decref(j);
	return j != NULL;
}

/* The value ended at a marker (the held text begins with it). */
static void op__x_value_marker(struct op *p, int which)
{
	op__x_value_end(p);
	if (which == 0) { /* </parameter> */
		op__eat(p, strlen(M_PARAM_END));
		p->st = OPS_XBODY;
	} else { /* </function> with the parameter left open */
		op__eat(p, strlen(M_FUNC_END));
		op__x_call_end(p, false);
	}
}

/*
 * A typed value's held text (OPS_XVALUE, kinds other than a string alone):
 * kept in obj up to its end marker, and sent as JSON or as a string when
 * that comes. An object or an array is read as JSON text (shape 2): a
 * marker inside one of its strings is its own. False to wait.
 */
static bool op__x_typed_step(struct op *p, bool final)
{
	int which = -1;
	size_t i;

	for (i = 0; i < p->len; i++) {
		char c = p->buf[i];

		if (!p->c.shape && !op__ws(c))
			p->c.shape =
			    (c == '{' || c == '[') && (p->c.type & (OP_K_OBJ | OP_K_ARR)) ? 2 : 1;
		if (p->c.in_str) {
			op__str_byte(p, c);
			continue;
		}
		if (c == '"' && p->c.shape == 2) {
			p->c.in_str = true;
			continue;
		}
		if (c == '<') {
			int a = op__x_marker(p->buf + i, p->len - i, &which);

			if (a == 1 || (a == 0 && !final))
				break; /* the end, or perhaps: held from here */
		}
	}
	if (!op__x_put(p, i))
		return false;
	op__eat(p, i);
	if (which >= 0 && p->len && p->buf[0] == '<' && op__x_marker(p->buf, p->len, &which) == 1) {
		/* JSON read past a marker in a string must be JSON after all,
		 * else that marker was the end */
		if (p->c.shape == 2 && !op__x_parses(p) && op__x_unshape(p))
			return true;
		/* the value, less the form's newline before its end */
		if (p->obj_len && p->obj[p->obj_len - 1] == '\n')
			p->obj_len--;
		op__x_value_marker(p, which);
		return true;
	}
	if ((final || p->obj_len > OP_MAX_CALL) && p->c.in_str && op__x_unshape(p))
		return true;
	if (final) { /* cut inside the value */
		op__x_value_end(p);
		op__x_call_end(p, true);
		return false;
	}
	if (p->obj_len > OP_MAX_CALL) {
		op__x_value_end(p);
		op__x_call_end(p, true);
		p->st = OPS_TEXT;
		return true;
	}
	return false;
}

/* ---- the states ------------------------------------------------------------- */

/* One step of the parse over the held text: false when it can go no further
 * until more text comes (or, final, at all). */
static bool op__step(struct op *p, bool final)
{
	static const char *const think_ms[] = {M_THINK_END, M_CALL, NULL};
	static const char *const think_only[] = {M_THINK_END, NULL};
	static const char *const call_ms[] = {M_CALL, NULL};
	static const char *const value_ms[] = {M_PARAM_END, M_FUNC_END, NULL};
	bool whole, bad;
	int which;
	size_t i;

	switch (p->st) {
	case OPS_START:
		for (i = 0; i < p->len && op__ws(p->buf[i]); i++)
			;
		if (i == p->len && !final && i < OP_MAX_WS)
			return false;
		if (i < p->len && op__at(p->buf + i, p->len - i, M_THINK) == 0 && !final)
			return false;
		if (i < p->len && op__at(p->buf + i, p->len - i, M_THINK) == 1) {
			op__eat(p, i + strlen(M_THINK));
			p->st = OPS_THINK;
			p->think_trim = true;
		} else
			p->st = OPS_TEXT;
		return true;

	case OPS_THINK:
		if (p->think_trim && p->len && p->buf[0] == '\n') {
			op__eat(p, 1);
			p->think_trim = false;
		} else if (p->think_trim && (p->len || final))
			p->think_trim = false;
		i = op__find(p->buf, p->len, p->o.calls ? think_ms : think_only, final, &which,
		             &whole);
		if (i == p->len) {
			op__flush(p, OP_REASONING, p->len, true, final);
			return false;
		}
		/* the reasoning before the marker, less its trailing whitespace */
		{
			size_t k = i;

			while (k && op__ws(p->buf[k - 1]))
				k--;
			if (!whole) {
				op__flush(p, OP_REASONING, k, false, false);
				return false;
			}
			op__send(p, OP_REASONING, p->buf, k);
			op__eat(p, k);
			p->open_ws = i - k;
		}
		if (which == 0) { /* </think> */
			op__eat(p, p->open_ws + strlen(M_THINK_END));
			p->drop_ws = true;
			p->st = OPS_TEXT;
		} else { /* a call opened inside the thinking ends it */
			p->open_think = true;
			p->st = OPS_OPEN;
		}
		return true;

	case OPS_TEXT:
		if (p->drop_ws || (p->calls && !p->content_sent)) {
			for (i = 0; i < p->len && op__ws(p->buf[i]); i++)
				;
			op__eat(p, i);
			if (!p->len)
				return false;
			p->drop_ws = false;
		}
		if (!p->o.calls || p->o.format == OP_PLAIN) {
			op__flush(p, OP_CONTENT, p->len, false, final);
			return false;
		}
		i = op__find(p->buf, p->len, call_ms, final, &which, &whole);
		if (i == p->len && !final) {
			/* whitespace may precede a call: held */
			op__flush(p, OP_CONTENT, p->len, true, false);
			return false;
		}
		if (i == p->len) {
			/* the end: held whitespace is content, unless calls came */
			size_t k = p->len;

			while (p->calls && k && op__ws(p->buf[k - 1]))
				k--;
			op__send(p, OP_CONTENT, p->buf, k);
			p->len = 0;
			return false;
		}
		if (!whole) {
			op__flush(p, OP_CONTENT, i, true, false);
			return false;
		}
		{
			size_t k = i;

			while (k && op__ws(p->buf[k - 1]))
				k--;
			op__send(p, OP_CONTENT, p->buf, k);
			op__eat(p, k);
			p->open_ws = i - k; /* dropped if a call follows, else content */
		}
		p->open_think = false;
		p->st = OPS_OPEN;
		return true;

	case OPS_OPEN:
		/* the held text is whitespace (open_ws bytes), then <tool_call>;
		 * what follows decides */
		for (i = p->open_ws + strlen(M_CALL); i < p->len && op__ws(p->buf[i]); i++)
			;
		if (i - p->open_ws - strlen(M_CALL) > OP_MAX_WS)
			goto not_a_call;
		if (i == p->len) {
			if (!final)
				return false;
			goto not_a_call;
		}
		if (p->o.format == OP_HERMES) {
			if (p->buf[i] != '{')
				goto not_a_call;
		} else {
			int a = op__at(p->buf + i, p->len - i, M_FUNC);

			if (a == 0 && !final)
				return false;
			if (a != 1)
				goto not_a_call;
		}
		op__eat(p, p->open_ws); /* the whitespace before a call goes */
		i -= p->open_ws;
		p->open_ws = 0;
		p->open_len = i < sizeof(p->open) ? i : sizeof(p->open);
		memcpy(p->open, p->buf, p->open_len);
		memset(&p->c, 0, sizeof(p->c));
		memset(&p->h, 0, sizeof(p->h));
		p->obj_len = 0;
		if (p->o.format == OP_HERMES) {
			op__eat(p, i);
			p->st = OPS_HERMES;
		} else {
			op__eat(p, i + strlen(M_FUNC));
			p->st = OPS_XFUNC;
		}
		return true;
	not_a_call:
		/* a literal "<tool_call>" in prose: it and the whitespace before
		 * it are text, and the scan goes on after its '<' */
		op__send(p, p->open_think ? OP_REASONING : OP_CONTENT, p->buf, p->open_ws + 1);
		op__eat(p, p->open_ws + 1);
		p->open_ws = 0;
		p->st = p->open_think ? OPS_THINK : OPS_TEXT;
		return true;

	case OPS_HERMES:
		op__hermes(p, final);
		return p->st != OPS_HERMES && !p->failed;

	case OPS_XFUNC:
		if (!op__x_name(p, p->c.name, &p->c.name_len, final, &bad)) {
			if (!bad)
				return false;
			/* not a function's name: the call was not one */
			op__call_fallback(p, M_FUNC, strlen(M_FUNC));
			return true;
		}
		op__call_begin(p, p->c.name, p->c.name_len);
		p->st = OPS_XBODY;
		return true;

	case OPS_XBODY:
		for (i = 0; i < p->len && op__ws(p->buf[i]); i++)
			;
		op__eat(p, i);
		if (!p->len) {
			if (final)
				op__x_call_end(p, true);
			return final;
		}
		if (op__at(p->buf, p->len, M_PARAM) == 1) {
			op__eat(p, strlen(M_PARAM));
			p->st = OPS_XKEY;
			return true;
		}
		if (op__at(p->buf, p->len, M_FUNC_END) == 1) {
			op__eat(p, strlen(M_FUNC_END));
			op__x_call_end(p, false);
			return true;
		}
		if (!final && (op__at(p->buf, p->len, M_PARAM) == 0 ||
		               op__at(p->buf, p->len, M_FUNC_END) == 0))
			return false;
		/* anything else ends the call here; the text goes on as content */
		op__x_call_end(p, true);
		p->st = OPS_TEXT;
		return true;

	case OPS_XKEY:
		if (!op__x_name(p, p->c.key, &p->c.key_len, final, &bad)) {
			if (!bad)
				return false;
			op__x_call_end(p, true);
			p->st = OPS_TEXT;
			return true;
		}
		p->c.type = op__param_kinds(p, p->c.key, p->c.key_len);
		op__send(p, OP_CALL_ARGS, p->c.any ? ", \"" : "{\"", p->c.any ? 3 : 2);
		op__send_escaped(p, p->c.key, p->c.key_len);
		op__send(p, OP_CALL_ARGS,
		         p->c.type == OP_K_STR ? "\": \"" : "\": ", p->c.type == OP_K_STR ? 4 : 3);
		p->c.first_line = true;
		p->c.shape = 0;
		p->c.in_str = p->c.esc = false;
		p->obj_len = 0;
		p->st = OPS_XVALUE;
		return true;

	case OPS_XVALUE:
		if (p->c.first_line) {
			if (!p->len && !final)
				return false;
			if (p->len && p->buf[0] == '\n')
				op__eat(p, 1);
			p->c.first_line = false;
		}
		if (p->c.type != OP_K_STR)
			return op__x_typed_step(p, final);
		i = op__find(p->buf, p->len, value_ms, final, &which, &whole);
		if (i < p->len && whole) {
			/* the value, less the form's newline before its end */
			size_t k = i && p->buf[i - 1] == '\n' ? i - 1 : i;

			op__x_put(p, k);
			op__eat(p, i);
			op__x_value_marker(p, which);
			return true;
		}
		if (final) { /* cut inside the value */
			op__x_put(p, p->len);
			p->len = 0;
			op__x_value_end(p);
			op__x_call_end(p, true);
			return false;
		}
		{
			/* certain: up to a possible marker, less a newline that may
			 * be the form's and a character not yet whole */
			size_t k = i && p->buf[i - 1] == '\n' ? i - 1 : i;

			k -= op__utf8_tail(p->buf, k);
			op__x_put(p, k);
			op__eat(p, k);
		}
		return false;

	case OPS_CLOSE:
		for (i = 0; i < p->len && op__ws(p->buf[i]); i++)
			;
		if (i == p->len && !final)
			return false;
		if (i < p->len) {
			int a = op__at(p->buf + i, p->len - i, M_CALL_END);

			if (a == 0 && !final)
				return false;
			if (a == 1) {
				op__eat(p, i + strlen(M_CALL_END));
				p->drop_ws = true;
			}
		}
		p->st = OPS_TEXT; /* a missing </tool_call> is forgiven */
		return true;
	}
	return false;
}

static int op__run(struct op *p, bool final, op_emit_fn emit, void *ctx)
{
	p->emit = emit;
	p->ctx = ctx;
	while (!p->rc && !p->failed && op__step(p, final))
		;
	if (final && !p->rc && !p->failed && p->len) /* whatever is left */
		op__flush(p, p->st == OPS_THINK ? OP_REASONING : OP_CONTENT, p->len, false, true);
	p->emit = NULL;
	p->ctx = NULL;
	return p->failed ? IG_E_NOMEM : p->rc;
}

int op_feed(struct op *p, const char *text, size_t len, op_emit_fn emit, void *ctx)
{
	if (p->failed)
		return IG_E_NOMEM;
	if (p->rc)
		return p->rc;
	if (!op__grow(&p->buf, &p->cap, p->len + len + 1)) {
		p->failed = true;
		return IG_E_NOMEM;
	}
	memcpy(p->buf + p->len, text, len);
	p->len += len;
	return op__run(p, false, emit, ctx);
}

int op_finish(struct op *p, op_emit_fn emit, void *ctx)
{
	if (p->failed)
		return IG_E_NOMEM;
	return p->rc ? p->rc : op__run(p, true, emit, ctx);
}
