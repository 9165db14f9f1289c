/*
 * test_mfile.c - model files: synthetic models written and read back with
 * the built-in descriptions' shapes and figures, byte-for-byte determinism,
 * and a table of foreign, truncated and inconsistent files, each refused with
 * a message that names what was wrong.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "mfile.h"

static char dir[64];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/ignis-mfile-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void path_of(char *out, size_t cap, const char *name)
{
	snprintf(out, cap, "%s/%s", dir, name);
}

static void write_model(const char *preset, uint64_t seed, enum mfile_dtype dt, const char *name)
{
	struct ig_errbuf eb;
	char path[128];

	path_of(path, sizeof(path), name);
	if (mfile_write_synthetic(mdesc_find(preset), seed, dt, path, &eb))
		fail_msg("write %s: %s", preset, eb.msg);
}

static void test_roundtrip_matches_the_builtin(void **state)
{
	static const char *const presets[] = {"tiny-dense", "tiny-moe"};

	(void)state;
	for (int i = 0; i < 2; i++) {
		const struct mdesc *b = mdesc_find(presets[i]);
		struct ig_errbuf eb;
		struct mfile f;
		char path[128];

		write_model(presets[i], 1, MFILE_BF16, "m.gguf");
		path_of(path, sizeof(path), "m.gguf");
		if (mfile_open(&f, path, &eb))
			fail_msg("%s: %s", presets[i], eb.msg);
		assert_string_equal(f.desc.name, b->name);
		assert_int_equal(f.desc.family, b->family);
		assert_int_equal(f.desc.layers, b->layers);
		assert_int_equal(f.desc.full_layers, b->full_layers);
		assert_int_equal(f.desc.hidden, b->hidden);
		assert_int_equal(f.desc.q_heads, b->q_heads);
		assert_int_equal(f.desc.kv_heads, b->kv_heads);
		assert_int_equal(f.desc.head_dim, b->head_dim);
		assert_int_equal(f.desc.vocab, b->vocab);
		assert_int_equal(f.desc.default_context, b->default_context);
		assert_int_equal(f.desc.default_lanes, b->default_lanes);
		/* the figures the plan uses, from the tensors themselves */
		assert_int_equal(mdesc_weight_bytes(&f.desc), mdesc_weight_bytes(b));
		assert_int_equal(mdesc_expert_bytes(&f.desc), mdesc_expert_bytes(b));
		assert_int_equal(f.desc.state_image_bytes, b->state_image_bytes);
		assert_int_equal(mdesc_kv_bytes_per_token(&f.desc, MDESC_KV_COMPACT),
		                 mdesc_kv_bytes_per_token(b, MDESC_KV_COMPACT));
		if (b->family == MDESC_MOE) {
			assert_int_equal(f.desc.heaviest_layer_expert_bytes,
			                 b->heaviest_layer_expert_bytes);
			assert_int_equal(f.desc.expert_table_bytes, b->expert_table_bytes);
			assert_memory_equal(f.desc.class_record_bytes, b->class_record_bytes,
			                    sizeof(b->class_record_bytes));
			assert_int_equal(f.desc.cache_floor_bytes, b->cache_floor_bytes);
		}
		mfile_close(&f);
	}
}

static char *slurp(const char *name, size_t *n)
{
	char path[128];
	FILE *f;
	char *buf;

	path_of(path, sizeof(path), name);
	f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc(*n);
	assert_int_equal(fread(buf, 1, *n, f), *n);
	fclose(f);
	return buf;
}

static void test_same_seed_same_bytes(void **state)
{
	size_t na, nb, nc;
	char *a, *b, *c;

	(void)state;
	write_model("tiny-dense", 42, MFILE_BF16, "a.gguf");
	write_model("tiny-dense", 42, MFILE_BF16, "b.gguf");
	write_model("tiny-dense", 43, MFILE_BF16, "c.gguf");
	a = slurp("a.gguf", &na);
	b = slurp("b.gguf", &nb);
	c = slurp("c.gguf", &nc);
	assert_int_equal(na, nb);
	assert_memory_equal(a, b, na);
	assert_int_equal(na, nc);
	assert_memory_not_equal(a, c, na);
	free(a);
	free(b);
	free(c);
}

static void test_dtypes(void **state)
{
	struct ig_errbuf eb;
	struct mfile f;
	char path[128];

	(void)state;
	write_model("tiny-dense", 1, MFILE_F32, "f32.gguf");
	path_of(path, sizeof(path), "f32.gguf");
	if (mfile_open(&f, path, &eb))
		fail_msg("f32: %s", eb.msg);
	/* f32 weights: twice the bf16 bytes */
	assert_int_equal(mdesc_weight_bytes(&f.desc),
	                 2 * mdesc_weight_bytes(mdesc_find("tiny-dense")));
	mfile_close(&f);
}

/* ---- malformed files: a valid one rewritten with one change ---------------- */

enum mut {
	M_DROP_KEY,
	M_KEY_AS_U64,
	M_ARCH,
	M_FAMILY,
	M_DROP_TENSOR,
	M_DIMS,
	M_EXTRA_TENSOR,
	M_ZERO_SHAPE,
	M_HEADS
};

static void rewrite(const char *src, const char *dst, enum mut mut, const char *what)
{
	struct gguf_writer w;
	struct ig_errbuf eb;
	struct gguf g;
	char in[128], out[128];
	static const uint16_t extra[4] = {0};

	path_of(in, sizeof(in), src);
	path_of(out, sizeof(out), dst);
	if (gguf_open(&g, in, &eb))
		fail_msg("%s", eb.msg);
	gguf_writer_init(&w);
	for (size_t i = 0; i < g.n_kv; i++) {
		const struct gguf_kv *kv = gguf_kv_at(&g, i);
		bool hit = !strcmp(kv->key, what);

		if (hit && mut == M_DROP_KEY)
			continue;
		if (hit && mut == M_KEY_AS_U64) {
			gguf_writer_add_u64(&w, kv->key, kv->v.u32);
			continue;
		}
		if (hit && (mut == M_ARCH || mut == M_FAMILY)) {
			gguf_writer_add_str(&w, kv->key, mut == M_ARCH ? "llama" : "sparse");
			continue;
		}
		if (hit && mut == M_ZERO_SHAPE) {
			gguf_writer_add_u32(&w, kv->key, 0);
			continue;
		}
		if (hit && mut == M_HEADS) {
			gguf_writer_add_u32(&w, kv->key, 3); /* 4 query heads over 3 KV heads */
			continue;
		}
		switch (kv->type) {
		case GGUF_TYPE_UINT32:
			gguf_writer_add_u32(&w, kv->key, kv->v.u32);
			break;
		case GGUF_TYPE_UINT64:
			gguf_writer_add_u64(&w, kv->key, kv->v.u64);
			break;
		case GGUF_TYPE_FLOAT32:
			gguf_writer_add_f32(&w, kv->key, kv->v.f32);
			break;
		case GGUF_TYPE_STRING:
			gguf_writer_add_strn(&w, kv->key, kv->v.str.ptr, kv->v.str.len);
			break;
		default:
			fail_msg("unexpected kv type %d", kv->type);
		}
	}
	for (size_t i = 0; i < g.n_tensors; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(&g, i);
		bool hit = !strcmp(t->name, what);
		uint64_t dims[4];

		memcpy(dims, t->dims, sizeof(dims));
		if (hit && mut == M_DROP_TENSOR)
			continue;
		if (hit && mut == M_DIMS)
			dims[0] /= 2; /* half the data: a prefix of the original */
		gguf_writer_add_tensor(&w, t->name, t->type, t->n_dims, dims, t->data);
	}
	if (mut == M_EXTRA_TENSOR) {
		const uint64_t d[4] = {4, 1, 1, 1};

		gguf_writer_add_tensor(&w, what, GGUF_TENSOR_BF16, 1, d, extra);
	}
	if (gguf_writer_write(&w, out, &eb))
		fail_msg("rewrite: %s", eb.msg);
	gguf_writer_release(&w);
	gguf_close(&g);
}

static void test_malformed_files(void **state)
{
	static const struct {
		const char *name;
		enum mut mut;
		const char *what;
		const char *say[2];
	} rows[] = {
	    {"a metadata key missing",
	     M_DROP_KEY,
	     "ignis.embedding_length",
	     {"ignis.embedding_length", NULL}},
	    {"a key of the wrong type",
	     M_KEY_AS_U64,
	     "ignis.block_count",
	     {"ignis.block_count", "UINT64"}},
	    {"another architecture",
	     M_ARCH,
	     "general.architecture",
	     {"'llama' model", "ignis-hybrid"}},
	    {"an unknown family", M_FAMILY, "ignis.family", {"'sparse'", "dense or moe"}},
	    {"a tensor missing",
	     M_DROP_TENSOR,
	     "blk.3.attn_q.weight",
	     {"'blk.3.attn_q.weight' is missing", "expected dims"}},
	    {"a tensor of other dims",
	     M_DIMS,
	     "blk.0.ffn_up.weight",
	     {"'blk.0.ffn_up.weight' has dims", "the description says"}},
	    {"an extra tensor", M_EXTRA_TENSOR, "lora.weight", {"'lora.weight' is not part", NULL}},
	    {"a zero shape", M_ZERO_SHAPE, "ignis.vocab_size", {"a shape is 0", NULL}},
	    {"heads that do not divide",
	     M_HEADS,
	     "ignis.attention.head_count_kv",
	     {"not a multiple", NULL}},
	};
	int failures = 0;

	(void)state;
	write_model("tiny-dense", 1, MFILE_BF16, "ok.gguf");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct ig_errbuf eb = {0};
		struct mfile f;
		char path[128];
		int rc;

		rewrite("ok.gguf", "bad.gguf", rows[i].mut, rows[i].what);
		path_of(path, sizeof(path), "bad.gguf");
		rc = mfile_open(&f, path, &eb);
		if (rc == IG_E_OK) {
			mfile_close(&f);
			printf("FAIL %s: accepted\n", rows[i].name);
			failures++;
			continue;
		}
		for (int w = 0; w < 2 && rows[i].say[w]; w++)
			if (!strstr(eb.msg, rows[i].say[w])) {
				printf("FAIL %s: message lacks '%s': %s\n", rows[i].name,
				       rows[i].say[w], eb.msg);
				failures++;
			}
		if (!strstr(eb.msg, "bad.gguf")) {
			printf("FAIL %s: message does not name the file: %s\n", rows[i].name,
			       eb.msg);
			failures++;
		}
	}
	assert_int_equal(failures, 0);
}

static void test_truncated_and_foreign(void **state)
{
	struct ig_errbuf eb;
	struct mfile f;
	char path[128];
	size_t n;
	char *all;
	FILE *out;

	(void)state;
	write_model("tiny-dense", 1, MFILE_BF16, "full.gguf");
	all = slurp("full.gguf", &n);
	path_of(path, sizeof(path), "cut.gguf");
	out = fopen(path, "wb");
	fwrite(all, 1, n - 1000, out); /* the last tensor loses its tail */
	fclose(out);
	assert_int_not_equal(mfile_open(&f, path, &eb), IG_E_OK);
	assert_non_null(strstr(eb.msg, "output.weight"));
	free(all);
	path_of(path, sizeof(path), "text.gguf");
	out = fopen(path, "w");
	fputs("not a model at all\n", out);
	fclose(out);
	assert_int_not_equal(mfile_open(&f, path, &eb), IG_E_OK);
	assert_non_null(strstr(eb.msg, "text.gguf"));
	path_of(path, sizeof(path), "absent.gguf");
	assert_int_equal(mfile_open(&f, path, &eb), IG_E_IO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_roundtrip_matches_the_builtin),
	    cmocka_unit_test(test_same_seed_same_bytes),
	    cmocka_unit_test(test_dtypes),
	    cmocka_unit_test(test_malformed_files),
	    cmocka_unit_test(test_truncated_and_foreign),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
