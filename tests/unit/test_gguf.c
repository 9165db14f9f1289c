/*
 * test_gguf.c - the GGUF v3 reader and writer (model/gguf.h).
 *
 *   - a round trip through a file of every value type, arrays of every scalar
 *     type and of strings, and tensors of F32, F16 and BF16 in 1 to 4 dims, at
 *     the default alignment and at general.alignment 64;
 *   - an independent emitter here writes a small valid file byte by byte; the
 *     writer must produce the same bytes, and a table of malformed files, each
 *     that file with one mutation, checks the exact code and words of every
 *     refusal, through a real file and through an exact-size heap copy (so
 *     that ASan sees any read past the end);
 *   - every truncation of the small file, through both paths;
 *   - getters: missing keys, type mismatches; writer refusals, sticky errors
 *     and atomic replacement;
 *   - bf16/f16 conversions: exact values (NaN, Inf, denormals, ties) and an
 *     exhaustive round trip of every 16-bit pattern.
 * Temporary files live under one mkdtemp directory removed at the end.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sched.h> /* CLONE_NEWNS; <sched.h> is shadowed by gpu-worker/sched.h */
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/gguf.h"
#include "model/quant.h"

/* The temporary directory of this run (set by the group setup). */
static char tmpdir[64];

/* Bytes of one element of F32, F16 or BF16 (0 for a block type). */
static uint64_t elem_bytes(uint32_t type)
{
	return quant_row_bytes(type, 1);
}

static void path_in(char *out, size_t cap, const char *name)
{
	snprintf(out, cap, "%s/%s", tmpdir, name);
}

static void write_bytes(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	if (n)
		assert_int_equal(fwrite(p, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	unsigned char *p;
	long len;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	fseek(f, 0, SEEK_SET);
	p = malloc((size_t)len + 1);
	assert_int_equal(fread(p, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	*n = (size_t)len;
	return p;
}

/* Number of entries in `tmpdir`, ignoring "." and "..". */
static int dir_entries(void)
{
	DIR *d = opendir(tmpdir);
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static void empty_tmpdir(void)
{
	DIR *d = opendir(tmpdir);
	struct dirent *e;
	char p[256];

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		path_in(p, sizeof(p), e->d_name);
		unlink(p);
	}
	closedir(d);
}

static int group_setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test-gguf.XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	empty_tmpdir();
	return rmdir(tmpdir);
}

/* ---- an independent emitter ---------------------------------------------- */

struct buf {
	unsigned char *p;
	size_t n, cap;
};

static void b_put(struct buf *b, const void *p, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	if (n)
		memcpy(b->p + b->n, p, n);
	b->n += n;
}

static void b_u32(struct buf *b, uint32_t v)
{
	b_put(b, &v, 4);
}

static void b_u64(struct buf *b, uint64_t v)
{
	b_put(b, &v, 8);
}

static void b_zeros(struct buf *b, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = b->n + n;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	memset(b->p + b->n, 0, n);
	b->n += n;
}

/* One pair as the emitter writes it; the *_w fields, when non-zero, replace a
 * length or count on disk without changing the bytes that follow. */
struct tkv {
	const char *key;
	uint64_t key_len_w;
	uint32_t type;
	uint64_t u; /* scalar: its low type-size bytes */
	const char *s;
	uint64_t s_len_w;
	uint32_t elem;
	uint64_t n, n_w;
	const void *raw;         /* scalar array elements */
	const char *const *strs; /* string array elements */
	uint64_t str0_len_w;     /* the first string element's length */
};

struct tten {
	const char *name;
	uint32_t n_dims; /* dims written: min(n_dims, 5) */
	uint64_t dims[5];
	uint32_t type;
	uint64_t offset;
};

struct tspec {
	char magic[4];
	uint32_t version;
	uint64_t n_kv_w, n_t_w; /* non-zero: the counts written */
	struct tkv kv[10];
	size_t nkv;
	struct tten t[4];
	size_t nt;
	uint32_t align;  /* padding the emitter writes before the data */
	size_t data_len; /* bytes of the data section */
};

static unsigned char pattern(size_t i)
{
	return (unsigned char)(i * 37u + 11u);
}

static void emit(const struct tspec *s, struct buf *b)
{
	memset(b, 0, sizeof(*b));
	b_put(b, s->magic, 4);
	b_u32(b, s->version);
	b_u64(b, s->n_t_w ? s->n_t_w : s->nt);
	b_u64(b, s->n_kv_w ? s->n_kv_w : s->nkv);
	for (size_t i = 0; i < s->nkv; i++) {
		const struct tkv *kv = &s->kv[i];
		size_t esize;

		b_u64(b, kv->key_len_w ? kv->key_len_w : strlen(kv->key));
		b_put(b, kv->key, strlen(kv->key));
		b_u32(b, kv->type);
		if (kv->type == GGUF_TYPE_STRING) {
			b_u64(b, kv->s_len_w ? kv->s_len_w : strlen(kv->s));
			b_put(b, kv->s, strlen(kv->s));
		} else if (kv->type == GGUF_TYPE_ARRAY) {
			b_u32(b, kv->elem);
			b_u64(b, kv->n_w ? kv->n_w : kv->n);
			esize = gguf_type_size(kv->elem);
			if (kv->elem == GGUF_TYPE_STRING) {
				for (uint64_t j = 0; j < kv->n; j++) {
					b_u64(b, j == 0 && kv->str0_len_w ? kv->str0_len_w
					                                  : strlen(kv->strs[j]));
					b_put(b, kv->strs[j], strlen(kv->strs[j]));
				}
			} else if (esize) {
				b_put(b, kv->raw, kv->n * esize);
			}
		} else if (kv->type < GGUF_TYPE_COUNT) {
			b_put(b, &kv->u, gguf_type_size(kv->type));
		}
	}
	for (size_t i = 0; i < s->nt; i++) {
		const struct tten *t = &s->t[i];

		b_u64(b, strlen(t->name));
		b_put(b, t->name, strlen(t->name));
		b_u32(b, t->n_dims);
		for (uint32_t d = 0; d < t->n_dims && d < 5; d++)
			b_u64(b, t->dims[d]);
		b_u32(b, t->type);
		b_u64(b, t->offset);
	}
	while (b->n % s->align)
		b_put(b, "", 1);
	for (size_t i = 0; i < s->data_len; i++) {
		unsigned char c = pattern(i);

		b_put(b, &c, 1);
	}
}

static const int32_t base_ints[3] = {1, -2, 3};
static const char *const base_toks[2] = {"a", "\xc3\xa9"};

/*
 * The small valid file: 6 pairs, 3 tensors of 32 bytes each at data offsets
 * 0, 32, 64 (so the file ends with the last tensor: every cut cuts a tensor).
 */
static void base_spec(struct tspec *s)
{
	memset(s, 0, sizeof(*s));
	memcpy(s->magic, "GGUF", 4);
	s->version = 3;
	s->kv[0] = (struct tkv){
	    .key = "general.architecture", .type = GGUF_TYPE_STRING, .s = "ignis-test"};
	s->kv[1] = (struct tkv){.key = "general.name", .type = GGUF_TYPE_STRING, .s = "tiny"};
	s->kv[2] = (struct tkv){.key = "t.u32", .type = GGUF_TYPE_UINT32, .u = 7};
	s->kv[3] = (struct tkv){.key = "t.flag", .type = GGUF_TYPE_BOOL, .u = 1};
	s->kv[4] = (struct tkv){.key = "t.ints",
	                        .type = GGUF_TYPE_ARRAY,
	                        .elem = GGUF_TYPE_INT32,
	                        .n = 3,
	                        .raw = base_ints};
	s->kv[5] = (struct tkv){.key = "t.toks",
	                        .type = GGUF_TYPE_ARRAY,
	                        .elem = GGUF_TYPE_STRING,
	                        .n = 2,
	                        .strs = base_toks};
	s->nkv = 6;
	s->t[0] = (struct tten){"t.f32", 2, {4, 2}, GGUF_TENSOR_F32, 0};
	s->t[1] = (struct tten){"t.f16", 1, {16}, GGUF_TENSOR_F16, 32};
	s->t[2] = (struct tten){"t.bf16", 4, {2, 2, 2, 2}, GGUF_TENSOR_BF16, 64};
	s->nt = 3;
	s->align = 32;
	s->data_len = 96;
}

/* The same content through the writer. */
static void base_write(struct gguf_writer *w, const unsigned char *data)
{
	static const uint64_t d0[] = {4, 2}, d1[] = {16}, d2[] = {2, 2, 2, 2};

	gguf_writer_init(w);
	assert_int_equal(gguf_writer_add_str(w, "general.architecture", "ignis-test"), 0);
	assert_int_equal(gguf_writer_add_str(w, "general.name", "tiny"), 0);
	assert_int_equal(gguf_writer_add_u32(w, "t.u32", 7), 0);
	assert_int_equal(gguf_writer_add_bool(w, "t.flag", true), 0);
	assert_int_equal(gguf_writer_add_arr(w, "t.ints", GGUF_TYPE_INT32, base_ints, 3), 0);
	assert_int_equal(gguf_writer_add_arr_str(w, "t.toks", base_toks, 2), 0);
	assert_int_equal(gguf_writer_add_tensor(w, "t.f32", GGUF_TENSOR_F32, 2, d0, data), 0);
	assert_int_equal(gguf_writer_add_tensor(w, "t.f16", GGUF_TENSOR_F16, 1, d1, data + 32), 0);
	assert_int_equal(gguf_writer_add_tensor(w, "t.bf16", GGUF_TENSOR_BF16, 4, d2, data + 64),
	                 0);
}

/* Open from a heap copy of exactly `n` bytes (ASan sees any over-read). */
static int open_exact(const void *bytes, size_t n, const char *name, struct ig_errbuf *eb)
{
	struct gguf g;
	void *copy = malloc(n ? n : 1);
	int rc;

	memcpy(copy, bytes, n);
	rc = gguf_open_mem(&g, copy, n, name, eb);
	gguf_close(&g);
	free(copy);
	return rc;
}

static void test_writer_matches_emitter(void **state)
{
	struct tspec s;
	struct buf b;
	struct gguf_writer w;
	struct ig_errbuf eb = {0};
	unsigned char data[96];
	unsigned char *got;
	size_t n;
	char path[256];

	(void)state;
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = pattern(i);
	base_spec(&s);
	emit(&s, &b);
	base_write(&w, data);
	path_in(path, sizeof(path), "base.gguf");
	assert_int_equal(gguf_writer_write(&w, path, &eb), 0);
	gguf_writer_release(&w);
	got = read_bytes(path, &n);
	assert_int_equal(n, b.n);
	assert_memory_equal(got, b.p, n);
	assert_int_equal(open_exact(b.p, b.n, "base", &eb), 0);
	free(got);
	free(b.p);
	unlink(path);
}

/* ---- malformed files ----------------------------------------------------- */

static void m_none(struct tspec *s)
{
	(void)s;
}
static void m_magic(struct tspec *s)
{
	memcpy(s->magic, "GGUX", 4);
}
static void m_magic_bin(struct tspec *s)
{
	memcpy(s->magic,
	       "\x7f"
	       "ELF",
	       4);
}
static void m_version2(struct tspec *s)
{
	s->version = 2;
}
static void m_version4(struct tspec *s)
{
	s->version = 4;
}
static void m_version_be(struct tspec *s)
{
	s->version = 0x03000000u;
}
static void m_kv_count(struct tspec *s)
{
	s->n_kv_w = 1ull << 40;
}
static void m_t_count(struct tspec *s)
{
	s->n_t_w = 1ull << 40;
}
static void m_counts_sum(struct tspec *s)
{
	/* each fits alone, not together: the file is ~400 bytes */
	s->n_kv_w = 20;
	s->n_t_w = 8;
}
static void m_key_len(struct tspec *s)
{
	s->kv[0].key_len_w = 1ull << 40;
}
static void m_key_len_max(struct tspec *s)
{
	s->kv[2].key_len_w = UINT64_MAX;
}
static void m_str_len(struct tspec *s)
{
	s->kv[1].s_len_w = 1000;
}
static void m_value_type(struct tspec *s)
{
	s->kv[2].type = 13;
}
static void m_value_type_big(struct tspec *s)
{
	s->kv[2].type = 0xffffffffu;
}
static void m_arr_of_arr(struct tspec *s)
{
	s->kv[4].elem = GGUF_TYPE_ARRAY;
}
static void m_arr_elem(struct tspec *s)
{
	s->kv[4].elem = 13;
}
static void m_arr_count(struct tspec *s)
{
	s->kv[4].n_w = 1ull << 61;
}
static void m_arr_str_count(struct tspec *s)
{
	s->kv[5].n_w = 1ull << 40;
}
static void m_arr_str_len(struct tspec *s)
{
	s->kv[5].str0_len_w = 1000;
}
static void m_bool(struct tspec *s)
{
	s->kv[3].u = 2;
}
static void m_dup_key(struct tspec *s)
{
	s->kv[4].key = "general.name";
}
static void m_empty_key(struct tspec *s)
{
	s->kv[2].key = "";
}
static void m_key_utf8(struct tspec *s)
{
	s->kv[2].key = "t.\xff";
}
static void m_key_surrogate(struct tspec *s)
{
	s->kv[2].key = "t.\xed\xa0\x80";
}
static void m_dup_tensor(struct tspec *s)
{
	s->t[2].name = "t.f32";
}
static void m_empty_name(struct tspec *s)
{
	s->t[1].name = "";
}
static void m_ndims0(struct tspec *s)
{
	s->t[0].n_dims = 0;
}
static void m_ndims5(struct tspec *s)
{
	s->t[1].n_dims = 5;
}
static void m_zero_dim(struct tspec *s)
{
	s->t[0].dims[1] = 0;
}
static void m_dims_overflow(struct tspec *s)
{
	s->t[0].n_dims = 3;
	s->t[0].dims[0] = 1ull << 32;
	s->t[0].dims[1] = 1ull << 32;
	s->t[0].dims[2] = 2;
}
static void m_bytes_overflow(struct tspec *s)
{
	s->t[0].dims[0] = 1ull << 31; /* 2^62 elements of 4 bytes */
	s->t[0].dims[1] = 1ull << 31;
}
static void m_type_q4_1(struct tspec *s)
{
	s->t[1].type = 3;
}
static void m_part_block(struct tspec *s)
{
	s->t[1].type = 2; /* Q4_0: blocks of 32, and the row is 16 */
}
static void m_type_unknown(struct tspec *s)
{
	s->t[1].type = 200;
}
static void m_misaligned(struct tspec *s)
{
	s->t[1].offset = 40;
}
static void m_short(struct tspec *s)
{
	s->data_len -= 8;
}
static void m_offset_far(struct tspec *s)
{
	s->t[2].offset = 1ull << 40;
}
static void m_offset_max(struct tspec *s)
{
	s->t[2].offset = UINT64_MAX & ~31ull;
}
static void m_overlap_same(struct tspec *s)
{
	s->t[1].offset = 0;
}
static void m_overlap_tail(struct tspec *s)
{
	s->t[1].dims[0] = 32; /* 64 bytes at 32: into t.bf16 at 64 */
}
static void m_alignment_48(struct tspec *s)
{
	s->kv[s->nkv++] =
	    (struct tkv){.key = GGUF_KEY_ALIGNMENT, .type = GGUF_TYPE_UINT32, .u = 48};
}
static void m_alignment_0(struct tspec *s)
{
	s->kv[s->nkv++] = (struct tkv){.key = GGUF_KEY_ALIGNMENT, .type = GGUF_TYPE_UINT32, .u = 0};
}
static void m_alignment_u64(struct tspec *s)
{
	s->kv[s->nkv++] =
	    (struct tkv){.key = GGUF_KEY_ALIGNMENT, .type = GGUF_TYPE_UINT64, .u = 32};
}
static void m_alignment_64(struct tspec *s)
{
	s->kv[s->nkv++] =
	    (struct tkv){.key = GGUF_KEY_ALIGNMENT, .type = GGUF_TYPE_UINT32, .u = 64};
	s->align = 64;
	s->t[1].offset = 64;
	s->t[2].offset = 128;
	s->data_len = 160;
}
static void m_alignment_64_misaligned(struct tspec *s)
{
	m_alignment_64(s);
	s->t[1].offset = 32; /* fine at 32, not at 64 */
}
static void m_trailing(struct tspec *s)
{
	s->data_len += 5;
}
static void m_gap(struct tspec *s)
{
	s->t[2].offset = 96;
	s->data_len = 128;
}
static void m_no_tensors(struct tspec *s)
{
	s->nt = 0;
	s->data_len = 0;
}

struct mrow {
	const char *name;
	void (*mut)(struct tspec *s);
	int want;
	const char *words[3];
};

static const struct mrow mrows[] = {
    {"the valid file", m_none, IG_E_OK, {0}},
    {"trailing bytes after the last tensor", m_trailing, IG_E_OK, {0}},
    {"a gap between tensors", m_gap, IG_E_OK, {0}},
    {"no tensors", m_no_tensors, IG_E_OK, {0}},
    {"general.alignment 64", m_alignment_64, IG_E_OK, {0}},
    {"wrong magic", m_magic, IG_E_INVAL, {"not a GGUF file", "'GGUX'", "47 47 55 58"}},
    {"an ELF file", m_magic_bin, IG_E_INVAL, {"not a GGUF file", "'\\x7fELF'"}},
    {"version 2", m_version2, IG_E_INVAL, {"version 2 ", "only version 3"}},
    {"version 4", m_version4, IG_E_INVAL, {"version 4 ", "only version 3"}},
    {"big-endian version", m_version_be, IG_E_INVAL, {"version 50331648", "big-endian"}},
    {"kv count 2^40", m_kv_count, IG_E_INVAL, {"truncated", "kv count 1099511627776"}},
    {"tensor count 2^40", m_t_count, IG_E_INVAL, {"truncated", "tensor count 1099511627776"}},
    {"counts that fit alone, not together",
     m_counts_sum,
     IG_E_INVAL,
     {"truncated", "20 pairs and 8 tensor infos"}},
    {"key length past the end",
     m_key_len,
     IG_E_INVAL,
     {"truncated", "kv 0", "key at byte 32 claims 1099511627776 bytes"}},
    {"key length 2^64-1", m_key_len_max, IG_E_INVAL, {"truncated", "kv 2", "key"}},
    {"string length past the end",
     m_str_len,
     IG_E_INVAL,
     {"truncated", "kv 1 'general.name'", "string at byte"}},
    {"unknown value type 13",
     m_value_type,
     IG_E_INVAL,
     {"'t.u32'", "unknown value type 13", "0..12"}},
    {"value type 2^32-1", m_value_type_big, IG_E_INVAL, {"unknown value type 4294967295"}},
    {"array of arrays", m_arr_of_arr, IG_E_INVAL, {"'t.ints'", "array of arrays"}},
    {"array of element type 13", m_arr_elem, IG_E_INVAL, {"'t.ints'", "unknown element type 13"}},
    {"array count past the end",
     m_arr_count,
     IG_E_INVAL,
     {"truncated", "'t.ints'", "elements of INT32"}},
    {"string array count past the end",
     m_arr_str_count,
     IG_E_INVAL,
     {"truncated", "'t.toks'", "1099511627776 strings"}},
    {"string element length past the end",
     m_arr_str_len,
     IG_E_INVAL,
     {"truncated", "'t.toks'", "string 0 at byte"}},
    {"BOOL 2", m_bool, IG_E_INVAL, {"'t.flag'", "BOOL value is 2", "0 or 1"}},
    {"duplicate key", m_dup_key, IG_E_INVAL, {"duplicate key 'general.name'"}},
    {"empty key", m_empty_key, IG_E_INVAL, {"kv 2 has an empty key"}},
    {"key not UTF-8", m_key_utf8, IG_E_INVAL, {"kv 2 key 't.\\xff'", "not valid UTF-8"}},
    {"key with a surrogate", m_key_surrogate, IG_E_INVAL, {"kv 2 key", "not valid UTF-8"}},
    {"duplicate tensor", m_dup_tensor, IG_E_INVAL, {"duplicate tensor name 't.f32'"}},
    {"empty tensor name", m_empty_name, IG_E_INVAL, {"tensor 1 has an empty name"}},
    {"n_dims 0", m_ndims0, IG_E_INVAL, {"tensor 't.f32'", "n_dims 0", "1 to 4"}},
    {"n_dims 5", m_ndims5, IG_E_INVAL, {"tensor 't.f16'", "n_dims 5", "1 to 4"}},
    {"a zero dim", m_zero_dim, IG_E_INVAL, {"tensor 't.f32'", "dim 1 equal to 0"}},
    {"dims whose product overflows",
     m_dims_overflow,
     IG_E_INVAL,
     {"tensor 't.f32'", "element count", "overflows"}},
    {"a byte count that overflows",
     m_bytes_overflow,
     IG_E_INVAL,
     {"tensor 't.f32'", "4611686018427387904 elements of F32", "overflow"}},
    {"type Q4_1",
     m_type_q4_1,
     IG_E_INVAL,
     {"tensor 't.f16'", "type Q4_1 (3)", "accepted: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K"}},
    {"a row that is not whole blocks",
     m_part_block,
     IG_E_INVAL,
     {"tensor 't.f16'", "Q4_0 with rows of 16 elements", "whole blocks of 32"}},
    {"type 200", m_type_unknown, IG_E_INVAL, {"tensor 't.f16'", "type unknown (200)"}},
    {"misaligned offset",
     m_misaligned,
     IG_E_INVAL,
     {"tensor 't.f16'", "offset 40", "not a multiple of the alignment 32"}},
    {"misaligned at general.alignment 64",
     m_alignment_64_misaligned,
     IG_E_INVAL,
     {"tensor 't.f16'", "offset 32", "alignment 64"}},
    {"tensor past the end", m_short, IG_E_INVAL, {"truncated", "tensor 't.bf16'", "8 bytes short"}},
    {"offset 2^40", m_offset_far, IG_E_INVAL, {"truncated", "tensor 't.bf16'", "bytes short"}},
    {"offset near 2^64",
     m_offset_max,
     IG_E_INVAL,
     {"truncated", "tensor 't.bf16'", "past the end of the file"}},
    {"tensors at the same offset",
     m_overlap_same,
     IG_E_INVAL,
     {"tensors 't.f32' (data bytes 0..32)", "'t.f16' (data bytes 0..32)", "overlap"}},
    {"a tensor running into the next",
     m_overlap_tail,
     IG_E_INVAL,
     {"'t.f16' (data bytes 32..96)", "'t.bf16' (data bytes 64..96)", "overlap"}},
    {"general.alignment 48",
     m_alignment_48,
     IG_E_INVAL,
     {"general.alignment is 48", "power of two"}},
    {"general.alignment 0", m_alignment_0, IG_E_INVAL, {"general.alignment is 0", "power of two"}},
    {"general.alignment as UINT64",
     m_alignment_u64,
     IG_E_INVAL,
     {"general.alignment has type UINT64", "UINT32"}},
};

static void test_malformed(void **state)
{
	char path[256];
	int failures = 0;

	(void)state;
	path_in(path, sizeof(path), "malformed.gguf");
	for (size_t i = 0; i < sizeof(mrows) / sizeof(mrows[0]); i++) {
		const struct mrow *r = &mrows[i];
		struct ig_errbuf eb_file = {0}, eb_mem = {0};
		struct tspec s;
		struct buf b;
		struct gguf g;
		int rc_file, rc_mem;

		base_spec(&s);
		r->mut(&s);
		emit(&s, &b);
		write_bytes(path, b.p, b.n);
		rc_file = gguf_open(&g, path, &eb_file);
		gguf_close(&g);
		rc_mem = open_exact(b.p, b.n, path, &eb_mem);
		free(b.p);
		if (rc_file != r->want || rc_mem != r->want) {
			print_error("%s: want %s, got %s (file) %s (mem): %s\n", r->name,
			            ig_err_name(r->want), ig_err_name(rc_file), ig_err_name(rc_mem),
			            eb_file.msg);
			failures++;
			continue;
		}
		if (r->want == IG_E_OK)
			continue;
		if (strcmp(eb_file.msg, eb_mem.msg) != 0) {
			print_error("%s: messages differ:\n  %s\n  %s\n", r->name, eb_file.msg,
			            eb_mem.msg);
			failures++;
		}
		if (strncmp(eb_file.msg, "'", 1) != 0 || !strstr(eb_file.msg, path)) {
			print_error("%s: the message does not name the file: %s\n", r->name,
			            eb_file.msg);
			failures++;
		}
		for (size_t w = 0; w < 3 && r->words[w]; w++) {
			if (!strstr(eb_file.msg, r->words[w])) {
				print_error("%s: '%s' missing from: %s\n", r->name, r->words[w],
				            eb_file.msg);
				failures++;
			}
		}
	}
	unlink(path);
	assert_int_equal(failures, 0);
}

/* Every prefix of the small valid file is refused, through both paths. */
static void test_truncated_everywhere(void **state)
{
	struct tspec s;
	struct buf b;
	char path[256];
	int failures = 0;

	(void)state;
	base_spec(&s);
	emit(&s, &b);
	path_in(path, sizeof(path), "cut.gguf");
	for (size_t n = 0; n < b.n; n++) {
		struct ig_errbuf eb = {0}, eb2 = {0};
		struct gguf g;
		int rc = open_exact(b.p, n, path, &eb), rc2;

		write_bytes(path, b.p, n);
		rc2 = gguf_open(&g, path, &eb2);
		gguf_close(&g);
		if (rc != IG_E_INVAL || rc2 != IG_E_INVAL ||
		    !strstr(eb.msg, n ? "truncated" : "empty file") || strcmp(eb.msg, eb2.msg)) {
			print_error("cut at %zu of %zu: %s %s: %s | %s\n", n, b.n, ig_err_name(rc),
			            ig_err_name(rc2), eb.msg, eb2.msg);
			failures++;
		}
	}
	assert_int_equal(open_exact(b.p, b.n, path, NULL), 0);
	unlink(path);
	free(b.p);
	assert_int_equal(failures, 0);
}

static uint64_t rng(uint64_t *st)
{
	/* splitmix64 */
	uint64_t z = (*st += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/*
 * Seeded random corruptions of the small file (IGNIS_SEED=n repeats a run):
 * bytes flipped, lengths and counts replaced by small or huge numbers. Each
 * is refused with IG_E_INVAL or, when it still makes a valid file, opens into
 * a consistent struct gguf. Never a crash or a read outside the image (ASan).
 */
static void test_random_corruptions(void **state)
{
	const char *env = getenv("IGNIS_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
	uint64_t st = seed;
	struct tspec s;
	struct buf b;
	int opened = 0;

	(void)state;
	print_message("test_random_corruptions: IGNIS_SEED=%" PRIu64 "\n", seed);
	base_spec(&s);
	emit(&s, &b);
	for (int iter = 0; iter < 20000; iter++) {
		unsigned char *img = malloc(b.n);
		size_t n = b.n;
		struct ig_errbuf eb = {0};
		struct gguf g;
		int k = 1 + (int)(rng(&st) % 4), rc;

		memcpy(img, b.p, b.n);
		for (int j = 0; j < k; j++) {
			size_t at = (size_t)(rng(&st) % n);
			uint64_t v;

			switch (rng(&st) % 4) {
			case 0:
				img[at] ^= (unsigned char)(1u << (rng(&st) % 8));
				break;
			case 1:
				img[at] = (unsigned char)rng(&st);
				break;
			case 2: /* a small number where a length or count may be */
				v = rng(&st) % 600;
				if (at + 8 <= n)
					memcpy(img + at, &v, 8);
				break;
			default: /* a huge one */
				v = rng(&st) | (1ull << 63) >> (rng(&st) % 40);
				if (at + 8 <= n)
					memcpy(img + at, &v, 8);
				break;
			}
		}
		if (rng(&st) % 8 == 0)
			n = (size_t)(rng(&st) % n); /* and cut */
		rc = gguf_open_mem(&g, img, n, "random", &eb);
		if (rc != IG_E_OK && rc != IG_E_INVAL)
			fail_msg("seed %" PRIu64 " iteration %d: %s: %s", seed, iter,
			         ig_err_name(rc), eb.msg);
		if (rc == IG_E_OK) {
			opened++;
			for (size_t i = 0; i < g.n_tensors; i++) {
				const struct gguf_tensor *t = &g.tensors[i];
				const unsigned char *d = t->data;

				assert_ptr_equal(gguf_find_tensor(&g, t->name), t);
				assert_true(d >= img && d + t->n_bytes <= img + n);
			}
			for (size_t i = 0; i < g.n_kv; i++)
				assert_ptr_equal(gguf_find_kv(&g, g.kvs[i].key), &g.kvs[i]);
		}
		gguf_close(&g);
		free(img);
	}
	print_message("test_random_corruptions: %d of 20000 still opened\n", opened);
	free(b.p);
}

/*
 * Counts past the container's stated maxima, in files large enough to hold
 * them (so that the check against the file's size passes): each refused
 * naming the count and the most accepted, by the check on the count read
 * from the header, before any pair, tensor or element is read or allocated
 * (issue 26, item 8). The limits themselves are accepted. The values are
 * written out rather than taken from gguf.h, as the file states them.
 */
struct crow {
	const char *name;
	uint64_t n_tensors, n_kv; /* the header's counts */
	size_t fill;              /* zero bytes after the header (no pair given) */
	const char *key;          /* one ARRAY pair `key`: `n` elements of `elem`, all zero */
	uint32_t elem;
	uint64_t n;
	int want;
	const char *words[3];
};

static const struct crow crows[] = {
    {"65537 pairs",
     0,
     65537,
     65537 * 13,
     NULL,
     0,
     0,
     IG_E_INVAL,
     {"kv count 65537", "accepted: up to 65536"}},
    {"2^20 + 1 tensor infos",
     1048577,
     0,
     1048577 * 32,
     NULL,
     0,
     0,
     IG_E_INVAL,
     {"tensor count 1048577", "accepted: up to 1048576"}},
    {"an array of 2^22 + 1 bytes",
     0,
     1,
     0,
     "t.bytes",
     GGUF_TYPE_UINT8,
     4194305,
     IG_E_INVAL,
     {"kv 0 't.bytes'", "4194305 elements", "accepted: up to 4194304"}},
    {"an array of 2^22 + 1 strings",
     0,
     1,
     0,
     "tokenizer.ggml.tokens",
     GGUF_TYPE_STRING,
     4194305,
     IG_E_INVAL,
     {"kv 0 'tokenizer.ggml.tokens'", "4194305 elements", "accepted: up to 4194304"}},
    {"an array of 2^22 bytes", 0, 1, 0, "t.bytes", GGUF_TYPE_UINT8, 4194304, IG_E_OK, {0}},
};

static void test_counts_bounded(void **state)
{
	char path[256];
	int failures = 0;

	(void)state;
	path_in(path, sizeof(path), "counts.gguf");
	for (size_t i = 0; i < sizeof(crows) / sizeof(crows[0]); i++) {
		const struct crow *r = &crows[i];
		struct ig_errbuf eb = {0}, eb_mem = {0};
		struct buf b = {0};
		struct gguf g;
		int rc, rc_mem;

		b_put(&b, "GGUF", 4);
		b_u32(&b, 3);
		b_u64(&b, r->n_tensors);
		b_u64(&b, r->n_kv);
		if (r->key) {
			/* a string element: its 8-byte length, 0 */
			size_t esize = r->elem == GGUF_TYPE_STRING ? 8 : gguf_type_size(r->elem);

			b_u64(&b, strlen(r->key));
			b_put(&b, r->key, strlen(r->key));
			b_u32(&b, GGUF_TYPE_ARRAY);
			b_u32(&b, r->elem);
			b_u64(&b, r->n);
			b_zeros(&b, (size_t)r->n * esize);
		} else {
			b_zeros(&b, r->fill);
		}
		write_bytes(path, b.p, b.n);
		rc = gguf_open(&g, path, &eb);
		gguf_close(&g);
		rc_mem = open_exact(b.p, b.n, path, &eb_mem);
		free(b.p);
		if (rc != r->want || rc_mem != r->want) {
			print_error("%s: want %s, got %s (file) %s (mem): %s\n", r->name,
			            ig_err_name(r->want), ig_err_name(rc), ig_err_name(rc_mem),
			            eb.msg);
			failures++;
			continue;
		}
		for (size_t w = 0; w < 3 && r->words[w]; w++)
			if (!strstr(eb.msg, r->words[w]) || !strstr(eb_mem.msg, r->words[w])) {
				print_error("%s: '%s' missing from: %s\n", r->name, r->words[w],
				            eb.msg);
				failures++;
			}
		if (r->want != IG_E_OK && !strstr(eb.msg, path)) {
			print_error("%s: the message does not name the file: %s\n", r->name,
			            eb.msg);
			failures++;
		}
	}
	unlink(path);
	assert_int_equal(failures, 0);
}

static void test_open_failures(void **state)
{
	struct ig_errbuf eb = {0};
	struct gguf g;
	char path[256];

	(void)state;
	path_in(path, sizeof(path), "absent.gguf");
	assert_int_equal(gguf_open(&g, path, &eb), IG_E_IO);
	assert_non_null(strstr(eb.msg, path));
	assert_non_null(strstr(eb.msg, "No such file"));
	gguf_close(&g); /* harmless after a failed open */
	gguf_close(&g); /* and idempotent */

	assert_int_equal(gguf_open(&g, tmpdir, &eb), IG_E_IO);
	assert_non_null(strstr(eb.msg, "not a regular file"));
}

/* ---- the round trip ------------------------------------------------------ */

static const uint8_t rt_u8[] = {0, 1, 255};
static const int8_t rt_i8[] = {-128, 0, 127};
static const uint16_t rt_u16[] = {0, 65535};
static const int16_t rt_i16[] = {-32768, 32767};
static const uint32_t rt_u32[] = {0, 1, 4294967295u};
static const int32_t rt_i32[] = {INT32_MIN, -1, INT32_MAX};
static const float rt_f32[] = {0.5f, -1e30f, 3.25f};
static const bool rt_bool[] = {true, false, true};
static const uint64_t rt_u64[] = {UINT64_MAX, 0};
static const int64_t rt_i64[] = {INT64_MIN, INT64_MAX};
static const double rt_f64[] = {1e300, -0.125};
static const char *const rt_strs[] = {"", "hello", "\xe2\x82\xac"};

static const struct {
	enum gguf_type t;
	const void *p;
	size_t n;
} rt_arrs[] = {
    {GGUF_TYPE_UINT8, rt_u8, 3},    {GGUF_TYPE_INT8, rt_i8, 3},     {GGUF_TYPE_UINT16, rt_u16, 2},
    {GGUF_TYPE_INT16, rt_i16, 2},   {GGUF_TYPE_UINT32, rt_u32, 3},  {GGUF_TYPE_INT32, rt_i32, 3},
    {GGUF_TYPE_FLOAT32, rt_f32, 3}, {GGUF_TYPE_BOOL, rt_bool, 3},   {GGUF_TYPE_UINT64, rt_u64, 2},
    {GGUF_TYPE_INT64, rt_i64, 2},   {GGUF_TYPE_FLOAT64, rt_f64, 2},
};

static const struct {
	const char *name;
	uint32_t type;
	uint32_t n_dims;
	uint64_t dims[4];
} rt_tensors[] = {
    {"tok_embd.weight", GGUF_TENSOR_BF16, 2, {7, 3}},
    {"blk.0.attn_norm.weight", GGUF_TENSOR_F32, 1, {5}},
    {"blk.0.ffn_up.weight", GGUF_TENSOR_F16, 3, {3, 2, 3}},
    {"blk.0.ffn_gate_exps.weight", GGUF_TENSOR_BF16, 4, {2, 1, 3, 2}},
    {"output.weight", GGUF_TENSOR_F32, 2, {1, 1}},
};

static void roundtrip(uint32_t alignment)
{
	struct gguf_writer w;
	struct ig_errbuf eb = {0};
	struct gguf g;
	struct gguf_str str;
	struct gguf_arr arr;
	const struct gguf_kv *kv;
	unsigned char *data[5];
	size_t nt = sizeof(rt_tensors) / sizeof(rt_tensors[0]);
	size_t na = sizeof(rt_arrs) / sizeof(rt_arrs[0]);
	char path[256], key[64];
	struct stat st;
	uint32_t u32;
	uint64_t u64;
	float f32;
	bool b;

	path_in(path, sizeof(path), "roundtrip.gguf");
	gguf_writer_init(&w);
	assert_int_equal(gguf_writer_add_u8(&w, "s.u8", 200), 0);
	assert_int_equal(gguf_writer_add_i8(&w, "s.i8", -100), 0);
	assert_int_equal(gguf_writer_add_u16(&w, "s.u16", 60000), 0);
	assert_int_equal(gguf_writer_add_i16(&w, "s.i16", -30000), 0);
	assert_int_equal(gguf_writer_add_u32(&w, "s.u32", 4000000000u), 0);
	assert_int_equal(gguf_writer_add_i32(&w, "s.i32", -2000000000), 0);
	assert_int_equal(gguf_writer_add_f32(&w, "s.f32", 1.5f), 0);
	assert_int_equal(gguf_writer_add_bool(&w, "s.bool", true), 0);
	assert_int_equal(gguf_writer_add_str(&w, "s.str", "qwen3\xe2\x82\xac"), 0);
	assert_int_equal(gguf_writer_add_strn(&w, "s.strn", "a\0b\xff", 4), 0);
	assert_int_equal(gguf_writer_add_str(&w, "s.empty", ""), 0);
	assert_int_equal(gguf_writer_add_u64(&w, "s.u64", UINT64_MAX - 1), 0);
	assert_int_equal(gguf_writer_add_i64(&w, "s.i64", INT64_MIN + 1), 0);
	assert_int_equal(gguf_writer_add_f64(&w, "s.f64", -2.5e-300), 0);
	if (alignment != GGUF_DEFAULT_ALIGNMENT)
		assert_int_equal(gguf_writer_add_u32(&w, GGUF_KEY_ALIGNMENT, alignment), 0);
	for (size_t i = 0; i < na; i++) {
		snprintf(key, sizeof(key), "a.%s", gguf_type_name(rt_arrs[i].t));
		assert_int_equal(
		    gguf_writer_add_arr(&w, key, rt_arrs[i].t, rt_arrs[i].p, rt_arrs[i].n), 0);
	}
	assert_int_equal(gguf_writer_add_arr_str(&w, "a.STRING", rt_strs, 3), 0);
	assert_int_equal(gguf_writer_add_arr(&w, "a.empty", GGUF_TYPE_UINT32, NULL, 0), 0);
	assert_int_equal(gguf_writer_add_arr_str(&w, "a.empty_str", NULL, 0), 0);
	for (size_t i = 0; i < nt; i++) {
		uint64_t bytes = elem_bytes(rt_tensors[i].type);

		for (uint32_t d = 0; d < rt_tensors[i].n_dims; d++)
			bytes *= rt_tensors[i].dims[d];
		data[i] = malloc(bytes);
		for (uint64_t j = 0; j < bytes; j++)
			data[i][j] = pattern(j + 1000 * i);
		assert_int_equal(gguf_writer_add_tensor(&w, rt_tensors[i].name, rt_tensors[i].type,
		                                        rt_tensors[i].n_dims, rt_tensors[i].dims,
		                                        data[i]),
		                 0);
	}
	assert_int_equal(gguf_writer_write(&w, path, &eb), 0);
	gguf_writer_release(&w);
	gguf_writer_release(&w); /* idempotent */

	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0644);
	assert_int_equal(st.st_size % alignment, 0);
	assert_int_equal(dir_entries(), 1); /* no temporary file left */

	if (gguf_open(&g, path, &eb))
		fail_msg("%s", eb.msg);
	assert_int_equal(g.version, 3);
	assert_int_equal(g.alignment, alignment);
	assert_int_equal(g.data_offset % alignment, 0);
	assert_int_equal(g.n_kv, 14 + (alignment != GGUF_DEFAULT_ALIGNMENT) + na + 3);

	kv = gguf_find_kv(&g, "s.u8");
	assert_non_null(kv);
	assert_int_equal(kv->type, GGUF_TYPE_UINT8);
	assert_int_equal(kv->v.u8, 200);
	assert_string_equal(kv->key, "s.u8");
	assert_ptr_equal(gguf_kv_at(&g, 0), kv); /* file order */
	assert_int_equal(gguf_find_kv(&g, "s.i8")->v.i8, -100);
	assert_int_equal(gguf_find_kv(&g, "s.u16")->v.u16, 60000);
	assert_int_equal(gguf_find_kv(&g, "s.i16")->v.i16, -30000);
	assert_int_equal(gguf_find_kv(&g, "s.i32")->v.i32, -2000000000);
	assert_true(gguf_find_kv(&g, "s.i64")->v.i64 == INT64_MIN + 1);
	assert_true(gguf_find_kv(&g, "s.f64")->v.f64 == -2.5e-300);
	assert_int_equal(gguf_get_u32(&g, "s.u32", &u32, &eb), 0);
	assert_int_equal(u32, 4000000000u);
	assert_int_equal(gguf_get_u64(&g, "s.u64", &u64, &eb), 0);
	assert_true(u64 == UINT64_MAX - 1);
	assert_int_equal(gguf_get_f32(&g, "s.f32", &f32, &eb), 0);
	assert_true(f32 == 1.5f);
	assert_int_equal(gguf_get_bool(&g, "s.bool", &b, &eb), 0);
	assert_true(b);
	assert_int_equal(gguf_get_str(&g, "s.str", &str, &eb), 0);
	assert_int_equal(str.len, 8);
	assert_memory_equal(str.ptr, "qwen3\xe2\x82\xac", 8);
	assert_int_equal(gguf_get_str(&g, "s.strn", &str, &eb), 0);
	assert_int_equal(str.len, 4);
	assert_memory_equal(str.ptr, "a\0b\xff", 4);
	assert_int_equal(gguf_get_str(&g, "s.empty", &str, &eb), 0);
	assert_int_equal(str.len, 0);
	if (alignment != GGUF_DEFAULT_ALIGNMENT) {
		assert_int_equal(gguf_get_u32(&g, GGUF_KEY_ALIGNMENT, &u32, &eb), 0);
		assert_int_equal(u32, alignment);
	}
	for (size_t i = 0; i < na; i++) {
		snprintf(key, sizeof(key), "a.%s", gguf_type_name(rt_arrs[i].t));
		assert_int_equal(gguf_get_arr(&g, key, rt_arrs[i].t, &arr, &eb), 0);
		assert_int_equal(arr.type, rt_arrs[i].t);
		assert_int_equal(arr.n, rt_arrs[i].n);
		assert_null(arr.strs);
		assert_memory_equal(arr.data, rt_arrs[i].p,
		                    rt_arrs[i].n * gguf_type_size(arr.type));
	}
	assert_int_equal(gguf_get_arr(&g, "a.STRING", GGUF_TYPE_STRING, &arr, &eb), 0);
	assert_int_equal(arr.n, 3);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(arr.strs[i].len, strlen(rt_strs[i]));
		assert_memory_equal(arr.strs[i].ptr, rt_strs[i], arr.strs[i].len);
		assert_int_equal(gguf_get_arr_str(&g, "a.STRING", i, &str, &eb), 0);
		assert_ptr_equal(str.ptr, arr.strs[i].ptr);
	}
	assert_int_equal(gguf_get_arr(&g, "a.empty", GGUF_TYPE_UINT32, &arr, &eb), 0);
	assert_int_equal(arr.n, 0);
	assert_int_equal(gguf_get_arr(&g, "a.empty_str", GGUF_TYPE_STRING, &arr, &eb), 0);
	assert_int_equal(arr.n, 0);

	assert_int_equal(g.n_tensors, nt);
	for (size_t i = 0; i < nt; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(&g, i);
		uint64_t ne = 1;

		assert_non_null(t);
		assert_ptr_equal(gguf_find_tensor(&g, rt_tensors[i].name), t);
		assert_string_equal(t->name, rt_tensors[i].name);
		assert_int_equal(t->name_len, strlen(rt_tensors[i].name));
		assert_int_equal(t->type, rt_tensors[i].type);
		assert_int_equal(t->n_dims, rt_tensors[i].n_dims);
		for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
			uint64_t want = d < t->n_dims ? rt_tensors[i].dims[d] : 1;

			assert_int_equal(t->dims[d], want);
			ne *= want;
		}
		assert_int_equal(t->n_elements, ne);
		assert_int_equal(t->n_bytes, ne * elem_bytes(t->type));
		assert_int_equal(t->offset % alignment, 0);
		assert_int_equal(((const unsigned char *)t->data - g.base) % alignment, 0);
		assert_int_equal((uintptr_t)t->data % alignment,
		                 0); /* the mapping is page-aligned */
		assert_memory_equal(t->data, data[i], t->n_bytes);
		free(data[i]);
	}
	assert_null(gguf_tensor_at(&g, nt));
	assert_null(gguf_kv_at(&g, g.n_kv));
	assert_null(gguf_find_tensor(&g, "missing"));
	assert_null(gguf_find_tensor(&g, "tok_embd"));
	assert_null(gguf_find_kv(&g, "s.u"));
	assert_null(gguf_find_kv(&g, NULL));
	gguf_close(&g);
	gguf_close(&g);
	unlink(path);
}

static void test_roundtrip(void **state)
{
	(void)state;
	roundtrip(GGUF_DEFAULT_ALIGNMENT);
	roundtrip(64);
	roundtrip(4096);
}

/* ---- getters ------------------------------------------------------------- */

static void test_getters(void **state)
{
	struct tspec s;
	struct buf b;
	struct gguf g;
	struct ig_errbuf eb = {0};
	struct gguf_str str = {"untouched", 9};
	struct gguf_arr arr;
	uint32_t u32 = 99;
	uint64_t u64 = 99;
	float f32 = 9.0f;
	bool flag = false;

	(void)state;
	base_spec(&s);
	emit(&s, &b);
	assert_int_equal(gguf_open_mem(&g, b.p, b.n, "mem.gguf", &eb), 0);
	assert_string_equal(g.path, "mem.gguf");

	assert_int_equal(gguf_get_u32(&g, "absent", &u32, &eb), IG_E_NOTFOUND);
	assert_non_null(strstr(eb.msg, "no key 'absent'"));
	assert_non_null(strstr(eb.msg, "'mem.gguf'"));
	assert_int_equal(gguf_get_u32(&g, "general.name", &u32, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "key 'general.name' has type STRING, wanted UINT32"));
	assert_int_equal(u32, 99);
	assert_int_equal(gguf_get_u64(&g, "t.u32", &u64, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "key 't.u32' has type UINT32, wanted UINT64"));
	assert_int_equal(u64, 99);
	assert_int_equal(gguf_get_f32(&g, "t.flag", &f32, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "has type BOOL, wanted FLOAT32"));
	assert_int_equal(gguf_get_bool(&g, "t.u32", &flag, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "has type UINT32, wanted BOOL"));
	assert_int_equal(gguf_get_str(&g, "t.ints", &str, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "key 't.ints' has type ARRAY, wanted STRING"));
	assert_int_equal(str.len, 9);
	assert_int_equal(gguf_get_arr(&g, "t.u32", GGUF_TYPE_INT32, &arr, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "key 't.u32' has type UINT32, wanted ARRAY of INT32"));
	assert_int_equal(gguf_get_arr(&g, "t.ints", GGUF_TYPE_FLOAT32, &arr, &eb), IG_E_INVAL);
	assert_non_null(
	    strstr(eb.msg, "key 't.ints' has type ARRAY of INT32, wanted ARRAY of FLOAT32"));
	assert_int_equal(gguf_get_arr(&g, "absent", GGUF_TYPE_INT32, &arr, &eb), IG_E_NOTFOUND);
	assert_int_equal(gguf_get_arr_str(&g, "t.toks", 2, &str, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "index 2 is past the end of 't.toks' (2 strings)"));
	assert_int_equal(gguf_get_arr_str(&g, "t.ints", 0, &str, &eb), IG_E_INVAL);

	assert_int_equal(gguf_get_u32(&g, "t.u32", &u32, NULL), 0);
	assert_int_equal(u32, 7);
	assert_int_equal(gguf_get_bool(&g, "t.flag", &flag, NULL), 0);
	assert_true(flag);
	assert_int_equal(gguf_get_arr(&g, "t.ints", GGUF_TYPE_INT32, &arr, NULL), 0);
	assert_int_equal(arr.n, 3);
	assert_memory_equal(arr.data, base_ints, sizeof(base_ints));
	assert_int_equal(gguf_get_arr_str(&g, "t.toks", 1, &str, NULL), 0);
	assert_int_equal(str.len, 2);
	assert_memory_equal(str.ptr, "\xc3\xa9", 2);
	/* views point into the caller's image */
	assert_true((const unsigned char *)str.ptr > b.p &&
	            (const unsigned char *)str.ptr < b.p + b.n);
	assert_ptr_equal(gguf_find_tensor(&g, "t.bf16")->data, b.p + g.data_offset + 64);
	assert_int_equal(g.data_offset % 32, 0);
	gguf_close(&g);
	free(b.p);
}

/* ---- writer refusals ----------------------------------------------------- */

static const float wdata[64];

static int w_dup_key(struct gguf_writer *w)
{
	gguf_writer_add_u32(w, "k", 1);
	return gguf_writer_add_str(w, "k", "again");
}
static int w_dup_tensor(struct gguf_writer *w)
{
	uint64_t d[] = {4};

	gguf_writer_add_tensor(w, "t", GGUF_TENSOR_F32, 1, d, wdata);
	return gguf_writer_add_tensor(w, "t", GGUF_TENSOR_F16, 1, d, wdata);
}
static int w_align_48(struct gguf_writer *w)
{
	return gguf_writer_add_u32(w, GGUF_KEY_ALIGNMENT, 48);
}
static int w_align_0(struct gguf_writer *w)
{
	return gguf_writer_add_u32(w, GGUF_KEY_ALIGNMENT, 0);
}
static int w_align_u64(struct gguf_writer *w)
{
	return gguf_writer_add_u64(w, GGUF_KEY_ALIGNMENT, 32);
}
static int w_align_str(struct gguf_writer *w)
{
	return gguf_writer_add_str(w, GGUF_KEY_ALIGNMENT, "32");
}
static int w_q4_1(struct gguf_writer *w)
{
	uint64_t d[] = {32};

	return gguf_writer_add_tensor(w, "q", 3, 1, d, wdata);
}
static int w_part_block(struct gguf_writer *w)
{
	uint64_t d[] = {128, 2};

	return gguf_writer_add_tensor(w, "q", GGUF_TENSOR_Q6_K, 2, d, wdata);
}
static int w_ndims0(struct gguf_writer *w)
{
	uint64_t d[] = {4};

	return gguf_writer_add_tensor(w, "t", GGUF_TENSOR_F32, 0, d, wdata);
}
static int w_ndims5(struct gguf_writer *w)
{
	uint64_t d[] = {1, 1, 1, 1, 1};

	return gguf_writer_add_tensor(w, "t", GGUF_TENSOR_F32, 5, d, wdata);
}
static int w_zero_dim(struct gguf_writer *w)
{
	uint64_t d[] = {4, 0};

	return gguf_writer_add_tensor(w, "t", GGUF_TENSOR_F32, 2, d, wdata);
}
static int w_overflow(struct gguf_writer *w)
{
	uint64_t d[] = {1ull << 32, 1ull << 32};

	return gguf_writer_add_tensor(w, "t", GGUF_TENSOR_F32, 2, d, wdata);
}
static int w_null_data(struct gguf_writer *w)
{
	uint64_t d[] = {4};

	return gguf_writer_add_tensor(w, "t", GGUF_TENSOR_F32, 1, d, NULL);
}
static int w_null_fill(struct gguf_writer *w)
{
	uint64_t d[] = {4};

	return gguf_writer_add_tensor_fill(w, "t", GGUF_TENSOR_F32, 1, d, NULL, NULL);
}
static int w_key_utf8(struct gguf_writer *w)
{
	return gguf_writer_add_u8(w, "bad\xc0\xaf", 1);
}
static int w_empty_key(struct gguf_writer *w)
{
	return gguf_writer_add_u8(w, "", 1);
}
static int w_empty_name(struct gguf_writer *w)
{
	uint64_t d[] = {4};

	return gguf_writer_add_tensor(w, "", GGUF_TENSOR_F32, 1, d, wdata);
}
static int w_arr_of_arr(struct gguf_writer *w)
{
	return gguf_writer_add_arr(w, "a", GGUF_TYPE_ARRAY, wdata, 1);
}
static int w_arr_of_str(struct gguf_writer *w)
{
	return gguf_writer_add_arr(w, "a", GGUF_TYPE_STRING, wdata, 1);
}
static int w_sticky(struct gguf_writer *w)
{
	gguf_writer_add_u8(w, "", 1);
	return gguf_writer_add_u8(w, "fine", 1); /* refused: the writer failed before */
}

static void test_writer_refusals(void **state)
{
	static const struct {
		const char *name;
		int (*build)(struct gguf_writer *w);
		int want_add; /* what the last add returns */
		const char *words[2];
	} rows[] = {
	    {"duplicate key", w_dup_key, 0, {"duplicate key 'k'"}},
	    {"duplicate tensor", w_dup_tensor, 0, {"duplicate tensor name 't'"}},
	    {"alignment 48", w_align_48, IG_E_INVAL, {"general.alignment 48", "power of two"}},
	    {"alignment 0", w_align_0, IG_E_INVAL, {"general.alignment 0", "power of two"}},
	    {"alignment UINT64", w_align_u64, IG_E_INVAL, {"must be UINT32, not UINT64"}},
	    {"alignment STRING", w_align_str, IG_E_INVAL, {"must be UINT32, not STRING"}},
	    {"type Q4_1",
	     w_q4_1,
	     IG_E_INVAL,
	     {"'q' has type Q4_1 (3)", "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K"}},
	    {"a row that is not whole blocks",
	     w_part_block,
	     IG_E_INVAL,
	     {"Q6_K with rows of 128 elements", "whole blocks of 256"}},
	    {"n_dims 0", w_ndims0, IG_E_INVAL, {"n_dims 0", "1 to 4"}},
	    {"n_dims 5", w_ndims5, IG_E_INVAL, {"n_dims 5", "1 to 4"}},
	    {"a zero dim", w_zero_dim, IG_E_INVAL, {"dim 1 equal to 0"}},
	    {"overflow", w_overflow, IG_E_INVAL, {"overflows"}},
	    {"NULL data", w_null_data, IG_E_INVAL, {"NULL data"}},
	    {"NULL fill callback", w_null_fill, IG_E_INVAL, {"'t': NULL fill callback"}},
	    {"key not UTF-8", w_key_utf8, IG_E_INVAL, {"not valid UTF-8"}},
	    {"empty key", w_empty_key, IG_E_INVAL, {"empty key"}},
	    {"empty tensor name", w_empty_name, IG_E_INVAL, {"empty tensor name"}},
	    {"array of arrays", w_arr_of_arr, IG_E_INVAL, {"arrays of arrays are not accepted"}},
	    {"array of STRING as scalars", w_arr_of_str, IG_E_INVAL, {"gguf_writer_add_arr_str"}},
	    {"sticky after a failure", w_sticky, IG_E_INVAL, {"empty key"}},
	};
	char path[256];
	int failures = 0;

	(void)state;
	path_in(path, sizeof(path), "refused.gguf");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct gguf_writer w;
		struct ig_errbuf eb = {0};
		int rc_add, rc;

		gguf_writer_init(&w);
		rc_add = rows[i].build(&w);
		rc = gguf_writer_write(&w, path, &eb);
		if (rc_add != rows[i].want_add || rc != IG_E_INVAL || access(path, F_OK) == 0 ||
		    dir_entries() != 0) {
			print_error("%s: add %s write %s: %s\n", rows[i].name, ig_err_name(rc_add),
			            ig_err_name(rc), eb.msg);
			failures++;
		}
		if (strncmp(eb.msg, "'", 1) != 0 || !strstr(eb.msg, path)) {
			print_error("%s: the message does not name the file: %s\n", rows[i].name,
			            eb.msg);
			failures++;
		}
		for (size_t k = 0; k < 2 && rows[i].words[k]; k++)
			if (!strstr(eb.msg, rows[i].words[k])) {
				print_error("%s: '%s' missing from: %s\n", rows[i].name,
				            rows[i].words[k], eb.msg);
				failures++;
			}
		assert_int_equal(gguf_writer_write(&w, path, NULL), rc); /* still refused */
		gguf_writer_release(&w);
	}
	assert_int_equal(failures, 0);
}

/* Block types: a tensor's bytes are its rows' whole blocks (model/quant.h),
 * written and read back byte for byte. */
static void test_block_types(void **state)
{
	static const struct {
		const char *name;
		uint32_t type, n_dims;
		uint64_t dims[3], bytes;
	} ts[] = {
	    {"q8", GGUF_TENSOR_Q8_0, 2, {64, 2, 1}, 4 * 34},
	    {"q4", GGUF_TENSOR_Q4_0, 2, {32, 4, 1}, 4 * 18},
	    {"q4k", GGUF_TENSOR_Q4_K, 2, {256, 3, 1}, 3 * 144},
	    {"q5k", GGUF_TENSOR_Q5_K, 1, {512, 1, 1}, 2 * 176},
	    {"q6k", GGUF_TENSOR_Q6_K, 3, {256, 1, 2}, 2 * 210},
	};
	static uint8_t data[5][432];
	struct gguf_writer w;
	struct ig_errbuf eb = {0};
	struct gguf g;
	char path[256];

	(void)state;
	gguf_writer_init(&w);
	for (size_t i = 0; i < 5; i++) {
		for (size_t k = 0; k < sizeof(data[i]); k++)
			data[i][k] = (uint8_t)(k * 7 + i * 31);
		assert_int_equal(gguf_writer_add_tensor(&w, ts[i].name, ts[i].type, ts[i].n_dims,
		                                        ts[i].dims, data[i]),
		                 0);
	}
	path_in(path, sizeof(path), "blocks.gguf");
	assert_int_equal(gguf_writer_write(&w, path, &eb), 0);
	gguf_writer_release(&w);
	assert_int_equal(gguf_open(&g, path, &eb), 0);
	for (size_t i = 0; i < 5; i++) {
		const struct gguf_tensor *t = gguf_find_tensor(&g, ts[i].name);

		assert_non_null(t);
		assert_int_equal(t->type, ts[i].type);
		assert_int_equal(t->n_bytes, ts[i].bytes);
		assert_int_equal(t->n_elements, ts[i].dims[0] * ts[i].dims[1] * ts[i].dims[2]);
		assert_memory_equal(t->data, data[i], ts[i].bytes);
	}
	gguf_close(&g);
	unlink(path);
}

static void test_writer_io(void **state)
{
	struct gguf_writer w;
	struct ig_errbuf eb = {0};
	struct gguf g;
	char path[256];
	uint32_t u32;

	(void)state;
	gguf_writer_init(&w);
	assert_int_equal(gguf_writer_add_u32(&w, "v", 1), 0);
	path_in(path, sizeof(path), "no-such-dir/x.gguf");
	assert_int_equal(gguf_writer_write(&w, path, &eb), IG_E_IO);
	assert_non_null(strstr(eb.msg, "x.gguf"));
	path_in(path, sizeof(path), "");
	assert_int_equal(gguf_writer_write(&w, path, &eb), IG_E_INVAL);
	assert_int_equal(dir_entries(), 0);

	/* Replacing a file: the reader sees the old or the new one, nothing else. */
	path_in(path, sizeof(path), "replace.gguf");
	assert_int_equal(gguf_writer_write(&w, path, &eb), 0);
	gguf_writer_release(&w);
	gguf_writer_init(&w);
	assert_int_equal(gguf_writer_add_u32(&w, "v", 2), 0);
	assert_int_equal(gguf_writer_write(&w, path, &eb), 0);
	gguf_writer_release(&w);
	assert_int_equal(dir_entries(), 1);
	assert_int_equal(gguf_open(&g, path, &eb), 0);
	assert_int_equal(gguf_get_u32(&g, "v", &u32, &eb), 0);
	assert_int_equal(u32, 2);
	assert_int_equal(g.n_tensors, 0);
	gguf_close(&g);
	unlink(path);

	/* An empty writer gives a valid empty file: the 24-byte header padded to 32. */
	gguf_writer_init(&w);
	assert_int_equal(gguf_writer_write(&w, path, &eb), 0);
	gguf_writer_release(&w);
	assert_int_equal(gguf_open(&g, path, &eb), 0);
	assert_int_equal(g.size, 32);
	assert_int_equal(g.n_kv + g.n_tensors, 0);
	assert_null(gguf_find_kv(&g, "v"));
	assert_null(gguf_find_tensor(&g, "t"));
	gguf_close(&g);
	unlink(path);
}

/* ---- the streaming writer ------------------------------------------------ */

/*
 * A content of tensors of every accepted type, some larger than the chunks
 * tried and none a multiple of them, whose byte j of tensor i is sbyte(i, j);
 * written once with referenced data and once produced by fill callbacks.
 */
static const struct {
	const char *name;
	uint32_t type, n_dims;
	uint64_t dims[4];
} stens[] = {
    {"s.0", GGUF_TENSOR_F32, 2, {33, 7}},       /* 924 B */
    {"s.1", GGUF_TENSOR_BF16, 1, {1}},          /* 2 B */
    {"s.2", GGUF_TENSOR_F16, 3, {64, 9, 3}},    /* 3456 B */
    {"s.3", GGUF_TENSOR_BF16, 4, {5, 4, 3, 2}}, /* 240 B */
    {"s.4", GGUF_TENSOR_F32, 1, {1000}},        /* 4000 B */
};
#define NSTENS (sizeof(stens) / sizeof(stens[0]))

static unsigned char sbyte(size_t i, uint64_t j)
{
	return (unsigned char)(j * 131u + i * 7u + (j >> 8));
}

static uint64_t sbytes(size_t i)
{
	uint64_t n = elem_bytes(stens[i].type);

	for (uint32_t d = 0; d < stens[i].n_dims; d++)
		n *= stens[i].dims[d];
	return n;
}

/* What a fill callback was asked, checked against the contract in gguf.h. */
struct fill_log {
	size_t chunk;          /* the writer's chunk */
	uint64_t next[NSTENS]; /* the offset each tensor expects next */
	size_t max_n;
	unsigned calls, fail_at; /* fail the fail_at-th call (1-based; 0: never) */
	int bad;
};

static int fill_stens(void *ctx, const struct gguf_tensor *t, uint64_t off, void *buf, size_t n,
                      struct ig_errbuf *eb)
{
	struct fill_log *l = ctx;
	size_t i = (size_t)(t->name[2] - '0');
	unsigned char *p = buf;

	l->calls++;
	if (i >= NSTENS || t->data || off != l->next[i] || off % l->chunk || n == 0 ||
	    n > l->chunk || n % elem_bytes(t->type) || off + n > t->n_bytes ||
	    t->n_bytes != sbytes(i) || t->type != stens[i].type)
		l->bad++;
	if (l->fail_at && l->calls == l->fail_at)
		return ig_errf(eb, IG_E_IO, "tensor '%s': the source failed at byte %" PRIu64,
		               t->name, off);
	for (size_t j = 0; j < n; j++)
		p[j] = sbyte(i, off + j);
	l->next[i] += n;
	l->max_n = n > l->max_n ? n : l->max_n;
	return 0;
}

/* The content into `w` (initialised here): referenced from `datas` when
 * `log` is NULL, produced by fill_stens otherwise. */
static void stream_build(struct gguf_writer *w, uint32_t alignment, unsigned char **datas,
                         struct fill_log *log)
{
	gguf_writer_init(w);
	assert_int_equal(gguf_writer_add_str(w, "general.architecture", "ignis-test"), 0);
	if (alignment)
		assert_int_equal(gguf_writer_add_u32(w, GGUF_KEY_ALIGNMENT, alignment), 0);
	assert_int_equal(gguf_writer_add_arr_str(w, "t.toks", base_toks, 2), 0);
	for (size_t i = 0; i < NSTENS; i++)
		if (log)
			assert_int_equal(gguf_writer_add_tensor_fill(
			                     w, stens[i].name, stens[i].type, stens[i].n_dims,
			                     stens[i].dims, fill_stens, log),
			                 0);
		else
			assert_int_equal(gguf_writer_add_tensor(w, stens[i].name, stens[i].type,
			                                        stens[i].n_dims, stens[i].dims,
			                                        datas[i]),
			                 0);
}

static unsigned char **stream_datas(void)
{
	unsigned char **d = calloc(NSTENS, sizeof(*d));

	assert_non_null(d);
	for (size_t i = 0; i < NSTENS; i++) {
		d[i] = malloc(sbytes(i));
		assert_non_null(d[i]);
		for (uint64_t j = 0; j < sbytes(i); j++)
			d[i][j] = sbyte(i, j);
	}
	return d;
}

static void stream_datas_free(unsigned char **d)
{
	for (size_t i = 0; i < NSTENS; i++)
		free(d[i]);
	free(d);
}

/*
 * Produced tensors give the bytes referenced ones give, at every alignment
 * and chunk tried; gguf_writer_file_size is the size written; the callback
 * is asked for each byte once, in order, at most a chunk at a time.
 */
static void test_writer_fill_matches_referenced(void **state)
{
	static const uint32_t aligns[] = {0, 1, 64, 4096};
	static const size_t chunks[] = {64, 128, 192, 4096, 0};
	unsigned char **datas = stream_datas();
	char ref[256], got[256];

	(void)state;
	path_in(ref, sizeof(ref), "ref.gguf");
	path_in(got, sizeof(got), "fill.gguf");
	for (size_t a = 0; a < sizeof(aligns) / sizeof(aligns[0]); a++) {
		struct gguf_writer w;
		struct ig_errbuf eb = {0};
		uint64_t size;
		unsigned char *rb;
		size_t rn;
		struct gguf g;

		stream_build(&w, aligns[a], datas, NULL);
		assert_int_equal(gguf_writer_file_size(&w, &size, &eb), 0);
		if (gguf_writer_write(&w, ref, &eb))
			fail_msg("%s", eb.msg);
		gguf_writer_release(&w);
		rb = read_bytes(ref, &rn);
		assert_int_equal(rn, size);
		assert_int_equal(gguf_open(&g, ref, &eb), 0);
		gguf_close(&g);
		for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
			struct fill_log log = {.chunk = chunks[c] ? chunks[c] : GGUF_WRITE_CHUNK};
			unsigned char *fb;
			size_t fn;

			stream_build(&w, aligns[a], NULL, &log);
			w.chunk_bytes = chunks[c];
			assert_int_equal(gguf_writer_file_size(&w, &size, &eb), 0);
			assert_int_equal(log.calls, 0); /* sizing calls nothing */
			if (gguf_writer_write(&w, got, &eb))
				fail_msg("align %u chunk %zu: %s", aligns[a], chunks[c], eb.msg);
			gguf_writer_release(&w);
			fb = read_bytes(got, &fn);
			if (fn != rn || memcmp(fb, rb, rn))
				fail_msg(
				    "align %u chunk %zu: %zu bytes differ from the %zu referenced",
				    aligns[a], chunks[c], fn, rn);
			assert_int_equal(fn, size);
			assert_int_equal(log.bad, 0);
			assert_true(log.max_n <= log.chunk);
			for (size_t i = 0; i < NSTENS; i++)
				assert_int_equal(log.next[i], sbytes(i));
			free(fb);
		}
		free(rb);
	}
	unlink(ref);
	unlink(got);
	assert_int_equal(dir_entries(), 0);
	stream_datas_free(datas);
}

/* ~200 MB produced: the callback never gets more than the chunk and the
 * process's peak RSS grows by a small multiple of the chunk, not the file.
 * In a child, whose peak starts at its RSS at the fork. */
#define BIG_TENSOR_ELEMS (25ull << 20) /* x 2 B x 4 tensors = 200 MiB */

/* Bytes of the offset and the third byte of the name ("x.N"). */
static int fill_cheap(void *ctx, const struct gguf_tensor *t, uint64_t off, void *buf, size_t n,
                      struct ig_errbuf *eb)
{
	size_t *max_n = ctx;

	(void)eb;
	memset(buf, (int)((off >> 12) + t->name[2]), n);
	*max_n = n > *max_n ? n : *max_n;
	return 0;
}

static void test_writer_bounded_memory(void **state)
{
	char path[256];
	pid_t pid;
	int status;

	(void)state;
	path_in(path, sizeof(path), "big.gguf");
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		static const char *const names[] = {"b.0", "b.1", "b.2", "b.3"};
		const uint64_t dims[2] = {1024, BIG_TENSOR_ELEMS / 1024};
		struct gguf_writer w;
		struct ig_errbuf eb = {0};
		struct rusage before, after;
		struct stat st;
		size_t max_n = 0;
		long grown_kb;

		getrusage(RUSAGE_SELF, &before);
		gguf_writer_init(&w);
		for (int i = 0; i < 4; i++)
			gguf_writer_add_tensor_fill(&w, names[i], GGUF_TENSOR_BF16, 2, dims,
			                            fill_cheap, &max_n);
		if (gguf_writer_write(&w, path, &eb)) {
			fprintf(stderr, "big write: %s\n", eb.msg);
			_exit(1);
		}
		gguf_writer_release(&w);
		getrusage(RUSAGE_SELF, &after);
		grown_kb = after.ru_maxrss - before.ru_maxrss;
		if (stat(path, &st) || (uint64_t)st.st_size < 4 * 2 * BIG_TENSOR_ELEMS) {
			fprintf(stderr, "big write: the file is short\n");
			_exit(2);
		}
		printf("200 MiB written: peak RSS grew %ld KiB, largest fill %zu B\n", grown_kb,
		       max_n);
		fflush(stdout);
		/* the 4 MiB buffer and the pages of the code that ran: far below
		 * the file's 204,800 KiB */
		_exit(max_n <= GGUF_WRITE_CHUNK && grown_kb < 16 * 1024 ? 0 : 3);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	unlink(path);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* A write(2) that fails: after `budget` bytes (short writes up to it, then
 * `err`), or at the `fail_call`-th call; `eintr` calls fail with EINTR first;
 * at most `piece` bytes per call when set. */
static struct {
	uint64_t budget, written;
	unsigned calls, fail_call, eintr;
	size_t piece;
	int err;
} wf;

static ssize_t wf_write(int fd, const void *buf, size_t n)
{
	ssize_t r;

	wf.calls++;
	if (wf.eintr) {
		wf.eintr--;
		errno = EINTR;
		return -1;
	}
	if ((wf.fail_call && wf.calls == wf.fail_call) || wf.written >= wf.budget) {
		errno = wf.err;
		return -1;
	}
	if (wf.piece && n > wf.piece)
		n = wf.piece;
	if (n > wf.budget - wf.written)
		n = (size_t)(wf.budget - wf.written);
	r = write(fd, buf, n);
	if (r > 0)
		wf.written += (uint64_t)r;
	return r;
}

/* One write through wf; 0 or the code, with the checks every failure gets:
 * the message names the path, the errno's text, the bytes written and the
 * bytes needed, and nothing is left in the directory. */
static int wf_run(bool fill, size_t chunk, uint64_t *total, struct ig_errbuf *eb)
{
	unsigned char **datas = fill ? NULL : stream_datas();
	struct fill_log log = {.chunk = chunk ? chunk : GGUF_WRITE_CHUNK};
	struct gguf_writer w;
	char path[256], words[160];
	int rc;

	path_in(path, sizeof(path), "full.gguf");
	stream_build(&w, 0, datas, fill ? &log : NULL);
	w.chunk_bytes = chunk;
	w.write_fn = wf_write;
	assert_int_equal(gguf_writer_file_size(&w, total, eb), 0);
	wf.written = 0;
	wf.calls = 0;
	rc = gguf_writer_write(&w, path, eb);
	gguf_writer_release(&w);
	if (datas)
		stream_datas_free(datas);
	if (rc == 0)
		return 0;
	assert_int_equal(rc, IG_E_IO);
	snprintf(words, sizeof(words),
	         "cannot write '%s': %s after %" PRIu64 " of its %" PRIu64 " bytes", path,
	         strerror(wf.err), wf.written, *total);
	if (!strstr(eb->msg, words))
		fail_msg("'%s' missing from: %s", words, eb->msg);
	assert_int_equal(dir_entries(), 0);
	return rc;
}

static void test_writer_full_disk(void **state)
{
	uint64_t total, header;
	struct ig_errbuf eb = {0};
	unsigned char *ref;
	size_t rn;
	char path[256];

	(void)state;
	path_in(path, sizeof(path), "full.gguf");
	/* the Nth write(2) fails, for every N, referenced and produced, at a
	 * 64-byte chunk (one call per 64 bytes) */
	for (int fill = 0; fill < 2; fill++) {
		unsigned n_calls;

		memset(&wf, 0, sizeof(wf));
		wf.budget = UINT64_MAX;
		assert_int_equal(wf_run(fill, 64, &total, &eb), 0);
		unlink(path);
		n_calls = wf.calls;
		assert_true(n_calls >= total / 64);
		for (unsigned n = 1; n <= n_calls; n++) {
			memset(&wf, 0, sizeof(wf));
			wf.budget = UINT64_MAX;
			wf.fail_call = n;
			wf.err = ENOSPC;
			assert_int_equal(wf_run(fill, 64, &total, &eb), IG_E_IO);
		}
	}
	/* the disk fills after N bytes (a short write, then ENOSPC): across the
	 * header, the padding, inside and between tensors; and another errno */
	header = 24;
	{
		const uint64_t budgets[] = {0,   1,    header - 1, header, 100,  511, 512,
		                            513, 1000, 4000,       4095,   8000, 0 /* total - 1 */};

		for (int fill = 0; fill < 2; fill++)
			for (size_t i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
				memset(&wf, 0, sizeof(wf));
				wf.budget = budgets[i];
				if (i + 1 == sizeof(budgets) / sizeof(budgets[0]))
					wf.budget = total - 1;
				wf.err = i % 2 ? ENOSPC : EIO;
				assert_int_equal(wf_run(fill, 0, &total, &eb), IG_E_IO);
			}
	}
	/* EINTR and short writes are not failures: the same bytes */
	memset(&wf, 0, sizeof(wf));
	wf.budget = UINT64_MAX;
	assert_int_equal(wf_run(false, 0, &total, &eb), 0);
	ref = read_bytes(path, &rn);
	/* a failed write over a file leaves that file as it was */
	memset(&wf, 0, sizeof(wf));
	wf.budget = 1000;
	wf.err = ENOSPC;
	{
		struct fill_log log = {.chunk = GGUF_WRITE_CHUNK};
		struct gguf_writer w;
		unsigned char *kept;
		size_t kn;

		stream_build(&w, 64, NULL, &log); /* other bytes than the file's */
		w.write_fn = wf_write;
		assert_int_equal(gguf_writer_write(&w, path, &eb), IG_E_IO);
		gguf_writer_release(&w);
		kept = read_bytes(path, &kn);
		assert_int_equal(kn, rn);
		assert_memory_equal(kept, ref, rn);
		free(kept);
	}
	assert_int_equal(dir_entries(), 1);
	unlink(path);
	for (int fill = 0; fill < 2; fill++) {
		unsigned char *got;
		size_t gn;

		memset(&wf, 0, sizeof(wf));
		wf.budget = UINT64_MAX;
		wf.eintr = 3;
		wf.piece = 7;
		assert_int_equal(wf_run(fill, 192, &total, &eb), 0);
		got = read_bytes(path, &gn);
		assert_int_equal(gn, rn);
		assert_memory_equal(got, ref, rn);
		free(got);
		unlink(path);
	}
	free(ref);
	assert_int_equal(dir_entries(), 0);
}

/*
 * A real full disk: a 64 KiB tmpfs. Mounted by a child in a mount namespace
 * of its own, so that the mount goes with the child however it ends (a
 * crash included) and nobody else sees it. Needs root (CAP_SYS_ADMIN):
 * skipped elsewhere, where test_writer_full_disk's injection stands alone.
 * The child's exit: 0 passed, 77 no mount possible, 1 failed (said on stderr).
 */
static int real_full_disk_child(const char *mnt)
{
	static const uint64_t dims[1] = {128u << 10}; /* 256 KiB of bf16 */
	struct gguf_writer w;
	struct ig_errbuf eb = {0};
	char path[300], words[64];
	size_t max_n = 0;
	uint64_t total;
	DIR *d;
	struct dirent *e;
	int left = 0, rc;

	if (syscall(SYS_unshare, CLONE_NEWNS) != 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
	    mount("tmpfs", mnt, "tmpfs", 0, "size=64k") != 0)
		return 77;
	snprintf(path, sizeof(path), "%s/m.gguf", mnt);
	gguf_writer_init(&w);
	gguf_writer_add_tensor_fill(&w, "t.0", GGUF_TENSOR_BF16, 1, dims, fill_cheap, &max_n);
	if (gguf_writer_file_size(&w, &total, &eb))
		return 1;
	snprintf(words, sizeof(words), "of its %" PRIu64 " bytes", total);
	rc = gguf_writer_write(&w, path, &eb);
	gguf_writer_release(&w);
	d = opendir(mnt);
	while (d && (e = readdir(d)))
		left += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	if (d)
		closedir(d);
	if (rc != IG_E_IO || !strstr(eb.msg, path) || !strstr(eb.msg, strerror(ENOSPC)) ||
	    !strstr(eb.msg, words) || left) {
		fprintf(stderr, "a full tmpfs: rc %d, %d entries left: %s\n", rc, left, eb.msg);
		return 1;
	}
	printf("a full tmpfs: %s\n", eb.msg);
	fflush(stdout);
	return 0;
}

static void test_writer_real_full_disk(void **state)
{
	char mnt[256];
	pid_t pid;
	int status;

	(void)state;
	path_in(mnt, sizeof(mnt), "tmpfs");
	assert_int_equal(mkdir(mnt, 0700), 0);
	fflush(stdout);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(real_full_disk_child(mnt));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	fflush(stdout);
	assert_int_equal(rmdir(mnt), 0); /* nothing was left in it, nor mounted on it */
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77) {
		print_message("no tmpfs could be mounted (not root?): a real full disk is not "
		              "tried; test_writer_full_disk injects it\n");
		skip();
	}
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* A fill callback's error fails the write with its message, path first. */
static void test_writer_fill_error(void **state)
{
	struct gguf_writer w;
	struct ig_errbuf eb = {0};
	char path[256];

	(void)state;
	path_in(path, sizeof(path), "failed.gguf");
	for (unsigned at = 1; at <= 4; at++) {
		struct fill_log log = {.chunk = 192, .fail_at = at};

		stream_build(&w, 0, NULL, &log);
		w.chunk_bytes = 192;
		assert_int_equal(gguf_writer_write(&w, path, &eb), IG_E_IO);
		gguf_writer_release(&w);
		assert_int_equal(strncmp(eb.msg, "'", 1), 0);
		assert_non_null(strstr(eb.msg, path));
		assert_non_null(strstr(eb.msg, "the source failed at byte"));
		assert_int_equal(log.calls, at);
		assert_int_equal(dir_entries(), 0);
	}
	/* a chunk that is not a multiple of 64 is refused before anything */
	stream_build(&w, 0, NULL, &(struct fill_log){.chunk = 100});
	w.chunk_bytes = 100;
	assert_int_equal(gguf_writer_write(&w, path, &eb), IG_E_INVAL);
	assert_non_null(strstr(eb.msg, "chunk_bytes 100"));
	assert_int_equal(dir_entries(), 0);
	gguf_writer_release(&w);
}

/* ---- conversions --------------------------------------------------------- */

static uint32_t bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static float flt(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static void test_bf16(void **state)
{
	static const struct {
		uint16_t h;
		uint32_t f;
	} to_f32[] = {
	    {0x3f80, 0x3f800000},                       /* 1 */
	    {0xc000, 0xc0000000},                       /* -2 */
	    {0x0000, 0x00000000}, {0x8000, 0x80000000}, /* -0 */
	    {0x0001, 0x00010000},                       /* smallest denormal, 2^-133 */
	    {0x007f, 0x007f0000},                       /* largest denormal */
	    {0x0080, 0x00800000},                       /* smallest normal, 2^-126 */
	    {0x7f7f, 0x7f7f0000},                       /* largest finite */
	    {0x7f80, 0x7f800000}, {0xff80, 0xff800000}, /* Inf */
	    {0x7fc0, 0x7fc00000}, {0x7f81, 0x7f810000}, /* NaNs, payload kept */
	};
	static const struct {
		uint32_t f;
		uint16_t h;
	} from_f32[] = {
	    {0x3f800000, 0x3f80},                       /* 1 */
	    {0x3f808000, 0x3f80},                       /* tie, even below */
	    {0x3f818000, 0x3f82},                       /* tie, even above */
	    {0x3f808001, 0x3f81},                       /* just above a tie */
	    {0x3f807fff, 0x3f80},                       /* just below a tie */
	    {0xbf818000, 0xbf82},                       /* negative tie */
	    {0x7f7fffff, 0x7f80},                       /* FLT_MAX rounds to Inf */
	    {0x7f7f7fff, 0x7f7f},                       /* largest that stays finite */
	    {0x7f800000, 0x7f80}, {0xff800000, 0xff80}, /* Inf */
	    {0x7fc00000, 0x7fc0},                       /* quiet NaN */
	    {0x7f800001, 0x7fc0},                       /* signalling NaN: stays NaN, made quiet */
	    {0xffa00000, 0xffe0},                       /* negative NaN with payload */
	    {0x80000000, 0x8000},                       /* -0 */
	    {0x00010000, 0x0001},                       /* denormal */
	    {0x00008000, 0x0000},                       /* denormal tie to even 0 */
	    {0x00018000, 0x0002},                       /* denormal tie to even 2 */
	    {0x00000001, 0x0000},                       /* tiny denormal to 0 */
	    {0x007fffff, 0x0080},                       /* largest denormal rounds up to normal */
	};

	(void)state;
	for (size_t i = 0; i < sizeof(to_f32) / sizeof(to_f32[0]); i++)
		assert_int_equal(bits(gguf_bf16_to_f32(to_f32[i].h)), to_f32[i].f);
	for (size_t i = 0; i < sizeof(from_f32) / sizeof(from_f32[0]); i++)
		if (gguf_f32_to_bf16(flt(from_f32[i].f)) != from_f32[i].h)
			fail_msg("f32 %08x -> bf16 %04x, want %04x", from_f32[i].f,
			         gguf_f32_to_bf16(flt(from_f32[i].f)), from_f32[i].h);
	/* every non-NaN bf16 survives the trip through f32; every NaN stays NaN */
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = gguf_bf16_to_f32((uint16_t)h);
		uint16_t back = gguf_f32_to_bf16(f);

		if (isnan(f))
			assert_true(isnan(gguf_bf16_to_f32(back)));
		else
			assert_int_equal(back, h);
	}
}

static void test_f16(void **state)
{
	static const struct {
		uint16_t h;
		uint32_t f;
	} to_f32[] = {
	    {0x3c00, 0x3f800000},                       /* 1 */
	    {0xc000, 0xc0000000},                       /* -2 */
	    {0x3555, 0x3eaaa000},                       /* 0.333251953125 */
	    {0x7bff, 0x477fe000},                       /* 65504, largest finite */
	    {0x0400, 0x38800000},                       /* 2^-14, smallest normal */
	    {0x03ff, 0x387fc000},                       /* largest denormal, 1023 x 2^-24 */
	    {0x0001, 0x33800000},                       /* smallest denormal, 2^-24 */
	    {0x8001, 0xb3800000},                       /* its negative */
	    {0x0200, 0x38000000},                       /* 2^-15 */
	    {0x0000, 0x00000000}, {0x8000, 0x80000000}, /* zeros */
	    {0x7c00, 0x7f800000}, {0xfc00, 0xff800000}, /* Inf */
	    {0x7e00, 0x7fc00000},                       /* quiet NaN */
	    {0x7c01, 0x7f802000},                       /* signalling NaN, payload kept */
	};
	static const struct {
		uint32_t f;
		uint16_t h;
	} from_f32[] = {
	    {0x3f800000, 0x3c00}, /* 1 */
	    {0x3f801000, 0x3c00}, /* 1 + 2^-11: tie, even below */
	    {0x3f803000, 0x3c02}, /* 1 + 3 x 2^-11: tie, even above */
	    {0x3f801001, 0x3c01}, /* just above a tie */
	    {0x477fe000, 0x7bff}, /* 65504 */
	    {0x477fefff, 0x7bff}, /* just below 65520 */
	    {0x477ff000, 0x7c00}, /* 65520: the tie rounds to Inf */
	    {0x501502f9, 0x7c00}, /* 1e10 */
	    {0xd01502f9, 0xfc00}, /* -1e10 */
	    {0x38800000, 0x0400}, /* 2^-14 */
	    {0x387fe000, 0x0400}, /* 1023.5 denormal units: tie, even above = smallest normal */
	    {0x387fc000, 0x03ff}, /* largest denormal */
	    {0x33800000, 0x0001}, /* 2^-24 */
	    {0x33000000, 0x0000}, /* 2^-25: tie, even 0 */
	    {0x33000001, 0x0001}, /* just above 2^-25 */
	    {0x33c00000, 0x0002}, /* 1.5 units: tie, even 2 */
	    {0x32ffffff, 0x0000}, /* below 2^-25 */
	    {0x00000001, 0x0000}, /* f32 denormal */
	    {0x80000000, 0x8000}, /* -0 */
	    {0xb3800000, 0x8001}, /* -2^-24 */
	    {0x7f800000, 0x7c00}, {0xff800000, 0xfc00}, /* Inf */
	    {0x7fc00000, 0x7e00},                       /* quiet NaN */
	    {0x7f800001, 0x7e00}, /* signalling NaN, low payload lost: quiet */
	    {0xffc02000, 0xfe01}, /* negative NaN, payload kept */
	};

	(void)state;
	for (size_t i = 0; i < sizeof(to_f32) / sizeof(to_f32[0]); i++)
		if (bits(gguf_f16_to_f32(to_f32[i].h)) != to_f32[i].f)
			fail_msg("f16 %04x -> f32 %08x, want %08x", to_f32[i].h,
			         bits(gguf_f16_to_f32(to_f32[i].h)), to_f32[i].f);
	for (size_t i = 0; i < sizeof(from_f32) / sizeof(from_f32[0]); i++)
		if (gguf_f32_to_f16(flt(from_f32[i].f)) != from_f32[i].h)
			fail_msg("f32 %08x -> f16 %04x, want %04x", from_f32[i].f,
			         gguf_f32_to_f16(flt(from_f32[i].f)), from_f32[i].h);
	assert_true(gguf_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
	assert_true(gguf_f16_to_f32(0x7bff) == 65504.0f);
	for (uint32_t h = 0; h < 0x10000; h++) {
		float f = gguf_f16_to_f32((uint16_t)h);
		uint16_t back = gguf_f32_to_f16(f);

		if (isnan(f)) {
			assert_true(isnan(gguf_f16_to_f32(back)));
			continue;
		}
		assert_int_equal(back, h);
		/* the midpoint to the next f16 up rounds to the even one of the two */
		if ((h & 0x7fff) < 0x7bff) {
			float mid = (f + gguf_f16_to_f32((uint16_t)(h + 1))) / 2; /* exact in f32 */
			uint16_t r = gguf_f32_to_f16(mid);

			assert_int_equal(r, (h & 1) ? h + 1 : h);
		}
	}
}

static void test_names(void **state)
{
	(void)state;
	assert_string_equal(gguf_type_name(GGUF_TYPE_FLOAT64), "FLOAT64");
	assert_string_equal(gguf_type_name(13), "unknown");
	assert_int_equal(gguf_type_size(GGUF_TYPE_UINT64), 8);
	assert_int_equal(gguf_type_size(GGUF_TYPE_STRING), 0);
	assert_int_equal(gguf_type_size(99), 0);
	assert_string_equal(gguf_tensor_type_name(30), "BF16");
	assert_string_equal(gguf_tensor_type_name(8), "Q8_0");
	assert_string_equal(gguf_tensor_type_name(4), "unknown");
	assert_string_equal(gguf_tensor_type_name(1000), "unknown");
	assert_int_equal(elem_bytes(GGUF_TENSOR_BF16), 2);
	assert_int_equal(elem_bytes(GGUF_TENSOR_F32), 4);
	assert_int_equal(elem_bytes(8), 0); /* Q8_0: one element is no whole block */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_writer_matches_emitter),
	    cmocka_unit_test(test_malformed),
	    cmocka_unit_test(test_truncated_everywhere),
	    cmocka_unit_test(test_random_corruptions),
	    cmocka_unit_test(test_counts_bounded),
	    cmocka_unit_test(test_open_failures),
	    cmocka_unit_test(test_roundtrip),
	    cmocka_unit_test(test_getters),
	    cmocka_unit_test(test_writer_refusals),
	    cmocka_unit_test(test_block_types),
	    cmocka_unit_test(test_writer_io),
	    cmocka_unit_test(test_writer_fill_matches_referenced),
	    cmocka_unit_test(test_writer_bounded_memory),
	    cmocka_unit_test(test_writer_full_disk),
	    cmocka_unit_test(test_writer_real_full_disk),
	    cmocka_unit_test(test_writer_fill_error),
	    cmocka_unit_test(test_bf16),
	    cmocka_unit_test(test_f16),
	    cmocka_unit_test(test_names),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
