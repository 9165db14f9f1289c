/*
 * msg.c - the generic encoder and decoder that walk the declarations of msg.h.
 *
 * Packing and unpacking use msgpack-c. Before msgpack-c sees a buffer,
 * msg__prescan() walks its structure once: msgpack-c 4.0 allocates a
 * container's element array from the count in its header before reading the
 * elements, so a 5-byte array header claiming 2^32 elements would make it ask
 * for ~100 GB. The prescan rejects any count that the remaining bytes cannot
 * hold, any nesting deeper than MSG_MAX_DEPTH, the reserved byte 0xc1 and
 * trailing bytes; after it, msgpack-c's allocations are bounded by a small
 * multiple of the buffer length (one msgpack_object, 24 bytes, per item of at
 * least one byte: an IDS field of MSG_IDS_MAX fixints is 4096 objects).
 * The decoder writes an ARR or IDS element only after checking the array's
 * count against the field's `hi`, the capacity of its C array.
 */
#include "msg.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

/* ---- descriptors generated from the declarations ------------------------- */

#define MSG__KIND_U64             MSG_K_U64
#define MSG__KIND_BOOL            MSG_K_BOOL
#define MSG__KIND_STR             MSG_K_STR
#define MSG__KIND_ARR             MSG_K_ARR
#define MSG__KIND_F64             MSG_K_F64
#define MSG__KIND_IDS             MSG_K_IDS
#define MSG__KIND_U64S            MSG_K_U64S
#define MSG__KIND_OU64            MSG_K_U64
#define MSG__KIND_OBOOL           MSG_K_BOOL
#define MSG__KIND_OSTR            MSG_K_STR
#define MSG__OPT_U64              false
#define MSG__OPT_BOOL             false
#define MSG__OPT_STR              false
#define MSG__OPT_ARR              false
#define MSG__OPT_F64              false
#define MSG__OPT_IDS              false
#define MSG__OPT_U64S             false
#define MSG__OPT_OU64             true
#define MSG__OPT_OBOOL            true
#define MSG__OPT_OSTR             true
#define MSG__SUB_OU64(sub)        NULL
#define MSG__SUB_OBOOL(sub)       NULL
#define MSG__SUB_OSTR(sub)        NULL
#define MSG__ELEMS_OU64(R, name)  0
#define MSG__ELEMS_OBOOL(R, name) 0
#define MSG__ELEMS_OSTR(R, name)  0
#define MSG__OFF_OU64(R, name)    offsetof(struct msg_##R, name)
#define MSG__OFF_OBOOL(R, name)   offsetof(struct msg_##R, name)
#define MSG__OFF_OSTR(R, name)    offsetof(struct msg_##R, name)
#define MSG__BOUNDS_OU64(l, h)    .lo = (l), .hi = (h)
#define MSG__BOUNDS_OBOOL(l, h)   .lo = (l), .hi = (h)
#define MSG__BOUNDS_OSTR(l, h)    .lo = (l), .hi = (h)
#define MSG__SUB_U64(sub)         NULL
#define MSG__SUB_BOOL(sub)        NULL
#define MSG__SUB_STR(sub)         NULL
#define MSG__SUB_ARR(sub)         &msg__rec_##sub
#define MSG__SUB_F64(sub)         NULL
#define MSG__SUB_IDS(sub)         NULL
#define MSG__SUB_U64S(sub)        NULL
#define MSG__ELEMS_U64(R, name)   0
#define MSG__ELEMS_BOOL(R, name)  0
#define MSG__ELEMS_STR(R, name)   0
#define MSG__ELEMS_ARR(R, name)   offsetof(struct msg_##R, name.v)
#define MSG__ELEMS_F64(R, name)   0
#define MSG__ELEMS_IDS(R, name)   offsetof(struct msg_##R, name.v)
#define MSG__ELEMS_U64S(R, name)  offsetof(struct msg_##R, name.v)
#define MSG__OFF_U64(R, name)     offsetof(struct msg_##R, name)
#define MSG__OFF_BOOL(R, name)    offsetof(struct msg_##R, name)
#define MSG__OFF_STR(R, name)     offsetof(struct msg_##R, name)
#define MSG__OFF_ARR(R, name)     offsetof(struct msg_##R, name.n)
#define MSG__OFF_F64(R, name)     offsetof(struct msg_##R, name)
#define MSG__OFF_IDS(R, name)     offsetof(struct msg_##R, name.n)
#define MSG__OFF_U64S(R, name)    offsetof(struct msg_##R, name.n)
/* Where a declaration's bounds go: F64 bounds are doubles, the rest integers.
 * (Parameters are not named lo/hi: they would replace the designators.) */
#define MSG__BOUNDS_U64(l, h)  .lo = (l), .hi = (h)
#define MSG__BOUNDS_BOOL(l, h) .lo = (l), .hi = (h)
#define MSG__BOUNDS_STR(l, h)  .lo = (l), .hi = (h)
#define MSG__BOUNDS_ARR(l, h)  .lo = (l), .hi = (h)
#define MSG__BOUNDS_F64(l, h)  .flo = (l), .fhi = (h)
#define MSG__BOUNDS_IDS(l, h)  .lo = (l), .hi = (h)
#define MSG__BOUNDS_U64S(l, h) .lo = (l), .hi = (h)

#define MSG__FIELD_DESC(R, fkind, fname, flo, fhi, fsub)                                           \
	{.name = #fname,                                                                           \
	 .kind = MSG__KIND_##fkind,                                                                \
	 .offset = MSG__OFF_##fkind(R, fname),                                                     \
	 .elems = MSG__ELEMS_##fkind(R, fname),                                                    \
	 MSG__BOUNDS_##fkind(flo, fhi),                                                            \
	 .sub = MSG__SUB_##fkind(fsub),                                                            \
	 .optional = MSG__OPT_##fkind},

#define MSG__COUNT_FIELD(R, kind, fname, lo, hi, sub) +1

#define MSG__REC_DESC(rec, rdoc)                                                                   \
	static const struct msg_field msg__fields_##rec[] = {                                      \
	    MSG_FIELDS_##rec(MSG__FIELD_DESC, rec)};                                               \
	static const struct msg_rec msg__rec_##rec = {                                             \
	    .name = #rec,                                                                          \
	    .doc = rdoc,                                                                           \
	    .size = sizeof(struct msg_##rec),                                                      \
	    .nfields = 0 MSG_FIELDS_##rec(MSG__COUNT_FIELD, rec),                                  \
	    .fields = msg__fields_##rec,                                                           \
	};
MSG_RECORDS(MSG__REC_DESC)

#define MSG__TYPE_FIELDS(NAME, num, tname, tdoc)                                                   \
	static const struct msg_field msg__fields_##tname[] = {                                    \
	    MSG_FIELDS_##tname(MSG__FIELD_DESC, tname)};
MSG_TYPES(MSG__TYPE_FIELDS)

const struct msg_desc msg_descs[] = {
#define MSG__TYPE_DESC(NAME, num, tname, tdoc)                                                     \
	{.type = num,                                                                              \
	 .rec = {.name = #tname,                                                                   \
	         .doc = tdoc,                                                                      \
	         .size = sizeof(struct msg_##tname),                                               \
	         .nfields = 0 MSG_FIELDS_##tname(MSG__COUNT_FIELD, tname),                         \
	         .fields = msg__fields_##tname}},
    MSG_TYPES(MSG__TYPE_DESC)
#undef MSG__TYPE_DESC
};
const size_t msg_ndescs = sizeof(msg_descs) / sizeof(msg_descs[0]);

/* The payload union starts at the same address for every member. */
#define MSG__PAYLOAD(m)  ((char *)&(m)->u)
#define MSG__CPAYLOAD(m) ((const char *)&(m)->u)

/* submit and fd_submit are one declaration (msg.h): one layout. */
_Static_assert(sizeof(struct msg_submit) == sizeof(struct msg_fd_submit),
               "fd_submit is submit, field for field");

const struct msg_desc *msg_desc_find(uint32_t type)
{
	for (size_t i = 0; i < msg_ndescs; i++)
		if (msg_descs[i].type == type)
			return &msg_descs[i];
	return NULL;
}

const char *msg_type_name(uint32_t type)
{
	const struct msg_desc *d = msg_desc_find(type);

	return d ? d->rec.name : "unknown";
}

/* ---- helpers ------------------------------------------------------------- */

bool msg_str_eq(struct msg_str s, const char *lit)
{
	size_t n = strlen(lit);

	return s.n == n && (n == 0 || memcmp(s.p, lit, n) == 0);
}

void msg_str_copy(char *out, size_t cap, struct msg_str s)
{
	size_t n = s.n < cap - 1 ? s.n : cap - 1;

	/* When cutting, do not split a UTF-8 character. */
	if (n < s.n)
		while (n > 0 && ((unsigned char)s.p[n] & 0xc0) == 0x80)
			n--;
	if (n)
		memcpy(out, s.p, n);
	out[n] = '\0';
}

bool msg_utf8_valid(const char *p, size_t n)
{
	const unsigned char *s = (const unsigned char *)p;
	size_t i = 0;

	while (i < n) {
		unsigned c = s[i];
		size_t k;
		uint32_t cp, min;

		if (c == 0)
			return false;
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			k = 1;
			cp = c & 0x1f;
			min = 0x80;
		} else if (c >= 0xe0 && c <= 0xef) {
			k = 2;
			cp = c & 0x0f;
			min = 0x800;
		} else if (c >= 0xf0 && c <= 0xf4) {
			k = 3;
			cp = c & 0x07;
			min = 0x10000;
		} else {
			return false;
		}
		if (n - i <= k)
			return false;
		for (size_t j = 1; j <= k; j++) {
			if ((s[i + j] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + j] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += k + 1;
	}
	return true;
}

int msg_buf_write(void *ctx, const char *buf, size_t len)
{
	struct msg_buf *b = ctx;

	if (len == 0)
		return 0;
	if (b->n + len > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (cap < b->n + len)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p)
			return -1;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, buf, len);
	b->n += len;
	return 0;
}

void msg_buf_release(struct msg_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->n = b->cap = 0;
}

/* ---- size bound ---------------------------------------------------------- */

static size_t msg__str_max(size_t n)
{
	return n + (n < 32 ? 1 : n < 256 ? 2 : n < 65536 ? 3 : 5);
}

static size_t msg__rec_max(const struct msg_rec *r)
{
	size_t total = 5; /* map header at its widest */

	for (uint32_t i = 0; i < r->nfields; i++) {
		const struct msg_field *f = &r->fields[i];

		total += msg__str_max(strlen(f->name));
		switch (f->kind) {
		case MSG_K_U64:
			total += 9;
			break;
		case MSG_K_BOOL:
			total += 1;
			break;
		case MSG_K_STR:
			total += msg__str_max((size_t)f->hi);
			break;
		case MSG_K_ARR:
			total += 5 + (size_t)f->hi * msg__rec_max(f->sub);
			break;
		case MSG_K_F64:
			total += 9; /* always float64 */
			break;
		case MSG_K_IDS:
			total += 5 + (size_t)f->hi * 5; /* uint32 at its widest */
			break;
		case MSG_K_U64S:
			total += 5 + (size_t)f->hi * 9; /* uint64 at its widest */
			break;
		}
	}
	return total;
}

size_t msg_max_encoded(const struct msg_desc *d)
{
	return msg__rec_max(&d->rec) + 2 * (2 + 9); /* "t" and "v" */
}

/* ---- validation shared by encoder and decoder ------------------------------ */

/* Path of the field being checked, for messages: "status_reply.procs[2].pid".
 * A chain of frames on the stack, rendered only when a message needs it
 * (decoding a valid message never formats one). */
struct msg__path {
	const struct msg__path *up; /* NULL at the message */
	const char *name;           /* the message or field name; NULL for an index */
	long idx;
};

struct msg__pathstr {
	char s[160];
};

static size_t msg__path_render(const struct msg__path *p, char *out, size_t cap)
{
	size_t n = p->up ? msg__path_render(p->up, out, cap) : 0;
	int k;

	if (n >= cap)
		return n;
	if (!p->up)
		k = snprintf(out + n, cap - n, "%s", p->name);
	else if (p->name)
		k = snprintf(out + n, cap - n, ".%s", p->name);
	else
		k = snprintf(out + n, cap - n, "[%ld]", p->idx);
	return n + (k > 0 ? (size_t)k : 0);
}

/* The path as text, a temporary for one message's arguments. */
static struct msg__pathstr msg__ps(const struct msg__path *p)
{
	struct msg__pathstr r;

	r.s[0] = '\0';
	msg__path_render(p, r.s, sizeof(r.s));
	return r;
}

static void msg__path_push(struct msg__path *out, const struct msg__path *in, const char *name,
                           long idx)
{
	out->up = in;
	out->name = idx >= 0 ? NULL : name;
	out->idx = idx;
}

static int msg__check_str(const struct msg_field *f, const char *p, size_t n,
                          const struct msg__path *path, struct ig_errbuf *eb)
{
	if (n < f->lo || n > f->hi)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "%s: string of %zu bytes; accepted %" PRIu64 "..%" PRIu64 " bytes",
		               msg__ps(path).s, n, f->lo, f->hi);
	if (!msg_utf8_valid(p, n))
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "%s: not valid UTF-8 or contains a NUL byte; accepted UTF-8 text",
		               msg__ps(path).s);
	return IG_E_OK;
}

static int msg__check_u64(const struct msg_field *f, uint64_t v, const struct msg__path *path,
                          struct ig_errbuf *eb)
{
	if (v < f->lo || v > f->hi)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "%s: %" PRIu64 " is out of range; accepted %" PRIu64 "..%" PRIu64,
		               msg__ps(path).s, v, f->lo, f->hi);
	return IG_E_OK;
}

/* The shortest of %.15g..%.17g that reads back as `v`: 0.1, not 0.10000000000000001. */
struct msg__num {
	char s[32];
};

static struct msg__num msg__fmt_f64(double v)
{
	struct msg__num n;

	for (int prec = 15; prec <= 17; prec++) {
		snprintf(n.s, sizeof(n.s), "%.*g", prec, v);
		if (strtod(n.s, NULL) == v)
			break;
	}
	return n;
}

static int msg__check_f64(const struct msg_field *f, double v, const struct msg__path *path,
                          struct ig_errbuf *eb)
{
	if (isnan(v))
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE, "%s: NaN; accepted a number in %s..%s",
		               msg__ps(path).s, msg__fmt_f64(f->flo).s, msg__fmt_f64(f->fhi).s);
	if (!(v >= f->flo && v <= f->fhi))
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "%s: %s is out of range; accepted %s..%s", msg__ps(path).s,
		               msg__fmt_f64(v).s, msg__fmt_f64(f->flo).s, msg__fmt_f64(f->fhi).s);
	return IG_E_OK;
}

static int msg__check_count(const struct msg_field *f, uint64_t n, const struct msg__path *path,
                            struct ig_errbuf *eb)
{
	if (n < f->lo || n > f->hi)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "%s: %" PRIu64 " elements; accepted %" PRIu64 "..%" PRIu64,
		               msg__ps(path).s, n, f->lo, f->hi);
	return IG_E_OK;
}

/* ---- encoder ------------------------------------------------------------- */

static int msg__check_rec(const struct msg_rec *r, const char *base, const struct msg__path *path,
                          struct ig_errbuf *eb);

static int msg__check_field(const struct msg_field *f, const char *base,
                            const struct msg__path *path, struct ig_errbuf *eb)
{
	const char *at = base + f->offset;
	int rc = IG_E_OK;

	switch (f->kind) {
	case MSG_K_U64:
		rc = msg__check_u64(f, *(const uint64_t *)(const void *)at, path, eb);
		break;
	case MSG_K_BOOL:
		break;
	case MSG_K_STR: {
		const struct msg_str *s = (const struct msg_str *)(const void *)at;

		if (s->n && !s->p)
			return ig_errf(eb, IG_E_INVAL, "%s: length %u with a NULL pointer",
			               msg__ps(path).s, s->n);
		rc = msg__check_str(f, s->p, s->n, path, eb);
		break;
	}
	case MSG_K_ARR: {
		uint32_t n = *(const uint32_t *)(const void *)at;

		rc = msg__check_count(f, n, path, eb);
		for (uint32_t i = 0; i < n && rc == IG_E_OK; i++) {
			struct msg__path sub;

			msg__path_push(&sub, path, NULL, (long)i);
			rc = msg__check_rec(f->sub, base + f->elems + (size_t)i * f->sub->size,
			                    &sub, eb);
		}
		break;
	}
	case MSG_K_F64:
		rc = msg__check_f64(f, *(const double *)(const void *)at, path, eb);
		break;
	case MSG_K_IDS:  /* every uint32_t is a valid id */
	case MSG_K_U64S: /* every uint64_t is a valid element */
		rc = msg__check_count(f, *(const uint32_t *)(const void *)at, path, eb);
		break;
	}
	return rc;
}

static int msg__check_rec(const struct msg_rec *r, const char *base, const struct msg__path *path,
                          struct ig_errbuf *eb)
{
	for (uint32_t i = 0; i < r->nfields; i++) {
		struct msg__path sub;
		int rc;

		msg__path_push(&sub, path, r->fields[i].name, -1);
		rc = msg__check_field(&r->fields[i], base, &sub, eb);
		if (rc)
			return rc;
	}
	return IG_E_OK;
}

static void msg__pack_key(msgpack_packer *pk, const char *k)
{
	size_t n = strlen(k);

	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, k, n);
}

static void msg__pack_rec(msgpack_packer *pk, const struct msg_rec *r, const char *base);

static void msg__pack_field(msgpack_packer *pk, const struct msg_field *f, const char *base)
{
	const char *at = base + f->offset;

	msg__pack_key(pk, f->name);
	switch (f->kind) {
	case MSG_K_U64:
		msgpack_pack_uint64(pk, *(const uint64_t *)(const void *)at);
		break;
	case MSG_K_BOOL:
		if (*(const bool *)(const void *)at)
			msgpack_pack_true(pk);
		else
			msgpack_pack_false(pk);
		break;
	case MSG_K_STR: {
		const struct msg_str *s = (const struct msg_str *)(const void *)at;

		msgpack_pack_str(pk, s->n);
		msgpack_pack_str_body(pk, s->p, s->n);
		break;
	}
	case MSG_K_ARR: {
		uint32_t n = *(const uint32_t *)(const void *)at;

		msgpack_pack_array(pk, n);
		for (uint32_t i = 0; i < n; i++)
			msg__pack_rec(pk, f->sub, base + f->elems + (size_t)i * f->sub->size);
		break;
	}
	case MSG_K_F64:
		msgpack_pack_double(pk, *(const double *)(const void *)at);
		break;
	case MSG_K_IDS: {
		uint32_t n = *(const uint32_t *)(const void *)at;
		const uint32_t *v = (const uint32_t *)(const void *)(base + f->elems);

		msgpack_pack_array(pk, n);
		for (uint32_t i = 0; i < n; i++)
			msgpack_pack_uint32(pk, v[i]);
		break;
	}
	case MSG_K_U64S: {
		uint32_t n = *(const uint32_t *)(const void *)at;
		const uint64_t *v = (const uint64_t *)(const void *)(base + f->elems);

		msgpack_pack_array(pk, n);
		for (uint32_t i = 0; i < n; i++)
			msgpack_pack_uint64(pk, v[i]);
		break;
	}
	}
}

/* False for an optional field holding 0 (false): it is left out. */
static bool msg__present(const struct msg_field *f, const char *base)
{
	const char *at = base + f->offset;

	if (!f->optional)
		return true;
	if (f->kind == MSG_K_BOOL)
		return *(const bool *)(const void *)at;
	if (f->kind == MSG_K_STR)
		return ((const struct msg_str *)(const void *)at)->n != 0;
	return *(const uint64_t *)(const void *)at != 0;
}

static uint32_t msg__npresent(const struct msg_rec *r, const char *base)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < r->nfields; i++)
		n += msg__present(&r->fields[i], base);
	return n;
}

static void msg__pack_rec(msgpack_packer *pk, const struct msg_rec *r, const char *base)
{
	msgpack_pack_map(pk, msg__npresent(r, base));
	for (uint32_t i = 0; i < r->nfields; i++)
		if (msg__present(&r->fields[i], base))
			msg__pack_field(pk, &r->fields[i], base);
}

/* Counts the bytes and remembers a write failure, so encoding reports it. */
struct msg__sink {
	msg_write_fn write;
	void *ctx;
	int failed;
};

static int msg__sink_write(void *data, const char *buf, size_t len)
{
	struct msg__sink *s = data;

	if (s->failed)
		return -1;
	if (s->write(s->ctx, buf, len) != 0)
		s->failed = 1;
	return s->failed ? -1 : 0;
}

int msg_check(const struct msg *m, struct ig_errbuf *eb)
{
	const struct msg_desc *d = msg_desc_find(m->type);
	struct msg__path path;

	if (!d)
		return ig_errf(eb, IG_E_PROTO_UNKNOWN_TYPE, "unknown message type %u", m->type);
	path = (struct msg__path){NULL, d->rec.name, -1};
	return msg__check_rec(&d->rec, MSG__CPAYLOAD(m), &path, eb);
}

int msg_encode(const struct msg *m, msg_write_fn write, void *ctx, struct ig_errbuf *eb)
{
	const struct msg_desc *d = msg_desc_find(m->type);
	struct msg__sink sink = {write, ctx, 0};
	msgpack_packer pk;
	int rc;

	rc = msg_check(m, eb);
	if (rc)
		return d ? rc
		         : ig_errf(eb, IG_E_PROTO_UNKNOWN_TYPE,
		                   "cannot encode unknown message type %u", m->type);
	msgpack_packer_init(&pk, &sink, msg__sink_write);
	msgpack_pack_map(&pk, 2 + msg__npresent(&d->rec, MSG__CPAYLOAD(m)));
	msg__pack_key(&pk, "t");
	msgpack_pack_uint32(&pk, d->type);
	msg__pack_key(&pk, "v");
	msgpack_pack_uint32(&pk, MSG_PROTO_VERSION);
	for (uint32_t i = 0; i < d->rec.nfields; i++)
		if (msg__present(&d->rec.fields[i], MSG__CPAYLOAD(m)))
			msg__pack_field(&pk, &d->rec.fields[i], MSG__CPAYLOAD(m));
	if (sink.failed)
		return ig_errf(eb, IG_E_NOMEM, "cannot encode %s: the output refused the bytes",
		               d->rec.name);
	return IG_E_OK;
}

/* ---- prescan ------------------------------------------------------------- */

static uint64_t msg__be(const unsigned char *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = (v << 8) | p[i];
	return v;
}

/* The object whose first byte is b[pos] (pos < len): the bytes of its
 * header (*hdr), the bytes that follow the header (*body) and the items a
 * container holds (*count: a map's keys and values both). 0, or 1 for the
 * byte 0xc1 (which msgpack never uses), or 2 when the header itself runs
 * past len. */
static int msg__head(const unsigned char *b, size_t len, size_t pos, size_t *hdr, uint64_t *body,
                     uint64_t *count)
{
	unsigned c = b[pos];

	*hdr = 1;
	*body = 0;
	*count = 0;
	if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
		/* fixint, nil, bool */
	} else if (c <= 0x8f) {
		*count = 2u * (c & 0x0f);
	} else if (c <= 0x9f) {
		*count = c & 0x0f;
	} else if (c <= 0xbf) {
		*body = c & 0x1f;
	} else if (c == 0xc1) {
		return 1;
	} else {
		/* Fixed tables for 0xc4..0xdf: length-field width, fixed body. */
		static const unsigned char lenw[] = {
		    /* c4 */ 1, 2, 4, 1, 2, 4, 0, 0, 0, 0, 0, 0,
		    /* d0 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 4, 2, 4, 2, 4};
		static const unsigned char fixed[] = {
		    /* c4 */ 0, 0, 0, 1, 1, 1, 4, 8, 1,  2, 4, 8,
		    /* d0 */ 1, 2, 4, 8, 2, 3, 5, 9, 17, 0, 0, 0, 0, 0, 0, 0};
		unsigned k = c - 0xc4;
		uint64_t n;

		*hdr = 1 + lenw[k];
		if (len - pos < *hdr)
			return 2;
		n = msg__be(b + pos + 1, lenw[k]);
		if (c == 0xdc || c == 0xdd)
			*count = n;
		else if (c == 0xde || c == 0xdf)
			*count = 2 * n;
		else
			*body = fixed[k] + (lenw[k] ? n : 0);
	}
	return 0;
}

static int msg__prescan(const unsigned char *b, size_t len, struct ig_errbuf *eb)
{
	uint64_t pending[MSG_MAX_DEPTH + 1];
	int top = 0;
	size_t pos = 0;

	pending[0] = 1;
	for (;;) {
		uint64_t body, count; /* bytes after the header; container items */
		size_t hdr;
		int h;

		while (top >= 0 && pending[top] == 0)
			top--;
		if (top < 0)
			break;
		pending[top]--;
		if (pos >= len)
			return ig_errf(eb, IG_E_PROTO_TRUNCATED,
			               "message truncated at byte %zu of %zu", pos, len);
		h = msg__head(b, len, pos, &hdr, &body, &count);
		if (h == 1)
			return ig_errf(eb, IG_E_PROTO_MALFORMED,
			               "byte %zu is 0xc1, which msgpack never uses", pos);
		if (h == 2)
			return ig_errf(eb, IG_E_PROTO_TRUNCATED,
			               "message truncated in a header at byte %zu", pos);
		if (body > len - pos - hdr)
			return ig_errf(eb, IG_E_PROTO_TRUNCATED,
			               "message truncated: byte %zu announces %" PRIu64
			               " bytes, %zu remain",
			               pos, body, len - pos - hdr);
		pos += hdr + (size_t)body;
		if (count) {
			/* Every item takes at least one byte. */
			if (count > len - pos)
				return ig_errf(eb, IG_E_PROTO_TRUNCATED,
				               "message truncated: a container announces %" PRIu64
				               " items, %zu bytes remain",
				               count, len - pos);
			if (top + 1 > MSG_MAX_DEPTH)
				return ig_errf(eb, IG_E_PROTO_MALFORMED,
				               "containers nested deeper than %d", MSG_MAX_DEPTH);
			pending[++top] = count;
		}
	}
	if (pos != len)
		return ig_errf(eb, IG_E_PROTO_MALFORMED,
		               "%zu trailing bytes after the message (one msgpack map expected)",
		               len - pos);
	return IG_E_OK;
}

/* ---- re-tagging ---------------------------------------------------------- */

/* The position after the object at b[pos] (of a buffer the prescan took),
 * or 0 when it runs past len. */
static size_t msg__skip(const unsigned char *b, size_t len, size_t pos, int depth)
{
	uint64_t body, count;
	size_t hdr;

	if (pos >= len || depth > MSG_MAX_DEPTH || msg__head(b, len, pos, &hdr, &body, &count) ||
	    body > len - pos - hdr)
		return 0;
	pos += hdr + (size_t)body;
	for (uint64_t i = 0; i < count && pos; i++)
		pos = msg__skip(b, len, pos, depth + 1);
	return pos;
}

/* True when records a and b declare the same fields: names, kinds,
 * limits, places and nested records. */
static bool msg__same_fields(const struct msg_rec *a, const struct msg_rec *b)
{
	if (a->size != b->size || a->nfields != b->nfields)
		return false;
	for (uint32_t i = 0; i < a->nfields; i++) {
		const struct msg_field *x = &a->fields[i], *y = &b->fields[i];

		if (strcmp(x->name, y->name) || x->kind != y->kind || x->offset != y->offset ||
		    x->elems != y->elems || x->lo != y->lo || x->hi != y->hi || x->flo != y->flo ||
		    x->fhi != y->fhi || x->sub != y->sub)
			return false;
	}
	return true;
}

int msg_retag(void *buf, size_t len, uint32_t from, uint32_t to, struct ig_errbuf *eb)
{
	const struct msg_desc *df = msg_desc_find(from), *dt = msg_desc_find(to);
	unsigned char *b = buf;
	uint64_t body, count;
	size_t hdr, pos;

	if (!df || !dt || !msg__same_fields(&df->rec, &dt->rec))
		return ig_errf(eb, IG_E_INVAL,
		               "cannot re-tag '%s' as '%s': they declare other fields",
		               msg_type_name(from), msg_type_name(to));
	if (!len || msg__head(b, len, 0, &hdr, &body, &count) ||
	    (!(b[0] >= 0x80 && b[0] <= 0x8f) && b[0] != 0xde && b[0] != 0xdf))
		return ig_errf(eb, IG_E_INVAL, "cannot re-tag: not a message map");
	pos = hdr;
	for (uint64_t i = 0; i < count / 2 && pos; i++) {
		uint64_t kbody, kcount, v;
		size_t khdr, w;
		unsigned c;

		if (pos >= len || msg__head(b, len, pos, &khdr, &kbody, &kcount))
			break;
		c = b[pos];
		if (!((c >= 0xa0 && c <= 0xbf) || (c >= 0xd9 && c <= 0xdb)) || kbody != 1 ||
		    pos + khdr >= len || b[pos + khdr] != 't') {
			pos = msg__skip(b, len, pos, 1);
			pos = pos ? msg__skip(b, len, pos, 1) : 0;
			continue;
		}
		pos += khdr + 1; /* the type's value */
		if (pos >= len)
			break;
		c = b[pos];
		/* positive fixint, uint 8..64, int 8..64: the value's width */
		w = c <= 0x7f                ? 0
		    : c >= 0xcc && c <= 0xcf ? (size_t)1 << (c - 0xcc)
		    : c >= 0xd0 && c <= 0xd3 ? (size_t)1 << (c - 0xd0)
		                             : SIZE_MAX;
		if (w == SIZE_MAX || len - pos - 1 < w)
			break;
		v = w ? msg__be(b + pos + 1, (int)w) : c;
		if (v != from)
			return ig_errf(eb, IG_E_INVAL,
			               "cannot re-tag: the message is of type %" PRIu64
			               ", not '%s'",
			               v, msg_type_name(from));
		if (w == 0 ? to > 0x7f : w < 8 && (uint64_t)to >> (8 * w - (c >= 0xd0)))
			return ig_errf(eb, IG_E_INVAL,
			               "cannot re-tag: type %u does not fit the %zu bytes the "
			               "sender wrote the type in",
			               to, w);
		if (!w)
			b[pos] = (unsigned char)to;
		for (size_t k = 0; k < w; k++)
			b[pos + 1 + k] = (unsigned char)((uint64_t)to >> (8 * (w - 1 - k)));
		return IG_E_OK;
	}
	return ig_errf(eb, IG_E_INVAL, "cannot re-tag: the message has no type");
}

/* ---- decoder ------------------------------------------------------------- */

static const char *msg__objtype(const msgpack_object *o)
{
	switch (o->type) {
	case MSGPACK_OBJECT_NIL:
		return "nil";
	case MSGPACK_OBJECT_BOOLEAN:
		return "a boolean";
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		return "an integer";
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		return "a float";
	case MSGPACK_OBJECT_STR:
		return "a string";
	case MSGPACK_OBJECT_ARRAY:
		return "an array";
	case MSGPACK_OBJECT_MAP:
		return "a map";
	case MSGPACK_OBJECT_BIN:
		return "binary";
	case MSGPACK_OBJECT_EXT:
		return "an extension";
	}
	return "an unknown object";
}

static bool msg__key_is(const msgpack_object *k, const char *name)
{
	size_t n = strlen(name);

	return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
	       memcmp(k->via.str.ptr, name, n) == 0;
}

static int msg__get_u64(const msgpack_object *o, uint64_t *v, const struct msg__path *path,
                        struct ig_errbuf *eb)
{
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
		               "%s: %" PRId64 " is negative; accepted an unsigned integer",
		               msg__ps(path).s, o->via.i64);
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return ig_errf(eb, IG_E_PROTO_FIELD_TYPE,
		               "%s: expected an unsigned integer, got %s", msg__ps(path).s,
		               msg__objtype(o));
	*v = o->via.u64;
	return IG_E_OK;
}

/* A real number: float32, float64, or an integer that a double holds exactly. */
static int msg__get_f64(const msgpack_object *o, double *v, const struct msg__path *path,
                        struct ig_errbuf *eb)
{
	switch (o->type) {
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		*v = o->via.f64; /* msgpack-c widens a float32 exactly */
		return IG_E_OK;
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		if (o->via.u64 > MSG_F64_INT_MAX)
			return ig_errf(
			    eb, IG_E_PROTO_FIELD_RANGE,
			    "%s: integer %" PRIu64 " is above 2^53 and has no exact "
			    "double; accepted a float or an integer of magnitude <= 2^53",
			    msg__ps(path).s, o->via.u64);
		*v = (double)o->via.u64;
		return IG_E_OK;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		if (o->via.i64 < -(int64_t)MSG_F64_INT_MAX)
			return ig_errf(
			    eb, IG_E_PROTO_FIELD_RANGE,
			    "%s: integer %" PRId64 " is below -2^53 and has no exact "
			    "double; accepted a float or an integer of magnitude <= 2^53",
			    msg__ps(path).s, o->via.i64);
		*v = (double)o->via.i64;
		return IG_E_OK;
	default:
		return ig_errf(eb, IG_E_PROTO_FIELD_TYPE,
		               "%s: expected a number (a float or an integer), got %s",
		               msg__ps(path).s, msg__objtype(o));
	}
}

static int msg__decode_rec(const struct msg_rec *r, const msgpack_object *map, size_t skip,
                           char *base, const struct msg__path *path, struct ig_errbuf *eb);

static int msg__decode_field(const struct msg_field *f, const msgpack_object *o, char *base,
                             const struct msg__path *path, struct ig_errbuf *eb)
{
	char *at = base + f->offset;
	int rc;

	switch (f->kind) {
	case MSG_K_U64: {
		uint64_t v;

		rc = msg__get_u64(o, &v, path, eb);
		if (rc)
			return rc;
		rc = msg__check_u64(f, v, path, eb);
		if (rc)
			return rc;
		*(uint64_t *)(void *)at = v;
		return IG_E_OK;
	}
	case MSG_K_BOOL:
		if (o->type != MSGPACK_OBJECT_BOOLEAN)
			return ig_errf(eb, IG_E_PROTO_FIELD_TYPE, "%s: expected a boolean, got %s",
			               msg__ps(path).s, msg__objtype(o));
		*(bool *)(void *)at = o->via.boolean;
		return IG_E_OK;
	case MSG_K_STR: {
		struct msg_str *s = (struct msg_str *)(void *)at;

		if (o->type != MSGPACK_OBJECT_STR)
			return ig_errf(eb, IG_E_PROTO_FIELD_TYPE, "%s: expected a string, got %s",
			               msg__ps(path).s, msg__objtype(o));
		rc = msg__check_str(f, o->via.str.ptr, o->via.str.size, path, eb);
		if (rc)
			return rc;
		s->p = o->via.str.ptr;
		s->n = o->via.str.size;
		return IG_E_OK;
	}
	case MSG_K_ARR: {
		uint32_t *n = (uint32_t *)(void *)at;

		if (o->type != MSGPACK_OBJECT_ARRAY)
			return ig_errf(eb, IG_E_PROTO_FIELD_TYPE, "%s: expected an array, got %s",
			               msg__ps(path).s, msg__objtype(o));
		rc = msg__check_count(f, o->via.array.size, path, eb);
		if (rc)
			return rc;
		for (uint32_t i = 0; i < o->via.array.size; i++) {
			const msgpack_object *e = &o->via.array.ptr[i];
			struct msg__path sub;

			msg__path_push(&sub, path, NULL, (long)i);
			if (e->type != MSGPACK_OBJECT_MAP)
				return ig_errf(eb, IG_E_PROTO_FIELD_TYPE,
				               "%s: expected a map, got %s", msg__ps(&sub).s,
				               msg__objtype(e));
			rc = msg__decode_rec(f->sub, e, 0,
			                     base + f->elems + (size_t)i * f->sub->size, &sub, eb);
			if (rc)
				return rc;
		}
		*n = o->via.array.size;
		return IG_E_OK;
	}
	case MSG_K_F64: {
		double v = 0; /* set on success; gcc cannot tell */

		rc = msg__get_f64(o, &v, path, eb);
		if (rc)
			return rc;
		rc = msg__check_f64(f, v, path, eb);
		if (rc)
			return rc;
		*(double *)(void *)at = v;
		return IG_E_OK;
	}
	case MSG_K_IDS: {
		uint32_t *n = (uint32_t *)(void *)at;
		uint32_t *ids = (uint32_t *)(void *)(base + f->elems);

		if (o->type != MSGPACK_OBJECT_ARRAY)
			return ig_errf(eb, IG_E_PROTO_FIELD_TYPE,
			               "%s: expected an array of token ids, got %s",
			               msg__ps(path).s, msg__objtype(o));
		/* Before any write: `hi` is the capacity of `ids`. */
		rc = msg__check_count(f, o->via.array.size, path, eb);
		if (rc)
			return rc;
		for (uint32_t i = 0; i < o->via.array.size; i++) {
			const msgpack_object *e = &o->via.array.ptr[i];
			struct msg__path sub;
			uint64_t v = 0;

			if (e->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
			    e->via.u64 <= UINT32_MAX) {
				ids[i] = (uint32_t)e->via.u64;
				continue;
			}
			/* The path only on the way out: 4096 snprintf calls would
			 * take most of the decoding time. */
			msg__path_push(&sub, path, NULL, (long)i);
			rc = msg__get_u64(e, &v, &sub, eb);
			if (rc)
				return rc;
			return ig_errf(eb, IG_E_PROTO_FIELD_RANGE,
			               "%s: token id %" PRIu64
			               " is out of range; accepted 0..%" PRIu32,
			               msg__ps(&sub).s, v, UINT32_MAX);
		}
		*n = o->via.array.size;
		return IG_E_OK;
	}
	case MSG_K_U64S: {
		uint32_t *n = (uint32_t *)(void *)at;
		uint64_t *v = (uint64_t *)(void *)(base + f->elems);

		if (o->type != MSGPACK_OBJECT_ARRAY)
			return ig_errf(eb, IG_E_PROTO_FIELD_TYPE,
			               "%s: expected an array of uints, got %s", msg__ps(path).s,
			               msg__objtype(o));
		/* Before any write: `hi` is the capacity of `v`. */
		rc = msg__check_count(f, o->via.array.size, path, eb);
		if (rc)
			return rc;
		for (uint32_t i = 0; i < o->via.array.size; i++) {
			const msgpack_object *e = &o->via.array.ptr[i];
			struct msg__path sub;

			if (e->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
				v[i] = e->via.u64;
				continue;
			}
			msg__path_push(&sub, path, NULL, (long)i);
			rc = msg__get_u64(e, &v[i], &sub, eb);
			if (rc)
				return rc;
		}
		*n = o->via.array.size;
		return IG_E_OK;
	}
	}
	return ig_errf(eb, IG_E_INVAL, "%s: field kind %d not handled", msg__ps(path).s,
	               (int)f->kind);
}

/* Decode the map `map` into a record; `skip` is the number of envelope keys
 * ("t", "v") present in it, which the caller has already checked. */
static int msg__decode_rec(const struct msg_rec *r, const msgpack_object *map, size_t skip,
                           char *base, const struct msg__path *path, struct ig_errbuf *eb)
{
	const msgpack_object_map *mp = &map->via.map;
	uint64_t seen = 0; /* nfields <= 64: checked by the unit tests */

	for (uint32_t i = 0; i < mp->size; i++) {
		const msgpack_object *k = &mp->ptr[i].key;
		uint32_t j;
		int rc;

		if (k->type != MSGPACK_OBJECT_STR)
			return ig_errf(eb, IG_E_PROTO_MALFORMED,
			               "%s: a key is %s; keys are strings", msg__ps(path).s,
			               msg__objtype(k));
		if (skip && (msg__key_is(k, "t") || msg__key_is(k, "v")))
			continue;
		for (j = 0; j < r->nfields; j++)
			if (msg__key_is(k, r->fields[j].name))
				break;
		if (j == r->nfields) {
			char name[48];

			msg_str_copy(name, sizeof(name),
			             (struct msg_str){k->via.str.ptr, k->via.str.size});
			return ig_errf(eb, IG_E_PROTO_UNKNOWN_FIELD,
			               "%s: unknown field '%s' (protocol version %u)",
			               msg__ps(path).s,
			               msg_utf8_valid(name, strlen(name)) ? name : "<binary>",
			               MSG_PROTO_VERSION);
		}
		if (seen & ((uint64_t)1 << j))
			return ig_errf(eb, IG_E_PROTO_MALFORMED, "%s: field '%s' appears twice",
			               msg__ps(path).s, r->fields[j].name);
		seen |= (uint64_t)1 << j;
		{
			struct msg__path sub;

			msg__path_push(&sub, path, r->fields[j].name, -1);
			rc = msg__decode_field(&r->fields[j], &mp->ptr[i].val, base, &sub, eb);
		}
		if (rc)
			return rc;
	}
	for (uint32_t j = 0; j < r->nfields; j++)
		if (!(seen & ((uint64_t)1 << j)) && !r->fields[j].optional)
			return ig_errf(eb, IG_E_PROTO_MISSING_FIELD,
			               "%s: required field '%s' is missing", msg__ps(path).s,
			               r->fields[j].name);
	return IG_E_OK;
}

static int msg__decode_obj(const msgpack_object *o, struct msg *out, struct ig_errbuf *eb)
{
	const msgpack_object *t = NULL, *v = NULL;
	const struct msg_desc *d;
	struct msg__path path;
	uint64_t type, ver;
	int rc;

	if (o->type != MSGPACK_OBJECT_MAP)
		return ig_errf(eb, IG_E_PROTO_MALFORMED, "message is %s; expected a map",
		               msg__objtype(o));
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object *k = &o->via.map.ptr[i].key;

		if (msg__key_is(k, "t") || msg__key_is(k, "v")) {
			const msgpack_object **slot = k->via.str.ptr[0] == 't' ? &t : &v;

			if (*slot)
				return ig_errf(eb, IG_E_PROTO_MALFORMED,
				               "envelope key '%c' appears twice",
				               k->via.str.ptr[0]);
			*slot = &o->via.map.ptr[i].val;
		}
	}
	if (!t)
		return ig_errf(eb, IG_E_PROTO_MISSING_FIELD,
		               "message has no type: envelope key 't' is missing");
	if (!v)
		return ig_errf(eb, IG_E_PROTO_MISSING_FIELD,
		               "message has no protocol version: envelope key 'v' is missing");
	rc = msg__get_u64(t, &type, &(struct msg__path){NULL, "envelope 't' (type)", -1}, eb);
	if (rc)
		return rc;
	rc = msg__get_u64(v, &ver, &(struct msg__path){NULL, "envelope 'v' (version)", -1}, eb);
	if (rc)
		return rc;
	out->type = type > UINT32_MAX ? UINT32_MAX : (uint32_t)type;
	out->version = ver > UINT32_MAX ? UINT32_MAX : (uint32_t)ver;
	if (ver != MSG_PROTO_VERSION)
		return ig_errf(eb, IG_E_PROTO_VERSION,
		               "peer speaks protocol version %" PRIu64 ", we speak %u", ver,
		               MSG_PROTO_VERSION);
	d = msg_desc_find(out->type);
	if (!d || type > UINT32_MAX)
		return ig_errf(eb, IG_E_PROTO_UNKNOWN_TYPE,
		               "unknown message type %" PRIu64 " (protocol version %u)", type,
		               MSG_PROTO_VERSION);
	/* Only this type's payload: the union is ~16 KB (IDS fields), most
	 * messages a few dozen bytes. */
	memset(MSG__PAYLOAD(out), 0, d->rec.size);
	path = (struct msg__path){NULL, d->rec.name, -1};
	return msg__decode_rec(&d->rec, o, 2, MSG__PAYLOAD(out), &path, eb);
}

int msg_decode(const void *buf, size_t len, struct msg *out, struct ig_errbuf *eb)
{
	msgpack_zone zone;
	msgpack_object obj;
	size_t off = 0;
	int rc;

	out->type = 0;
	out->version = 0;
	if (len > MSG_MAX_BYTES)
		return ig_errf(eb, IG_E_PROTO_OVERSIZE, "message of %zu bytes; the limit is %u",
		               len, MSG_MAX_BYTES);
	if (len == 0)
		return ig_errf(eb, IG_E_PROTO_TRUNCATED, "empty message");
	rc = msg__prescan(buf, len, eb);
	if (rc)
		return rc;
	if (!msgpack_zone_init(&zone, 2048))
		return ig_errf(eb, IG_E_NOMEM, "no memory to decode a %zu-byte message", len);
	switch (msgpack_unpack(buf, len, &off, &zone, &obj)) {
	case MSGPACK_UNPACK_SUCCESS:
		rc = msg__decode_obj(&obj, out, eb);
		break;
	case MSGPACK_UNPACK_EXTRA_BYTES:
		rc = ig_errf(eb, IG_E_PROTO_MALFORMED, "trailing bytes after the message");
		break;
	case MSGPACK_UNPACK_CONTINUE:
		rc = ig_errf(eb, IG_E_PROTO_TRUNCATED, "message truncated");
		break;
	case MSGPACK_UNPACK_NOMEM_ERROR:
		rc = ig_errf(eb, IG_E_NOMEM, "no memory to decode a %zu-byte message", len);
		break;
	default:
		rc = ig_errf(eb, IG_E_PROTO_MALFORMED, "not valid msgpack");
		break;
	}
	msgpack_zone_destroy(&zone);
	return rc;
}

/* ---- equality ------------------------------------------------------------ */

static bool msg__rec_equal(const struct msg_rec *r, const char *a, const char *b)
{
	for (uint32_t i = 0; i < r->nfields; i++) {
		const struct msg_field *f = &r->fields[i];
		const char *x = a + f->offset, *y = b + f->offset;

		switch (f->kind) {
		case MSG_K_U64:
			if (*(const uint64_t *)(const void *)x !=
			    *(const uint64_t *)(const void *)y)
				return false;
			break;
		case MSG_K_BOOL:
			if (*(const bool *)(const void *)x != *(const bool *)(const void *)y)
				return false;
			break;
		case MSG_K_STR: {
			const struct msg_str *s = (const void *)x, *t = (const void *)y;

			if (s->n != t->n || (s->n && memcmp(s->p, t->p, s->n) != 0))
				return false;
			break;
		}
		case MSG_K_ARR: {
			uint32_t n = *(const uint32_t *)(const void *)x;

			if (n != *(const uint32_t *)(const void *)y)
				return false;
			for (uint32_t j = 0; j < n; j++)
				if (!msg__rec_equal(f->sub, a + f->elems + (size_t)j * f->sub->size,
				                    b + f->elems + (size_t)j * f->sub->size))
					return false;
			break;
		}
		case MSG_K_F64: /* by value: -0.0 equals 0.0; NaN (never valid) nothing */
			if (!(*(const double *)(const void *)x == *(const double *)(const void *)y))
				return false;
			break;
		case MSG_K_IDS:
		case MSG_K_U64S: {
			uint32_t n = *(const uint32_t *)(const void *)x;
			size_t el = f->kind == MSG_K_IDS ? sizeof(uint32_t) : sizeof(uint64_t);

			if (n != *(const uint32_t *)(const void *)y ||
			    (n && memcmp(a + f->elems, b + f->elems, (size_t)n * el)))
				return false;
			break;
		}
		}
	}
	return true;
}

bool msg_equal(const struct msg *a, const struct msg *b)
{
	const struct msg_desc *d = msg_desc_find(a->type);

	if (a->type != b->type || !d)
		return false;
	return msg__rec_equal(&d->rec, MSG__CPAYLOAD(a), MSG__CPAYLOAD(b));
}
